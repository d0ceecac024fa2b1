"""Behaviour checks of a provider: what its kernels and compile do at run time, which no hook answer shows.

Each check runs small probe models (probes.py) in real sessions of the provider (CPU provider after it)
and returns a Verdict: kernels writing into their inputs, outputs sharing memory with inputs, weights or
each other (or reused by the next run), compiling again per run, a second copy of baked weights, values
read before their stream finished, and nodes claimed then failed. Kernel calls are watched through the
session's plan (session_watch.py); nothing in the core or the plugin is changed. No pytest here: the suite
(suite/test_contract.py) records the verdicts for the report.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import threading
import tracemalloc
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

import ort_core as ort

from .compare import mismatch
from .probes import PROBED, PROBES, Probe, busy_variant, claimed_nodes
from .runner import CPU, providers_for, session_options
from .session_watch import Watch, same

NAMES = ("input_mutation", "output_aliasing", "recompile", "baked_weights", "stream_sync", "claim_then_fail")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    detail: str


@dataclass
class Observation:
    """What the probes' instrumented sessions showed (two runs each, different feeds)."""

    probes: list[str] = field(default_factory=list)  # probes the provider claims nodes in
    mutations: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)
    claim_failures: list[str] = field(default_factory=list)


def _session(provider: str, probe: Probe, providers: list[str] | None = None,
             options: dict | None = None) -> ort.InferenceSession:
    providers = providers or providers_for(provider)
    provider_options = [dict(options or {}) if p == provider else {} for p in providers]
    return ort.InferenceSession(probe.model.SerializeToString(), session_options(False), providers=providers,
                                provider_options=provider_options)


def _one_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " | ")
    return text if len(text) <= 300 else text[:297] + "..."


def _listed(labels, limit: int = 4) -> str:
    labels = list(labels)
    more = f" and {len(labels) - limit} more" if len(labels) > limit else ""
    return ", ".join(labels[:limit]) + more


def _verdict(problems: list[str], passed: str) -> Verdict:
    problems = list(dict.fromkeys(problems))
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        return Verdict(False, "; ".join(problems[:3]) + more)
    return Verdict(True, passed)


def _claimed_probes(provider: str) -> list[tuple[Probe, dict[int, str]]]:
    out = []
    for probe in PROBED:
        claimed = claimed_nodes(provider, probe.model)
        if claimed:
            out.append((probe, claimed))
    return out


def _fallback_warning(provider: str, caught) -> str | None:
    for w in caught:
        text = str(w.message)
        if f"'{provider}'" in text and ("falling back" in text or "skipped" in text):
            return text.replace("\n", " | ")
    return None


@functools.lru_cache(maxsize=8)
def observe(provider: str) -> Observation:
    """Run every probe the provider claims nodes in twice, watching each of its kernel calls."""
    obs = Observation()
    for probe, claimed in _claimed_probes(provider):
        obs.probes.append(probe.name)
        nodes = _listed(claimed.values())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                sess = _session(provider, probe)
            except Exception as e:  # noqa: BLE001 - a session that cannot be made is the finding
                obs.claim_failures.append(f"{probe.name}: claimed {nodes}, then the session failed: {_one_line(e)}")
                continue
        trouble = _fallback_warning(provider, caught)
        if trouble:
            obs.claim_failures.append(f"{probe.name}: claimed {nodes}, then compile failed and the session fell "
                                      f"back to the CPU provider ({trouble})")
            continue
        watch = Watch(sess, provider, probe.model)
        first: list[tuple[str, np.ndarray, np.ndarray]] = []
        for run in (1, 2):
            feeds = probe.feeds(run)
            kept = {k: v.copy() for k, v in feeds.items()}
            watch.run = run
            try:
                results = sess.run(None, feeds)
            except Exception as e:  # noqa: BLE001
                obs.claim_failures.append(f"{probe.name}: claimed {nodes}, then run() failed: {_one_line(e)}")
                break
            names = [o.name for o in sess.get_outputs()]
            for k, v in feeds.items():
                if not same(kept[k], v):
                    obs.mutations.append(f"{probe.name}: run() changed the caller's feed '{k}'")
            for i, (name, r) in enumerate(zip(names, results)):
                for other, r2 in zip(names[:i], results[:i]):
                    if _shares(r, r2):
                        obs.aliases.append(f"{probe.name}: run() returned outputs '{other}' and '{name}' in the "
                                           "same memory")
                for k, v in feeds.items():
                    if _shares(r, v):
                        obs.aliases.append(f"{probe.name}: run() returned output '{name}' in the memory of the "
                                           f"feed '{k}'")
            if run == 1:
                first = [(n, r, np.array(r, copy=True)) for n, r in zip(names, results) if isinstance(r, np.ndarray)]
            else:
                for name, r, copy in first:
                    if not same(copy, r):
                        obs.aliases.append(f"{probe.name}: the array run() returned for '{name}' changed when run() "
                                           "was called again (an output buffer reused across runs)")
        obs.mutations += [f"{probe.name}: {m}" for m in watch.mutations]
        obs.aliases += [f"{probe.name}: {m}" for m in watch.aliases + watch.reused()]
    return obs


def _shares(a, b) -> bool:
    return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.size > 0 and b.size > 0
            and np.shares_memory(a, b))


def _none_claimed(provider: str) -> Verdict:
    return Verdict(True, f"n/a: {provider} claims no node of the probe models "
                         f"({', '.join(p.name for p in PROBED)})")


# --------------------------------------------------------------------------- the checks
def check_input_mutation(provider: str) -> Verdict:
    """No kernel writes into its inputs: the caller's feeds, the weights, or other kernels' results."""
    obs = observe(provider)
    if not obs.probes:
        return _none_claimed(provider)
    return _verdict(obs.mutations, f"no kernel wrote into an input (feeds, weights, intermediates) in two runs of "
                                   f"{', '.join(obs.probes)}")


def check_output_aliasing(provider: str) -> Verdict:
    """No output shares memory with an input, a weight or another output, is read-only, or is rewritten by the
    next run."""
    obs = observe(provider)
    if not obs.probes:
        return _none_claimed(provider)
    return _verdict(obs.aliases, f"every output was fresh, writable memory, unchanged by the next run, in "
                                 f"{', '.join(obs.probes)}")


def check_claim_then_fail(provider: str) -> Verdict:
    """Every node claimed in get_capability compiles and runs."""
    obs = observe(provider)
    if not obs.probes:
        return _none_claimed(provider)
    return _verdict(obs.claim_failures, f"claimed nodes of {', '.join(obs.probes)} compiled and ran")


def plugin_folder(provider: str) -> str | None:
    from ort_core.plugins.manager import get_registry

    reg = get_registry().providers.get(provider)
    module_file = getattr(reg.plugin, "__file__", None) if reg else None
    return os.path.dirname(os.path.abspath(module_file)) + os.sep if module_file else None


def check_recompile(provider: str, runs: int = 2) -> Verdict:
    """After a first run, runs with the same shapes call no compile function of the provider.

    Watched: the instance's ``compile`` and ``compile_subgraph`` and every function of the plugin's package
    whose name contains "compile", on every thread started from the first run on (a profile hook). A vendor
    compiler reached from C without a Python function of that name in between is not seen."""
    folder = plugin_folder(provider)
    calls: Counter[str] = Counter()
    checked = []
    for probe, _ in _claimed_probes(provider):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                sess = _session(provider, probe)
            except Exception:  # noqa: BLE001 - claim_then_fail reports it
                continue
        inst = getattr(sess, "_instances", {}).get(provider)
        if inst is None:
            continue  # the provider left the session (claim_then_fail reports it)
        try:
            calls.update(_compile_calls(sess, inst.ep, probe, folder, runs))
        except Exception:  # noqa: BLE001 - claim_then_fail reports it
            continue
        checked.append(probe.name)
    if not checked:
        return _none_claimed(provider)
    if calls:
        found = ", ".join(f"{name} x{n}" for name, n in calls.most_common(4))
        return Verdict(False, f"compiled again in {runs} runs with the shapes of an earlier run: {found}")
    return Verdict(True, f"no compile call in {runs} runs after the first, with the same shapes, in "
                         f"{', '.join(checked)}")


def _compile_calls(sess, ep, probe: Probe, folder: str | None, runs: int) -> Counter[str]:
    """Calls of compile functions (see check_recompile) in ``runs`` runs after a first one, same shapes."""
    codes = {getattr(getattr(type(ep), m, None), "__code__", None) for m in ("compile", "compile_subgraph")}
    codes.discard(None)
    active = threading.Event()
    calls: Counter[str] = Counter()

    def hook(frame, event, arg):
        if event == "call" and active.is_set():
            code = frame.f_code
            if code in codes or ("compile" in code.co_name and folder and code.co_filename.startswith(folder)):
                calls[f"{probe.name}: {code.co_qualname}"] += 1

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        sess.run(None, probe.feeds(0))  # the first run may compile per shape; threads it starts get the hook
        active.set()
        for k in range(runs):
            sess.run(None, probe.feeds(k + 1))
    finally:
        active.clear()
        sys.setprofile(None)
        threading.setprofile(None)
    return calls


BAKED_FACTOR = 1.9  # copies of a weight the provider's own code may keep: its baked artifact, not two


def check_baked_weights(provider: str, options: dict | None = None) -> Verdict:
    """A provider declaring ``Preferences.bakes_weights`` keeps at most one copy of a weight (its artifact).

    Measured with tracemalloc: the bytes still allocated after session creation and a first run by
    calls made from the plugin's package, for a probe with an 8 MiB weight. Memory a vendor library takes
    outside Python's allocator (most baked artifacts) is not seen, so a second copy kept there is not
    caught; one kept in Python or numpy memory is."""
    from ort_core.plugins.manager import get_registry

    inst = get_registry().create(provider, options)
    try:
        bakes = inst.preferences().bakes_weights
    finally:
        inst.close()
    if not bakes:
        return Verdict(True, "n/a: the provider does not declare Preferences.bakes_weights (its weights are "
                             "inputs the core copies to its device once)")
    folder = plugin_folder(provider)
    for probe in PROBES:
        if not probe.name.startswith("big_weight") or not claimed_nodes(provider, probe.model):
            continue
        weight = probe.weight_bytes
        gc.collect()
        was_tracing = tracemalloc.is_tracing()
        tracemalloc.start(64)
        try:
            before = _plugin_bytes(tracemalloc.take_snapshot(), folder)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sess = _session(provider, probe, options=options)
                sess.run(None, probe.feeds(0))
            gc.collect()
            kept = _plugin_bytes(tracemalloc.take_snapshot(), folder) - before
        finally:
            if not was_tracing:
                tracemalloc.stop()
        del sess
        mib = 1 << 20
        if kept >= BAKED_FACTOR * weight:
            return Verdict(False, f"{probe.name}: keeps {kept / mib:.1f} MiB allocated by its own code after "
                                  f"compile for weights of {weight / mib:.1f} MiB: a second full copy beside "
                                  "the baked one")
        return Verdict(True, f"{probe.name}: keeps {kept / mib:.1f} MiB in Python memory for weights of "
                             f"{weight / mib:.1f} MiB (memory outside Python's allocator is not measured)")
    return Verdict(True, "n/a: the provider bakes weights but claims no node of the big-weight probes")


def _plugin_bytes(snapshot, folder: str | None) -> int:
    if not folder:
        return 0
    traces = snapshot.filter_traces([tracemalloc.Filter(True, folder + "*", all_frames=True)])
    return sum(stat.size for stat in traces.statistics("filename"))


SYNC_RUNS = 4


def check_stream_sync(provider: str) -> Verdict:
    """An asynchronous provider's values are read only after the work writing them ran: results match the
    CPU provider's run after run while its stream is kept busy, and a copy through its stream is complete
    at ``synchronize``."""
    from ort_core.plugins.manager import get_registry

    inst = get_registry().create(provider)
    try:
        if not inst.asynchronous:
            return Verdict(True, "n/a: the provider is synchronous (no stream)")
        problems = _stream_round_trip(inst)
    finally:
        inst.close()
    checked = []
    for probe, _ in _claimed_probes(provider):
        busy = busy_variant(provider, probe)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                sess = _session(provider, busy)
                ref = _session(CPU, busy, [CPU])
            except Exception:  # noqa: BLE001 - claim_then_fail reports it
                continue
        names = [o.name for o in sess.get_outputs()]
        checked.append(busy.name)
        for run in range(SYNC_RUNS):
            feeds = busy.feeds(run)
            try:
                got = sess.run(None, feeds)
            except Exception:  # noqa: BLE001
                break
            expected = ref.run(None, feeds)
            bad = next((m for m in (mismatch(e, g, 1e-4, 1e-5, f"run {run + 1} output '{n}'")
                                    for n, e, g in zip(names, expected, got)) if m), None)
            if bad:
                problems.append(f"{busy.name}: {bad}: a value was read before its stream finished writing it")
                break
    if not checked and not problems:
        return _none_claimed(provider)
    return _verdict(problems, f"{SYNC_RUNS} runs of {', '.join(checked)} with a busy stream matched the CPU "
                              "provider; a copy through the stream was complete at synchronize")


def _stream_round_trip(inst) -> list[str]:
    """host -> device -> host through ``copy_into`` on one stream, then ``synchronize``: the bytes must be back."""
    from ort_core.memory import HOST
    from ort_core.plugins.kernel import allocate

    transfer = inst.data_transfer()
    if not hasattr(transfer, "copy_into"):
        return []
    host = np.random.default_rng(7).standard_normal(1 << 21).astype(np.float32)  # 8 MiB
    try:
        stream = inst.ep.stream()
        on_device = allocate(inst.allocator(inst.device), host.shape, host.dtype)
        back = np.zeros_like(host)
        transfer.copy_into(host, on_device, stream)
        transfer.copy_into(on_device, back, stream)
        stream.synchronize()
    except Exception as e:  # noqa: BLE001
        return [f"a copy through the stream failed: {_one_line(e)}"]
    if not same(host, back) or inst.device == HOST and not same(host, on_device):
        return ["8 MiB copied host -> device -> host on one stream differ after synchronize(): synchronize "
                "returned before the stream's work was done"]
    return []


CHECKS = {
    "input_mutation": check_input_mutation,
    "output_aliasing": check_output_aliasing,
    "recompile": check_recompile,
    "baked_weights": check_baked_weights,
    "stream_sync": check_stream_sync,
    "claim_then_fail": check_claim_then_fail,
}
