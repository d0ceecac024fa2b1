"""Registration asks NVML, not CUDA, which GPUs there are (a process that initialized CUDA cannot use it in children
it forks). NVML is replaced by a compiled stand-in (fixtures/fake_nvml.c) so that these run without a GPU, and
where one is too: the GPUs it reports, CUDA_VISIBLE_DEVICES read as the CUDA runtime reads it, a driver that is
not loaded, and the fall back to the CUDA runtime where NVML cannot answer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from cuda_helpers import NAME
from ort_ep_cuda import nvml, runtime

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory) -> str:
    cc = next((shutil.which(c) for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if cc is None:
        pytest.skip("no C compiler (tried $CC, cc, gcc, clang): the NVML stand-in is compiled for these tests")
    out = str(tmp_path_factory.mktemp("nvml") / "libfake-nvml.so")
    done = subprocess.run([cc, "-shared", "-fPIC", "-O1", os.path.join(HERE, "fixtures", "fake_nvml.c"), "-o", out],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def with_fake(fake_nvml, monkeypatch):
    monkeypatch.setattr(nvml, "LIBRARY", fake_nvml)
    monkeypatch.delenv(nvml.VISIBLE_ENV, raising=False)
    monkeypatch.setenv("FAKE_NVML_GPUS", "2")
    monkeypatch.delenv("FAKE_NVML_INIT", raising=False)
    return monkeypatch


def test_nvml_lists_the_gpus_with_their_architecture(with_fake):
    gpus, why = nvml.probe()
    assert why == "" and [(g.id, g.name, g.arch) for g in gpus] == [(0, "FAKE GPU 0", 90), (1, "FAKE GPU 1", 90)]


@pytest.mark.parametrize("visible, names", [
    ("1", ["FAKE GPU 1"]), ("1,0", ["FAKE GPU 1", "FAKE GPU 0"]), ("0,7,1", ["FAKE GPU 0"]),
    ("GPU-1abc", ["FAKE GPU 1"]), ("1abcdef", ["FAKE GPU 1"]), ("0,0", ["FAKE GPU 0"])])
def test_cuda_visible_devices_is_read_as_the_cuda_runtime_reads_it(with_fake, visible, names):
    with_fake.setenv(nvml.VISIBLE_ENV, visible)
    gpus, why = nvml.probe()
    assert why == "" and [g.name for g in gpus] == names and [g.id for g in gpus] == list(range(len(names)))


@pytest.mark.parametrize("visible", ["", "7", "-1", "GPU-ffff"])
def test_cuda_visible_devices_hiding_every_gpu_is_the_reason(with_fake, visible):
    with_fake.setenv(nvml.VISIBLE_ENV, visible)
    assert nvml.probe() == ([], f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU (NVML finds 2); unset it or name "
                                "a GPU in it")


def test_a_driver_that_is_not_loaded_is_the_reason(with_fake):
    with_fake.setenv("FAKE_NVML_INIT", "9")
    gpus, why = nvml.probe()
    assert gpus == [] and "the NVIDIA driver is not loaded (NVML: Driver Not Loaded)" in why


def test_where_nvml_cannot_answer_the_cuda_runtime_is_asked(with_fake, tmp_path):
    with_fake.setenv(nvml.VISIBLE_ENV, "MIG-0123")  # MIG instances: NVML's devices are not CUDA's
    assert nvml.probe() is None
    with_fake.setattr(nvml, "LIBRARY", str(tmp_path / "libnvidia-ml.so.1"))  # no NVML at all
    with_fake.delenv(nvml.VISIBLE_ENV)
    assert nvml.probe() is None
    with_fake.setattr(runtime, "_devices", {})
    assert runtime.listed_devices() == runtime._probe_devices()


_REGISTER = textwrap.dedent("""
    import json, warnings, numpy as np
    from ort_ep_cuda import nvml, runtime
    nvml.LIBRARY = {library!r}
    asked = []
    runtime.Runtime.device_count = lambda self: asked.append("cudaGetDeviceCount") or (100, 0)
    import ort_core as ort
    from ort_core.plugins.manager import get_registry
    info = get_registry().providers[{name!r}].info
    listed = {{"available": info.available, "reason": info.reason, "devices": [str(d) for d in info.devices],
              "description": info.description, "asked_at_registration": list(asked)}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from onnx import TensorProto, helper
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        s = ort.InferenceSession(m.SerializeToString(), providers=[{name!r}, "CPUExecutionProvider"])
        y = s.run(None, {{"x": np.array([-1.0, 2.0], np.float32)}})[0]
    listed.update(y=y.tolist(), providers=s.get_providers(), asked=asked, warnings=[str(w.message) for w in caught])
    print(json.dumps(listed))
""")


def test_registration_lists_nvmls_gpus_without_asking_cuda(fake_nvml):
    """In a fresh process: the provider registers as available with NVML's two GPUs and CUDA is not asked; the
    session that then asks for it is where CUDA is asked (here it answers that it has no device: the provider is
    skipped with that reason and the CPU provider runs the model)."""
    env = {**os.environ, "FAKE_NVML_GPUS": "2"}
    env.pop(nvml.VISIBLE_ENV, None)
    done = subprocess.run([sys.executable, "-c", _REGISTER.format(library=fake_nvml, name=NAME)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if not got["available"]:  # the CUDA libraries themselves are missing here: NVML is never reached
        assert "pip install" in got["reason"] and got["asked_at_registration"] == []
        pytest.skip(f"the CUDA libraries do not load here: {got['reason']}")
    assert got["devices"] == ["cuda:0", "cuda:1"] and "FAKE GPU 0 (sm_90); FAKE GPU 1 (sm_90)" in got["description"]
    assert got["y"] == [0.0, 2.0] and got["providers"] == ["CPUExecutionProvider"]
    assert got["asked_at_registration"] == [] and got["asked"] == ["cudaGetDeviceCount"]  # the session asked
    assert any("provider skipped" in w and "no CUDA-capable GPU is visible" in w for w in got["warnings"])
