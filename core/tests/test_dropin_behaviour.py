"""Behaviours code written for onnxruntime relies on, checked on ort-core and, where it is installed, on
onnxruntime itself: both runtimes must pass every case."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core

from .conftest import make_model


def _runtimes():
    yield pytest.param(ort_core, id="ort_core")
    try:
        yield pytest.param(importlib.import_module("onnxruntime"), id="onnxruntime")
    except ImportError:  # pragma: no cover - the nox session installs it as the yardstick
        yield pytest.param(None, id="onnxruntime", marks=pytest.mark.skip(reason="onnxruntime is not installed"))


RUNTIMES = list(_runtimes())


def _two_outputs_model():
    vi = helper.make_tensor_value_info
    return make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["x"], ["n"])],
                      [vi("x", TensorProto.FLOAT, [3])],
                      [vi("r", TensorProto.FLOAT, [3]), vi("n", TensorProto.FLOAT, [3])])


def _session(rt):
    return rt.InferenceSession(_two_outputs_model().SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("rt", RUNTIMES)
def test_an_empty_output_list_returns_every_output(rt):
    x = np.array([-1, 0, 2], np.float32)
    r, n = _session(rt).run([], {"x": x})
    np.testing.assert_array_equal(r, [0, 0, 2])
    np.testing.assert_array_equal(n, [1, 0, -2])


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")  # onnxruntime's own warning before it raises
def test_set_providers_with_an_unknown_provider_raises_naming_it(rt):
    sess = _session(rt)
    with pytest.raises(RuntimeError, match="Unknown Provider Type: NoSuchExecutionProvider"):
        sess.set_providers(["NoSuchExecutionProvider"])
    if rt is ort_core:  # ort-core keeps the session as it was (onnxruntime leaves it without providers)
        assert sess.get_providers() == ["CPUExecutionProvider"]
        assert sess.run(None, {"x": np.ones(3, np.float32)})[0].tolist() == [1, 1, 1]


@pytest.mark.parametrize("rt", RUNTIMES)
@pytest.mark.parametrize("cls, attr", [("SessionOptions", "intra_op_num_thread"),
                                       ("SessionOptions", "graph_opt_level"), ("RunOptions", "terminated")])
def test_setting_an_option_that_does_not_exist_raises(rt, cls, attr):
    options = getattr(rt, cls)()
    with pytest.raises(AttributeError, match=attr):
        setattr(options, attr, 1)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_the_documented_options_can_be_set(rt):
    so = rt.SessionOptions()
    so.use_per_session_threads = False
    so.enable_mem_pattern = False
    so.log_severity_level = 3
    ro = rt.RunOptions()
    ro.only_execute_path_to_fetches = True
    ro.logid = "run-1"
    assert so.log_severity_level == 3 and ro.logid == "run-1"
