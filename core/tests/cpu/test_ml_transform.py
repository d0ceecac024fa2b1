"""ai.onnx.ml feature transforms against the reference evaluator and numpy formulas, plus a whole
session that feeds a map to DictVectorizer and returns ZipMap's list of dicts."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.errors import KernelError
from ort_core.ir import load_model
from ort_core.providers.cpu.registry import lookup
from ort_core.session import CHECK_OUTPUTS_KEY

from .kernel_harness import run_ours, run_reference

ML = "ai.onnx.ml"
rng = np.random.default_rng(9)


def ours(op, inputs, attrs, opset=1, n_outputs=1):
    return run_ours(op, inputs, attrs, opset=opset, n_outputs=n_outputs, domain=ML)


def both(op, inputs, attrs, opset=1, ref_attrs=None):
    (a,) = ours(op, inputs, attrs, opset)
    (b,) = run_reference(op, inputs, ref_attrs or attrs, opset=opset, domain=ML)
    assert a.shape == b.shape
    if a.dtype == object or b.dtype.kind in "OU":
        assert a.dtype == object and a.tolist() == b.astype(object).tolist()
    else:
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-6)
    return a


def strings(*values, shape=None):
    arr = np.empty(len(values), dtype=object)
    arr[:] = list(values)
    return arr if shape is None else arr.reshape(shape)


# --------------------------------------------------------------------------- element-wise ops

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_binarizer(dtype):
    x = (rng.normal(size=(3, 4)) * 3).astype(dtype)
    y = both("Binarizer", [x], dict(threshold=0.5))
    np.testing.assert_array_equal(y, (x > 0.5).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_scaler(dtype):
    x = (rng.normal(size=(5, 3)) * 4).astype(dtype)
    (y,) = ours("Scaler", [x], dict(offset=[1.0, 2.0, -1.0], scale=[0.5, 2.0, 3.0]))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, (x.astype(np.float64) - [1, 2, -1]) * [0.5, 2, 3], rtol=1e-6)
    (y,) = ours("Scaler", [x[0]], dict(offset=[1.0], scale=[2.0]))  # one value for every column
    np.testing.assert_allclose(y, (x[0] - 1.0) * 2.0, rtol=1e-6)
    with pytest.raises(KernelError, match="offset"):
        ours("Scaler", [x], dict(offset=[1.0, 2.0], scale=[1.0]))


@pytest.mark.parametrize("norm", ["L1", "L2"])
def test_normalizer_matches_reference(norm):
    x = rng.normal(size=(4, 5)).astype(np.float32)
    both("Normalizer", [x], dict(norm=norm))


def test_normalizer_max_is_signed_and_zero_rows_stay_zero():
    x = np.array([[1, -3, 2], [0, 0, 0], [-1, -2, -0.5]], np.float32)
    (y,) = ours("Normalizer", [x], dict(norm="MAX"))
    np.testing.assert_allclose(y, [[0.5, -1.5, 1], [0, 0, 0], [2, 4, 1]])
    (y,) = ours("Normalizer", [np.array([3, 4], np.int64)], dict(norm="L2"))
    assert y.dtype == np.float32 and y.tolist() == pytest.approx([0.6, 0.8])
    with pytest.raises(KernelError, match="norm"):
        ours("Normalizer", [x], dict(norm="L3"))


def test_imputer():
    x = np.array([[1, np.nan, 3], [np.nan, 5, np.nan]], np.float32)
    attrs = dict(imputed_value_floats=[7.0, 8.0, 9.0], replaced_value_float=float("nan"))
    y = both("Imputer", [x], attrs)
    assert y.tolist() == [[1, 8, 3], [7, 5, 9]]
    xi = np.array([[0, 2], [3, 0]], np.int64)
    y = both("Imputer", [xi], dict(imputed_value_int64s=[-1], replaced_value_int64=0))
    assert y.dtype == np.int64 and y.tolist() == [[-1, 2], [3, -1]]
    (y,) = ours("Imputer", [np.array([1.0, 0.0], np.float64)], dict(imputed_value_floats=[5.0]))
    assert y.dtype == np.float64 and y.tolist() == [1.0, 5.0]
    with pytest.raises(KernelError, match="imputed"):
        ours("Imputer", [x], {})
    with pytest.raises(KernelError, match="columns"):
        ours("Imputer", [x], dict(imputed_value_floats=[1.0, 2.0]))


# ------------------------------------------------------------------------------ lookups

@pytest.mark.parametrize("x, attrs", [
    (np.array([[1, 3], [7, 2]], np.int64), dict(cats_int64s=[1, 2, 3, 7])),
    (strings("a", "c", "b", "a"), dict(cats_strings=["a", "b", "c"])),
    (np.array([1.0, 2.0, 4.0]), dict(cats_int64s=[1, 2, 4])),
])
def test_one_hot_encoder_matches_reference(x, attrs):
    y = both("OneHotEncoder", [x], attrs)
    assert y.dtype == np.float32 and y.shape == (*x.shape, len(next(iter(attrs.values()))))


def test_one_hot_encoder_unknown():
    (y,) = ours("OneHotEncoder", [np.array([5, 1], np.int64)], dict(cats_int64s=[1, 2]))
    assert y.tolist() == [[0, 0], [1, 0]]
    (y,) = ours("OneHotEncoder", [np.array([2.7], np.float64)], dict(cats_int64s=[1, 2]))
    assert y.tolist() == [[0, 1]]  # floats are truncated, as onnxruntime does
    with pytest.raises(KernelError, match="zeros=0"):
        ours("OneHotEncoder", [np.array([5, 1], np.int64)], dict(cats_int64s=[1, 2], zeros=0))
    with pytest.raises(KernelError, match="does not match"):
        ours("OneHotEncoder", [strings("a")], dict(cats_int64s=[1, 2]))


def test_label_encoder_v1():
    (y,) = ours("LabelEncoder", [strings("b", "z", "a")], dict(classes_strings=["a", "b"]))
    assert y.dtype == np.int64 and y.tolist() == [1, -1, 0]
    (y,) = ours("LabelEncoder", [np.array([1, 7, 0, -1], np.int64)], dict(classes_strings=["a", "b"],
                                                                          default_string="?"))
    assert y.dtype == object and y.tolist() == ["b", "?", "a", "?"]


@pytest.mark.parametrize("x, attrs", [
    (strings("a", "b", "q", shape=(1, 3)), dict(keys_strings=["a", "b"], values_int64s=[3, 4], default_int64=9)),
    (np.array([2, 5, 8], np.int64), dict(keys_int64s=[5, 2], values_strings=["five", "two"])),
    (np.array([1.5, 0.0], np.float32), dict(keys_floats=[1.5], values_floats=[-2.5], default_float=7.0)),
    (np.array([[3, 1]], np.int64), dict(keys_int64s=[1, 3], values_floats=[0.5, 1.5])),
])
@pytest.mark.parametrize("opset", [2, 4])
def test_label_encoder_matches_reference(x, attrs, opset):
    both("LabelEncoder", [x], attrs, opset=opset)


def test_label_encoder_v4_tensors_and_nan_keys():
    keys = np.array([1.5, np.nan, 3.0], np.float64)
    values = np.array([10, 20, 30], np.int16)
    attrs = dict(keys_tensor=keys, values_tensor=values, default_tensor=np.array([-7], np.int16))
    (y,) = ours("LabelEncoder", [np.array([3.0, np.nan, 2.0])], attrs, opset=4)
    assert y.dtype == np.int16 and y.tolist() == [30, 20, -7]
    ref_attrs = {k: numpy_helper.from_array(v, k) for k, v in attrs.items()}
    (ref,) = run_reference("LabelEncoder", [np.array([3.0, 1.5, 2.0])], ref_attrs, opset=4, domain=ML)
    (y,) = ours("LabelEncoder", [np.array([3.0, 1.5, 2.0])], attrs, opset=4)
    np.testing.assert_array_equal(y, ref)
    # before ml opset 4 NaN matches nothing; the default float is -0.0
    (y,) = ours("LabelEncoder", [np.array([np.nan], np.float32)], dict(keys_floats=[float("nan")],
                                                                     values_floats=[1.0]), opset=2)
    assert y.tolist() == [0.0] and np.signbit(y[0])
    # a string default for tensor string values
    (y,) = ours("LabelEncoder", [np.array([1, 9], np.int64)],
                dict(keys_int64s=[1], values_tensor=strings("one")), opset=4)
    assert y.tolist() == ["one", "_Unused"]


def test_label_encoder_errors():
    with pytest.raises(KernelError, match="keys"):
        ours("LabelEncoder", [np.array([1])], dict(values_int64s=[1]), opset=2)
    with pytest.raises(KernelError, match="2 keys for 1 values"):
        ours("LabelEncoder", [np.array([1])], dict(keys_int64s=[1, 2], values_int64s=[1]), opset=2)
    with pytest.raises(KernelError, match="does not match"):
        ours("LabelEncoder", [np.array([1])], dict(keys_strings=["a"], values_int64s=[1]), opset=2)


def test_category_mapper():
    attrs = dict(cats_strings=["a", "b"], cats_int64s=[5, 7])
    (y,) = ours("CategoryMapper", [strings("a", "q", "b", "a", shape=(2, 2))], attrs)
    assert y.dtype == np.int64 and y.tolist() == [[5, -1], [7, 5]]
    (y,) = ours("CategoryMapper", [np.array([5, 1, 7], np.int64)], dict(attrs, default_string="?"))
    assert y.dtype == object and y.tolist() == ["a", "?", "b"]
    with pytest.raises(KernelError, match="same length"):
        ours("CategoryMapper", [None], dict(cats_strings=["a"], cats_int64s=[1, 2]))


# --------------------------------------------------------------------------- feature assembly

@pytest.mark.parametrize("x, idx", [
    (rng.normal(size=(3, 5)).astype(np.float32), np.array([4, 0, 4], np.int64)),
    (np.arange(12, dtype=np.int64).reshape(2, 2, 3), np.array([[2, 0]], np.int64)),
    (np.arange(4, dtype=np.float64), np.array([1], np.int64)),
    (strings("a", "b", "c", shape=(1, 3)), np.array([2, 1], np.int64)),
])
def test_array_feature_extractor_matches_reference(x, idx):
    (a,) = ours("ArrayFeatureExtractor", [x, idx], {})
    (b,) = run_reference("ArrayFeatureExtractor", [x, idx], {}, opset=1, domain=ML)
    assert a.shape == b.shape and a.tolist() == b.tolist()


def test_array_feature_extractor_out_of_range():
    with pytest.raises(KernelError, match="out of range"):
        ours("ArrayFeatureExtractor", [np.zeros((2, 3), np.float32), np.array([3], np.int64)], {})


def test_array_feature_extractor_with_constant_indices_in_a_session():
    """Constant indices (checked once when the kernel is made) pick the same columns, and out-of-range ones
    are still refused at run time, naming the node."""
    def session(idx):
        node = helper.make_node("ArrayFeatureExtractor", ["x", "idx"], ["y"], domain=ML, name="afe")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [numpy_helper.from_array(np.array(idx, np.int64), "idx")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)])
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(session([2, 0, 2]).run(None, {"x": x})[0], x[:, [2, 0, 2]])
    with pytest.raises(KernelError, match=r"afe.*indices \[3\] out of range for last dimension 3"):
        session([3]).run(None, {"x": x})


def test_feature_vectorizer():
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    b = np.array([[7], [8]], np.int64)
    (y,) = ours("FeatureVectorizer", [a, b], dict(inputdimensions=[2, 3]))
    assert y.dtype == np.float32 and y.tolist() == [[1, 2, 7, 0, 0], [4, 5, 8, 0, 0]]
    (y,) = ours("FeatureVectorizer", [np.array([1, 2, 3], np.float64), np.array([7.0])], dict(inputdimensions=[3, 1]))
    assert y.tolist() == [[1, 2, 3, 7]]  # a 1-D input is one row, as in onnxruntime
    with pytest.raises(KernelError, match="rows"):
        ours("FeatureVectorizer", [a, np.zeros((3, 1))], dict(inputdimensions=[3, 1]))
    with pytest.raises(KernelError, match="inputdimensions"):
        ours("FeatureVectorizer", [a], dict(inputdimensions=[3, 1]))


def test_dict_vectorizer():
    (y,) = ours("DictVectorizer", [{"a": 1.5, "c": 2.0, "zz": 9.0}], dict(string_vocabulary=["a", "b", "c"]))
    assert y.dtype == np.float32 and y.tolist() == [[1.5, 0, 2.0]]
    (y,) = ours("DictVectorizer", [{3: np.float64(0.25), 1: np.float64(1.0)}], dict(int64_vocabulary=[1, 2, 3]))
    assert y.dtype == np.float64 and y.tolist() == [[1.0, 0.0, 0.25]]
    (y,) = ours("DictVectorizer", [{1: "u"}], dict(int64_vocabulary=[2, 1]))
    assert y.dtype == object and y.tolist() == [["", "u"]]
    (y,) = ours("DictVectorizer", [[{"a": 1}, {"b": 2}]], dict(string_vocabulary=["a", "b"]))
    assert y.dtype == np.int64 and y.tolist() == [[1, 0], [0, 2]]
    with pytest.raises(KernelError, match="map"):
        ours("DictVectorizer", [np.zeros(2)], dict(string_vocabulary=["a"]))
    with pytest.raises(KernelError, match="vocabulary"):
        ours("DictVectorizer", [{}], {})


def test_dict_vectorizer_uses_the_declared_value_type():
    map_type = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.DOUBLE, None))
    node = helper.make_node("DictVectorizer", ["m"], ["v"], domain=ML, int64_vocabulary=[1, 2])
    graph = helper.make_graph([node], "g", [helper.make_value_info("m", map_type)],
                              [helper.make_tensor_value_info("v", TensorProto.DOUBLE, None)])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid(ML, 1)]), infer_shapes=False)
    kernel = lookup(ML, "DictVectorizer", 1).factory(model.graph.nodes[0], 1, graph=model.graph)
    (y,) = kernel({2: 0.5})  # Python floats would otherwise give float32
    assert y.dtype == np.float64 and y.tolist() == [[0.0, 0.5]]


@pytest.mark.parametrize("form, to, expected", [
    ("DENSE", "TO_FLOAT", [[3.0, 2.5, -1.0]]),
    ("DENSE", "TO_INT64", [[3, 2, -1]]),
    ("DENSE", "TO_STRING", [["3.000000", "2.500000", "-1.000000"]]),
    ("SPARSE", "TO_FLOAT", [[3.0, 2.5, 0, 0, -1.0, 0]]),
    ("SPARSE", "TO_STRING", [["3.000000", "2.500000", "0.f", "0.f", "-1.000000", "0.f"]]),
])
def test_cast_map(form, to, expected):
    (y,) = ours("CastMap", [{1: 2.5, 4: -1.0, 0: 3.0}], dict(map_form=form, cast_to=to, max_map=6))
    assert y.tolist() == expected
    assert y.dtype == {"TO_FLOAT": np.float32, "TO_INT64": np.int64, "TO_STRING": object}[to]


def test_cast_map_strings_and_errors():
    (y,) = ours("CastMap", [{2: "1.5", 0: "4"}], dict(cast_to="TO_FLOAT"))
    assert y.tolist() == [[4.0, 1.5]]
    with pytest.raises(KernelError, match="max_map"):
        ours("CastMap", [{7: 1.0}], dict(map_form="SPARSE", max_map=3))
    with pytest.raises(KernelError, match="cast_to"):
        ours("CastMap", [{}], dict(cast_to="TO_BOOL"))


def test_zip_map():
    x = np.array([[0.25, 0.75], [0.5, 0.5]], np.float32)
    (z,) = ours("ZipMap", [x], dict(classlabels_strings=["a", "b"]))
    assert z == [{"a": 0.25, "b": 0.75}, {"a": 0.5, "b": 0.5}]
    (z,) = ours("ZipMap", [x[0]], dict(classlabels_int64s=[3, 8]))
    assert z == [{3: 0.25, 8: 0.75}]
    with pytest.raises(KernelError, match="labels"):
        ours("ZipMap", [x], dict(classlabels_int64s=[1, 2, 3]))


def test_dict_vectorizer_and_zip_map_in_a_session():
    """A map goes in, a list of dicts comes out, through a real InferenceSession."""
    map_type = helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    seq_type = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, None)))
    labels = ["a", "b", "c"]
    nodes = [
        helper.make_node("DictVectorizer", ["m"], ["v"], domain=ML, string_vocabulary=labels),
        helper.make_node("LinearClassifier", ["v"], ["label", "prob"], domain=ML, classlabels_strings=labels,
                         coefficients=[1.0, 0, 0, 0, 1, 0, 0, 0, 1], intercepts=[0.0, 0, 0], post_transform="SOFTMAX"),
        helper.make_node("ZipMap", ["prob"], ["z"], domain=ML, classlabels_strings=labels),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_value_info("m", map_type)],
                              [helper.make_tensor_value_info("label", TensorProto.STRING, [None]),
                               helper.make_value_info("z", seq_type)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    so = ort.SessionOptions()
    so.add_session_config_entry(CHECK_OUTPUTS_KEY, "1")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].type == "map(string,tensor(float))"
    label, z = sess.run(None, {"m": {"a": 1.0, "c": 3.0}})
    assert label.tolist() == ["c"]
    e = np.exp(np.array([1.0, 0.0, 3.0]) - 3.0)
    expected = e / e.sum()
    assert isinstance(z, list) and len(z) == 1 and set(z[0]) == set(labels)
    np.testing.assert_allclose([z[0][k] for k in labels], expected, rtol=1e-6)
