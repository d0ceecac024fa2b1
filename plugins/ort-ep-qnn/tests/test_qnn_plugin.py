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


def child(scenario: str, args: dict | None = None, env: dict | None = None, timeout: int = 240,
          foreign: bool = False) -> dict:
    """Run one scenario of qnn_child.py in a fresh interpreter; its stdout must be exactly one JSON line
    (``foreign``: a scenario driving onnxruntime-qnn, whose library prints on load: its last line)."""
    environment = {**os.environ, "ORT_EP_QNN_CACHE_DIR": "", **(env or {})}
    done = subprocess.run([sys.executable, CHILD, scenario, json.dumps(args or {})], capture_output=True, text=True,
                          timeout=timeout, env=environment)
    assert done.returncode == 0, f"{scenario} exited {done.returncode}:\n{done.stderr[-4000:]}"
    lines = done.stdout.strip().splitlines()[-1:] if foreign else done.stdout.strip().splitlines()
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
    "Sqrt", "Exp", "Abs", "Neg", "Pow", "Div_scalar_constant", "Add_scalar_constant", "ReduceMean_last_axis",
    "ReduceMean_axes_input", "ReduceMean_all",
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
    # every node in exactly one finalized graph: the model's 9 and the 2 Transposes of the channels-last rewrite
    assert r["layout_transposes"] == 2 and sum(len(s) for s in r["stages"]) == 9 + 2
    assert r["max_abs_err"] <= 1e-6 * r["max_abs"], r


def test_small_cnn_in_fp16_on_an_sm8650_target():
    r = child("cnn", {"options": {"soc_model": "57", "enable_htp_fp16_precision": "1"}})
    assert [p for p, _ in r["placement"]] == [NAME]
    # fp16 arithmetic: about 1e-3 of the output's range, never float32-exact
    assert 1e-6 * r["max_abs"] < r["max_abs_err"] <= 1e-2 * r["max_abs"], r


def test_performance_modes_cast_power_votes_held_while_the_session_lives():
    got = child("power")
    from ort_ep_qnn.power import MODES

    assert got["default"]["vote"] is None and "while_open" not in got["default"]
    for mode in ["default", *MODES]:
        entry = got[mode]
        assert all(p == NAME for p, _ in entry["placement"]), (mode, entry["placement"])
        assert entry["max_abs_err"] < 1e-5, (mode, entry)
        if mode == "default":
            continue
        assert entry["vote"] == mode
        assert entry["while_open"] == 0, (mode, entry)  # the id is live: the backend accepts the vote again
        assert entry["after_close"] == 13001, (mode, entry)  # destroyed with the session: an unknown id
    refused = got["refused"]
    assert refused["vote"] is None and refused["max_abs_err"] < 1e-5
    assert any("htp_performance_mode=burst" in w and "refused for the test" in w for w in refused["warnings"])


def test_each_performance_mode_votes_onnxruntimes_clocks():
    from ort_ep_qnn import qnn_api as q
    from ort_ep_qnn.options import PERFORMANCE_MODES
    from ort_ep_qnn.power import MODES

    assert set(MODES) == set(PERFORMANCE_MODES) - {"default"}
    corners = {m: v.corner for m, v in MODES.items()}
    assert corners["burst"] == corners["sustained_high_performance"] == q.VCORNER_MAX
    assert corners["high_performance"] == q.VCORNER_TURBO
    order = ["high_performance", "balanced", "low_balanced", "high_power_saver", "power_saver", "low_power_saver",
             "extreme_power_saver"]
    assert [corners[m] for m in order] == sorted((corners[m] for m in order), reverse=True)  # clocks fall
    assert [MODES[m].dcvs_enable for m in ("burst", "high_performance", "balanced")] == [0, 0, 1]
    assert MODES["extreme_power_saver"].power_mode == q.POWER_MODE_POWER_SAVER
    assert MODES["burst"].sleep_latency_us < MODES["high_performance"].sleep_latency_us < \
        MODES["balanced"].sleep_latency_us


def test_context_cache_keeps_compiled_contexts_for_later_sessions(tmp_path, caplog):
    first = child("context_cache", {"folder": str(tmp_path)})
    assert [p for p, _ in first["placement"]] == [NAME] and first["builds"] >= 1
    assert len(first["files"]) == 1 and first["files"][0].endswith(".blob")
    assert first["max_abs_err"] < 1e-5
    again = child("context_cache", {"folder": str(tmp_path)})  # a fresh process: loaded, nothing built
    assert again["builds"] == 0 and again["files"] == first["files"]
    assert again["y"] == first["y"]  # the same graphs, bit for bit
    other = child("context_cache", {"folder": str(tmp_path), "options": {"htp_performance_mode": "burst"}})
    assert other["builds"] >= 1 and len(other["files"]) == 2  # other options: another entry
    blob = tmp_path / "contexts" / first["files"][0]
    blob.write_bytes(b"not a QNN context" * 10)  # a damaged entry is built and saved again
    damaged = child("context_cache", {"folder": str(tmp_path)})
    assert damaged["builds"] >= 1 and damaged["y"] == first["y"]
    assert blob.read_bytes()[:17] != b"not a QNN context"
    assert child("context_cache", {"folder": str(tmp_path)})["builds"] == 0


def test_htp_arch_reaches_the_backends_device_config():
    got = child("htp_arch", {"arch": "73"})
    assert [p for p, _ in got["placement"]] == [NAME] and got["max_abs_err"] < 1e-5
    assert any("ARCH 73" in line for line in got["backend"]), got["backend"]  # QNN 2.51: "HTP ARCH 73 set ..."


def test_erf_gelu_chain_runs_as_qnn_gelu_on_an_fp16_target():
    r = child("gelu", {"options": {"soc_model": "57", "enable_htp_fp16_precision": "1"}})
    assert r["placement"] == [[NAME, ["MatMul", "BiasGelu"]]], r["placement"]  # fused by the core, for QNN
    assert r["max_abs_err"] <= 1e-2 * r["max_abs"], r  # fp16 arithmetic (measured 1.4e-3 relative)
    f32 = child("gelu")  # float32: neither QNN's Erf nor its Gelu finalizes on the default v68 target
    assert ["CPUExecutionProvider", ["Erf"]] in f32["placement"]
    assert "the QNN HTP backend does not finalize it" in f32["explain"]


def test_unmapped_node_splits_the_model_with_the_reason():
    r = child("split")
    assert r["placement"] == [[NAME, ["Mul"]], ["CPUExecutionProvider", ["Sin"]], [NAME, ["Add"]]]
    assert r["max_abs_err"] <= 1e-6
    assert "Sin is not mapped to QNN yet" in r["explain"]


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
    assert "context_cache='on': expected '0' or '1'" in r["cache_flag"]
    assert "context_cache=1 keeps compiled contexts in cache_dir, which is empty" in r["cache_without_dir"]


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
    assert r["options"] == ["backend_path", "backend_type", "cache_dir", "context_cache", "enable_htp_fp16_precision",
                            "htp_arch", "htp_performance_mode", "profiling_level", "soc_model"]


def test_unverified_api_version_is_refused_naming_both_versions():
    r = child("version_refusal")
    assert "reports QNN core API 2.40.0 with HTP API 5.51.0" in r["refused"]
    assert "verified for core API 2.39 with HTP API 5.51 only" in r["refused"]
    assert "pip install 'onnxruntime-qnn==2.7.*'" in r["refused"]
    if r["gpu_present"]:
        assert "is QNN's GPU backend" in r["gpu"] and "drives only the HTP backend" in r["gpu"]


def test_probe_verdicts_belong_to_the_session_and_are_kept_on_disk(tmp_path):
    r = child("probe_cache", {"folder": str(tmp_path)})
    assert r["probes_after_first"] >= 1 and r["verdicts_of_first"] >= 1
    assert r["probes_after_first"] == r["probes_after_more"]  # the same signature never probes again
    assert r["probes_without_folder"] == 2 * r["probes_after_first"]  # the verdicts belong to the session
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


# ------------------------------------------------------------------------------------------ EPContext
def _has_onnxruntime_qnn() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnxruntime_qnn"))


needs_onnxruntime_qnn = pytest.mark.skipif(not _has_onnxruntime_qnn(),
                                           reason="onnxruntime-qnn is not installed (the yardstick for the format)")


@pytest.mark.parametrize("embed", ["1", "0"])
def test_context_model_is_saved_and_loads_without_compiling(tmp_path, embed):
    r = child("epcontext", {"folder": str(tmp_path), "embed": embed, "models": ["cnn", "split"]})
    cnn, split = r["cnn"], r["split"]
    [node] = cnn["nodes"]
    assert (node["op"], node["domain"], node["inputs"], node["outputs"]) == ("EPContext", "com.microsoft", ["x"], ["y"])
    attrs = node["attrs"]
    assert attrs["main_context"] == 1 and attrs["embed_mode"] == int(embed)
    assert attrs["source"] == NAME and attrs["partition_name"] == "QNNExecutionProvider_0"
    assert attrs["ep_sdk_version"] == cnn["sdk"] and cnn["sdk"].startswith("v2.")  # QNN's build id, as onnxruntime
    if embed == "1":
        assert attrs["ep_cache_context"] > 10_000  # the serialized context's bytes, in the node
    else:
        assert attrs["ep_cache_context"] == "cnn_ctx_QNNExecutionProvider_0.bin"
        assert attrs["ep_cache_context"] in cnn["files"]
    # two QNN subgraphs around Sin: one context holding both graphs, saved once in the first EPContext node; the
    # other names its graph in it (onnxruntime's layout for a shared context)
    main, sin, other = split["nodes"]
    assert [n["op"] for n in split["nodes"]] == ["EPContext", "Sin", "EPContext"]
    assert (main["attrs"]["main_context"], other["attrs"]["main_context"]) == (1, 0)
    assert main["name"] == main["attrs"]["partition_name"] and main["name"].startswith("QNNExecutionProvider_0_")
    assert other["name"] == other["attrs"]["partition_name"] and other["name"].startswith("QNNExecutionProvider_2_")
    assert "ep_cache_context" not in other["attrs"]
    assert main["attrs"]["ep_sdk_version"] == other["attrs"]["ep_sdk_version"] == split["sdk"]
    if embed == "0":
        assert main["attrs"]["ep_cache_context"] == "split_ctx_QNNExecutionProvider_0.bin"
        assert [f for f in split["files"] if f.startswith("split_ctx_")] == ["split_ctx_QNNExecutionProvider_0.bin"]
    for res in (cnn, split):
        assert res["builds"] == 0 and res["probes"] == 0  # loaded: nothing built, finalized or probed
        assert res["same"]  # bit for bit what the compiling session computed
        assert res["cpu_err"] <= 1e-6 * max(1.0, res["max_abs"])
    assert cnn["placement"] == [[NAME, ["EPContext"]]]
    assert split["placement"] == [[NAME, ["EPContext"]], ["CPUExecutionProvider", ["Sin"]], [NAME, ["EPContext"]]]


def test_a_subgraph_built_as_several_graphs_saves_and_loads_them_in_order(tmp_path):
    r = child("epcontext_stages", {"folder": str(tmp_path)})
    assert r["placement"] == [[NAME, ["EPContext"]]]
    assert r["graphs"] >= 5 and r["same"], r  # one context holding every part, run in their data order
    assert ["x"] in r["inputs"]  # graph inputs keep their ONNX names (how the loader wires them)


def test_a_context_that_cannot_be_loaded_is_reported_with_the_reason(tmp_path):
    r = child("epcontext_corrupt", {"folder": str(tmp_path)})
    assert r["error"].startswith("NotImplementedOp: no requested provider can run 1 node(s)"), r
    assert any("a QNN EPContext node of the model cannot be loaded: QnnSystemContext_getBinaryInfo failed" in w
               and "not a QNN context binary" in w for w in r["warnings"]), r["warnings"]


def test_subgraphs_that_cannot_share_a_context_are_saved_in_one_each(tmp_path):
    r = child("epcontext_unshared", {"folder": str(tmp_path)})
    contexts = [n for n in r["nodes"] if n["op"] == "EPContext"]
    assert [n["op"] for n in r["nodes"]] == ["EPContext", "Sin", "EPContext"]
    assert [n["attrs"]["main_context"] for n in contexts] == [1, 1]  # a whole context each
    assert r["placement"] == [[NAME, ["EPContext"]], ["CPUExecutionProvider", ["Sin"]], [NAME, ["EPContext"]]]
    assert r["builds"] == 0 and r["same"] and r["cpu_err"] <= 1e-6


@needs_onnxruntime_qnn
@pytest.mark.parametrize("embed", ["0", "1"])
def test_onnxruntime_qnn_runs_our_context_models(tmp_path, embed):
    # "split": two partitions in one shared context (main_context 1 and 0), read by onnxruntime-qnn
    child("epcontext", {"folder": str(tmp_path), "embed": embed, "models": ["cnn", "split"]})
    r = child("ort_reads", {"folder": str(tmp_path), "models": ["cnn", "split"]}, foreign=True)
    assert r["cnn"]["max_abs_err"] == 0.0  # the same compiled graph runs in either runtime
    assert r["split"]["max_abs_err"] <= 1e-6  # Sin on onnxruntime's CPU provider in between


@needs_onnxruntime_qnn
@pytest.mark.parametrize("embed", ["1", "0"])
def test_we_run_onnxruntime_qnn_context_models(tmp_path, embed):
    w = child("ort_writes", {"folder": str(tmp_path), "embed": embed, "models": ["cnn", "mod_split"]},
              foreign=True)
    main, _, other = w["mod_split"]["nodes"]  # one context for both partitions, in the first node
    assert main["attrs"]["source"] == "QNN" and main["attrs"]["main_context"] == 1
    assert other["attrs"]["main_context"] == 0 and "ep_cache_context" not in other["attrs"]
    r = child("reads_ort", {"folder": str(tmp_path), "models": ["cnn", "mod_split"]})
    assert r["cnn"]["placement"] == [[NAME, ["EPContext"]]]
    assert r["mod_split"]["placement"] == [[NAME, ["EPContext"]], ["CPUExecutionProvider", ["Mod"]],
                                           [NAME, ["EPContext"]]]
    for name in ("cnn", "mod_split"):
        assert r[name]["builds"] == 0
        assert r[name]["max_abs_err"] == 0.0, r  # onnxruntime-qnn's graphs, executed here
        assert r[name]["cpu_err"] <= 1e-6


# ------------------------------------------------------------------------------------------------ QDQ
QDQ_CASES = [{"model": "cnn"}, {"model": "residual"}, {"model": "cnn", "per_channel": False},
             {"model": "residual", "act": "QUInt16"}]


@pytest.fixture(scope="module")
def qdq(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("qdq")
    return {"folder": str(folder), "results": child("qdq", {"folder": str(folder), "cases": QDQ_CASES})}


@pytest.mark.parametrize("key, ops", [
    ("cnn_pc_QUInt8", "Conv, MaxPool, Conv, GlobalAveragePool, Flatten, Gemm, Softmax"),
    ("cnn_pt_QUInt8", "Conv, MaxPool, Conv, GlobalAveragePool, Flatten, Gemm, Softmax"),
    ("residual_pc_QUInt8", "Conv, Conv, Conv, Add, GlobalAveragePool, Flatten, Gemm"),
    ("residual_pc_QUInt16", "Conv, Conv, Conv, Add, GlobalAveragePool, Flatten, Gemm"),
])
def test_quantized_models_run_on_qnn_fixed_point_tensors(qdq, key, ops):
    r = qdq["results"][key]
    assert [p for p, _ in r["placement"]] == [NAME] and len(r["placement"][0][1]) == r["nodes"]  # every node
    assert r["quantized"] == [f"QNNExecutionProvider_0: 7 op(s) on quantized tensors: {ops}"]
    assert r["dtype"] == "float32"
    if key.endswith("QUInt8"):
        # 8-bit: within two steps of the output's quantization of the CPU provider's QDQ arithmetic (measured:
        # one or two steps; QNN requantizes every intermediate in integers, the CPU in float)
        assert 0 < r["max_abs_err"] <= 2.0001 * r["step"], r
    else:
        # 16-bit activations: the output step is 256x finer, the integer requantizations' rounding is not;
        # measured 35 steps = 1.3e-3, 5e-4 of the output's range (onnxruntime-qnn computes the same values)
        assert r["max_abs_err"] <= 2e-3, r


@needs_onnxruntime_qnn
def test_quantized_models_agree_with_onnxruntime_qnn(qdq):
    results = qdq["results"]
    r = child("ort_qdq", {"folder": qdq["folder"], "models": {k: v["path"] for k, v in results.items()}},
              foreign=True)
    for key, res in r.items():
        # 8-bit: within two output steps of onnxruntime-qnn's graph (measured 1-2); 16-bit: the same values
        limit = 2.0001 * results[key]["step"] if key.endswith("QUInt8") else 1e-6
        assert res["max_abs_diff"] <= limit, (key, res)


def test_quantized_context_model_saves_and_loads(tmp_path):
    r = child("epcontext", {"folder": str(tmp_path), "embed": "1", "models": ["qdq_cnn"]})["qdq_cnn"]
    assert [n["op"] for n in r["nodes"]] == ["EPContext"]  # every Q/DQ and op inside the one context
    assert r["builds"] == 0 and r["probes"] == 0 and r["same"]
    assert r["cpu_err"] <= 2.0001 / 255  # the output's quantization step is 1/255 (a softmax)


@needs_onnxruntime_qnn
def test_quantized_context_models_cross_read(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    child("epcontext", {"folder": str(ours), "embed": "1", "models": ["qdq_cnn"]})
    r = child("ort_reads", {"folder": str(ours), "models": ["qdq_cnn"]}, foreign=True)
    assert r["qdq_cnn"]["max_abs_err"] == 0.0  # onnxruntime-qnn runs our quantized graph to the bit
    w = child("ort_writes", {"folder": str(theirs), "embed": "1", "models": ["qdq_cnn"]}, foreign=True)
    # onnxruntime-qnn leaves the input's QuantizeLinear and the output's DequantizeLinear outside its node, whose
    # inputs and outputs are uint8; its graph's tensors are named after the float values ("x", "y")
    assert [n["op"] for n in w["qdq_cnn"]["nodes"]] == ["QuantizeLinear", "EPContext", "DequantizeLinear"]
    r = child("reads_ort", {"folder": str(theirs), "models": ["qdq_cnn"]})["qdq_cnn"]
    assert r["placement"] == [[NAME, ["QuantizeLinear", "EPContext", "DequantizeLinear"]]]
    assert r["builds"] == 2  # the Quantize and Dequantize around it; its graph is loaded, not built
    assert r["max_abs_err"] <= 1.0001 / 255  # onnxruntime quantizes the input on its CPU, QNN here: one step
