"""BatchRunner: dataset batches (column -> array) to model runs and back, without any cluster engine."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core
from ort_core.integrations.batch_feeds import BatchRunner, RowError, element_dtype

RNG = np.random.default_rng(7)
W = RNG.standard_normal((4, 3)).astype(np.float32)


def _model(batch="N", features=4, elem=TensorProto.FLOAT):
    x = helper.make_tensor_value_info("x", elem, [batch, features])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["xf", "w"], ["y"])]
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], W.ravel().tolist())
    graph = helper.make_graph(nodes, "g", [x], [y], [w])
    return ort_core.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                     .SerializeToString())


def _expected(x):
    return np.asarray(x, dtype=np.float32) @ W


def test_a_column_named_after_the_input_runs_in_one_run_and_other_columns_pass_through():
    x = RNG.standard_normal((10, 4)).astype(np.float32)
    out = BatchRunner(_model())({"x": x, "id": np.arange(10)})
    assert sorted(out) == ["id", "y"]
    np.testing.assert_allclose(out["y"], _expected(x), rtol=1e-5)
    np.testing.assert_array_equal(out["id"], np.arange(10))


def test_input_map_and_output_map_rename_and_keep_columns_chooses_what_passes():
    x = RNG.standard_normal((5, 4))
    runner = BatchRunner(_model(), input_map={"features": "x"}, output_map={"y": "scores"}, keep_columns=["key"])
    out = runner({"features": x, "key": np.arange(5) * 10, "other": np.zeros(5)})
    assert sorted(out) == ["key", "scores"]
    np.testing.assert_allclose(out["scores"], _expected(x), rtol=1e-5)  # float64 column converted to float32


def test_a_table_of_scalar_columns_stacks_into_the_feature_vector():
    cols = {c: RNG.standard_normal(6) for c in "abcd"}
    stacked = np.stack([cols[c] for c in "abcd"], axis=-1)
    out = BatchRunner(_model())(cols)  # one input of 4 features, 4 columns: taken in order
    np.testing.assert_allclose(out["y"], _expected(stacked), rtol=1e-5)
    out = BatchRunner(_model(), input_map={("d", "c", "b", "a"): "x"})({**cols, "e": np.ones(6)})
    np.testing.assert_allclose(out["y"], _expected(stacked[:, ::-1]), rtol=1e-5)
    assert "e" in out and "a" not in out


def test_a_fixed_batch_model_runs_full_chunks_and_pads_the_last_one():
    x = RNG.standard_normal((11, 4)).astype(np.float32)
    sess = _model(batch=4)
    calls = []
    real_run = sess.run

    def spy(names, feeds):
        calls.append(feeds["x"].shape[0])
        return real_run(names, feeds)

    sess.run = spy
    out = BatchRunner(sess)({"x": x})
    assert calls == [4, 4, 4]
    np.testing.assert_allclose(out["y"], _expected(x), rtol=1e-5)
    assert out["y"].shape == (11, 3)


def test_rows_of_the_wrong_shape_are_refused_by_id_and_the_rest_of_the_batch_goes_on():
    rows = np.empty(5, dtype=object)
    rows[:] = [np.ones(4), np.ones(3), np.full(4, 2.0), np.ones((2, 2)), np.full(4, 3.0)]
    got = []
    runner = BatchRunner(_model(), on_error="skip", id_column="key", on_failures=got.extend)
    out = runner({"x": rows, "key": np.array(["a", "b", "c", "d", "e"])})
    assert list(out["key"]) == ["a", "c", "e"]
    np.testing.assert_allclose(out["y"], _expected(np.stack([np.ones(4), np.full(4, 2.0), np.full(4, 3.0)])),
                               rtol=1e-5)
    assert [f.row for f in got] == ["b", "d"]
    assert "takes rows of shape [4], got [3]" in got[0].reason
    with pytest.raises(RowError, match=r"row 'b' refused: .*got \[3\] \(and 1 more"):
        BatchRunner(_model(), id_column="key")({"x": rows, "key": np.array(["a", "b", "c", "d", "e"])})


def test_without_a_failure_callback_skipped_rows_are_a_warning_naming_the_position():
    with pytest.warns(UserWarning, match=r"1 row\(s\) skipped; row 1: column 'x'"):
        out = BatchRunner(_model(), on_error="skip")({"x": _ragged([np.ones(4), np.ones(5)])})
    assert out["y"].shape == (1, 3)


def _ragged(items):
    a = np.empty(len(items), dtype=object)
    a[:] = items
    return a


def test_rows_whose_values_would_change_on_the_way_to_an_integer_input_are_refused():
    got = []
    runner = BatchRunner(_model(elem=TensorProto.INT64), on_error="skip", on_failures=got.extend)
    x = np.array([[1.0, 2, 3, 4], [1.5, 2, 3, 4], [5.0, 6, 7, 8]])
    out = runner({"x": x})
    np.testing.assert_allclose(out["y"], _expected(x[[0, 2]]), rtol=1e-5)
    assert [f.row for f in got] == [1] and "values change when float64 becomes int64" in got[0].reason
    with pytest.raises(RowError, match="holds <U1 values; input 'x' takes float32"):
        BatchRunner(_model())({"x": np.array([["a"] * 4] * 2)})


def test_ragged_rows_of_a_free_dimension_run_in_one_group_per_shape_and_keep_their_order():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "T"])
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g", [x], [y])
    sess = ort_core.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                     .SerializeToString())
    items = [np.arange(3.0), np.arange(5.0), np.arange(3.0) + 1, np.arange(2.0)]
    out = BatchRunner(sess)({"x": _ragged(items), "k": np.arange(4)})
    assert out["y"].dtype == object and list(out["k"]) == [0, 1, 2, 3]
    for got, want in zip(out["y"], items):
        np.testing.assert_array_equal(got, -want.astype(np.float32))


class _Picky:
    """A session-like object that refuses runs holding a negative first feature (data-dependent failure)."""

    def __init__(self):
        self.inner = _model()

    def get_inputs(self):
        return self.inner.get_inputs()

    def get_outputs(self):
        return self.inner.get_outputs()

    def run(self, names, feeds):
        if np.any(feeds["x"][:, 0] < 0):
            raise RuntimeError("negative first feature\nsecond line")
        return self.inner.run(names, feeds)


def test_a_failing_run_is_retried_row_by_row_to_find_the_rows_the_model_refuses():
    x = np.abs(RNG.standard_normal((6, 4))).astype(np.float32)
    x[[1, 4], 0] = -1
    got = []
    out = BatchRunner(_Picky(), on_error="skip", on_failures=got.extend)({"x": x, "k": np.arange(6)})
    assert list(out["k"]) == [0, 2, 3, 5]
    np.testing.assert_allclose(out["y"], _expected(x[[0, 2, 3, 5]]), rtol=1e-5)
    assert [(f.row, f.reason) for f in got] == [
        (1, "the model refused the row: RuntimeError: negative first feature")] + [
        (4, "the model refused the row: RuntimeError: negative first feature")]
    with pytest.raises(RowError, match="row 1 refused"):
        BatchRunner(_Picky())({"x": x})


@pytest.mark.parametrize("kwargs, batch, message", [
    ({"input_map": {"a": "nope"}}, {"a": np.ones((1, 4))}, "not an input of the model"),
    ({"output_map": {"z": "c"}}, {"x": np.ones((1, 4))}, "not an output of the model"),
    ({}, {"a": np.ones((1, 4)), "b": np.ones((1, 4))}, r"no column for model input 'x' \(rows of \[4\]\)"),
    ({"keep_columns": ["q"]}, {"x": np.ones((1, 4))}, "keep_columns names 'q'"),
    ({"id_column": "q"}, {"x": np.ones((1, 4))}, "id column 'q' is not in the batch"),
    ({}, {"x": np.ones((1, 4)), "y": np.ones(1)}, "output column 'y' would replace"),
    ({"on_error": "ignore"}, {"x": np.ones((1, 4))}, "on_error must be one of"),
])
def test_mistakes_of_configuration_raise_at_once_naming_the_problem(kwargs, batch, message):
    with pytest.raises(ValueError, match=message):
        BatchRunner(_model(), **kwargs)(batch)


def test_an_output_that_is_not_per_row_is_a_configuration_error_even_when_skipping():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], "g", [x], [y])
    sess = ort_core.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
                                     .SerializeToString())
    with pytest.raises(ValueError, match=r"output 'y' has shape \[\] for a run of 3 rows"):
        BatchRunner(sess, on_error="skip")({"x": np.ones((3, 4), np.float32)})


def test_element_types_follow_the_declared_tensor_type():
    assert element_dtype("tensor(float16)", "a") == np.float16
    assert element_dtype("tensor(string)", "a").kind == "O"
    with pytest.raises(ValueError, match="feeds tensors only"):
        element_dtype("seq(tensor(float))", "a")


def test_the_outputs_never_alias_the_callers_batch():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    out = BatchRunner(_model(), output_map={"y": "y"})({"x": x})
    assert not np.shares_memory(out["y"], x)
