"""Tree ensembles (TreeEnsembleRegressor/Classifier, TreeEnsemble) against the reference evaluator,
and against onnxruntime where the two runtimes differ and onnxruntime is followed."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from ort_core.errors import KernelError

from .kernel_harness import run_onnxruntime_ml, run_ours, run_reference

ML = "ai.onnx.ml"
rng = np.random.default_rng(11)
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def forest(n_trees, depth, n_features, modes=("BRANCH_LEQ",), shuffle=True):
    """Full binary trees in the legacy encoding; node ids BFS-numbered, nodes listed shuffled
    within each tree (root first). Returns the nodes_* attributes and the leaves (tree, node)."""
    attrs = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values",
                             "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids",
                             "nodes_missing_value_tracks_true")}
    leaves = []
    for t in range(n_trees):
        n_int, n_all = 2 ** depth - 1, 2 ** (depth + 1) - 1
        order = [0] + list(rng.permutation(np.arange(1, n_all))) if shuffle else range(n_all)
        for i in order:
            i = int(i)
            leaf = i >= n_int
            attrs["nodes_treeids"].append(t * 3 + 1)  # tree ids need not be 0..T-1
            attrs["nodes_nodeids"].append(i)
            attrs["nodes_featureids"].append(0 if leaf else int(rng.integers(n_features)))
            attrs["nodes_values"].append(0.0 if leaf else float(np.round(rng.normal(), 1)))
            attrs["nodes_modes"].append("LEAF" if leaf else str(rng.choice(modes)))
            attrs["nodes_truenodeids"].append(0 if leaf else 2 * i + 1)
            attrs["nodes_falsenodeids"].append(0 if leaf else 2 * i + 2)
            attrs["nodes_missing_value_tracks_true"].append(int(rng.integers(2)))
            if leaf:
                leaves.append((t * 3 + 1, i))
    return attrs, leaves


def weights(leaves, prefix, n_targets, every_target=True, scale=1.0, positive=False):
    out = {f"{prefix}_treeids": [], f"{prefix}_nodeids": [], f"{prefix}_ids": [], f"{prefix}_weights": []}
    for t, n in leaves:
        for k in range(n_targets):
            if every_target or rng.random() < 0.5:
                w = float(rng.random() if positive else rng.normal()) * scale
                for key, v in zip(out, (t, n, k, w)):
                    out[key].append(v)
    return out


def features(n, f, nan=True):
    x = np.round(rng.normal(size=(n, f)), 1).astype(np.float32)  # ties with thresholds happen
    if nan:
        x[rng.random(size=x.shape) < 0.1] = np.nan
    return x


def ml_both(op, x, attrs, n_outputs, opset=3, ref_attrs=None):
    ours = run_ours(op, [x], attrs, opset=opset, n_outputs=n_outputs, domain=ML)
    ref = run_reference(op, [x], ref_attrs or attrs, opset=opset, n_outputs=n_outputs, domain=ML)
    return ours, ref


# ------------------------------------------------------------------------- TreeEnsembleRegressor

@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("n_targets", [1, 3])
@pytest.mark.parametrize("opset", [1, 3])
def test_tree_regressor_matches_reference(agg, n_targets, opset):
    # NEQ is left out: the reference sends NaN by the missing flag there, onnxruntime by the comparison
    attrs, leaves = forest(5, 3, 4, modes=MODES[:5])
    attrs.update(weights(leaves, "target", n_targets), n_targets=n_targets, aggregate_function=agg)
    attrs["base_values"] = [float(v) for v in rng.normal(size=n_targets)]
    x = features(60, 4)
    (ours,), (ref,) = ml_both("TreeEnsembleRegressor", x, attrs, 1, opset=opset)
    assert ours.dtype == np.float32 and ours.shape == (60, n_targets)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_tree_regressor_tensor_attributes_and_double_input():
    attrs, leaves = forest(3, 2, 3, shuffle=False)
    attrs["nodes_values"] = [v / 4 for v in attrs["nodes_values"]]  # exact in float32 and float64
    w = weights(leaves, "target", 2)
    attrs.update(w, n_targets=2)
    x = (np.round(rng.normal(size=(20, 3)) * 40) / 160).astype(np.float64)
    (expected,) = run_ours("TreeEnsembleRegressor", [x], attrs, opset=3, domain=ML)
    values = np.array(attrs.pop("nodes_values"), np.float64)
    tw = np.array(attrs.pop("target_weights"), np.float64)
    attrs.update(nodes_values_as_tensor=values, target_weights_as_tensor=tw)
    (y,) = run_ours("TreeEnsembleRegressor", [x], attrs, opset=3, domain=ML)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=1e-6)  # float32 vs float64 weights


def test_tree_regressor_single_leaf_and_int_input():
    attrs = dict(nodes_treeids=[0, 1], nodes_nodeids=[0, 0], nodes_featureids=[0, 0], nodes_values=[0.0, 0.0],
                 nodes_modes=["LEAF", "LEAF"], nodes_truenodeids=[0, 0], nodes_falsenodeids=[0, 0],
                 target_treeids=[0, 1], target_nodeids=[0, 0], target_ids=[0, 0], target_weights=[1.5, 2.0],
                 n_targets=1, aggregate_function="AVERAGE")
    (y,) = run_ours("TreeEnsembleRegressor", [np.array([[3], [4]], np.int64)], attrs, opset=1, domain=ML)
    assert y.tolist() == [[1.75], [1.75]]


def test_tree_regressor_untouched_target_is_zero_and_probit():
    # two targets, only target 0 gets weights: target 1 stays 0 (no base added), as onnxruntime
    attrs = dict(nodes_treeids=[0], nodes_nodeids=[0], nodes_featureids=[0], nodes_values=[0.0],
                 nodes_modes=["LEAF"], nodes_truenodeids=[0], nodes_falsenodeids=[0],
                 target_treeids=[0], target_nodeids=[0], target_ids=[0], target_weights=[0.75],
                 n_targets=2, base_values=[0.1, 0.2])
    (y,) = run_ours("TreeEnsembleRegressor", [np.zeros((1, 1), np.float32)], attrs, opset=3, domain=ML)
    np.testing.assert_allclose(y, [[0.85, 0.0]])
    attrs.update(n_targets=1, base_values=[0.0], post_transform="PROBIT")
    (y,) = run_ours("TreeEnsembleRegressor", [np.zeros((1, 1), np.float32)], attrs, opset=3, domain=ML)
    np.testing.assert_allclose(y, [[0.6744898]], rtol=1e-3)  # probit(0.75) = Phi^-1(0.75)


def test_tree_regressor_matches_onnxruntime_on_uncovered_targets():
    pytest.importorskip("onnxruntime")
    attrs, leaves = forest(4, 3, 3, modes=MODES)
    attrs.update(weights(leaves, "target", 3, every_target=False), n_targets=3, aggregate_function="MIN",
                 base_values=[0.5, -0.5, 0.25])
    x = features(40, 3)
    (ours,) = run_ours("TreeEnsembleRegressor", [x], attrs, opset=3, domain=ML)
    theirs = run_onnxruntime_ml("TreeEnsembleRegressor", x, attrs, [TensorProto.FLOAT], ml_opset=3)[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------ TreeEnsembleClassifier

@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("labels", [dict(classlabels_int64s=[3, 5, 7]), dict(classlabels_strings=["a", "b", "c"])])
def test_tree_classifier_multiclass_matches_reference(transform, labels):
    attrs, leaves = forest(6, 3, 5, modes=MODES[:4])
    attrs.update(weights(leaves, "class", 3, positive=True), post_transform=transform, **labels)
    attrs["base_values"] = [0.1, 0.0, -0.1]
    x = features(50, 5)
    (label, z), (ref_label, ref_z) = ml_both("TreeEnsembleClassifier", x, attrs, 2)
    assert z.dtype == np.float32 and z.shape == (50, 3)
    np.testing.assert_allclose(z, ref_z, rtol=1e-5, atol=1e-6)
    assert label.tolist() == ref_label.tolist()
    assert label.dtype == (object if "classlabels_strings" in labels else np.int64)


@pytest.mark.parametrize("case", ["both_classes", "logistic_base", "positive_none"])
def test_tree_classifier_binary_matches_reference(case):
    attrs, leaves = forest(4, 3, 3)
    if case == "both_classes":  # random forest style: every leaf holds both class weights
        attrs.update(weights(leaves, "class", 2, positive=True))
    else:  # boosting style: one class id, a single score per leaf
        attrs.update(weights(leaves, "class", 1, positive=case == "positive_none", scale=0.2))
        attrs["base_values"] = [0.3]
        attrs["post_transform"] = "LOGISTIC" if case == "logistic_base" else "NONE"
    attrs["classlabels_int64s"] = [0, 1]
    x = features(40, 3)
    (label, z), (ref_label, ref_z) = ml_both("TreeEnsembleClassifier", x, attrs, 2)
    assert z.shape == (40, 2)
    np.testing.assert_allclose(z, ref_z, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(label, ref_label)


def test_tree_classifier_binary_mixed_weights_values():
    # one tree, one leaf scoring -0.4: mixed-sign weights put the threshold at 0 and Z = [-s, s]
    attrs = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                 nodes_values=[0.5, 0, 0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
                 nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                 class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=[0, 0], class_weights=[-0.4, 0.7],
                 classlabels_strings=["neg", "pos"])
    label, z = run_ours("TreeEnsembleClassifier", [np.array([[0.0], [1.0]], np.float32)], attrs,
                        opset=3, n_outputs=2, domain=ML)
    assert label.tolist() == ["neg", "pos"]
    np.testing.assert_allclose(z, [[0.4, -0.4], [-0.7, 0.7]])
    label, z = run_ours("TreeEnsembleClassifier", [np.array([[0.0]], np.float32)],
                        dict(attrs, post_transform="LOGISTIC"), opset=3, n_outputs=2, domain=ML)
    np.testing.assert_allclose(z, [[1 / (1 + np.exp(-0.4)), 1 / (1 + np.exp(0.4))]], rtol=1e-6)


def test_tree_classifier_binary_matches_onnxruntime():
    pytest.importorskip("onnxruntime")
    for positive, transform in [(False, "NONE"), (False, "LOGISTIC"), (True, "NONE"), (True, "LOGISTIC")]:
        attrs, leaves = forest(5, 2, 3)
        attrs.update(weights(leaves, "class", 1, positive=positive, scale=0.3), post_transform=transform,
                     classlabels_int64s=[4, 9])
        x = features(30, 3)
        ours = run_ours("TreeEnsembleClassifier", [x], attrs, opset=3, n_outputs=2, domain=ML)
        theirs = run_onnxruntime_ml("TreeEnsembleClassifier", x, attrs, [TensorProto.INT64, TensorProto.FLOAT],
                                    ml_opset=3)
        np.testing.assert_array_equal(ours[0], theirs[0])
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------- TreeEnsemble

def v5_tree(n_trees, n_features, dtype, member=False):
    """Random depth-2 trees in the ml-opset-5 encoding: ours takes arrays, the reference protos."""
    n = 3 * n_trees
    modes = rng.integers(0, 6, n).astype(np.uint8)
    members = []
    if member:
        modes[::3] = 6
        for _ in range(n_trees):
            # no 0.0 member: the reference evaluator reads a 0.0 member as the end of the set
            members += [float(v) for v in rng.choice([-1.0, 0.5, 1.0, 2.0], 2, replace=False)] + [np.nan]
    true_ids, false_ids, true_leaf, false_leaf = [], [], [], []
    for t in range(n_trees):
        b, lb = 3 * t, 4 * t
        true_ids += [b + 1, lb, lb + 2]
        false_ids += [b + 2, lb + 1, lb + 3]
        true_leaf += [0, 1, 1]
        false_leaf += [0, 1, 1]
    arrays = dict(nodes_modes=modes, nodes_splits=np.round(rng.normal(size=n), 1).astype(dtype),
                  leaf_weights=rng.normal(size=4 * n_trees).astype(dtype))
    if member:
        arrays["membership_values"] = np.array(members, dtype)
    plain = dict(n_targets=2, tree_roots=[3 * t for t in range(n_trees)],
                 nodes_featureids=[int(v) for v in rng.integers(0, n_features, n)],
                 nodes_truenodeids=true_ids, nodes_falsenodeids=false_ids, nodes_trueleafs=true_leaf,
                 nodes_falseleafs=false_leaf, leaf_targetids=[int(v) for v in rng.integers(0, 2, 4 * n_trees)],
                 nodes_missing_value_tracks_true=[int(v) for v in rng.integers(0, 2, n)])
    ours = dict(plain, **arrays)
    ref = dict(plain, **{k: numpy_helper.from_array(v, k) for k, v in arrays.items()})
    return ours, ref


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("agg", [0, 1, 2, 3])
@pytest.mark.parametrize("member", [False, True])
def test_tree_ensemble_matches_reference(dtype, agg, member):
    ours_attrs, ref_attrs = v5_tree(4, 3, dtype, member)
    ours_attrs["aggregate_function"] = ref_attrs["aggregate_function"] = agg
    x = np.round(rng.normal(size=(50, 3)), 1).astype(dtype)
    x[:, 0] = rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0, np.nan], 50)
    (ours,), (ref,) = ml_both("TreeEnsemble", x, ours_attrs, 1, opset=5, ref_attrs=ref_attrs)
    assert ours.dtype == dtype
    if agg in (2, 3):  # a target no leaf reached: the reference keeps +-FLT_MAX, we (and onnxruntime) 0
        ref = np.where(np.abs(ref) > 1e30, 0, ref)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_tree_ensemble_post_transform_and_float16():
    ours_attrs, _ = v5_tree(2, 2, np.float16)
    x = rng.normal(size=(5, 2)).astype(np.float16)
    (raw,) = run_ours("TreeEnsemble", [x], ours_attrs, opset=5, domain=ML)
    (soft,) = run_ours("TreeEnsemble", [x], dict(ours_attrs, post_transform=1), opset=5, domain=ML)
    assert raw.dtype == soft.dtype == np.float16
    e = np.exp(raw.astype(np.float64) - raw.max(axis=1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(axis=1, keepdims=True), rtol=2e-3)


# ------------------------------------------------------------------------------------- errors

def test_tree_errors():
    base = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[1, 0, 0],
                nodes_values=[0.5, 0, 0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
                nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                target_treeids=[0], target_nodeids=[1], target_ids=[0], target_weights=[1.0], n_targets=1)
    with pytest.raises(KernelError, match="does not exist"):
        run_ours("TreeEnsembleRegressor", [None], dict(base, nodes_falsenodeids=[7, 0, 0]), opset=3, domain=ML)
    with pytest.raises(KernelError, match="unknown node mode"):
        run_ours("TreeEnsembleRegressor", [None], dict(base, nodes_modes=["BRANCH_X", "LEAF", "LEAF"]),
                 opset=3, domain=ML)
    with pytest.raises(KernelError, match="cycle"):
        run_ours("TreeEnsembleRegressor", [None], dict(base, nodes_modes=["BRANCH_LEQ"] * 3,
                                                        nodes_truenodeids=[1, 2, 0], nodes_falsenodeids=[1, 2, 0]),
                 opset=3, domain=ML)
    with pytest.raises(KernelError, match="same length|must all have"):
        run_ours("TreeEnsembleRegressor", [None], dict(base, nodes_values=[0.5]), opset=3, domain=ML)
    with pytest.raises(KernelError, match="target/class id"):
        run_ours("TreeEnsembleRegressor", [None], dict(base, target_ids=[3]), opset=3, domain=ML)
    with pytest.raises(KernelError, match="features"):
        run_ours("TreeEnsembleRegressor", [np.zeros((2, 1), np.float32)], base, opset=3, domain=ML)
    with pytest.raises(KernelError, match="aggregate_function"):
        run_ours("TreeEnsembleRegressor", [None], dict(base, aggregate_function="MEDIAN"), opset=3, domain=ML)
    with pytest.raises(KernelError, match="classlabels"):
        run_ours("TreeEnsembleClassifier", [None], dict(base), opset=3, domain=ML, n_outputs=2)
    ours_attrs, _ = v5_tree(1, 1, np.float32, member=True)
    with pytest.raises(KernelError, match="membership_values"):
        run_ours("TreeEnsemble", [None], {k: v for k, v in ours_attrs.items() if k != "membership_values"},
                 opset=5, domain=ML)
    with pytest.raises(KernelError, match="float"):
        run_ours("TreeEnsemble", [np.zeros((1, 1), np.int64)], ours_attrs, opset=5, domain=ML)


# ------------------------------------------------------------------ traversal strategies, layouts

def ragged(n_trees, depth, n_features, modes=("BRANCH_LEQ",), leaf_chance=0.35):
    """Random trees whose leaves sit at mixed depths (1..depth), legacy encoding, nodes listed shuffled
    (root first); returns the nodes_* attributes and the leaves (tree, node)."""
    keys = ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
            "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")
    attrs = {k: [] for k in keys}
    leaves = []
    for t in range(n_trees):
        rows, todo, next_id = [], [(0, 0)], 1
        while todo:
            i, d = todo.pop()
            if d == depth or (d > 0 and rng.random() < leaf_chance):
                rows.append((i, 0, 0.0, "LEAF", 0, 0, 0))
                leaves.append((t, i))
            else:
                rows.append((i, int(rng.integers(n_features)), float(np.round(rng.normal(), 1)), str(rng.choice(modes)),
                             next_id, next_id + 1, int(rng.integers(2))))
                todo += [(next_id, d + 1), (next_id + 1, d + 1)]
                next_id += 2
        for j in [0, *rng.permutation(np.arange(1, len(rows)))]:
            for k, v in zip(keys, (t, *rows[int(j)])):
                attrs[k].append(v)
    return attrs, leaves


@pytest.fixture
def strategy(request, monkeypatch):
    from ort_core.providers.cpu.ops import ml_tree

    monkeypatch.setattr(ml_tree, "FORCE_STRATEGY", request.param)
    return request.param


ALL_STRATEGIES = [None, "walk", "perfect", "gemm", "allnodes", "scalar"]


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, indirect=True)
@pytest.mark.parametrize("depth", [1, 3, 4, 7])
def test_strategies_match_reference_on_mixed_depths(strategy, depth):
    # leaves at every depth: the walk's early exit, the perfect trees' padding, gemm's bit table
    attrs, leaves = ragged(7, depth, 4, modes=MODES[:5])
    attrs.update(weights(leaves, "target", 2), n_targets=2, aggregate_function="SUM")
    x = features(80, 4)
    (ours,), (ref,) = ml_both("TreeEnsembleRegressor", x, attrs, 1)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)
    (one,) = run_ours("TreeEnsembleRegressor", [x[3:4]], attrs, opset=3, domain=ML)
    np.testing.assert_allclose(one, ours[3:4], rtol=1e-6)


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, indirect=True)
def test_strategies_agree_with_membership_and_nan(strategy):
    ours_attrs, ref_attrs = v5_tree(5, 3, np.float32, member=True)
    x = np.round(rng.normal(size=(60, 3)), 1).astype(np.float32)
    x[:, 0] = rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0, np.nan], 60)
    (ours,), (ref,) = ml_both("TreeEnsemble", x, ours_attrs, 1, opset=5, ref_attrs=ref_attrs)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, indirect=True)
def test_strategies_agree_on_one_model(strategy):
    from ort_core.providers.cpu.ops import ml_tree

    attrs, leaves = ragged(9, 4, 5, modes=MODES)
    attrs.update(weights(leaves, "class", 3, positive=True), classlabels_int64s=[2, 4, 6])
    x = features(70, 5)
    x64 = np.round(rng.normal(size=(20, 5)), 1)
    xi = np.round(rng.normal(size=(20, 5)) * 2).astype(np.int64)
    got = [run_ours("TreeEnsembleClassifier", [v], attrs, opset=3, n_outputs=2, domain=ML) for v in (x, x64, xi)]
    forced, ml_tree.FORCE_STRATEGY = ml_tree.FORCE_STRATEGY, None
    auto = [run_ours("TreeEnsembleClassifier", [v], attrs, opset=3, n_outputs=2, domain=ML) for v in (x, x64, xi)]
    ml_tree.FORCE_STRATEGY = forced
    for (label, z), (auto_label, auto_z) in zip(got, auto):
        np.testing.assert_array_equal(label, auto_label)
        np.testing.assert_array_equal(z, auto_z)


@pytest.mark.parametrize("layout", ["tree", "dense", "sparse"])
@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_aggregation_layouts_match_reference(layout, agg):
    from ort_core.ir.graph import Node
    from ort_core.providers.cpu.ops.ml_tree import _legacy_forest

    attrs, leaves = ragged(8, 4, 4)
    if layout == "tree":  # boosting: tree t weights class t % 4 only, one weight per leaf
        w = {k: [] for k in ("target_treeids", "target_nodeids", "target_ids", "target_weights")}
        for t, n in leaves:
            for key, v in zip(w, (t, n, t % 4, float(rng.normal()))):
                w[key].append(v)
    else:  # dense: every leaf weights every class; sparse: one class, others with probability 0.15
        w = weights(leaves, "target", 4)
        if layout == "sparse":  # (the reference evaluator needs a weight at every leaf)
            keep = (rng.random(len(w["target_ids"])) < 0.15) | (np.arange(len(w["target_ids"])) % 4 == 0)
            w = {k: [v for v, kept in zip(vals, keep) if kept] for k, vals in w.items()}
    attrs.update(w, n_targets=4, aggregate_function=agg)
    node = Node("TreeEnsembleRegressor", ["x"], ["y"], dict(attrs), domain=ML, name="t", id=0)
    assert _legacy_forest(node, "target", 4).aggregate.layout == layout
    x = features(90, 4)
    (ours,), (ref,) = ml_both("TreeEnsembleRegressor", x, attrs, 1)
    if agg in ("MIN", "MAX"):  # a target no leaf reached: the reference keeps +-FLT_MAX, we (and onnxruntime) 0
        ref = np.where(np.abs(ref) > 1e30, 0, ref)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", ["tree", "dense", "sparse"])
@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_one_row_in_plain_python_matches_the_batch(layout, agg, monkeypatch):
    """A single sample on plain trees is walked and aggregated in plain Python (Aggregator.one_row) when the
    scalar walk is chosen: each row alone gives what the numpy walk and layouts give it in a batch, NaN rows
    (which take the numpy walk) included."""
    from ort_core.ir.graph import Node
    from ort_core.providers.cpu.ops import ml_tree
    from ort_core.providers.cpu.ops.ml_tree import _legacy_forest

    attrs, leaves = ragged(3, 4, 4)
    if layout == "tree":
        w = {k: [] for k in ("target_treeids", "target_nodeids", "target_ids", "target_weights")}
        for t, n in leaves:
            for key, v in zip(w, (t, n, t % 3, float(rng.normal()))):
                w[key].append(v)
    else:
        w = weights(leaves, "target", 3)
        if layout == "sparse":
            keep = (rng.random(len(w["target_ids"])) < 0.15) | (np.arange(len(w["target_ids"])) % 3 == 0)
            w = {k: [v for v, kept in zip(vals, keep) if kept] for k, vals in w.items()}
    attrs.update(w, n_targets=3, aggregate_function=agg, base_values=[0.5, -1.0, 2.0])
    node = Node("TreeEnsembleRegressor", ["x"], ["y"], dict(attrs), domain=ML, name="t", id=0)
    monkeypatch.setattr(ml_tree, "FORCE_STRATEGY", "scalar")
    ensemble = _legacy_forest(node, "target", 3)
    assert ensemble.one_row and ensemble.aggregate.layout == layout
    x = features(30, 4)
    monkeypatch.setattr(ml_tree, "FORCE_STRATEGY", "walk")
    (batch,) = run_ours("TreeEnsembleRegressor", [x], attrs, opset=3, domain=ML)
    monkeypatch.setattr(ml_tree, "FORCE_STRATEGY", "scalar")
    for k in range(x.shape[0]):
        (one,) = run_ours("TreeEnsembleRegressor", [x[k:k + 1]], attrs, opset=3, domain=ML)
        np.testing.assert_allclose(one, batch[k:k + 1], rtol=1e-6, atol=1e-7)


def test_sparse_classes_match_onnxruntime():
    # several classes, each leaf weighting a few of them: untouched classes stay out of the argmax
    attrs, leaves = ragged(6, 3, 3)
    attrs.update(weights(leaves, "class", 5, every_target=False, positive=True),
                 classlabels_strings=["a", "b", "c", "d", "e"], post_transform="SOFTMAX")
    x = features(50, 3)
    ours = run_ours("TreeEnsembleClassifier", [x], attrs, opset=3, n_outputs=2, domain=ML)
    theirs = run_onnxruntime_ml("TreeEnsembleClassifier", x, attrs, [TensorProto.STRING, TensorProto.FLOAT],
                                ml_opset=3)
    assert ours[0].tolist() == theirs[0].tolist()
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, indirect=True)
def test_empty_and_single_row_batches(strategy):
    attrs, leaves = ragged(4, 3, 3)
    attrs.update(weights(leaves, "class", 3, positive=True), classlabels_int64s=[0, 1, 2])
    label, z = run_ours("TreeEnsembleClassifier", [np.zeros((0, 3), np.float32)], attrs, opset=3, n_outputs=2,
                        domain=ML)
    assert label.shape == (0,) and z.shape == (0, 3) and z.dtype == np.float32
    x = features(10, 3)
    full = run_ours("TreeEnsembleClassifier", [x], attrs, opset=3, n_outputs=2, domain=ML)
    one = run_ours("TreeEnsembleClassifier", [x[7]], attrs, opset=3, n_outputs=2, domain=ML)  # 1-D: one row
    assert one[0].tolist() == full[0][7:8].tolist()
    np.testing.assert_array_equal(one[1], full[1][7:8])
    ours_attrs, _ = v5_tree(3, 2, np.float64)
    (y,) = run_ours("TreeEnsemble", [np.zeros((0, 2))], ours_attrs, opset=5, domain=ML)
    assert y.shape == (0, 2) and y.dtype == np.float64


def test_blocks_and_threads_give_the_same_scores(monkeypatch):
    from ort_core.providers.cpu.ops import ml_tree, ml_tree_walk

    attrs, leaves = ragged(12, 6, 4, modes=MODES[:4])
    attrs.update(weights(leaves, "target", 2), n_targets=2)
    x = features(700, 4)
    (whole,) = run_ours("TreeEnsembleRegressor", [x], attrs, opset=3, domain=ML)
    monkeypatch.setattr(ml_tree, "_BLOCK_PAIRS", 64)  # 5-row blocks
    monkeypatch.setattr(ml_tree_walk, "MIN_PAIRS_PER_THREAD", 16)
    monkeypatch.setattr(ml_tree_walk, "thread_budget", lambda: 3)
    monkeypatch.setattr(ml_tree_walk, "_pool", None)
    (blocked,) = run_ours("TreeEnsembleRegressor", [x], attrs, opset=3, domain=ML)
    np.testing.assert_array_equal(blocked, whole)


def test_thread_budget_is_modest():
    from ort_core.providers.cpu.ops import ml_tree_walk

    assert 1 <= ml_tree_walk.thread_budget() <= ml_tree_walk.MAX_THREADS


def test_walk_stops_at_leaves_and_choose_by_shape():
    from ort_core.providers.cpu.ops import ml_tree_walk
    from ort_core.providers.cpu.ops.ml_tree_table import Forest

    # a chain: each root-to-leaf path ends right away except one of depth 30
    depth = 30
    mode = [0] * depth + [7] * (depth + 1)
    true_next = [depth + i for i in range(depth)] + list(range(depth, 2 * depth + 1))
    false_next = [i + 1 for i in range(depth - 1)] + [2 * depth] + list(range(depth, 2 * depth + 1))
    n = len(mode)
    forest = Forest("chain", [0] * n, [0.5] * n, mode, [False] * n, true_next, false_next, [0],
                    ([depth], [0], [1.0]), 1)
    assert forest.depth == depth and not ml_tree_walk.perfect_fits(forest)
    x = np.full((5000, 1), 0.25, np.float32)  # every sample leaves at the first split
    leaf = ml_tree_walk.leaves(forest, x, "walk")
    assert forest.old[leaf].ravel().tolist() == [depth] * 5000
    assert ml_tree_walk.choose(forest, 5000) == "walk"
