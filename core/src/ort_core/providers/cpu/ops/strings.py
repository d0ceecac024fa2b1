"""CPU kernels for string tensors: StringNormalizer, StringSplit, StringConcat and RegexFullMatch.

Strings are numpy object arrays of Python str; numpy has no vectorized text kernels for them, so
these kernels apply Python's str methods element by element (the one accepted per-element loop).
TfIdfVectorizer lives in the tfidf module, not here.
"""

from __future__ import annotations

import re

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _require_strings(node: Node, x: np.ndarray, what: str = "input") -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "OUS":
        got = getattr(x, "dtype", type(x).__name__)
        raise KernelError(f"{node.label}: {what} must be a string tensor, got {got}")
    if x.dtype.kind == "S":
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(x)
    return x.astype(object, copy=False)


def _objects(shape, items) -> np.ndarray:
    """An object array of ``shape`` filled from a flat iterable (np.array would split strings)."""
    out = np.empty(int(np.prod(shape, dtype=np.int64)), dtype=object)
    out[:] = list(items)
    return out.reshape(shape)


@register("StringNormalizer", since=10)
def _string_normalizer(node: Node, opset: int):
    """Drops elements equal to a stop word (compared after lower-casing unless
    is_case_sensitive=1), then changes case. Python's Unicode case mapping is used; the
    ``locale`` attribute is accepted and ignored, as case mapping here depends on no locale."""
    action = _text(node.attr("case_change_action", "NONE")).upper()
    if action not in ("NONE", "LOWER", "UPPER"):
        raise KernelError(f"{node.label}: case_change_action must be NONE, LOWER or UPPER, got {action!r}")
    sensitive = bool(node.attr("is_case_sensitive", 0))
    stop_list = [_text(s) for s in node.attr("stopwords", None) or []]
    stops = frozenset(stop_list if sensitive else (s.lower() for s in stop_list))
    change = {"NONE": None, "LOWER": str.lower, "UPPER": str.upper}[action]

    def keep(s: str) -> bool:
        return (s if sensitive else s.lower()) not in stops

    def kernel(x):
        x = _require_strings(node, x)
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
            raise KernelError(f"{node.label}: input must have shape [C] or [1, C], got {list(x.shape)}")
        words = [s for s in x.reshape(-1).tolist() if keep(s)] if stops else x.reshape(-1).tolist()
        if change is not None:
            words = [change(s) for s in words]
        if not words:  # the spec's "empty value": one empty string
            words = [""]
        shape = (len(words),) if x.ndim == 1 else (1, len(words))
        return (_objects(shape, words),)
    return kernel


@register("StringSplit", since=20)
def _string_split(node: Node, opset: int):
    """str.split has the spec's semantics: an absent or empty delimiter splits on runs of
    whitespace and drops leading/trailing whitespace; maxsplit bounds the number of splits."""
    delimiter = node.attr("delimiter", None)
    delimiter = _text(delimiter) if delimiter else None
    maxsplit = node.attr("maxsplit", None)
    maxsplit = -1 if maxsplit is None else int(maxsplit)
    if maxsplit < -1:
        raise KernelError(f"{node.label}: maxsplit must be non-negative, got {maxsplit}")

    def kernel(x):
        x = _require_strings(node, x)
        parts = [s.split(delimiter, maxsplit) for s in x.reshape(-1).tolist()]
        counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
        width = int(counts.max(initial=0))
        padded = (p + [""] * (width - len(p)) for p in parts)
        out = _objects((*x.shape, width), (s for p in padded for s in p))
        return out, counts
    return kernel


@register("StringConcat", since=20)
def _string_concat(node: Node, opset: int):
    def kernel(x, y):
        x, y = _require_strings(node, x, "X"), _require_strings(node, y, "Y")
        try:
            out = np.add(x, y, dtype=object)  # object ufunc: str.__add__ with broadcasting
        except ValueError as e:
            raise KernelError(f"{node.label}: shapes {list(x.shape)} and {list(y.shape)} "
                              "do not broadcast") from e
        return (np.asarray(out, dtype=object),)
    return kernel


# RE2 spellings that Python's re writes differently; other RE2 syntax is a subset of re's.
_RE2_TO_PY = ((re.compile(r"(?<!\\)((?:\\\\)*)\\z"), r"\1\\Z"),)


@register("RegexFullMatch", since=20)
def _regex_full_match(node: Node, opset: int):
    r"""True where the whole element matches ``pattern``.

    The spec names RE2 syntax; Python's ``re`` runs it. RE2 is mostly a subset of ``re``
    (RE2 lacks backreferences and lookaround, which ``re`` accepts). Differences handled:
    RE2's ``\z`` (end of text) is rewritten to ``re``'s ``\Z``. Not supported by ``re``:
    Unicode classes ``\pN``/``\p{Greek}``, ``\C``, and RE2's ``(?U)`` ungreedy flag — such
    patterns fail with a KernelError at session creation. ``\Z`` means end of text in
    ``re`` but is invalid in RE2.
    """
    pattern = node.attr("pattern", None)
    if pattern is None:
        raise KernelError(f"{node.label}: attribute 'pattern' is required")
    pattern = _text(pattern)
    translated = pattern
    for rx, repl in _RE2_TO_PY:
        translated = rx.sub(repl, translated)
    try:
        regex = re.compile(translated)
    except re.error as e:
        raise KernelError(f"{node.label}: invalid pattern {pattern!r}: {e}") from e
    match = np.vectorize(lambda s: regex.fullmatch(s) is not None, otypes=[np.bool_])

    def kernel(x):
        x = _require_strings(node, x)
        if x.size == 0:
            return (np.zeros(x.shape, dtype=np.bool_),)
        return (np.asarray(match(x), dtype=np.bool_),)
    return kernel
