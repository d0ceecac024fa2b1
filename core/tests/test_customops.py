"""Custom ops: Python and C ops in one model, registration, type checks, static types, errors, plugins."""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_core.customops import example_library_source

from .conftest import make_model
from .customops_build import build_library

T = TensorProto


@pytest.fixture(scope="module")
def example_lib(tmp_path_factory):
    return build_library(example_library_source(), tmp_path_factory.mktemp("customops"), "example_ops")


@ort.custom_op("test.ops", inputs=[ort.CustomOpInput("X", "T"), ort.CustomOpInput("bias", "T", optional=True)],
               outputs=[ort.CustomOpOutput("Y", "T"), ort.CustomOpOutput("Stats", "float")],
               type_constraints={"T": ["float", "double"]},
               attributes={"scale": 1.0, "shift": 0.0, "mode": "linear"})
def ScaleShift(x, bias, *, scale, shift, mode):
    y = x * x.dtype.type(scale) + x.dtype.type(shift)
    if bias is not None:
        y = y + bias
    if mode == "abs":
        y = np.abs(y)
    return y, np.array([y.mean(), y.max()], np.float32)


def scale_shift_ref(x, bias=None, scale=1.0, shift=0.0, mode="linear"):
    y = x * np.float32(scale) + np.float32(shift)
    if bias is not None:
        y = y + bias
    if mode == "abs":
        y = np.abs(y)
    return y, np.array([y.mean(), y.max()], np.float32)


@ort.custom_op("test.ops", inputs=[ort.CustomOpInput("X", "T", variadic=True)], outputs=["T"],
               type_constraints={"T": "float,double,int64"})
def MaxOf(*xs):
    return np.maximum.reduce(xs) if len(xs) > 1 else xs[0].copy()


def opsets(*domains):
    return [helper.make_opsetid(d, 1) for d in domains]


def session_options(*ops):
    """SessionOptions with ``ops`` registered."""
    so = ort.SessionOptions()
    so.register_custom_op(*ops)
    return so


def vi(name, elem=T.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def untyped(name):
    return helper.make_empty_tensor_value_info(name)


def mixed_model():
    """ScaleShift (Python) -> ScaledSum (C, variadic) -> RowSelect (C, optional input), several outputs."""
    k = onnx.numpy_helper.from_array(np.array(3, np.float32), "k")
    nodes = [
        helper.make_node("ScaleShift", ["x"], ["y", "stats"], domain="test.ops", name="scale_shift", scale=2.0),
        helper.make_node("ScaleShift", ["x", "b"], ["y2", ""], domain="test.ops", name="scale_shift_bias",
                         mode="abs", shift=-1),
        helper.make_node("ScaledSum", ["y", "x", "y2"], ["z", "sumsq"], domain="ortc.example", name="sum",
                         alpha=0.5),
        helper.make_node("RowSelect", ["z", "k"], ["r"], domain="ortc.example", name="rows", rows=[0, -1],
                         mode="negate"),
        helper.make_node("RowSelect", ["z"], ["r2"], domain="ortc.example", name="rows_default", rows=[1]),
        helper.make_node("Relu", ["r"], ["out"], name="relu"),
    ]
    return make_model(nodes, [vi("x", T.FLOAT, ["N", 4]), vi("b", T.FLOAT, [4])],
                      [vi("stats", T.FLOAT, [2]), untyped("z"), vi("sumsq", T.DOUBLE, []), vi("r", T.FLOAT, [2, 4]),
                       vi("r2", T.FLOAT, [1, 4]), vi("out", T.FLOAT, [2, 4])],
                      [k], extra_opsets=opsets("test.ops", "ortc.example"))


def mixed_ref(x, b):
    y, stats = scale_shift_ref(x, scale=2.0)
    y2, _ = scale_shift_ref(x, b, shift=-1.0, mode="abs")
    z = (0.5 * (y.astype(np.float64) + x + y2)).astype(np.float32)
    sumsq = (z.astype(np.float64) ** 2).sum()
    r = -3 * z[[0, -1]]
    return [stats, z, sumsq, r, z[[1]], np.maximum(r, 0)]


def mixed_session(example_lib):
    so = session_options(ScaleShift)
    so.register_custom_ops_library(example_lib)
    return ort.InferenceSession(mixed_model(), so)


def inputs(seed, n=3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)


# --------------------------------------------------------------- one model, both kinds
def test_python_and_c_custom_ops_in_one_model(example_lib):
    sess = mixed_session(example_lib)
    x, b = inputs(0)
    got = sess.run(None, {"x": x, "b": b})
    want = mixed_ref(x, b)
    for g, w, name in zip(got, want, [o.name for o in sess.get_outputs()]):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)
    assigned = {a.node_names[0]: a.provider for a in sess.get_provider_graph_assignment_info()}
    assert set(assigned.values()) == {"CPUExecutionProvider"}
    assert {"scale_shift", "sum", "rows", "rows_default"} <= set(assigned)


def test_concurrent_runs_from_four_threads(example_lib):
    sess = mixed_session(example_lib)
    feeds = [dict(zip(("x", "b"), inputs(seed, n=2 + seed % 3))) for seed in range(8)]
    expected = [sess.run(None, f) for f in feeds]
    for f, e in zip(feeds, expected):
        for g, w in zip(e, mixed_ref(f["x"], f["b"])):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

    def work(k):
        return [sess.run(None, feeds[(k + j) % 8]) for j in range(24)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(4)))
    for k, runs in enumerate(results):
        for j, outs in enumerate(runs):
            for g, w in zip(outs, expected[(k + j) % 8]):
                np.testing.assert_array_equal(g, w)


def test_python_op_on_doubles_with_optional_input():
    model = make_model([helper.make_node("ScaleShift", ["x", "b"], ["y", "s"], domain="test.ops", name="n",
                                         scale=0.5, shift=2.0)],
                       [vi("x", T.DOUBLE, [2, 3]), vi("b", T.DOUBLE, [3])], [untyped("y"), untyped("s")],
                       extra_opsets=opsets("test.ops"))
    so = session_options(ScaleShift)
    sess = ort.InferenceSession(model, so)
    x, b = np.arange(6.0).reshape(2, 3), np.array([1.0, -1.0, 0.5])
    y, s = sess.run(None, {"x": x, "b": b})
    assert y.dtype == np.float64 and s.dtype == np.float32
    np.testing.assert_allclose(y, x * 0.5 + 2.0 + b)
    np.testing.assert_allclose(s, [y.mean(), y.max()], rtol=1e-6)


def test_variadic_python_op_takes_any_number_of_inputs():
    model = make_model([helper.make_node("MaxOf", ["a", "b", "c"], ["m3"], domain="test.ops"),
                        helper.make_node("MaxOf", ["a"], ["m1"], domain="test.ops")],
                       [vi("a", T.INT64, [3]), vi("b", T.INT64, [3]), vi("c", T.INT64, [3])],
                       [vi("m3", T.INT64, [3]), vi("m1", T.INT64, [3])], extra_opsets=opsets("test.ops"))
    so = session_options(MaxOf)
    a, b, c = np.array([1, 5, -2]), np.array([4, 0, -3]), np.array([2, 2, 9])
    m3, m1 = ort.InferenceSession(model, so).run(None, {"a": a, "b": b, "c": c})
    np.testing.assert_array_equal(m3, [4, 5, 9])
    np.testing.assert_array_equal(m1, a)


def test_class_api_with_inference_and_required_attribute():
    class Repeat(ort.CustomOp):
        domain, op_type = "test.ops", "Repeat"
        inputs = [ort.CustomOpInput("X", "T")]
        outputs = [ort.CustomOpOutput("Y", "T"), ort.CustomOpOutput("Count", "int64")]
        type_constraints = {"T": ["float", "int32"]}
        attributes = {"times": int, "axis": 0}

        def compute(self, x, *, times, axis):
            return np.repeat(x, times, axis=axis), np.array(x.shape[axis] * times, np.int64)

        def infer(self, x, *, times, axis):
            shape = list(x.shape)
            shape[axis] = shape[axis] * times if isinstance(shape[axis], int) else None
            return [(x.dtype, shape), (np.int64, ())]

    model = make_model([helper.make_node("Repeat", ["x"], ["y", "n"], domain="test.ops", times=3, axis=1)],
                       [vi("x", T.INT32, [2, "W"])], [untyped("y"), untyped("n")], extra_opsets=opsets("test.ops"))
    so = session_options(Repeat)  # the class itself is accepted and instantiated
    sess = ort.InferenceSession(model, so)
    assert [(o.name, o.type, o.shape) for o in sess.get_outputs()] == [
        ("y", "tensor(int32)", [2, None]), ("n", "tensor(int64)", [])]
    x = np.array([[1, 2], [3, 4]], np.int32)
    y, n = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.repeat(x, 3, axis=1))
    assert n == 6 and n.dtype == np.int64

    missing = make_model([helper.make_node("Repeat", ["x"], ["y", "n"], domain="test.ops", name="rep")],
                         [vi("x", T.INT32, [2, 2])], [untyped("y"), untyped("n")], extra_opsets=opsets("test.ops"))
    with pytest.raises(ort.InvalidGraph, match=r"node 'rep' \(test.ops::Repeat\).*required attribute 'times'"):
        ort.InferenceSession(missing, so)


# ------------------------------------------------------------- static types
def _single_scale_model(y_info):
    return make_model([helper.make_node("ScaleShift", ["x"], ["y", "s"], domain="test.ops", name="n")],
                      [vi("x", T.FLOAT, ["N", 4])], [y_info, untyped("s")], extra_opsets=opsets("test.ops"))


def test_output_types_from_inference_function():
    op = ort.CustomOp("test.ops", "ScaleShift", inputs=[ort.CustomOpInput("X", "T"),
                                                         ort.CustomOpInput("bias", "T", optional=True)],
        outputs=[ort.CustomOpOutput("Y", "T"), ort.CustomOpOutput("Stats", "float")],
        type_constraints={"T": ["float", "double"]}, attributes={"scale": 1.0, "shift": 0.0, "mode": "linear"},
        kernel=ScaleShift._kernel, infer=lambda x, bias, **attrs: [(x.dtype, x.shape), ("float", (2,))])
    so = session_options(op)
    sess = ort.InferenceSession(_single_scale_model(untyped("y")), so)
    outs = sess.get_outputs()
    assert [(o.type, o.shape) for o in outs] == [("tensor(float)", ["N", 4]), ("tensor(float)", [2])]
    x = np.ones((5, 4), np.float32)
    y, s = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(s, [1, 1])
    assert [(o.type, o.shape) for o in sess.get_outputs()] == [("tensor(float)", ["N", 4]), ("tensor(float)", [2])]


def test_output_types_from_declaration_then_first_run():
    so = session_options(ScaleShift)
    sess = ort.InferenceSession(_single_scale_model(vi("y", 0, None)), so)
    # element types follow from the declaration ('T' bound by the float input), ranks are not known yet
    assert [(o.type, o.shape) for o in sess.get_outputs()] == [("tensor(float)", []), ("tensor(float)", [])]
    sess.run(None, {"x": np.zeros((2, 4), np.float32)})
    assert [(o.type, o.shape) for o in sess.get_outputs()] == [("tensor(float)", [None, None]),
                                                                ("tensor(float)", [None])]


def test_declared_model_types_are_kept():
    so = session_options(ScaleShift)
    sess = ort.InferenceSession(_single_scale_model(vi("y", T.FLOAT, ["batch", 4])), so)
    sess.run(None, {"x": np.zeros((2, 4), np.float32)})
    assert sess.get_outputs()[0].shape == ["batch", 4]


def test_inference_function_that_raises_names_node():
    def infer(x):
        raise ZeroDivisionError("bad infer")

    op = ort.CustomOp("test.ops", "Boom", inputs=["float"], outputs=["float"], kernel=lambda x: x, infer=infer)
    model = make_model([helper.make_node("Boom", ["x"], ["y"], domain="test.ops", name="b")],
                       [vi("x", T.FLOAT, [1])], [untyped("y")], extra_opsets=opsets("test.ops"))
    so = session_options(op)
    with pytest.raises(ort.InvalidGraph, match=r"node 'b' \(test.ops::Boom\).*ZeroDivisionError: bad infer"):
        ort.InferenceSession(model, so)


# -------------------------------------------------------------- registration
def test_session_registration_is_per_session():
    model = _single_scale_model(untyped("y"))
    so = session_options(ScaleShift)
    x = np.full((1, 4), 2, np.float32)
    np.testing.assert_array_equal(ort.InferenceSession(model, so).run(["y"], {"x": x})[0], x)
    with pytest.raises(ort.NotImplementedOp) as err:
        ort.InferenceSession(model)
    msg = str(err.value)
    assert "node 'n' (test.ops::ScaleShift)" in msg
    assert "domain 'test.ops', op type 'ScaleShift'" in msg and "is not registered" in msg
    assert "@ort_core.custom_op" in msg and "SessionOptions.register_custom_op" in msg
    assert "ort_core.register_custom_op" in msg and "SessionOptions.register_custom_ops_library" in msg


def test_global_registration_and_session_precedence():
    model = _single_scale_model(untyped("y"))
    doubled = ort.CustomOp("test.ops", "ScaleShift", inputs=["float"], outputs=["float", "float"],
                           kernel=lambda x: (2 * x, np.zeros(2, np.float32)))
    x = np.full((1, 4), 3, np.float32)
    ort.register_custom_op(ScaleShift)
    try:
        np.testing.assert_array_equal(ort.InferenceSession(model).run(["y"], {"x": x})[0], x)
        so = session_options(doubled)  # session registrations win over global ones
        np.testing.assert_array_equal(ort.InferenceSession(model, so).run(["y"], {"x": x})[0], 2 * x)
    finally:
        ort.unregister_custom_op(ScaleShift)
    with pytest.raises(ort.NotImplementedOp, match="is not registered"):
        ort.InferenceSession(model)


def test_opset_range_mismatch_is_reported():
    op = ort.CustomOp("test.ops", "Later", inputs=["float"], outputs=["float"], since=3, until=4,
                      kernel=lambda x: x)
    model = make_model([helper.make_node("Later", ["x"], ["y"], domain="test.ops", name="l")],
                       [vi("x", T.FLOAT, [1])], [vi("y", T.FLOAT, [1])], extra_opsets=opsets("test.ops"))
    so = session_options(op)
    with pytest.raises(ort.NotImplementedOp, match=r"registered for opset\(s\) 3..4 of domain 'test.ops', but the "
                                                   r"model imports version 1"):
        ort.InferenceSession(model, so)


def test_overlapping_registration_is_refused():
    so = session_options(ScaleShift)
    so.register_custom_op(ScaleShift)  # the same op again: nothing happens
    other = ort.CustomOp("test.ops", "ScaleShift", inputs=["float"], outputs=["float"], kernel=lambda x: x)
    with pytest.raises(ort.InvalidArgument, match="overlaps the already registered"):
        so.register_custom_op(other)
    with pytest.raises(ort.InvalidArgument, match="is not a custom op"):
        so.register_custom_op(lambda x: x)
    assert len(so.custom_ops) == 1


# ------------------------------------------------------------ type checking
def test_static_type_constraint_violation_fails_at_creation():
    model = make_model([helper.make_node("ScaleShift", ["x"], ["y", "s"], domain="test.ops", name="bad")],
                       [vi("x", T.INT64, [2])], [untyped("y"), untyped("s")], extra_opsets=opsets("test.ops"))
    so = session_options(ScaleShift)
    with pytest.raises(ort.InvalidGraph, match=r"node 'bad' \(test.ops::ScaleShift\).*input 0 \('x'\).*"
                                               r"tensor\(int64\).*'X' accepts T: \{double, float\}"):
        ort.InferenceSession(model, so)


def test_type_constraint_binding_conflict():
    model = make_model([helper.make_node("ScaleShift", ["x", "b"], ["y", "s"], domain="test.ops", name="mix")],
                       [vi("x", T.FLOAT, [2]), vi("b", T.DOUBLE, [2])], [untyped("y"), untyped("s")],
                       extra_opsets=opsets("test.ops"))
    so = session_options(ScaleShift)
    with pytest.raises(ort.InvalidGraph, match=r"input 1 \('b'\).*tensor\(double\).*'T' is already bound to "
                                               r"tensor\(float\)"):
        ort.InferenceSession(model, so)


def test_run_time_type_check_when_static_type_is_unknown():
    to_int = ort.CustomOp("test.ops", "Truncate", inputs=["float"], outputs=["U"],
                          type_constraints={"U": ["int64", "float"]}, kernel=lambda x: x.astype(np.int64))
    model = make_model([helper.make_node("Truncate", ["x"], ["t"], domain="test.ops", name="trunc"),
                        helper.make_node("ScaleShift", ["t"], ["y", "s"], domain="test.ops", name="scale")],
                       [vi("x", T.FLOAT, [2])], [untyped("y"), untyped("s")], extra_opsets=opsets("test.ops"))
    so = session_options(to_int, ScaleShift)
    sess = ort.InferenceSession(model, so)
    with pytest.raises(ort.InvalidArgument, match=r"node 'scale' \(test.ops::ScaleShift\).*input 0 \('X'\) of "
                                                  r"custom op test.ops::ScaleShift has type tensor\(int64\)"):
        sess.run(None, {"x": np.array([1.5, 2.5], np.float32)})
    # with an inference function the int64 flows statically to the next custom op: caught at creation
    typed = ort.CustomOp("test.ops", "Truncate", inputs=["float"], outputs=["U"],
                         type_constraints={"U": ["int64", "float"]}, kernel=lambda x: x.astype(np.int64),
                         infer=lambda x: ("int64", x.shape))
    so = session_options(typed, ScaleShift)
    with pytest.raises(ort.InvalidGraph, match=r"node 'scale' .*input 0 \('t'\) .*tensor\(int64\)"):
        ort.InferenceSession(model, so)


def test_kernel_returning_wrong_dtype_or_count_is_reported():
    model = make_model([helper.make_node("Sloppy", ["x"], ["y"], domain="test.ops", name="sl")],
                       [vi("x", T.FLOAT, [2])], [untyped("y")], extra_opsets=opsets("test.ops"))
    x = np.array([1, 2], np.float32)
    for kernel, pattern in [
        (lambda x: x.astype(np.float64),
         r"node 'sl'.*output 0 \('output0'\).*tensor\(double\); 'output0' accepts float"),
        (lambda x: (x, x), r"node 'sl'.*returned 2 output\(s\), expected 1"),
        (lambda x: None, r"node 'sl'.*returned None for output 0 \('output0'\), which is not declared optional"),
    ]:
        so = session_options(ort.CustomOp("test.ops", "Sloppy", inputs=["float"], outputs=["float"], kernel=kernel))
        with pytest.raises(ort.KernelError, match=pattern):
            ort.InferenceSession(model, so).run(None, {"x": x})


def test_attribute_errors_name_node_and_attribute():
    so = session_options(ScaleShift)
    for attrs, pattern in [({"scal": 2.0}, r"attribute\(s\) \['scal'\] are not declared.*'mode', 'scale', 'shift'"),
                           ({"scale": "big"}, r"attribute 'scale' of custom op test.ops::ScaleShift: expected a "
                                              r"float, got 'big'"),
                           ({"mode": 3}, r"attribute 'mode'.*expected a string, got 3")]:
        model = make_model([helper.make_node("ScaleShift", ["x"], ["y", "s"], domain="test.ops", name="at", **attrs)],
                           [vi("x", T.FLOAT, [2])], [untyped("y"), untyped("s")], extra_opsets=opsets("test.ops"))
        with pytest.raises(ort.OrtError, match=r"node 'at' \(test.ops::ScaleShift\).*" + pattern):
            ort.InferenceSession(model, so)


def test_arity_errors():
    so = session_options(ScaleShift, MaxOf)
    cases = [
        (helper.make_node("ScaleShift", ["x", "x", "x"], ["y", "s"], domain="test.ops", name="a"),
         r"the node has 3 inputs; custom op test.ops::ScaleShift declares 2"),
        (helper.make_node("ScaleShift", ["", "x"], ["y", "s"], domain="test.ops", name="a"),
         r"required input 0 \('X'\) of custom op test.ops::ScaleShift is missing"),
        (helper.make_node("MaxOf", [], ["y"], domain="test.ops", name="a"),
         r"variadic input 'X' of custom op test.ops::MaxOf needs at least one value"),
    ]
    for node, pattern in cases:
        model = make_model([node], [vi("x", T.FLOAT, [2])], [untyped(o) for o in node.output if o],
                           extra_opsets=opsets("test.ops"))
        with pytest.raises(ort.InvalidGraph, match=r"node 'a' .*" + pattern):
            ort.InferenceSession(model, so)


# --------------------------------------------------------------- kernel errors
def test_python_kernel_that_raises_names_node_and_chains_the_exception():
    def explode(x, *, limit):
        raise ValueError(f"value above {limit}")

    op = ort.CustomOp("test.ops", "Explode", inputs=["float"], outputs=["float"], attributes={"limit": 7},
                      kernel=explode)
    model = make_model([helper.make_node("Explode", ["x"], ["y"], domain="test.ops", name="kaboom")],
                       [vi("x", T.FLOAT, [1])], [untyped("y")], extra_opsets=opsets("test.ops"))
    so = session_options(op)
    sess = ort.InferenceSession(model, so)
    with pytest.raises(ort.KernelError) as err:
        sess.run(None, {"x": np.ones(1, np.float32)})
    assert "node 'kaboom' (test.ops::Explode)" in str(err.value)
    assert "ValueError: value above 7" in str(err.value)
    assert isinstance(err.value.__cause__, ValueError)


def test_c_kernel_error_names_node_and_library_message(example_lib):
    model = make_model([helper.make_node("RowSelect", ["x"], ["y"], domain="ortc.example", name="pick", rows=[5])],
                       [vi("x", T.FLOAT, [2, 3])], [untyped("y")], extra_opsets=opsets("ortc.example"))
    so = ort.SessionOptions()
    so.register_custom_ops_library(example_lib)
    sess = ort.InferenceSession(model, so)
    with pytest.raises(ort.InvalidArgument) as err:
        sess.run(None, {"x": np.zeros((2, 3), np.float32)})
    msg = str(err.value)
    assert "node 'pick' (ortc.example::RowSelect)" in msg
    assert "INVALID_ARGUMENT" in msg and "RowSelect: row 5 is out of range for X with 2 rows" in msg
    assert example_lib in msg


# ------------------------------------------------------------ bad declarations
@pytest.mark.parametrize("kwargs, pattern", [
    ({"domain": ""}, r"needs its own domain"),
    ({"domain": "ai.onnx"}, r"needs its own domain"),
    ({"inputs": ["T2"]}, r"custom op test.ops::Bad, input 0 \('input0'\): type 'T2' is neither an ONNX element type "
                         r"nor one of the declared type constraints \[\]"),
    ({"outputs": []}, r"custom op test.ops::Bad declares no output"),
    ({"inputs": [ort.CustomOpInput("a", "float", variadic=True), "float"]}, r"only the last input may be variadic"),
    ({"type_constraints": {"T": ["complexity"]}}, r"type constraint 'T': unknown element type 'complexity'"),
    ({"attributes": {"alpha": object()}}, r"attribute 'alpha': unsupported default"),
    ({"since": 0}, r"not a valid opset range"),
    ({"kernel": None}, r"has no kernel"),
    ({"kernel": lambda x: x, "attributes": {"alpha": 1.0}}, r"does not accept the declared attribute\(s\) \['alpha'\]"),
])
def test_bad_declarations_are_refused_with_the_op_named(kwargs, pattern):
    args = {"domain": "test.ops", "op_type": "Bad", "inputs": ["float"], "outputs": ["float"], "kernel": lambda x: x}
    args.update(kwargs)
    with pytest.raises(ort.InvalidArgument, match=pattern):
        ort.CustomOp(**args)


def test_decorated_op_is_still_callable():
    y, stats = ScaleShift(np.array([1.0, 3.0], np.float32), None, scale=2.0)
    np.testing.assert_array_equal(y, [2, 6])
    np.testing.assert_array_equal(stats, [4, 6])
    assert repr(ScaleShift) == "<CustomOp test.ops::ScaleShift opsets 1+>"


# ------------------------------------------------------- a plugin claims custom ops
CLAIMER = """
    from ort_core.memory import HOST, HostAllocator, HostDataTransfer
    from ort_core.plugins import Capability, ProviderInfo, hookimpl

    COMPILED = []

    @hookimpl
    def ort_register_providers():
        return [ProviderInfo("ClaimerExecutionProvider", (HOST,))]

    @hookimpl
    def ort_get_capability(provider, graph, options):
        claimed = tuple(n.id for n in graph.nodes() if graph.custom_op(n) is not None)
        return Capability(claimed, {n.id: "only custom ops" for n in graph.nodes() if n.id not in claimed}, fuse=False)

    @hookimpl
    def ort_compile(provider, subgraph, options):
        node = subgraph.nodes[0]
        COMPILED.append(node.name)
        kernel = subgraph.custom_op(node).bind(node, subgraph.opsets.get(node.domain, 1))

        def run(*xs):
            outs = kernel(*[dict(zip(subgraph.inputs, xs)).get(i) for i in node.inputs])
            return [dict(zip(node.outputs, outs))[o] for o in subgraph.outputs]

        return run

    @hookimpl
    def ort_allocator(provider, device):
        return HostAllocator()

    @hookimpl
    def ort_data_transfer(provider):
        return HostDataTransfer()
"""


def test_a_plugin_may_claim_custom_ops(tmp_path, fresh_registry):
    import sys

    dist = tmp_path / "ort_ep_claimer-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ort-ep-claimer\nVersion: 0.0.1\n")
    (dist / "entry_points.txt").write_text("[ort_core.providers]\nclaimer = ort_ep_claimer_mod\n")
    (tmp_path / "ort_ep_claimer_mod.py").write_text(textwrap.dedent(CLAIMER))
    sys.path.insert(0, str(tmp_path))  # fresh_registry restores sys.path afterwards
    fresh_registry()
    model = make_model([helper.make_node("ScaleShift", ["x"], ["y", "s"], domain="test.ops", name="custom", scale=3.0),
                        helper.make_node("Relu", ["y"], ["r"], name="relu")],
                       [vi("x", T.FLOAT, [4])], [vi("r", T.FLOAT, [4]), untyped("s")],
                       extra_opsets=opsets("test.ops"))
    so = session_options(ScaleShift)
    with pytest.warns(ort.OrtWarning, match="ClaimerExecutionProvider: 1/2 nodes"):
        sess = ort.InferenceSession(model, so, providers=["ClaimerExecutionProvider"])
    assert [(a.provider, a.node_names) for a in sess.get_provider_graph_assignment_info()] == [
        ("ClaimerExecutionProvider", ("custom",)), ("CPUExecutionProvider", ("relu",))]
    import ort_ep_claimer_mod

    assert ort_ep_claimer_mod.COMPILED == ["custom"]
    x = np.array([-1, 0, 1, 2], np.float32)
    r, s = sess.run(None, {"x": x})
    np.testing.assert_array_equal(r, np.maximum(3 * x, 0))
    np.testing.assert_allclose(s, [(3 * x).mean(), 6])
