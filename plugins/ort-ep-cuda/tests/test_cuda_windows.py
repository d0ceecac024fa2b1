"""Window kernels without a GPU: im2col and the pooling kernels compile with NVRTC for both dtypes and take the
parameter block ``windows.pack`` lays out; their numpy references match the CPU provider; what capability
makes of convolutions and pooling."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_helpers import F16, F32, cpu_outputs, make_model
from onnx import helper
from ort_ep_cuda import nvrtc, windows
from test_cuda_capability import _answers
from test_cuda_codegen import _param_bytes

PROGRAMS = [windows.WindowProgram(kind, dtype) for kind in windows.KINDS for dtype in ("float32", "float16")]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: f"{p.kind}-{p.dtype}")
def test_every_window_kernel_compiles_and_takes_the_packed_parameters(program):
    cubin = nvrtc.compile_cubin(program.cuda(), program.name, 90)
    g = windows.Geometry(2, 3, 5, 6, 3, 3, 5, 6, 1, 1, 1, 1, 1, 1)
    words = windows.pack(program, 4096, 8192, g)
    assert _param_bytes(cubin, program.name) == words.nbytes == 8 * (2 + len(windows.FIELDS) + 1)
    assert int(words[-1]) == (2 * 3 * 9 * 30 if program.kind == "Im2col" else 2 * 3 * 30)


@pytest.mark.parametrize("elem", [F32, F16])
def test_references_match_the_cpu_provider(elem):
    dtype = np.float16 if elem == F16 else np.float32
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 6)).astype(dtype)
    tol = 3e-3 if elem == F16 else 1e-5
    cases = [("MaxPool", dict(kernel_shape=[3, 2], pads=[1, 0, 1, 1], strides=[2, 1], dilations=[1, 2])),
             ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])),
             ("AveragePoolIncludePad", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1))]
    for kind, attrs in cases:
        op = "AveragePool" if kind.startswith("Average") else kind
        node = helper.make_node(op, ["x"], ["y"], **attrs)
        expected = cpu_outputs(make_model([node], [("x", elem, x.shape)], [("y", elem, None)]), {"x": x})[0]
        kh, kw = attrs["kernel_shape"]
        pt, pl, pb, pr = attrs["pads"]
        sh, sw = attrs.get("strides", [1, 1])
        dh, dw = attrs.get("dilations", [1, 1])
        g = windows.Geometry(6, 1, 7, 6, kh, kw, windows.out_size(7, kh, sh, pt, pb, dh),
                             windows.out_size(6, kw, sw, pl, pr, dw), sh, sw, pt, pl, dh, dw)
        got = windows.reference(windows.WindowProgram(kind, dtype.__name__), x, g)
        np.testing.assert_allclose(got.reshape(expected.shape).astype(np.float32), expected.astype(np.float32),
                                   rtol=tol, atol=tol)
    # im2col + a product: the convolution
    w = rng.standard_normal((4, 3, 3, 2)).astype(dtype)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 0, 0, 1], strides=[1, 2], dilations=[2, 1])
    expected = cpu_outputs(make_model([conv], [("x", elem, x.shape), ("w", elem, w.shape)], [("y", elem, None)]),
                    {"x": x, "w": w})[0]
    g = windows.Geometry(2, 3, 7, 6, 3, 2, windows.out_size(7, 3, 1, 1, 0, 2), windows.out_size(6, 2, 2, 0, 1, 1),
                         1, 2, 1, 0, 2, 1)
    cols = windows.reference(windows.WindowProgram("Im2col", "float32"), x, g)
    got = np.matmul(w.reshape(4, -1).astype(np.float32), cols).reshape(expected.shape)
    np.testing.assert_allclose(got, expected.astype(np.float32), rtol=tol * 3, atol=tol * 3)


def test_capability_takes_2d_convolutions_and_pooling_and_declines_the_rest_with_reasons():
    w = np.ones((4, 2, 3, 3), np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", group=2),
             helper.make_node("Conv", ["x", "wx"], ["cx"], name="conv_dyn"),
             helper.make_node("Conv", ["x", "w"], ["cg"], name="conv_bad_group", group=3),
             helper.make_node("Conv", ["x", "w"], ["cs"], name="conv_same", auto_pad="SAME_UPPER", group=2),
             helper.make_node("MaxPool", ["x"], ["m"], name="maxpool", kernel_shape=[2, 2]),
             helper.make_node("MaxPool", ["x"], ["mi", "idx"], name="maxpool_idx", kernel_shape=[2, 2]),
             helper.make_node("MaxPool", ["x"], ["mc"], name="maxpool_ceil", kernel_shape=[2, 2], ceil_mode=1),
             helper.make_node("AveragePool", ["v"], ["a"], name="pool_1d", kernel_shape=[2]),
             helper.make_node("GlobalAveragePool", ["x"], ["g"], name="gap"),
             helper.make_node("BatchNormalization", ["x", "s", "s", "s", "s"], ["bn"], name="bn"),
             helper.make_node("Concat", ["x", "x"], ["cat"], name="concat", axis=1)]
    s = np.ones(4, np.float32)
    outputs = [(n, F32, None) for n in ("c", "cx", "cg", "cs", "m", "mi", "mc", "a", "g", "bn", "cat")]
    model = make_model(nodes, [("x", F32, (1, 4, 6, 6)), ("wx", F32, (4, 4, 3, 3)), ("v", F32, (1, 4, 6))],
                       outputs + [("idx", 7, None)], [("w", w), ("s", s)])
    answers = _answers(model)
    assert {k for k, v in answers.items() if v is None} == {"conv", "maxpool", "gap", "bn", "concat"}
    assert answers["conv_dyn"] == "the weights are not a constant initializer"
    assert answers["conv_bad_group"] == "weights [4, 2, 3, 3] do not fit group=3 and the input's channels"
    assert answers["conv_same"] == "auto_pad=SAME_UPPER is not supported (explicit pads are)"
    assert answers["maxpool_idx"] == "only MaxPool's first output is computed"
    assert answers["maxpool_ceil"] == "ceil_mode=1 and storage_order=1 are not supported"
    assert answers["pool_1d"] == "only 2-D images (N, C, H, W) are supported"
