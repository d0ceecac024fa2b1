"""Every quantized model on every provider: the bench models and PaddleOCR v4's recognizer and detector (from the
real-model set, ``nox -s models``; skipped when not fetched), quantized by ort_core.quantization and by
onnxruntime.quantization, each run on ort-core's CPU provider and on every installed plugin (with the CPU
provider as fallback), and on onnxruntime.

The quantization issue asks that each of them run on every provider that claims part of it, and that both
runtimes agree. CNNs are quantized static QDQ per channel, after ``quant_pre_process`` (the bench models on
seeded inputs, the OCR models on rendered text); BERT dynamically (``quantize_dynamic``, int8 weights). Each
row compares a provider's outputs with the CPU provider's on the same file, over a few held-out inputs:
``max diff`` is the largest absolute difference over the largest absolute reference value; ``steps`` is that
difference in units of the output's quantization step where the model ends in a DequantizeLinear (a static
QDQ model); cosine and argmax agreement along the last axis; and the cosine of the run's outputs with the float
model's, beside onnxruntime's int8 run of the same file. A row passes when the run succeeds and its outputs
are within 2 steps of the CPU provider's, or have a cosine of at least 0.999 with them, or are about as close
to float32 as onnxruntime's int8 results (1 - cosine at most 1.1 times onnxruntime's): int8 kernels round
differently (a value one step apart is expected, and a sensitive model such as the OCR recognizer carries it
through many layers: onnxruntime with and without its graph optimizations differs that much on it too), and a
provider that runs the dequantized graph in float (OpenVINO by default) differs by design; a wrong kernel
fails all three. No timing here: ``bench_quant.py`` times them.

  python bench/quant_providers.py [MODEL ...] [--no-qnn] [--markdown PATH]   (default: bench/results_quant.md's
  "providers" section)
"""

from __future__ import annotations

# isort: off
import ort_core  # before numpy, as the other benches import it
# isort: on
import argparse
import os
import sys
import tempfile
import time
import traceback

import bench_quant
import measure
import models
import numpy as np
import onnx
import quant_accuracy as qa
from bench_latency import quiet_session
from real_models_lib import first_line

SECTION = "providers"
HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = ["resnet18_seeded", "squeezenet", "resnet50", "bert"]
OCR = {"ppocrv4_rec": qa.text_lines, "ppocrv4_det": qa.pages}
CPU = "CPUExecutionProvider"
# (label, provider, options): OpenVINO twice, with its default (QDQ folded to float) and with the QDQ graph
PLUGINS = [("OpenVINO", "OpenVINOExecutionProvider", {}),
           ("OpenVINO qdq", "OpenVINOExecutionProvider", {"enable_qdq_optimizer": "true"}),
           ("oneDNN", "DnnlExecutionProvider", {}), ("Example", "ExampleExecutionProvider", {}),
           ("QNN", "QNNExecutionProvider", {})]
MIN_COSINE, MAX_STEPS, SLACK = 0.999, 2.0, 1.1


def _data(model: str, inputs) -> tuple[list[dict], list[dict]]:
    """(calibration feeds, held-out feeds)."""
    if model in OCR:
        make = OCR[model]
        return [{"x": x} for x in make(4, seed=1)], [{"x": x} for x in make(2, seed=2)]
    return ([models.feeds(inputs, seed=100 + k) for k in range(4)],
            [models.feeds(inputs, seed=1000 + k) for k in range(2)])


def _source(model: str, folder: str) -> str:
    if model in OCR:
        path = os.path.join(qa.MODELS, f"{model}.onnx")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not fetched: run `nox -s models` first")
        return path
    return bench_quant.at_least_opset13(models.resolve(model, folder), folder)


def _initializers_not_inputs(path: str, folder: str) -> str:
    proto = onnx.load(path)
    inits = {t.name for t in proto.graph.initializer}
    keep = [i for i in proto.graph.input if i.name not in inits]
    del proto.graph.input[:]
    proto.graph.input.extend(keep)
    out = os.path.join(folder, os.path.basename(path).removesuffix(".onnx") + ".inputs.onnx")
    onnx.save(proto, out)
    return out


def output_steps(path: str) -> list[float | None]:
    """Per graph output, the scale of the DequantizeLinear making it (a constant), else None."""
    proto = onnx.load(path, load_external_data=False)
    inits = {t.name: t for t in proto.graph.initializer}
    made = {o: n for n in proto.graph.node for o in n.output}
    steps = []
    for out in proto.graph.output:
        n = made.get(out.name)
        scale = inits.get(n.input[1]) if n is not None and n.op_type == "DequantizeLinear" else None
        steps.append(float(onnx.numpy_helper.to_array(scale).max()) if scale is not None else None)
    return steps


def _cosine(a_runs: list[list[np.ndarray]], b_runs: list[list[np.ndarray]]) -> float:
    a = np.concatenate([x.astype(np.float64).ravel() for outs in a_runs for x in outs])
    b = np.concatenate([x.astype(np.float64).ravel() for outs in b_runs for x in outs])
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norms) if norms > 0 else float(np.array_equal(a, b))


def compare(ref: list[list[np.ndarray]], got: list[list[np.ndarray]], steps) -> dict:
    a = np.concatenate([x.astype(np.float64).ravel() for outs in ref for x in outs])
    b = np.concatenate([x.astype(np.float64).ravel() for outs in got for x in outs])
    top = float(np.abs(a).max(initial=0.0))
    diff = float(np.abs(a - b).max(initial=0.0))
    cos = _cosine(ref, got)
    same = [np.mean(np.argmax(x, -1) == np.argmax(y, -1)) for r, g in zip(ref, got) for x, y in zip(r, g) if x.ndim]
    worst_steps = None
    if all(s for s in steps):
        worst_steps = max(float(np.abs(x.astype(np.float64) - y).max(initial=0.0)) / s
                          for r, g in zip(ref, got) for x, y, s in zip(r, g, steps))
    return {"rel": diff / top if top else diff, "cos": cos, "argmax": float(np.mean(same)) if same else 1.0,
            "steps": worst_steps}


def _session(path: str, providers):
    return quiet_session(path, providers=providers)


def _run(path: str, held: list[dict], provider: str | None, options: dict) -> tuple[list, str]:
    """(outputs per held-out feed, the provider's share of the nodes) on ``provider`` with the CPU provider as
    fallback; None: onnxruntime's CPU provider."""
    if provider is None:
        import onnxruntime

        so = onnxruntime.SessionOptions()
        so.log_severity_level = 3
        theirs = onnxruntime.InferenceSession(path, so, providers=[CPU])
        return [theirs.run(None, f) for f in held], "-"
    sess = _session(path, [(provider, options), CPU])
    on, total, _ = measure.placed(sess, provider)
    return [sess.run(None, f) for f in held], f"{on}/{total}"


def rows_for(model: str, args, folder: str) -> list[dict]:
    import onnxruntime.quantization as ortq

    from ort_core import quantization as coreq

    path = _source(model, folder)
    float_session = _session(path, [CPU])
    calib, held = _data(model, float_session.get_inputs())
    floats = [float_session.run(None, f) for f in held]
    available = set(ort_core.get_available_providers())
    plugins = [p for p in PLUGINS if p[1] in available and not (args.no_qnn and p[1] == "QNNExecutionProvider")]
    rows = []
    for quantizer, module, tag in (("ort_core", coreq, "core"), ("onnxruntime", ortq, "ort")):
        try:
            try:
                qpath = bench_quant.quantize(model, path, folder, calib, module, tag)
            except ValueError as e:
                if "missing from input feed" not in str(e):
                    raise
                # onnxruntime's calibration feeds only the real inputs: an old-IR model listing its initializers
                # as graph inputs needs them dropped from the inputs first (ort_core's quantizer does not)
                print(f"{model}: {quantizer} needs the initializers dropped from the graph inputs", flush=True)
                qpath = bench_quant.quantize(model, _initializers_not_inputs(path, folder), folder, calib, module, tag)
        except Exception as e:  # noqa: BLE001 - the quantizer itself refused the model: said, not counted
            rows.append({"model": model, "quantizer": quantizer, "provider": "(quantizing)", "ok": None,
                         "error": f"the quantizer failed: {first_line(e)[:200]}"})
            print(_line(rows[-1]), flush=True)
            continue
        steps = output_steps(qpath)
        int8_session = _session(qpath, [CPU])
        ref = [int8_session.run(None, f) for f in held]
        ort_int8, _ = _run(qpath, held, None, {})
        bar = _cosine(floats, ort_int8)  # onnxruntime's int8 against float32: the quality to keep
        for label, provider, options in [("onnxruntime", None, {}), *plugins]:
            t0 = time.perf_counter()
            row = {"model": model, "quantizer": quantizer, "provider": label}
            try:
                got, placed = (ort_int8, "-") if provider is None else _run(qpath, held, provider, options)
            except Exception as e:  # noqa: BLE001 - a failure is this row's result
                row.update(ok=False, placed="", error=first_line(e)[:200])
                if args.verbose:
                    traceback.print_exc()
            else:
                row.update(placed=placed, **compare(ref, got, steps), cos_f32=_cosine(floats, got), bar=bar)
                row["ok"] = (row["steps"] is not None and row["steps"] <= MAX_STEPS) or row["cos"] >= MIN_COSINE \
                    or 1 - row["cos_f32"] <= SLACK * (1 - bar) + 1e-4
            row["s"] = time.perf_counter() - t0
            rows.append(row)
            print(_line(row), flush=True)
    return rows


def _line(r: dict) -> str:
    if "error" in r:
        mark = "—" if r["ok"] is None else "✗"
        return f"| {r['model']} | {r['quantizer']} | {r['provider']} | | {mark} {r['error']} | | | | | |"
    steps = "" if r["steps"] is None else f"{r['steps']:.1f}"
    mark = "✓" if r["ok"] else "✗"
    return (f"| {r['model']} | {r['quantizer']} | {r['provider']} | {r['placed']} | {mark} | {r['rel']:.2e} | {steps} "
            f"| {r['cos']:.6f} | {r['argmax']:.3f} | {r['cos_f32']:.5f} [{r['bar']:.5f}] |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=BENCH + list(OCR))
    ap.add_argument("--no-qnn", action="store_true", help="leave out QNN (its HTP simulator is slow)")
    ap.add_argument("--verbose", action="store_true", help="print the traceback of a failed run")
    ap.add_argument("--markdown", default=os.path.join(HERE, "results_quant.md"))
    args = ap.parse_args(argv)
    t0, rows, skipped = time.perf_counter(), [], []
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models:
            try:
                rows += rows_for(model, args, folder)
            except FileNotFoundError as e:
                skipped.append(f"{model}: {e}")
                print(skipped[-1], flush=True)
    bad = [r for r in rows if r["ok"] is False]
    done = [r for r in rows if r["ok"] is not None]
    text = "\n".join([
        "## Every quantized model on every provider", "",
        "`python bench/quant_providers.py`: each model quantized by both quantizers (static QDQ per channel, BERT "
        "dynamic), run on onnxruntime and on each installed plugin of ort-core (CPU provider as fallback), compared "
        "with ort-core's CPU provider on the same file. placed: the plugin's nodes / all nodes; max diff: over the "
        "largest reference value; steps: in output quantization steps (static QDQ models); cosine with float32: of "
        "the run's outputs with the float model's (in brackets, onnxruntime's int8 run of the same file). A row "
        f"passes (✓) when it runs and is within {MAX_STEPS:g} steps of the CPU provider, or has a cosine of at "
        f"least {MIN_COSINE} with it, or is about as close to float32 as onnxruntime's int8 (1 - cosine at most "
        f"{SLACK} times onnxruntime's); —: the "
        "quantizer itself failed on the model (onnxruntime's pre-processing or calibration), so there is nothing "
        "to run.", "",
        "| model | quantized by | run on | placed | | max diff | steps | cosine | argmax | cosine with float32 "
        "[onnxruntime's int8] |", "|---|---|---|---|---|---|---|---|---|---|", *(_line(r) for r in rows), "",
        f"{len(done) - len(bad)} of {len(done)} runs pass." + "".join(f"\nNot run: {s}" for s in skipped)]) + "\n"
    measure.publish_section(text, args.markdown, SECTION, time.perf_counter() - t0)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
