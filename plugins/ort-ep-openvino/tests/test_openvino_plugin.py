"""Tests of the OpenVINO provider: discovery, availability, options, capability, results, threads.

Runs against the installed distribution and the openvino wheel's libopenvino_c (skipped with the
reason when it cannot be loaded; test_openvino_unavailable.py covers that case); the conformance suite
certifies it broadly.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_ep_openvino import runtime

if runtime.unavailable_reason():
    pytest.skip(f"OpenVINO unavailable: {runtime.unavailable_reason()}", allow_module_level=True)

from ort_ep_openvino import capability, plugin  # noqa: E402
from ort_ep_openvino.options import Options, parse  # noqa: E402

import ort_core as ort  # noqa: E402
from ort_core.memory import HOST  # noqa: E402
from ort_core.plugins.manager import get_registry  # noqa: E402
from ort_core.session import CHECK_OUTPUTS_KEY  # noqa: E402

NAME = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def session(model, providers=(NAME,), **kwargs):
    so = ort.SessionOptions()
    so.add_session_config_entry(CHECK_OUTPUTS_KEY, "1")  # kernel outputs checked against the model's types
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)  # the assignment summary
        return ort.InferenceSession(model.SerializeToString(), so, providers=list(providers), **kwargs)


def placement(sess):
    return [(a.provider, a.op_types) for a in sess.get_provider_graph_assignment_info()]


def small_cnn(batch=1):
    """Conv-Relu-MaxPool-Conv-GlobalAveragePool-Flatten-Gemm with seeded weights."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32), "w2")
    fc = numpy_helper.from_array((rng.standard_normal((10, 16)) * 0.3).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
    ]
    return make_model(nodes, [helper.make_tensor_value_info("x", F32, [batch, 3, 16, 16])],
                      [helper.make_tensor_value_info("y", F32, [batch, 10])], [w1, w2, fc])


# ------------------------------------------------------------------------------ discovery

def test_discovered_through_entry_point_and_available():
    entry = get_registry().providers[NAME]
    assert entry.plugin is plugin
    assert (entry.plugin_name, entry.distribution) == ("openvino", "ort-ep-openvino")
    assert entry.info.available, entry.info.reason
    assert entry.info.devices == (HOST,)
    assert runtime.runtime().version in entry.info.description
    assert NAME in ort.get_available_providers()
    assert "CPU" in runtime.Core(runtime.runtime()).available_devices()


# -------------------------------------------------------------------------------- options

def test_options_are_validated_and_mapped_to_openvino_properties():
    assert parse({}) == Options()
    opts = parse({"device_type": "cpu", "precision": "bf16", "num_of_threads": "2", "num_streams": 1})
    assert opts.compile_properties() == {"INFERENCE_PRECISION_HINT": "bf16", "INFERENCE_NUM_THREADS": "2",
                                         "NUM_STREAMS": "1"}
    assert Options().compile_properties() == {"INFERENCE_PRECISION_HINT": "f32"}
    assert parse({"device_type": "AUTO:GPU,CPU"}).devices == ["GPU", "CPU"]
    for bad, match in [({"device": "CPU"}, "unknown provider option"), ({"device_type": "TPU"}, "device_type"),
                       ({"precision": "INT3"}, "precision"), ({"num_streams": "two"}, "whole number")]:
        with pytest.raises(ValueError, match=match):
            parse(bad)


def test_unknown_or_bad_option_is_an_error_naming_the_valid_ones():
    model = small_cnn().SerializeToString()
    with pytest.raises(ort.InvalidArgument, match=r"unknown provider option\(s\) \['bogus'\] for "
                                                  f"'{NAME}'; valid options: cache_dir, device_type"):
        ort.InferenceSession(model, providers=[(NAME, {"bogus": 1})])
    with pytest.raises(ort.InvalidArgument, match=f"provider '{NAME}': precision='INT3'"):
        ort.InferenceSession(model, providers=[(NAME, {"precision": "INT3"})])


def test_absent_device_declines_every_node_with_the_reason():
    model = small_cnn()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        sess = ort.InferenceSession(model.SerializeToString(), providers=[(NAME, {"device_type": "NPU.7"})])
    assert all(p == CPU for p, _ in placement(sess))
    core = runtime.Core(runtime.runtime())
    assert plugin.device_reason(parse({"device_type": "NPU.7"}), core).startswith(
        "OpenVINO device NPU.7 is not available")
    assert any("OpenVINOExecutionProvider: 0/" in str(m.message) for m in w)
    assert "OpenVINO device NPU.7 is not available here (available: CPU" in sess.explain()


def test_default_precision_is_f32_and_bf16_is_an_opt_in():
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       [helper.make_tensor_value_info(n, F32, [32, 32]) for n in "ab"],
                       [helper.make_tensor_value_info("y", F32, [32, 32])])
    data = model.SerializeToString()
    core = runtime.Core(runtime.runtime())
    compiled = runtime.compile_bytes(core, data, "CPU", parse({}).compile_properties())
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == "f32"
    caps = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES").split()
    if "BF16" in caps:
        compiled = runtime.compile_bytes(core, data, "CPU", parse({"precision": "BF16"}).compile_properties())
        assert compiled.get_property("INFERENCE_PRECISION_HINT") == "bf16"
    if "FP16" not in caps:
        assert "precision FP16 is not supported" in plugin.device_reason(parse({"precision": "FP16"}), core)


# --------------------------------------------------------------------- results and placement

@pytest.mark.parametrize("precision, tol", [("FP32", 1e-5), ("BF16", 5e-2)])
def test_cnn_runs_fused_on_openvino_and_matches_the_cpu_provider(precision, tol):
    model = small_cnn(batch=2)
    sess = session(model, providers=[(NAME, {"precision": precision})])
    assert placement(sess) == [(NAME, ("Conv", "Relu", "MaxPool", "Conv", "GlobalAveragePool", "Flatten", "Gemm"))]
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    want = session(model, providers=[CPU]).run(None, {"x": x})[0]
    assert got.dtype == np.float32 and got.shape == (2, 10)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_operator_openvino_cannot_take_splits_the_model_with_cpu():
    """MatMul-Add-Relu | Det (not in OpenVINO's ONNX frontend) | Tanh-Mul: OV, CPU, OV."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Det", ["r"], ["d"], name="det"),
        helper.make_node("Tanh", ["d"], ["t"], name="tanh"),
        helper.make_node("Mul", ["t", "half"], ["y"], name="mul"),
    ]
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    model = make_model(nodes, [helper.make_tensor_value_info("x", F32, ["N", 4, 4])],
                       [helper.make_tensor_value_info("y", F32, ["N"])],
                       [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b"), half])
    sess = session(model)
    assert placement(sess) == [(NAME, ("MatMul", "Add", "Relu")), (CPU, ("Det",)), (NAME, ("Tanh", "Mul"))]
    assert "Det is not among the ops OpenVINO's ONNX frontend converts" in sess.explain()
    cpu = session(model, providers=[CPU])
    for batch in (1, 3):  # symbolic batch: one compiled model serves every batch size
        x = rng.standard_normal((batch, 4, 4)).astype(np.float32)
        want = np.tanh(np.linalg.det(np.maximum(x @ w + b, 0))) * 0.5
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, cpu.run(None, {"x": x})[0], rtol=1e-6, atol=1e-7)


def test_scalars_empty_tensors_and_bool_round_trip():
    nodes = [helper.make_node("Relu", ["s"], ["rs"]), helper.make_node("Relu", ["e"], ["re"]),
             helper.make_node("Not", ["k"], ["nk"])]
    model = make_model(nodes, [helper.make_tensor_value_info("s", F32, []),
                               helper.make_tensor_value_info("e", F32, ["N", 3]),
                               helper.make_tensor_value_info("k", TensorProto.BOOL, [3])],
                       [helper.make_tensor_value_info("rs", F32, []),
                        helper.make_tensor_value_info("re", F32, ["N", 3]),
                        helper.make_tensor_value_info("nk", TensorProto.BOOL, [3])])
    sess = session(model)
    assert all(p == NAME for p, _ in placement(sess))
    rs, re_, nk = sess.run(None, {"s": np.array(-2.0, np.float32), "e": np.zeros((0, 3), np.float32),
                                  "k": np.array([True, False, True])})
    assert rs.shape == () and rs == 0 and re_.shape == (0, 3) and nk.tolist() == [False, True, False]
    # a strided (non-contiguous) input is made contiguous, never read out of bounds
    x = np.arange(12, dtype=np.float32).reshape(4, 3)[::2]
    assert sess.run(["re"], {"s": np.array(1, np.float32), "e": x, "k": np.ones(3, bool)})[0].tolist() == x.tolist()


def test_concurrent_runs_share_a_pool_of_infer_requests():
    model = small_cnn(batch=1)
    sess = session(model)
    assert {p for p, _ in placement(sess)} == {NAME}  # OpenVINO's requests, not a CPU fallback
    xs = [np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32) for i in range(8)]
    want = [sess.run(None, {"x": x})[0] for x in xs]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda k: sess.run(None, {"x": xs[k % 8]})[0], range(64)))
    for k, g in enumerate(got):
        np.testing.assert_array_equal(g, want[k % 8])


# ------------------------------------------------------------------------- capability rules

def test_declines_come_with_reasons_for_dtype_rules():
    nodes = [helper.make_node("Add", ["i", "j"], ["s"]), helper.make_node("Shape", ["x"], ["shp"]),
             helper.make_node("Relu", ["d"], ["rd"])]
    model = make_model(nodes, [helper.make_tensor_value_info("i", I64, [3]),
                               helper.make_tensor_value_info("j", I64, [3]),
                               helper.make_tensor_value_info("x", F32, ["N", 5]),  # static: folded away
                               helper.make_tensor_value_info("d", TensorProto.DOUBLE, [2])],
                       [helper.make_tensor_value_info("s", I64, [3]), helper.make_tensor_value_info("shp", I64, [2]),
                        helper.make_tensor_value_info("rd", TensorProto.DOUBLE, [2])])
    sess = session(model)
    assert dict(placement(sess)).get(NAME) == ("Shape",)
    text = sess.explain()
    assert "runtime int64 data" in text and "float64 in float32" in text
    big = np.array([2 ** 40, -(2 ** 35), 7], np.int64)
    s, shp, rd = sess.run(None, {"i": big, "j": big, "x": np.zeros((2, 5), np.float32),
                                 "d": np.array([1e-300, -1.0])})
    assert s.tolist() == (2 * big).tolist() and shp.tolist() == [2, 5] and rd.tolist() == [1e-300, 0.0]


def test_probe_verdicts_belong_to_the_session_and_outlive_it_in_the_cache_folder(tmp_path, monkeypatch):
    probed = []
    real = capability.probe_model
    monkeypatch.setattr(capability, "probe_model", lambda node, *a: probed.append(node.op_type) or real(node, *a))
    node = helper.make_node("Elu", ["x"], ["y"], alpha=0.731)
    model = make_model([node], [helper.make_tensor_value_info("x", F32, ["N", 7])],
                       [helper.make_tensor_value_info("y", F32, ["N", 7])])
    x = np.linspace(-2, 2, 14, dtype=np.float32).reshape(2, 7)
    want = np.where(x > 0, x, 0.731 * (np.exp(x) - 1))

    monkeypatch.setenv("ORT_EP_OPENVINO_CACHE_DIR", "")  # no folder: each session probes for itself
    for _ in range(2):
        sess = session(model)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5)
    assert probed == ["Elu", "Elu"]

    probed.clear()
    monkeypatch.setenv("ORT_EP_OPENVINO_CACHE_DIR", str(tmp_path / "verdicts"))  # the default folder
    first = session(model)
    assert probed == ["Elu"]
    files = list((tmp_path / "verdicts").glob("ort-ep-openvino-probes-*.json"))
    assert len(files) == 1 and "Elu" in files[0].read_text()
    for _ in range(2):  # later sessions (as a later process would) read the verdict instead of probing
        session(model)
    assert probed == ["Elu"]

    opts = {"cache_dir": str(tmp_path / "given")}  # cache_dir: verdicts beside OpenVINO's compiled models
    np.testing.assert_allclose(session(model, providers=[(NAME, opts)]).run(None, {"x": x})[0], want, rtol=1e-5)
    assert list((tmp_path / "given").glob("ort-ep-openvino-probes-*.json"))
    assert list((tmp_path / "given").glob("*.blob"))  # OpenVINO's compiled-model cache
    assert probed == ["Elu", "Elu"]

    ep = first._instances[NAME].ep  # the instance owns its core and verdicts; both go with the session
    assert isinstance(ep.core, runtime.Core) and len(ep.prober.verdicts) >= 1
    other = session(model)
    assert ep.core is not other._instances[NAME].ep.core
    gone = weakref.ref(ep)
    del first, ep
    gc.collect()
    assert gone() is None


def test_sessions_saving_verdicts_to_one_folder_keep_each_others(tmp_path):
    folder = str(tmp_path)
    a, b = capability.VerdictCache("t", folder, "tag"), capability.VerdictCache("t", folder, "tag")
    a.put("one", "")
    b.put("two", "no")
    a.save()
    b.save()  # written after a's save: keeps a's verdict too
    c = capability.VerdictCache("t", folder, "tag")
    assert sorted(c.keys()) == ["one", "two"] and c.get("two") == "no"
