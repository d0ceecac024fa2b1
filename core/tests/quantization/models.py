"""Small float models with seeded weights for the quantization tests, and their calibration/test data."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, weights, opset=17):
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in weights.items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def cnn():
    """Conv-Relu-Conv, 3 -> 8 -> 4 channels on 8x8 images."""
    rng = np.random.default_rng(0)
    w = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
         "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
         "w2": (rng.standard_normal((4, 8, 3, 3)) * 0.2).astype(np.float32),
         "b2": (rng.standard_normal(4) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], pads=[1, 1, 1, 1], name="conv2")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 3, 8, 8])],
                  [helper.make_tensor_value_info("y", F, ["N", 4, 8, 8])], w)


def mlp():
    """MatMul+Add, Relu, MatMul+Add: 16 -> 32 -> 8."""
    rng = np.random.default_rng(1)
    w = {"w1": (rng.standard_normal((16, 32)) * 0.3).astype(np.float32),
         "b1": (rng.standard_normal(32) * 0.1).astype(np.float32),
         "w2": (rng.standard_normal((32, 8)) * 0.3).astype(np.float32),
         "b2": (rng.standard_normal(8) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu"),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="mm2"),
             helper.make_node("Add", ["m2", "b2"], ["y"], name="add2")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 16])],
                  [helper.make_tensor_value_info("y", F, ["N", 8])], w)


def gemm():
    """One Gemm with transB and a bias: 16 -> 8."""
    rng = np.random.default_rng(2)
    w = {"w": (rng.standard_normal((8, 16)) * 0.3).astype(np.float32),
         "b": (rng.standard_normal(8) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="gemm")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 16])],
                  [helper.make_tensor_value_info("y", F, ["N", 8])], w)


def embedding():
    """Gather from a 50x12 table, then MatMul to 6 features."""
    rng = np.random.default_rng(3)
    w = {"t": rng.standard_normal((50, 12)).astype(np.float32),
         "w": (rng.standard_normal((12, 6)) * 0.3).astype(np.float32)}
    nodes = [helper.make_node("Gather", ["t", "ids"], ["e"], name="gather"),
             helper.make_node("MatMul", ["e", "w"], ["y"], name="mm")]
    return _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 5])],
                  [helper.make_tensor_value_info("y", F, ["N", 5, 6])], w)


def block():
    """A residual block and a classifier head: Conv-BatchNormalization-Relu-MaxPool, Conv-Add(skip)-Relu,
    GlobalAveragePool-Flatten-Gemm-Softmax (BatchNormalization left unfolded, as in models not pre-processed)."""
    rng = np.random.default_rng(4)
    w = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
         "g": (rng.random(8) + 0.5).astype(np.float32), "beta": (rng.standard_normal(8) * 0.1).astype(np.float32),
         "mean": (rng.standard_normal(8) * 0.1).astype(np.float32), "var": (rng.random(8) + 0.5).astype(np.float32),
         "w2": (rng.standard_normal((8, 8, 3, 3)) * 0.15).astype(np.float32),
         "b2": (rng.standard_normal(8) * 0.1).astype(np.float32),
         "fc": (rng.standard_normal((5, 8)) * 0.5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("BatchNormalization", ["c1", "g", "beta", "mean", "var"], ["n1"], name="bn"),
             helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Add", ["c2", "p1"], ["s"], name="skip"),
             helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
             helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
             helper.make_node("Gemm", ["flat", "fc"], ["logits"], transB=1, name="fc"),
             helper.make_node("Softmax", ["logits"], ["y"], axis=-1, name="softmax")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 3, 8, 8])],
                  [helper.make_tensor_value_info("y", F, ["N", 5])], w)


MODELS = {"cnn": cnn, "mlp": mlp, "gemm": gemm, "embedding": embedding, "block": block}


def feeds(name: str, seed: int, batch: int = 2) -> dict:
    rng = np.random.default_rng(seed)
    if name in ("cnn", "block"):
        return {"x": rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)}
    if name == "embedding":
        return {"ids": rng.integers(0, 50, (batch, 5)).astype(np.int64)}
    return {"x": rng.standard_normal((batch, 16)).astype(np.float32)}


def calibration(name: str, batches: int = 8) -> list[dict]:
    return [feeds(name, seed) for seed in range(batches)]


def eval_data(name: str) -> dict:
    return feeds(name, 1000, batch=16)
