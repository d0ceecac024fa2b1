"""Classic ML side by side: ort-core vs onnxruntime on scikit-learn, LightGBM and XGBoost models.

Builds the set itself on seeded synthetic data (nothing is downloaded): sklearn DecisionTree,
RandomForest and GradientBoosting, LightGBM and XGBoost classifiers and regressors, a DecisionTree
with its ZipMap output, and linear / SVM / scaler pipelines, converted with skl2onnx and onnxmltools.
Each model runs in both runtimes in one process at batch 1 and batch 1000 (``measure.timed``: rounds
alternate the runtimes, median over the runs), outputs are compared, and a Markdown table of the
medians and ratios (ort-core / onnxruntime) is printed and written with ``--markdown PATH`` (as its own
section of that file: ``nox -s bench -- --ml`` writes it into bench/results.md).

``--strategy NAME`` forces ort-core's tree traversal (``walk``, ``perfect``, ``gemm``, ``allnodes``; see
ort_core.providers.cpu.ops.ml_tree) for every tree model, to measure which strategy wins where;
``--ort-threads 1`` runs onnxruntime on one thread, ``--threads 1`` both runtimes. Needs scikit-learn,
lightgbm, xgboost, skl2onnx, onnxmltools and onnxruntime: install them into a venv of their own, not into the test venv.

Usage: python bench/classic_ml.py [MODEL ...] [--runs N] [--batches 1,1000] [--strategy NAME]
[--ort-threads N] [--threads N] [--markdown PATH] [--list]
"""

from __future__ import annotations

# isort: off
import ort_core  # before numpy, as bench_latency does
# isort: on
import argparse
import os
import statistics
import sys
import time
import warnings

import measure
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
N_FEATURES, N_CLASSES, N_TRAIN, SEED = 20, 6, 4000, 0
SECTION = "classic-ml"  # its section of bench/results.md (--markdown)


# ----------------------------------------------------------------------------------------- the models
def _data(kind: str):
    from sklearn.datasets import make_classification, make_regression

    if kind == "clf":
        x, y = make_classification(n_samples=N_TRAIN, n_features=N_FEATURES, n_informative=12, n_redundant=4,
                                   n_classes=N_CLASSES, random_state=SEED)
    else:
        x, y = make_regression(n_samples=N_TRAIN, n_features=N_FEATURES, n_informative=12, noise=5.0,
                               random_state=SEED)
    return x.astype(np.float32), y


def _sk(model, zipmap: bool = False):
    from skl2onnx import to_onnx

    x, y = _data("clf" if _is_classifier(model) else "reg")
    model.fit(x, y)
    final = model.steps[-1][1] if hasattr(model, "steps") else model
    if hasattr(model, "predict_proba"):
        options = {id(model): {"zipmap": zipmap}}
    elif _is_classifier(final):  # skl2onnx 1.20 asks a pipeline's probability-less classifier for zipmap otherwise
        options = {id(final): {"raw_scores": False}}
    else:
        options = None
    return to_onnx(model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})


def _is_classifier(model) -> bool:
    from sklearn.base import is_classifier

    return bool(is_classifier(model))


def _lgbm(classifier: bool):
    import lightgbm
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _data("clf" if classifier else "reg")
    cls = lightgbm.LGBMClassifier if classifier else lightgbm.LGBMRegressor
    model = cls(n_estimators=100, random_state=SEED, verbose=-1).fit(x, y)
    kwargs = {"zipmap": False} if classifier else {}
    return convert_lightgbm(model, initial_types=[("input", FloatTensorType([None, N_FEATURES]))],
                            target_opset=15, **kwargs)


def _xgb(classifier: bool):
    import xgboost
    from onnxmltools import convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _data("clf" if classifier else "reg")
    cls = xgboost.XGBClassifier if classifier else xgboost.XGBRegressor
    model = cls(n_estimators=100, max_depth=6, random_state=SEED).fit(x, y)
    return convert_xgboost(model, initial_types=[("input", FloatTensorType([None, N_FEATURES]))], target_opset=15)


def _builders() -> dict:
    """name -> (group, builder returning an onnx ModelProto)."""
    from sklearn.decomposition import PCA
    from sklearn.ensemble import (
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, StandardScaler
    from sklearn.svm import SVC, SVR, LinearSVC
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    rs = {"random_state": SEED}
    return {
        "DecisionTreeClassifier": ("tree", lambda: _sk(DecisionTreeClassifier(**rs))),
        "DecisionTreeClassifier+ZipMap": ("tree", lambda: _sk(DecisionTreeClassifier(**rs), zipmap=True)),
        "DecisionTreeRegressor": ("tree", lambda: _sk(DecisionTreeRegressor(**rs))),
        "RandomForestClassifier": ("tree", lambda: _sk(RandomForestClassifier(n_estimators=100, **rs))),
        "RandomForestRegressor": ("tree", lambda: _sk(RandomForestRegressor(n_estimators=100, max_depth=12, **rs))),
        "GradientBoostingClassifier": ("tree", lambda: _sk(GradientBoostingClassifier(n_estimators=100, **rs))),
        "GradientBoostingRegressor": ("tree", lambda: _sk(GradientBoostingRegressor(n_estimators=100, **rs))),
        "LGBMClassifier": ("tree", lambda: _lgbm(True)),
        "LGBMRegressor": ("tree", lambda: _lgbm(False)),
        "XGBClassifier": ("tree", lambda: _xgb(True)),
        "XGBRegressor": ("tree", lambda: _xgb(False)),
        "LogisticRegression": ("linear", lambda: _sk(LogisticRegression(max_iter=500))),
        "LogisticRegression+ZipMap": ("linear", lambda: _sk(LogisticRegression(max_iter=500), zipmap=True)),
        "LinearRegression": ("linear", lambda: _sk(LinearRegression())),
        "StandardScaler+LogisticRegression": (
            "pipeline", lambda: _sk(make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)))),
        "MinMaxScaler+PCA+LinearSVC": (
            "pipeline", lambda: _sk(make_pipeline(MinMaxScaler(), PCA(8, random_state=SEED), LinearSVC(**rs)))),
        "StandardScaler+SVC(rbf)": ("svm", lambda: _sk(make_pipeline(StandardScaler(), SVC(**rs)))),
        "StandardScaler+SVR(rbf)": ("svm", lambda: _sk(make_pipeline(StandardScaler(), SVR()))),
    }


def describe_trees(model) -> str:
    """Trees, leaves, largest depth and mean leaf depth of the tree ensembles in ``model``."""
    from onnx import helper

    parts = []
    for node in model.graph.node:
        if not node.op_type.startswith("TreeEnsemble"):
            continue
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        tids, nids = np.asarray(a["nodes_treeids"]), np.asarray(a["nodes_nodeids"])
        modes = [m.decode() if isinstance(m, bytes) else m for m in a["nodes_modes"]]
        tn, fn = np.asarray(a["nodes_truenodeids"]), np.asarray(a["nodes_falsenodeids"])
        depth = {}
        pos = {(t, n): i for i, (t, n) in enumerate(zip(tids.tolist(), nids.tolist()))}
        for t in np.unique(tids).tolist():  # a bench-side description, loops are fine here
            stack = [(pos[(t, int(nids[tids == t].min()))], 0)]
            while stack:
                i, d = stack.pop()
                if modes[i] == "LEAF":
                    depth[i] = d
                else:
                    stack += [(pos[(t, int(tn[i]))], d + 1), (pos[(t, int(fn[i]))], d + 1)]
        d = np.array(list(depth.values()))
        parts.append(f"{np.unique(tids).size} trees, {d.size} leaves, depth {d.max()} (mean {d.mean():.1f})")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------ measuring
def _same(a, b) -> float:
    """Largest |difference| between two outputs (lists of dicts from ZipMap compared key by key);
    inf when the shapes or labels differ."""
    if isinstance(a, list):
        if len(a) != len(b):
            return float("inf")
        a = np.array([[r[k] for k in sorted(r)] for r in a], np.float64).reshape(len(a), -1)
        b = np.array([[r[k] for k in sorted(r)] for r in b], np.float64).reshape(len(b), -1)
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf")
    if a.dtype.kind in "OUS" or b.dtype.kind in "OUS" or a.dtype.kind in "iu":
        return 0.0 if np.array_equal(a, b) else float("inf")
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0


def bench_one(name: str, path: str, ort, batches: list[int], args) -> list[dict]:
    mine = ort_core.SessionOptions()
    mine.intra_op_num_threads = args.threads
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = ort_core.InferenceSession(path, mine)
    so = ort.SessionOptions()
    if args.ort_threads or args.threads:
        so.intra_op_num_threads = args.ort_threads or args.threads
    theirs = ort.InferenceSession(path, so, providers=[measure.CPU])
    name_in = theirs.get_inputs()[0].name
    rng = np.random.default_rng(SEED + 1)
    x_all, _ = _data("clf")  # features of the training distribution (same scale for every model)
    rows = []
    for batch in batches:
        x = x_all[rng.integers(0, x_all.shape[0], batch)] if batch else x_all[:0]
        x = np.ascontiguousarray(x + rng.normal(0, 0.05, x.shape).astype(np.float32))
        feeds = {name_in: x}
        a, b = ours.run(None, feeds), theirs.run(None, feeds)
        diff = max(_same(u, v) for u, v in zip(a, b))
        fns = [lambda f=feeds: ours.run(None, f), lambda f=feeds: theirs.run(None, f)]
        runs, block = measure.plan_runs(fns, args.runs, args.budget, min_runs=5)
        t_ours, t_theirs = measure.timed(fns, runs, block=block, settle=args.settle)
        core_ms, ort_ms = float(np.median(t_ours)), float(np.median(t_theirs))
        rows.append({"model": name, "batch": batch, "core_ms": core_ms, "ort_ms": ort_ms,
                     "ratio": core_ms / ort_ms, "diff": diff, "runs": runs})
        print(f"  batch {batch}: ort-core {core_ms:.3f} ms, onnxruntime {ort_ms:.3f} ms, "
              f"{core_ms / ort_ms:.2f}x, max |diff| {diff:.2g} [{runs} runs]", flush=True)
    return rows


def markdown(rows: list[dict], info: dict, batches: list[int], meta: str) -> str:
    by = {(r["model"], r["batch"]): r for r in rows}
    names = list(dict.fromkeys(r["model"] for r in rows))
    head = "| model | trees |" + "".join(f" ort-core ms (b{b}) | onnxruntime ms (b{b}) | ratio b{b} |"
                                        for b in batches) + " max abs diff |"
    lines = ["## Classic ML (scikit-learn, LightGBM, XGBoost)", "", f"ort-core / onnxruntime ({meta})", "", head,
             "|" + " --- |" * (2 + 3 * len(batches) + 1)]
    for n in names:
        cells = [n, info.get(n, "")]
        diffs = []
        for b in batches:
            r = by.get((n, b))
            if r is None:
                cells += ["-", "-", "-"]
                continue
            cells += [f"{r['core_ms']:.3f}", f"{r['ort_ms']:.3f}", f"{r['ratio']:.2f}x"]
            diffs.append(r["diff"])
        cells.append(f"{max(diffs):.2g}" if diffs else "-")
        lines.append("| " + " | ".join(cells) + " |")
    med = ["**median ratio**", ""]
    for b in batches:
        ratios = [by[(n, b)]["ratio"] for n in names if (n, b) in by]
        med += ["", "", f"**{statistics.median(ratios):.2f}x**" if ratios else "-"]
    lines.append("| " + " | ".join(med) + " | |")
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="model names (default: all, see --list)")
    ap.add_argument("--runs", type=int, default=30, help="timed runs per runtime and batch at most (default 30)")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of timed runs per model and batch")
    ap.add_argument("--settle", type=float, default=0.1, help="pause before each runtime's block (s)")
    ap.add_argument("--batches", default="1,1000", help="batch sizes, comma separated (default 1,1000)")
    ap.add_argument("--strategy", default=None, help="force ort-core's tree strategy (walk, perfect, gemm, allnodes)")
    ap.add_argument("--ort-threads", type=int, default=0, help="onnxruntime intra-op threads (0: its default)")
    ap.add_argument("--threads", type=int, default=0, help="both runtimes' intra-op threads (0: their defaults)")
    ap.add_argument("--markdown", default=None, help="write the Markdown table there")
    ap.add_argument("--list", action="store_true", help="list the models and stop")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    builders = _builders()
    if args.list:
        print("\n".join(f"{n} ({g})" for n, (g, _) in builders.items()))
        return
    import onnxruntime as ort

    ort.set_default_logger_severity(3)  # converters declare [1]-shaped labels: onnxruntime warns every run
    if args.strategy:
        from ort_core.providers.cpu.ops import ml_tree

        ml_tree.FORCE_STRATEGY = args.strategy
    batches = [int(b) for b in args.batches.split(",")]
    names = args.models or list(builders)
    unknown = [n for n in names if n not in builders]
    if unknown:
        sys.exit(f"unknown model(s) {unknown}; see --list")
    meta = (f"ort-core {ort_core.__version__}, onnxruntime {ort.__version__}"
            f"{' on ' + str(args.ort_threads) + ' thread(s)' if args.ort_threads else ''}"
            f"{', both on ' + str(args.threads) + ' thread(s)' if args.threads else ''}, "
            f"{measure.machine()}, median of up to {args.runs} runs"
            f"{', tree strategy ' + args.strategy if args.strategy else ''}")
    print(meta, flush=True)
    rows, info = [], {}
    t0 = time.perf_counter()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = builders[n][1]()
                info[n] = describe_trees(model)
                path = os.path.join(tmp, f"{n}.onnx")
                with open(path, "wb") as f:
                    f.write(model.SerializeToString())
                print(f"{n}: {info[n]}", flush=True)
                rows += bench_one(n, path, ort, batches, args)
            except Exception as e:  # noqa: BLE001 - one broken model must not cost the whole run
                print(f"{n}: failed: {type(e).__name__}: {e}", flush=True)
    text = markdown(rows, info, batches, meta)
    measure.publish_section(text, args.markdown, SECTION, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
