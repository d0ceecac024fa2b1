"""CPU kernels for ai.onnx.ml tree ensembles: TreeEnsembleRegressor, TreeEnsembleClassifier
(ml opsets 1, 3, 5) and TreeEnsemble (ml opset 5).

This module reads the attributes and writes the outputs. At creation the trees become one flattened
node table (ml_tree_table.Forest) and a leaf-weight layout (ml_tree_aggregate.Aggregator); at run time
a traversal strategy (ml_tree_walk: walk with early exit, perfect-tree walk, GEMM or all-nodes, picked
per model and batch) finds every (sample, tree) pair's leaf, vectorized over the pairs, looping over
tree levels only, on cache-sized row blocks spread over a small thread pool for large batches.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register
from .ml_linear import ML, binary_scores, class_labels, pick, post_transform, transform_name
from .ml_tree_aggregate import Aggregator
from .ml_tree_table import LEAF, MEMBER, Forest
from .ml_tree_walk import (
    GEMM_MAX_DEPTH,
    STRATEGIES,
    choose,
    leaves,
    one_block,
    perfect_fits,
    run_blocks,
    scalar_row,
)

_MODE_NAMES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3,
               "BRANCH_EQ": 4, "BRANCH_NEQ": 5, "LEAF": LEAF}
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")  # TreeEnsemble's integer codes 0..3
_V5_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")

FORCE_STRATEGY: str | None = None
"""None: each kernel picks its traversal per batch (ml_tree_walk.choose); "walk", "perfect", "gemm",
"allnodes" or "scalar" forces it for the kernels created afterwards (the bench and the tests compare them). gemm
(depth > 4) and perfect (more than 16M padded positions) fall back to walk for trees too deep for them."""

_BLOCK_PAIRS = 1 << 16  # (sample, tree) pairs per row block: the walk's arrays stay in cache (2.5x faster)
_BLOCK_ELEMENTS = 1 << 18  # bounds [rows, trees, targets] (dense weights) and [rows, trees * nodes] (gemm)


class _Ensemble:
    """A forest with its leaf-weight layout: ``(scores, has) = ensemble(x, how)`` over row blocks."""

    def __init__(self, forest: Forest, n_targets: int):
        self.forest, self.k = forest, n_targets
        self.aggregate = Aggregator(forest, n_targets)
        # the tables of the usual comparison dtype now, not at the first run
        dtype = np.float32 if forest.exact32 else np.float64
        forest.records(dtype)
        if perfect_fits(forest):
            forest.perfect(dtype)
        if self.aggregate.layout == "dense":
            self.aggregate.dense()
        self.strategy = FORCE_STRATEGY
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise KernelError(f"unknown tree strategy {self.strategy!r}, expected one of {STRATEGIES}")
        padded = forest.roots.size * 2.0 ** (forest.depth + 1)
        if self.strategy == "gemm" and forest.depth > GEMM_MAX_DEPTH or \
                self.strategy in ("gemm", "perfect") and padded > 1 << 24:
            self.strategy = "walk"
        # one sample, plain x <= t trees: walked and summed in plain Python (no numpy call per level)
        self.strategy1 = self.strategy or choose(forest, 1)  # batch 1's, chosen once
        self.one_row = not forest.any_special and forest.depth > 0 and forest.roots.size > 0 and n_targets > 0 \
            and self.strategy1 == "scalar"
        if self.one_row:  # its lists now, not at the first run
            forest.lists(dtype)
            self.aggregate.entries()

    def features(self, node: Node, x) -> np.ndarray:
        """[N, F] C-contiguous rows in the comparison dtype: float64 for float64 input or thresholds
        that are not float32 values, else float32 (integers are compared as float32, as onnxruntime)."""
        if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiu":
            raise KernelError(f"{node.label}: input must be a numeric tensor, got "
                              f"{getattr(x, 'dtype', type(x).__name__)}")
        if x.ndim not in (1, 2):
            raise KernelError(f"{node.label}: input must be 1-D or 2-D, got shape {list(x.shape)}")
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        if rows.shape[1] < self.forest.n_features:
            raise KernelError(f"{node.label}: input has {rows.shape[1]} features, the trees read feature "
                              f"{self.forest.n_features - 1}")
        if rows.dtype != np.float64:
            rows = rows.astype(np.float32, copy=False)
            if not self.forest.exact32:
                rows = rows.astype(np.float64)
        return np.ascontiguousarray(rows)

    def __call__(self, node: Node, x, how: str) -> tuple[np.ndarray, np.ndarray]:
        xc = self.features(node, x)
        if self.one_row and xc.shape[0] == 1:
            row = xc[0].tolist()
            if not (self.forest.any_nan_step and any(v != v for v in row)):  # NaN takes the numpy walk
                return self.aggregate.one_row(scalar_row(self.forest, row, xc.dtype), how)
        n, t, k = xc.shape[0], self.forest.roots.size, self.k
        if n == 0:
            return np.zeros((0, k)), np.zeros((0, k), dtype=bool)
        strategy = self.strategy1 if n == 1 else self.strategy or choose(self.forest, n)
        width = max(t * (k if self.aggregate.layout != "tree" else 1), t * 2 ** min(self.forest.depth, 12)
                    if strategy == "gemm" else 1, self.forest.size if strategy == "allnodes" else 1)
        max_rows = max(1, min(_BLOCK_PAIRS // max(t, 1), _BLOCK_ELEMENTS // max(width, 1)))
        if one_block(n, t, max_rows):  # without run_blocks' closure and result arrays
            return self.aggregate(leaves(self.forest, xc, strategy), how)
        out, has = np.zeros((n, k)), np.zeros((n, k), dtype=bool)

        def block(a: int, b: int) -> None:
            out[a:b], has[a:b] = self.aggregate(leaves(self.forest, xc[a:b], strategy), how)

        run_blocks(block, n, t, max_rows)
        return out, has


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


def _legacy_forest(node: Node, prefix: str, n_targets: int) -> _Ensemble:
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
    forest = Forest(node.label, feature, threshold, mode, missing.astype(bool), true_next, false_next,
                    roots, (w_index, w_ids, weights), n_targets)
    return _Ensemble(forest, n_targets)


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
        y, has = forest(node, x, how)
        if base.size:  # a target no tree gave a weight to stays 0, as in onnxruntime
            y = y + base if has.all() else np.where(has, y + base, 0.0)
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
        scores, has = forest(node, x, "SUM")
        if binary:
            s = scores[:, column] + (base[min(column, base.size - 1)] if base.size else 0.0)
            win = s > 0.5 if all_positive else s > 0
            return pick(labels, win.astype(np.int64)), binary_scores(s, name, 0 if all_positive else 2)
        if base.size == k:
            scores += base
            has = np.ones(has.shape, dtype=bool)  # base values count as scores for every class
        best = np.where(has, scores, -np.inf).argmax(axis=1)
        return pick(labels, best), post_transform(scores, name)
    return kernel


def _v5_forest(node: Node) -> _Ensemble:
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
    n_targets = int(node.attr("n_targets", 0) or (targets.max(initial=-1) + 1))
    forest = Forest(node.label,
                    np.concatenate([feature, np.zeros(n_leaves, dtype=np.int64)]),
                    np.concatenate([splits, np.zeros(n_leaves)]),
                    np.concatenate([mode, np.full(n_leaves, LEAF)]),
                    np.concatenate([missing != 0, np.zeros(n_leaves, dtype=bool)]),
                    np.concatenate([true_next, ids]), np.concatenate([false_next, ids]),
                    _ints(node, "tree_roots"), (ids, targets, leaf_weights), n_targets, members)
    return _Ensemble(forest, n_targets)


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
        y, _ = forest(node, x, how)
        if name != "NONE" and (forest.k > 1 or name == "PROBIT"):
            y = post_transform(y, name)
        return (y.astype(x.dtype),)
    return kernel
