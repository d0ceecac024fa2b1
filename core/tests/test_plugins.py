"""Plugin discovery through entry points, hook routing, and isolation of broken plugins."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_core.memory import HOST, Allocator, DataTransfer
from ort_core.plugins.manager import get_registry

from .conftest import install_fake_plugin as _install_fake_plugin
from .conftest import make_model

RECORDER = "RecorderExecutionProvider"


@pytest.fixture
def recorder():
    try:
        from ort_ep_recorder import plugin
    except ImportError:  # pragma: no cover - the nox session installs it
        pytest.fail("the test plugin is not installed: pip install -e core/tests/fixtures/ort-ep-recorder "
                    "(nox -s tests does this)")
    plugin.CALLS.clear()
    return plugin


def relu_add_mul_model():
    return make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                       helper.make_node("Add", ["r", "x"], ["s"], name="add"),
                       helper.make_node("Mul", ["s", "x"], ["y"], name="mul")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])


def test_installed_plugin_is_discovered_through_entry_point(recorder, fresh_registry):
    reg = fresh_registry()
    entry = reg.providers[RECORDER]
    assert entry.plugin_name == "recorder"
    assert entry.distribution == "ort-ep-recorder"
    assert entry.plugin is recorder
    assert ("ort_register_providers", "") in recorder.CALLS
    assert RECORDER in ort.get_available_providers()
    assert "AbsentExecutionProvider" not in ort.get_available_providers()


def test_plugin_hooks_are_called_and_routed(recorder):
    with pytest.warns(ort.OrtWarning, match=rf"{RECORDER}: 2/3 nodes; declined: Mul x1"):
        sess = ort.InferenceSession(relu_add_mul_model(), providers=[RECORDER, "CPUExecutionProvider"])
    assert sess.get_providers() == [RECORDER, "CPUExecutionProvider"]
    x = np.array([-2, -1, 1, 2], np.float32)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, (np.maximum(x, 0) + x) * x)
    hooks = [c for c in recorder.CALLS if c[0] != "ort_register_providers"]
    assert ("ort_get_capability", RECORDER) in hooks
    assert hooks.count(("ort_compile", RECORDER)) == 1  # Relu+Add fused into one subgraph
    assert all(p == RECORDER for _, p in hooks)  # CPU-provider calls never reach this plugin
    info = sess.get_provider_graph_assignment_info()
    assert [(a.provider, a.op_types, a.node_names) for a in info] == [
        (RECORDER, ("Relu", "Add"), ("relu", "add")), ("CPUExecutionProvider", ("Mul",), ("mul",))]


def test_plugin_memory_hooks(recorder):
    reg = get_registry()
    alloc = reg.allocator(RECORDER, HOST)
    assert isinstance(alloc, Allocator)
    for n in (0, 1, 63, 1 << 20):
        buf = alloc.allocate(n)
        assert buf.nbytes == n and buf.ctypes.data % alloc.alignment == 0
    dt = reg.data_transfer(RECORDER)
    assert isinstance(dt, DataTransfer)
    a = np.arange(5, dtype=np.int16)
    np.testing.assert_array_equal(dt.copy(a, HOST, HOST), a)
    assert ("ort_allocator", RECORDER) in recorder.CALLS and ("ort_data_transfer", RECORDER) in recorder.CALLS


def test_unavailable_provider_warns_with_reason(recorder, relu_add_model):
    with pytest.warns(ort.OrtWarning, match="'AbsentExecutionProvider' is unavailable: the test device"):
        sess = ort.InferenceSession(relu_add_model, providers=["AbsentExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_plugin_that_fails_to_import_is_skipped(tmp_path, fresh_registry, relu_add_model):
    _install_fake_plugin(tmp_path, "broken", "raise ImportError('vendor lib missing')\n",
                         "ort_ep_broken_mod")
    with pytest.warns(ort.OrtWarning, match=r"plugin 'broken' \(ort-ep-broken\) skipped: failed to import"):
        reg = fresh_registry()
    assert "broken" in reg.skipped and "vendor lib missing" in reg.skipped["broken"]
    assert ort.InferenceSession(relu_add_model).run(None, {"x": np.ones((1, 4), np.float32)})[0].shape == (1, 4)


def test_plugin_with_malformed_registration_is_skipped(tmp_path, fresh_registry):
    src = """
        from ort_core.plugins import hookimpl

        @hookimpl
        def ort_register_providers():
            return ["NotAProviderInfo"]
    """
    _install_fake_plugin(tmp_path, "malformed", src, "ort_ep_malformed_mod")
    with pytest.warns(ort.OrtWarning, match=r"plugin 'malformed'.*expected ProviderInfo"):
        reg = fresh_registry()
    assert "malformed" in reg.skipped
    assert ort.get_available_providers()[-1] == "CPUExecutionProvider"


BAD_CAPABILITY = """
    from ort_core.plugins import Capability, ProviderInfo, hookimpl

    @hookimpl
    def ort_register_providers():
        return [ProviderInfo("LiarExecutionProvider")]

    @hookimpl
    def ort_get_capability(provider, graph, options):
        return Capability(claimed=(9999,), declined={})

    @hookimpl
    def ort_compile(provider, subgraph, options):
        raise AssertionError("never compiled")
"""


def test_malformed_capability_answer_is_skipped(tmp_path, fresh_registry, relu_add_model):
    _install_fake_plugin(tmp_path, "liar", BAD_CAPABILITY, "ort_ep_liar_mod")
    fresh_registry()
    with pytest.warns(ort.OrtWarning, match=r"plugin 'liar'.*claimed node ids not offered to it: \[9999\]"):
        sess = ort.InferenceSession(relu_add_model, providers=["LiarExecutionProvider"])
    (y,) = sess.run(None, {"x": np.zeros((1, 4), np.float32)})
    np.testing.assert_array_equal(y, [[1, -2, 3, -4]])


FAILING_COMPILE = """
    from ort_core.plugins import Capability, ProviderInfo, hookimpl

    @hookimpl
    def ort_register_providers():
        return [ProviderInfo("FlakyExecutionProvider")]

    @hookimpl
    def ort_get_capability(provider, graph, options):
        return Capability(claimed=tuple(n.id for n in graph.nodes()), declined={})

    @hookimpl
    def ort_compile(provider, subgraph, options):
        raise RuntimeError("vendor compiler crashed")
"""


def test_compile_failure_falls_back_to_cpu(tmp_path, fresh_registry, relu_add_model):
    _install_fake_plugin(tmp_path, "flaky", FAILING_COMPILE, "ort_ep_flaky_mod")
    fresh_registry()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = ort.InferenceSession(relu_add_model, providers=["FlakyExecutionProvider"])
    messages = [str(w.message) for w in caught]
    assert any("plugin 'flaky'" in m and "vendor compiler crashed" in m and "falling back" in m for m in messages)
    # the nodes it had claimed are named
    assert any("(compiling " in m and "(Relu)" in m and "(Add)" in m for m in messages), messages
    assert sess.get_providers() == ["CPUExecutionProvider"]
    (y,) = sess.run(None, {"x": np.zeros((1, 4), np.float32)})
    np.testing.assert_array_equal(y, [[1, -2, 3, -4]])
