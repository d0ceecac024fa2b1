"""The nine light models of the onnx wheel match their bundled expected outputs on the CPU provider."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ort_core as ort
from ort_core.threads import ADAPTIVE_ENV

from .conftest import ONNX_DATA

LIGHT = sorted(glob.glob(os.path.join(ONNX_DATA, "light", "*.onnx")))


def light_input(arg: ort.NodeArg) -> np.ndarray:
    """The input onnx's backend runner feeds light models: arange(n)/n in the input's shape."""
    shape = tuple(d if isinstance(d, int) else 1 for d in arg.shape)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def test_all_nine_light_models_present():
    names = {os.path.basename(p) for p in LIGHT}
    assert len(names) == 9, names


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: os.path.basename(p)[6:-5])
def test_light_model_matches_expected_output(path, monkeypatch):
    # the ill-conditioned SqueezeNet gives its expected 0.001 everywhere with 2 BLAS threads and 0.25 with one: with
    # other processes busy, ort-core's load-adaptive BLAS would take it to one (as the conformance runner, off)
    monkeypatch.setenv(ADAPTIVE_ENV, os.environ.get(ADAPTIVE_ENV, "0"))
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {a.name: light_input(a) for a in sess.get_inputs()}
    (out,) = sess.run(None, feeds)
    expected = numpy_helper.to_array(onnx.load_tensor(path.replace(".onnx", "_output_0.pb")))
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-7)
