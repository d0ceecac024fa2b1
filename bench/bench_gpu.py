"""ort-core's CUDA provider side by side with onnxruntime-gpu's, in one process, on the same models and inputs.

Per model and batch (1 and 32 by default; the CPU providers are timed at batch 1 only, and give the reference
outputs at every batch): where ort-core places the nodes (how many run on the GPU), the median latency of each
configuration (ort-core CUDA plain and with CUDA graphs, float32 and TF32; onnxruntime's CUDA provider likewise
when onnxruntime-gpu is installed; the CPU providers of both as the floor a GPU must beat), each configuration's
ratio to onnxruntime's matching one, and the largest difference from ort-core's CPU provider. Timed as the
latency bench times (``measure.timed``): rounds alternate the configurations with a pause before each, so the
machine's ups and downs fall on all alike and no thread pool still spinning from the previous configuration is
timed against the next. onnxruntime is the yardstick only.

  python bench/bench_gpu.py [MODEL ...] [--batches 1,32] [--runs N] [--markdown PATH]

Models: ``mlp`` (MatMul/Add/Relu, built here), ``bert`` and ``gpt2`` (the bench's stacks), ``resnet50``,
``densenet121`` and ``inception_v2`` (onnx's light models), or any name ``bench/models.py`` knows. Needs a
GPU; without one it says why.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402
import models as bench_models  # noqa: E402

import ort_core  # noqa: E402

CUDA = "CUDAExecutionProvider"


def mlp(batch: int, width: int = 1024, layers: int = 4) -> onnx.ModelProto:
    """``layers`` x (MatMul, Add, Relu) on (batch, width), seeded weights."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        inits += [numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                                          f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(width).astype(np.float32) * 0.1, f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"])]
        x = f"r{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (batch, width))],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, (batch, width))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10  # what onnxruntime releases of today read (onnx's newest may be newer)
    return model


def model_path(name: str, batch: int, folder: str) -> str:
    """The model file at ``batch``: built at that batch (mlp, bert, gpt2), or a batch-1 file whose inputs'
    and outputs' first dimension is rewritten, and whose Reshape targets starting with 1 start with 0 (copy
    the input's batch) instead; a model with the batch baked in elsewhere fails, and its row says why."""
    path = os.path.join(folder, f"{name}_b{batch}.onnx")
    if name == "mlp":
        onnx.save(mlp(batch), path)
    elif name in ("bert", "gpt2"):
        onnx.save(getattr(bench_models, name)(batch=batch), path)
    elif batch == 1:
        return bench_models.resolve(name, folder)
    else:
        model = onnx.load(bench_models.resolve(name, folder))
        for value in [*model.graph.input, *model.graph.output]:
            dims = value.type.tensor_type.shape.dim
            if dims and dims[0].HasField("dim_value") and dims[0].dim_value == 1:
                dims[0].dim_value = batch
        del model.graph.value_info[:]
        inits = {t.name: t for t in model.graph.initializer}
        for node in model.graph.node:  # a Reshape to [1, ...]: the batch baked in; 0 copies the input's instead
            target = inits.get(node.input[1]) if node.op_type == "Reshape" and len(node.input) > 1 else None
            if target is not None:
                shape = numpy_helper.to_array(target).copy()
                if shape.ndim == 1 and shape.size and shape[0] == 1:
                    shape[0] = 0
                    target.CopyFrom(numpy_helper.from_array(shape, target.name))
        onnx.save(model, path)
    return path


def configurations(ort_gpu: bool, with_cpu: bool = True) -> list[tuple[str, str, list]]:
    """(label, runtime, providers) of every configuration measured (the CPU providers only ``with_cpu``)."""
    out = []
    for tf32 in ("0", "1"):
        for graph in ("0", "1"):
            label = f"ort-core CUDA {'tf32' if tf32 == '1' else 'fp32'}{' graph' if graph == '1' else ''}"
            out.append((label, "ort-core", [(CUDA, {"use_tf32": tf32, "enable_cuda_graph": graph}),
                                            "CPUExecutionProvider"]))
            if ort_gpu:
                out.append((label.replace("ort-core", "onnxruntime"), "onnxruntime",
                            [(CUDA, {"use_tf32": tf32, "enable_cuda_graph": graph}), "CPUExecutionProvider"]))
    if with_cpu:
        out.append(("ort-core CPU", "ort-core", ["CPUExecutionProvider"]))
        out.append(("onnxruntime CPU", "onnxruntime", ["CPUExecutionProvider"]))
    return out


def session(runtime: str, path: str, providers: list):
    if runtime == "onnxruntime":
        import onnxruntime

        so = onnxruntime.SessionOptions()
        so.log_severity_level = 3
        return onnxruntime.InferenceSession(path, so, providers=providers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort_core.InferenceSession(path, providers=providers)


def measure_model(name: str, batch: int, folder: str, runs: int, ort_gpu: bool) -> list[dict]:
    path = model_path(name, batch, folder)
    rows, sessions = [], []
    for label, runtime, providers in configurations(ort_gpu, with_cpu=batch == 1):
        try:
            s = session(runtime, path, providers)
        except Exception as e:  # noqa: BLE001 - reported in the table, the others still run
            rows.append({"label": label, "error": f"{type(e).__name__}: {e}"[:160]})
            continue
        sessions.append((label, runtime, s))
    feeds = bench_models.feeds(sessions[0][2].get_inputs(), seed=0)
    cpu = next((s for label, _, s in sessions if label == "ort-core CPU"), None)
    cpu = cpu or session("ort-core", path, ["CPUExecutionProvider"])  # batch > 1: one CPU run, the reference
    reference = cpu.run(None, feeds)
    results = {}
    for label, _, s in sessions:  # warm-up: records, captures graphs, picks cuBLAS algorithms
        for _ in range(3):
            results[label] = s.run(None, feeds)
    # measure.timed: rounds over the configurations, a pause before each (so that onnxruntime's spinning CPU
    # threads are not timed against the next configuration), blocks of consecutive timed runs
    fns = [lambda s=s: s.run(None, feeds) for _, _, s in sessions]
    runs, block = measure.plan_runs(fns, runs, budget_s=20.0)
    times = dict(zip([label for label, _, _ in sessions], measure.timed(fns, runs, block=block)))
    placed = ""
    for label, runtime, s in sessions:
        if runtime == "ort-core" and "CUDA" in label and not placed:
            on_gpu, total, _ = measure.placed(s, CUDA)
            placed = f"{on_gpu}/{total}"
    for label, runtime, _ in sessions:
        diff = max(float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(e, np.float64))) /
                         max(float(np.max(np.abs(e))), 1e-30)) for g, e in zip(results[label], reference))
        rows.append({"label": label, "median_ms": float(np.median(times[label])), "rel_diff": diff,
                     "placed": placed if runtime == "ort-core" and "CUDA" in label else ""})
    by_label = {r["label"]: r for r in rows if "median_ms" in r}
    for r in rows:
        twin = by_label.get(r["label"].replace("ort-core", "onnxruntime"))
        if "median_ms" in r and r["label"].startswith("ort-core") and twin is not None:
            r["ratio"] = r["median_ms"] / twin["median_ms"]
    return rows


def markdown(all_rows: dict, device: str, ort_gpu: str) -> str:
    lines = [f"GPU: {device}. onnxruntime-gpu: {ort_gpu}.", "",
             "| model | batch | configuration | nodes on GPU | median ms | ratio to onnxruntime "
             "| max rel diff vs CPU |",
             "|---|---|---|---|---|---|---|"]
    for (name, batch), rows in all_rows.items():
        for r in rows:
            if "error" in r:
                lines.append(f"| {name} | {batch} | {r['label']} | | error: {r['error']} | | |")
                continue
            ratio = f"{r['ratio']:.2f}x" if "ratio" in r else ""
            lines.append(f"| {name} | {batch} | {r['label']} | {r['placed']} | {r['median_ms']:.3f} | {ratio} | "
                         f"{r['rel_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=["mlp", "bert", "gpt2", "resnet50", "densenet121", "inception_v2"])
    ap.add_argument("--batches", default="1,32", help="batch sizes (the CPU providers are timed at batch 1 only)")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--markdown", default=None, help="write the table here")
    args = ap.parse_args(argv)
    from ort_ep_cuda import runtime

    found, reason = runtime.devices()
    if reason:
        print(f"{CUDA} is unavailable here: {reason}")
        return 1
    try:
        import onnxruntime

        ort_gpu = CUDA in onnxruntime.get_available_providers()
        ort_text = onnxruntime.__version__ if ort_gpu else f"not installed (onnxruntime {onnxruntime.__version__} " \
                                                             "has no CUDA provider here)"
    except ImportError:
        ort_gpu, ort_text = False, "not installed"
    all_rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            for batch in [int(b) for b in args.batches.split(",")]:
                print(f"{name} batch {batch} ...", flush=True)
                try:
                    all_rows[(name, batch)] = measure_model(name, batch, folder, args.runs, ort_gpu)
                except Exception as e:  # noqa: BLE001 - one model must not cost the whole run
                    all_rows[(name, batch)] = [{"label": "(all)", "error": f"{type(e).__name__}: {e}"[:160]}]
    text = markdown(all_rows, f"{found[0].name} (sm_{found[0].arch})", ort_text)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
