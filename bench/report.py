"""The bench's report: the per-model results as Markdown tables, with the targets marked pass or miss.

The same text is printed and written to the ``--markdown`` file (for the README's Benchmarks
section). Nothing here measures; a result is a plain dict filled by bench_latency.py.
"""

from __future__ import annotations

import numpy as np

PASS, MISS = "✓", "✗"
# name -> (what, limit); checks() decides which apply to a model
TARGETS = {
    "latency_conv": ("latency ratio vs onnxruntime, conv models", 2.0),
    "latency_transformer": ("latency ratio vs onnxruntime, bert and gpt2", 1.6),
    "dispatch": ("dispatch overhead, µs per node (Add chains)", 5.0),
    "memory": ("peak memory ratio vs onnxruntime", 1.5),
    "creation": ("session creation ratio vs onnxruntime", 2.0),
    "floor": ("ort-core latency / BLAS floor", 1.2),
}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def checks(r: dict) -> dict[str, float]:
    """Target name -> measured value for the targets that apply to result ``r``."""
    out = {}
    latency = ratio(r["core_ms"], r.get("ort_ms"))
    if latency is not None and r["kind"] in ("conv", "transformer"):
        out[f"latency_{r['kind']}"] = latency
    if r["kind"] == "chain" and r.get("steps"):
        out["dispatch"] = r["core_ms"] * 1e3 / r["steps"]
    for key in ("memory", "creation"):
        value = ratio(r.get(f"{key}_core"), r.get(f"{key}_ort"))
        if value is not None:
            out[key] = value
    if r.get("floor_ms"):
        out["floor"] = r["core_ms"] / r["floor_ms"]
    return out


def _mark(r: dict, key: str, text: str) -> str:
    value = checks(r).get(key)
    if value is None:
        return text
    return f"{text} {PASS if value <= TARGETS[key][1] else MISS}"


def _num(x: float | None, fmt: str = ".2f", suffix: str = "") -> str:
    return "–" if x is None else f"{x:{fmt}}{suffix}"


def _ms(median: float | None, p90: float | None = None) -> str:
    if median is None:
        return "–"
    digits = ".3f" if median < 1 else ".2f" if median < 100 else ".1f"
    return f"{median:{digits}}" + (f" [{p90:{digits}}]" if p90 is not None else "")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    rule = "|" + "|".join("---" if k == 0 else "---:" for k in range(len(header))) + "|"
    lines = ["| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown(results: list[dict], extras: list[dict], meta: dict, failed: list[tuple[str, str]] = ()) -> str:
    """The whole report: latency, resources, extra providers, per-node dispatch, the models that
    failed (name, error) and the targets."""
    out = [f"ort-core {meta['core']} vs onnxruntime {meta['ort'] or '(not installed)'}, {meta['machine']}; "
           "times in ms, median [p90]; ratios are ort-core / onnxruntime (below 1: ort-core is faster); "
           f"{PASS}/{MISS}: target met or missed."]
    load = meta.get("load")
    if load and None not in load:
        out[-1] += (f" Load average {load[0]:.1f} at the start, {load[1]:.1f} at the end (the bench alone "
                    f"accounts for up to {meta['cores']}; more: other processes competed for the cores).")
    out.append("")
    rows = []
    for r in results:
        lat = ratio(r["core_ms"], r.get("ort_ms"))
        nodes = f"{r['nodes_file']} → {r['steps']}" if r.get("steps") else f"{r['nodes_file']}"
        rows.append([r["name"], nodes, _ms(r["core_ms"], r["core_p90"]),
                     _ms(r.get("ort_ms"), r.get("ort_p90")),
                     _mark(r, f"latency_{r['kind']}", _num(lat, ".2f", "x")), f"{r['runs']}",
                     _diff(r.get("diff"), r.get("ref"))])
    out += _table(["model", "nodes (file → run)", "ort-core ms", "onnxruntime ms", "ratio", "runs",
                   "max abs diff [rel]"], rows)
    out.append("")
    rows = []
    for r in results:
        rows.append([r["name"], _ms(r.get("creation_core")), _ms(r.get("creation_ort")),
                     _mark(r, "creation", _num(ratio(r.get("creation_core"), r.get("creation_ort")), ".2f", "x")),
                     _num(r.get("memory_core"), ".1f"), _num(r.get("memory_ort"), ".1f"),
                     _mark(r, "memory", _num(ratio(r.get("memory_core"), r.get("memory_ort")), ".2f", "x")),
                     _ms(r.get("floor_ms")) if r.get("floor_ms") else "–",
                     _mark(r, "floor", _num(ratio(r["core_ms"], r.get("floor_ms")), ".2f", "x")),
                     ", ".join(f"{op} {share:.0%}" for op, share in r.get("top_ops", [])) or "–"])
    out += _table(["model", "create ort-core ms", "create onnxruntime ms", "ratio", "peak MiB ort-core",
                   "peak MiB onnxruntime", "ratio", "BLAS floor ms", "ort-core / floor", "ort-core top ops"], rows)
    chains = [r for r in results if r["kind"] == "chain" and r.get("steps")]
    if chains:
        out.append("")
        for r in chains:
            core = r["core_ms"] * 1e3 / r["steps"]
            theirs = f"onnxruntime {r['ort_ms'] * 1e3 / r['steps']:.2f} µs/node" if r.get("ort_ms") else ""
            out.append(f"Dispatch, {r['name']} ({r['steps']} nodes after optimization): ort-core "
                       f"{_mark(r, 'dispatch', f'{core:.2f} µs/node')}" + (f", {theirs}" if theirs else "") + ".")
    if failed:
        out += ["", *(f"Failed: {name}: {error}" for name, error in failed)]
    if extras:
        out += ["", *_extras(extras, results)]
    out += ["", *_targets(results)]
    return "\n".join(out) + "\n"


def _diff(diff: float | None, ref: float | None) -> str:
    if diff is None:
        return "–"
    return f"{diff:.1e}" + (f" [{diff / ref:.0e}]" if ref else "")


def _extras(extras: list[dict], results: list[dict]) -> list[str]:
    by_name = {r["name"]: r for r in results}
    out = ["Other providers of ort-core (median ms [p90]; ratios to onnxruntime's CPU provider, timed in the same "
           "rounds, and to ort-core's CPU provider from the first pass; below 1: faster; max abs diff vs onnxruntime, "
           "relative to its largest output in brackets):", ""]
    rows = []
    for e in extras:
        r = by_name[e["model"]]
        rows.append([e["model"], e["label"], _ms(e["ms"], e["p90"]), _num(ratio(e["ms"], _ort_ms(e, r)), ".2f", "x"),
                     _num(ratio(e["ms"], r["core_ms"]), ".2f", "x"), _diff(e["diff"], r.get("ref"))])
    out += _table(["model", "provider", "ms", "/ onnxruntime", "/ ort-core CPU", "max abs diff [rel]"], rows)
    out.append("")
    for label in dict.fromkeys(e["label"] for e in extras):
        conv = [e for e in extras if e["label"] == label and by_name[e["model"]]["kind"] == "conv"]
        if not conv:
            continue
        vs_core = float(np.median([e["ms"] / by_name[e["model"]]["core_ms"] for e in conv]))
        vs_ort = [e["ms"] / _ort_ms(e, by_name[e["model"]]) for e in conv if _ort_ms(e, by_name[e["model"]])]
        text = f"{float(np.median(vs_ort)):.2f}x onnxruntime CPU, " if vs_ort else ""
        out.append(f"- {label}: median over {len(conv)} conv model(s) {text}{vs_core:.2f}x ort-core CPU"
                   + _speedup(label, extras))
    return out


def _speedup(label: str, extras: list[dict]) -> str:
    """For a bf16 row: its median speed-up over the same provider's fp32 rows, over every model."""
    base = label.replace("bf16", "fp32").replace("BF16", "FP32")
    if base == label:
        return ""
    fp32 = {e["model"]: e["ms"] for e in extras if e["label"] == base}
    ups = [fp32[e["model"]] / e["ms"] for e in extras if e["label"] == label and e["model"] in fp32 and e["ms"]]
    return f"; {float(np.median(ups)):.2f}x faster than {base} (median over {len(ups)} models)" if ups else ""


def _ort_ms(extra: dict, r: dict) -> float | None:
    """onnxruntime's latency from the rounds the extra provider was timed in, else from the CPU pass."""
    return extra.get("ort_ms") or r.get("ort_ms")


def _targets(results: list[dict]) -> list[str]:
    out = ["Targets:", ""]
    for key, (what, limit) in TARGETS.items():
        values = [(r["name"], checks(r)[key]) for r in results if key in checks(r)]
        if not values:
            out.append(f"- {what} ≤ {limit:g}: not measured")
            continue
        met = [n for n, v in values if v <= limit]
        missed = ", ".join(f"{n} {v:.2f}" for n, v in values if v > limit)
        verdict = f"; {MISS} {missed}" if missed else f" {PASS}"
        out.append(f"- {what} ≤ {limit:g}: {len(met)}/{len(values)} met{verdict}")
    return out
