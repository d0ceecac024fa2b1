"""Certification report: JSON and Markdown per provider, with the verdict and its reasons.

Built from what the pytest plugin collected (case results, test outcomes, contract checks);
the criteria are the ones written in conformance/README.md.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections import defaultdict

from . import PINNED_ONNX, __version__

CONTRACT = ("registration", "get_capability", "allocator", "data_transfer", "concurrent_runs", "session_churn")


def build(state) -> dict:
    import onnx

    import ort_core
    from ort_core.plugins.manager import get_registry

    reg = get_registry().providers.get(state.provider)
    outcomes = state.outcomes
    results = state.results
    failed_tests = sorted(k for k, v in outcomes.items() if v in ("failed", "xpassed"))

    per_op: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    totals: dict[str, dict[str, int]] = {}
    claimed_nodes = all_nodes = 0
    for kind in ("node", "model"):
        rs = [r for r in results.values() if (r.kind == "node") == (kind == "node")]
        outs = [outcomes.get(_test_id(r), "not run") for r in rs]
        totals[kind] = {
            "cases": len(rs),
            "passed": sum(r.ok for r in rs),
            "claimed_cases": sum(r.claimed > 0 for r in rs),
            "claimed_passed": sum(r.ok and r.claimed > 0 for r in rs),
            "known_failures": sum(o == "xfailed" for o in outs),
            "unexpected_failures": sum(o == "failed" for o in outs),
            "skipped_not_claimed": sum(o == "skipped" for o in outs),
        }
    for r in results.values():
        if r.kind == "node":
            claimed_nodes += r.claimed
            all_nodes += r.nodes
        for op in r.ops:
            d = per_op[op]
            d["cases"] += 1
            d["passed"] += r.ok
            d["claimed"] += op in r.claimed_ops
            d["failed"] += r.status == "fail"
            d["errors"] += r.status == "error"
    contract = {name: {"ok": state.contract[name][0], "detail": state.contract[name][1]}
                if name in state.contract else {"ok": False, "detail": "not run"} for name in CONTRACT}
    available = bool(reg and reg.info.available)
    reasons = []
    if not available:
        reasons.append("provider is not installed or not available" + (f": {reg.info.reason}" if reg else ""))
    reasons += [f"contract check '{n}' " + ("was not run" if c["detail"] == "not run" else f"failed: {c['detail']}")
                for n, c in contract.items() if not c["ok"]]
    unexpected = [k for k in failed_tests if k.startswith(("test_node[", "test_model["))]
    if unexpected:
        reasons.append(f"{len(unexpected)} case(s) fail outside the known-failures list")
    certified = not reasons and not failed_tests
    if failed_tests and not reasons:
        reasons.append(f"{len(failed_tests)} test(s) failed")
    return {
        "provider": state.provider,
        "distribution": reg.distribution if reg else None,
        "verdict": "certified" if certified else "not certified",
        "reasons": reasons,
        "suite": {"ort_conformance": __version__, "ort_core": ort_core.__version__, "onnx": onnx.__version__,
                  "onnx_pinned": PINNED_ONNX, "python": platform.python_version(),
                  "machine": f"{platform.system()} {platform.machine()}"},
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "contract": contract,
        "totals": totals,
        "claimed_node_share": (claimed_nodes / all_nodes) if all_nodes else 0.0,
        "known_failures_file": os.path.basename(state.known_path),
        "failed_tests": failed_tests,
        "operators": {op: dict(v) for op, v in sorted(per_op.items())},
        "cases": [{"case": r.case, "kind": r.kind, "status": r.status, "outcome": outcomes.get(_test_id(r), "not run"),
                   "phase": r.phase, "message": r.message, "claimed_nodes": r.claimed, "nodes": r.nodes,
                   "seconds": round(r.seconds, 4)} for r in sorted(results.values(), key=lambda r: (r.kind, r.case))],
    }


def _test_id(r) -> str:
    return f"test_node[{r.case}]" if r.kind == "node" else f"test_model[{r.kind}/{r.case}]"


def markdown(rep: dict) -> str:
    t = rep["totals"]
    lines = [
        f"# Conformance report: {rep['provider']}",
        "",
        f"**Verdict: {rep['verdict']}**" + ("" if not rep["reasons"] else " — " + "; ".join(rep["reasons"])),
        "",
        f"Suite {rep['suite']['ort_conformance']}, ort-core {rep['suite']['ort_core']}, onnx {rep['suite']['onnx']} "
        f"(pinned {rep['suite']['onnx_pinned']}), Python {rep['suite']['python']}, {rep['suite']['machine']}, "
        f"{rep['date']}.",
        "",
        "## Contract",
        "",
        "| check | result | detail |",
        "|---|---|---|",
    ]
    for name, c in rep["contract"].items():
        lines.append(f"| {name} | {'pass' if c['ok'] else 'FAIL'} | {c['detail'] or ''} |")
    lines += ["", "## Cases", "",
              "| kind | cases | passed | cases with claimed nodes | of those passed | known failures | "
              "unexpected failures |", "|---|---|---|---|---|---|---|"]
    for kind, d in t.items():
        lines.append(f"| {kind} | {d['cases']} | {d['passed']} | {d['claimed_cases']} | {d['claimed_passed']} | "
                     f"{d['known_failures']} | {d['unexpected_failures']} |")
    lines += ["", f"Share of node-case nodes placed on the provider: {rep['claimed_node_share']:.1%}", "",
              "## Per operator", "", "| op | cases | passed | claimed | failed | errors |", "|---|---|---|---|---|---|"]
    for op, d in rep["operators"].items():
        lines.append(f"| {op} | {d.get('cases', 0)} | {d.get('passed', 0)} | {d.get('claimed', 0)} | "
                     f"{d.get('failed', 0)} | {d.get('errors', 0)} |")
    if rep["failed_tests"]:
        lines += ["", "## Failed tests", ""] + [f"- `{k}`" for k in rep["failed_tests"][:200]]
    return "\n".join(lines) + "\n"


def write(state, folder: str) -> tuple[str, str]:
    rep = build(state)
    os.makedirs(folder, exist_ok=True)
    base = os.path.join(folder, f"conformance-{state.provider}")
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump(rep, f, indent=1)
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(markdown(rep))
    return base + ".json", base + ".md"
