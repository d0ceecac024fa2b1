"""Hostile model files: external data kept inside the model's folder, declared tensor sizes checked
before decoding, truncated or corrupt protobufs and deep nesting refused with ort-core's errors."""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.cli import demo_model_path
from ort_core.limits import MAX_TENSOR_BYTES_KEY

from .conftest import make_model

W = np.arange(16, dtype=np.float32)


def _external_model(location: str, offset: int | None = None, length: int | None = None) -> onnx.ModelProto:
    """y = Identity(w) with w stored externally at ``location`` (offset, length as given)."""
    w = numpy_helper.from_array(W, "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        w.external_data.add(key=k, value=v)
    return make_model([helper.make_node("Identity", ["w"], ["y"], name="ident")], [],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])], [w])


def _save(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return str(path)


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "weights.bin").write_bytes(W.tobytes())
    return d


def test_external_data_inside_folder_loads(model_dir):
    (y,) = ort.InferenceSession(_save(model_dir, _external_model("weights.bin"))).run(None, {})
    np.testing.assert_array_equal(y, W)


def test_external_data_offset_and_length_inside_file(model_dir):
    (model_dir / "packed.bin").write_bytes(b"\0" * 8 + W.tobytes() + b"tail")
    model = _external_model("packed.bin", offset=8, length=W.nbytes)
    (y,) = ort.InferenceSession(_save(model_dir, model)).run(None, {})
    np.testing.assert_array_equal(y, W)


def test_external_data_in_a_subfolder_loads(model_dir):
    (model_dir / "data").mkdir()
    (model_dir / "data" / "w.bin").write_bytes(W.tobytes())
    (y,) = ort.InferenceSession(_save(model_dir, _external_model("data/w.bin"))).run(None, {})
    np.testing.assert_array_equal(y, W)


def test_absolute_location_is_refused(model_dir, tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(W.tobytes())
    with pytest.raises(ort.ExternalDataError, match=r"tensor 'w'.*secret\.bin.*absolute path"):
        ort.InferenceSession(_save(model_dir, _external_model(str(secret))))


@pytest.mark.parametrize("location", ["../secret.bin", "data/../../secret.bin", "..\\secret.bin"])
def test_dotdot_escape_is_refused(model_dir, tmp_path, location):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    with pytest.raises(ort.ExternalDataError, match=r"tensor 'w'.*escapes the model's folder"):
        ort.InferenceSession(_save(model_dir, _external_model(location)))


def test_etc_passwd_is_refused(model_dir):
    for location in ("/etc/passwd", "../../../../../../etc/passwd"):
        with pytest.raises(ort.ExternalDataError, match="passwd"):
            ort.InferenceSession(_save(model_dir, _external_model(location)))


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="needs symlinks")
def test_symlink_leading_outside_is_refused(model_dir, tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(W.tobytes())
    os.symlink(secret, model_dir / "link.bin")
    with pytest.raises(ort.ExternalDataError, match=r"tensor 'w'.*link\.bin.*outside the model's folder"):
        ort.InferenceSession(_save(model_dir, _external_model("link.bin")))
    os.symlink(tmp_path, model_dir / "up")  # a linked folder leading out, too
    with pytest.raises(ort.ExternalDataError, match="outside the model's folder"):
        ort.InferenceSession(_save(model_dir, _external_model("up/secret.bin")))


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="needs symlinks")
def test_symlink_staying_inside_is_followed(model_dir):
    os.symlink(model_dir / "weights.bin", model_dir / "alias.bin")
    (y,) = ort.InferenceSession(_save(model_dir, _external_model("alias.bin"))).run(None, {})
    np.testing.assert_array_equal(y, W)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_hanging(model_dir):
    os.mkfifo(model_dir / "pipe.bin")
    with pytest.raises(ort.ExternalDataError, match="not a regular file"):
        ort.InferenceSession(_save(model_dir, _external_model("pipe.bin")))


def test_directory_location_is_refused(model_dir):
    (model_dir / "sub").mkdir()
    with pytest.raises(ort.ExternalDataError, match="not a regular file"):
        ort.InferenceSession(_save(model_dir, _external_model("sub")))
    with pytest.raises(ort.ExternalDataError, match="outside the model's folder"):
        ort.InferenceSession(_save(model_dir, _external_model(".")))


@pytest.mark.parametrize("offset, length, pattern", [
    (0, 10_000, r"offset 0 \+ length 10000 exceed the file's size of 64 bytes"),
    (100, None, r"offset 100 is beyond the end of the file \(64 bytes\)"),
    (60, 8, r"offset 60 \+ length 8 exceed"),
    (-1, None, "offset -1 is negative"),
    (0, -5, "length -5 is negative"),
])
def test_offsets_and_lengths_are_checked_against_the_file(model_dir, offset, length, pattern):
    with pytest.raises(ort.ExternalDataError, match=r"tensor 'w' external data location 'weights.bin'.*" + pattern):
        ort.InferenceSession(_save(model_dir, _external_model("weights.bin", offset, length)))


def test_non_integer_offset_is_refused(model_dir):
    model = _external_model("weights.bin")
    model.graph.initializer[0].external_data.add(key="offset", value="lots")
    with pytest.raises(ort.ExternalDataError, match="offset 'lots' is not an integer"):
        ort.InferenceSession(_save(model_dir, model))


def test_missing_location_and_missing_file(model_dir):
    model = _external_model("weights.bin")
    del model.graph.initializer[0].external_data[:]
    with pytest.raises(ort.ExternalDataError, match="names no location"):
        ort.InferenceSession(_save(model_dir, model))
    with pytest.raises(ort.ExternalDataError, match="does not exist"):
        ort.InferenceSession(_save(model_dir, _external_model("absent.bin")))


def test_length_past_the_size_limit_is_refused_before_reading(model_dir):
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, "32")
    with pytest.raises(ort.InvalidGraph, match=rf"length 64 bytes is more than the limit of 32.*"
                                               rf"{MAX_TENSOR_BYTES_KEY}"):
        ort.InferenceSession(_save(model_dir, _external_model("weights.bin")), so)


def test_external_data_inside_subgraphs_is_resolved_too(model_dir, tmp_path):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    inner = _external_model("../secret.bin").graph.initializer[0]
    then = helper.make_graph([helper.make_node("Identity", ["w"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [16])], initializer=[inner])
    other = helper.make_graph([helper.make_node("Identity", ["w"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [16])],
                              initializer=[numpy_helper.from_array(W, "w")])
    model = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")],
                       [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])])
    with pytest.raises(ort.ExternalDataError, match="escapes the model's folder"):
        ort.InferenceSession(_save(model_dir, model))


# ----------------------------------------------------------------------------- declared sizes

def _initializer_model(tensor: TensorProto) -> onnx.ModelProto:
    return make_model([helper.make_node("Identity", [tensor.name], ["y"], name="ident")], [],
                      [helper.make_tensor_value_info("y", tensor.data_type, None)], [tensor])


@pytest.mark.parametrize("dims, pattern", [
    ([-3, 4], r"tensor 'big' has a negative dimension in \[-3, 4\]"),
    ([2 ** 40, 2 ** 40], r"tensor 'big' declares dims \[1099511627776, 1099511627776\] \(\d+ bytes\), more than"),
    ([2 ** 62, 2 ** 62, 4], "more than the limit"),  # the product overflows int64: computed exactly
])
def test_absurd_declared_dims_are_refused_before_decoding(dims, pattern):
    t = TensorProto(name="big", data_type=TensorProto.FLOAT, dims=dims, raw_data=b"\0" * 16)
    with pytest.raises(ort.InvalidGraph, match=pattern):
        ort.InferenceSession(_initializer_model(t))


def test_tensor_past_the_configured_limit_is_refused():
    t = numpy_helper.from_array(np.zeros(1024, np.float32), "big")
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, "1000")
    with pytest.raises(ort.InvalidGraph, match=rf"tensor 'big'.*4096 bytes.*limit of 1000.*'{MAX_TENSOR_BYTES_KEY}'"):
        ort.InferenceSession(_initializer_model(t), so)
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, "4096")  # at the limit: fine
    assert ort.InferenceSession(_initializer_model(t), so).run(None, {})[0].shape == (1024,)


def test_raw_data_disagreeing_with_dims_is_refused():
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1000], raw_data=b"\0" * 12)
    with pytest.raises(ort.InvalidGraph, match=r"tensor 'w' holds 12 bytes of raw data; its dims \[1000\] need 4000"):
        ort.InferenceSession(_initializer_model(t))


def test_constant_attribute_tensor_is_checked_too():
    t = TensorProto(name="v", data_type=TensorProto.FLOAT, dims=[2 ** 50], raw_data=b"\0" * 4)
    model = make_model([helper.make_node("Constant", [], ["y"], value=t, name="const")], [],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(ort.InvalidGraph, match="tensor 'v' declares dims"):
        ort.InferenceSession(model)


def test_unknown_element_type_is_refused():
    t = TensorProto(name="w", data_type=999, dims=[1], raw_data=b"\0" * 4)
    with pytest.raises(ort.InvalidGraph, match="tensor 'w' has unknown element type 999"):
        ort.InferenceSession(_initializer_model(t))


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1.5"])
def test_malformed_limit_config_is_refused(relu_add_model, value):
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, value)
    with pytest.raises(ort.InvalidArgument, match=MAX_TENSOR_BYTES_KEY):
        ort.InferenceSession(relu_add_model, so)


# ----------------------------------------------------------------------------- corrupt protobuf

def test_truncations_at_many_offsets_give_ort_errors():
    with open(demo_model_path(), "rb") as f:
        data = f.read()
    cuts = sorted(set(list(range(0, 64)) + list(range(0, len(data), max(1, len(data) // 300)))))
    outcomes = {}
    for cut in cuts:
        try:
            ort.InferenceSession(data[:cut])
            outcomes["loaded"] = outcomes.get("loaded", 0) + 1  # a cut at a field boundary can parse
        except ort.OrtError as e:
            outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
    assert outcomes.get("InvalidProtobuf", 0) > len(cuts) // 2, outcomes


def test_byte_flips_give_ort_errors_or_load():
    with open(demo_model_path(), "rb") as f:
        data = bytearray(f.read())
    rng = np.random.default_rng(7)
    for _ in range(200):
        mutated = bytearray(data)
        for pos in rng.integers(0, len(data), size=4):
            mutated[pos] ^= int(rng.integers(1, 256))
        try:
            sess = ort.InferenceSession(bytes(mutated))
        except ort.OrtError:
            continue
        try:
            sess.run(None, {sess.get_inputs()[0].name: np.zeros((1, 1, 28, 28), np.float32)})
        except ort.OrtError:
            pass


def _nested_if_proto(depth: int) -> onnx.ModelProto:
    """If inside If inside ... ``depth`` levels, built in memory (no serialization on the way)."""
    model = onnx.ModelProto(ir_version=8)
    model.opset_import.add(domain="", version=17)
    g = model.graph
    g.name = "main"
    g.input.add().CopyFrom(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    g.output.add().CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]))
    for level in range(depth):
        node = g.node.add(op_type="If", input=["c"], output=["y"], name=f"if{level}")
        other = node.attribute.add(name="else_branch", type=onnx.AttributeProto.GRAPH)
        other.g.CopyFrom(helper.make_graph([helper.make_node("Constant", [], ["y"], value_floats=[1.0])], "e", [],
                                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]))
        g = node.attribute.add(name="then_branch", type=onnx.AttributeProto.GRAPH).g
        g.name = f"then{level}"
        g.output.add().CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]))
    g.node.add().CopyFrom(helper.make_node("Constant", [], ["y"], value_floats=[2.0]))
    return model


def test_deep_nesting_in_a_file_is_refused_by_the_parser():
    # the protobuf parser (upb) stops at 100 levels of messages, about 32 levels of subgraphs
    data = _nested_if_proto(200).SerializeToString()
    with pytest.raises(ort.InvalidProtobuf, match="not a valid ONNX protobuf"):
        ort.InferenceSession(data)


def test_deep_nesting_in_memory_is_refused_with_the_limit():
    with pytest.raises(ort.InvalidGraph, match=r"node 'if64' \(If\) in graph 'then63' holds subgraphs nested "
                                               "more than 64 levels deep"):
        ort.InferenceSession(_nested_if_proto(300))


def test_moderate_nesting_still_runs():
    sess = ort.InferenceSession(_nested_if_proto(20))
    assert sess.run(None, {"c": np.array(True)})[0].tolist() == [2.0]
    assert sess.run(None, {"c": np.array(False)})[0].tolist() == [1.0]


# ----------------------------------------------------------------------------- models given as bytes

FOLDER_KEY = "session.model_external_initializers_file_folder_path"


def test_bytes_with_external_data_need_a_folder(model_dir, monkeypatch):
    monkeypatch.chdir(model_dir)  # the current directory holds the data, and is still not searched
    data = _external_model("weights.bin").SerializeToString()
    for source in (data, _external_model("weights.bin")):
        with pytest.raises(ort.ExternalDataError, match=rf"tensor 'w'.*'weights.bin'.*has no folder.*{FOLDER_KEY}"):
            ort.InferenceSession(source)


def test_bytes_with_external_data_in_the_configured_folder(model_dir, tmp_path):
    so = ort.SessionOptions()
    so.add_session_config_entry(FOLDER_KEY, str(model_dir))
    (y,) = ort.InferenceSession(_external_model("weights.bin").SerializeToString(), so).run(None, {})
    np.testing.assert_array_equal(y, W)
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    with pytest.raises(ort.ExternalDataError, match="escapes the model's folder"):
        ort.InferenceSession(_external_model("../secret.bin"), so)


def test_model_file_past_protobufs_limit_is_refused_unread(tmp_path):
    path = tmp_path / "huge.onnx"
    with open(path, "wb") as f:
        f.truncate((2 << 30) + 1)  # sparse: nothing is written, and nothing must be read
    with pytest.raises(ort.InvalidProtobuf, match="larger than 2 GiB"):
        ort.InferenceSession(str(path))
