"""The flattened node table of a tree ensemble, built once when the kernel is created.

The trees of a TreeEnsemble* node arrive as node arrays in one global id space (leaves pointing to
themselves). ``Forest`` checks them and lays them out anew, tree by tree in breadth-first order, so
that the two children of every interior node sit side by side: node ``i`` goes on to ``base[i] +
step``, where ``step`` is one comparison ``x[feature] <= threshold`` for every node. The branch modes
fold into that one comparison: BRANCH_GT/GTE nodes put their children the other way round, BRANCH_LT/
GTE nodes compare with the float just below their threshold (``x < t`` is ``x <= nextafter(t, -inf)``
for floats of the comparison dtype), EQ/NEQ/MEMBER nodes are marked "special" and compared on their own.
A NaN feature compares false; where it must go the other way (missing_value_tracks_true, NEQ) the node's
``nan_step`` says so. Leaves keep ``base = self`` with a NaN threshold, so they never move: a walk that
finds a node where it was knows that it reached its leaf.

Per comparison dtype (float32 when the input is float32, float16 or integer and every threshold is a
float32 value, else float64) one packed record per node, ``(base, feature, threshold)`` in 16 bytes, is
fetched with a single gather per tree level. Strategies that pad trees to perfect ones (see
ml_tree_walk) take their per-level tables from ``perfect()``.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....limits import check_tensor_size

# node modes, numbered as TreeEnsemble (ml opset 5) numbers them; LEAF only for the old ops
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = range(8)
_SPECIAL_COMPARE = {EQ: np.equal, NEQ: np.not_equal}

_REC32 = np.dtype([("b", np.int64), ("f", np.int32), ("t", np.float32)])
_REC64 = np.dtype([("b", np.int32), ("f", np.int32), ("t", np.float64)])


class Forest:
    """A checked ensemble laid out for walking (see the module docstring).

    Attributes in the new id space (``size`` nodes): ``base`` (first child; self for leaves),
    ``feature``, ``nan_step`` (1 where a NaN feature takes the second child), ``special`` (the mode of
    EQ/NEQ/MEMBER nodes, else 0), ``old`` (the original id), ``tree``, ``level``; ``roots`` [trees];
    ``depth`` (levels below the roots). ``entries`` holds the leaf weights as (new node ids, targets,
    weights) for the aggregation (ml_tree_aggregate).
    """

    def __init__(self, label: str, feature, threshold, mode, missing, true_next, false_next,
                 roots, leaf_entries, n_targets: int, members: dict[int, np.ndarray] | None = None):
        self.label = label
        mode = np.asarray(mode, dtype=np.int64)
        feature = np.where(mode == LEAF, 0, np.asarray(feature, dtype=np.int64))
        threshold = np.asarray(threshold, dtype=np.float64)
        missing = np.asarray(missing, dtype=bool)
        true_next, false_next = np.asarray(true_next, dtype=np.int64), np.asarray(false_next, dtype=np.int64)
        roots = np.asarray(roots, dtype=np.int64)
        self.n_targets = n_targets
        m = feature.size
        if min(true_next.min(initial=0), false_next.min(initial=0)) < 0 or \
                max(true_next.max(initial=0), false_next.max(initial=0)) >= max(m, 1):
            raise KernelError(f"{label}: a child id points outside the tree nodes")
        if roots.size and (roots.min() < 0 or roots.max() >= m):
            raise KernelError(f"{label}: a tree root points outside the tree nodes")
        interior = mode != LEAF
        if interior.any() and feature[interior].min() < 0:
            raise KernelError(f"{label}: negative feature id")
        self.n_features = int(feature[interior].max(initial=-1)) + 1
        self.depth = _depth(label, roots, mode, true_next, false_next)
        nodes, targets, weights = leaf_entries
        nodes, targets = np.asarray(nodes, dtype=np.int64), np.asarray(targets, dtype=np.int64)
        if targets.size and (targets.min() < 0 or targets.max() >= n_targets):
            raise KernelError(f"{label}: a target/class id is outside [0, {n_targets})")
        if nodes.size and (nodes.min() < 0 or nodes.max() >= m):
            raise KernelError(f"{label}: a leaf weight points outside the tree nodes")
        self._layout(mode, roots, true_next, false_next)
        old = self.old
        self.feature = feature[old]
        om = mode[old]
        swap = (om == GT) | (om == GTE)  # children stored [true, false]: step = (x <= t) picks false
        nan_true = (om == NEQ) | missing[old]
        self.nan_step = np.where(om == LEAF, 0, nan_true != swap).astype(np.int8)
        self.special = np.where((om == EQ) | (om == NEQ) | (om == MEMBER), om, 0).astype(np.int8)
        self.threshold = threshold[old]  # as given (float64), before the LT/GTE shift
        self._shift = (om == LT) | (om == GTE)
        self._leaf = om == LEAF
        self.mean_depth = float(self.level[self._leaf].mean()) if self._leaf.any() else 0.0
        self.any_special = bool(self.special.any())
        self.any_nan_step = bool(self.nan_step.any())
        inner = ~self._leaf & ~np.isnan(self.threshold)
        th = self.threshold[inner]
        self.exact32 = bool(np.all(th.astype(np.float32).astype(np.float64) == th))
        self._records: dict[np.dtype, np.ndarray] = {}
        self._perfect: dict[np.dtype, tuple] = {}
        # leaf weights of every copy of a leaf (shared nodes appear once per path)
        order = np.argsort(old, kind="stable")
        first = np.searchsorted(old[order], nodes, side="left")
        last = np.searchsorted(old[order], nodes, side="right")
        counts = last - first
        reps = np.repeat(np.arange(nodes.size), counts)
        starts = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(reps.size)
        self.entries = (order[starts], targets[reps], np.asarray(weights, dtype=np.float64)[reps])
        self._members(members or {})

    # ------------------------------------------------------------------------------------ layout
    def _layout(self, mode, roots, true_next, false_next) -> None:
        """Breadth-first ids, tree by tree per level, the children of a node adjacent (GT/GTE nodes
        put the true child first). A node reached by several paths is copied for each of them."""
        t = roots.size
        swap = (mode == GT) | (mode == GTE)
        first_child, second_child = np.where(swap, true_next, false_next), np.where(swap, false_next, true_next)
        level_nodes, level_tree = roots, np.arange(t, dtype=np.int64)
        olds, bases, trees, levels = [], [], [], []
        start, level = 0, 0
        limit = 4 * mode.size + 2 * t + 64
        while level_nodes.size:
            n = level_nodes.size
            inner = np.flatnonzero(mode[level_nodes] != LEAF)
            base = np.arange(start, start + n, dtype=np.int64)
            base[inner] = start + n + 2 * np.arange(inner.size, dtype=np.int64)
            olds.append(level_nodes)
            bases.append(base)
            trees.append(level_tree)
            levels.append(np.full(n, level, dtype=np.int64))
            start += n
            level += 1
            if start + 2 * inner.size > limit:
                raise KernelError(f"{self.label}: the trees share nodes between too many paths to be laid out")
            inner_nodes = level_nodes[inner]
            level_nodes = np.stack([first_child[inner_nodes], second_child[inner_nodes]], axis=1).reshape(-1)
            level_tree = np.repeat(level_tree[inner], 2)
        def cat(parts: list) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

        self.old, self.base, self.tree, self.level = cat(olds), cat(bases), cat(trees), cat(levels)
        self.size = int(self.old.size)
        self.roots = np.arange(t, dtype=np.intp)
        if self.size >= 2 ** 31 - 2:
            raise KernelError(f"{self.label}: too many tree nodes ({self.size})")

    def thresholds(self, dtype) -> np.ndarray:
        """The thresholds compared with ``x <= t`` in ``dtype``: LT/GTE ones shifted one float down
        (NaN where the threshold is -inf: ``x < -inf`` never holds), leaves NaN (they never move)."""
        th = self.threshold.astype(dtype)
        with np.errstate(invalid="ignore"):
            down = np.nextafter(th, dtype(-np.inf))
            th = np.where(self._shift, np.where(th == -np.inf, np.nan, down), th).astype(dtype)
        th[self._leaf] = np.nan
        return th

    def records(self, dtype) -> np.ndarray:
        """(b, f, t) per node in 16 bytes: base (int64 with float32 thresholds, int32 with float64
        ones), feature, threshold in the comparison dtype."""
        dtype = np.dtype(dtype)
        rec = self._records.get(dtype)
        if rec is None:
            rec = np.empty(self.size, dtype=_REC32 if dtype == np.float32 else _REC64)
            rec["b"], rec["f"], rec["t"] = self.base, self.feature, self.thresholds(dtype.type)
            self._records[dtype] = rec
        return rec

    def lists(self, dtype) -> tuple[list, list, list, list]:
        """(base, feature, threshold) of every node and the roots, as Python lists, for the scalar walk
        (thresholds in ``dtype``, then as Python floats: comparing float32 values through float64 keeps their
        order)."""
        key = ("lists", np.dtype(dtype))
        got = self._perfect.get(key)
        if got is None:
            got = (self.base.tolist(), self.feature.tolist(), self.thresholds(np.dtype(dtype).type).tolist(),
                   self.roots.tolist())
            self._perfect[key] = got
        return got

    def columns(self, dtype) -> tuple[np.ndarray, np.ndarray]:
        """Contiguous features (intp) and thresholds (``dtype``) of every node."""
        key = ("columns", np.dtype(dtype))
        got = self._perfect.get(key)
        if got is None:
            got = (self.feature.astype(np.intp), self.thresholds(np.dtype(dtype).type))
            self._perfect[key] = got
        return got

    def perfect(self, dtype) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        """Trees padded to perfect ones of ``depth`` levels: per level, the nodes at each position
        ([trees * 2**level], a leaf copied into every position below it) and their (f, t) records;
        the last entry of the node list holds the leaves ([trees * 2**depth]). Position ``p`` of a
        level has its children at ``2p`` and ``2p + 1`` of the next."""
        dtype = np.dtype(dtype)
        got = self._perfect.get(dtype)
        if got is None:
            check_tensor_size(self.label, (self.roots.size, 2 ** (self.depth + 1)), np.int64, "perfect-tree table")
            rec = self.records(dtype)
            small = np.dtype([("f", np.int32), ("t", np.float32)]) if dtype == np.float32 else \
                np.dtype([("f", np.int64), ("t", np.float64)])
            nodes, recs, p = [], [], self.roots.astype(np.int64)
            for _ in range(self.depth):
                r = np.empty(p.size, dtype=small)
                r["f"], r["t"] = rec["f"][p], rec["t"][p]
                nodes.append(p)
                recs.append(r)
                leaf = self.base[p] == p
                p = np.stack([np.where(leaf, p, self.base[p]), np.where(leaf, p, self.base[p] + 1)], 1).reshape(-1)
            got = (nodes + [p], recs, p)
            self._perfect[dtype] = got
        return got

    # ---------------------------------------------------------------------------- special modes
    def _members(self, members: dict[int, np.ndarray]) -> None:
        """Set membership as sorted codes node * len(values) + rank(value), searched at run time
        (keyed by the new ids: every copy of a membership node gets its set)."""
        allv = np.concatenate(list(members.values())) if members else np.zeros(0)
        self.member_values = np.unique(allv)
        nv = max(self.member_values.size, 1)
        codes = []
        if members:
            for new in np.flatnonzero(self.special == MEMBER).tolist():  # one per membership node copy
                v = members.get(int(self.old[new]))
                if v is not None:
                    codes.append(new * nv + np.searchsorted(self.member_values, v))
        self.member_codes = np.unique(np.concatenate(codes)) if codes else np.zeros(0, dtype=np.int64)

    def _is_member(self, x: np.ndarray, cur: np.ndarray) -> np.ndarray:
        vals, codes = self.member_values, self.member_codes
        if vals.size == 0 or codes.size == 0:
            return np.zeros(x.shape, dtype=bool)
        rank = np.minimum(np.searchsorted(vals, x), vals.size - 1)
        code = cur * vals.size + rank
        pos = np.minimum(np.searchsorted(codes, code), codes.size - 1)
        return (vals[rank] == x) & (codes[pos] == code)

    def fix_steps(self, step: np.ndarray, v: np.ndarray, th: np.ndarray, nodes, check_nan: bool) -> None:
        """Correct ``step`` (``v <= th`` of nodes ``nodes()``) in place for EQ/NEQ/MEMBER nodes and,
        when ``check_nan``, for NaN features. ``nodes`` is a callable: the node ids are only looked up
        when something needs fixing."""
        cur = None
        if self.any_special:
            cur = nodes()
            sp = self.special[cur]
            for m in (EQ, NEQ, MEMBER):
                sel = np.flatnonzero(sp == m)
                if sel.size:
                    c = cur[sel]
                    step[sel] = self._is_member(v[sel], c) if m == MEMBER else _SPECIAL_COMPARE[m](v[sel], th[sel])
        if check_nan:
            nan = np.flatnonzero(np.isnan(v))
            if nan.size:
                cur = nodes() if cur is None else cur
                step[nan] = self.nan_step[cur[nan]]


def _depth(label: str, roots, mode, true_next, false_next) -> int:
    """Longest root-to-leaf path, found level by level; a cycle is an error."""
    frontier, depth = np.unique(roots), 0
    while frontier.size:
        frontier = frontier[mode[frontier] != LEAF]
        if frontier.size == 0:
            break
        depth += 1
        if depth > mode.size:
            raise KernelError(f"{label}: the trees contain a cycle")
        frontier = np.unique(np.concatenate([true_next[frontier], false_next[frontier]]))
    return depth
