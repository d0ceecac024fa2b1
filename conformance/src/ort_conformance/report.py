"""Certification report: JSON and Markdown per provider, with the verdict and its reasons, its
provenance (provenance.py) and, apart from the verdict, the plugin's own known failures (vendor.py).

Built from what the pytest plugin collected (case results, test outcomes, contract checks);
the criteria are the ones written in conformance/README.md.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

from . import known, provenance, vendor

CONTRACT = ("registration", "get_capability", "allocator", "data_transfer", "concurrent_runs", "session_churn")
CHECKS = ("input_mutation", "output_aliasing", "recompile", "baked_weights", "stream_sync", "claim_then_fail")
"""The behaviour checks (contract_checks.NAMES), reported in a section of their own."""


def build(state) -> dict:
    from ort_core.plugins.manager import get_registry

    reg = get_registry().providers.get(state.provider)
    outcomes = state.outcomes
    results = state.results
    test_ids = {r.case: _test_id(r) for r in results.values()}
    # cases the plugin's own list excuses (the suite's list, where it also holds a case, decides)
    by_vendor = {c for c in state.vendor_known if c not in state.known}
    vendor_ids = {test_ids[c] for c in by_vendor if c in test_ids}
    # a listed case whose expected values are random draws may match by chance (its xfail is not strict)
    by_chance = {test_ids[c] for c, why in state.known.items() if why.startswith(known.RANDOM_PREFIX) and c in test_ids}
    excused = vendor_ids | by_chance
    failed_tests = sorted(k for k, v in outcomes.items() if v == "failed" or (v == "xpassed" and k not in excused))

    per_op: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    totals: dict[str, dict[str, int]] = {}
    claimed_nodes = all_nodes = 0
    for kind in ("node", "model"):
        rs = [r for r in results.values() if (r.kind == "node") == (kind == "node")]
        outs = [(r.case in by_vendor, outcomes.get(_test_id(r), "not run")) for r in rs]
        totals[kind] = {
            "cases": len(rs),
            "passed": sum(r.ok for r in rs),
            "claimed_cases": sum(r.claimed > 0 for r in rs),
            "claimed_passed": sum(r.ok and r.claimed > 0 for r in rs),
            "known_failures": sum(o == "xfailed" and not v for v, o in outs),
            "known_by_vendor": sum(o == "xfailed" and v for v, o in outs),
            "unexpected_failures": sum(o == "failed" for v, o in outs),
            "skipped_not_claimed": sum(o == "skipped" for v, o in outs),
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
    contract = _block(state, CONTRACT)
    checks = _block(state, CHECKS)
    available = bool(reg and reg.info.available)
    reasons = []
    if not available:
        reasons.append("provider is not installed or not available" + (f": {reg.info.reason}" if reg else ""))
    reasons += [f"contract check '{n}' " + ("was not run" if c["detail"] == "not run" else f"failed: {c['detail']}")
                for n, c in {**contract, **checks}.items() if not c["ok"]]
    cases_failed = [k for k in failed_tests if k.startswith(("test_node[", "test_model["))]
    unexpected = [k for k in cases_failed if outcomes[k] == "failed"]
    if unexpected:
        reasons.append(f"{len(unexpected)} case(s) fail outside the known-failures lists")
    if len(unexpected) < len(cases_failed):
        reasons.append(f"{len(cases_failed) - len(unexpected)} case(s) of the suite's known-failures list "
                       f"({os.path.basename(state.known_path)}) now pass: take them off the list")
    certified = not reasons and not failed_tests
    if failed_tests and not reasons:
        reasons.append(f"{len(failed_tests)} test(s) failed")
    known_file = os.path.basename(state.known_path) if os.path.exists(state.known_path) else None
    return {
        "provider": state.provider,
        "distribution": reg.distribution if reg else None,
        "verdict": "certified" if certified else "not certified",
        "reasons": reasons,
        **provenance.collect(state.provider, state.plugin_source),
        "contract": contract,
        "contract_checks": checks,
        "totals": totals,
        "claimed_node_share": (claimed_nodes / all_nodes) if all_nodes else 0.0,
        "known_failures_file": known_file,
        "known_by_vendor": _vendor_block(state, test_ids),
        "failed_tests": failed_tests,
        "operators": {op: dict(v) for op, v in sorted(per_op.items())},
        "cases": [{"case": r.case, "kind": r.kind, "status": r.status, "outcome": outcomes.get(_test_id(r), "not run"),
                   "phase": r.phase, "message": r.message, "claimed_nodes": r.claimed, "nodes": r.nodes,
                   "seconds": round(r.seconds, 4)} for r in sorted(results.values(), key=lambda r: (r.kind, r.case))],
    }


def _block(state, names) -> dict:
    return {name: {"ok": state.contract[name][0], "detail": state.contract[name][1]}
            if name in state.contract else {"ok": False, "detail": "not run"} for name in names}


def _vendor_block(state, test_ids: dict[str, str]) -> dict:
    """The plugin's own known-failures list and what became of each case (see vendor.py)."""
    cases = []
    if state.vendor_known:
        from .cases import model_cases, node_cases

        all_cases = {c.name for c in node_cases()} | {c.name for c in model_cases()}
        cases = vendor.statuses(state.vendor_known, state.known, state.results, state.outcomes, test_ids, all_cases)
    order = (vendor.STILL_FAILS, vendor.NOW_PASSES, vendor.NOT_CLAIMED, vendor.NOT_RUN, vendor.UNKNOWN,
             vendor.SUITE_LISTED)
    return {"file": state.vendor_path, "cases": cases,
            "counts": {s: sum(c["status"] == s for c in cases) for s in order}}


def _test_id(r) -> str:
    return f"test_node[{r.case}]" if r.kind == "node" else f"test_model[{r.kind}/{r.case}]"


def _test_id_of(case: dict) -> str:
    return f"test_node[{case['case']}]" if case["kind"] == "node" else f"test_model[{case['kind']}/{case['case']}]"


def markdown(rep: dict) -> str:
    t = rep["totals"]
    still = rep["known_by_vendor"]["counts"][vendor.STILL_FAILS]
    lines = [
        f"# Conformance report: {rep['provider']}",
        "",
        f"**Verdict: {rep['verdict']}**" + ("" if not rep["reasons"] else " — " + "; ".join(rep["reasons"])),
    ]
    if still:
        lines += ["", f"The suite's verdict does not count the {still} case(s) the plugin itself lists as known "
                      "failures; they fail as declared (see Known by the vendor)."]
    lines += [
        *provenance.markdown(rep),
        "",
        "## Contract",
        "",
        "| check | result | detail |",
        "|---|---|---|",
    ]
    for name, c in rep["contract"].items():
        lines.append(f"| {name} | {'pass' if c['ok'] else 'FAIL'} | {c['detail'] or ''} |")
    lines += ["", "## Contract checks", "",
              "What the provider's kernels and compile do at run time, on the suite's probe models "
              "(docs/first-plugin.md says what each catches and how to fix it).", ""]
    for name, c in rep.get("contract_checks", {}).items():
        verdict = "not run" if c["detail"] == "not run" else ("pass" if c["ok"] else "FAIL")
        detail = "" if c["detail"] == "not run" else f" — {vendor.md_cell(c['detail'], 600)}"
        lines.append(f"- **{name}: {verdict}**{detail}")
    lines += ["", "## Cases", "",
              "| kind | cases | passed | cases with claimed nodes | of those passed | known failures (suite's list) | "
              "known by the vendor | unexpected failures |", "|---|---|---|---|---|---|---|---|"]
    for kind, d in t.items():
        lines.append(f"| {kind} | {d['cases']} | {d['passed']} | {d['claimed_cases']} | {d['claimed_passed']} | "
                     f"{d['known_failures']} | {d['known_by_vendor']} | {d['unexpected_failures']} |")
    lines += ["", f"Share of node-case nodes placed on the provider: {rep['claimed_node_share']:.1%}"]
    lines += vendor.markdown(rep["known_by_vendor"])
    lines += ["", "## Per operator", "", "| op | cases | passed | claimed | failed | errors |",
              "|---|---|---|---|---|---|"]
    for op, d in rep["operators"].items():
        lines.append(f"| {op} | {d.get('cases', 0)} | {d.get('passed', 0)} | {d.get('claimed', 0)} | "
                     f"{d.get('failed', 0)} | {d.get('errors', 0)} |")
    if rep["failed_tests"]:
        messages = {_test_id_of(c): c["message"] for c in rep["cases"]}
        lines += ["", "## Failed tests", ""]
        lines += [f"- `{k}`" + (f": {vendor.md_cell(messages[k])}" if messages.get(k) else "")
                  for k in rep["failed_tests"][:200]]
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
