"""Inputs for ``ort-core run``: arrays from ``.npy`` / ``.npz`` files converted to the declared element type,
shapes given with ``--shape`` for free dimensions, and random data for the rest.

Every problem (an unknown input name, a shape that contradicts the model, a file that cannot be read) is a
ValueError naming the input and the file; the command prints it without a traceback.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from .ir.types import np_dtype


def parse_shapes(items: list[str], inputs: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """``NAME=D0,D1,...`` -> {name: dims}, each checked against the input's declared rank and fixed dims."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--shape expects NAME=D0,D1,... (such as image=1,3,224,224), got '{item}'")
        arg = _known(name, inputs, "--shape")
        try:
            dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip() != "")
        except ValueError:
            raise ValueError(f"--shape {name}: dimensions must be integers, got '{text}'") from None
        if any(d < 0 for d in dims):
            raise ValueError(f"--shape {name}: negative dimension in {list(dims)}")
        declared = arg.value_type.shape
        if declared is not None:
            if len(declared) != len(dims):
                raise ValueError(f"--shape {name}: {len(dims)} dimensions given, the model declares "
                                 f"{len(declared)} ({_show(declared)})")
            wrong = [(i, d, g) for i, (d, g) in enumerate(zip(declared, dims)) if isinstance(d, int) and d != g]
            if wrong:
                i, d, g = wrong[0]
                raise ValueError(f"--shape {name}: dimension {i} is fixed at {d} in the model, {g} given")
        shapes[name] = dims
    return shapes


def read_inputs(items: list[str], inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """Feeds from ``NAME=FILE.npy``, ``NAME=FILE.npz`` (its only array, or the one named NAME) and ``FILE.npz``
    (arrays named after inputs), converted to each input's declared element type with a warning when needed."""
    feeds: dict[str, np.ndarray] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = "", item
        if not path:
            raise ValueError(f"--input expects NAME=FILE.npy, NAME=FILE.npz or FILE.npz, got '{item}'")
        for key, array in _load(path, name).items():
            arg = _known(key, inputs, f"--input {item}")
            feeds[key] = _as_declared(arg, array, path)
    return feeds


def random_input(arg: Any, rng: np.random.Generator, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Random data for a NodeArg: ``shape`` when given, else its declared shape with free dimensions as 1."""
    t = arg.value_type
    if t.kind != "tensor":
        raise ValueError(f"cannot make random data for input '{arg.name}' of type {arg.type}; "
                         f"pass it with --input {arg.name}=FILE.npy")
    if shape is None:
        shape = tuple(d if isinstance(d, int) else 1 for d in (t.shape or ()))
    dtype = np_dtype(t.elem_type)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 10, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    raise ValueError(f"cannot make random data for input '{arg.name}' of type {arg.type}; "
                     f"pass it with --input {arg.name}=FILE.npy")


def _load(path: str, name: str) -> dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise ValueError(f"input file '{path}' does not exist")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read '{path}' as a .npy or .npz file: {e}") from None
    if isinstance(loaded, np.ndarray):
        if not name:
            raise ValueError(f"--input {path}: a .npy file holds one array; say which input it is (NAME={path})")
        return {name: loaded}
    with loaded:
        arrays = {k: loaded[k] for k in loaded.files}
    if not name:
        return arrays
    if name in arrays:
        return {name: arrays[name]}
    if len(arrays) == 1:
        return {name: next(iter(arrays.values()))}
    raise ValueError(f"--input {name}={path}: the file holds arrays {sorted(arrays)}, none named '{name}'")


def _as_declared(arg: Any, array: np.ndarray, path: str) -> np.ndarray:
    t = arg.value_type
    if t.kind != "tensor" or not t.elem_type:
        return array
    want = np_dtype(t.elem_type)
    if array.dtype == want or want.kind == "O":
        return array
    if array.dtype.kind not in "biuf" or want.kind not in "biuf":
        raise ValueError(f"input '{arg.name}' from '{path}': {array.dtype} cannot become {arg.type}")
    converted = array.astype(want)
    lossy = want.kind in "iub" and array.dtype.kind == "f" and not np.array_equal(converted, array)
    warnings.warn(f"input '{arg.name}' from '{path}': {array.dtype} converted to {want} ({arg.type}, as the model "
                  f"declares){'; values changed (fractions or range)' if lossy else ''}", UserWarning, stacklevel=2)
    return converted


def _known(name: str, inputs: dict[str, Any], where: str) -> Any:
    arg = inputs.get(name)
    if arg is None:
        raise ValueError(f"{where}: the model has no input '{name}' (its inputs: {sorted(inputs)})")
    return arg


def _show(shape: Any) -> str:
    return "[" + ", ".join(str(d) if d is not None else "?" for d in shape) + "]"
