"""Tests of the QNN provider that need Qualcomm's libQnnHtp (the HTP simulator on x86-64): every op mapping
against the CPU provider, a small CNN end to end (float32, and fp16 on an SM8650 target), a model split around
a node QNN does not take, reasons for declined nodes, option errors, probe caching, profiling, threads.

Everything that loads the library runs in a child process (qnn_child.py), so that a crash inside it fails a
test rather than the test run; the child's stdout must hold nothing but its JSON answer (libQnnHtp prints on
load). Skipped, with the reason, where no QNN library is found (pip install onnxruntime-qnn).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ort_ep_qnn import library

_path, _where = library.find_backend()
if _path is None:
    pytest.skip(f"QNN HTP library not found: {_where}", allow_module_level=True)

NAME = "QNNExecutionProvider"
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qnn_child.py")


def child(scenario: str, args: dict | None = None, env: dict | None = None, timeout: int = 240) -> dict:
    """Run one scenario of qnn_child.py in a fresh interpreter; its stdout must be exactly one JSON line."""
    environment = {**os.environ, "ORT_EP_QNN_CACHE_DIR": "", **(env or {})}
    done = subprocess.run([sys.executable, CHILD, scenario, json.dumps(args or {})], capture_output=True, text=True,
                          timeout=timeout, env=environment)
    assert done.returncode == 0, f"{scenario} exited {done.returncode}:\n{done.stderr[-4000:]}"
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, f"{scenario}: stdout holds more than the answer: {lines[:-1][:5]}"
    return json.loads(lines[0])


@pytest.fixture(scope="module")
def ops() -> dict:
    return child("ops")


# (case, tolerance relative to the largest output value): measured errors on the simulator's default v68
# target are 0 to 2.5e-7 relative (float32 arithmetic, a few ulps where it accumulates)
OP_CASES = [
    "Add", "Add_bias_broadcast", "Add_runtime_broadcast", "Sub", "Mul", "Div", "Sum", "Relu", "Sigmoid", "Tanh",
    "MatMul", "MatMul_batched", "MatMul_weights", "Gemm_const", "Gemm_runtime",
    "Conv", "Conv_stride_dilation", "Conv_same_upper", "Conv_depthwise", "Conv_grouped", "BatchNormalization",
    "LRN",
    "MaxPool", "MaxPool_pads", "MaxPool_ceil", "AveragePool", "AveragePool_pads_excluded", "AveragePool_pads_included",
    "AveragePool_pads_excluded_1ch", "GlobalAveragePool",
    "Reshape", "Flatten", "Transpose", "Concat", "Softmax", "Softmax_axis1_opset13", "Softmax_axis1_opset11",
]


@pytest.mark.parametrize("case", OP_CASES)
def test_op_mapping_matches_the_cpu_provider(ops, case):
    r = ops[case]
    assert [p for p, _ in r["placement"]] == [NAME], r["placement"]  # placed on QNN, nothing handed back
    assert r["shape"] == r["want_shape"] and r["dtype"] == "float32"
    assert r["max_abs_err"] <= 1e-6 * max(1.0, r["max_abs"]), r


def test_small_cnn_runs_as_one_qnn_graph_in_float32():
    r = child("cnn")
    assert r["placement"] == [[NAME, ["Conv", "Relu", "MaxPool", "Conv", "Relu", "GlobalAveragePool", "Flatten", "Gemm",
                                      "Softmax"]]]
    assert r["max_abs_err"] <= 1e-6 * r["max_abs"], r


def test_a_subgraph_that_does_not_finalize_whole_runs_as_several_graphs():
    r = child("stages")
    assert [p for p, _ in r["placement"]] == [NAME]  # still all on QNN, nothing handed back
    assert len(r["stages"]) >= 5 and all(len(s) <= 2 for s in r["stages"])
    assert sum(len(s) for s in r["stages"]) == 9  # every node in exactly one finalized graph
    assert r["max_abs_err"] <= 1e-6 * r["max_abs"], r


def test_small_cnn_in_fp16_on_an_sm8650_target():
    r = child("cnn", {"options": {"soc_model": "57", "enable_htp_fp16_precision": "1"}})
    assert [p for p, _ in r["placement"]] == [NAME]
    # fp16 arithmetic: about 1e-3 of the output's range, never float32-exact
    assert 1e-6 * r["max_abs"] < r["max_abs_err"] <= 1e-2 * r["max_abs"], r


def test_unmapped_node_splits_the_model_with_the_reason():
    r = child("split")
    assert r["placement"] == [[NAME, ["Mul"]], ["CPUExecutionProvider", ["Erf"]], [NAME, ["Add"]]]
    assert r["max_abs_err"] <= 1e-6
    assert "Erf is not mapped to QNN yet" in r["explain"]


def test_declined_nodes_come_with_reasons():
    r = child("declines")
    assert all(p == "CPUExecutionProvider" for p, _ in r["placement"])
    text = r["explain"]
    for reason in ("input 'd' is double: only float32 is claimed", "the shape of input 'dyn' is not static",
                   "input 'i' is int64", "a shape computed at run time is not mapped",
                   "weights computed at run time are not mapped"):
        assert reason in text, text


def test_option_errors_name_the_option():
    r = child("options")
    assert "unknown provider option(s) ['bogus']" in r["unknown"] and "soc_model" in r["unknown"]
    assert "soc_model='eight': expected a whole number" in r["soc_text"]
    assert "htp_performance_mode='warp'" in r["mode"]
    assert "enable_htp_fp16_precision='yes'" in r["fp16_flag"]
    assert "profiling_level='optrace'" in r["profiling"]
    assert "computes float32, not fp16; set soc_model" in r["fp16_without_soc"]
    assert "soc_model=57 computes float32 graphs with fp16 arithmetic" in r["soc_without_fp16"]
    assert "soc_model=99999: the QNN HTP backend refuses it" in r["bad_soc"]


def test_unloadable_backend_path_declines_every_node_and_cpu_runs_them():
    r = child("backend_path")
    assert all(p == "CPUExecutionProvider" for p, _ in r["placement"])
    assert "backend_path /nonexistent/libQnnHtp.so does not exist; pip install onnxruntime-qnn" in r["explain"]
    assert r["max_abs_err"] == 0.0


def test_discovered_available_with_the_verified_api_version():
    r = child("discovery")
    assert r["available"] and r["in_available"] and r["plugin_is_module"], r
    assert r["distribution"] == "ort-ep-qnn"
    assert r["core_api"][:2] == [2, 40] and r["backend_api"][:2] == [5, 51]
    assert "QNN SDK 2.51" in r["description"] and r["build_id"].startswith("v2.51")
    assert r["context_binary_bytes"] > 0
    assert r["options"] == ["backend_path", "backend_type", "cache_dir", "enable_htp_fp16_precision",
                            "htp_performance_mode", "profiling_level", "soc_model"]


def test_unverified_api_version_is_refused_naming_both_versions():
    r = child("version_refusal")
    assert "reports QNN core API 2.40.0 with HTP API 5.51.0" in r["refused"]
    assert "verified for core API 2.39 with HTP API 5.51 only" in r["refused"]
    assert "pip install 'onnxruntime-qnn==2.7.*'" in r["refused"]
    if r["gpu_present"]:
        assert "is QNN's GPU backend" in r["gpu"] and "drives only the HTP backend" in r["gpu"]


def test_probe_verdicts_are_cached_in_memory_and_on_disk(tmp_path):
    r = child("probe_cache", {"folder": str(tmp_path)})
    assert r["probes_after_first"] == r["probes_after_more"]  # the same signature never probes again
    assert len(r["files"]) == 1 and r["has_sigmoid"]
    assert "v2.51" in r["tag"] and "soc=0" in r["tag"]
    again = child("probe_cache_reuse", {"folder": str(tmp_path)})  # a fresh process reads the file
    assert again["probed"] == [] and again["placement"] == [[NAME, ["Sigmoid"]]]


def test_profiling_reports_the_backends_events():
    r = child("profiling")
    assert r["placement"] == [[NAME, ["Conv"]]]
    assert any("execute" in e and e.endswith(" us") for e in r["events"]), r["events"]


def test_concurrent_runs_agree_bit_for_bit():
    r = child("threads")
    assert [p for p, _ in r["placement"]] == [NAME] and r["same"]
