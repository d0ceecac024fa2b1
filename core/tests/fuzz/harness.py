"""Fuzzing harness: seed models with valid feeds, mutations of models (bytes and structure) and of feeds,
and ``exercise``, which builds and runs a session and fails on any exception that is not an OrtError.

The contract checked: a model or an input, however malformed, yields a session, results or an
``ort_core.OrtError`` subclass; never another exception, a crash or a hang. A KernelError caused by a
MemoryError also counts as a finding: some allocation escaped the size checks.
"""

from __future__ import annotations

import copy
import faulthandler
import functools
import glob
import os
import tempfile
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.cli import demo_model_path
from ort_core.ir.types import np_dtype
from ort_core.limits import MAX_TENSOR_BYTES_KEY

MAX_TENSOR_BYTES = 64 << 20  # fuzzed sessions: small enough that a runaway allocation is cheap
RUN_SECONDS = 5.0  # a run still going after this is stopped through RunOptions.terminate
HANG_SECONDS = 120  # one example past this is a hang: the process dumps its stacks and exits

ONNX_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")

# node cases of onnx's loader used as seeds: control flow, ops allocating from data, and a spread of others
NODE_SEEDS = """
test_loop11 test_if test_scan9_sum test_range_float_type_positive_delta test_constantofshape_int_zeros
test_expand_dim_changed test_tile test_resize_upsample_scales_linear test_edge_pad test_reflect_pad
test_onehot_with_axis test_center_crop_pad_crop_and_pad test_col2im test_conv_with_strides_padding
test_convtranspose test_maxpool_2d_pads test_gather_0 test_gathernd_example_int32 test_scatternd test_top_k
test_nonmaxsuppression_center_point_box_format test_unique_sorted_with_axis test_einsum_batch_matmul
test_reshape_extended_dims test_slice test_split_equal_parts_1d_opset18 test_cumsum_1d test_dft test_hannwindow
test_stft test_gridsample test_roialign_aligned_false test_lstm_defaults test_gru_defaults
test_maxunpool_export_with_output_shape test_triu test_compress_0 test_sequence_insert_at_back
test_split_to_sequence_1 test_string_split_basic test_regex_full_match_basic test_bitshift_left_uint8
test_mod_mixed_sign_int64 test_layer_normalization_2d_axis0 test_attention_3d test_nonzero_example
test_where_example test_matmul_2d test_reduce_sum_keepdims_example test_argmax_default_axis_example
test_tfidfvectorizer_tf_batch_onlybigrams_skip0 test_dequantizelinear test_qlinearmatmul_2D_uint8_float32
test_affine_grid_2d test_deform_conv_with_mask_bias test_sequence_map_identity_1_sequence
test_optional_get_element_tensor test_mvn test_upsample_nearest test_image_decoder_decode_jpeg_rgb
test_ai_onnx_ml_label_encoder_string_int test_ai_onnx_ml_tree_ensemble_set_membership test_adagrad
test_softmax_axis_0 test_batchnorm_epsilon test_instancenorm_example test_lrn test_depthtospace_example
test_shape_start_1 test_squeeze test_unsqueeze_axis_0 test_transpose_all_permutations_0 test_concat_2d_axis_0
test_averagepool_2d_pads test_globalaveragepool test_gemm_default_no_bias test_flatten_axis0 test_clip
test_eyelike_with_dtype test_mul_bcast test_pow test_selu test_hardmax_example test_logsoftmax_axis_0
test_reversesequence_time test_scatter_elements_with_axis test_gather_elements_0 test_sum_two_inputs
test_nllloss_NC test_blackmanwindow test_melweightmatrix test_rnn_seq_length
""".split()


@dataclass
class Seed:
    name: str
    model: onnx.ModelProto
    feeds: dict[str, Any]


@dataclass
class Stats:
    """What the fuzz run did; printed at the end of the session (see conftest.py)."""

    examples: Counter = field(default_factory=Counter)  # per test
    outcomes: Counter = field(default_factory=Counter)  # 'session created', 'run ok', error class names
    findings: list[str] = field(default_factory=list)


STATS = Stats()


# ---------------------------------------------------------------------------------------------- seeds

def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _built_seeds() -> list[Seed]:
    """Small models whose size-driving values (shapes, repeats, pads, trip counts) are graph inputs."""
    F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    f32 = np.float32
    out: list[Seed] = []

    def add(name, nodes, inputs, feeds, opset=18, inits=()):
        outputs = [helper.make_empty_tensor_value_info(o) for o in nodes[-1].output if o]
        graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        out.append(Seed(f"built:{name}", model, feeds))

    x22 = np.arange(4, dtype=f32).reshape(2, 2)
    add("constant_of_shape", [helper.make_node("ConstantOfShape", ["s"], ["y"], name="n")], [_vi("s", I64, [None])],
        {"s": np.array([2, 3], np.int64)})
    add("expand", [helper.make_node("Expand", ["x", "s"], ["y"], name="n")], [_vi("x", F, None), _vi("s", I64, [None])],
        {"x": x22, "s": np.array([3, 2, 2], np.int64)})
    add("tile", [helper.make_node("Tile", ["x", "r"], ["y"], name="n")], [_vi("x", F, None), _vi("r", I64, [None])],
        {"x": x22, "r": np.array([2, 3], np.int64)})
    add("range", [helper.make_node("Range", ["a", "b", "d"], ["y"], name="n")],
        [_vi("a", F, []), _vi("b", F, []), _vi("d", F, [])], {"a": f32(0), "b": f32(5), "d": f32(0.5)})
    add("resize", [helper.make_node("Resize", ["x", "", "s"], ["y"], name="n", mode="linear")],
        [_vi("x", F, None), _vi("s", F, [None])], {"x": x22.reshape(1, 1, 2, 2), "s": np.array([1, 1, 2, 3], f32)})
    add("pad", [helper.make_node("Pad", ["x", "p", "v"], ["y"], name="n", mode="reflect")],
        [_vi("x", F, None), _vi("p", I64, [None]), _vi("v", F, [])],
        {"x": x22, "p": np.array([1, 1, 1, 1], np.int64), "v": f32(0)})
    add("onehot", [helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="n")],
        [_vi("i", I64, None), _vi("d", I64, []), _vi("v", F, [2])],
        {"i": np.array([0, 2], np.int64), "d": np.int64(3), "v": np.array([0, 1], f32)})
    add("reshape_slice", [helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
                          helper.make_node("Slice", ["r", "st", "en", "ax", "sp"], ["y"], name="slice")],
        [_vi("x", F, None), _vi("s", I64, [None]), _vi("st", I64, [None]), _vi("en", I64, [None]),
         _vi("ax", I64, [None]), _vi("sp", I64, [None])],
        {"x": np.arange(12, dtype=f32), "s": np.array([3, 4], np.int64), "st": np.array([0], np.int64),
         "en": np.array([3], np.int64), "ax": np.array([1], np.int64), "sp": np.array([2], np.int64)})
    add("gather_topk", [helper.make_node("Gather", ["x", "i"], ["g"], name="gather", axis=1),
                        helper.make_node("TopK", ["g", "k"], ["y", "idx"], name="topk")],
        [_vi("x", F, None), _vi("i", I64, None), _vi("k", I64, [1])],
        {"x": np.arange(12, dtype=f32).reshape(3, 4), "i": np.array([3, 0, 1], np.int64), "k": np.array([2], np.int64)})
    add("split_concat", [helper.make_node("Split", ["x", "s"], ["a", "b"], name="split"),
                         helper.make_node("Concat", ["b", "a"], ["y"], name="concat", axis=0)],
        [_vi("x", F, None), _vi("s", I64, [2])], {"x": np.arange(6, dtype=f32), "s": np.array([2, 4], np.int64)})
    add("conv", [helper.make_node("Conv", ["x", "w"], ["y"], name="n", pads=[1, 1, 1, 1], strides=[1, 1])],
        [_vi("x", F, None), _vi("w", F, None)],
        {"x": np.ones((1, 1, 4, 4), f32), "w": np.ones((2, 1, 3, 3), f32)})
    add("matmul_add", [helper.make_node("MatMul", ["a", "b"], ["m"], name="mm"),
                       helper.make_node("Add", ["m", "c"], ["y"], name="add")],
        [_vi("a", F, None), _vi("b", F, None), _vi("c", F, None)],
        {"a": np.ones((2, 3), f32), "b": np.ones((3, 4), f32), "c": np.ones((1, 4), f32)})
    add("unique_nonzero", [helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
                           helper.make_node("Unique", ["nz"], ["y"], name="unique")],
        [_vi("x", F, None)], {"x": np.array([[0, 1], [2, 0]], f32)})
    add("scatter_nd", [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="n")],
        [_vi("x", F, None), _vi("i", I64, None), _vi("u", F, None)],
        {"x": np.zeros(4, f32), "i": np.array([[1], [3]], np.int64), "u": np.array([5, 6], f32)})
    add("col2im", [helper.make_node("Col2Im", ["x", "i", "b"], ["y"], name="n")],
        [_vi("x", F, None), _vi("i", I64, [2]), _vi("b", I64, [2])],
        {"x": np.ones((1, 4, 4), f32), "i": np.array([3, 3], np.int64), "b": np.array([2, 2], np.int64)})
    add("center_crop_pad", [helper.make_node("CenterCropPad", ["x", "s"], ["y"], name="n")],
        [_vi("x", F, None), _vi("s", I64, [None])], {"x": x22, "s": np.array([3, 1], np.int64)})
    add("dft", [helper.make_node("DFT", ["x", "l"], ["y"], name="n")], [_vi("x", F, None), _vi("l", I64, [])],
        {"x": np.ones((1, 4, 1), f32), "l": np.int64(4)}, opset=17)
    add("window", [helper.make_node("HannWindow", ["s"], ["y"], name="n")], [_vi("s", I64, [])], {"s": np.int64(8)})
    add("cumsum_trilu", [helper.make_node("CumSum", ["x", "a"], ["c"], name="cumsum"),
                         helper.make_node("Trilu", ["c", "k"], ["y"], name="trilu")],
        [_vi("x", F, None), _vi("a", I64, []), _vi("k", I64, [])],
        {"x": np.ones((3, 3), f32), "a": np.int64(1), "k": np.int64(0)})
    add("einsum", [helper.make_node("Einsum", ["a", "b"], ["y"], name="n", equation="ij,jk->ik")],
        [_vi("a", F, None), _vi("b", F, None)], {"a": np.ones((2, 3), f32), "b": np.ones((3, 2), f32)})
    add("grid_sample", [helper.make_node("GridSample", ["x", "g"], ["y"], name="n")],
        [_vi("x", F, None), _vi("g", F, None)], {"x": np.ones((1, 1, 3, 3), f32), "g": np.zeros((1, 2, 2, 2), f32)})

    # Loop: M iterations adding one, a scan output per iteration; If chooses a branch from an input
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["acc", "one"], ["acc_out"]),
         helper.make_node("Identity", ["acc"], ["scan"])],
        "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("acc", F, [1])],
        [_vi("c_out", B, []), _vi("acc_out", F, [1]), _vi("scan", F, [1])],
        initializer=[helper.make_tensor("one", F, [1], [1.0])])
    add("loop", [helper.make_node("Loop", ["m", "cond", "x"], ["y", "ys"], name="loop", body=body)],
        [_vi("m", I64, []), _vi("cond", B, []), _vi("x", F, [1])],
        {"m": np.int64(4), "cond": np.array(True), "x": np.zeros(1, f32)})
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [_vi("t", F, None)])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [_vi("e", F, None)])
    add("if", [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
        [_vi("c", B, []), _vi("x", F, None)], {"c": np.array(True), "x": np.array([-1, 2], f32)})
    scan_body = helper.make_graph([helper.make_node("Add", ["s", "e"], ["s_out"]),
                                   helper.make_node("Identity", ["s"], ["o"])], "scan_body",
                                  [_vi("s", F, [2]), _vi("e", F, [2])], [_vi("s_out", F, [2]), _vi("o", F, [2])])
    add("scan", [helper.make_node("Scan", ["init", "seq"], ["total", "partial"], name="scan", body=scan_body,
                                  num_scan_inputs=1)],
        [_vi("init", F, [2]), _vi("seq", F, [None, 2])],
        {"init": np.zeros(2, f32), "seq": np.ones((3, 2), f32)})
    return out


def _read_data_set(model: onnx.ModelProto, folder: str) -> dict[str, Any]:
    names = [v.name for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}]
    feeds = {}
    for k, name in enumerate(names):
        path = os.path.join(folder, f"input_{k}.pb")
        if not os.path.exists(path):
            break
        t = TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        feeds[name] = numpy_helper.to_array(t)
    return feeds


def _file_seeds() -> list[Seed]:
    """The bundled demo model and the onnx wheel's 'simple' models with their first data set."""
    from ort_core.cli import demo_input

    seeds = [Seed("demo", onnx.load(demo_model_path()), {"image": demo_input()})]
    for folder in sorted(glob.glob(os.path.join(ONNX_DATA, "simple", "*"))):
        path = os.path.join(folder, "model.onnx")
        if not os.path.exists(path):
            continue
        model = onnx.load(path)
        try:
            feeds = _read_data_set(model, os.path.join(folder, "test_data_set_0"))
        except Exception:  # noqa: BLE001 - sequence inputs and the like: generated from types instead
            feeds = {}
        seeds.append(Seed("simple:" + os.path.basename(folder), model, feeds))
    return seeds


def _node_seeds() -> list[Seed]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.loader import load_node_model_tests

        cases = {c.name: c for c in load_node_model_tests()}
    seeds = []
    for name in NODE_SEEDS:
        case = cases.get(name)
        if case is None or not case.data_sets:
            continue
        model = case.model
        inputs = case.data_sets[0][0]
        names = [v.name for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}]
        seeds.append(Seed("node:" + name, model, dict(zip(names, inputs))))
    return seeds


@functools.cache
def seeds() -> tuple[Seed, ...]:
    return tuple(_file_seeds() + _built_seeds() + _node_seeds())


# ------------------------------------------------------------------------------------------ exercising

@functools.cache
def data_folder() -> str:
    """The folder fuzzed models' external data is looked up in: a data file, a subfolder, a FIFO and links
    leading out (to a 'secret' next to the folder) that must never be followed."""
    root = tempfile.mkdtemp(prefix="ort-core-fuzz-")
    folder = os.path.join(root, "model")
    os.makedirs(os.path.join(folder, "sub"))
    with open(os.path.join(folder, "weights.bin"), "wb") as f:
        f.write(np.arange(64, dtype=np.float32).tobytes())
    with open(os.path.join(root, "secret.bin"), "wb") as f:
        f.write(b"secret" * 64)
    if hasattr(os, "symlink"):
        os.symlink(os.path.join(root, "secret.bin"), os.path.join(folder, "link.bin"))
        os.symlink(root, os.path.join(folder, "up"))
    if hasattr(os, "mkfifo"):
        os.mkfifo(os.path.join(folder, "pipe.bin"))
    return folder


EXTERNAL_LOCATIONS = ["weights.bin", "sub", "link.bin", "up/secret.bin", "pipe.bin", "../secret.bin", "/etc/passwd",
                      "absent.bin", "", ".", "a/../../b", "C:\\x", "\0", "sub/../weights.bin"]


def session_options() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.add_session_config_entry(MAX_TENSOR_BYTES_KEY, str(MAX_TENSOR_BYTES))
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", data_folder())
    return so


def feeds_for(sess: ort.InferenceSession, base: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """``base`` for the inputs it has; arrays made from the declared types for the others."""
    feeds = {}
    for arg in sess.get_inputs():
        if arg.name in base:
            feeds[arg.name] = base[arg.name]
            continue
        t = arg.value_type
        if t.kind != "tensor":
            continue  # sequences, maps, optionals: left missing (an InvalidArgument)
        try:
            dtype = np_dtype(t.elem_type)
        except (KeyError, TypeError, ValueError):
            continue
        shape = [d if isinstance(d, int) and 0 <= d <= 8 else int(rng.integers(1, 4)) for d in (t.shape or [])]
        if dtype.kind == "O":
            feeds[arg.name] = np.full(shape, "ab", dtype=object)
        elif dtype.kind == "b":
            feeds[arg.name] = rng.integers(0, 2, size=shape).astype(bool)
        elif dtype.kind in "iu":
            feeds[arg.name] = rng.integers(0, 3, size=shape).astype(dtype)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _memory_error_in(e: BaseException) -> bool:
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, MemoryError):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _check(exc: BaseException, stage: str, seed: str) -> None:
    """Record an error; raise AssertionError (a finding) unless it is a plain OrtError."""
    own_provider_failed = isinstance(exc, ort.PluginError) and "'CPUExecutionProvider'" in str(exc)
    if isinstance(exc, ort.OrtError) and not _memory_error_in(exc) and not own_provider_failed:
        STATS.outcomes[type(exc).__name__] += 1
        return
    if own_provider_failed:
        what = "the built-in CPU provider failed like a broken plugin"
    elif isinstance(exc, ort.OrtError):
        what = "allocation past the size checks"
    else:
        what = "not an OrtError"
    finding = f"{seed}: {stage} raised {type(exc).__name__} ({what}): {str(exc)[:300]}"
    STATS.findings.append(finding)
    raise AssertionError(finding) from exc


def _locations_outside(model: Any) -> list[str]:
    """External-data locations of ``model`` (a ModelProto) that lead outside its data folder."""
    if not isinstance(model, onnx.ModelProto):
        return []
    from ort_core.ir.external import external_tensors

    try:
        tensors = list(external_tensors(model))
    except Exception:  # noqa: BLE001 - nested too deep: the session refuses the model anyway
        return []
    root = os.path.realpath(data_folder())
    out = []
    for t in tensors:
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        path = os.path.realpath(os.path.join(root, location)) if "\0" not in location else root
        if location and (os.path.commonpath([root, path]) != root or path == root):
            out.append(location)
    return out


def exercise(model: Any, base_feeds: dict[str, Any], seed: str, rng: np.random.Generator,
             feed_override: dict[str, Any] | None = None) -> None:
    """Build a session from ``model`` (bytes or ModelProto) and run it; only OrtErrors may come out."""
    outside = _locations_outside(model)  # before loading: loading turns external data into raw data
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                sess = ort.InferenceSession(model, session_options())
            except BaseException as e:  # noqa: BLE001 - judged by _check
                if isinstance(e, KeyboardInterrupt):
                    raise
                _check(e, "InferenceSession()", seed)
                return
            if outside:
                finding = f"{seed}: a session was built from external data outside the model's folder: {outside}"
                STATS.findings.append(finding)
                raise AssertionError(finding)
            STATS.outcomes["session created"] += 1
            feeds = feed_override if feed_override is not None else feeds_for(sess, base_feeds, rng)
            ro = ort.RunOptions()
            timer = threading.Timer(RUN_SECONDS, lambda: setattr(ro, "terminate", True))
            timer.start()
            try:
                sess.run(None, feeds, ro)
                STATS.outcomes["run ok"] += 1
            except BaseException as e:  # noqa: BLE001 - judged by _check
                if isinstance(e, KeyboardInterrupt):
                    raise
                _check(e, "run()", seed)
            finally:
                timer.cancel()
    finally:
        faulthandler.cancel_dump_traceback_later()


# ------------------------------------------------------------------------------------------- mutations

INTERESTING_INTS = [0, 1, -1, 2, 3, 7, -2, 64, 255, 2 ** 15, 2 ** 31 - 1, -(2 ** 31), 2 ** 32, 2 ** 40, 2 ** 62,
                    2 ** 63 - 1, -(2 ** 63)]
INTERESTING_FLOATS = [0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, -1e30, float("inf"), float("-inf"), float("nan"), 3.4e38]
INTERESTING_STRINGS = [b"", b"constant", b"reflect", b"edge", b"wrap", b"linear", b"nearest", b"cubic", b"SAME_UPPER",
                       b"SAME_LOWER", b"VALID", b"NOTSET", b"DCR", b"CRD", b"LEFT", b"RIGHT", b"ij,jk->ik", b"...",
                       b"\xff\xfe", b"x" * 300, b"half_pixel", b"tf_crop_and_resize", b"none", b"add", b"mul"]
ATTR_NAMES = ["axis", "axes", "pads", "strides", "dilations", "kernel_shape", "perm", "to", "value", "mode", "k",
              "keepdims", "epsilon", "group", "shape", "depth", "num_outputs", "split", "direction", "equation",
              "num_scan_inputs", "scan_input_axes", "body", "then_branch", "output_shape", "blocksize", "alpha"]
OP_TYPES = ["Add", "Relu", "Reshape", "Expand", "Tile", "ConstantOfShape", "Range", "Pad", "Resize", "Gather",
            "Slice", "Concat", "Split", "Squeeze", "Unsqueeze", "Transpose", "Conv", "MaxPool", "MatMul", "Gemm",
            "Loop", "If", "Scan", "Cast", "TopK", "Einsum", "OneHot", "CumSum", "NonZero", "Unique", "ScatterND",
            "GatherND", "Col2Im", "CenterCropPad", "DFT", "STFT", "HannWindow", "RandomNormal", "Multinomial",
            "SequenceConstruct", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
            "StringSplit", "RegexFullMatch", "Identity", "Constant", "Where", "Softmax", "LSTM", "Attention",
            "NoSuchOp", "TreeEnsemble", "Upsample", "MaxUnpool", "RoiAlign", "GridSample", "ReduceSum", "ArgMax",
            "Compress", "DepthToSpace", "EyeLike", "Trilu", "Mod", "BitShift", "QuantizeLinear", "ImageDecoder"]
DOMAINS = ["", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "com.microsoft", "x.y"]
ELEM_TYPES = list(range(0, 26)) + [999, -1]


def all_graphs(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    out, stack = [], [model.graph]
    while stack:
        g = stack.pop()
        out.append(g)
        for n in g.node:
            for a in n.attribute:
                if a.type == AttributeProto.GRAPH:
                    stack.append(a.g)
                stack.extend(a.graphs)
    return out


def _names(g: onnx.GraphProto) -> list[str]:
    names = [v.name for v in g.input] + [t.name for t in g.initializer]
    for n in g.node:
        names.extend(n.output)
    return [n for n in names if n] or ["x"]


def _mutate_dims(draw, st, shape_holder) -> None:
    """Change one dim of a TensorShapeProto or a TensorProto's dims."""
    dims = shape_holder.dim if hasattr(shape_holder, "dim") else shape_holder.dims
    choice = draw(st.integers(0, 3))
    if choice == 0 and len(dims):
        del dims[draw(st.integers(0, len(dims) - 1))]
    elif choice == 1:
        if hasattr(dims, "add"):
            dims.add().dim_value = draw(st.sampled_from(INTERESTING_INTS[:12]))
        else:
            dims.append(draw(st.sampled_from(INTERESTING_INTS)))
    elif len(dims):
        k = draw(st.integers(0, len(dims) - 1))
        value = draw(st.sampled_from(INTERESTING_INTS))
        if hasattr(dims, "add"):
            if choice == 3:
                dims[k].dim_param = "sym"
            else:
                dims[k].dim_value = value
        else:
            dims[k] = value


def _mutate_tensor(draw, st, t: TensorProto) -> None:
    choice = draw(st.integers(0, 5))
    if choice == 0:
        _mutate_dims(draw, st, t)
    elif choice == 1:
        t.data_type = draw(st.sampled_from(ELEM_TYPES[:-1]))
    elif choice == 2 and t.raw_data:
        t.raw_data = t.raw_data[:draw(st.integers(0, len(t.raw_data)))]
    elif choice == 3:
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        t.external_data.add(key="location", value=draw(st.sampled_from(EXTERNAL_LOCATIONS)))
        for key in ("offset", "length"):
            if draw(st.booleans()):
                t.external_data.add(key=key, value=draw(st.sampled_from(["-1", "0", "4", "255", "256", "x",
                                                                         str(2 ** 70)])))
    elif choice == 4:
        t.raw_data = bytes(draw(st.binary(max_size=64)))
    else:
        t.ClearField("raw_data")
        t.float_data.extend(draw(st.lists(st.sampled_from(INTERESTING_FLOATS), max_size=4)))


def _mutate_attribute(draw, st, node: onnx.NodeProto) -> None:
    if not node.attribute or draw(st.integers(0, 4)) == 0:
        a = node.attribute.add(name=draw(st.sampled_from(ATTR_NAMES)))
        a.type = draw(st.sampled_from([AttributeProto.INT, AttributeProto.INTS, AttributeProto.FLOAT,
                                       AttributeProto.STRING, AttributeProto.TENSOR]))
    else:
        a = node.attribute[draw(st.integers(0, len(node.attribute) - 1))]
    kind = draw(st.integers(0, 9))
    if kind == 0:
        node.attribute.remove(a)
        return
    if kind == 1:  # the type code no longer matches the field set
        a.type = draw(st.sampled_from(list(range(0, 15))))
        return
    if a.type == AttributeProto.INT:
        a.i = draw(st.sampled_from(INTERESTING_INTS))
    elif a.type == AttributeProto.FLOAT:
        a.f = draw(st.sampled_from(INTERESTING_FLOATS))
    elif a.type == AttributeProto.INTS:
        del a.ints[:]
        a.ints.extend(draw(st.lists(st.sampled_from(INTERESTING_INTS), max_size=8)))
    elif a.type == AttributeProto.FLOATS:
        del a.floats[:]
        a.floats.extend(draw(st.lists(st.sampled_from(INTERESTING_FLOATS), max_size=8)))
    elif a.type == AttributeProto.STRING:
        a.s = draw(st.sampled_from(INTERESTING_STRINGS))
    elif a.type == AttributeProto.STRINGS:
        del a.strings[:]
        a.strings.extend(draw(st.lists(st.sampled_from(INTERESTING_STRINGS), max_size=4)))
    elif a.type == AttributeProto.TENSOR:
        _mutate_tensor(draw, st, a.t)
    elif a.type == AttributeProto.GRAPH and a.g.node:
        _mutate_node(draw, st, a.g, a.g.node[draw(st.integers(0, len(a.g.node) - 1))])


def _mutate_node(draw, st, g: onnx.GraphProto, node: onnx.NodeProto) -> None:
    kind = draw(st.integers(0, 7))
    names = _names(g)
    if kind <= 2:
        _mutate_attribute(draw, st, node)
    elif kind == 3:
        node.op_type = draw(st.sampled_from(OP_TYPES))
    elif kind == 4:
        node.domain = draw(st.sampled_from(DOMAINS))
    elif kind == 5 and node.input:
        k = draw(st.integers(0, len(node.input) - 1))
        node.input[k] = draw(st.sampled_from(names + ["", "undefined_value"]))
    elif kind == 6:
        if node.input and draw(st.booleans()):
            del node.input[-1]
        else:
            node.input.append(draw(st.sampled_from(names + [""])))
    elif node.output:
        k = draw(st.integers(0, len(node.output) - 1))
        node.output[k] = draw(st.sampled_from(names + ["", "fresh"]))


def mutate_model(draw, st, model: onnx.ModelProto) -> onnx.ModelProto:
    """A structurally mutated copy of ``model``: attributes, types, dims, wiring, opsets (1-4 changes)."""
    m = copy.deepcopy(model)
    for _ in range(draw(st.integers(1, 4))):
        graphs = all_graphs(m)
        g = graphs[draw(st.integers(0, len(graphs) - 1))]
        kind = draw(st.integers(0, 11))
        if kind <= 4 and g.node:
            _mutate_node(draw, st, g, g.node[draw(st.integers(0, len(g.node) - 1))])
        elif kind == 5 and g.input:
            v = g.input[draw(st.integers(0, len(g.input) - 1))]
            if draw(st.booleans()):
                v.type.tensor_type.elem_type = draw(st.sampled_from(ELEM_TYPES[:-1]))
            else:
                _mutate_dims(draw, st, v.type.tensor_type.shape)
        elif kind == 6 and g.initializer:
            _mutate_tensor(draw, st, g.initializer[draw(st.integers(0, len(g.initializer) - 1))])
        elif kind == 7 and m.opset_import:
            op = m.opset_import[draw(st.integers(0, len(m.opset_import) - 1))]
            op.version = draw(st.sampled_from([0, 1, 6, 9, 11, 13, 17, 18, 21, 28, 29, 10 ** 9, -3]))
        elif kind == 8 and g.node:
            k = draw(st.integers(0, len(g.node) - 1))
            if draw(st.booleans()):
                g.node.add().CopyFrom(g.node[k])  # a value produced twice
            else:
                del g.node[k]
        elif kind == 9:
            if g.output and draw(st.booleans()):
                del g.output[draw(st.integers(0, len(g.output) - 1))]
            else:
                g.output.add().CopyFrom(_vi(draw(st.sampled_from(_names(g) + ["nowhere"])), TensorProto.FLOAT, None))
        elif kind == 10:
            m.ir_version = draw(st.sampled_from([0, 1, 2, 3, 4, 7, 8, 10, 11, 12, 99]))
        else:
            g.input.add().CopyFrom(_vi(draw(st.sampled_from(_names(g) + ["extra"])), TensorProto.FLOAT, [2]))
    return m


def mutate_bytes(draw, st, data: bytes) -> bytes:
    """Byte-level mutations of a serialized model: flips, overwrites, cuts, insertions, splices."""
    b = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        if not b:
            break
        kind = draw(st.integers(0, 5))
        pos = draw(st.integers(0, len(b) - 1))
        if kind == 0:
            b[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == 1:
            b[pos] = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, 0x08, 0x12, 0x1A, 0x22, 0x3A, 0x42]))
        elif kind == 2:
            del b[pos:]
        elif kind == 3:
            b[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == 4:
            b[pos:pos + 10] = b"\xff" * 9 + b"\x01"  # the largest varint: a huge length or count
        else:
            end = min(len(b), pos + draw(st.integers(1, 64)))
            b[pos:pos] = b[pos:end]  # a field repeated
    return bytes(b)


def mutate_feeds(draw, st, feeds: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """Wrong dtypes, shapes, extreme values, non-arrays, missing and unknown inputs."""
    out = dict(feeds)
    names = list(out) or ["x"]
    for _ in range(draw(st.integers(1, 3))):
        try:
            _mutate_feed(draw, st, out, names, rng)
        except (TypeError, ValueError, OverflowError):  # a conversion numpy refuses: keep the feed as it was
            pass
    return out


def _mutate_feed(draw, st, out: dict[str, Any], names: list[str], rng: np.random.Generator) -> None:
    """One change to one feed (in place)."""
    name = draw(st.sampled_from(names))
    value = out.get(name)
    arr = np.asarray(value) if isinstance(value, np.ndarray) else None
    kind = draw(st.integers(0, 10))
    if kind == 0 and arr is not None:
        dtype = draw(st.sampled_from([np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, np.float16,
                                      object]))
        with np.errstate(all="ignore"):
            out[name] = arr.astype(dtype)
    elif kind == 1 and arr is not None:
        shape = draw(st.lists(st.integers(0, 5), max_size=5))
        out[name] = rng.standard_normal(shape).astype(arr.dtype if arr.dtype.kind != "O" else np.float32)
    elif kind == 2 and arr is not None and arr.dtype.kind in "fiub":
        extreme = draw(st.sampled_from([np.nan, np.inf, -np.inf, 1e30, -1e30, 2 ** 40, -(2 ** 40), 2 ** 62,
                                        -1, 0]))
        with np.errstate(all="ignore"):
            out[name] = np.full(arr.shape, extreme).astype(arr.dtype)
    elif kind == 3 and arr is not None:
        out[name] = arr.reshape(-1)[:0]
    elif kind == 4 and arr is not None:
        out[name] = arr.reshape(-1)[:1].reshape(()) if arr.size else arr
    elif kind == 5:
        out[name] = draw(st.sampled_from([None, "text", 3, 2.5, [1, 2], [[1], [2, 3]], {"a": 1}, b"\x00",
                                          object()]))
    elif kind == 6:
        out.pop(name, None)
    elif kind == 7:
        out["unknown_input"] = np.zeros(2, np.float32)
    elif kind == 8 and arr is not None:
        out[name] = np.asfortranarray(np.broadcast_to(arr, arr.shape))  # read-only view
    elif kind == 9 and arr is not None and arr.ndim:
        out[name] = arr[::-1]  # a negative stride
    elif arr is not None and arr.dtype.kind in "iu":
        out[name] = rng.integers(-(2 ** 31), 2 ** 31, size=arr.shape).astype(arr.dtype)
