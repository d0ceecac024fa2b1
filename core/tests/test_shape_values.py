"""Shape values through inference (ir/shape_values.py) and static shape reads folded (optimizer/shape_folding.py):
exports compute reshape targets and scales from Shape, and both must come out as onnx's data propagation has
them, without changing a single result."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.ir.load import load_model

from .conftest import make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _dim(src, i, tag):
    """Nodes of Unsqueeze(Gather(Shape(src), i), [0]) -> f"{tag}_u"."""
    return [helper.make_node("Shape", [src], [f"{tag}_s"]),
            helper.make_node("Gather", [f"{tag}_s", f"idx{i}"], [f"{tag}_g"], axis=0),
            helper.make_node("Unsqueeze", [f"{tag}_g", "zero"], [f"{tag}_u"])]


def _heads_model(target_tail, x_shape=("batch", 12, 32)):
    """x -> Reshape(x, Concat(dim0(x), dim1(x), *target_tail)) -> Transpose -> y, as exports write
    ``x.view(batch, seq, heads, -1).transpose(1, 2)``."""
    nodes = _dim("x", 0, "a") + _dim("x", 1, "b") + [
        helper.make_node("Concat", ["a_u", "b_u", "tail"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3])]
    inits = [_i64("idx0", 0), _i64("idx1", 1), _i64("zero", [0]), _i64("tail", target_tail)]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, list(x_shape))],
                      [helper.make_tensor_value_info("y", F, None)], inits)


@pytest.mark.parametrize("tail,expected", [([4, -1], ("batch", 12, 4, 8)), ([-1, 8], ("batch", 12, 4, 8)),
                                           ([2, 16], ("batch", 12, 2, 16)), ([0, -1], ("batch", 12, 32, 1))])
def test_reshape_to_a_target_read_off_shapes_gets_its_output_shape(tail, expected):
    graph = load_model(_heads_model(tail).SerializeToString(), infer_shapes="in_process").graph
    assert graph.type_of("r").shape == expected


def test_minus_one_that_symbols_do_not_settle_stays_unknown():
    """Reshape(x, [dim0(x), -1, 4, 8]) of x (batch, seq, 32): -1 is seq, a symbol of x; but of x (batch, seq,
    n) the -1 is seq * n / 32, which no symbol names."""
    nodes = _dim("x", 0, "a") + [helper.make_node("Concat", ["a_u", "tail"], ["target"], axis=0),
                                 helper.make_node("Reshape", ["x", "target"], ["r"]),
                                 helper.make_node("Identity", ["r"], ["y"])]
    for width, expected in ((32, ("batch", "seq", 4, 8)), ("n", ("batch", None, 4, 8))):
        model = make_model(nodes, [helper.make_tensor_value_info("x", F, ["batch", "seq", width])],
                           [helper.make_tensor_value_info("y", F, None)],
                           [_i64("idx0", 0), _i64("zero", [0]), _i64("tail", [-1, 4, 8])])
        graph = load_model(model.SerializeToString(), infer_shapes="in_process").graph
        assert graph.type_of("r").shape == expected


def _scale_model():
    """y = x * Sqrt(1 / Sqrt(Cast(Slice(Shape(x), -1, big)))) + Gather(Shape(x), 1), x (batch, 6, 64): the
    scale and the added dim are constants once the static dims are read (1/sqrt(sqrt(64)) and 6)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "minus1", "big"], ["last"]),
             helper.make_node("Cast", ["last"], ["lastf"], to=F),
             helper.make_node("Sqrt", ["lastf"], ["r1"]),
             helper.make_node("Div", ["one", "r1"], ["inv"]),
             helper.make_node("Sqrt", ["inv"], ["scale"]),
             helper.make_node("Mul", ["x", "scale"], ["xs"]),
             helper.make_node("Gather", ["s", "idx1"], ["six"], axis=0),
             helper.make_node("Cast", ["six"], ["sixf"], to=F),
             helper.make_node("Add", ["xs", "sixf"], ["y"]),
             helper.make_node("Gather", ["s", "idx0"], ["batch"], axis=0)]
    inits = [_i64("minus1", [-1]), _i64("big", [2 ** 62]), _i64("idx0", 0), _i64("idx1", 1),
             numpy_helper.from_array(np.float32(1.0), "one")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["batch", 6, 64])],
                      [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("batch", I64, None)],
                      inits)


def test_static_shape_reads_fold_and_symbolic_ones_stay():
    model = _scale_model()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ops = [op for a in sess.get_provider_graph_assignment_info() for op in a.op_types]
    assert sorted(ops) == ["Add", "Gather", "Mul", "Shape"]  # the batch read stays; Slice/Cast/Sqrt/Div folded
    assert sess._optimizer_stats["shape_folding"] == 2
    x = np.random.default_rng(0).standard_normal((3, 6, 64)).astype(np.float32)
    y, batch = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, x * np.float32(64 ** -0.25) + 6, rtol=1e-6)
    assert batch == 3


def test_a_fully_static_shape_folds_with_its_start_and_end():
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=-1), helper.make_node("Cast", ["s"], ["y"], to=F)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 3, 5, 7])],
                       [helper.make_tensor_value_info("y", F, None)], opset=17)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess._optimizer_stats["shape_folding"] == 1
    (y,) = sess.run(None, {"x": np.zeros((2, 3, 5, 7), np.float32)})
    np.testing.assert_array_equal(y, [3, 5])
