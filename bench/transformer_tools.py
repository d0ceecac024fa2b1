"""Hugging Face transformer exports, as they are and after onnxruntime's tools, on ort-core and onnxruntime side
by side: BERT-base, DistilBERT, ViT-base, GPT-2 and the T5-small encoder (``bench/export_transformers.py``,
made by `nox -s hf_models`), each as exported and after ``optimize_model`` at opt_level 1 and 2,
``quantize_dynamic`` and the 4-bit ``MatMulNBits`` quantizer.

Per file: session creation (median of 3, after a first one), latency (median of alternating rounds, as
``nox -s bench`` times; batch 1, 128 tokens or one 224x224 image, seeded inputs), their ratios ort-core /
onnxruntime, and the largest output difference. An output passes when it is within 1.25 times onnxruntime's
own disagreement on that file (its results with all optimizations against none; see ``SLACK``) or 1e-4 of the
largest output, whichever is larger: that is how far onnxruntime itself moves the answer by rewriting the
graph. A quantized file (dynamic int8, 4-bit weights) also passes when ort-core's results are no further from
the float export's than 1.25 times onnxruntime's are: its activations are quantized at run time, so which values
land one step apart depends on each runtime's float kernels, and two runtimes scatter more than one runtime
with and without its rewrites.

  python bench/transformer_tools.py [MODEL ...] [--variants LIST] [--runs N] [--budget S] [--markdown PATH]
  (default: every exported model and variant; bench/results.md's "transformer-tools" section), also
  `nox -s bench -- --hf`.
"""

from __future__ import annotations

# isort: off
import ort_core  # before numpy: ort-core picks numpy's BLAS kernels as it would for a user (ort_core.blas)
# isort: on
import argparse
import json
import os
import sys
import time

import measure
import numpy as np
from bench_latency import quiet_session
from real_models_lib import cache_dir, first_line

CPU = "CPUExecutionProvider"
SECTION = "transformer-tools"
HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = cache_dir()
SEQ = 128
SLACK = 1.25
"""How far past onnxruntime's own disagreement a file may be. Where a file quantizes activations at run time,
each run's float rounding decides which values land one quantization step apart, and any two valid runs differ
by about as much as onnxruntime's two: on the dynamically quantized BERT-base, onnxruntime with all
optimizations vs none 0.080, ort-core vs either 0.082-0.088, ort-core's own two 0.075."""
QUANTIZED = ("qdyn", "nbits4")
LABELS = {"": "export", "opt1": "optimize_model 1", "opt2": "optimize_model 2", "qdyn": "quantize_dynamic",
          "nbits4": "MatMulNBits 4-bit"}


def feeds_for(inputs) -> dict[str, np.ndarray]:
    """Seeded inputs: token ids below 1000 (every vocabulary here is larger), a full mask, zero token types,
    or a normal image."""
    rng = np.random.default_rng(0)
    out = {}
    for arg in inputs:
        if arg.name == "pixel_values":
            out[arg.name] = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        elif arg.name == "input_features":  # Whisper: 30 s of 80 log-mel bins
            out[arg.name] = rng.standard_normal((1, 80, 3000)).astype(np.float32)
        elif arg.name == "input_ids":
            out[arg.name] = rng.integers(0, 1000, (1, SEQ)).astype(np.int64)
        elif arg.name == "attention_mask":
            out[arg.name] = np.ones((1, SEQ), np.int64)
        else:  # token_type_ids
            out[arg.name] = np.zeros((1, SEQ), np.int64)
    return out


def _ort_options(ort, optimize: bool):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x.astype(np.float64) - y).max()) for x, y in zip(a, b))


def agreement(core, path: str, ort, theirs=None, float_path: str | None = None) -> dict:
    """ort-core's session ``core`` against onnxruntime on ``path``, on ``feeds_for``'s inputs: the largest output
    difference, the tolerance (``SLACK`` times onnxruntime's own all-vs-no-optimizations difference, or 1e-4 of
    the largest output) and whether it is met. For a quantized file (``float_path``: the export it was made
    from), also how far each runtime lands from the float model's results: a quantized file also passes when
    ort-core is no further from them than ``SLACK`` times onnxruntime is."""
    theirs = theirs or ort.InferenceSession(path, _ort_options(ort, True), providers=[CPU])
    feeds = feeds_for(core.get_inputs())
    want = theirs.run(None, feeds)
    own = ort.InferenceSession(path, _ort_options(ort, False), providers=[CPU]).run(None, feeds)
    got = core.run(None, feeds)
    top = max(float(np.abs(w).max()) for w in want)
    diff = _max_diff(got, want)
    tol = max(SLACK * _max_diff(own, want), 1e-4 * top)
    found = {"diff": diff, "top": top, "tol": tol, "ok": diff <= tol}
    if float_path:
        floats = ort.InferenceSession(float_path, _ort_options(ort, True), providers=[CPU]).run(None, feeds)
        found["from_float"] = (_max_diff(got, floats), _max_diff(want, floats))
        found["ok"] = found["ok"] or found["from_float"][0] <= SLACK * found["from_float"][1]
    return found


def bench_file(path: str, ort, args, float_path: str | None = None) -> dict:
    factories = [lambda: quiet_session(path),
                 lambda: ort.InferenceSession(path, _ort_options(ort, True), providers=[CPU])]
    core, theirs = (f() for f in factories)
    feeds = feeds_for(core.get_inputs())
    found = agreement(core, path, ort, theirs, float_path)
    fns = [lambda: core.run(None, feeds), lambda: theirs.run(None, feeds)]
    runs, block = measure.plan_runs(fns, args.runs, args.budget)
    ms = [measure.summary(t)[0] for t in measure.timed(fns, runs, block=block)]
    made = measure.creation_ms(factories)
    nodes = len(core._loaded.graph.nodes), sum(len(a.node_names) for a in core.get_provider_graph_assignment_info())
    return {"core ms": ms[0], "ort ms": ms[1], "core create": made[0], "ort create": made[1], "nodes": nodes,
            "runs": runs, **found}


def _row(model: str, variant: str, r: dict) -> str:
    if "error" in r:
        return f"| {model} | {LABELS[variant]} | | | | | | | | ✗ {r['error']} |"
    mark = "✓" if r["ok"] else "✗"
    far = f"{r['from_float'][0]:.3f} / {r['from_float'][1]:.3f}" if "from_float" in r else ""
    return (f"| {model} | {LABELS[variant]} | {r['nodes'][0]} → {r['nodes'][1]} | {r['core ms']:.2f} | "
            f"{r['ort ms']:.2f} | {r['core ms'] / r['ort ms']:.2f}x | {r['core create'] / 1000:.2f} / "
            f"{r['ort create'] / 1000:.2f} s ({r['core create'] / r['ort create']:.2f}x) | {r['diff']:.1e} "
            f"[{r['tol']:.1e}] | {far} | {mark} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="of hf_exports.json (default: all)")
    ap.add_argument("--variants", default=",".join(LABELS), help="comma-separated, '' being the export itself")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--budget", type=float, default=20.0, help="seconds of timed runs per file")
    ap.add_argument("--cache", default=CACHE)
    ap.add_argument("--markdown", default=os.path.join(HERE, "results.md"))
    args = ap.parse_args(argv)
    record_path = os.path.join(args.cache, "hf_exports.json")
    if not os.path.exists(record_path):
        print(f"no exports in {args.cache}: run `nox -s hf_models` first")
        return 1
    import onnxruntime as ort

    record = json.load(open(record_path))
    wanted = args.variants.split(",")
    t0, lines, failed, ran = time.perf_counter(), [], 0, 0
    for model in args.models or list(record):
        entry = record[model]
        files = {"": entry["file"], **entry.get("variants", {})}
        for variant in (v for v in LABELS if v in wanted and v in files):
            if isinstance(files[variant], dict):  # onnxruntime's tool failed on the export: nothing to run
                lines.append(f"| {model} | {LABELS[variant]} | | | | | | | | — onnxruntime's tool failed: "
                             f"{files[variant]['failed']} |")
                print(lines[-1], flush=True)
                continue
            path = os.path.join(args.cache, files[variant])
            try:
                quantized = variant in QUANTIZED
                r = bench_file(path, ort, args, os.path.join(args.cache, files[""]) if quantized else None)
            except Exception as e:  # noqa: BLE001 - one file must not cost the whole run
                r = {"error": first_line(e)[:200], "ok": False}
            failed += not r["ok"]
            ran += 1
            lines.append(_row(model, variant, r))
            print(lines[-1], flush=True)
    versions = next(iter(record.values()))
    kinds: dict[str, list[str]] = {}
    for m, e in record.items():
        kinds.setdefault(f"{e.get('exporter', 'torchscript')} exporter at opset {e['opset']}", []).append(m)
    exporters = "; ".join(k if len(kinds) == 1 else f"{k}: {', '.join(ms)}" for k, ms in kinds.items())
    text = "\n".join([
        "## Hugging Face exports and onnxruntime's tools", "",
        f"`python bench/transformer_tools.py` (after `nox -s hf_models`): transformers {versions['transformers']} "
        f"models with seeded random weights exported by torch {versions['torch']} ({exporters}), then rewritten by "
        f"onnxruntime {versions['onnxruntime']}'s tools; ort-core "
        f"{ort_core.__version__} (CPU provider) against onnxruntime {ort.__version__} (CPU provider) on each file "
        f"({measure.machine()}), batch 1, 128 tokens or one 224x224 image. nodes: in the file → after ort-core's "
        "optimizer. Latency: "
        "medians of alternating rounds; creation: median of 3 after a first; diff: the largest output difference "
        "[the tolerance: 1.25 times onnxruntime's own all-optimizations-vs-none difference on that file, or 1e-4 "
        "of the largest output]; from float32, for the quantized files: the largest difference of ort-core's / "
        "onnxruntime's results from the float export's (such a file also passes when ort-core's is at most 1.25 "
        "times onnxruntime's).", "",
        "| model | file | nodes | ort-core ms | onnxruntime ms | ratio | creation ort-core / onnxruntime | "
        "diff [tolerance] | from float32 | |", "|---|---|---|---|---|---|---|---|---|---|", *lines, "",
        f"{ran - failed} of {ran} files within tolerance."]) + "\n"
    measure.publish_section(text, args.markdown, SECTION, time.perf_counter() - t0)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
