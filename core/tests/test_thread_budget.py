"""Thread budgets (ort_core.threads): intra_op_num_threads checked, followed by kernels, providers and the
process-wide BLAS pool (the largest budget among live sessions)."""

from __future__ import annotations

import gc

import pytest
from threadpoolctl import threadpool_info

from ort_core import threads
from ort_core.limits import RunContext, run_context
from ort_core.providers.cpu.ops import ml_tree_walk
from ort_core.threads import BlasPool, available_cpus, budget_of


def blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


class Owner:
    """Stands for a session: its budget counts while it lives."""


def test_budget_is_the_cpus_by_default_and_the_number_given_otherwise():
    assert budget_of(0) == available_cpus() >= 1
    assert budget_of(3) == 3
    for bad in (-1, 1.5, "2", True, None):
        with pytest.raises(ValueError, match="intra_op_num_threads"):
            budget_of(bad)


def test_tree_walk_uses_at_most_the_running_sessions_budget():
    with run_context(RunContext(threads=1)):
        assert ml_tree_walk.thread_budget() == 1
    with run_context(RunContext(threads=64)):
        assert ml_tree_walk.thread_budget() == ml_tree_walk.MAX_THREADS
    with run_context(RunContext()):
        assert ml_tree_walk.thread_budget() == min(ml_tree_walk.MAX_THREADS, available_cpus())


def test_tree_walk_with_a_budget_of_one_never_uses_the_pool(monkeypatch):
    def no_pool():
        raise AssertionError("the pool was used")

    monkeypatch.setattr(ml_tree_walk, "_executor", no_pool)
    spans = []
    with run_context(RunContext(threads=1)):
        ml_tree_walk.run_blocks(lambda a, b: spans.append((a, b)), 100_000, 64, 10_000)
    assert spans[0][0] == 0 and spans[-1][1] == 100_000 and len(spans) == 10


@pytest.mark.skipif(not blas_threads(), reason="threadpoolctl finds no BLAS library in this process")
def test_blas_follows_the_largest_live_budget_and_comes_back():
    original = max(blas_threads())
    pool = BlasPool()
    default = Owner()
    pool.register(default, 0)
    assert pool.threads() is None and max(blas_threads()) == original  # defaults alone change nothing
    one = Owner()
    pool.register(one, 1)
    assert max(blas_threads()) == original  # a default session still lives: BLAS keeps its own count
    del default
    gc.collect()
    assert blas_threads() == [1] * len(blas_threads())
    three = Owner()
    pool.register(three, 3)
    assert max(blas_threads()) == 3
    del three
    gc.collect()
    assert max(blas_threads()) == 1
    del one
    gc.collect()
    assert max(blas_threads()) == original


def _model():
    from onnx import TensorProto, helper

    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2]) for n in ("x", "y")]
    return helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", vi[:1], vi[1:]),
                             opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_session_publishes_its_budget_to_kernels_and_providers():
    import ort_core as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(_model(), so)
    assert sess._limits.threads == 1 and sess._context.intra_op_num_threads == 1
    default = ort.InferenceSession(_model())
    assert default._limits.threads == available_cpus() and default._context.intra_op_num_threads == 0


@pytest.mark.parametrize("bad", [-2, 1.5])
def test_a_bad_budget_is_refused_naming_the_option(bad):
    import ort_core as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = bad
    with pytest.raises(ort.InvalidArgument, match="intra_op_num_threads"):
        ort.InferenceSession(_model(), so)


def test_openvino_and_onednn_take_the_budget_unless_their_own_option_says(monkeypatch):
    import ort_core as ort
    from ort_core.plugins.manager import get_registry
    from ort_core.plugins.provider import SessionContext

    registry = get_registry()
    checked = []
    for name, option in (("OpenVINOExecutionProvider", "num_of_threads"), ("DnnlExecutionProvider", "num_threads")):
        if name not in registry.providers or not registry.providers[name].info.available:
            continue
        plain = registry.create(name, {}, SessionContext(intra_op_num_threads=1))
        own = registry.create(name, {option: "2"}, SessionContext(intra_op_num_threads=1))
        default = registry.create(name, {}, SessionContext())
        assert getattr(plain.ep.opts, option) == 1
        assert getattr(own.ep.opts, option) == 2
        assert getattr(default.ep.opts, option) == 0  # the library's own default
        checked.append(name)
    if not checked:
        pytest.skip("neither the OpenVINO nor the oneDNN plugin is installed and available")
    assert ort.SessionOptions().intra_op_num_threads == 0


@pytest.mark.skipif(not blas_threads(), reason="threadpoolctl finds no BLAS library in this process")
def test_a_session_collected_while_the_pool_is_busy_never_blocks_and_is_counted_out_later():
    """A garbage collection may run a session's finalizer inside the pool's own work, in the same thread
    (while threadpoolctl is imported, say): the finalizer must not wait for the lock it interrupts."""
    original = max(blas_threads())
    pool = BlasPool()
    one = Owner()
    pool.register(one, 1)
    with pool._lock:  # the pool is busy in this very thread
        del one
        gc.collect()  # runs the finalizer here: it must return at once
        assert len(pool._live) == 1
    assert pool.threads() == original and pool._live == {}  # counted out on the next use: BLAS as it was
    assert max(blas_threads()) == original


class FakeBlas:
    """threadpoolctl's controller, as far as BlasPool uses it: a BLAS library whose thread count is set."""

    def __init__(self, threads: int) -> None:
        self.num_threads = threads
        self.lib_controllers = [self]
        self.limits: list[int] = []

    def select(self, user_api):
        return self

    def limit(self, limits, user_api):
        self.limits.append(limits)
        self.num_threads = limits


def test_load_is_read_from_proc_loadavg_without_this_process():
    assert threads.others_running("0.52 0.58 0.59 3/345 12345\n", own=1) == 2
    assert threads.others_running("0.52 0.58 0.59 1/345 12345\n", own=2) == 0
    assert threads.others_running("garbage", own=0) is None
    assert [threads.fair_threads(4, others, 4) for others in (0, 1, 3, 9)] == [4, 3, 1, 1]
    assert threads.fair_threads(16, 0, 8) == 8


def test_under_load_blas_gets_the_cpus_left_and_its_threads_back_after(monkeypatch):
    monkeypatch.delenv(threads.ADAPTIVE_ENV, raising=False)  # the adaptive default, whatever ran before
    blas = FakeBlas(2)
    pool = BlasPool()
    monkeypatch.setattr(pool, "_blas_controller", lambda: blas)
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    load = {"others": 0}
    monkeypatch.setattr(threads, "others_running", lambda: load["others"])

    def run():
        pool._next_check = 0.0  # as if CHECK_INTERVAL had passed
        pool.before_run()

    default = Owner()
    pool.register(default, 0)
    run()
    assert blas.limits == []  # idle: BLAS is left alone
    load["others"] = 1
    run()
    assert blas.num_threads == 1
    load["others"] = 0
    pool.before_run()  # within CHECK_INTERVAL: no new look, so the load that went is not seen yet
    assert blas.limits == [1]
    run()
    assert blas.limits == [1, 2]
    load["others"] = 1
    run()
    another = Owner()
    pool.register(another, 0)  # a session at the default, made or collected under load, keeps the adjustment
    del another
    gc.collect()
    pool.threads()
    assert blas.limits == [1, 2, 1] and blas.num_threads == 1
    load["others"] = 0
    run()
    assert blas.limits == [1, 2, 1, 2]
    explicit = Owner()
    pool.register(explicit, 2)
    load["others"] = 1
    blas.limits.clear()
    run()
    assert blas.limits == []  # an explicit budget rules the pool: never lowered for load
    del explicit
    gc.collect()
    monkeypatch.setenv(threads.ADAPTIVE_ENV, "0")
    run()
    assert blas.limits == [2]  # the explicit budget went: BLAS's own count back (the last value set)
    blas.limits.clear()
    run()
    assert blas.limits == []  # turned off: no look at the load


def test_turning_the_load_check_off_gives_blas_its_threads_back_at_once(monkeypatch):
    monkeypatch.delenv(threads.ADAPTIVE_ENV, raising=False)
    blas = FakeBlas(2)
    pool = BlasPool()
    monkeypatch.setattr(pool, "_blas_controller", lambda: blas)
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    monkeypatch.setattr(threads, "others_running", lambda: 1)
    default = Owner()
    pool.register(default, 0)
    pool._next_check = 0.0
    pool.before_run()
    assert blas.num_threads == 1  # the load took a CPU
    monkeypatch.setenv(threads.ADAPTIVE_ENV, "0")
    pool.before_run()  # within CHECK_INTERVAL, still: the adjustment goes at once
    assert blas.num_threads == 2 and blas.limits == [1, 2]
    pool._next_check = 0.0
    pool.before_run()
    assert blas.limits == [1, 2]  # and no new look at the load
