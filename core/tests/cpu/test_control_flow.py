"""Control flow (If, Loop, Scan) and their planned bodies, checked through whole sessions.

Expected values come from numpy formulas; sessions run with kernel-output checking on, so the
dtypes and shapes the graphs declare are enforced too.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import ort_core as ort
from ort_core.errors import KernelError
from ort_core.session import CHECK_OUTPUTS_KEY


def vi(name, elem=T.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def session(nodes, inputs, outputs, opset=16, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset >= 9 else 3
    so = ort.SessionOptions()
    so.add_session_config_entry(CHECK_OUTPUTS_KEY, "1")
    return ort.InferenceSession(model.SerializeToString(), so)


def f32(*values):
    return np.array(values, dtype=np.float32)


# ------------------------------------------------------------------------------------------- If

def _if_session(opset=16):
    then_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [], [vi("t", shape=[2])])
    # the else branch returns an outer-scope value directly
    else_g = helper.make_graph([], "else", [], [vi("x", shape=[2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    w = numpy_helper.from_array(f32(10, 20), "w")
    return session([node], [vi("c", T.BOOL, None), vi("x", shape=[2])], [vi("y", shape=[2])], opset, [w])


@pytest.mark.parametrize("opset", [1, 11, 13, 16, 19, 21, 25])
def test_if_picks_branch_and_reads_outer_scope(opset):
    sess = _if_session(max(opset, 9))
    x = f32(1, 2)
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(True), "x": x})[0], f32(11, 22))
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(False), "x": x})[0], x)


def test_if_condition_must_have_one_element():
    sess = _if_session()
    with pytest.raises(KernelError, match="single element"):
        sess.run(None, {"c": np.array([True, False]), "x": f32(1, 2)})


def test_if_branch_output_count_is_checked():
    then_g = helper.make_graph([], "then", [], [vi("x", shape=[2]), vi("x", shape=[2])])
    else_g = helper.make_graph([], "else", [], [vi("x", shape=[2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    with pytest.raises(KernelError, match="then_branch yields 2 output"):
        session([node], [vi("c", T.BOOL, []), vi("x", shape=[2])], [vi("y", shape=[2])])


def test_if_branches_yield_sequences():
    then_g = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], "then", [],
                               [helper.make_tensor_sequence_value_info("s", T.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["s2"])], "else", [],
                               [helper.make_tensor_sequence_value_info("s2", T.FLOAT, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    sess = session([node], [vi("c", T.BOOL, []), vi("x", shape=[2])],
                   [helper.make_tensor_sequence_value_info("y", T.FLOAT, None)])
    assert len(sess.run(None, {"c": np.array(True), "x": f32(1, 2)})[0]) == 2
    assert len(sess.run(None, {"c": np.array(False), "x": f32(1, 2)})[0]) == 1


# ----------------------------------------------------------------------------------------- Loop

def _loop_session(scan_shape=(1,), n_outputs=2):
    """y_{i+1} = y_i + w, stop once i >= lim; scan output y_{i+1} * i."""
    body = helper.make_graph(
        [helper.make_node("Add", ["y_in", "w"], ["y_out"]),
         helper.make_node("Less", ["i", "lim"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         helper.make_node("Mul", ["y_out", "fi"], ["scan"])],
        "body", [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("y_in", shape=[1])],
        [vi("c_out", T.BOOL, []), vi("y_out", shape=[1]), vi("scan", shape=list(scan_shape))])
    outs = ["y", "ys"][:n_outputs]
    node = helper.make_node("Loop", ["M", "cond", "y0"], outs, body=body)
    inputs = [vi("M", T.INT64, []), vi("cond", T.BOOL, []), vi("y0", shape=[1]), vi("w", shape=[1]),
              vi("lim", T.INT64, [])]
    return session([node], inputs, [vi("y", shape=[1]), vi("ys", shape=None)][:n_outputs])


def _loop_expected(m, cond, lim, y0=1.0, w=2.0):
    y, ys, i = y0, [], 0
    while cond and i < m:
        y += w
        ys.append(y * i)
        cond = i < lim
        i += 1
    return f32(y), np.array(ys, np.float32).reshape(-1, 1)


@pytest.mark.parametrize("m,cond,lim", [(5, True, 100), (0, True, 100), (5, False, 100), (10, True, 3),
                                        (-2, True, 3)])
def test_loop_trip_count_and_condition(m, cond, lim):
    sess = _loop_session()
    feeds = {"M": np.array(m), "cond": np.array(cond), "lim": np.array(lim), "y0": f32(1), "w": f32(2)}
    y, ys = sess.run(None, feeds)
    ey, eys = _loop_expected(m, cond, lim)
    np.testing.assert_array_equal(y, ey)
    assert ys.dtype == np.float32 and ys.shape == eys.shape  # zero trips: (0, 1) from the body's type
    np.testing.assert_array_equal(ys, eys)


def test_loop_zero_trips_with_symbolic_scan_shape():
    # as onnxruntime: symbolic dims of the body's output become 0, an unknown rank gives (0,)
    sess = _loop_session(scan_shape=("N", "K"))
    feeds = {"M": np.array(0), "cond": np.array(True), "lim": np.array(1), "y0": f32(1), "w": f32(2)}
    (_, ys) = sess.run(None, feeds)
    assert ys.dtype == np.float32 and ys.shape == (0, 0, 0)
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Identity", ["x"], ["o"])],
        "body", [vi("i", T.INT64, []), vi("c", T.BOOL, [])], [vi("c_out", T.BOOL, []), vi("o")])
    node = helper.make_node("Loop", ["M", ""], ["xs"], body=body)
    sess = session([node], [vi("M", T.INT64, []), vi("x", T.INT32)], [vi("xs", T.INT32)])
    (xs,) = sess.run(None, {"M": np.array(0), "x": np.zeros((2, 3), np.int32)})
    assert xs.dtype == np.int32 and xs.shape == (0,)


def test_loop_without_trip_count_or_condition_runs_until_body_says_stop():
    # M and cond both omitted ('' inputs): the body's condition output ends the loop
    body = helper.make_graph(
        [helper.make_node("Add", ["n_in", "one"], ["n_out"]),
         helper.make_node("Less", ["n_out", "five"], ["c_out"])],
        "body", [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("n_in", T.INT64, [])],
        [vi("c_out", T.BOOL, []), vi("n_out", T.INT64, [])],
        initializer=[numpy_helper.from_array(np.array(1, np.int64), "one"),
                     numpy_helper.from_array(np.array(5, np.int64), "five")])
    node = helper.make_node("Loop", ["", "", "n0"], ["n"], body=body)
    sess = session([node], [vi("n0", T.INT64, [])], [vi("n", T.INT64, [])])
    assert sess.run(None, {"n0": np.array(0, np.int64)})[0] == 5
    # cond given, M omitted: a while loop that may run zero times
    node = helper.make_node("Loop", ["", "c0", "n0"], ["n"], body=body)
    sess = session([node], [vi("c0", T.BOOL, []), vi("n0", T.INT64, [])], [vi("n", T.INT64, [])])
    assert sess.run(None, {"c0": np.array(False), "n0": np.array(3, np.int64)})[0] == 3
    assert sess.run(None, {"c0": np.array(True), "n0": np.array(3, np.int64)})[0] == 5


def test_loop_iteration_number_is_int64_and_counts_from_zero():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Identity", ["i"], ["i_out"])],
        "body", [vi("i", T.INT64, []), vi("c", T.BOOL, [])], [vi("c_out", T.BOOL, []), vi("i_out", T.INT64, [])])
    node = helper.make_node("Loop", ["M", ""], ["iters"], body=body)
    sess = session([node], [vi("M", T.INT64, [])], [vi("iters", T.INT64, [4])])
    (iters,) = sess.run(None, {"M": np.array(4, np.int64)})
    assert iters.dtype == np.int64
    np.testing.assert_array_equal(iters, [0, 1, 2, 3])


def test_loop_of_1000_trivial_iterations_is_fast():
    sess = _loop_session()
    feeds = {"M": np.array(1000), "cond": np.array(True), "lim": np.array(10 ** 6), "y0": f32(0), "w": f32(1)}
    sess.run(None, feeds)
    t0 = time.perf_counter()
    y, ys = sess.run(None, feeds)
    elapsed = time.perf_counter() - t0
    assert y[0] == 1000 and ys.shape == (1000, 1)
    assert elapsed < 1.0  # a loose bound for loaded CI machines; typically a few ms


def test_loop_body_errors_name_the_body_node():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Reshape", ["x", "shp"], ["r"], name="bad")],
        "body", [vi("i", T.INT64, []), vi("c", T.BOOL, [])], [vi("c_out", T.BOOL, []), vi("r")],
        initializer=[numpy_helper.from_array(np.array([7], np.int64), "shp")])
    node = helper.make_node("Loop", ["M", ""], ["rs"], body=body, name="loop")
    sess = session([node], [vi("M", T.INT64, []), vi("x", shape=[2])], [vi("rs")])
    with pytest.raises(KernelError, match=r"node 'loop' \(Loop\) subgraph 'body'.*node 'bad' \(Reshape\)"):
        sess.run(None, {"M": np.array(2, np.int64), "x": f32(1, 2)})


def test_body_node_without_kernel_is_a_clear_error():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Frobnicate", ["x"], ["r"], domain="my.ops")],
        "body", [vi("i", T.INT64, []), vi("c", T.BOOL, [])], [vi("c_out", T.BOOL, []), vi("r")])
    node = helper.make_node("Loop", ["M", ""], ["rs"], body=body)
    graph = helper.make_graph([node], "g", [vi("M", T.INT64, []), vi("x", shape=[2])], [vi("rs")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16), helper.make_opsetid("my.ops", 1)])
    model.ir_version = 8
    with pytest.raises(ort.NotImplementedOp, match=r"(?s)node #\d+ \(Loop\) subgraph 'body': no requested provider "
                                                   r"can run 1 node.*my.ops::Frobnicate.*is not registered"):
        ort.InferenceSession(model.SerializeToString())


def test_a_registered_custom_op_runs_inside_a_loop_body():
    """Bodies are placed like the main graph, so the session's custom ops run in them too."""

    @ort.custom_op("my.ops", "Twice", inputs=["float"], outputs=["float"])
    def twice(x):
        return x * 2

    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Twice", ["y_in"], ["y_out"], domain="my.ops")],
        "body", [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("y_in", shape=[2])],
        [vi("c_out", T.BOOL, []), vi("y_out", shape=[2])])
    node = helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body)
    graph = helper.make_graph([node], "g", [vi("M", T.INT64, []), vi("y0", shape=[2])], [vi("y", shape=[2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16), helper.make_opsetid("my.ops", 1)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.register_custom_op(twice)
    sess = ort.InferenceSession(model.SerializeToString(), so)
    (y,) = sess.run(None, {"M": np.array(3, np.int64), "y0": f32(1, -2)})
    np.testing.assert_array_equal(y, f32(8, -16))


def test_loop_runs_concurrently():
    sess = _loop_session()
    errors = []

    def work(k):
        feeds = {"M": np.array(k), "cond": np.array(True), "lim": np.array(100), "y0": f32(k), "w": f32(1)}
        for _ in range(20):
            y, ys = sess.run(None, feeds)
            ey, eys = _loop_expected(k, True, 100, y0=k, w=1)
            if not (np.array_equal(y, ey) and np.array_equal(ys, eys)):
                errors.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# ----------------------------------------------------------------------------------------- Scan

def _cumsum_body(shape, extra_nodes=(), extra_outputs=()):
    return helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["o"]),
         *extra_nodes],
        "body", [vi("s_in", shape=shape), vi("x_t", shape=shape)],
        [vi("s_out", shape=shape), vi("o", shape=shape), *extra_outputs])


@pytest.mark.parametrize("opset", [9, 11, 16, 19, 21, 25])
def test_scan_cumulative_sum(opset):
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=_cumsum_body([2]), num_scan_inputs=1)
    sess = session([node], [vi("s0", shape=[2]), vi("x", shape=[4, 2])], [vi("s", shape=[2]), vi("ys", shape=[4, 2])],
                   opset)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    s, ys = sess.run(None, {"s0": f32(1, 1), "x": x})
    np.testing.assert_array_equal(ys, np.cumsum(x, axis=0) + 1)
    np.testing.assert_array_equal(s, x.sum(0) + 1)


def test_scan_axes_and_directions():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "a"], ["s2"]), helper.make_node("Mul", ["s2", "b"], ["o1"]),
         helper.make_node("Identity", ["a"], ["o2"])],
        "body", [vi("s", shape=[3]), vi("a", shape=[3]), vi("b", shape=[3])],
        [vi("s2", shape=[3]), vi("o1", shape=[3]), vi("o2", shape=[3])])
    node = helper.make_node("Scan", ["s0", "x", "y"], ["sf", "Y1", "Y2"], body=body, num_scan_inputs=2,
                            scan_input_axes=[1, 0], scan_input_directions=[1, 0], scan_output_axes=[-1, 0],
                            scan_output_directions=[0, 1])
    sess = session([node], [vi("s0", shape=[3]), vi("x", shape=[3, 4]), vi("y", shape=[4, 3])],
                   [vi("sf", shape=[3]), vi("Y1", shape=[3, 4]), vi("Y2", shape=[4, 3])])
    rng = np.random.default_rng(0)
    s0, x, y = (rng.standard_normal(s).astype(np.float32) for s in ((3,), (3, 4), (4, 3)))
    sf, y1, y2 = sess.run(None, {"s0": s0, "x": x, "y": y})
    s, o1, o2 = s0, [], []
    for t in range(4):
        a = x[:, 3 - t]  # axis 1, reversed
        s = s + a
        o1.append(s * y[t])
        o2.append(a)
    np.testing.assert_allclose(sf, s, rtol=1e-6)
    np.testing.assert_allclose(y1, np.stack(o1, axis=-1), rtol=1e-6)  # accumulated along the last axis
    np.testing.assert_array_equal(y2, np.stack(o2[::-1]))  # prepended


def test_scan_reads_outer_scope_values():
    # the reference evaluator cannot do this; the body reads 'scale' from the main graph
    extra = [helper.make_node("Mul", ["x_t", "scale"], ["scaled"])]
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys", "zs"], num_scan_inputs=1,
                            body=_cumsum_body([2], extra, [vi("scaled", shape=[2])]))
    sess = session([node], [vi("s0", shape=[2]), vi("x", shape=[3, 2]), vi("scale", shape=[])],
                   [vi("s", shape=[2]), vi("ys", shape=[3, 2]), vi("zs", shape=[3, 2])])
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    _, _, zs = sess.run(None, {"s0": f32(0, 0), "x": x, "scale": np.float32(3)})
    np.testing.assert_array_equal(zs, x * 3)


def test_scan_zero_length_sequence():
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=_cumsum_body([2]), num_scan_inputs=1)
    sess = session([node], [vi("s0", shape=[2]), vi("x", shape=[None, 2])], [vi("s", shape=[2]), vi("ys")])
    s, ys = sess.run(None, {"s0": f32(1, 2), "x": np.zeros((0, 2), np.float32)})
    np.testing.assert_array_equal(s, f32(1, 2))
    assert ys.shape == (0, 2) and ys.dtype == np.float32


def test_scan_inputs_of_different_lengths_are_an_error():
    body = helper.make_graph([helper.make_node("Add", ["a", "b"], ["o"])], "body",
                             [vi("a", shape=[]), vi("b", shape=[])], [vi("o", shape=[])])
    node = helper.make_node("Scan", ["x", "y"], ["z"], body=body, num_scan_inputs=2)
    sess = session([node], [vi("x", shape=["N"]), vi("y", shape=["M"])], [vi("z")])
    with pytest.raises(KernelError, match="differ in sequence length"):
        sess.run(None, {"x": f32(1, 2, 3), "y": f32(1, 2)})


def test_scan_attribute_errors():
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=_cumsum_body([2]), num_scan_inputs=1,
                            scan_input_directions=[2])
    with pytest.raises(KernelError, match="scan_input_directions"):
        session([node], [vi("s0", shape=[2]), vi("x", shape=[3, 2])], [vi("s"), vi("ys")])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=_cumsum_body([2]), num_scan_inputs=3)
    with pytest.raises(KernelError, match="num_scan_inputs"):
        session([node], [vi("s0", shape=[2]), vi("x", shape=[3, 2])], [vi("s"), vi("ys")])


def test_scan8_batches_sequence_lengths_and_directions():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "a"], ["s2"]), helper.make_node("Mul", ["s2", "b"], ["o1"])],
        "body", [vi("s", shape=[2]), vi("a", shape=[2]), vi("b", shape=[2])],
        [vi("s2", shape=[2]), vi("o1", shape=[2])])
    node = helper.make_node("Scan", ["lens", "s0", "x", "y"], ["sf", "Y"], body=body, num_scan_inputs=2,
                            directions=[1, 0])
    sess = session([node], [vi("lens", T.INT64, [3]), vi("s0", shape=[3, 2]), vi("x", shape=[3, 4, 2]),
                            vi("y", shape=[3, 4, 2])], [vi("sf", shape=[3, 2]), vi("Y", shape=[3, 4, 2])], opset=8)
    rng = np.random.default_rng(1)
    s0, x, y = (rng.standard_normal(s).astype(np.float32) for s in ((3, 2), (3, 4, 2), (3, 4, 2)))
    lens = np.array([4, 2, 1], np.int64)
    sf, out = sess.run(None, {"lens": lens, "s0": s0, "x": x, "y": y})
    for b, n in enumerate(lens):
        s, outs = s0[b], []
        for t in range(n):
            s = s + x[b, n - 1 - t]  # reversed within the valid length
            outs.append(s * y[b, t])
        np.testing.assert_allclose(sf[b], s, rtol=1e-6)
        np.testing.assert_allclose(out[b, :n], np.stack(outs), rtol=1e-6)
        assert not out[b, n:].any()  # padding past the length is zero
    # without sequence_lens every batch entry runs the full length
    node = helper.make_node("Scan", ["", "s0", "x"], ["sf", "Y"], num_scan_inputs=1, body=_cumsum_body([2]))
    sess = session([node], [vi("s0", shape=[3, 2]), vi("x", shape=[3, 4, 2])], [vi("sf"), vi("Y")], opset=8)
    sf, out = sess.run(None, {"s0": s0, "x": x})
    np.testing.assert_allclose(out, np.cumsum(x, axis=1) + s0[:, None], rtol=1e-5)


# ------------------------------------------------------------------------------ nested subgraphs

def test_nested_control_flow_reads_outer_scope_through_levels():
    """Loop > If > Scan: the innermost body reads a main-graph input, a main-graph initializer and a
    value computed in the Loop body, two and three levels up."""
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["acc", "e"], ["t0"]), helper.make_node("Mul", ["t0", "a"], ["t1"]),
         helper.make_node("Add", ["t1", "w"], ["t2"]), helper.make_node("Add", ["t2", "fi"], ["acc_out"])],
        "scan_body", [vi("acc", shape=[]), vi("e", shape=[])], [vi("acc_out", shape=[])])
    then_g = helper.make_graph(
        [helper.make_node("Scan", ["zero", "xs"], ["r"], body=scan_body, num_scan_inputs=1)],
        "then", [], [vi("r", shape=[])])
    else_g = helper.make_graph([helper.make_node("Neg", ["fi"], ["r2"])], "else", [], [vi("r2", shape=[])])
    loop_body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         helper.make_node("Mod", ["i", "two"], ["odd"]),
         helper.make_node("Cast", ["odd"], ["is_odd"], to=T.BOOL),
         helper.make_node("If", ["is_odd"], ["v"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Add", ["tot", "v"], ["tot_out"])],
        "loop_body", [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("tot", shape=[])],
        [vi("c_out", T.BOOL, []), vi("tot_out", shape=[])],
        initializer=[numpy_helper.from_array(np.array(2, np.int64), "two")])
    node = helper.make_node("Loop", ["M", "", "tot0"], ["total"], body=loop_body)
    inits = [numpy_helper.from_array(np.float32(0.5), "w"), numpy_helper.from_array(np.float32(0), "zero")]
    sess = session([node], [vi("M", T.INT64, []), vi("tot0", shape=[]), vi("a", shape=[]), vi("xs", shape=[3])],
                   [vi("total", shape=[])], initializers=inits)
    xs, a = f32(1, 2, 3), np.float32(2)
    (total,) = sess.run(None, {"M": np.array(4, np.int64), "tot0": np.float32(0), "a": a, "xs": xs})
    expected = 0.0
    for i in range(4):
        if i % 2:
            acc = 0.0
            for e in xs:
                acc = (acc + e) * a + 0.5 + i
            expected += acc
        else:
            expected -= i
    assert total.dtype == np.float32
    np.testing.assert_allclose(total, expected, rtol=1e-6)
