"""Every bad-input case gets an OrtError whose message names the problem."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort

from .conftest import make_model


@pytest.fixture
def sess():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 4])])
    return ort.InferenceSession(model)


def test_unknown_input_name_lists_valid_ones(sess):
    with pytest.raises(ort.InvalidArgument, match=r"invalid input name 'z'.*\['x'\]"):
        sess.run(None, {"x": np.zeros((1, 3, 4), np.float32), "z": np.zeros(1)})


def test_unknown_output_name_lists_valid_ones(sess):
    with pytest.raises(ort.InvalidArgument, match=r"invalid output name\(s\) \['nope'\].*\['y'\]"):
        sess.run(["nope"], {"x": np.zeros((1, 3, 4), np.float32)})


def test_wrong_dtype(sess):
    with pytest.raises(ort.InvalidArgument, match=r"input 'x'.*tensor\(double\), expected tensor\(float\)"):
        sess.run(None, {"x": np.zeros((1, 3, 4), np.float64)})


def test_wrong_rank(sess):
    with pytest.raises(ort.InvalidArgument, match=r"input 'x': invalid rank 2 .* expected rank 3"):
        sess.run(None, {"x": np.zeros((3, 4), np.float32)})


def test_fixed_dim_mismatch(sess):
    with pytest.raises(ort.InvalidArgument, match=r"input 'x'.*dim 1: expected 3, got 5"):
        sess.run(None, {"x": np.zeros((2, 5, 4), np.float32)})


def test_symbolic_dim_accepts_any_size(sess):
    assert sess.run(None, {"x": np.zeros((7, 3, 4), np.float32)})[0].shape == (7, 3, 4)


def test_missing_input(sess):
    with pytest.raises(ort.InvalidArgument, match=r"Required inputs \(\['x'\]\) are missing from input feed"):
        sess.run(None, {})


def test_feed_must_be_a_dict(sess):
    with pytest.raises(ort.InvalidArgument, match="input_feed must be a dict"):
        sess.run(None, [np.zeros((1, 3, 4), np.float32)])


def test_missing_model_file(tmp_path):
    path = tmp_path / "absent.onnx"
    with pytest.raises(ort.NoSuchFile, match="absent.onnx"):
        ort.InferenceSession(str(path))


def test_garbage_model_file(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\xff\xfe this is not a protobuf \x00\x01\x02" * 10)
    with pytest.raises(ort.InvalidProtobuf, match="garbage.onnx"):
        ort.InferenceSession(str(path))


def test_empty_model_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(ort.InvalidProtobuf, match=r"empty.onnx.*empty"):
        ort.InferenceSession(str(path))


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ort.InvalidProtobuf, match="is a directory"):
        ort.InferenceSession(str(tmp_path))


def test_wrong_source_type():
    with pytest.raises(TypeError, match="file path, bytes or onnx.ModelProto"):
        ort.InferenceSession(12345)


def test_unsupported_op_names_node():
    model = make_model([helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery", domain="com.example")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                       extra_opsets=[helper.make_opsetid("com.example", 1)])
    with pytest.raises(ort.NotImplementedOp, match=r"mystery.*com.example::NoSuchOp"):
        ort.InferenceSession(model)


def test_undefined_value_names_node():
    model = make_model([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(ort.InvalidGraph, match=r"adder.*'ghost'"):
        ort.InferenceSession(model)


def test_cycle_is_refused():
    model = make_model([helper.make_node("Relu", ["b"], ["a"], name="n1"),
                        helper.make_node("Relu", ["a"], ["b"], name="n2")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])])
    with pytest.raises(ort.InvalidGraph, match="cycle"):
        ort.InferenceSession(model)


def test_kernel_failure_names_node_and_session_stays_usable():
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                       [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["M", "K"]),
                        helper.make_tensor_value_info("b", TensorProto.FLOAT, ["K2", "N"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", "N"])])
    sess = ort.InferenceSession(model)
    with pytest.raises(ort.OrtError, match=r"node 'mm' \(MatMul\)"):
        sess.run(None, {"a": np.ones((2, 3), np.float32), "b": np.ones((4, 2), np.float32)})
    (y,) = sess.run(None, {"a": np.ones((2, 3), np.float32), "b": np.ones((3, 2), np.float32)})
    np.testing.assert_array_equal(y, np.full((2, 2), 3, np.float32))


def test_ragged_list_feed_is_an_invalid_argument(sess):
    # np.asarray raised ValueError ("inhomogeneous shape") out of run() before
    with pytest.raises(ort.InvalidArgument, match="input 'x': a list that is not an array"):
        sess.run(None, {"x": [[1.0], [2.0, 3.0]]})
