"""Reshape/Transpose as strided views: the stride arithmetic checked against numpy's own views, and the
lowering checked end to end — a channel shuffle over channels-last data costs one reorder, and views
in unusual dimension orders feeding pooling, binary ops and concat give the CPU provider's values.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided
from onnx import TensorProto, helper, numpy_helper
from ort_ep_onednn import views as V

import ort_core as ort

NAME = "DnnlExecutionProvider"
CPU = "CPUExecutionProvider"
RNG = np.random.default_rng(11)


def _layout(shape, order):
    """A dense array of ``shape`` whose dimensions are laid out in memory in ``order`` (outermost first),
    with its element strides."""
    base = RNG.standard_normal([shape[d] for d in order]).astype(np.float32)
    arr = base.transpose(np.argsort(order))
    return arr, tuple(s // 4 for s in arr.strides)


@pytest.mark.parametrize("shape,new", [
    ((1, 136, 28, 28), (1, 4, 34, 28, 28)), ((2, 6, 5), (2, 30)), ((2, 6, 5), (12, 5)), ((4, 1, 6), (2, 2, 1, 3, 2)),
    ((3, 4), (12,)), ((1, 1), (1,)), ((6, 1, 1), (1, 6)),
])
def test_reshaped_strides_read_what_numpy_reshape_gives(shape, new):
    for order in itertools.permutations(range(len(shape))):
        arr, strides = _layout(shape, order)
        got = V.reshaped(shape, strides, new)
        try:
            want = arr.reshape(new, copy=False)  # numpy: a view exactly when no copy is needed
        except (ValueError, TypeError):
            want = None
        if want is None:
            assert got is None, (order, got)
            continue
        assert got is not None, order
        np.testing.assert_array_equal(as_strided(arr, shape=new, strides=[4 * s for s in got]), want)


def test_row_major_results_use_row_major_strides():
    # strides of size-1 axes do not matter, but descriptors compare equal only when they agree
    assert V.reshaped((1, 8, 1, 1), (8, 1, 1, 1), (1, 8)) == (8, 1)
    assert V.reshaped((1, 8, 1, 1), (8, 1, 8, 8), (1, 8)) == (8, 1)
    assert V.transposed((60, 20, 5, 1), (0, 2, 1, 3)) == [60, 5, 20, 1]
    assert V.normalized((2, 1, 3), (3, 999, 1)) == (3, 3, 1)
    assert V.reshaped((1, 12, 5), (60, 1, 12), (1, 3, 4, 5)) == (60, 4, 1, 12)  # a leading 1 spans it all


def test_channel_shuffle_copy_keeps_channels_last():
    n, g, c, h, w = 1, 4, 34, 5, 6
    x, strides = _layout((n, g * c, h, w), (0, 2, 3, 1))  # NHWC
    split = V.reshaped(x.shape, strides, (n, g, c, h, w))
    assert split is not None
    perm = (0, 2, 1, 3, 4)
    t_shape = (n, c, g, h, w)
    t_strides = V.transposed(split, perm)
    assert V.reshaped(t_shape, t_strides, (n, g * c, h, w)) is None  # the merge needs a copy
    out_strides, in_strides = V.copy_layout(t_shape, t_strides, (n, g * c, h, w))
    assert out_strides == (g * c * h * w, 1, w * g * c, g * c)  # channels last again
    # copying element by element through the two views gives numpy's shuffle
    src = as_strided(x, shape=t_shape, strides=[4 * s for s in t_strides])
    buf = np.zeros(x.size, np.float32)
    as_strided(buf, shape=t_shape, strides=[4 * s for s in in_strides])[...] = src
    got = as_strided(buf, shape=(n, g * c, h, w), strides=[4 * s for s in out_strides])
    want = x.reshape(n, g, c, h, w).transpose(perm).reshape(n, g * c, h, w)
    np.testing.assert_array_equal(got, want)


def test_copy_layout_is_dense_for_any_source_order():
    shape, new = (2, 3, 4, 5), (6, 20)
    for order in itertools.permutations(range(4)):
        arr, strides = _layout(shape, order)
        if V.reshaped(shape, strides, new) is not None:
            continue
        out_strides, in_strides = V.copy_layout(shape, strides, new)
        buf = np.full(arr.size, np.nan, np.float32)
        as_strided(buf, shape=shape, strides=[4 * s for s in in_strides])[...] = arr
        assert not np.isnan(buf).any(), order  # every element of the destination written: dense
        got = as_strided(buf, shape=new, strides=[4 * s for s in out_strides])
        np.testing.assert_array_equal(got, arr.reshape(new))


# ------------------------------------------------------------------------------ through the provider

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


@pytest.fixture
def dnnl_ready():
    from ort_ep_onednn import library as L

    if L.unavailable_reason():
        pytest.skip(f"oneDNN unavailable: {L.unavailable_reason()}")


def test_channel_shuffle_costs_one_reorder_and_matches_cpu(dnnl_ready, programs):
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
def test_transposed_views_feed_other_ops_correctly(dnnl_ready, consumer):
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
