"""The part of the QNN provider's tests that loads libQnnHtp, run as a child process by test_qnn_plugin.py.

``python qnn_child.py SCENARIO [JSON]`` runs one scenario and prints its result as JSON on the last line of
stdout, so that a crash inside Qualcomm's library fails a test instead of taking the test run down, and the
parent can check that nothing else reached stdout.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort

NAME = "QNNExecutionProvider"
CPU = "CPUExecutionProvider"
F32 = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def make_model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def vi(name, shape, et=F32):
    return helper.make_tensor_value_info(name, et, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def rand(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def session(model, providers, optimize=False):
    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort.InferenceSession(model.SerializeToString(), so, providers=providers)


def placement(sess):
    """[provider, op types] per subgraph, the model's own nodes only: the Transposes the core's channels-last
    rewrite adds for this provider (see layout_transposes) are left out."""
    return [[a.provider, [op for op, name in zip(a.op_types, a.node_names) if not _layout_transpose(op, name)]]
            for a in sess.get_provider_graph_assignment_info()]


def layout_transposes(sess):
    """How many Transposes the core's channels-last rewrite left in the QNN subgraphs."""
    return sum(_layout_transpose(op, name) for a in sess.get_provider_graph_assignment_info()
               for op, name in zip(a.op_types, a.node_names))


def _layout_transpose(op, name):
    from ort_core.optimizer.layout import ADDED_SUFFIXES

    return op == "Transpose" and name.endswith(ADDED_SUFFIXES)


# ------------------------------------------------------------------------------------------ op cases
def _unary(op, shape=(2, 3, 4)):
    return make_model([helper.make_node(op, ["x"], ["y"])], [vi("x", list(shape))], [vi("y", list(shape))]), \
        {"x": rand(*shape, low=-4, high=4)}


def _positive(op, shape=(2, 3, 4)):
    return make_model([helper.make_node(op, ["x"], ["y"])], [vi("x", list(shape))], [vi("y", list(shape))]), \
        {"x": rand(*shape, low=0.01, high=4)}


def _pow():
    model = make_model([helper.make_node("Pow", ["a", "e"], ["y"])], [vi("a", [2, 3, 4])], [vi("y", [2, 3, 4])],
                       [init("e", np.array([2.0, 0.5, 3.0, 1.0], np.float32))])
    return model, {"a": rand(2, 3, 4, low=0.1, high=2.0)}


def _scalar_constant(op):
    model = make_model([helper.make_node(op, ["a", "c"], ["y"])], [vi("a", [2, 5])], [vi("y", [2, 5])],
                       [init("c", np.array(1.7, np.float32))])
    return model, {"a": rand(2, 5)}


def _reduce_mean_axes_input():
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)
    return make_model([node], [vi("x", [2, 3, 4, 5])], [vi("y", [2, 5])], [init("axes", np.array([1, 2], np.int64))],
                      opset=18), {"x": rand(2, 3, 4, 5)}


def _binary(op, a_shape, b_shape, out_shape, b_const=False, positive_b=False):
    b = rand(*b_shape, low=0.5, high=2.0) if positive_b else rand(*b_shape)
    inputs = [vi("a", list(a_shape))] + ([] if b_const else [vi("b", list(b_shape))])
    inits = [init("b", b)] if b_const else []
    model = make_model([helper.make_node(op, ["a", "b"], ["y"])], inputs, [vi("y", list(out_shape))], inits)
    feed = {"a": rand(*a_shape)}
    if not b_const:
        feed["b"] = b
    return model, feed


def _conv(x_shape, w_shape, y_shape, bias=True, **attrs):
    inits = [init("w", rand(*w_shape))] + ([init("b", rand(w_shape[0]))] if bias else [])
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], **attrs)
    return make_model([node], [vi("x", list(x_shape))], [vi("y", list(y_shape))], inits), {"x": rand(*x_shape)}


def _pool(op, x_shape, y_shape, **attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    return make_model([node], [vi("x", list(x_shape))], [vi("y", list(y_shape))]), {"x": rand(*x_shape)}


def _matmul(a_shape, b_shape, y_shape, b_const=False):
    inputs = [vi("a", list(a_shape))] + ([] if b_const else [vi("b", list(b_shape))])
    inits = [init("b", rand(*b_shape))] if b_const else []
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs, [vi("y", list(y_shape))], inits)
    feed = {"a": rand(*a_shape)}
    if not b_const:
        feed["b"] = rand(*b_shape)
    return model, feed


def _gemm_const():
    node = helper.make_node("Gemm", ["a", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)
    return make_model([node], [vi("a", [3, 4])], [vi("y", [3, 5])], [init("w", rand(5, 4)), init("c", rand(5))]), \
        {"a": rand(3, 4)}


def _gemm_runtime():
    node = helper.make_node("Gemm", ["a", "b"], ["y"], transA=1)
    return make_model([node], [vi("a", [4, 3]), vi("b", [4, 5])], [vi("y", [3, 5])]), \
        {"a": rand(4, 3), "b": rand(4, 5)}


def _reshape(shape_in, shape_out):
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    return make_model([node], [vi("x", list(shape_in))], [vi("y", list(shape_out))],
                      [init("s", np.array(shape_out, np.int64))]), {"x": rand(*shape_in)}


def _simple(op, x_shape, y_shape, opset=17, **attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    return make_model([node], [vi("x", list(x_shape))], [vi("y", list(y_shape))], opset=opset), {"x": rand(*x_shape)}


def _batchnorm():
    c = 3
    inits = [init("s", rand(c, low=0.5, high=1.5)), init("b", rand(c)), init("m", rand(c)),
             init("v", rand(c, low=0.1, high=2.0))]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    return make_model([node], [vi("x", [2, c, 4, 5])], [vi("y", [2, c, 4, 5])], inits), {"x": rand(2, c, 4, 5)}


def _sum():
    node = helper.make_node("Sum", ["a", "b", "c"], ["y"])
    return make_model([node], [vi("a", [2, 3, 4]), vi("b", [3, 4])], [vi("y", [2, 3, 4])], [init("c", rand(4))]), \
        {"a": rand(2, 3, 4), "b": rand(3, 4)}


def _concat():
    node = helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=1)
    return make_model([node], [vi("a", [2, 3, 4]), vi("b", [2, 1, 4])], [vi("y", [2, 6, 4])],
                      [init("c", rand(2, 2, 4))]), {"a": rand(2, 3, 4), "b": rand(2, 1, 4)}


OP_CASES = {
    "Add": lambda: _binary("Add", (2, 3, 4), (2, 3, 4), (2, 3, 4)),
    "Add_bias_broadcast": lambda: _binary("Add", (2, 3, 4, 5), (3, 1, 1), (2, 3, 4, 5), b_const=True),
    "Add_runtime_broadcast": lambda: _binary("Add", (2, 3, 4), (4,), (2, 3, 4)),
    "Sub": lambda: _binary("Sub", (2, 3, 4), (1, 3, 1), (2, 3, 4)),
    "Mul": lambda: _binary("Mul", (2, 3, 4), (2, 3, 4), (2, 3, 4)),
    "Div": lambda: _binary("Div", (2, 3, 4), (2, 3, 4), (2, 3, 4), positive_b=True),
    "Relu": lambda: _unary("Relu"),
    "Sigmoid": lambda: _unary("Sigmoid"),
    "Tanh": lambda: _unary("Tanh"),
    "MatMul": lambda: _matmul((4, 5), (5, 6), (4, 6)),
    "MatMul_batched": lambda: _matmul((2, 3, 4, 5), (2, 3, 5, 2), (2, 3, 4, 2)),
    "MatMul_weights": lambda: _matmul((2, 3, 5), (5, 4), (2, 3, 4), b_const=True),
    "Gemm_const": _gemm_const,
    "Gemm_runtime": _gemm_runtime,
    "Conv": lambda: _conv((1, 3, 8, 8), (4, 3, 3, 3), (1, 4, 8, 8), pads=[1, 1, 1, 1]),
    "Conv_stride_dilation": lambda: _conv((1, 2, 9, 9), (3, 2, 3, 3), (1, 3, 3, 3), bias=False, strides=[2, 2],
                                          dilations=[2, 2]),
    "Conv_same_upper": lambda: _conv((1, 2, 7, 7), (3, 2, 3, 3), (1, 3, 4, 4), strides=[2, 2], auto_pad="SAME_UPPER"),
    "Conv_depthwise": lambda: _conv((1, 4, 6, 6), (4, 1, 3, 3), (1, 4, 6, 6), group=4, pads=[1, 1, 1, 1]),
    "Conv_grouped": lambda: _conv((1, 4, 6, 6), (6, 2, 3, 3), (1, 6, 4, 4), group=2),
    "LRN": lambda: _simple("LRN", (1, 7, 3, 4), (1, 7, 3, 4), size=3, alpha=2e-2, beta=0.75, bias=1.5),
    "MaxPool": lambda: _pool("MaxPool", (1, 3, 8, 8), (1, 3, 4, 4), kernel_shape=[2, 2], strides=[2, 2]),
    "MaxPool_pads": lambda: _pool("MaxPool", (1, 2, 5, 5), (1, 2, 5, 5), kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    "MaxPool_ceil": lambda: _pool("MaxPool", (1, 2, 7, 7), (1, 2, 4, 4), kernel_shape=[2, 2], strides=[2, 2],
                                  ceil_mode=1),
    "AveragePool": lambda: _pool("AveragePool", (1, 3, 8, 8), (1, 3, 4, 4), kernel_shape=[2, 2], strides=[2, 2]),
    "AveragePool_pads_excluded": lambda: _pool("AveragePool", (1, 2, 5, 5), (1, 2, 5, 5), kernel_shape=[3, 3],
                                               pads=[1, 1, 1, 1]),
    "AveragePool_pads_included": lambda: _pool("AveragePool", (1, 2, 5, 5), (1, 2, 5, 5), kernel_shape=[3, 3],
                                               pads=[1, 1, 1, 1], count_include_pad=1),
    "AveragePool_pads_excluded_1ch": lambda: _pool("AveragePool", (1, 1, 5, 5), (1, 1, 5, 5), kernel_shape=[5, 5],
                                                   pads=[2, 2, 2, 2]),
    "GlobalAveragePool": lambda: _simple("GlobalAveragePool", (2, 3, 5, 4), (2, 3, 1, 1)),
    "Reshape": lambda: _reshape((2, 3, 4), (4, 6)),
    "Flatten": lambda: _simple("Flatten", (2, 3, 4, 5), (6, 20), axis=2),
    "Transpose": lambda: _simple("Transpose", (2, 3, 4, 5), (2, 4, 5, 3), perm=[0, 2, 3, 1]),
    "Concat": _concat,
    "BatchNormalization": _batchnorm,
    "Sum": _sum,
    "Softmax": lambda: _simple("Softmax", (3, 7), (3, 7)),
    "Sqrt": lambda: _positive("Sqrt"),
    "Exp": lambda: _unary("Exp"),
    "Abs": lambda: _unary("Abs"),
    "Neg": lambda: _unary("Neg"),
    "Erf": lambda: _unary("Erf"),
    "Pow": lambda: _pow(),
    "Div_scalar_constant": lambda: _scalar_constant("Div"),
    "Add_scalar_constant": lambda: _scalar_constant("Add"),
    "ReduceMean_last_axis": lambda: _simple("ReduceMean", (2, 3, 8), (2, 3, 1), opset=13, axes=[-1]),
    "ReduceMean_axes_input": _reduce_mean_axes_input,
    "ReduceMean_all": lambda: _simple("ReduceMean", (2, 3, 4), (1, 1, 1), opset=13),
    "Softmax_axis1_opset13": lambda: _simple("Softmax", (2, 5, 3), (2, 5, 3), axis=1),
    "Softmax_axis1_opset11": lambda: _simple("Softmax", (2, 5, 3), (2, 5, 3), opset=11, axis=1),
}


def scenario_ops(args):
    names = args.get("cases") or list(OP_CASES)
    out = {}
    for name in names:
        model, feed = OP_CASES[name]()
        t0 = time.perf_counter()
        sess = session(model, [NAME, CPU])
        created = time.perf_counter() - t0
        got = sess.run(None, feed)[0]
        t1 = time.perf_counter()
        got = sess.run(None, feed)[0]
        ran = time.perf_counter() - t1
        want = session(model, [CPU]).run(None, feed)[0]
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.shape == want.shape else None
        out[name] = {"placement": placement(sess), "shape": list(got.shape), "want_shape": list(want.shape),
                     "dtype": str(got.dtype), "max_abs_err": err, "max_abs": float(np.max(np.abs(want))),
                     "create_s": created, "run_s": ran}
    return out


# ------------------------------------------------------------------------------------------- models
def small_cnn(batch=2):
    w1 = init("w1", (RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32))
    b1 = init("b1", (RNG.standard_normal(8) * 0.1).astype(np.float32))
    w2 = init("w2", (RNG.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32))
    fc = init("fc", (RNG.standard_normal((10, 16)) * 0.3).astype(np.float32))
    fcb = init("fcb", (RNG.standard_normal(10) * 0.1).astype(np.float32))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1),
    ]
    return make_model(nodes, [vi("x", [batch, 3, 16, 16])], [vi("y", [batch, 10])], [w1, b1, w2, fc, fcb])


def scenario_cnn(args):
    options = args.get("options", {})
    model = small_cnn()
    t0 = time.perf_counter()
    sess = session(model, [(NAME, options), CPU], optimize=True)
    created = time.perf_counter() - t0
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    runs = []
    for _ in range(3):
        t1 = time.perf_counter()
        got = sess.run(None, {"x": x})[0]
        runs.append(time.perf_counter() - t1)
    want = session(model, [CPU], optimize=True).run(None, {"x": x})[0]
    return {"placement": placement(sess), "max_abs_err": float(np.max(np.abs(got - want))),
            "max_abs": float(np.max(np.abs(want))), "create_s": created, "run_s": min(runs)}


def scenario_power(args):
    """htp_performance_mode: every mode's vote is cast on a power-config id of its own, the backend holds the id
    while the session lives (a vote set on it again is accepted) and drops it when the session is gone (the same
    vote is then refused as an unknown id); results equal the CPU provider's; "default" casts no vote; a refused
    vote is a warning and the session runs without it."""
    import gc
    import logging

    from ort_ep_qnn import power
    from ort_ep_qnn import runtime as rt

    model = small_cnn()
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    want = session(model, [CPU]).run(None, {"x": x})[0]

    def again(backend, config_id, vote):
        config = rt.ffi.new("QnnHtpPerf_PowerConfig_t*")
        power.fill(config, config_id, vote)
        configs = rt.ffi.new("const QnnHtpPerf_PowerConfig_t*[2]", [config, rt.ffi.NULL])
        saved = os.dup(1)  # the backend prints its refusal of an unknown id to stdout: kept out of the answer
        with open(os.devnull, "wb") as sink:
            os.dup2(sink.fileno(), 1)
            try:
                return int(backend.perf_infrastructure().setPowerConfig(config_id, configs)) & 0xFFFF
            finally:
                rt._libc.fflush(rt.ffi.NULL)
                os.dup2(saved, 1)
                os.close(saved)

    out = {}
    for mode in ["default", *power.MODES]:
        sess = session(model, [(NAME, {"htp_performance_mode": mode}), CPU])
        got = sess.run(None, {"x": x})[0]
        vote = sess._instances[NAME].ep.power_vote
        entry = {"placement": placement(sess), "max_abs_err": float(np.max(np.abs(got - want))),
                 "vote": None if vote is None else vote.mode}
        if vote is not None:
            backend, config_id, cast = vote.backend, vote.config_id, vote.vote
            entry["while_open"] = again(backend, config_id, cast)
            del sess, vote
            gc.collect()
            entry["after_close"] = again(backend, config_id, cast)
        out[mode] = entry

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logging.getLogger("ort_ep_qnn").addHandler(Keep())

    def refuse(self):
        raise rt.QnnError("QnnDevice_getInfrastructure failed: refused for the test")

    rt.Backend.perf_infrastructure = refuse
    sess = session(model, [(NAME, {"htp_performance_mode": "burst"}), CPU])
    got = sess.run(None, {"x": x})[0]
    out["refused"] = {"placement": placement(sess), "max_abs_err": float(np.max(np.abs(got - want))),
                      "vote": sess._instances[NAME].ep.power_vote, "warnings": records}
    return out


def scenario_context_cache(args):
    """context_cache=1: the first session builds its QNN graphs and keeps the contexts in cache_dir; a session in a
    fresh process (``args["again"]``) builds nothing and gives the same results; other options miss the cache."""
    from ort_ep_qnn import kernel

    folder, opts = args["folder"], {"cache_dir": args["folder"], "context_cache": "1", **args.get("options", {})}
    model = small_cnn()
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(np.float32)
    t0 = time.perf_counter()
    with Counting(kernel, "_build") as builds, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = session(model, [(NAME, opts), CPU], optimize=True)
    created = time.perf_counter() - t0
    got = sess.run(None, {"x": x})[0]
    want = session(model, [CPU], optimize=True).run(None, {"x": x})[0]
    saved = sorted(os.listdir(os.path.join(folder, "contexts"))) if os.path.isdir(os.path.join(folder, "contexts")) \
        else []
    return {"placement": placement(sess), "builds": builds.calls, "create_s": created, "files": saved,
            "y": got.tolist(), "max_abs_err": float(np.max(np.abs(got - want))),
            "warnings": [str(w.message) for w in caught]}


def scenario_htp_arch(args):
    """htp_arch reaches the backend's device config: QNN 2.51 answers it (a WARN line naming the arch and the
    default SoC it then picks), the small CNN runs on QNN and matches the CPU provider."""
    from ort_ep_qnn import runtime as rt

    mark = rt.LOG.mark()
    model = small_cnn()
    sess = session(model, [(NAME, {"htp_arch": args["arch"], "cache_dir": ""}), CPU], optimize=True)
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    want = session(model, [CPU], optimize=True).run(None, {"x": x})[0]
    lines = [text for n, level, text in list(rt.LOG._records) if n > mark and "arch" in text.lower()]
    return {"placement": placement(sess), "max_abs_err": float(np.max(np.abs(got - want))), "backend": lines}


def scenario_gelu(args):
    """MatMul, bias Add and the erf GELU chain: on an fp16 target the chain is fused into BiasGelu (QNN's Gelu)."""
    w = init("w", (RNG.standard_normal((16, 32)) * 0.3).astype(np.float32))
    b = init("b", (RNG.standard_normal(32) * 0.1).astype(np.float32))
    consts = [init("sqrt2", np.array(1.4142135, np.float32)), init("one", np.array(1.0, np.float32)),
              init("half", np.array(0.5, np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["f"]),
             helper.make_node("Div", ["f", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["f", "e1"], ["g"]),
             helper.make_node("Mul", ["g", "half"], ["y"])]
    model = make_model(nodes, [vi("x", [2, 8, 16])], [vi("y", [2, 8, 32])], [w, b, *consts])
    x = rand(2, 8, 16, low=-2, high=2)
    sess = session(model, [(NAME, args.get("options", {})), CPU], optimize=True)
    got = sess.run(None, {"x": x})[0]
    want = session(model, [CPU]).run(None, {"x": x})[0]
    return {"placement": placement(sess), "max_abs_err": float(np.max(np.abs(got - want))),
            "max_abs": float(np.max(np.abs(want))), "explain": sess.explain()}


def scenario_split(args):
    """A node QNN does not take (Sin) in the middle: QNN, CPU, QNN, with the reason."""
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Sin", ["m"], ["e"]),
             helper.make_node("Add", ["e", "x"], ["y"])]
    model = make_model(nodes, [vi("x", [2, 8])], [vi("y", [2, 8])], [init("s", np.full(8, 0.7, np.float32))])
    sess = session(model, [NAME, CPU])
    x = rand(2, 8)
    got = sess.run(None, {"x": x})[0]
    want = session(model, [CPU]).run(None, {"x": x})[0]
    return {"placement": placement(sess), "max_abs_err": float(np.max(np.abs(got - want))), "explain": sess.explain()}


def scenario_declines(args):
    """Nodes QNN is not offered, each with its reason."""
    nodes = [helper.make_node("Add", ["d", "d"], ["d2"]), helper.make_node("Relu", ["dyn"], ["r"]),
             helper.make_node("Add", ["i", "i"], ["i2"]), helper.make_node("Reshape", ["x", "shape"], ["xr"]),
             helper.make_node("Conv", ["img", "w_in"], ["c"])]
    model = make_model(nodes, [vi("d", [3], TensorProto.DOUBLE), vi("dyn", ["N", 3]), vi("i", [3], TensorProto.INT64),
                               vi("x", [2, 3]), vi("shape", [2], TensorProto.INT64), vi("img", [1, 1, 4, 4]),
                               vi("w_in", [1, 1, 3, 3])],
                       [vi("d2", [3], TensorProto.DOUBLE), vi("r", ["N", 3]), vi("i2", [3], TensorProto.INT64),
                        vi("xr", [3, 2]), vi("c", [1, 1, 2, 2])])
    sess = session(model, [NAME, CPU])
    return {"placement": placement(sess), "explain": sess.explain()}


def scenario_options(args):
    """Option errors: the core refuses unknown names, the provider bad values and precision conflicts."""
    model = small_cnn().SerializeToString()
    out = {}
    cases = {"unknown": {"bogus": "1"}, "soc_text": {"soc_model": "eight"}, "mode": {"htp_performance_mode": "warp"},
             "fp16_flag": {"enable_htp_fp16_precision": "yes"}, "profiling": {"profiling_level": "optrace"},
             "fp16_without_soc": {"enable_htp_fp16_precision": "1"}, "soc_without_fp16": {"soc_model": "57"},
             "bad_soc": {"soc_model": "99999"}, "cache_flag": {"context_cache": "on"},
             "cache_without_dir": {"context_cache": "1", "cache_dir": ""}}
    for key, opts in cases.items():
        try:
            ort.InferenceSession(model, providers=[(NAME, opts)])
            out[key] = None
        except ort.InvalidArgument as e:
            out[key] = str(e)
    return out


def scenario_backend_path(args):
    """A session whose backend_path cannot be loaded: every node declined with the reason, CPU runs it."""
    model = small_cnn()
    sess = session(model, [(NAME, {"backend_path": "/nonexistent/libQnnHtp.so"}), CPU])
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    want = session(model, [CPU]).run(None, {"x": x})[0]
    return {"placement": placement(sess), "explain": sess.explain(), "max_abs_err": float(np.max(np.abs(got - want)))}


def scenario_discovery(args):
    from ort_ep_qnn import plugin, qnn_api, runtime
    from ort_ep_qnn.graph import GraphBuilder

    from ort_core.plugins.manager import get_registry

    entry = get_registry().providers[NAME]
    b = runtime.backend()
    ctx = b.create_context(runtime.Target())  # a finalized context serializes (contextGetBinary): EPContext's base
    g = GraphBuilder(ctx, "binary")
    x, y = g.tensor("x", qnn_api.TENSOR_APP_WRITE, (1, 4)), g.tensor("y", qnn_api.TENSOR_APP_READ, (1, 4))
    g.node("Relu", [x], [y])
    g.finalize()
    blob = ctx.binary()
    ctx.close()
    return {"available": entry.info.available, "reason": entry.info.reason, "description": entry.info.description,
            "plugin_is_module": entry.plugin is plugin, "distribution": entry.distribution,
            "core_api": list(b.core_api), "backend_api": list(b.backend_api), "build_id": b.build_id,
            "found_in": b.found_in, "in_available": NAME in ort.get_available_providers(),
            "options": sorted(entry.info.options), "context_binary_bytes": len(blob)}


def scenario_version_refusal(args):
    """Declarations verified for another API version: the library is refused before any call but the query."""
    from ort_ep_qnn import qnn_api, runtime

    out = {"refused": None, "gpu": None}
    gpu = os.path.join(os.path.dirname(runtime.library.find_backend()[0]), "libQnnGpu.so")
    qnn_api.VERIFIED_CORE_API = ((2, 39),)
    try:
        runtime.backend()
    except runtime.QnnUnavailable as e:
        out["refused"] = str(e)
    if os.path.isfile(gpu):  # another QNN backend of the same SDK: refused by its backend id
        try:
            runtime.backend(gpu)
        except runtime.QnnUnavailable as e:
            out["gpu"] = str(e)
    out["gpu_present"] = os.path.isfile(gpu)
    return out


def scenario_probe_cache(args):
    from ort_ep_qnn import capability

    folder = args["folder"]
    node = helper.make_node("Sigmoid", ["x"], ["y"])
    model = make_model([node], [vi("x", [3, 11])], [vi("y", [3, 11])])
    opts = {"cache_dir": folder}
    with Counting(capability.Prober, "finalize") as probes:
        first = session(model, [(NAME, opts), CPU])
        n = probes.calls
        for _ in range(3):  # later sessions read the verdicts the first one saved
            session(model, [(NAME, opts), CPU])
        more = probes.calls
        for _ in range(2):  # without a folder, each session probes for itself: the verdicts are the session's
            session(model, [(NAME, {"cache_dir": ""}), CPU])
        alone = probes.calls - more
    files = [f for f in os.listdir(folder) if f.startswith("ort-ep-qnn-probes-")]
    saved = json.load(open(os.path.join(folder, files[0]), encoding="utf-8")) if files else {}
    return {"probes_after_first": n, "probes_after_more": more, "probes_without_folder": alone,
            "verdicts_of_first": len(first._instances[NAME].ep.prober.verdicts), "files": files,
            "has_sigmoid": any("Sigmoid" in k for k in saved.get("results", {})), "tag": saved.get("tag", "")}


def scenario_probe_cache_reuse(args):
    """A fresh process with the cache folder of scenario_probe_cache: the verdict comes from the file."""
    from ort_ep_qnn import capability

    calls = []
    original = capability.Prober.finalize
    capability.Prober.finalize = lambda self, *a, **k: calls.append(a[0].op_type) or original(self, *a, **k)
    node = helper.make_node("Sigmoid", ["x"], ["y"])
    model = make_model([node], [vi("x", [3, 11])], [vi("y", [3, 11])])
    sess = session(model, [(NAME, {"cache_dir": args["folder"]}), CPU])
    return {"probed": calls, "placement": placement(sess)}


def scenario_profiling(args):
    import logging

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("ort_ep_qnn.profile")
    logger.setLevel(logging.INFO)
    logger.addHandler(Keep())
    model, feed = OP_CASES["Conv"]()
    sess = session(model, [(NAME, {"profiling_level": "basic"}), CPU])
    sess.run(None, feed)
    return {"placement": placement(sess), "events": records[:20], "n_events": len(records)}


def scenario_threads(args):
    from concurrent.futures import ThreadPoolExecutor

    model = small_cnn(batch=1)
    sess = session(model, [NAME, CPU], optimize=True)
    xs = [RNG.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    want = [sess.run(None, {"x": x})[0] for x in xs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda k: sess.run(None, {"x": xs[k % 4]})[0], range(16)))
    return {"placement": placement(sess), "same": all(np.array_equal(g, want[k % 4]) for k, g in enumerate(got))}


def scenario_stages(args):
    """A subgraph the backend will not finalize whole is split into several QNN graphs (simulated here: any
    part of more than two nodes fails), and still computes the same."""
    from ort_ep_qnn import kernel, runtime

    built, original = [], kernel._build

    def fussy(nodes, *rest):
        if len(nodes) > 2:
            raise runtime.QnnError("simulated: too large to finalize")
        stage = original(nodes, *rest)
        built.append([n.op_type for n in nodes])
        return stage

    kernel._build = fussy
    model = small_cnn()
    sess = session(model, [NAME, CPU], optimize=True)
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    got = sess.run(None, {"x": x})[0]
    want = session(model, [CPU], optimize=True).run(None, {"x": x})[0]
    return {"placement": placement(sess), "stages": built, "max_abs_err": float(np.max(np.abs(got - want))),
            "max_abs": float(np.max(np.abs(want))), "layout_transposes": layout_transposes(sess)}


# ------------------------------------------------------------------------------------------- QDQ
def residual_cnn(batch=1):
    """A small ResNet-style block: Conv-Relu-Conv + skip Add, Relu, GlobalAveragePool, Flatten, Gemm."""
    r = np.random.default_rng(3)
    inits = [init("w0", (r.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)),
             init("b0", (r.standard_normal(8) * 0.1).astype(np.float32)),
             init("w1", (r.standard_normal((8, 8, 3, 3)) * 0.15).astype(np.float32)),
             init("b1", (r.standard_normal(8) * 0.1).astype(np.float32)),
             init("w2", (r.standard_normal((8, 8, 3, 3)) * 0.15).astype(np.float32)),
             init("fc", (r.standard_normal((10, 8)) * 0.3).astype(np.float32)),
             init("fcb", (r.standard_normal(10) * 0.1).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r0"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    return make_model(nodes, [vi("x", [batch, 3, 16, 16])], [vi("y", [batch, 10])], inits, opset=13)


FLOAT_MODELS = {"cnn": (lambda: small_cnn(2), (2, 3, 16, 16)), "residual": (residual_cnn, (1, 3, 16, 16))}


def quantized_model(name, per_channel=True, activations="QUInt8", folder=None):
    """``name`` of FLOAT_MODELS quantized by ort_core.quantization.quantize_static (QDQ, int8 weights)."""
    from ort_core.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    build, shape = FLOAT_MODELS[name]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": np.random.default_rng(100 + k).standard_normal(shape).astype(np.float32)}
                               for k in range(16)])

        def get_next(self):
            return next(self.feeds, None)

    path = os.path.join(folder, f"{name}_{'pc' if per_channel else 'pt'}_{activations}.onnx")
    return quantize_static(build(), path, Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                           activation_type=getattr(QuantType, activations), weight_type=QuantType.QInt8), path


def _output_step(model):
    """The scale of the quantized graph output (its last DequantizeLinear's)."""
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == out)
    scale = next(i for i in model.graph.initializer if i.name == node.input[1])
    return float(numpy_helper.to_array(scale))


def scenario_qdq(args):
    """Quantized models on QNN's fixed-point tensors against the CPU provider (which computes the QDQ model's
    float arithmetic); the ops QNN ran quantized are counted from the provider's log."""
    import logging

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("ort_ep_qnn")
    logger.setLevel(logging.INFO)
    logger.addHandler(Keep())
    out = {}
    for case in args["cases"]:
        name, per_channel, activations = case["model"], case.get("per_channel", True), case.get("act", "QUInt8")
        model, path = quantized_model(name, per_channel, activations, args["folder"])
        shape = FLOAT_MODELS[name][1]
        feeds = [{"x": np.random.default_rng(200 + k).standard_normal(shape).astype(np.float32)} for k in range(4)]
        records.clear()
        sess = session(model, [(NAME, {"cache_dir": ""}), CPU], optimize=True)
        cpu = session(model, [CPU], optimize=True)
        got = [sess.run(None, f)[0] for f in feeds]
        want = [cpu.run(None, f)[0] for f in feeds]
        key = f"{name}_{'pc' if per_channel else 'pt'}_{activations}"
        np.save(os.path.join(args["folder"], f"{key}_ours.npy"), np.stack(got))
        np.save(os.path.join(args["folder"], f"{key}_feeds.npy"), np.stack([f["x"] for f in feeds]))
        out[key] = {"placement": placement(sess), "quantized": [r for r in records if "quantized tensors" in r],
                    "max_abs_err": max(float(np.max(np.abs(g - w))) for g, w in zip(got, want)),
                    "step": _output_step(model), "path": path, "nodes": len(model.graph.node),
                    "dtype": str(got[0].dtype)}
    return out


def scenario_ort_qdq(args):
    """onnxruntime-qnn on the same quantized models and inputs (results saved for the comparison)."""
    out = {}
    for key, path in args["models"].items():
        feeds = np.load(os.path.join(args["folder"], f"{key}_feeds.npy"))
        sess = _onnxruntime_qnn_session(path)
        got = np.stack([sess.run(None, {"x": x})[0] for x in feeds])
        ours = np.load(os.path.join(args["folder"], f"{key}_ours.npy"))
        out[key] = {"max_abs_diff": float(np.max(np.abs(got - ours)))}
    return out


# ------------------------------------------------------------------------------------------ EPContext
def split_model():
    """Mul -> Sin -> Add: QNN, CPU, QNN (two QNN subgraphs)."""
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Sin", ["m"], ["e"]),
             helper.make_node("Add", ["e", "x"], ["y"])]
    return make_model(nodes, [vi("x", [2, 8])], [vi("y", [2, 8])], [init("s", np.full(8, 0.7, np.float32))])


def mod_split_model():
    """Mul -> Relu -> Mod -> Add: onnxruntime-qnn takes all but Mod (two QNN partitions in one context)."""
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Mod", ["r", "s"], ["e"], fmod=1), helper.make_node("Add", ["e", "x"], ["y"])]
    return make_model(nodes, [vi("x", [2, 8])], [vi("y", [2, 8])], [init("s", np.full(8, 0.7, np.float32))])


def qdq_cnn():
    import tempfile

    return quantized_model("cnn", folder=tempfile.mkdtemp())[0]


CONTEXT_MODELS = {"cnn": (small_cnn, (2, 3, 16, 16)), "split": (split_model, (2, 8)),
                  "mod_split": (mod_split_model, (2, 8)), "qdq_cnn": (qdq_cnn, (2, 3, 16, 16))}


def _context_inputs(name):
    return {"x": np.random.default_rng(7).standard_normal(CONTEXT_MODELS[name][1]).astype(np.float32)}


def _context_nodes(path):
    import onnx

    model = onnx.load(path, load_external_data=False)
    out = []
    for n in model.graph.node:
        attrs = {}
        for a in n.attribute:
            v = helper.get_attribute_value(a)
            attrs[a.name] = (len(v) if a.name == "ep_cache_context" and int(
                next((b.i for b in n.attribute if b.name == "embed_mode"), 1)) == 1
                else v.decode() if isinstance(v, bytes) else v)
        out.append({"op": n.op_type, "domain": n.domain, "name": n.name, "inputs": list(n.input),
                    "outputs": list(n.output), "attrs": attrs})
    return out


class Counting:
    """Counts the calls of ``owner.attr`` while in a ``with`` block (the original is called)."""

    def __init__(self, owner, attr):
        self.owner, self.attr, self.calls = owner, attr, 0

    def __enter__(self):
        self.original = getattr(self.owner, self.attr)

        def counted(*a, **k):
            self.calls += 1
            return self.original(*a, **k)

        setattr(self.owner, self.attr, counted)
        return self

    def __exit__(self, *exc):
        setattr(self.owner, self.attr, self.original)


def scenario_epcontext(args):
    """Save each model's compiled QNN contexts as EPContext nodes (embedded or beside it), load them back:
    nothing probed or built on load, the same results, and both load times."""
    import onnx
    from ort_ep_qnn import capability, kernel, runtime

    folder, embed = args["folder"], args["embed"]
    out = {}
    for name in args["models"]:
        model = CONTEXT_MODELS[name][0]()
        path = os.path.join(folder, f"{name}.onnx")
        onnx.save(model, path)
        feed = _context_inputs(name)
        so = ort.SessionOptions()
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_embed_mode", embed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            sess = ort.InferenceSession(path, so, providers=[NAME, CPU])
            compiled_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            ort.InferenceSession(path, providers=[NAME, CPU])  # compiled again (no cache folder: probed again too)
            recompiled_s = time.perf_counter() - t0
        want = sess.run(None, feed)[0]
        cpu = session(model, [CPU]).run(None, feed)[0]
        ctx_path = os.path.join(folder, f"{name}_ctx.onnx")
        with Counting(kernel, "_build") as builds, Counting(capability.Prober, "finalize") as probes, \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            loaded = ort.InferenceSession(ctx_path, providers=[NAME, CPU])
            loaded_s = time.perf_counter() - t0
        got = loaded.run(None, feed)[0]
        np.save(os.path.join(folder, f"{name}_want.npy"), want)
        out[name] = {"nodes": _context_nodes(ctx_path), "files": sorted(os.listdir(folder)),
                     "sdk": runtime.backend().build_id,
                     "placement": placement(loaded), "builds": builds.calls, "probes": probes.calls,
                     "same": bool(np.array_equal(got, want)), "cpu_err": float(np.max(np.abs(got - cpu))),
                     "max_abs": float(np.max(np.abs(cpu))), "compiled_s": compiled_s, "recompiled_s": recompiled_s,
                     "loaded_s": loaded_s}
    return out


def scenario_epcontext_stages(args):
    """A subgraph built as several QNN graphs (any part of more than two nodes refused, as in scenario_stages) is
    saved as one context holding them all, and loaded back in their data order."""
    import onnx
    from ort_ep_qnn import kernel, runtime

    folder = args["folder"]
    original = kernel._build

    def fussy(nodes, *rest):
        if len(nodes) > 2:
            raise runtime.QnnError("simulated: too large to finalize")
        return original(nodes, *rest)

    kernel._build = fussy
    path = os.path.join(folder, "cnn.onnx")
    onnx.save(small_cnn(), path)
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_embed_mode", "1")
    feed = _context_inputs("cnn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ort.InferenceSession(path, so, providers=[NAME, CPU]).run(None, feed)[0]
        kernel._build = original
        loaded = ort.InferenceSession(os.path.join(folder, "cnn_ctx.onnx"), providers=[NAME, CPU])
    got = loaded.run(None, feed)[0]
    import onnx as _onnx

    blob = next(a.s for a in _onnx.load(os.path.join(folder, "cnn_ctx.onnx")).graph.node[0].attribute
                if a.name == "ep_cache_context")
    graphs = runtime.backend().system().graphs(blob)
    return {"placement": placement(loaded), "same": bool(np.array_equal(got, want)), "graphs": len(graphs),
            "names": [g.name for g in graphs], "inputs": [[t.name for t in g.inputs] for g in graphs]}


def split_twice_model():
    """Mul -> Sin -> Add -> Relu: QNN, CPU, QNN (the second subgraph of two nodes)."""
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Sin", ["m"], ["e"]),
             helper.make_node("Add", ["e", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    return make_model(nodes, [vi("x", [2, 8])], [vi("y", [2, 8])], [init("s", np.full(8, 0.7, np.float32))])


def scenario_epcontext_unshared(args):
    """Two subgraphs, the second of which does not finalize as one graph (simulated): the shared context is given up,
    each subgraph saved in a context of its own; the model loads back and computes the same."""
    import onnx
    from ort_ep_qnn import kernel, runtime

    folder = args["folder"]
    original = kernel._build

    def fussy(nodes, outputs, context, name, *rest):
        if len(nodes) > 1 and name.startswith("QNNExecutionProvider_2"):
            raise runtime.QnnError("simulated: too large to finalize")
        return original(nodes, outputs, context, name, *rest)

    path = os.path.join(folder, "split_twice.onnx")
    onnx.save(split_twice_model(), path)
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_embed_mode", "1")
    feed = {"x": np.random.default_rng(7).standard_normal((2, 8)).astype(np.float32)}
    kernel._build = fussy
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = ort.InferenceSession(path, so, providers=[NAME, CPU])
    finally:
        kernel._build = original
    want = sess.run(None, feed)[0]
    ctx_path = os.path.join(folder, "split_twice_ctx.onnx")
    with Counting(kernel, "_build") as builds, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = ort.InferenceSession(ctx_path, providers=[NAME, CPU])
    got = loaded.run(None, feed)[0]
    cpu = session(split_twice_model(), [CPU]).run(None, feed)[0]
    return {"nodes": _context_nodes(ctx_path), "placement": placement(loaded), "builds": builds.calls,
            "same": bool(np.array_equal(got, want)), "cpu_err": float(np.max(np.abs(got - cpu)))}


def scenario_epcontext_corrupt(args):
    """An EPContext node of QNN whose binary is not a QNN context: session creation fails, naming the node."""
    import onnx

    node = helper.make_node("EPContext", ["x"], ["y"], domain="com.microsoft", name="broken", main_context=1,
                            ep_cache_context=b"not a context", embed_mode=1, source="QNN")
    graph = helper.make_graph([node], "g", [vi("x", [1, 4])], [vi("y", [1, 4])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    path = os.path.join(args["folder"], "broken_ctx.onnx")
    onnx.save(model, path)
    caught = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            ort.InferenceSession(path, providers=[NAME, CPU])
        except Exception as e:  # noqa: BLE001 - the error's text is the answer
            caught.append(f"{type(e).__name__}: {e}")
    return {"error": caught[0] if caught else None, "warnings": [str(w.message) for w in seen]}


def _onnxruntime_qnn_session(path, config=None):
    """An onnxruntime session of onnxruntime-qnn's QNN provider (HTP backend) on ``path``."""
    import onnxruntime
    import onnxruntime_qnn

    if not any(d.ep_name == "QNN" for d in onnxruntime.get_ep_devices()):
        onnxruntime.register_execution_provider_library("QNN", onnxruntime_qnn.get_library_path())
    so = onnxruntime.SessionOptions()
    for key, value in (config or {}).items():
        so.add_session_config_entry(key, value)
    so.log_severity_level = 3
    devices = [d for d in onnxruntime.get_ep_devices() if d.ep_name == "QNN"]
    so.add_provider_for_devices(devices, {"backend_path": onnxruntime_qnn.get_qnn_htp_path()})
    return onnxruntime.InferenceSession(path, so)


def scenario_ort_reads(args):
    """onnxruntime-qnn loads context models this provider wrote (run without ort_core's QNN in the process:
    onnxruntime's libffi and the plugin's cffi callbacks do not share a process)."""
    folder = args["folder"]
    out = {}
    for name in args["models"]:
        feed = _context_inputs(name)
        t0 = time.perf_counter()
        sess = _onnxruntime_qnn_session(os.path.join(folder, f"{name}_ctx.onnx"))
        loaded_s = time.perf_counter() - t0
        got = sess.run(None, feed)[0]
        want = np.load(os.path.join(folder, f"{name}_want.npy"))
        out[name] = {"max_abs_err": float(np.max(np.abs(got - want))), "loaded_s": loaded_s}
    return out


def scenario_ort_writes(args):
    """onnxruntime-qnn compiles models with ep.context_enable=1; its results are kept for the reader."""
    import onnx

    folder, embed = args["folder"], args["embed"]
    out = {}
    for name in args["models"]:
        path = os.path.join(folder, f"{name}.onnx")
        onnx.save(CONTEXT_MODELS[name][0](), path)
        ctx_path = os.path.join(folder, f"{name}_ctx.onnx")
        sess = _onnxruntime_qnn_session(path, {"ep.context_enable": "1", "ep.context_embed_mode": embed,
                                               "ep.context_file_path": ctx_path})
        np.save(os.path.join(folder, f"{name}_want.npy"), sess.run(None, _context_inputs(name))[0])
        out[name] = {"nodes": _context_nodes(ctx_path), "files": sorted(os.listdir(folder))}
    return out


def scenario_reads_ort(args):
    """This provider loads context models onnxruntime-qnn wrote: nothing built, its results."""
    from ort_ep_qnn import kernel

    folder = args["folder"]
    out = {}
    for name in args["models"]:
        feed = _context_inputs(name)
        with Counting(kernel, "_build") as builds, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = ort.InferenceSession(os.path.join(folder, f"{name}_ctx.onnx"), providers=[NAME, CPU])
        got = sess.run(None, feed)[0]
        want = np.load(os.path.join(folder, f"{name}_want.npy"))
        cpu = session(CONTEXT_MODELS[name][0](), [CPU]).run(None, feed)[0]
        out[name] = {"placement": placement(sess), "builds": builds.calls,
                     "max_abs_err": float(np.max(np.abs(got - want))), "cpu_err": float(np.max(np.abs(got - cpu)))}
    return out


if __name__ == "__main__":
    scenario = sys.argv[1]
    arguments = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    result = globals()[f"scenario_{scenario}"](arguments)
    sys.stdout.flush()
    print(json.dumps(result))
