"""Comparison of computed outputs with expected ones, as onnx's backend test runner does it.

Tensors must match in dtype and shape and agree within the case's rtol/atol (NaNs match NaNs);
sequences element-wise; optionals by presence; strings exactly. Pure function, no I/O.
"""

from __future__ import annotations

import numpy as np

# dtypes numpy cannot do arithmetic on precisely (ml_dtypes' bfloat16, float8, int4, ...)
_WIDEN = {"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
          "float4_e2m1fn", "int4", "uint4", "int2", "uint2"}


def mismatch(expected, got, rtol: float, atol: float, where: str = "output") -> str | None:
    """None when ``got`` matches ``expected``; otherwise a one-line description of the difference."""
    if expected is None:
        return None if got is None else f"{where}: expected an empty optional, got {type(got).__name__}"
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)):
            return f"{where}: expected a sequence, got {type(got).__name__}"
        if len(got) != len(expected):
            return f"{where}: sequence length {len(got)}, expected {len(expected)}"
        for k, (e, g) in enumerate(zip(expected, got)):
            m = mismatch(e, g, rtol, atol, f"{where}[{k}]")
            if m:
                return m
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"{where}: map keys differ"
        for k in expected:
            m = mismatch(expected[k], got[k], rtol, atol, f"{where}[{k!r}]")
            if m:
                return m
        return None
    expected = np.asarray(expected)
    if got is None:
        return f"{where}: got None, expected {expected.dtype} {list(expected.shape)}"
    got = np.asarray(got)
    if got.dtype != expected.dtype and not (got.dtype.kind in "OUS" and expected.dtype.kind in "OUS"):
        return f"{where}: dtype {got.dtype}, expected {expected.dtype}"
    if got.shape != expected.shape:
        return f"{where}: shape {list(got.shape)}, expected {list(expected.shape)}"
    if expected.dtype.kind in "OUS":
        if not np.array_equal(got.astype(object), expected.astype(object)):
            return f"{where}: string values differ"
        return None
    if expected.dtype.name in _WIDEN:
        if expected.dtype.name == "bfloat16":
            rtol = max(rtol, 2 ** -6)  # two bfloat16 ulps, as onnx's own runner allows
        expected, got = expected.astype(np.float32), got.astype(np.float32)
    if expected.dtype.kind in "biu":
        if not np.array_equal(got, expected):
            bad = int(np.sum(got != expected))
            return f"{where}: {bad} of {expected.size} values differ"
        return None
    try:
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as e:
        keep = ("Mismatched", "Max abs", "Max rel")
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip().startswith(keep)]
        return f"{where}: values differ ({'; '.join(lines)})"
    return None
