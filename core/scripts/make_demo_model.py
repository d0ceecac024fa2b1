"""Build the demo model bundled with ort-core: a small CNN (28x28 grayscale -> 10 classes).

Weights are seeded random numbers, so its predictions mean nothing; it exists to exercise the
common CNN operators end to end. Run from the repo root to regenerate
core/src/ort_core/data/demo_cnn.onnx.
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(__file__), "..", "src", "ort_core", "data", "demo_cnn.onnx")


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(2026)

    def w(name, *shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        w("conv1_w", 8, 1, 3, 3, scale=0.5), w("conv1_b", 8, scale=0.1),
        w("conv2_w", 16, 8, 3, 3, scale=0.2), w("conv2_b", 16, scale=0.1),
        w("fc_w", 16 * 7 * 7, 10, scale=0.05), w("fc_b", 10, scale=0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1_w", "conv1_b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "demo_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 28, 28])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="ort-core", doc_string="ort-core demo CNN (seeded weights)")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    onnx.save(build(), OUT)
    print(f"wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)")
