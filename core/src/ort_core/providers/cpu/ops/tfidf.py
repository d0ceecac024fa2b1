"""CPU kernel for TfIdfVectorizer: n-gram counts (TF), presence (IDF) or weighted counts (TFIDF)
of a pool of int64 or string n-grams over [C] or [N, C] token tensors.

It neither tokenizes nor normalizes strings (Tokenizer/StringNormalizer do that).
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register


class _PairIndex:
    """Sorted int64 codes -> dense ids; ``find`` returns -1 for codes not present."""

    def __init__(self, codes: np.ndarray, ids: np.ndarray) -> None:
        order = np.argsort(codes, kind="stable")
        self.codes, self.ids = codes[order], ids[order]

    def find(self, codes: np.ndarray) -> np.ndarray:
        if self.codes.size == 0:
            return np.full(codes.shape, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.codes, codes), self.codes.size - 1)
        return np.where(self.codes[pos] == codes, self.ids[pos], -1)


class _GramTable:
    """The pool's n-grams of one length n, matched level by level like a trie.

    Level k maps (id of a (k-1)-token prefix, k-th token) to the id of the k-token prefix, so
    each code is prefix_id * vocab + token and stays small whatever n is. The last level maps
    to the output column of the n-gram.
    """

    def __init__(self, grams: np.ndarray, columns: np.ndarray, vocab: int) -> None:
        self.n, self.vocab = grams.shape[1], vocab
        self.levels: list[_PairIndex] = []
        prefix = grams[:, 0]
        for k in range(1, self.n):
            codes = prefix * vocab + grams[:, k]
            uniq, prefix = np.unique(codes, return_inverse=True)
            self.levels.append(_PairIndex(uniq, np.arange(uniq.size, dtype=np.int64)))
            prefix = prefix.reshape(-1)
        # a repeated n-gram keeps the column of its last occurrence
        self.columns = _PairIndex(prefix[::-1].copy(), columns[::-1].copy())

    def match(self, tokens: list[np.ndarray]) -> np.ndarray:
        """Output column (or -1) for each window; ``tokens[k]`` holds the k-th token ids."""
        ids = tokens[0]
        for k, level in enumerate(self.levels, start=1):
            ok = (ids >= 0) & (tokens[k] >= 0)
            ids = np.where(ok, level.find(np.where(ok, ids * self.vocab + tokens[k], -1)), -1)
        return np.where(ids >= 0, self.columns.find(ids), -1)


@register("TfIdfVectorizer", since=9)
def _tfidf(node: Node, opset: int):
    mode = str(node.attr("mode", "")).upper()
    if mode not in ("TF", "IDF", "TFIDF"):
        raise KernelError(f"{node.label}: mode must be TF, IDF or TFIDF, got {mode!r}")
    min_n, max_n = int(node.attr("min_gram_length", 0)), int(node.attr("max_gram_length", 0))
    max_skip = int(node.attr("max_skip_count", 0))
    if not 1 <= min_n <= max_n or max_skip < 0:
        raise KernelError(f"{node.label}: need 1 <= min_gram_length ({min_n}) <= max_gram_length "
                          f"({max_n}) and max_skip_count ({max_skip}) >= 0")
    pool_ints, pool_strings = node.attr("pool_int64s"), node.attr("pool_strings")
    if (pool_ints is None) == (pool_strings is None):
        raise KernelError(f"{node.label}: exactly one of pool_int64s and pool_strings must be set")
    strings = pool_strings is not None
    pool = np.empty(len(pool_strings), dtype=object) if strings else np.asarray(pool_ints, dtype=np.int64)
    if strings:
        pool[:] = [s.decode() if isinstance(s, bytes) else s for s in pool_strings]
    starts = [int(c) for c in node.attr("ngram_counts", [])]
    indexes = np.asarray(node.attr("ngram_indexes", []), dtype=np.int64)
    if not starts or indexes.size == 0 or indexes.min() < 0:
        raise KernelError(f"{node.label}: ngram_counts and non-negative ngram_indexes are required")
    width = int(indexes.max()) + 1
    weights = np.asarray(node.attr("weights", []) or [], dtype=np.float32)
    if weights.size and weights.size < width:
        raise KernelError(f"{node.label}: {weights.size} weights for {width} output columns")

    vocab_values = np.unique(pool)
    vocab = vocab_values.size + 1
    pool_ids = np.searchsorted(vocab_values, pool).astype(np.int64)
    tables: dict[int, _GramTable] = {}
    gram_index = 0  # n-grams are numbered across lengths in pool order
    for k, start in enumerate(starts):
        n = k + 1
        end = starts[k + 1] if k + 1 < len(starts) else pool.size
        count = max(end - start, 0) // n
        if count and min_n <= n <= max_n:
            if gram_index + count > indexes.size:
                raise KernelError(f"{node.label}: ngram_indexes has {indexes.size} entries, the pool "
                                  f"holds more n-grams")
            grams = pool_ids[start:start + count * n].reshape(count, n)
            tables[n] = _GramTable(grams, indexes[gram_index:gram_index + count], vocab)
        gram_index += count

    def token_ids(node: Node, x: np.ndarray) -> np.ndarray:
        if strings != (x.dtype.kind in "OUS"):
            raise KernelError(f"{node.label}: input of {x.dtype} does not match a pool of "
                              f"{'strings' if strings else 'int64s'}")
        if vocab_values.size == 0:
            return np.full(x.shape, -1, dtype=np.int64)
        values = x.astype(object) if strings else x.astype(np.int64)
        pos = np.minimum(np.searchsorted(vocab_values, values), vocab_values.size - 1)
        return np.where(vocab_values[pos] == values, pos, -1).astype(np.int64)

    def kernel(x):
        if x.ndim > 2 or (x.ndim == 2 and x.shape[0] == 0):
            raise KernelError(f"{node.label}: input must have shape [C] or [N, C] with N > 0, "
                              f"got {list(x.shape)}")
        rows = x.reshape(1, -1) if x.ndim < 2 else x
        ids = token_ids(node, rows)
        n_rows, length = ids.shape
        counts = np.zeros(n_rows * width, dtype=np.int64)
        row_base = (np.arange(n_rows, dtype=np.int64) * width)[:, None]
        for n, table in tables.items():
            # unigrams do not depend on the skip, so they are counted once
            for step in range(1, (1 if n == 1 else max_skip + 1) + 1):
                span = length - (n - 1) * step
                if span <= 0:
                    break
                cols = table.match([ids[:, k * step:k * step + span] for k in range(n)])
                hit = cols >= 0
                counts += np.bincount((row_base + cols)[hit], minlength=counts.size)
        counts = counts.reshape(n_rows, width)
        if mode == "TF":
            y = counts.astype(np.float32)
        elif mode == "IDF":
            y = (counts > 0).astype(np.float32)
            if weights.size:
                y *= weights[:width]
        else:
            y = counts.astype(np.float32)
            if weights.size:
                y *= weights[:width]
        return (y.reshape(width) if x.ndim < 2 else y,)
    return kernel
