"""register_execution_provider_library / unregister_execution_provider_library: an ort-core plugin that is not
installed (a module file, a package or project folder, a wheel) joins the registry and leaves it again; native
onnxruntime plugin-EP libraries are refused. Also the efficiency and power hints a plugin may declare for the
MAX_EFFICIENCY and MIN_OVERALL_POWER policies (through such a registered plugin)."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
import zipfile

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core
from ort_core.errors import Fail, InvalidArgument, NoSuchFile

from .conftest import make_model

NUMPYISH = os.path.join(os.path.dirname(__file__), "..", "..", "conformance", "tests", "fixtures", "outside",
                        "ort-ep-numpyish")
NAME = "NumpyishExecutionProvider"
pytestmark = pytest.mark.filterwarnings("ignore:provider assignment")


def _runtimes():
    yield pytest.param(ort_core, id="ort_core")
    try:
        yield pytest.param(importlib.import_module("onnxruntime"), id="onnxruntime")
    except ImportError:  # pragma: no cover
        yield pytest.param(None, id="onnxruntime", marks=pytest.mark.skip(reason="onnxruntime is not installed"))


def _model_bytes() -> bytes:
    vi = helper.make_tensor_value_info
    return make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "r"], ["y"])],
                      [vi("x", TensorProto.FLOAT, [3])], [vi("y", TensorProto.FLOAT, [3])]).SerializeToString()


@pytest.fixture
def registered():
    """Names registered by the test, unregistered afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            ort_core.unregister_execution_provider_library(name)
        except Fail:
            pass


def _numpyish_wheel(folder) -> str:
    """A wheel of the numpyish fixture, zipped from its sources (what `pip wheel` would put in it)."""
    path = os.path.join(folder, "ort_ep_numpyish-0.3.1-py3-none-any.whl")
    src = os.path.join(NUMPYISH, "src", "ort_ep_numpyish")
    with zipfile.ZipFile(path, "w") as whl:
        for name in ("__init__.py", "plugin.py"):
            whl.write(os.path.join(src, name), f"ort_ep_numpyish/{name}")
        whl.writestr("ort_ep_numpyish-0.3.1.dist-info/entry_points.txt",
                     '[ort_core.providers]\nnumpyish = ort_ep_numpyish.plugin\n')
        whl.writestr("ort_ep_numpyish-0.3.1.dist-info/METADATA", "Name: ort-ep-numpyish\nVersion: 0.3.1\n")
    return path


@pytest.mark.parametrize("where", ["project", "package", "module", "wheel"])
def test_a_plugin_from_a_path_runs_a_session_and_leaves_when_unregistered(registered, where, tmp_path):
    path = {"project": NUMPYISH, "package": os.path.join(NUMPYISH, "src", "ort_ep_numpyish"),
            "module": os.path.join(NUMPYISH, "src", "ort_ep_numpyish", "plugin.py"),
            "wheel": _numpyish_wheel(tmp_path)}[where]
    assert NAME not in ort_core.get_available_providers()
    ort_core.register_execution_provider_library("numpyish", path)
    registered.append("numpyish")
    assert NAME in ort_core.get_available_providers()
    (device,) = [d for d in ort_core.get_ep_devices() if d.ep_name == NAME]
    assert device.device.type == ort_core.OrtHardwareDeviceType.CPU and device.ep_metadata == {"version": "0.3.1"}
    so = ort_core.SessionOptions()
    so.add_provider_for_devices([device], {})
    sess = ort_core.InferenceSession(_model_bytes(), so)
    assert sess.get_providers() == [NAME, "CPUExecutionProvider"]
    assert [a.provider for a in sess.get_provider_graph_assignment_info()] == [NAME]
    np.testing.assert_array_equal(sess.run(None, {"x": np.array([-1, 2, 3], np.float32)})[0], [0, 4, 6])

    ort_core.unregister_execution_provider_library("numpyish")
    registered.remove("numpyish")
    assert NAME not in ort_core.get_available_providers()
    assert NAME not in {d.ep_name for d in ort_core.get_ep_devices()}
    assert not [m for m in sys.modules if m.startswith("ort_ep_numpyish")]  # loaded afresh next time
    np.testing.assert_array_equal(sess.run(None, {"x": np.ones(3, np.float32)})[0], [2, 2, 2])  # sessions keep it
    with pytest.raises(InvalidArgument, match=f"unknown device: provider '{NAME}' is no longer installed"):
        ort_core.SessionOptions().add_provider_for_devices([device], {})


def test_registering_one_name_twice_or_an_installed_provider_is_refused(registered, tmp_path):
    ort_core.register_execution_provider_library("numpyish", NUMPYISH)
    registered.append("numpyish")
    with pytest.raises(Fail, match="already registered as 'numpyish'"):
        ort_core.register_execution_provider_library("numpyish", NUMPYISH)
    with pytest.raises(Fail, match="a module 'ort_ep_numpyish' is already imported from .* cannot be loaded beside"):
        ort_core.register_execution_provider_library("again", _numpyish_wheel(tmp_path))
    assert ort_core.get_available_providers().count(NAME) == 1
    (tmp_path / "impostor.py").write_text(HINTED.replace("SwiftExecutionProvider", "ExampleExecutionProvider"))
    with pytest.raises(Fail, match=r"declares providers already registered \('ExampleExecutionProvider' by plugin "
                                   r"'example' \(ort-ep-example\)\)"):
        ort_core.register_execution_provider_library("impostor", tmp_path / "impostor.py")
    assert "FrugalExecutionProvider" not in ort_core.get_available_providers()


@pytest.mark.parametrize("library, instead", [
    ("/opt/vendor/libonnxruntime_providers_openvino.so", "install the ort-core plugin ort-ep-openvino"),
    ("C:/vendor/onnxruntime_providers_qnn.dll", "install the ort-core plugin ort-ep-qnn"),
    ("/opt/vendor/libmy_ep.so.1.2", "use the vendor's ort-core provider plugin"),
    ("/opt/vendor/libmy_ep.dylib", "use the vendor's ort-core provider plugin"),
])
def test_a_native_onnxruntime_plugin_library_is_refused_saying_why(library, instead):
    with pytest.raises(InvalidArgument, match="onnxruntime's C ABI") as caught:
        ort_core.register_execution_provider_library("native", library)
    assert "needs an ort-core provider plugin" in str(caught.value) and instead in str(caught.value)


def test_paths_that_are_not_plugins_are_named(tmp_path):
    with pytest.raises(NoSuchFile, match="no_such_plugin does not exist"):
        ort_core.register_execution_provider_library("x", tmp_path / "no_such_plugin")
    (tmp_path / "model.onnx").write_bytes(_model_bytes())
    with pytest.raises(InvalidArgument, match=r"model.onnx is neither a plugin module \(.py\), a folder nor a wheel"):
        ort_core.register_execution_provider_library("x", tmp_path / "model.onnx")
    with pytest.raises(InvalidArgument, match="neither pyproject.toml .* nor __init__.py"):
        ort_core.register_execution_provider_library("x", tmp_path)
    (tmp_path / "fake.whl").write_bytes(b"not a zip")
    with pytest.raises(InvalidArgument, match="fake.whl is not a wheel"):
        ort_core.register_execution_provider_library("x", tmp_path / "fake.whl")
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(ort_core.PluginError, match="registered no provider"):
        ort_core.register_execution_provider_library("x", tmp_path / "empty.py")
    with pytest.raises(InvalidArgument, match="path must be a string or os.PathLike, got int"):
        ort_core.register_execution_provider_library("x", 3)
    with pytest.raises(InvalidArgument, match="registration_name must be a non-empty string"):
        ort_core.register_execution_provider_library("", NUMPYISH)


@pytest.mark.parametrize("rt", list(_runtimes()))
def test_unregistering_an_unknown_name_fails_naming_it(rt):
    with pytest.raises(Exception, match="Execution provider library: nope was not registered"):
        rt.unregister_execution_provider_library("nope")


@pytest.mark.parametrize("rt", list(_runtimes()))
def test_a_library_that_is_no_plugin_is_refused_on_both_runtimes(rt, tmp_path):
    (tmp_path / "libnot_an_ep.so").write_bytes(b"\x7fELF not really")
    with pytest.raises(Exception, match="libnot_an_ep.so"):
        rt.register_execution_provider_library("not_an_ep", str(tmp_path / "libnot_an_ep.so"))


# ------------------------------------------------------------------------ hints for the policies

HINTED = textwrap.dedent('''
    from ort_core.memory import Device
    from ort_core.plugins import Capability, ExecutionProvider, ProviderInfo, hookimpl

    ORT_EP_METADATA = {
        "FrugalExecutionProvider": {"ort_core.efficiency": "2", "ort_core.power_watts": "3"},
        "SwiftExecutionProvider": {"ort_core.hardware_type": "GPU", "ort_core.efficiency": "5",
                                   "ort_core.power_watts": "40"},
    }
    INFOS = [ProviderInfo("FrugalExecutionProvider", (Device("frugal"),), options={}),
             ProviderInfo("SwiftExecutionProvider", (Device("swift"),), options={})]


    class Declining(ExecutionProvider):
        def get_capability(self, graph):
            return Capability.from_reasons(graph.nodes(), lambda node: "a test provider that runs nothing")


    @hookimpl
    def ort_register_providers():
        return INFOS


    @hookimpl
    def ort_create_provider(provider, options, session):
        return Declining(next(i for i in INFOS if i.name == provider), options, session)
''')


@pytest.mark.parametrize("policy, first", [("MAX_EFFICIENCY", "SwiftExecutionProvider"),
                                           ("MIN_OVERALL_POWER", "FrugalExecutionProvider"),
                                           ("PREFER_GPU", "SwiftExecutionProvider"),
                                           ("MAX_PERFORMANCE", "SwiftExecutionProvider"),
                                           ("PREFER_NPU", "ExampleExecutionProvider")])
def test_declared_hints_steer_the_efficiency_and_power_policies(registered, tmp_path, policy, first):
    (tmp_path / "hinted.py").write_text(HINTED)
    ort_core.register_execution_provider_library("hinted", tmp_path / "hinted.py")
    registered.append("hinted")
    swift = [d for d in ort_core.get_ep_devices() if d.ep_name == "SwiftExecutionProvider"]
    assert [(d.device.type, d.ep_metadata["ort_core.efficiency"]) for d in swift] == \
        [(ort_core.OrtHardwareDeviceType.GPU, "5")]
    so = ort_core.SessionOptions()
    so.set_provider_selection_policy(getattr(ort_core.OrtExecutionProviderDevicePolicy, policy))
    sess = ort_core.InferenceSession(_model_bytes(), so)
    assert sess.get_providers() == [first, "CPUExecutionProvider"]
    np.testing.assert_array_equal(sess.run(None, {"x": np.array([-1, 2, 3], np.float32)})[0], [0, 4, 6])
