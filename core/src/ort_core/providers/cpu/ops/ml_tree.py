"""CPU kernels for ai.onnx.ml tree ensembles: TreeEnsembleRegressor, TreeEnsembleClassifier
(ml opsets 1, 3, 5) and TreeEnsemble (ml opset 5).

All trees are flattened into one node table; every sample walks every tree at once, one tree
level per step (index arrays [samples, trees]), so Python loops over depth, never over samples.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ....limits import check_tensor_size
from ..registry import register
from .ml_linear import ML, binary_scores, class_labels, pick, post_transform, transform_name

# node modes, numbered as TreeEnsemble (ml opset 5) numbers them; LEAF only for the old ops
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = range(8)
_MODE_NAMES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT,
               "BRANCH_EQ": EQ, "BRANCH_NEQ": NEQ, "LEAF": LEAF}
_COMPARE = {LEQ: np.less_equal, LT: np.less, GTE: np.greater_equal, GT: np.greater,
            EQ: np.equal, NEQ: np.not_equal}
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")  # TreeEnsemble's integer codes 0..3
_V5_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")

# samples per block so that a [block, trees, targets] gather stays near 4M elements
_BLOCK_ELEMENTS = 1 << 22


class _Forest:
    """A flattened ensemble: node arrays indexed by global node id, leaves pointing to themselves.

    ``values``/``has`` ([nodes, targets]) hold each leaf's weight per target and whether the leaf
    gives that target a weight at all (min/max and the classifiers need the difference).
    """

    def __init__(self, node: Node, feature, threshold, mode, missing, true_next, false_next,
                 roots, leaf_entries, n_targets: int, members: dict[int, np.ndarray] | None = None):
        self.label = node.label
        self.mode = np.asarray(mode, dtype=np.int64)
        # leaves read feature 0: any valid column works, their next node is themselves
        self.feature = np.where(self.mode == LEAF, 0, np.asarray(feature, dtype=np.int64))
        self.threshold = np.asarray(threshold, dtype=np.float64)
        self.missing = np.asarray(missing, dtype=bool)
        self.true_next = np.asarray(true_next, dtype=np.int64)
        self.false_next = np.asarray(false_next, dtype=np.int64)
        self.roots = np.asarray(roots, dtype=np.int64)
        self.n_targets = n_targets
        m = self.feature.size
        if min(self.true_next.min(initial=0), self.false_next.min(initial=0)) < 0 or \
                max(self.true_next.max(initial=0), self.false_next.max(initial=0)) >= max(m, 1):
            raise KernelError(f"{self.label}: a child id points outside the tree nodes")
        if self.roots.size and (self.roots.min() < 0 or self.roots.max() >= m):
            raise KernelError(f"{self.label}: a tree root points outside the tree nodes")
        interior = self.mode != LEAF
        if interior.any() and self.feature[interior].min() < 0:
            raise KernelError(f"{self.label}: negative feature id")
        self.n_features = int(self.feature[interior].max(initial=-1)) + 1
        self.modes = sorted(set(self.mode[interior].tolist()))
        self.any_missing = bool(self.missing[interior].any())
        self.depth = self._depth()
        nodes, targets, weights = leaf_entries
        nodes, targets = np.asarray(nodes, dtype=np.int64), np.asarray(targets, dtype=np.int64)
        if targets.size and (targets.min() < 0 or targets.max() >= n_targets):
            raise KernelError(f"{self.label}: a target/class id is outside [0, {n_targets})")
        if nodes.size and (nodes.min() < 0 or nodes.max() >= m):
            raise KernelError(f"{self.label}: a leaf weight points outside the tree nodes")
        check_tensor_size(self.label, (m, n_targets), np.float64, "leaf value table")  # n_targets is an attribute
        self.values = np.zeros((m, n_targets))
        self.has = np.zeros((m, n_targets), dtype=bool)
        np.add.at(self.values, (nodes, targets), np.asarray(weights, dtype=np.float64))
        self.has[nodes, targets] = True
        self._members(members or {})

    def _depth(self) -> int:
        """Longest root-to-leaf path, found level by level; a cycle is an error."""
        frontier, depth = np.unique(self.roots), 0
        while frontier.size:
            frontier = frontier[self.mode[frontier] != LEAF]
            if frontier.size == 0:
                break
            depth += 1
            if depth > self.feature.size:
                raise KernelError(f"{self.label}: the trees contain a cycle")
            frontier = np.unique(np.concatenate([self.true_next[frontier], self.false_next[frontier]]))
        return depth

    def _members(self, members: dict[int, np.ndarray]) -> None:
        """Set membership as sorted codes node * len(values) + rank(value), searched at run time."""
        allv = np.concatenate(list(members.values())) if members else np.zeros(0)
        self.member_values = np.unique(allv)
        nv = max(self.member_values.size, 1)
        codes = [n * nv + np.searchsorted(self.member_values, v) for n, v in members.items()]
        self.member_codes = np.unique(np.concatenate(codes)) if codes else np.zeros(0, dtype=np.int64)

    def _is_member(self, x: np.ndarray, cur: np.ndarray) -> np.ndarray:
        vals, codes = self.member_values, self.member_codes
        if vals.size == 0 or codes.size == 0:
            return np.zeros(x.shape, dtype=bool)
        rank = np.minimum(np.searchsorted(vals, x), vals.size - 1)
        code = cur * vals.size + rank
        pos = np.minimum(np.searchsorted(codes, code), codes.size - 1)
        return (vals[rank] == x) & (codes[pos] == code)

    def _goes_true(self, x: np.ndarray, cur: np.ndarray) -> np.ndarray:
        th = self.threshold[cur]
        if len(self.modes) == 1 and self.modes[0] != MEMBER:
            cond = _COMPARE[self.modes[0]](x, th)
        else:
            mode = self.mode[cur]
            cond = np.zeros(x.shape, dtype=bool)
            for m in self.modes:
                sel = mode == m
                cond[sel] = self._is_member(x[sel], cur[sel]) if m == MEMBER else _COMPARE[m](x[sel], th[sel])
        if self.any_missing:
            cond |= self.missing[cur] & np.isnan(x)
        return cond

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """[N, trees] leaf ids reached by each sample (x: [N, F] float64)."""
        if x.shape[1] < self.n_features:
            raise KernelError(f"{self.label}: input has {x.shape[1]} features, the trees read feature "
                              f"{self.n_features - 1}")
        cur = np.broadcast_to(self.roots, (x.shape[0], self.roots.size)).copy()
        if x.shape[1] == 0:  # only single-leaf trees can read no feature
            return cur
        for _ in range(self.depth):
            v = np.take_along_axis(x, self.feature[cur], axis=1)
            cur = np.where(self._goes_true(v, cur), self.true_next[cur], self.false_next[cur])
        return cur

    def aggregate(self, x: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
        """([N, targets] aggregated leaf weights, [N, targets] whether any tree gave one).
        Targets no tree reached get 0 under MIN/MAX, as in onnxruntime."""
        n, k, t = x.shape[0], self.n_targets, max(self.roots.size, 1)
        out, has = np.zeros((n, k)), np.zeros((n, k), dtype=bool)
        block = max(1, _BLOCK_ELEMENTS // (t * max(k, 1)))
        for start in range(0, n, block):
            leaf = self.leaves(x[start:start + block])
            vals, hit = self.values[leaf], self.has[leaf]  # [B, trees, targets]
            if how in ("SUM", "AVERAGE"):
                res = vals.sum(axis=1)
            elif how == "MIN":
                res = np.where(hit, vals, np.inf).min(axis=1)
            else:
                res = np.where(hit, vals, -np.inf).max(axis=1)
            any_hit = hit.any(axis=1)
            out[start:start + block] = np.where(any_hit, res, 0.0)
            has[start:start + block] = any_hit
        if how == "AVERAGE":
            out /= t
        return out, has


def _rows(node: Node, x) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiu":
        raise KernelError(f"{node.label}: input must be a numeric tensor, got "
                          f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim not in (1, 2):
        raise KernelError(f"{node.label}: input must be 1-D or 2-D, got shape {list(x.shape)}")
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    # integer inputs are compared as float32, as onnxruntime does
    return rows.astype(np.float32).astype(np.float64) if x.dtype.kind in "iu" else rows.astype(np.float64)


def _ints(node: Node, name: str, required: bool = True) -> np.ndarray:
    v = node.attr(name)
    if v is None:
        if required:
            raise KernelError(f"{node.label}: attribute '{name}' is required")
        return np.zeros(0, dtype=np.int64)
    return np.asarray(v, dtype=np.int64).reshape(-1)


def _values(node: Node, name: str, required: bool = True) -> np.ndarray:
    """A float attribute or its ``<name>_as_tensor`` variant (ml opset 3), as float64. FLOATS
    attributes hold float32 values: they are rounded to float32 first, so that a threshold
    compares with float32 features exactly as written."""
    t = node.attr(f"{name}_as_tensor")
    if t is not None:
        return np.asarray(t, dtype=np.float64).reshape(-1)
    v = node.attr(name)
    if v is None:
        if required:
            raise KernelError(f"{node.label}: attribute '{name}' is required")
        return np.zeros(0)
    return np.asarray(v, dtype=np.float32).astype(np.float64).reshape(-1)


def _legacy_forest(node: Node, prefix: str, n_targets: int) -> _Forest:
    """Forest from the nodes_* attributes of TreeEnsembleRegressor/Classifier, where nodes are
    named by (tree id, node id) and leaf weights by (tree id, node id, target/class id)."""
    tree_ids, node_ids = _ints(node, "nodes_treeids"), _ints(node, "nodes_nodeids")
    m = tree_ids.size
    feature = _ints(node, "nodes_featureids")
    threshold = _values(node, "nodes_values")
    modes = node.attr("nodes_modes") or []
    true_ids, false_ids = _ints(node, "nodes_truenodeids"), _ints(node, "nodes_falsenodeids")
    missing = _ints(node, "nodes_missing_value_tracks_true", required=False)
    if missing.size == 0:
        missing = np.zeros(m, dtype=np.int64)
    sizes = {len(a) for a in (node_ids, feature, threshold, modes, true_ids, false_ids, missing)}
    if sizes != {m}:
        raise KernelError(f"{node.label}: the nodes_* attributes must all have {m} entries")
    try:
        mode = np.array([_MODE_NAMES[s.decode() if isinstance(s, bytes) else s] for s in modes], dtype=np.int64)
    except KeyError as e:
        raise KernelError(f"{node.label}: unknown node mode {e.args[0]!r}") from e
    span = int(max(node_ids.max(initial=0), true_ids.max(initial=0), false_ids.max(initial=0))) + 1
    keys = tree_ids * span + node_ids
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    if np.any(sorted_keys[1:] == sorted_keys[:-1]):
        raise KernelError(f"{node.label}: a (tree id, node id) pair appears twice")

    def index_of(tids: np.ndarray, nids: np.ndarray, what: str) -> np.ndarray:
        k = tids * span + nids
        pos = np.minimum(np.searchsorted(sorted_keys, k), max(m - 1, 0))
        if m == 0 or np.any(sorted_keys[pos] != k):
            raise KernelError(f"{node.label}: {what} names a node that does not exist")
        return order[pos]

    leaf = mode == LEAF
    self_ids = np.arange(m, dtype=np.int64)
    true_next, false_next = self_ids.copy(), self_ids.copy()
    true_next[~leaf] = index_of(tree_ids[~leaf], true_ids[~leaf], "nodes_truenodeids")
    false_next[~leaf] = index_of(tree_ids[~leaf], false_ids[~leaf], "nodes_falsenodeids")
    _, roots = np.unique(tree_ids, return_index=True)  # first node listed for each tree, by tree id
    w_trees, w_nodes = _ints(node, f"{prefix}_treeids"), _ints(node, f"{prefix}_nodeids")
    w_ids, weights = _ints(node, f"{prefix}_ids"), _values(node, f"{prefix}_weights")
    if not (w_trees.size == w_nodes.size == w_ids.size == weights.size):
        raise KernelError(f"{node.label}: the {prefix}_* attributes must have the same length")
    w_index = index_of(w_trees, w_nodes, f"{prefix}_nodeids") if w_trees.size else w_trees
    return _Forest(node, feature, threshold, mode, missing.astype(bool), true_next, false_next,
                   roots, (w_index, w_ids, weights), n_targets)


def _aggregate_name(node: Node) -> str:
    name = str(node.attr("aggregate_function", "SUM")).upper()
    if name not in _AGGREGATES:
        raise KernelError(f"{node.label}: aggregate_function must be one of {_AGGREGATES}, got {name!r}")
    return name


@register("TreeEnsembleRegressor", since=1, domain=ML)
def _tree_regressor(node: Node, opset: int):
    """Y = aggregate of the leaf weights (+ base_values), float32 [N, n_targets]. A single target
    only knows the PROBIT post-transform, and a target that no reached leaf weights scores 0 (as in
    onnxruntime; the reference evaluator adds base_values there, or starts MIN/MAX at +-FLT_MAX)."""
    n_targets = int(node.attr("n_targets", 1))
    forest = _legacy_forest(node, "target", n_targets)
    how = _aggregate_name(node)
    base = _values(node, "base_values", required=False)
    if base.size not in (0, n_targets):
        raise KernelError(f"{node.label}: {base.size} base_values for {n_targets} targets")
    name = transform_name(node, node.attr("post_transform"))

    def kernel(x):
        y, has = forest.aggregate(_rows(node, x), how)
        if base.size:  # a target no tree gave a weight to stays 0, as in onnxruntime
            y = np.where(has, y + base, 0.0)
        if n_targets > 1 or name == "PROBIT":
            return (post_transform(y, name),)
        return (y.astype(np.float32),)
    return kernel


@register("TreeEnsembleClassifier", since=1, domain=ML)
def _tree_classifier(node: Node, opset: int):
    """Summed class weights (+ base_values) per class; label of the top class. With two labels
    and a single class id the ensemble is binary: its one score s picks labels[1] when s > 0.5
    (all weights >= 0) or s > 0 (mixed signs), and Z = [1 - s, s], [-s, s] or, under LOGISTIC,
    [logistic(-s), logistic(s)], as in onnxruntime."""
    labels, _ = class_labels(node)
    if labels is None:
        raise KernelError(f"{node.label}: classlabels_int64s or classlabels_strings is required")
    k = labels.size
    forest = _legacy_forest(node, "class", k)
    class_ids = _ints(node, "class_ids")
    weights = _values(node, "class_weights")
    base = _values(node, "base_values", required=False)
    name = transform_name(node, node.attr("post_transform"))
    binary = k == 2 and np.unique(class_ids).size == 1
    all_positive = bool((weights >= 0).all())
    if binary:
        column = int(class_ids[0])

    def kernel(x):
        scores, has = forest.aggregate(_rows(node, x), "SUM")
        if binary:
            s = scores[:, column] + (base[min(column, base.size - 1)] if base.size else 0.0)
            win = s > 0.5 if all_positive else s > 0
            return pick(labels, win.astype(np.int64)), binary_scores(s, name, 0 if all_positive else 2)
        if base.size == k:
            scores += base
            has[:] = True  # base values count as scores for every class
        best = np.where(has, scores, -np.inf).argmax(axis=1)
        return pick(labels, best), post_transform(scores, name)
    return kernel


def _v5_forest(node: Node) -> _Forest:
    feature = _ints(node, "nodes_featureids")
    n = feature.size
    splits = node.attr("nodes_splits")
    modes = node.attr("nodes_modes")
    if splits is None or modes is None:
        raise KernelError(f"{node.label}: attributes 'nodes_splits' and 'nodes_modes' are required")
    splits, mode = np.asarray(splits, dtype=np.float64).reshape(-1), np.asarray(modes, dtype=np.int64).reshape(-1)
    true_ids, false_ids = _ints(node, "nodes_truenodeids"), _ints(node, "nodes_falsenodeids")
    true_leaf, false_leaf = _ints(node, "nodes_trueleafs"), _ints(node, "nodes_falseleafs")
    missing = _ints(node, "nodes_missing_value_tracks_true", required=False)
    if missing.size == 0:
        missing = np.zeros(n, dtype=np.int64)
    if {a.size for a in (splits, mode, true_ids, false_ids, true_leaf, false_leaf, missing)} != {n}:
        raise KernelError(f"{node.label}: the nodes_* attributes must all have {n} entries")
    if mode.size and (mode.min() < 0 or mode.max() > MEMBER):
        raise KernelError(f"{node.label}: nodes_modes must be in 0..6")
    targets = _ints(node, "leaf_targetids")
    lw = node.attr("leaf_weights")
    if lw is None:
        raise KernelError(f"{node.label}: attribute 'leaf_weights' is required")
    leaf_weights = np.asarray(lw, dtype=np.float64).reshape(-1)
    n_leaves = targets.size
    if leaf_weights.size != n_leaves:
        raise KernelError(f"{node.label}: leaf_targetids and leaf_weights differ in length")
    # leaves follow the interior nodes in one id space, and point to themselves
    true_next = np.where(true_leaf != 0, true_ids + n, true_ids)
    false_next = np.where(false_leaf != 0, false_ids + n, false_ids)
    ids = np.arange(n, n + n_leaves, dtype=np.int64)
    members: dict[int, np.ndarray] = {}
    member_nodes = np.flatnonzero(mode == MEMBER)
    if member_nodes.size:
        mv = node.attr("membership_values")
        if mv is None:
            raise KernelError(f"{node.label}: set-membership nodes need 'membership_values'")
        mv = np.asarray(mv, dtype=np.float64).reshape(-1)
        # one NaN-terminated group of values per membership node, in node order
        groups = np.split(mv, np.flatnonzero(np.isnan(mv)) + 1)
        groups = [g[~np.isnan(g)] for g in groups if g.size]
        if len(groups) < member_nodes.size:
            raise KernelError(f"{node.label}: membership_values holds {len(groups)} sets for "
                              f"{member_nodes.size} membership nodes")
        members = {int(i): g for i, g in zip(member_nodes, groups)}
    return _Forest(node,
                   np.concatenate([feature, np.zeros(n_leaves, dtype=np.int64)]),
                   np.concatenate([splits, np.zeros(n_leaves)]),
                   np.concatenate([mode, np.full(n_leaves, LEAF)]),
                   np.concatenate([missing != 0, np.zeros(n_leaves, dtype=bool)]),
                   np.concatenate([true_next, ids]), np.concatenate([false_next, ids]),
                   _ints(node, "tree_roots"), (ids, targets, leaf_weights),
                   int(node.attr("n_targets", 0) or (targets.max(initial=-1) + 1)), members)


@register("TreeEnsemble", since=5, domain=ML)
def _tree_ensemble(node: Node, opset: int):
    forest = _v5_forest(node)
    agg = int(node.attr("aggregate_function", 1))
    tr = int(node.attr("post_transform", 0))
    if not 0 <= agg < len(_AGGREGATES) or not 0 <= tr < len(_V5_TRANSFORMS):
        raise KernelError(f"{node.label}: aggregate_function must be 0..3 and post_transform 0..4, "
                          f"got {agg} and {tr}")
    how, name = _AGGREGATES[agg], _V5_TRANSFORMS[tr]

    def kernel(x):
        if x.dtype not in (np.float32, np.float64, np.float16):
            raise KernelError(f"{node.label}: input must be float, double or float16, got {x.dtype}")
        y, _ = forest.aggregate(_rows(node, x), how)
        if name != "NONE" and (forest.n_targets > 1 or name == "PROBIT"):
            y = post_transform(y, name)
        return (y.astype(x.dtype),)
    return kernel
