"""Contract checks of each provider hook: registration, capability, allocator, data transfer,
concurrent runs and session churn; then the behaviour checks of contract_checks.py (test_check).

Operates through the core's plugin registry (which validates answers) and real sessions; the
per-operator correctness checks live in test_operators.py.
"""

from __future__ import annotations

import gc
import os
import threading
import tracemalloc

import numpy as np
import pytest

import ort_core as ort
from ort_conformance import contract_checks
from ort_conformance.cases import node_cases
from ort_conformance.runner import providers_for, session_options
from ort_core.ir import load_model
from ort_core.memory import HOST
from ort_core.plugins.manager import get_registry
from ort_core.plugins.types import GraphView

ALLOC_SIZES = (0, 1, 3, 63, 64, 65, 4097, 1 << 20, 64 << 20)


def _dtypes() -> list[np.dtype]:
    """Every fixed-size numpy dtype an ONNX tensor can have (ml_dtypes' exotic floats too)."""
    from onnx import TensorProto, helper

    out = []
    for code in TensorProto.DataType.values():
        if code in (TensorProto.UNDEFINED, TensorProto.STRING):
            continue
        try:
            dt = np.dtype(helper.tensor_dtype_to_np_dtype(code))
        except (KeyError, TypeError, ValueError):
            continue
        if dt not in out:
            out.append(dt)
    return out


def _record(ort_state, name: str, ok: bool, message: str = "") -> None:
    ort_state.contract[name] = (ok, message)


def test_registration_is_complete(provider, ort_state):
    reg = get_registry().providers[provider]
    info = reg.info
    problems = []
    if info.name != provider:
        problems.append(f"name {info.name!r} differs from the requested {provider!r}")
    if not info.devices:
        problems.append("declares no device")
    if not info.available:
        problems.append(f"unavailable: {info.reason}")
    if not (info.description or "").strip():
        problems.append("has no description")
    _record(ort_state, "registration", not problems, "; ".join(problems))
    assert not problems, "; ".join(problems)


def _capability_views():
    for case in node_cases():
        try:
            model = load_model(case.model)
        except ort.OrtError:
            continue
        ids = tuple(n.id for n in model.graph.topological_order())
        yield case, GraphView(model.graph, model.opset_imports, ids)


def test_capability_answers_are_well_formed(provider, ort_state):
    """Only offered ids claimed, a reason for every declined node, on every node-case graph."""
    reg = get_registry()
    problems = []
    claimed_cases = 0
    for case, view in _capability_views():
        try:
            cap = reg.get_capability(provider, view, {})
        except ort.PluginError as e:
            problems.append(f"{case.name}: {e}")
            continue
        bad = [i for i, r in cap.declined.items() if not isinstance(r, str) or not r.strip()]
        if bad:
            problems.append(f"{case.name}: empty reason for declined node ids {bad[:3]}")
        claimed_cases += bool(cap.claimed)
    msg = (f"{len(problems)} bad answer(s); first: {problems[0]}" if problems
           else f"claims nodes in {claimed_cases} cases")
    _record(ort_state, "get_capability", not problems, msg)
    assert not problems, msg


def test_allocator_sizes_and_alignment(provider, ort_state):
    reg = get_registry()
    problems = []
    for device in reg.providers[provider].info.devices:
        try:
            alloc = reg.allocator(provider, device)
        except ort.PluginError as e:
            problems.append(str(e))
            continue
        align = int(alloc.alignment)
        if align < 1 or align & (align - 1):
            problems.append(f"{device}: alignment {align} is not a power of two")
            continue
        for n in ALLOC_SIZES:
            try:
                buf = alloc.allocate(n)
                addr = int(alloc.address(buf))
                alloc.free(buf)
            except Exception as e:  # noqa: BLE001 - any failure is a contract violation
                problems.append(f"{device}: allocate({n}) raised {type(e).__name__}: {e}")
                continue
            if addr % align:
                problems.append(f"{device}: allocate({n}) returned address {addr:#x}, not {align}-byte aligned")
    _record(ort_state, "allocator", not problems, "; ".join(problems[:3]))
    assert not problems, "; ".join(problems[:5])


def _samples(dt: np.dtype, rng) -> list[np.ndarray]:
    """Random bit patterns (NaN payloads included) of a dtype, in several shapes and layouts."""
    def random_array(shape):
        n = int(np.prod(shape)) * dt.itemsize
        raw = rng.integers(0, 256, n, dtype=np.uint8)
        if dt.kind == "b":
            raw = raw % 2
        return raw.view(dt).reshape(shape)

    big = random_array((6, 10))
    return [random_array((0,)), random_array(()), random_array((7,)), random_array((3, 5, 2)), big[::2, 1::3]]


def test_data_transfer_round_trips_every_dtype(provider, ort_state):
    reg = get_registry()
    transfer = reg.data_transfer(provider)
    rng = np.random.default_rng(0)
    problems = []
    for device in reg.providers[provider].info.devices:
        for dt in _dtypes():
            for a in _samples(dt, rng):
                try:
                    on_dev = transfer.copy(a, HOST, device)
                    back = transfer.copy(on_dev, device, HOST)
                except Exception as e:  # noqa: BLE001
                    problems.append(f"{dt} {a.shape} via {device}: {type(e).__name__}: {e}")
                    break
                back = np.asarray(back)
                same = back.dtype == a.dtype and back.shape == a.shape
                if not same or back.tobytes() != np.ascontiguousarray(a).tobytes():
                    problems.append(f"{dt} {a.shape} via {device}: not bit-exact")
                    break
    _record(ort_state, "data_transfer", not problems, "; ".join(problems[:3]))
    assert not problems, "; ".join(problems[:5])


def _probe_cases(provider: str, limit: int = 6):
    """Node cases the provider claims nodes in and that run cleanly: the load for threads/churn."""
    reg = get_registry()
    picked = []
    for case, view in _capability_views():
        try:
            cap = reg.get_capability(provider, view, {})
        except ort.PluginError:
            continue
        if not cap.claimed:
            continue
        try:
            inputs, _ = case.data_sets[0]
            if not all(isinstance(x, np.ndarray) for x in inputs):
                continue
            sess = ort.InferenceSession(case.model.SerializeToString(), session_options(False),
                                        providers=providers_for(provider))
            sess.run(None, case.feeds(inputs))
        except Exception:  # noqa: BLE001 - only clean cases make good probes
            continue
        picked.append(case)
        if len(picked) == limit:
            break
    return picked


@pytest.fixture(scope="module")
def probes(provider):
    cases = _probe_cases(provider)
    if not cases:
        pytest.fail(f"{provider} claims no node case that runs cleanly; nothing to probe concurrency with")
    return cases


def _hammer(sess, feeds, expected, errors: list[str]) -> None:
    """One thread's share of the concurrency check: 10 runs, each compared bit for bit."""
    try:
        for _ in range(10):
            got = sess.run(None, feeds)
            for e, g in zip(expected, got):
                if np.asarray(e).tobytes() != np.asarray(g).tobytes():
                    errors.append("results differ between threads")
                    return
    except Exception as ex:  # noqa: BLE001 - any failure is a finding
        errors.append(f"{type(ex).__name__}: {ex}")


def test_concurrent_runs_agree(provider, probes, ort_state):
    problems = []
    for case in probes:
        sess = ort.InferenceSession(case.model.SerializeToString(), session_options(False),
                                    providers=providers_for(provider))
        feeds = case.feeds(case.data_sets[0][0])
        expected = sess.run(None, feeds)
        errors: list[str] = []
        threads = [threading.Thread(target=_hammer, args=(sess, feeds, expected, errors)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            problems.append(f"{case.name}: {errors[0]}")
    _record(ort_state, "concurrent_runs", not problems, "; ".join(problems[:3]))
    assert not problems, "; ".join(problems)


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


CHURN_CYCLES = 150
CHURN_LIMIT = 16 << 20  # bytes of growth tolerated over all cycles (allocator noise, caches)


def test_session_churn_does_not_grow_memory(provider, probes, ort_state):
    case = probes[0]
    data = case.model.SerializeToString()
    feeds = case.feeds(case.data_sets[0][0])

    def cycle():
        s = ort.InferenceSession(data, session_options(False), providers=providers_for(provider))
        s.run(None, feeds)
        del s

    for _ in range(20):  # warm caches, pools and lazy imports first
        cycle()
    gc.collect()
    tracemalloc.start()
    rss0, py0 = _rss_bytes(), tracemalloc.get_traced_memory()[0]
    for _ in range(CHURN_CYCLES):
        cycle()
    gc.collect()
    rss1, py1 = _rss_bytes(), tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    growth = max(py1 - py0, (rss1 - rss0) if rss0 is not None else 0)
    ok = growth < CHURN_LIMIT
    msg = (f"{CHURN_CYCLES} create/run/drop cycles of {case.name}: memory grew by "
           f"{growth / 2**20:.1f} MiB (limit {CHURN_LIMIT / 2**20:.0f} MiB)")
    _record(ort_state, "session_churn", ok, msg)
    assert ok, msg


@pytest.mark.parametrize("check", contract_checks.NAMES)
def test_check(provider, ort_state, check):
    """The behaviour checks (contract_checks.py): one verdict each, on the provider's probe models."""
    verdict = contract_checks.CHECKS[check](provider)
    _record(ort_state, check, verdict.ok, verdict.detail)
    assert verdict.ok, f"{check}: {verdict.detail}"
