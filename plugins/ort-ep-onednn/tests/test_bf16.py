"""Tests of precision=bf16: convolutions and matmuls really take bf16 operands (oneDNN's native bf16
kernels, not reference ones), results move away from float32 by a bounded amount, ops without a
native bf16 kernel fall back to float32 correctly, and CPUs without bf16 get every node declined.

Skipped where oneDNN cannot load, and the bf16 numerics where the CPU has no bf16 instructions.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_ep_onednn import library as L

if L.unavailable_reason():
    pytest.skip(f"oneDNN unavailable: {L.unavailable_reason()}", allow_module_level=True)

from ort_ep_onednn import enums as E  # noqa: E402

import ort_core as ort  # noqa: E402
from ort_core.session import CHECK_OUTPUTS_KEY  # noqa: E402

NAME = "DnnlExecutionProvider"
CPU = "CPUExecutionProvider"
BF16 = (NAME, {"precision": "bf16"})
F32 = TensorProto.FLOAT
needs_bf16 = pytest.mark.skipif(not L.library().has_bf16, reason="the CPU has no bf16 instructions (AVX512-BF16/AMX)")


def make_model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def vi(name, shape):
    return helper.make_tensor_value_info(name, F32, shape)


def session(model, providers):
    so = ort.SessionOptions()
    so.add_session_config_entry(CHECK_OUTPUTS_KEY, "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        return ort.InferenceSession(model.SerializeToString(), so, providers=list(providers))


def op_of(step) -> str:
    """The op type of a step ("node #3 (Conv)" -> "Conv"); reorders keep their full label."""
    return step.label if step.label.startswith("reorder") else step.label.rsplit("(", 1)[-1].rstrip(")")


def resnet_like(seed: int = 0):
    """A seeded ResNet-like classifier: stem Conv-BN-Relu, MaxPool, two residual blocks (the second
    downsampling with a 1x1 projection), GlobalAveragePool, Gemm to 10 logits. He-initialised weights."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def conv_bn(x, cin, cout, k, stride, relu, tag):
        w = const(f"w{tag}", rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)))
        nodes.append(helper.make_node("Conv", [x, w], [f"c{tag}"], strides=[stride] * 2, pads=[k // 2] * 4))
        bn = [const(f"{p}{tag}", v) for p, v in (("g", rng.uniform(0.5, 1.0, cout)), ("b", rng.normal(0, 0.1, cout)),
                                                  ("m", rng.normal(0, 0.1, cout)), ("v", rng.uniform(0.5, 1.5, cout)))]
        nodes.append(helper.make_node("BatchNormalization", [f"c{tag}", *bn], [f"n{tag}"]))
        if relu:
            nodes.append(helper.make_node("Relu", [f"n{tag}"], [f"r{tag}"]))
            return f"r{tag}"
        return f"n{tag}"

    def block(x, cin, cout, stride, tag):
        y = conv_bn(conv_bn(x, cin, cout, 3, stride, True, f"{tag}a"), cout, cout, 3, 1, False, f"{tag}b")
        skip = x if stride == 1 and cin == cout else conv_bn(x, cin, cout, 1, stride, False, f"{tag}p")
        nodes.append(helper.make_node("Add", [y, skip], [f"s{tag}"]))
        nodes.append(helper.make_node("Relu", [f"s{tag}"], [f"o{tag}"]))
        return f"o{tag}"

    x = conv_bn("x", 3, 32, 7, 2, True, "stem")
    nodes.append(helper.make_node("MaxPool", [x], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x = block(block("p", 32, 32, 1, "1"), 32, 64, 2, "2")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["f"]))
    const("fc_w", rng.standard_normal((10, 64)) * np.sqrt(1.0 / 64))
    const("fc_b", rng.normal(0, 0.01, 10))
    nodes.append(helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1))
    return make_model(nodes, [vi("x", [1, 3, 64, 64])], [vi("logits", [1, 10])], inits)


@needs_bf16
def test_bf16_runs_native_bf16_kernels_and_moves_results_by_a_bounded_amount(programs):
    model = resnet_like()
    x = np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)
    (want,) = session(model, [CPU]).run(None, {"x": x})
    (fp32,) = session(model, [NAME]).run(None, {"x": x})
    sess = session(model, [BF16])
    (bf16,) = sess.run(None, {"x": x})
    assert bf16.dtype == np.float32 and bf16.shape == (1, 10)
    assert set(a.provider for a in sess.get_provider_graph_assignment_info()) == {NAME}
    k = int(np.argmax(np.abs(want)))
    err_fp32 = abs(float(fp32[0, k] - want[0, k])) / abs(float(want[0, k]))
    err_bf16 = abs(float(bf16[0, k] - want[0, k])) / abs(float(want[0, k]))
    assert err_fp32 < 1e-5, err_fp32
    assert 1e-5 < err_bf16 < 2e-2, err_bf16  # really bf16: it differs from float32, within bf16's precision
    assert float(np.abs(bf16 - want).max()) > 10 * float(np.abs(fp32 - want).max())
    program = programs[-1]
    convs = [s for s in program.steps if op_of(s) == "Conv"]
    assert len(convs) == 6
    for s in convs + [s for s in program.steps if op_of(s) in ("Gemm", "MaxPool", "GlobalAveragePool")]:
        assert "avx512_core_bf16" in s.impl or "amx" in s.impl, (s.label, s.impl)
    # activations stay bf16 from the first Conv to the pooling: the only conversion back to float32 is
    # the pooled features (Flatten is a view of them; the Gemm reads A as plain float32), which the Gemm
    # then reads as a bf16 copy
    to_f32 = [s.label for s in program.steps if op_of(s).startswith("reorder")
              and dict(s.args)[E.ARG_TO].md.data_type() == E.DT_F32]
    assert to_f32 == ["reorder (Gemm A)"], to_f32


@needs_bf16
def test_bf16_matmuls_take_bf16_operands(programs):
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["mb"]),
             helper.make_node("Tanh", ["mb"], ["g"]),
             helper.make_node("Transpose", ["g"], ["gt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["g", "gt"], ["y"])]
    inits = [numpy_helper.from_array((rng.standard_normal((64, 48)) / 8).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "bias")]
    model = make_model(nodes, [vi("a", [2, 16, 64])], [vi("y", [2, 16, 16])], inits)
    a = rng.standard_normal((2, 16, 64)).astype(np.float32)
    (want,) = session(model, [CPU]).run(None, {"a": a})
    (got,) = session(model, [BF16]).run(None, {"a": a})
    rel = float(np.abs(got - want).max() / np.abs(want).max())
    assert 1e-5 < rel < 2e-2, rel
    mms = [s for s in programs[-1].steps if op_of(s) == "MatMul"]
    assert len(mms) == 2 and all("bf16" in s.impl for s in mms), [s.impl for s in mms]
    copies = [s.label for s in programs[-1].steps if "to bf16" in s.label]
    assert len(copies) == 3, copies  # A of the first, both operands of the second (constant weights: once, at build)


@needs_bf16
def test_ops_without_a_native_bf16_path_fall_back_to_float32_and_stay_correct():
    """Standalone BatchNormalization, broadcast Add/Mul, Sigmoid, AveragePool, Concat of bf16 and float32
    inputs, Softmax and Transpose after bf16 convolutions: all agree with the CPU provider."""
    rng = np.random.default_rng(3)
    c = 16

    def t(name, arr):
        return numpy_helper.from_array(np.asarray(arr, np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["bn"]),
             helper.make_node("Mul", ["c1", "scale"], ["sc"]),
             helper.make_node("Sigmoid", ["sc"], ["sg"]),
             helper.make_node("Add", ["sg", "bn"], ["ad"]),
             helper.make_node("Concat", ["ad", "x", "c1"], ["cat"], axis=1),
             helper.make_node("AveragePool", ["cat"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["ap", "w2"], ["c2"]),
             helper.make_node("Transpose", ["c2"], ["tr"], perm=[0, 2, 3, 1]),
             helper.make_node("Softmax", ["tr"], ["y"], axis=-1)]
    inits = [t("w1", rng.standard_normal((c, c, 3, 3)) * 0.1), t("w2", rng.standard_normal((8, 3 * c, 1, 1)) * 0.2),
             t("g", rng.uniform(0.5, 1.5, c)), t("b", rng.normal(0, 0.1, c)), t("m", rng.normal(0, 0.1, c)),
             t("v", rng.uniform(0.5, 1.5, c)), t("scale", rng.standard_normal((1, c, 1, 1)))]
    model = make_model(nodes, [vi("x", [2, c, 8, 8])], [vi("y", [2, 4, 4, 8])], inits)
    x = rng.standard_normal((2, c, 8, 8)).astype(np.float32)
    (want,) = session(model, [CPU]).run(None, {"x": x})
    sess = session(model, [BF16])
    (got,) = sess.run(None, {"x": x})
    assert {a.provider for a in sess.get_provider_graph_assignment_info()} == {NAME}
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2)
    assert not np.array_equal(got, want)


def test_bf16_on_a_cpu_without_it_declines_every_node_with_the_reason(monkeypatch):
    monkeypatch.setattr(type(L.library()), "has_bf16", property(lambda self: False))
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])]
    model = make_model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])])
    sess = session(model, [BF16, CPU])
    assert {a.provider for a in sess.get_provider_graph_assignment_info()} == {CPU}
    assert "precision=bf16 needs a CPU with AVX512-BF16 or AMX" in sess.explain()
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)


@pytest.mark.parametrize("name", ["shufflenet", "densenet121"])
def test_light_models_use_no_reference_kernels(programs, name):
    """Mixed layouts send oneDNN to its reference kernels (~10-100x slower): ShuffleNet's residual Adds
    (a conv's blocked output plus a channel-shuffled value) and DenseNet's first concats (a blocked
    MaxPool output among channels-last conv outputs). The lowering reorders into one layout instead;
    results still match the CPU provider."""
    import os

    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"the onnx wheel has no light {name}")
    model = onnx.load(path)
    cpu, dnnl = session(model, [CPU]), session(model, [NAME])
    x = {cpu.get_inputs()[0].name: np.random.default_rng(5).random((1, 3, 224, 224), dtype=np.float32)}
    (ref,) = cpu.run(None, x)
    (got,) = dnnl.run(None, x)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    steps = [s for p in programs for s in p.steps]
    assert steps and not [s for s in steps if s.impl.startswith("ref")], [
        (s.label, s.impl) for s in steps if s.impl.startswith("ref")]


def test_batch_norm_then_relu_is_one_primitive(programs):
    """DenseNet's pre-activation: BatchNormalization (not after a conv, so not folded) then Relu runs as
    one batch-normalization primitive with oneDNN's fused ReLU; values match the CPU provider."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(rng.uniform(0.5, 2, 8).astype(np.float32), "g"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "m"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 8).astype(np.float32), "v"),
             numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w")]
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["p", "g", "b", "m", "v"], ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, [vi("x", [1, 8, 16, 16])], [vi("y", [1, 8, 8, 8])], inits)
    x = {"x": rng.standard_normal((1, 8, 16, 16)).astype(np.float32)}
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the graph reaches oneDNN as built
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        got = ort.InferenceSession(model.SerializeToString(), so, providers=[NAME]).run(None, x)[0]
        ref = ort.InferenceSession(model.SerializeToString(), so, providers=[CPU]).run(None, x)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    ops = [op_of(s) for p in programs for s in p.steps]
    assert "BatchNormalization" in ops and "Relu" not in ops, ops


@needs_bf16
def test_bf16_dense_block_stays_bf16_and_channels_last(programs):
    """DenseNet's pattern under precision=bf16: each layer's BatchNormalization+Relu+Conv output is
    concatenated onto the block's input. The concatenations stay bf16 (and channels-last), so the block
    runs without a single reorder between its first and last primitive and without reference kernels."""
    rng = np.random.default_rng(8)
    c0, g, hw = 32, 16, 14
    nodes = [helper.make_node("Conv", ["x", "w0"], ["b0"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array((rng.standard_normal((c0, 8, 3, 3)) * 0.2).astype(np.float32), "w0")]
    c = c0
    for k in range(3):
        inits += [numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), f"s{k}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, c).astype(np.float32), f"h{k}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, c).astype(np.float32), f"m{k}"),
                  numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), f"v{k}"),
                  numpy_helper.from_array((rng.standard_normal((g, c, 3, 3)) * 0.1).astype(np.float32), f"w{k + 1}")]
        nodes += [helper.make_node("BatchNormalization", [f"b{k}", f"s{k}", f"h{k}", f"m{k}", f"v{k}"], [f"n{k}"]),
                  helper.make_node("Relu", [f"n{k}"], [f"r{k}"]),
                  helper.make_node("Conv", [f"r{k}", f"w{k + 1}"], [f"c{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Concat", [f"b{k}", f"c{k}"], ["y" if k == 2 else f"b{k + 1}"], axis=1)]
        c += g
    model = make_model(nodes, [vi("x", [1, 8, hw, hw])], [vi("y", [1, c, hw, hw])], inits)
    x = {"x": rng.standard_normal((1, 8, hw, hw)).astype(np.float32)}
    (want,) = session(model, [CPU]).run(None, x)
    (got,) = session(model, [BF16]).run(None, x)
    err = float(np.abs(got - want).max())
    assert 0 < err < 2e-2 * float(np.abs(want).max())  # really bf16, within its precision
    steps = [s for p in programs for s in p.steps]
    assert [op_of(s) for s in steps].count("Conv") == 4, [s.label for s in steps]
    inner = [s for s in steps[1:-1] if op_of(s).startswith("reorder")]
    assert not inner, [s.label for s in steps]
    assert not [s for s in steps if s.impl.startswith("ref")], [(s.label, s.impl) for s in steps]
    for s in steps:
        if op_of(s) in ("Conv", "BatchNormalization"):
            assert "bf16" in s.impl or "amx" in s.impl, (s.label, s.impl)


@needs_bf16
def test_bf16_copies_of_constants_are_made_once(programs):
    """A bf16 Mul by a per-channel constant: the constant's bf16 copy is made at build time, so no step
    of a run reads a constant to convert it."""
    rng = np.random.default_rng(9)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Mul", ["r", "s"], ["y"])]
    inits = [numpy_helper.from_array((rng.standard_normal((64, 8, 3, 3)) * 0.2).astype(np.float32), "w"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, (1, 64, 1, 1)).astype(np.float32), "s")]
    model = make_model(nodes, [vi("x", [1, 8, 10, 10])], [vi("y", [1, 64, 10, 10])], inits)
    x = {"x": rng.standard_normal((1, 8, 10, 10)).astype(np.float32)}
    (want,) = session(model, [CPU]).run(None, x)
    (got,) = session(model, [BF16]).run(None, x)
    assert 0 < float(np.abs(got - want).max()) < 2e-2 * float(np.abs(want).max())
    steps = [s for p in programs for s in p.steps]
    assert any(op_of(s) == "Mul" for s in steps), [s.label for s in steps]
    from_consts = [s.label for s in steps if op_of(s).startswith("reorder")
                   and dict(s.args)[E.ARG_FROM].buf.kind == "const"]
    assert not from_consts, from_consts

