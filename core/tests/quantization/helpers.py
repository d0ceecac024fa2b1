"""Running a model on ort-core and on onnxruntime, comparing quantized models, and calibration readers."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ort_core

onnxruntime = pytest.importorskip("onnxruntime")
ort_quant = pytest.importorskip("onnxruntime.quantization")


class ListReader:
    """A CalibrationDataReader over a list of feeds (duck-typed: both quantizers accept it)."""

    def __init__(self, feeds: list[dict]) -> None:
        self.feeds = iter(feeds)

    def get_next(self):
        return next(self.feeds, None)


def run_ours(path, feed: dict) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ort_core.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0]


def run_theirs(path, feed: dict) -> np.ndarray:
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feed)[0]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def initializers(path) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def node_ops(path) -> list[tuple[str, str]]:
    return sorted((n.domain, n.op_type) for n in onnx.load(str(path)).graph.node)


def output_step(path) -> float | None:
    """The scale of the DequantizeLinear that makes the graph output (one quantization step), if any."""
    model = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = model.graph.output[0].name
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == out:
            return float(np.max(inits[n.input[1]]))
    return None
