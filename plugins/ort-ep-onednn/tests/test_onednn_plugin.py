"""Tests of the oneDNN provider: discovery, availability, options, capability reasons, results against
ort-core's CPU provider, fusions, shape signatures, threads and fallback of declined nodes.

Runs against the installed distribution and onednn-cpu-gomp's libdnnl (skipped with a reason when it
cannot be loaded); the conformance suite certifies it broadly.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_ep_onednn import library as L

if L.unavailable_reason():
    pytest.skip(f"oneDNN unavailable: {L.unavailable_reason()}", allow_module_level=True)

from ort_ep_onednn import plugin  # noqa: E402
from ort_ep_onednn.options import Options, parse  # noqa: E402

import ort_core as ort  # noqa: E402
from ort_core.memory import HOST  # noqa: E402
from ort_core.plugins.manager import get_registry  # noqa: E402
from ort_core.session import CHECK_OUTPUTS_KEY  # noqa: E402

NAME = "DnnlExecutionProvider"
CPU = "CPUExecutionProvider"
F32 = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def vi(name, shape):
    return helper.make_tensor_value_info(name, F32, shape)


def const(name, shape, scale=0.3):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def session(model, providers=(NAME,), optimize=True, **kwargs):
    so = ort.SessionOptions()
    so.add_session_config_entry(CHECK_OUTPUTS_KEY, "1")
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        return ort.InferenceSession(model.SerializeToString(), so, providers=list(providers), **kwargs)


def placement(sess):
    """Provider -> op types of the nodes it runs (all its subgraphs, in execution order)."""
    out: dict[str, list[str]] = {}
    for a in sess.get_provider_graph_assignment_info():
        out.setdefault(a.provider, []).extend(a.op_types)
    return out


def compare(model, feeds, rtol=1e-4, atol=1e-5, optimize=False, options=None, placed=(NAME,)):
    """Run on oneDNN and on the CPU provider; assert they agree and that the nodes ran on the providers
    ``placed`` (oneDNN alone by default: not a silent fallback to the CPU provider)."""
    dnnl = session(model, [(NAME, options or {})], optimize=optimize)
    assert set(placement(dnnl)) == set(placed), placement(dnnl)
    cpu = session(model, [CPU], optimize=optimize)
    got, want = dnnl.run(None, feeds), cpu.run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return dnnl, got


def resnet_block(c=16, hw=12, batch=1):
    """Conv-BN-Relu, Conv-BN, + residual, Relu, MaxPool, then a 1x1 Conv: every fusion at once."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g1", "be1", "m1", "v1"], ["n1"], epsilon=1e-5),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "g2", "be2", "m2", "v2"], ["n2"], epsilon=1e-5),
        helper.make_node("Add", ["n2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w3"], ["y"]),
    ]
    inits = [const("w1", (c, c, 3, 3)), const("b1", (c,)), const("w2", (c, c, 3, 3), 0.2), const("w3", (8, c, 1, 1))]
    for k in "12":
        inits += [numpy_helper.from_array(RNG.uniform(0.5, 1.5, c).astype(np.float32), f"g{k}"),
                  numpy_helper.from_array(RNG.normal(0, 0.1, c).astype(np.float32), f"be{k}"),
                  numpy_helper.from_array(RNG.normal(0, 0.1, c).astype(np.float32), f"m{k}"),
                  numpy_helper.from_array(RNG.uniform(0.5, 1.5, c).astype(np.float32), f"v{k}")]
    return make_model(nodes, [vi("x", ["N", c, "H", "W"])], [vi("y", ["N", 8, "H2", "W2"])], inits)


# ------------------------------------------------------------------------------ discovery

def test_discovered_through_entry_point_and_available():
    entry = get_registry().providers[NAME]
    assert entry.plugin is plugin
    assert (entry.plugin_name, entry.distribution) == ("onednn", "ort-ep-onednn")
    assert entry.info.available, entry.info.reason
    assert entry.info.devices == (HOST,)
    assert "oneDNN 3.2.0" in entry.info.description
    assert NAME in ort.get_available_providers()
    assert L.library_candidates()[0].endswith("libdnnl.so.3")


def test_a_library_that_is_not_onednn_is_reported_not_raised():
    with pytest.raises(L.LibraryUnavailable, match="not a oneDNN 3.x library"):
        L.load_library("libgomp.so.1")


# -------------------------------------------------------------------------------- options

def test_options_are_validated():
    assert parse({}) == Options("fp32", 0)
    assert parse({"precision": "BF16", "num_threads": "2"}) == Options("bf16", 2)
    with pytest.raises(ValueError, match=r"unknown provider option\(s\) \['device_type'\]"):
        parse({"device_type": "CPU"})
    with pytest.raises(ValueError, match="precision='fp16': expected one of fp32, bf16"):
        parse({"precision": "fp16"})
    with pytest.raises(ValueError, match="num_threads='two': expected a whole number"):
        parse({"num_threads": "two"})
    with pytest.raises(ValueError, match="must be >= 0"):
        parse({"num_threads": -1})


def test_unknown_or_bad_option_is_an_error_naming_the_valid_ones():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [3])], [vi("y", [3])]).SerializeToString()
    with pytest.raises(ort.InvalidArgument, match=r"unknown provider option\(s\) \['bogus'\] for "
                                                  f"'{NAME}'; valid options: num_threads, precision"):
        ort.InferenceSession(model, providers=[(NAME, {"bogus": 1})])
    with pytest.raises(ort.InvalidArgument, match=f"provider '{NAME}': precision='fp16'"):
        ort.InferenceSession(model, providers=[(NAME, {"precision": "fp16"})])


def test_bf16_is_refused_with_a_reason_on_a_cpu_without_bf16(monkeypatch):
    lib = L.library()
    monkeypatch.setattr(type(lib), "has_bf16", property(lambda self: False))
    why = plugin.precision_reason(lib, parse({"precision": "bf16"}))
    assert "precision=bf16 needs a CPU with AVX512-BF16 or AMX" in why
    assert plugin.precision_reason(lib, parse({})) == ""


# ----------------------------------------------------------------------------- capability

def test_declined_nodes_get_a_short_reason():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Log", ["r"], ["l"]),
             helper.make_node("Cast", ["l"], ["c"], to=TensorProto.DOUBLE),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = make_model(nodes, [vi("x", [2, 3]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("c", TensorProto.DOUBLE, [2, 3]), vi("y", [3, 2])])
    sess = session(model, [NAME, CPU], optimize=False)
    info = {(a.provider, tuple(a.op_types)) for a in sess.get_provider_graph_assignment_info()}
    assert (NAME, ("Relu",)) in info
    text = sess.explain()
    assert "oneDNN's log loses relative accuracy near 1" in text
    assert "Cast other than uint8/int8/int32 to float32" in text
    assert "Reshape input 1 ('shape') must be a constant" in text


def test_probe_declines_what_onednn_does_not_implement_for_the_shapes():
    # a MatMul whose batch dimensions do not broadcast is declined with the lowering's reason
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
    model = make_model(nodes, [vi("a", [2, 3, 4]), vi("b", [3, 4, 5])], [vi("y", [3, 3, 5])])
    sess = session(model, [NAME, CPU], optimize=False)
    assert NAME not in placement(sess)
    assert "MatMul batch dimensions do not broadcast" in sess.explain()


# ---------------------------------------------------------------------------- numerics

def test_conv_bn_relu_residual_block_matches_cpu_and_is_fused(programs):
    model = resnet_block()
    x = RNG.standard_normal((2, 16, 12, 12)).astype(np.float32)
    sess, (y,) = compare(model, {"x": x}, rtol=1e-4, atol=1e-4)
    assert placement(sess) == {NAME: ["Conv", "BatchNormalization", "Relu", "Conv", "BatchNormalization", "Add",
                                      "Relu", "MaxPool", "Conv"]}
    (program,) = programs
    # both BatchNormalizations folded, the Relus and the residual Add are post-ops (the Add as a sum onto a
    # copy of x, which is a graph input): 3 convs, 1 pool, and reorders only at the borders
    assert program.fused == {"BatchNormalization": 2, "Relu": 2, "Add": 1}
    kinds = [s.label.split("(")[-1].rstrip(")") for s in program.steps]
    assert kinds.count("Conv") == 3 and kinds.count("MaxPool") == 1, kinds
    assert all(k.startswith(("Conv", "MaxPool", "Conv input", "residual", "output")) for k in kinds), kinds
    assert len(kinds) <= 7, kinds
    assert float(np.abs(y).max()) > 0.1


def test_fused_bn_and_post_ops_compute_what_separate_nodes_do():
    """The same block with fusions prevented (the Conv output is also a graph output) agrees."""
    model = resnet_block()
    model.graph.output.append(vi("c1", ["N", 16, 12, 12]))
    x = RNG.standard_normal((1, 16, 12, 12)).astype(np.float32)
    compare(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_pooling_variants_match_cpu():
    nodes = [helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["x"], ["b"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              count_include_pad=1),
             helper.make_node("AveragePool", ["x"], ["c"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             helper.make_node("MaxPool", ["x"], ["d"], kernel_shape=[2, 2], auto_pad="SAME_UPPER"),
             helper.make_node("GlobalAveragePool", ["x"], ["e"]),
             helper.make_node("GlobalMaxPool", ["x"], ["f"])]
    model = make_model(nodes, [vi("x", [2, 5, 9, 9])], [vi(n, None) for n in "abcdef"])
    x = RNG.standard_normal((2, 5, 9, 9)).astype(np.float32)
    sess, outs = compare(model, {"x": x}, rtol=1e-5, atol=1e-6)
    assert set(placement(sess)) == {NAME}
    assert outs[2].shape == (2, 5, 5, 5)


def test_matmul_and_gemm_match_cpu():
    nodes = [helper.make_node("Gemm", ["a", "w", "c"], ["g"], alpha=0.5, beta=2.0, transB=1),
             helper.make_node("Relu", ["g"], ["gr"]),
             helper.make_node("MatMul", ["x3", "w2"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["mb"]),
             helper.make_node("MatMul", ["x3", "x4"], ["bm"])]
    inits = [const("w", (6, 5)), const("c", (6,)), const("w2", (5, 7)), const("bias", (7,))]
    model = make_model(nodes, [vi("a", [4, 5]), vi("x3", [2, 3, 5]), vi("x4", [2, 5, 3])],
                       [vi("gr", [4, 6]), vi("mb", [2, 3, 7]), vi("bm", [2, 3, 3])], inits)
    feeds = {"a": RNG.standard_normal((4, 5)).astype(np.float32),
             "x3": RNG.standard_normal((2, 3, 5)).astype(np.float32),
             "x4": RNG.standard_normal((2, 5, 3)).astype(np.float32)}
    sess, outs = compare(model, feeds, rtol=1e-5, atol=1e-5)
    assert set(placement(sess)) == {NAME}
    ref = np.maximum(0.5 * feeds["a"] @ numpy_helper.to_array(inits[0]).T + 2.0 * numpy_helper.to_array(inits[1]), 0)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-5)


def test_softmax_and_layernorm_match_cpu():
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1),
             helper.make_node("LayerNormalization", ["x", "scale", "b"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("LayerNormalization", ["x", "scale2"], ["n2"], axis=1)]
    inits = [const("scale", (16,)), const("b", (16,)), const("scale2", (4, 16))]
    model = make_model(nodes, [vi("x", [3, 4, 16])], [vi("s", [3, 4, 16]), vi("n", [3, 4, 16]),
                                                       vi("n2", [3, 4, 16])], inits)
    x = (RNG.standard_normal((3, 4, 16)) * 3).astype(np.float32)
    sess, (s, n, _) = compare(model, {"x": x}, rtol=1e-5, atol=1e-5)
    assert set(placement(sess)) == {NAME}
    np.testing.assert_allclose(s.sum(-1), 1.0, rtol=1e-5)
    mean = x.mean(-1, keepdims=True)
    ref = (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * numpy_helper.to_array(inits[0]) \
        + numpy_helper.to_array(inits[1])
    np.testing.assert_allclose(n, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not L.library().has_bf16, reason="the CPU has no bf16 instructions (AVX512-BF16/AMX)")
def test_bf16_precision_is_close_but_not_required_to_be_exact():
    model = resnet_block(c=32, hw=16)
    x = RNG.standard_normal((1, 32, 16, 16)).astype(np.float32)
    (want,) = session(model, [CPU]).run(None, {"x": x})
    sess = session(model, [(NAME, {"precision": "bf16"})])
    assert set(placement(sess)) == {NAME}
    (got,) = sess.run(None, {"x": x})
    err = np.abs(got - want).max() / np.abs(want).max()
    assert 1e-5 < err < 3e-2, err  # really bf16, within its precision


# ---------------------------------------------------- signatures, threads, fallback

def test_two_input_shapes_through_one_session_build_two_programs(programs):
    model = resnet_block()
    sess = session(model)
    cpu = session(model, [CPU])
    for n, hw in ((1, 12), (3, 8), (1, 12), (3, 8)):
        x = RNG.standard_normal((n, 16, hw, hw)).astype(np.float32)
        y = sess.run(None, {"x": x})[0]
        assert y.shape == (n, 8, hw // 2, hw // 2)
        np.testing.assert_allclose(y, cpu.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert len(programs) == 2  # one per signature, reused on the second sight


def test_four_threads_agree_with_one():
    model = resnet_block(c=32, hw=16)
    sess = session(model)
    assert set(placement(sess)) == {NAME}
    xs = [RNG.standard_normal((1, 32, 16, 16)).astype(np.float32) for _ in range(8)]
    want = [sess.run(None, {"x": x})[0] for x in xs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: sess.run(None, {"x": x})[0], xs * 4))
    for k, g in enumerate(got):
        np.testing.assert_array_equal(g, want[k % len(xs)])


def test_declined_nodes_fall_back_to_cpu_in_a_mixed_model():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Cos", ["r"], ["l"]),  # declined: runs on the CPU provider
             helper.make_node("Conv", ["l", "w2"], ["y"])]
    model = make_model(nodes, [vi("x", [1, 4, 6, 6])], [vi("y", [1, 4, 6, 6])],
                       [const("w", (4, 4, 3, 3)), const("w2", (4, 4, 1, 1))])
    x = np.abs(RNG.standard_normal((1, 4, 6, 6))).astype(np.float32) + 0.1
    sess, (y,) = compare(model, {"x": x}, rtol=1e-4, atol=1e-5, placed=(NAME, CPU))
    where = placement(sess)
    assert where[CPU] == ["Cos"] and sorted(where[NAME]) == ["Conv", "Conv", "Relu"]
    assert np.isfinite(y).all()


def test_overridden_weights_are_read_at_run_time():
    """Weights listed as graph inputs are baked in while unchanged and read when a feed replaces them."""
    w = const("w", (4, 3, 3, 3))
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"])], [vi("x", [1, 3, 5, 5]), vi("w", [4, 3, 3, 3])],
                       [vi("y", [1, 4, 3, 3])], [w])
    sess = session(model)
    assert placement(sess) == {NAME: ["Conv"]}
    x = RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)
    w2 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    cpu = session(model, [CPU])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sess.run(None, {"x": x, "w": w2})[0], cpu.run(None, {"x": x, "w": w2})[0],
                               rtol=1e-5, atol=1e-5)
    assert not np.allclose(sess.run(None, {"x": x, "w": w2})[0], sess.run(None, {"x": x})[0])


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduction_over_length_one_axes_is_the_input_itself(op, keepdims):
    """oneDNN refuses a reduction whose source and destination shapes agree (silero VAD's ReduceMean of a
    [1, 1] value over axis 1): every reduced axis of length 1 gives x itself, reshaped."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    model = make_model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims),
                        helper.make_node("Relu", ["y"], ["z"])],
                       [vi("x", [3, 1, 4])], [helper.make_tensor_value_info("z", F32, None)], [axes], opset=18)
    compare(model, {"x": RNG.standard_normal((3, 1, 4)).astype(np.float32)})
