"""Layouts inside a lowered subgraph: convolutions write channels-last, so a ResNet stays channels-last
from its first conv on (no reorders between convs, brgemm kernels throughout, residual sums included);
a channel shuffle over channels-last data costs one reorder; Transpose views in unusual dimension
orders feeding pooling, binary ops, concat and eltwise give the CPU provider's values.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_ep_onednn import library as L

if L.unavailable_reason():
    pytest.skip(f"oneDNN unavailable: {L.unavailable_reason()}", allow_module_level=True)

import ort_core as ort  # noqa: E402

NAME = "DnnlExecutionProvider"
CPU = "CPUExecutionProvider"
RNG = np.random.default_rng(12)


def _session(model, provider):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort.OrtWarning)
        return ort.InferenceSession(model.SerializeToString(), providers=[provider])


def _model(nodes, x_shape, y_shape, inits):
    f = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, x_shape)],
                              [helper.make_tensor_value_info("y", f, y_shape)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _const(name, arr):
    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def test_channel_shuffle_costs_one_reorder_and_matches_cpu(programs):
    g, c, hw = 4, 34, 14  # ShuffleNet's: oneDNN keeps these channels-last
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], group=g),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Reshape", ["r", "s5"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s4"], ["u"]),
             helper.make_node("Conv", ["u", "w2"], ["y"], group=g * c, pads=[1, 1, 1, 1])]
    inits = [_const("w1", RNG.standard_normal((g * c, c, 1, 1)) * 0.3),
             numpy_helper.from_array(np.array([1, g, c, hw, hw]), "s5"),
             numpy_helper.from_array(np.array([1, g * c, hw, hw]), "s4"),
             _const("w2", RNG.standard_normal((g * c, 1, 3, 3)) * 0.3)]
    model = _model(nodes, [1, g * c, hw, hw], [1, g * c, hw, hw], inits)
    x = {"x": RNG.standard_normal((1, g * c, hw, hw)).astype(np.float32)}
    (want,) = _session(model, CPU).run(None, x)
    (got,) = _session(model, NAME).run(None, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    steps = [s.label for p in programs for s in p.steps]
    convs = [i for i, s in enumerate(steps) if s.endswith("(Conv)")]
    assert len(convs) == 2, steps
    between = steps[convs[0] + 1:convs[1]]
    # was three (to plain for the Reshape, the Transpose, back to the conv's layout): now the shuffle's
    # one copy, made straight into channels-last, which the depthwise conv reads as it is
    assert len(between) == 1 and "Reshape" in between[0], steps


@pytest.mark.parametrize("consumer", ["MaxPool", "Add", "Concat", "Sigmoid"])
def test_transposed_views_feed_other_ops_correctly(consumer):
    """A Transpose view in an unusual dimension order (NWHC-like) read by pooling, a binary op, a concat
    and an eltwise: oneDNN's reference kernels are avoided where they would be chosen, values exact."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]),
             helper.make_node("Transpose", ["a"], ["t"], perm=[0, 1, 3, 2])]
    if consumer == "MaxPool":
        nodes.append(helper.make_node("MaxPool", ["t"], ["y"], kernel_shape=[2, 2], strides=[2, 2]))
        y_shape = [1, 16, 4, 3]
    elif consumer == "Add":
        nodes.append(helper.make_node("Add", ["t", "x2"], ["y"]))
        y_shape = [1, 16, 8, 6]
    elif consumer == "Concat":
        nodes.append(helper.make_node("Concat", ["t", "x2"], ["y"], axis=1))
        y_shape = [1, 32, 8, 6]
    else:
        nodes.append(helper.make_node("Sigmoid", ["t"], ["y"]))
        y_shape = [1, 16, 8, 6]
    inits = [_const("w", RNG.standard_normal((16, 16, 1, 1)) * 0.3),
             _const("x2", RNG.standard_normal((1, 16, 8, 6)))]
    model = _model(nodes, [1, 16, 6, 8], y_shape, inits)
    x = {"x": RNG.standard_normal((1, 16, 6, 8)).astype(np.float32)}
    (want,) = _session(model, CPU).run(None, x)
    sess = _session(model, NAME)
    assert {a.provider for a in sess.get_provider_graph_assignment_info()} == {NAME}
    (got,) = sess.run(None, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_resnet_stays_channels_last_from_its_first_conv(programs):
    """Stem conv (3 input channels, 7x7 stride 2), MaxPool, then two basic blocks whose second conv sums
    onto the residual: the only reorders are the image into channels-last and the result out of it."""
    c = 32
    nodes = [helper.make_node("Conv", ["x", "w0"], ["s"], strides=[2, 2], pads=[3, 3, 3, 3]),
             helper.make_node("Relu", ["s"], ["sr"]),
             helper.make_node("MaxPool", ["sr"], ["b0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    inits = [_const("w0", RNG.standard_normal((c, 3, 7, 7)) * 0.1)]
    for k in range(2):
        nodes += [helper.make_node("Conv", [f"b{k}", f"w{k}a"], [f"c{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"]),
                  helper.make_node("Conv", [f"r{k}", f"w{k}b"], [f"d{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Add", [f"d{k}", f"b{k}"], [f"e{k}"]),
                  helper.make_node("Relu", [f"e{k}"], ["y" if k == 1 else f"b{k + 1}"])]
        inits += [_const(f"w{k}a", RNG.standard_normal((c, c, 3, 3)) * 0.1),
                  _const(f"w{k}b", RNG.standard_normal((c, c, 3, 3)) * 0.1)]
    model = _model(nodes, [1, 3, 64, 64], [1, c, 16, 16], inits)
    x = {"x": RNG.standard_normal((1, 3, 64, 64)).astype(np.float32)}
    (want,) = _session(model, CPU).run(None, x)
    (got,) = _session(model, NAME).run(None, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))
    steps = [s for p in programs for s in p.steps]
    reorders = [s.label for s in steps if s.label.startswith("reorder")]
    assert reorders == ["reorder (Conv input)", "reorder (output y)"], reorders
    convs = [s for s in steps if s.label.endswith("(Conv)")]
    assert len(convs) == 5  # the Adds and Relus are post-ops
    assert all(s.impl.startswith("brgconv") for s in convs[1:]), [(s.label, s.impl) for s in convs]


@pytest.mark.parametrize("head", ["Gemm", "Gemm-transB0", "MatMul"])
@pytest.mark.parametrize("flatten", ["Flatten", "Reshape"])
def test_flatten_of_channels_last_into_a_dense_layer_is_one_inner_product(programs, head, flatten):
    """A classifier head over a channels-last feature map: no copy into NCHW order for the Flatten —
    one inner product reads the map as it is laid out, bias and Relu fused; values as on the CPU."""
    c, hw, n_out = 16, 5, 10
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"])]
    if flatten == "Flatten":
        nodes.append(helper.make_node("Flatten", ["r"], ["f"]))
    else:
        nodes.append(helper.make_node("Reshape", ["r", "shape"], ["f"]))
    k = c * hw * hw
    fc = RNG.standard_normal((n_out, k)) * 0.05
    inits = [_const("w", RNG.standard_normal((c, 4, 3, 3)) * 0.3), _const("bias", RNG.standard_normal(n_out)),
             numpy_helper.from_array(np.array([2, -1]), "shape")]
    if head == "Gemm":
        nodes.append(helper.make_node("Gemm", ["f", "fc", "bias"], ["g"], transB=1))
        inits.append(_const("fc", fc))
    elif head == "Gemm-transB0":
        nodes.append(helper.make_node("Gemm", ["f", "fc", "bias"], ["g"]))
        inits.append(_const("fc", fc.T))
    else:
        nodes += [helper.make_node("MatMul", ["f", "fc"], ["m"]), helper.make_node("Add", ["m", "bias"], ["g"])]
        inits.append(_const("fc", fc.T))
    nodes.append(helper.make_node("Relu", ["g"], ["y"]))
    model = _model(nodes, [2, 4, hw, hw], [2, n_out], inits)
    x = {"x": RNG.standard_normal((2, 4, hw, hw)).astype(np.float32)}
    (want,) = _session(model, CPU).run(None, x)
    (got,) = _session(model, NAME).run(None, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    steps = [s for p in programs for s in p.steps]
    assert [s.label for s in steps if s.label.startswith("reorder")] == ["reorder (Conv input)"], steps
    (dense,) = [s for s in steps if s.label.endswith(f"({head.split('-')[0]})")]
    assert dense.impl and not dense.impl.startswith("ref")
    assert programs[-1].fused.get(flatten) == 1 and programs[-1].fused.get("Relu") == 2


def test_programs_keep_only_what_their_steps_use(programs):
    """Weights are reordered into the conv's layout at build time: their plain copy is not kept, and
    every storage area and view in the program is one a step reads or writes."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    w1, w2 = RNG.standard_normal((32, 16, 3, 3)) * 0.1, RNG.standard_normal((32, 32, 3, 3)) * 0.1
    model = _model(nodes, [1, 16, 12, 12], [1, 32, 12, 12], [_const("w1", w1), _const("w2", w2)])
    x = {"x": RNG.standard_normal((1, 16, 12, 12)).astype(np.float32)}
    (want,) = _session(model, CPU).run(None, x)
    (got,) = _session(model, NAME).run(None, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    (program,) = programs
    used = {id(m) for s in program.steps for _, m in s.args}
    assert {id(m) for m in program.mems} == used
    assert {id(b) for b in program.bufs} == {id(m.buf) for m in program.mems}
    consts = [b for b in program.bufs if b.kind == "const"]
    assert len(consts) == 2  # the two weights in the convs' blocked layouts, not their plain sources too
