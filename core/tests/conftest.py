"""Shared fixtures: paths to the onnx wheel's test data, small model builders, registry reset."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

ONNX_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")


def load_bench_module(name: str):
    """bench/<name>.py as a module (bench/ is no package: loaded by file path, as ``ort_core_bench_<name>``, with
    bench/ on sys.path for the modules it imports), so that a test judges a model as the bench does."""
    if BENCH not in sys.path:  # the bench modules import each other by name, as scripts run from bench/ do
        sys.path.append(BENCH)
    spec = importlib.util.spec_from_file_location(f"ort_core_bench_{name}", os.path.join(BENCH, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def pytest_addoption(parser):
    group = parser.getgroup("ort-core fuzz")
    group.addoption("--fuzz-examples", type=int, default=int(os.environ.get("ORT_CORE_FUZZ_EXAMPLES", "100")),
                    help="hypothesis examples per fuzz test (default 100: a short run inside the normal tests)")
    group.addoption("--fuzz-random", action="store_true",
                    help="draw fresh random examples instead of the fixed (derandomized) ones")
    group.addoption("--fuzz-memory-gib", type=float, default=0,
                    help="cap the address space (RLIMIT_AS) of the fuzzing process: an allocation escaping the "
                         "size checks then shows up as a finding instead of swapping the machine (0: no cap)")


def make_model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=8, extra_opsets=()):
    graph = helper.make_graph(nodes, "test_graph", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    model.ir_version = ir_version
    return model


_PLUGIN_SOURCES = {"ort_ep_example": "plugins/ort-ep-example", "ort_ep_recorder": "core/tests/fixtures/ort-ep-recorder"}


def import_test_plugins(*modules: str) -> list:
    """Import modules of the test plugins (example, recorder); a missing one fails the test saying what to install."""
    try:
        return [importlib.import_module(m) for m in modules]
    except ImportError:  # pragma: no cover - nox -s tests installs them
        wanted = " and ".join(dict.fromkeys(_PLUGIN_SOURCES[m.partition(".")[0]] for m in modules))
        pytest.fail(f"install {wanted} (nox -s tests does)")


def record_copies(monkeypatch, *transfer_classes) -> list[tuple[str, str]]:
    """Patch each DataTransfer class so that every copy it makes (``copy``, or ``copy_into`` for transfers that
    copy on streams) appends (src, dst), as strings, to the returned list, in order."""
    from ort_core.memory import HOST, DeviceTensor

    seen: list[tuple[str, str]] = []
    for cls in transfer_classes:
        original = cls.copy
        original_into = getattr(cls, "copy_into", None)
        inside = [False]  # copy() made through copy_into counts once

        def counting(self, value, src, dst, _original=original, inside=inside):
            seen.append((str(src), str(dst)))
            inside[0] = True
            try:
                return _original(self, value, src, dst)
            finally:
                inside[0] = False

        def counting_into(self, src_value, dst_value, stream, _original=original_into, inside=inside):
            if not inside[0]:
                seen.append(tuple(str(v.device if isinstance(v, DeviceTensor) else HOST)
                                  for v in (src_value, dst_value)))
            return _original(self, src_value, dst_value, stream)

        monkeypatch.setattr(cls, "copy", counting)
        if original_into is not None:
            monkeypatch.setattr(cls, "copy_into", counting_into)
    return seen


def slow_down_example_device(monkeypatch, seconds: float) -> None:
    """Make the example provider's device work (on its stream's worker) take ``seconds`` longer: whatever
    reads its values must then really wait for the stream."""
    import time

    (kernels,) = import_test_plugins("ort_ep_example.kernels")
    compute = kernels._compute

    def slow(plan, tensors):
        time.sleep(seconds)
        compute(plan, tensors)

    monkeypatch.setattr(kernels, "_compute", slow)


def install_fake_plugin(tmp_path, name: str, module_src: str | None, target: str) -> None:
    """Make a plugin distribution visible to importlib.metadata: a dist-info folder (and the module
    ``target`` holding ``module_src``) on sys.path; the ``fresh_registry`` fixture restores sys.path."""
    import sys
    import textwrap

    dist = tmp_path / f"ort_ep_{name}-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: ort-ep-{name}\nVersion: 0.0.1\n")
    (dist / "entry_points.txt").write_text(f"[ort_core.providers]\n{name} = {target}\n")
    if module_src is not None:
        (tmp_path / f"{target}.py").write_text(textwrap.dedent(module_src))
    sys.path.insert(0, str(tmp_path))


def load_fake_plugin(tmp_path, fresh_registry, name: str, module_src: str, target: str):
    """Install a fake plugin (``install_fake_plugin``), rescan the registry quietly and return its module with
    its recorded ``EVENTS`` cleared."""
    import warnings

    install_fake_plugin(tmp_path, name, module_src, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh_registry()
    module = importlib.import_module(target)
    module.EVENTS.clear()
    return module


def relu_sin_add_mul_model() -> onnx.ModelProto:
    """y = (Sin(Relu(x)) + x) * x on float[4]: a provider taking all but Sin gets two subgraphs, the CPU
    provider Sin between them."""
    return make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                       helper.make_node("Sin", ["r"], ["s"], name="sin"),
                       helper.make_node("Add", ["s", "x"], ["a"], name="add"),
                       helper.make_node("Mul", ["a", "x"], ["y"], name="mul")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])


@pytest.fixture
def relu_add_model():
    """y = Relu(x) + b with x: float[N, 4] and a constant b."""
    b = onnx.numpy_helper.from_array(np.array([1, -2, 3, -4], np.float32), "b")
    return make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "b"], ["y"], name="add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [b])


@pytest.fixture
def fresh_registry():
    """Rescan plugins on demand; afterwards restore sys.path and rescan what is really installed."""
    import sys
    import warnings

    from ort_core.plugins.manager import get_registry

    saved_path = list(sys.path)
    yield lambda: get_registry(reload=True)
    sys.path[:] = saved_path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        get_registry(reload=True)
