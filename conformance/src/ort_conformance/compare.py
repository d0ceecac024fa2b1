"""Comparison of computed outputs with expected ones, as onnx's backend test runner does it.

Tensors must match in dtype and shape and agree within the case's rtol/atol (NaN matches NaN, an
infinity only the same infinity); sequences element-wise; optionals by presence; strings exactly. A
mismatch names the output, how many values differ, the first (index, both values) and the largest
difference. Pure functions, no I/O.
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
        differ = got.astype(object) != expected.astype(object)
        return _differences(where, expected, got, np.asarray(differ, bool), "string values")
    if expected.dtype.name in _WIDEN:
        if expected.dtype.name == "bfloat16":
            rtol = max(rtol, 2 ** -6)  # two bfloat16 ulps, as onnx's own runner allows
        expected, got = expected.astype(np.float32), got.astype(np.float32)
    if expected.dtype.kind in "biu":
        return _differences(where, expected, got, got != expected, "values")
    with np.errstate(all="ignore"):
        # |got - expected| <= atol + rtol * |expected|, as numpy's assert_allclose; NaN matches NaN
        # and an infinity only the same infinity
        differ = ~np.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    return _differences(where, expected, got, differ, "values", f" (rtol {rtol:g}, atol {atol:g})")


def _differences(where: str, expected: np.ndarray, got: np.ndarray, differ: np.ndarray, noun: str,
                 tolerance: str = "") -> str | None:
    """None when nothing differs; else how many values differ, the first one (index, both values) and, for
    floats, the largest absolute difference among the finite pairs and how many differ in NaN or Inf."""
    bad = int(np.count_nonzero(differ))
    if not bad:
        return None
    first = tuple(int(i) for i in np.argwhere(differ)[0]) if differ.ndim else ()
    parts = [f"{where}: {bad} of {expected.size} {noun} differ{tolerance}; first at {_index(first)}: "
             f"got {_value(got[first])}, expected {_value(expected[first])}"]
    if expected.dtype.kind in "fc":
        with np.errstate(all="ignore"):
            finite = differ & np.isfinite(got) & np.isfinite(expected)
            special = bad - int(np.count_nonzero(finite))
            if finite.any():
                wide = np.complex128 if expected.dtype.kind == "c" else np.float64
                diff = np.abs(got.astype(wide) - expected.astype(wide))
                worst = tuple(int(i) for i in np.unravel_index(np.argmax(np.where(finite, diff, -1.0)), diff.shape))
                if worst != first:
                    parts.append(f"largest finite difference {_value(diff[worst])} at {_index(worst)}")
        if special:
            parts.append(f"NaN or Inf in {special} of them")
    return "; ".join(parts)


def _index(index: tuple[int, ...]) -> str:
    return "index [" + ", ".join(map(str, index)) + "]" if index else "the scalar"


def _value(v) -> str:
    """A value as a person reads it: shortest round-trip digits, nan, inf and -inf spelled out."""
    if isinstance(v, (str, bytes)):
        return repr(v.item() if isinstance(v, np.generic) else v)
    text = str(v)
    return text if len(text) <= 60 else text[:57] + "..."
