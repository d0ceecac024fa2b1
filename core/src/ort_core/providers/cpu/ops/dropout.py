"""CPU kernel for Dropout. Inference (and ratio 0) is the identity with an all-true mask;
training_mode=True (opset 12+) drops elements at random and scales the rest by 1/(1 - ratio).
No other random ops are here.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ..registry import register


def _keep_mask(shape, ratio: float, seed) -> np.ndarray:
    """True where an element is kept: a uniform draw in [0, 1) at or above ``ratio``.

    With a ``seed`` the draws come from numpy's MT19937 RandomState seeded with it (what onnx's
    test cases use), so a seeded node draws the same mask on every run: kernels are stateless.
    Without one every run draws a fresh mask.
    """
    if seed is None:
        draws = np.random.default_rng().random(shape)
    else:  # a private generator per call: thread-safe, and reproducible for the seed
        draws = np.random.RandomState(seed % 2**32).uniform(0.0, 1.0, shape)
    return draws >= ratio


def _factory(mask_like_data: bool):
    """Opsets 1-9 type the mask like the data (ones); opset 10+ makes it bool (True)."""
    def factory(node, opset: int):
        want_mask = len(node.outputs) > 1 and bool(node.outputs[1])
        seed = node.attr("seed")
        seed = None if seed is None else int(seed)

        def identity(x):
            if not want_mask:
                return (x, None)[:len(node.outputs)]
            return (x, np.ones(x.shape, dtype=x.dtype if mask_like_data else np.bool_))

        def kernel(x, ratio=None, training_mode=None):
            if training_mode is None or not bool(np.asarray(training_mode).reshape(-1)[0]):
                return identity(x)
            r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
            if not 0.0 <= r < 1.0:
                raise KernelError(f"{node.label}: ratio must be in [0, 1) in training mode, got {r}")
            if r == 0.0:
                return identity(x)
            if x.dtype.kind not in "fV":
                raise KernelError(f"{node.label}: training-mode dropout needs a float input, got "
                                  f"{x.dtype}")
            keep = _keep_mask(x.shape, r, seed)
            y = x * keep.astype(x.dtype)
            y *= x.dtype.type(1.0 / (1.0 - r))
            return (y, keep) if want_mask else (y, None)[:len(node.outputs)]
        return kernel
    return factory


register("Dropout", since=1, until=9)(_factory(True))
register("Dropout", since=10)(_factory(False))
