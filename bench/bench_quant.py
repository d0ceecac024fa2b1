"""int8 side by side: the bench models quantized with ort_core.quantization, timed on onnxruntime and on
ort-core's CPU provider at float32 and int8, in one process and alternating rounds; with the OpenVINO or oneDNN
providers installed, also each of them at float32 and at int8 (OpenVINO with ``enable_qdq_optimizer=true``: the
whole QDQ graph), and ort-core's best of them against the issue's targets.

CNNs (resnet18_seeded, the light resnet50 and squeezenet, converted from opset 9 to 13 first: per-channel
DequantizeLinear needs 13) are quantized static QDQ, weights int8 per channel, activations uint8,
calibrated on seeded inputs; BERT dynamically (quantize_dynamic: int8 weights, activations
quantized at run time). Per model: median and p90 latency of the four, the ratios the quantization issue
sets targets for, cosine similarity and argmax agreement (along the last axis) of each runtime's int8
outputs with its float32 outputs on held-out inputs, ort-core int8 against onnxruntime int8, and both
files' sizes. The 1-minute load average is printed before and after: above the core count, other work
shared the cores and the medians are noisier (the p90/median spread says by how much). The light models'
weights are constants (every channel alike): their outputs are uniform, so their agreement columns say
nothing (an all-zero int8 output has no cosine: nan); the seeded ResNet-18 and BERT carry that signal.

Usage: python bench/bench_quant.py [MODEL ...] [--runs N] [--budget S] [--quick] [--markdown PATH]
(also ``python bench/bench_latency.py --quant ...``, hence ``nox -s bench -- --quant``).
"""

from __future__ import annotations

# isort: off
import ort_core  # before numpy: ort-core picks numpy's BLAS kernels as it would for a user (ort_core.blas)
# isort: on
import argparse
import os
import tempfile
import time
import warnings

import measure
import models
import numpy as np
import onnx
from onnx import version_converter

from ort_core import quantization as q

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = ["resnet18_seeded", "squeezenet", "resnet50", "bert"]
OPENVINO = "OpenVINOExecutionProvider"
# plugin providers timed when installed: (key, provider, label, options for the int8 file)
PLUGINS = [("ov", OPENVINO, "OpenVINO", {"enable_qdq_optimizer": "true"}),  # the whole QDQ graph to OpenVINO
           ("dnnl", "DnnlExecutionProvider", "oneDNN", {})]
CALIBRATION, HELD_OUT = 8, 16


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=DEFAULT)
    ap.add_argument("--quant", action="store_true", help=argparse.SUPPRESS)  # as passed on by bench_latency.py
    ap.add_argument("--runs", type=int, default=None, help="timed runs per runtime (default 20)")
    ap.add_argument("--budget", type=float, default=None, help="seconds of timed runs per model (default 30)")
    ap.add_argument("--quick", action="store_true", help="fewer runs (a rough look)")
    ap.add_argument("--markdown", default=os.path.join(HERE, "results_quant.md"), help="where the Markdown goes")
    args = ap.parse_args(argv)
    args.runs = args.runs or (6 if args.quick else 20)
    args.budget = args.budget if args.budget is not None else (8.0 if args.quick else 30.0)
    return args


class _Reader:
    """Calibration feeds (duck-typed CalibrationDataReader)."""

    def __init__(self, feeds: list[dict]) -> None:
        self.feeds = iter(feeds)

    def get_next(self):
        return next(self.feeds, None)


def quantize(model: str, path: str, folder: str, calibration: list[dict], module=q, tag: str = "int8") -> str:
    """The int8 model's path, quantized by ``module`` (ort_core.quantization or onnxruntime.quantization):
    static QDQ per channel (int8 weights, uint8 activations) on the ``calibration`` feeds for CNNs, after the
    pre-processing step where it succeeds; dynamic (int8 weights) for transformers."""
    stem = os.path.join(folder, f"{os.path.basename(path).removesuffix('.onnx')}_{tag}")
    out = f"{stem}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if model in models.TRANSFORMERS:
            module.quantize_dynamic(path, out, weight_type=module.QuantType.QInt8)
            return out
        pre = f"{stem}_pre.onnx"
        here = os.getcwd()
        os.chdir(folder)  # onnxruntime's pre-processing leaves a temporary file in the working directory
        try:
            module.quant_pre_process(path, pre)
        except Exception as e:  # noqa: BLE001 - (PP-OCR's models) quantized without it, as users then do
            print(f"{model}: {module.__name__}.quant_pre_process failed ({type(e).__name__}: {e}); "
                  "quantizing the model as it is", flush=True)
            pre = path
        finally:
            os.chdir(here)
        module.quantize_static(pre, out, _Reader(calibration), quant_format=module.QuantFormat.QDQ,
                               per_channel=True, weight_type=module.QuantType.QInt8,
                               activation_type=module.QuantType.QUInt8)
    return out


def agreement(fp32: list[np.ndarray], int8: list[np.ndarray]) -> tuple[float, float]:
    """(cosine similarity, share of equal argmax along the last axis) over all outputs of all inputs."""
    a = np.concatenate([x.astype(np.float64).ravel() for x in fp32])
    b = np.concatenate([x.astype(np.float64).ravel() for x in int8])
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    cos = float(a @ b / norms) if norms > 0 else float("nan")  # an all-zero output has no direction
    same = [np.mean(np.argmax(x, axis=-1) == np.argmax(y, axis=-1)) for x, y in zip(fp32, int8) if x.ndim]
    return cos, float(np.mean(same))


def _quiet(factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return factory()


def at_least_opset13(path: str, folder: str) -> str:
    """The model itself, or for an older opset (the light models are opset 9) its conversion to 13, which
    per-channel DequantizeLinear (``axis``) needs; float32 and int8 are then timed from the same opset."""
    proto = onnx.load(path)
    if next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13) >= 13:
        return path
    out = os.path.join(folder, f"{os.path.basename(path).removesuffix('.onnx')}_opset13.onnx")
    onnx.save(version_converter.convert_version(proto, 13), out)
    return out


def bench_model(model: str, ort, args, folder: str) -> dict:
    path = at_least_opset13(models.resolve(model, folder), folder)
    probe = _quiet(lambda: ort_core.InferenceSession(path))
    inputs = probe.get_inputs()
    del probe
    t0 = time.perf_counter()
    qpath = quantize(model, path, folder, [models.feeds(inputs, seed=100 + k) for k in range(CALIBRATION)])
    r = {"name": model, "quantize_s": time.perf_counter() - t0, "mode": "dynamic" if model in models.TRANSFORMERS
         else "static QDQ per-channel", "mb_fp32": os.path.getsize(path) / 2 ** 20,
         "mb_int8": os.path.getsize(qpath) / 2 ** 20}
    sessions = {"ort fp32": lambda: ort.InferenceSession(path, providers=[measure.CPU]),
                "ort int8": lambda: ort.InferenceSession(qpath, providers=[measure.CPU]),
                "core fp32": lambda: ort_core.InferenceSession(path, providers=["CPUExecutionProvider"]),
                "core int8": lambda: ort_core.InferenceSession(qpath, providers=["CPUExecutionProvider"])}
    for key, provider, _, options in PLUGINS:
        if provider in ort_core.get_available_providers():
            sessions[f"{key} fp32"] = lambda p=provider: ort_core.InferenceSession(
                path, providers=[p, "CPUExecutionProvider"])
            sessions[f"{key} int8"] = lambda p=provider, o=options: ort_core.InferenceSession(
                qpath, providers=[(p, o), "CPUExecutionProvider"])
    made = {k: _quiet(f) for k, f in sessions.items()}
    held = [models.feeds(inputs, seed=1000 + k) for k in range(HELD_OUT)]
    outs = {k: [o for f in held for o in s.run(None, f)] for k, s in made.items()}
    r["cos_core"], r["argmax_core"] = agreement(outs["core fp32"], outs["core int8"])
    r["cos_ort"], r["argmax_ort"] = agreement(outs["ort fp32"], outs["ort int8"])
    r["cos_core_ort"], r["argmax_core_ort"] = agreement(outs["ort int8"], outs["core int8"])
    r["maxdiff_int8"] = max(float(np.abs(a - b).max()) for a, b in zip(outs["core int8"], outs["ort int8"]))
    for key, provider, _, _ in PLUGINS:
        if f"{key} int8" in outs:
            r[f"cos_{key}_ort"], r[f"argmax_{key}_ort"] = agreement(outs["ort int8"], outs[f"{key} int8"])
            r[f"{key}_placed"] = _placed(made[f"{key} int8"], provider)
    feeds = held[0]
    fns = [lambda s=s: s.run(None, feeds) for s in made.values()]
    runs, block = measure.plan_runs(fns, args.runs, args.budget, min_runs=3 if args.quick else 7)
    times = measure.timed(fns, runs, block=block)
    r["runs"] = runs
    for k, t in zip(made, times):
        r[k], r[k + " p90"] = measure.summary(t)
        r[k + " min"] = float(np.min(t))
    return r


def _placed(sess, provider: str) -> str:
    on, total, parts = measure.placed(sess, provider)
    return f"{on}/{total} nodes in {parts} subgraph(s)"


def _best(r: dict, precision: str) -> str:
    """The key of ort-core's fastest configuration at ``precision`` (the CPU provider or a plugin)."""
    keys = ["core"] + [key for key, *_ in PLUGINS if f"{key} {precision}" in r]
    return min((f"{k} {precision}" for k in keys), key=lambda k: r[k])


def _label(key: str) -> str:
    return {"core": "CPU", **{k: label for k, _, label, _ in PLUGINS}}[key.split()[0]]


def markdown(rows: list[dict], meta: dict) -> str:
    lines = ["# int8 on ort-core and onnxruntime (CPU providers)\n",
             f"ort-core {meta['core']} vs onnxruntime {meta['ort']}, {meta['machine']}; load average "
             f"{meta['load'][0]:.2f} before, {meta['load'][1]:.2f} after; medians of {meta['runs']} runs in "
             "alternating rounds.\n",
             "| model | quantized | ort fp32 ms | ort int8 ms | core fp32 ms | core int8 ms | core int8 / core fp32 "
             "| core int8 / ort int8 | ort int8 / ort fp32 | p90/median (core int8) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['mode']} | {r['ort fp32']:.2f} | {r['ort int8']:.2f} | {r['core fp32']:.2f} "
                     f"| {r['core int8']:.2f} | {r['core int8'] / r['core fp32']:.2f} | "
                     f"{r['core int8'] / r['ort int8']:.2f} | {r['ort int8'] / r['ort fp32']:.2f} | "
                     f"{r['core int8 p90'] / r['core int8']:.2f} |")
    lines += ["", "Fastest run of each (less sensitive to other work on the machine than the median):", "",
              "| model | ort fp32 | ort int8 | core fp32 | core int8 | core int8 / core fp32 | core int8 / ort int8 |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['ort fp32 min']:.2f} | {r['ort int8 min']:.2f} | {r['core fp32 min']:.2f} | "
                     f"{r['core int8 min']:.2f} | {r['core int8 min'] / r['core fp32 min']:.2f} | "
                     f"{r['core int8 min'] / r['ort int8 min']:.2f} |")
    lines += ["", "| model | cosine core int8 vs fp32 | argmax agree | cosine ort int8 vs fp32 | argmax agree "
              "| core int8 vs ort int8: cosine, argmax, max diff | MB fp32 | MB int8 |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['cos_core']:.5f} | {r['argmax_core']:.3f} | {r['cos_ort']:.5f} | "
                     f"{r['argmax_ort']:.3f} | {r['cos_core_ort']:.6f}, {r['argmax_core_ort']:.3f}, "
                     f"{r['maxdiff_int8']:.3g} | {r['mb_fp32']:.1f} | {r['mb_int8']:.1f} |")
    for key, _, label, options in PLUGINS:
        mine = [r for r in rows if f"{key} int8" in r]
        if not mine:
            continue
        how = " with " + ", ".join(f"`{k}={v}`" for k, v in options.items()) if options else ""
        lines += ["", f"{label} provider: float32, and int8{how}, against onnxruntime's int8 on the same file:", "",
                  f"| model | {label} fp32 ms | {label} int8 ms | int8 / fp32 | int8 / ort int8 | placed (int8) "
                  "| cosine, argmax vs ort int8 |", "|---|---|---|---|---|---|---|"]
        for r in mine:
            lines.append(f"| {r['name']} | {r[key + ' fp32']:.2f} | {r[key + ' int8']:.2f} | "
                         f"{r[key + ' int8'] / r[key + ' fp32']:.2f} | {r[key + ' int8'] / r['ort int8']:.2f} | "
                         f"{r[key + '_placed']} | {r['cos_' + key + '_ort']:.5f}, {r['argmax_' + key + '_ort']:.3f} |")
    lines += ["", "ort-core's best (fastest provider, by median) against onnxruntime: the quantization issue's "
              "targets are best int8 < best fp32 on every model, and best int8 / ort int8 <= 1.0 on the conv "
              "models (stretch 0.8), <= 1.2 on BERT.", "",
              "| model | best fp32 ms (provider) | best int8 ms (provider) | best int8 / best fp32 "
              "| best int8 / ort int8 |", "|---|---|---|---|---|"]
    for r in rows:
        f32, i8 = _best(r, "fp32"), _best(r, "int8")
        lines.append(f"| {r['name']} | {r[f32]:.2f} ({_label(f32)}) | {r[i8]:.2f} ({_label(i8)}) | "
                     f"{r[i8] / r[f32]:.2f} | {r[i8] / r['ort int8']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    args = parse_args(argv)
    import onnxruntime as ort

    meta = {"core": ort_core.__version__, "ort": ort.__version__,
            "machine": measure.machine()}
    print(f"ort-core {meta['core']} vs onnxruntime {meta['ort']}, {meta['machine']}", flush=True)
    load0, rows = os.getloadavg()[0], []
    failed = []
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models:
            try:
                r = bench_model(model, ort, args, folder)
            except Exception as e:  # noqa: BLE001 - one model must not cost the whole run
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                failed.append(f"{model}: {type(e).__name__}: {first}")
                print(f"{model}: failed: {failed[-1]}", flush=True)
                continue
            rows.append(r)
            print(f"{model}: ort fp32 {r['ort fp32']:.2f} ms, ort int8 {r['ort int8']:.2f} ms, core fp32 "
                  f"{r['core fp32']:.2f} ms, core int8 {r['core int8']:.2f} ms (core int8 / core fp32 "
                  f"{r['core int8'] / r['core fp32']:.2f}, / ort int8 {r['core int8'] / r['ort int8']:.2f}); "
                  f"cosine {r['cos_core']:.5f}, argmax {r['argmax_core']:.3f} [{r['runs']} runs]", flush=True)
    meta["load"] = (load0, os.getloadavg()[0])
    meta["runs"] = "/".join(str(r["runs"]) for r in rows)
    text = markdown(rows, meta) + "".join(f"\nFailed: {f}\n" for f in failed)
    measure.publish(text, args.markdown)  # keeps the sections other scripts write there (quant_accuracy.py)


if __name__ == "__main__":
    main()
