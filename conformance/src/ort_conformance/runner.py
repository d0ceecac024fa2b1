"""Run one case on one provider and say what happened: pass, fail or error, and where.

A case runs with ``providers=[NAME, "CPUExecutionProvider"]`` and kernel outputs checked against
the model's static types; claim honesty is checked from the session's placement and warnings.
No pytest here: the suite modules turn results into test outcomes.
"""

from __future__ import annotations

import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import ort_core as ort
from ort_core.session import CHECK_OUTPUTS_KEY
from ort_core.threads import ADAPTIVE_ENV

from .cases import Case
from .compare import mismatch

CPU = "CPUExecutionProvider"


@contextmanager
def steady_blas():
    """A certification must not depend on what else the machine runs. At the default thread budget ort-core
    gives BLAS fewer threads while other processes are busy (ort_core.threads), which changes the order of the
    floating-point sums, and an ill-conditioned case flips on that: the light SqueezeNet gives 0.001
    everywhere with 2 BLAS threads (the expected output) and 0.25 with one. A case runs with that adjustment
    off, unless the environment says otherwise; the environment is as it was afterwards."""
    if ADAPTIVE_ENV in os.environ:
        yield
        return
    os.environ[ADAPTIVE_ENV] = "0"
    try:
        yield
    finally:
        os.environ.pop(ADAPTIVE_ENV, None)


@dataclass
class CaseResult:
    case: str
    kind: str
    ops: list[str]
    status: str  # 'pass' | 'fail' | 'error'
    phase: str = ""  # where it went wrong: 'capability', 'compile', 'session', 'run', 'compare'
    message: str = ""
    claimed: int = 0  # nodes placed on the provider under test
    nodes: int = 0
    claimed_ops: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "pass"


def session_options(optimize: bool) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.add_session_config_entry(CHECK_OUTPUTS_KEY, "1")
    if not optimize:
        # node cases test the operator as written: no folding may hide it from the provider
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


def providers_for(provider: str) -> list[str]:
    return [CPU] if provider == CPU else [provider, CPU]


def run_case(provider: str, case: Case, optimize: bool | None = None) -> CaseResult:
    t0 = time.perf_counter()
    res = CaseResult(case.name, case.kind, case.ops, "error")
    res.nodes = len(case.model.graph.node)
    try:
        with steady_blas():
            _run(provider, case, res, case.kind != "node" if optimize is None else optimize)
    finally:
        res.seconds = time.perf_counter() - t0
    return res


def _run(provider: str, case: Case, res: CaseResult, optimize: bool) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sess = ort.InferenceSession(case.model.SerializeToString(), session_options(optimize),
                                        providers=providers_for(provider))
        except Exception as e:  # noqa: BLE001 - every failure is a result, reported against the case
            res.phase, res.message = "session", _one_line(e)
            return
    trouble = [str(w.message) for w in caught if f"'{provider}'" in str(w.message)
               and ("skipped" in str(w.message) or "falling back" in str(w.message))]
    if trouble:
        res.phase = "compile" if "falling back" in trouble[0] else "capability"
        res.message = trouble[0]
        if res.phase == "compile":  # a claim it could not honour: name the nodes it claimed
            from .probes import claimed_nodes

            labels = list(claimed_nodes(provider, case.model).values())
            if labels:
                more = f" and {len(labels) - 4} more" if len(labels) > 4 else ""
                res.message = f"claimed {', '.join(labels[:4])}{more}, then: {trouble[0]}"
        return
    placed = [a for a in sess.get_provider_graph_assignment_info() if a.provider == provider]
    res.claimed = sum(len(a.node_names) for a in placed)
    res.claimed_ops = sorted({op for a in placed for op in a.op_types})
    for k, (inputs, expected) in enumerate(case.data_sets):
        try:
            got = sess.run(None, case.feeds(inputs))
        except Exception as e:  # noqa: BLE001
            res.phase, res.message = "run", _one_line(e)
            return
        names = [o.name for o in sess.get_outputs()]
        for name, e_val, g_val in zip(names, expected, got):
            m = mismatch(e_val, g_val, case.rtol, case.atol, f"data set {k} output '{name}'")
            if m:
                res.status, res.phase, res.message = "fail", "compare", m
                return
    res.status = "pass"


def _one_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " | ")
    return text if len(text) <= 400 else text[:397] + "..."
