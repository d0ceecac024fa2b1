"""Hugging Face transformer exports (bench/export_transformers.py's models) as exported and
after onnxruntime's transformer optimizer (levels 1 and 2), its dynamic quantizer and its 4-bit MatMulNBits
quantizer: ort-core must load each file and agree with onnxruntime within 1.25 times onnxruntime's own
disagreement on it (its results with all optimizations against none), or 1e-4 of the largest output; a
quantized file also when ort-core's results are no further from the float export's than 1.25 times
onnxruntime's are (activations quantized at run time land a step apart wherever float kernels differ).

Nothing is made here: `nox -s hf_models` exports them into $ORT_CORE_MODELS or ~/.cache/ort-core/models (it
needs torch); a file that is not there is skipped with the reason. The inputs and the comparison are
bench/transformer_tools.py's, loaded by file path (bench/ is no package), so the bench and this test judge a
file the same way.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest

import ort_core

from .conftest import load_bench_module

tools = load_bench_module("transformer_tools")
CACHE = tools.CACHE
RECORD = os.path.join(CACHE, "hf_exports.json")
MODELS = list(load_bench_module("export_transformers").MODELS)
VARIANTS = list(tools.LABELS)


def _file(model: str, variant: str) -> str:
    if not os.path.exists(RECORD):
        pytest.skip(f"no Hugging Face exports in {CACHE}: `nox -s hf_models` makes them")
    with open(RECORD) as f:
        entry = json.load(f).get(model)
    name = None if entry is None else (entry["file"] if not variant else entry.get("variants", {}).get(variant))
    if isinstance(name, dict):
        pytest.skip(f"onnxruntime's tool failed on the {model} export: {name['failed']}")
    if name is None or not os.path.exists(os.path.join(CACHE, name)):
        pytest.skip(f"{model} {variant or 'export'} not made: `nox -s hf_models {model}`")
    return os.path.join(CACHE, name)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v or "export")
@pytest.mark.parametrize("model", MODELS)
def test_export_matches_onnxruntime(model, variant):
    path = _file(model, variant)
    ort = pytest.importorskip("onnxruntime")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ort_core.OrtWarning)
        sess = ort_core.InferenceSession(path)
    found = tools.agreement(sess, path, ort, float_path=_file(model, "") if variant in tools.QUANTIZED else None)
    assert found["top"] > 0
    assert found["ok"], found
