"""onnx's shape inference runs in a helper process (a fresh interpreter, once per process): a crash in onnx's
C++ on a hostile model costs that model its inferred types, never the interpreter; the helper comes back for
the next model."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_core.ir import isolated
from ort_core.ir.isolated import infer_value_types

from .conftest import make_model

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the helper talks through POSIX pipes")


def _crashing_split():
    # onnx 1.23's Split inference indexes past num_outputs when the node has more outputs: an abort
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], name="split", axis=0, num_outputs=2)
    return make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                      [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in "abc"], opset=18)


def _typed_chain():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])


def test_crash_in_onnx_inference_is_contained_and_the_helper_returns():
    assert infer_value_types(_typed_chain())["r"].tensor_type.elem_type == TensorProto.FLOAT
    pid = isolated._helper.pid
    assert infer_value_types(_crashing_split()) == {}  # the helper died on it: nothing inferred
    assert isolated._helper is None
    with pytest.raises(ort.OrtError):  # the session says what is wrong with the model; no crash
        ort.InferenceSession(_crashing_split()).run(None, {"x": np.arange(6, dtype=np.float32)})
    assert infer_value_types(_typed_chain())["r"].tensor_type.elem_type == TensorProto.FLOAT
    assert isolated._helper.pid != pid


@pytest.mark.parametrize("mode", ["in_process", "off", "isolated"])
def test_inference_modes(mode):
    so = ort.SessionOptions()
    so.add_session_config_entry("ort_core.shape_inference", mode)
    sess = ort.InferenceSession(_typed_chain(), so)
    t = sess._model.graph.type_of("r")
    assert (t is None) == (mode == "off")
    assert sess.run(None, {"x": np.ones((2, 3), np.float32)})[0].shape == (2, 3)


def test_unknown_inference_mode_is_refused():
    so = ort.SessionOptions()
    so.add_session_config_entry("ort_core.shape_inference", "sometimes")
    with pytest.raises(ort.InvalidArgument, match="ort_core.shape_inference"):
        ort.InferenceSession(_typed_chain(), so)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd")
def test_helper_leaks_no_descriptors_or_processes():
    ort.InferenceSession(_typed_chain())
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(100):
        ort.InferenceSession(_typed_chain())
    infer_value_types(_crashing_split())  # one crash and restart among them
    for _ in range(20):
        ort.InferenceSession(_typed_chain())
    assert len(os.listdir("/proc/self/fd")) <= before
    children = [p for p in os.listdir("/proc") if p.isdigit() and _parent(p) == os.getpid()]
    assert len(children) <= 1, children


def _parent(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_the_helper_is_one_fresh_interpreter_for_all_sessions():
    ort.InferenceSession(_typed_chain())
    pid = isolated._helper.pid
    for _ in range(3):
        ort.InferenceSession(_typed_chain())
    assert isolated._helper.pid == pid  # started once, not per session
    if sys.platform.startswith("linux"):
        with open(f"/proc/{pid}/cmdline", "rb") as f:  # exec'd, not a fork carrying this process's state
            assert b"from ort_core.ir.isolated import serve" in f.read()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="an application fork")
def test_an_application_fork_gets_its_own_helper():
    ort.InferenceSession(_typed_chain())
    parent_helper = isolated._helper.pid
    pid = os.fork()
    if pid == 0:  # the application's child: must not talk to the parent's helper
        code = 1
        try:
            ok = isolated._helper is None
            sess = ort.InferenceSession(_typed_chain())
            ok = ok and sess._model.graph.type_of("r") is not None and isolated._helper.pid != parent_helper
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert isolated._helper.pid == parent_helper
    assert ort.InferenceSession(_typed_chain())._model.graph.type_of("r") is not None
