"""Known failures a plugin ships itself, listed in the report apart from the suite's verdict.

The convention: ``known_failures/<ProviderName>.txt`` in the package folder of the module the
plugin's entry point names (package data of its wheel), in the format of the suite's own lists
(known.py). This module finds and reads that file and says what became of each listed case in a
run; it judges nothing: the verdict is report.py's.
"""

from __future__ import annotations

import os

from . import known

FOLDER = "known_failures"


def shipped_path(provider: str) -> str | None:
    """The known-failures file ``provider``'s plugin ships, or None when it ships none."""
    try:
        from ort_core.plugins.manager import get_registry

        reg = get_registry().providers.get(provider)
    except Exception:  # noqa: BLE001 - a broken installation is reported by the suite itself
        return None
    module_file = getattr(reg.plugin, "__file__", None) if reg else None
    if not module_file:
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(module_file)), FOLDER, f"{provider}.txt")
    return path if os.path.isfile(path) else None


def load(provider: str) -> tuple[str | None, dict[str, str]]:
    """(path, case -> reason) of the list the provider's plugin ships; (None, {}) without one."""
    path = shipped_path(provider)
    return path, known.load(path)


STILL_FAILS, NOW_PASSES, NOT_CLAIMED, NOT_RUN, UNKNOWN, SUITE_LISTED = (
    "still fails", "now passes", "not claimed", "not run", "not a case of this suite", "in the suite's list")


def statuses(listed: dict[str, str], suite_known: dict[str, str], results: dict, outcomes: dict[str, str],
             test_ids: dict[str, str], all_cases: set[str]) -> list[dict]:
    """What became of each case of a vendor's list in this run.

    ``results``: case -> CaseResult; ``outcomes``: test id -> pytest outcome; ``test_ids``: case -> its
    test id; ``all_cases``: every case name the suite has. A case the suite's own list also holds is
    judged by that list (SUITE_LISTED).
    """
    out = []
    for case, reason in sorted(listed.items()):
        outcome = outcomes.get(test_ids.get(case, ""))
        result = results.get(case)
        message = ""
        if case in suite_known:
            status = SUITE_LISTED
        elif case not in all_cases:
            status = UNKNOWN
        elif outcome == "xfailed":
            status, message = STILL_FAILS, f"[{result.phase}] {result.message}" if result else ""
        elif outcome in ("xpassed", "passed"):
            status = NOW_PASSES
        elif outcome == "skipped":
            status = NOT_CLAIMED
        else:
            status = NOT_RUN
        out.append({"case": case, "reason": reason, "status": status, "message": message})
    return out


def markdown(block: dict) -> list[str]:
    """The report page's section on the vendor's list (empty when the plugin ships none)."""
    if not block["file"]:
        return []
    counts = ", ".join(f"{n} {s}" for s, n in block["counts"].items() if n)
    lines = ["", "## Known by the vendor", "",
             f"The plugin ships `{block['file']}` ({len(block['cases'])} case(s): {counts or 'none'}). These cases "
             "are the vendor's own statement: they are not counted against the suite's verdict above, and a case "
             "that now passes should leave the list.", "",
             "| case | vendor's reason | this run |", "|---|---|---|"]
    for c in block["cases"]:
        run = c["status"] + (f": {c['message']}" if c["message"] else "")
        lines.append(f"| {c['case']} | {md_cell(c['reason'])} | {md_cell(run)} |")
    return lines


def md_cell(text: str, limit: int = 300) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 3] + "..."
