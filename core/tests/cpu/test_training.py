"""ai.onnx.preview.training kernels: the optimizers against the reference evaluator, Gradient against
hand-derived derivatives and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.errors import KernelError, OrtError
from ort_core.ir import load_model
from ort_core.providers.cpu.registry import lookup

from .kernel_harness import run_ours, run_reference

TRAINING = "ai.onnx.preview.training"
rng = np.random.default_rng(4)


def both(op, inputs, attrs, n_outputs):
    a = run_ours(op, inputs, attrs, opset=1, n_outputs=n_outputs, domain=TRAINING)
    b = run_reference(op, inputs, attrs, opset=1, n_outputs=n_outputs, domain=TRAINING)
    for x, y, given in zip(a, b, inputs[2:]):
        assert x.dtype == given.dtype and x.shape == given.shape
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
    return a


def tensors(n, shape=(3,)):
    return [rng.normal(size=shape).astype(np.float32) for _ in range(n)]


R = np.array(0.1, np.float32)


# ------------------------------------------------------------------------------- optimizers

@pytest.mark.parametrize("t", [0, 3])
@pytest.mark.parametrize("n", [1, 2])
def test_adagrad_matches_reference(t, n):
    xs, gs = tensors(n), tensors(n)
    hs = [np.abs(h) for h in tensors(n)]
    attrs = dict(norm_coefficient=0.01, decay_factor=0.1, epsilon=1e-5)
    both("Adagrad", [R, np.array(t, np.int64), *xs, *gs, *hs], attrs, 2 * n)


@pytest.mark.parametrize("t", [0, 2])
@pytest.mark.parametrize("n", [1, 2])
def test_adam_matches_reference(t, n):
    xs, gs, vs = tensors(n), tensors(n), tensors(n)
    hs = [np.abs(h) for h in tensors(n)]
    attrs = dict(norm_coefficient=0.001, norm_coefficient_post=0.01, alpha=0.9, beta=0.99, epsilon=1e-6)
    both("Adam", [R, np.array(t, np.int64), *xs, *gs, *vs, *hs], attrs, 3 * n)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("t", [0, 5])
@pytest.mark.parametrize("n", [1, 2])
def test_momentum_matches_reference(mode, t, n):
    xs, gs, vs = tensors(n), tensors(n), tensors(n)
    attrs = dict(norm_coefficient=0.001, alpha=0.95, beta=0.1, mode=mode)
    both("Momentum", [R, np.array(t, np.int64), *xs, *gs, *vs], attrs, 2 * n)


def test_momentum_formula_and_inputs_untouched():
    x, g, v = (np.array([1.0, 2.0], np.float32), np.array([0.5, -1.0], np.float32),
               np.array([0.1, 0.1], np.float32))
    before = [a.copy() for a in (x, g, v)]
    x_new, v_new = run_ours("Momentum", [R, np.array(0, np.int64), x, g, v],
                            dict(norm_coefficient=0.0, alpha=0.5, beta=0.3, mode="standard"),
                            opset=1, n_outputs=2, domain=TRAINING)
    np.testing.assert_allclose(v_new, 0.5 * v + g)  # beta is 1 on the first update
    np.testing.assert_allclose(x_new, x - 0.1 * (0.5 * v + g))
    for a, b in zip((x, g, v), before):
        np.testing.assert_array_equal(a, b)


def test_optimizer_errors():
    with pytest.raises(KernelError, match="3 inputs per optimized tensor"):
        run_ours("Adagrad", [R, np.array(0), *tensors(2)], {}, opset=1, n_outputs=2, domain=TRAINING)
    with pytest.raises(KernelError, match="mode"):
        run_ours("Momentum", [None], dict(norm_coefficient=0.0, alpha=0.5, beta=0.3, mode="heavy"), opset=1,
                 domain=TRAINING)
    with pytest.raises(KernelError, match="alpha"):
        run_ours("Momentum", [None], dict(norm_coefficient=0.0, beta=0.3), opset=1, domain=TRAINING)
    with pytest.raises(KernelError, match="R must be a scalar"):
        run_ours("Adam", [np.zeros(2, np.float32), np.array(0), *tensors(4)], {}, opset=1, n_outputs=3,
                 domain=TRAINING)


# --------------------------------------------------------------------------------- Gradient

def gradient_model(nodes, xs, y, inputs, initializers=(), zs=()):
    extra = dict(zs=list(zs)) if zs else {}
    grad = helper.make_node("Gradient", [*xs, *zs], [f"d_{x}" for x in xs], name="grad", domain=TRAINING,
                            xs=list(xs), y=y, **extra)
    graph = helper.make_graph(
        [*nodes, grad], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)]
        + [helper.make_tensor_value_info(f"d_{x}", TensorProto.FLOAT, None) for x in xs],
        initializer=[numpy_helper.from_array(v, k) for k, v in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING, 1)])
    return load_model(model, infer_shapes=False)


def gradient_kernel(model):
    node = next(n for n in model.graph.nodes if n.op_type == "Gradient")
    return lookup(TRAINING, "Gradient", 1).factory(node, 1, graph=model.graph)


def test_gradient_of_add_and_mul():
    model = gradient_model([helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Mul", ["c", "a"], ["d"])],
                           ["a", "b"], "d", [("a", []), ("b", [])])
    da, db = gradient_kernel(model)(np.array(1.0, np.float32), np.array(2.0, np.float32))
    assert da.dtype == np.float32 and da.shape == ()
    assert (float(da), float(db)) == (4.0, 1.0)  # d(a*a + a*b)/da = 2a + b, /db = a


def test_gradient_broadcasting_matches_finite_differences():
    # y = sum((a - w) / (b * w) + (-a)) with a [2, 3], b [3], w a constant initializer
    w = np.array([[1.5, -2.0, 0.5]], np.float32)
    nodes = [helper.make_node("Sub", ["a", "w"], ["s"]), helper.make_node("Mul", ["b", "w"], ["bw"]),
             helper.make_node("Div", ["s", "bw"], ["q"]), helper.make_node("Neg", ["a"], ["na"]),
             helper.make_node("Add", ["q", "na"], ["r"]), helper.make_node("Identity", ["r"], ["y"])]
    model = gradient_model(nodes, ["a", "b"], "y", [("a", [2, 3]), ("b", [3])], initializers=[("w", w)])
    a = rng.normal(size=(2, 3))
    b = rng.uniform(1, 2, size=3)
    da, db = gradient_kernel(model)(a, b)
    assert da.shape == a.shape and db.shape == b.shape

    def f(a, b):
        return float((((a - w) / (b * w)) - a).sum())

    eps = 1e-6
    num_da = np.array([(f(a + eps * e, b) - f(a - eps * e, b)) / (2 * eps) for e in np.eye(6).reshape(6, 2, 3)])
    num_db = np.array([(f(a, b + eps * e) - f(a, b - eps * e)) / (2 * eps) for e in np.eye(3)])
    np.testing.assert_allclose(da.reshape(-1), num_da, rtol=1e-5)
    np.testing.assert_allclose(db, num_db, rtol=1e-5)


def test_gradient_zs_and_unused_x():
    # y = a * z; dy/dk = 0 for an x that y does not depend on
    model = gradient_model([helper.make_node("Mul", ["a", "z"], ["y"])], ["a", "k"], "y",
                           [("a", [2]), ("k", [2]), ("z", [2])], zs=["z"])
    a, k, z = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, -6.0])
    da, dk = gradient_kernel(model)(a, k, z)
    assert da.tolist() == [5.0, -6.0] and dk.tolist() == [0.0, 0.0]


def test_gradient_errors():
    model = gradient_model([helper.make_node("Exp", ["a"], ["y"])], ["a"], "y", [("a", [])])
    with pytest.raises(KernelError, match="cannot differentiate"):
        gradient_kernel(model)
    model = gradient_model([helper.make_node("Add", ["a", "other"], ["y"])], ["a"], "y", [("a", []), ("other", [])])
    with pytest.raises(KernelError, match="neither in xs/zs"):
        gradient_kernel(model)
    node = next(n for n in model.graph.nodes if n.op_type == "Gradient")
    with pytest.raises(KernelError, match="needs the graph"):
        lookup(TRAINING, "Gradient", 1).factory(node, 1)


def test_gradient_in_a_session_names_the_problem():
    """Until the provider hands kernels the graph, a session refuses Gradient with a clear error."""
    grad = helper.make_node("Gradient", ["a"], ["da"], name="g", domain=TRAINING, xs=["a"], y="c")
    graph = helper.make_graph([helper.make_node("Add", ["a", "a"], ["c"]), grad], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("da", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING, 1)])
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except OrtError as e:
        assert "Gradient" in str(e) and "graph" in str(e)
    else:  # the provider passes the graph: then the derivative must be right
        c, da = sess.run(None, {"a": np.array(3.0, np.float32)})
        assert float(c) == 6.0 and float(da) == 2.0
