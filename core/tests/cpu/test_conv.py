"""Conv and ConvTranspose kernels against onnx's reference evaluator (and a naive loop where the
reference is wrong: grouped ConvTranspose)."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

from ort_core.errors import KernelError

from .kernel_harness import check, run_ours


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Conv
# ---------------------------------------------------------------------------------------------

GEOMETRIES = [
    dict(),
    dict(pads=[1, 1, 1, 1]),
    dict(pads=[0, 2, 1, 0], strides=[2, 1]),
    dict(strides=[2, 2], dilations=[2, 1], pads=[2, 1, 2, 1]),
    dict(strides=[3, 2], pads=[1, 1, 1, 1]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(auto_pad="SAME_UPPER", dilations=[2, 2]),
    dict(auto_pad="VALID", strides=[2, 1]),
]


@pytest.mark.parametrize("geom", GEOMETRIES, ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_2d(geom, bias):
    rng = np.random.default_rng(0)
    x, w = rand(rng, 2, 4, 9, 10), rand(rng, 6, 4, 3, 3)
    inputs = [x, w] + ([rand(rng, 6)] if bias else [])
    check("Conv", inputs, geom, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("geom", GEOMETRIES, ids=str)
@pytest.mark.parametrize("group,c_out", [(2, 6), (4, 4), (4, 8)], ids=["g2", "depthwise", "dw_mult2"])
def test_conv_grouped(geom, group, c_out):
    rng = np.random.default_rng(1)
    x, w, b = rand(rng, 2, 4, 8, 9), rand(rng, c_out, 4 // group, 3, 3), rand(rng, c_out)
    check("Conv", [x, w, b], dict(geom, group=group), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("geom", [dict(pads=[1, 1, 1, 1]), dict(), dict(dilations=[2, 1], pads=[2, 1, 2, 1]),
                                  dict(auto_pad="SAME_UPPER")], ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_few_outputs_many_inputs(geom, bias, monkeypatch):
    """Batch 1, stride 1, output channels <= input channels / 4: the tap-stacked GEMM path."""
    from ort_core.providers.cpu.ops import conv

    calls = []
    stacked = conv._conv_stacked
    monkeypatch.setattr(conv, "_conv_stacked", lambda *a: calls.append(1) or stacked(*a))
    rng = np.random.default_rng(3)
    x, w = rand(rng, 1, 32, 11, 30), rand(rng, 8, 32, 3, 3)
    check("Conv", [x, w] + ([rand(rng, 8)] if bias else []), geom, rtol=1e-4, atol=1e-5)
    assert calls


def test_conv_depthwise_large_channels():
    rng = np.random.default_rng(2)
    x, w, b = rand(rng, 1, 32, 14, 14), rand(rng, 32, 1, 3, 3), rand(rng, 32)
    for geom in (dict(pads=[1, 1, 1, 1]), dict(pads=[1, 1, 1, 1], strides=[2, 2]), dict(strides=[2, 2])):
        check("Conv", [x, w, b], dict(geom, group=32), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("geom", [dict(), dict(strides=[2]), dict(pads=[2, 1], dilations=[2]),
                                  dict(auto_pad="SAME_UPPER", strides=[3]), dict(auto_pad="SAME_LOWER")],
                         ids=str)
@pytest.mark.parametrize("group", [1, 2])
def test_conv_1d(geom, group):
    rng = np.random.default_rng(3)
    x, w, b = rand(rng, 2, 4, 13), rand(rng, 6, 4 // group, 3), rand(rng, 6)
    check("Conv", [x, w, b], dict(geom, group=group), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("geom", [dict(), dict(pads=[1, 0, 1, 1, 1, 0], strides=[2, 1, 2]),
                                  dict(dilations=[1, 2, 1], auto_pad="SAME_UPPER")], ids=str)
@pytest.mark.parametrize("group", [1, 2, 4])
def test_conv_3d(geom, group):
    rng = np.random.default_rng(4)
    x, w, b = rand(rng, 1, 4, 5, 6, 7), rand(rng, 4, 4 // group, 3, 2, 2), rand(rng, 4)
    check("Conv", [x, w, b], dict(geom, group=group), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("geom", [dict(), dict(strides=[2, 2]), dict(pads=[1, 0, 0, 1]),
                                  dict(auto_pad="SAME_UPPER", strides=[2, 2])], ids=str)
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("group", [1, 2])
def test_conv_pointwise(geom, batch, group):
    rng = np.random.default_rng(5)
    x, w, b = rand(rng, batch, 8, 5, 7), rand(rng, 6, 8 // group, 1, 1), rand(rng, 6)
    check("Conv", [x, w, b], dict(geom, group=group, kernel_shape=[1, 1]), rtol=1e-4, atol=1e-5)


def test_conv_small_output_uses_exact_im2col():
    # 3x3 output from a 5x5 input: the wide layout would waste columns; exact im2col path
    rng = np.random.default_rng(6)
    x, w, b = rand(rng, 2, 8, 5, 5), rand(rng, 16, 8, 3, 3), rand(rng, 16)
    check("Conv", [x, w, b], {}, rtol=1e-4, atol=1e-5)
    check("Conv", [x, w[:, :4], b], dict(group=2, pads=[1, 1, 1, 1], strides=[2, 2]), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch,group", [(1, 1), (2, 1), (2, 2)])
def test_conv_banded_im2col(monkeypatch, batch, group):
    # a tiny column budget forces the row-band loop that large images take
    import ort_core.providers.cpu.ops.conv as conv_module

    monkeypatch.setattr(conv_module, "_COLS_BUDGET", 2048)
    rng = np.random.default_rng(13)
    x, w, b = rand(rng, batch, 4, 11, 9), rand(rng, 6, 4 // group, 3, 3), rand(rng, 6)
    check("Conv", [x, w, b], dict(pads=[1, 1, 1, 1], group=group), rtol=1e-4, atol=1e-5)
    check("Conv", [x, w, b], dict(strides=[2, 2], group=group), rtol=1e-4, atol=1e-5)


def test_conv_kernel_7x7_stride2():
    rng = np.random.default_rng(7)
    x, w, b = rand(rng, 1, 3, 32, 32), rand(rng, 8, 3, 7, 7), rand(rng, 8)
    check("Conv", [x, w, b], dict(strides=[2, 2], pads=[3, 3, 3, 3], kernel_shape=[7, 7]),
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", [1, 11, 22])
def test_conv_opsets(opset):
    rng = np.random.default_rng(8)
    x, w, b = rand(rng, 1, 2, 6, 6), rand(rng, 3, 2, 3, 3), rand(rng, 3)
    check("Conv", [x, w, b], dict(pads=[1, 1, 1, 1]), opset=opset, rtol=1e-4, atol=1e-5)


def test_conv_float64_and_float16():
    rng = np.random.default_rng(9)
    x, w, b = rand(rng, 1, 3, 7, 7), rand(rng, 4, 3, 3, 3), rand(rng, 4)
    check("Conv", [x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)],
          dict(pads=[1, 1, 1, 1]), rtol=1e-10, atol=1e-10)
    half = [a.astype(np.float16) for a in (x, w, b)]
    (y16,) = run_ours("Conv", half, dict(pads=[1, 1, 1, 1]))
    (y32,) = run_ours("Conv", [a.astype(np.float32) for a in half], dict(pads=[1, 1, 1, 1]))
    assert y16.dtype == np.float16
    np.testing.assert_allclose(y16.astype(np.float32), y32, rtol=2e-3, atol=2e-2)


def test_conv_shape_changes_and_inputs_untouched():
    rng = np.random.default_rng(10)
    from ort_core.ir.graph import Node
    from ort_core.providers.cpu.registry import lookup

    node = Node("Conv", ["x", "w", "b"], ["y"], dict(pads=[1, 1, 1, 1]), name="c", id=0)
    kernel = lookup("", "Conv", 21).factory(node, 21)
    w, b = rand(rng, 4, 3, 3, 3), rand(rng, 4)
    for shape in [(1, 3, 8, 8), (2, 3, 5, 9), (1, 3, 8, 8)]:
        x = rand(rng, *shape)
        x0, w0, b0 = x.copy(), w.copy(), b.copy()
        (y,) = kernel(x, w, b)
        (ref,) = run_ours("Conv", [x, w, b], dict(pads=[1, 1, 1, 1]))
        np.testing.assert_array_equal(y, ref)
        assert y.shape == (shape[0], 4, shape[2], shape[3])
        np.testing.assert_array_equal(x, x0)
        np.testing.assert_array_equal(w, w0)
        np.testing.assert_array_equal(b, b0)


@pytest.mark.parametrize("attrs,c_out,cg", [(dict(pads=[1, 1, 1, 1]), 4, 6), (dict(strides=[2, 2]), 4, 6),
                                          ({}, 4, 6), (dict(group=6, pads=[1, 1, 1, 1]), 6, 1)], ids=str)
def test_conv_non_contiguous_input(attrs, c_out, cg):
    rng = np.random.default_rng(14)
    x = np.ascontiguousarray(rand(rng, 1, 6, 8, 10).transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    assert not x.flags.c_contiguous
    k = 1 if attrs == {} else 3
    w = rand(rng, c_out, cg, k, k)
    check("Conv", [x, w], attrs, rtol=1e-4, atol=1e-5)


def test_conv_thread_safe():
    from ort_core.ir.graph import Node
    from ort_core.providers.cpu.registry import lookup

    rng = np.random.default_rng(11)
    node = Node("Conv", ["x", "w"], ["y"], dict(pads=[1, 1, 1, 1], group=2), name="c", id=0)
    kernel = lookup("", "Conv", 21).factory(node, 21)
    w = rand(rng, 8, 2, 3, 3)
    xs = [rand(rng, 1, 4, 6 + i % 3, 7) for i in range(12)]
    expected = [kernel(x, w)[0] for x in xs]
    errors = []

    def worker(i):
        for _ in range(20):
            (y,) = kernel(xs[i], w)
            if not np.array_equal(y, expected[i]):
                errors.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_conv_errors():
    rng = np.random.default_rng(12)
    x = rand(rng, 1, 4, 5, 5)
    with pytest.raises(KernelError, match="auto_pad"):
        run_ours("Conv", [x, rand(rng, 2, 4, 3, 3)], dict(auto_pad="BOGUS"))
    with pytest.raises(KernelError, match="group"):
        run_ours("Conv", [x, rand(rng, 2, 3, 3, 3)], dict(group=1))
    with pytest.raises(KernelError, match="kernel_shape"):
        run_ours("Conv", [x, rand(rng, 2, 4, 3, 3)], dict(kernel_shape=[2, 2]))
    with pytest.raises(KernelError, match="pads"):
        run_ours("Conv", [x, rand(rng, 2, 4, 3, 3)], dict(pads=[1, 1]))
    with pytest.raises(KernelError, match="does not fit"):
        run_ours("Conv", [x, rand(rng, 2, 4, 7, 7)], {})
    with pytest.raises(KernelError, match="test_Conv"):
        run_ours("Conv", [x, rand(rng, 2, 4, 3, 3)], dict(group=0))


# ---------------------------------------------------------------------------------------------
# ConvTranspose
# ---------------------------------------------------------------------------------------------

def naive_conv_transpose(x, w, b, strides, pads, dilations, group, output_padding):
    """Direct scatter definition of ConvTranspose (2-D), in float64."""
    N, C, H, W = x.shape
    _, mg, kh, kw = w.shape
    cg, M = C // group, mg * group
    (s0, s1), (d0, d1), (op0, op1) = strides, dilations, output_padding
    full = np.zeros((N, M, s0 * (H - 1) + d0 * (kh - 1) + 1 + op0, s1 * (W - 1) + d1 * (kw - 1) + 1 + op1))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    for g, h, v, i, j in itertools.product(range(group), range(H), range(W), range(kh), range(kw)):
        full[:, g * mg:(g + 1) * mg, h * s0 + i * d0, v * s1 + j * d1] += (
            x64[:, g * cg:(g + 1) * cg, h, v] @ w64[g * cg:(g + 1) * cg, :, i, j])
    y = full[:, :, pads[0]:full.shape[2] - pads[2], pads[1]:full.shape[3] - pads[3]]
    if b is not None:
        y = y + b.reshape(-1, 1, 1)
    return y.astype(x.dtype)


CT_GEOMETRIES = [
    dict(),
    dict(strides=[2, 2]),
    dict(strides=[2, 3], pads=[1, 0, 1, 2]),
    dict(strides=[2, 2], output_padding=[1, 1]),
    dict(strides=[3, 2], output_padding=[2, 1], pads=[1, 1, 0, 0]),
    dict(strides=[2, 2], output_shape=[10, 12]),
    dict(strides=[2, 2], output_shape=[9, 11]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 2], auto_pad="SAME_LOWER"),
    dict(dilations=[2, 2], strides=[3, 1]),
    dict(auto_pad="VALID", strides=[2, 2]),
]


@pytest.mark.parametrize("geom", CT_GEOMETRIES, ids=str)
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_2d(geom, bias):
    rng = np.random.default_rng(20)
    x, w = rand(rng, 2, 3, 4, 5), rand(rng, 3, 2, 3, 3)
    inputs = [x, w] + ([rand(rng, 2)] if bias else [])
    check("ConvTranspose", inputs, geom, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("geom", [dict(strides=[2, 2]), dict(strides=[2, 1], pads=[1, 0, 0, 1]),
                                  dict(strides=[2, 2], output_padding=[1, 0], dilations=[1, 2])], ids=str)
@pytest.mark.parametrize("group,c_in,mg", [(2, 4, 3), (4, 4, 1), (3, 6, 2)])
def test_conv_transpose_grouped(geom, group, c_in, mg):
    rng = np.random.default_rng(21)
    x, w, b = rand(rng, 2, c_in, 4, 5), rand(rng, c_in, mg, 3, 3), rand(rng, mg * group)
    attrs = dict(geom, group=group)
    (y,) = run_ours("ConvTranspose", [x, w, b], attrs)
    expected = naive_conv_transpose(x, w, b, geom.get("strides", [1, 1]), geom.get("pads", [0] * 4),
                                    geom.get("dilations", [1, 1]), group, geom.get("output_padding", [0, 0]))
    assert y.dtype == np.float32 and y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_conv_transpose_output_shape_beyond_full_scatter():
    # output_shape larger than stride*(in-1)+kernel: no padding, zeros at the tail (as onnxruntime)
    rng = np.random.default_rng(27)
    x, w, b = rand(rng, 2, 3, 4, 5), rand(rng, 3, 2, 3, 3), rand(rng, 2)
    (y,) = run_ours("ConvTranspose", [x, w, b], dict(strides=[2, 2], output_shape=[11, 14]))
    full = naive_conv_transpose(x, w, None, [2, 2], [0] * 4, [1, 1], 1, [0, 0])  # (2, 2, 9, 11)
    expected = np.zeros((2, 2, 11, 14), np.float32)
    expected[:, :, :9, :11] = full
    expected += b.reshape(-1, 1, 1)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_conv_transpose_depthwise_matches_reference():
    # the reference evaluator's grouped path is right for one channel per group, no bias
    rng = np.random.default_rng(22)
    x, w = rand(rng, 1, 3, 4, 4), rand(rng, 3, 1, 3, 3)
    check("ConvTranspose", [x, w], dict(group=3, strides=[2, 2]), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("geom", [dict(), dict(strides=[2], pads=[1, 1]),
                                  dict(strides=[3], output_padding=[2]),
                                  dict(strides=[2], output_shape=[14]), dict(dilations=[2])], ids=str)
def test_conv_transpose_1d(geom):
    rng = np.random.default_rng(23)
    x, w, b = rand(rng, 2, 3, 6), rand(rng, 3, 2, 3), rand(rng, 2)
    check("ConvTranspose", [x, w, b], geom, rtol=1e-4, atol=1e-5)


def test_conv_transpose_3d():
    rng = np.random.default_rng(24)
    x, w, b = rand(rng, 1, 2, 3, 4, 3), rand(rng, 2, 3, 2, 3, 2), rand(rng, 3)
    check("ConvTranspose", [x, w, b], dict(strides=[2, 1, 2], pads=[1, 0, 0, 0, 1, 1]), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [1, 11, 22])
def test_conv_transpose_opsets(opset):
    rng = np.random.default_rng(25)
    x, w, b = rand(rng, 1, 2, 3, 3), rand(rng, 2, 2, 3, 3), rand(rng, 2)
    check("ConvTranspose", [x, w, b], dict(strides=[2, 2], pads=[1, 1, 1, 1]), opset=opset,
          rtol=1e-4, atol=1e-5)


def test_conv_transpose_errors():
    rng = np.random.default_rng(26)
    x = rand(rng, 1, 4, 3, 3)
    with pytest.raises(KernelError, match="input channels"):
        run_ours("ConvTranspose", [x, rand(rng, 3, 2, 3, 3)], {})
    with pytest.raises(KernelError, match="output_padding"):
        run_ours("ConvTranspose", [x, rand(rng, 4, 2, 3, 3)], dict(output_padding=[1]))
    with pytest.raises(KernelError, match="auto_pad"):
        run_ours("ConvTranspose", [x, rand(rng, 4, 2, 3, 3)], dict(auto_pad="same"))
    with pytest.raises(KernelError, match="not positive"):
        run_ours("ConvTranspose", [x, rand(rng, 4, 2, 3, 3)], dict(pads=[3, 3, 3, 3]))


@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 129, 3), (128, 129, 3), dict(pads=[1, 1])),
    ((1, 64, 2), (64, 64, 3), dict(pads=[1, 1], strides=[2])),
    ((1, 1, 576), (18, 1, 64), dict(strides=[32])),  # many taps and phases: the loop-heavy rule
    ((2, 4, 5, 6), (6, 2, 3, 2), dict(group=2, dilations=[1, 2], pads=[1, 0, 2, 1])),
    ((1, 6, 4, 4), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1], strides=[2, 1])),
    ((1, 2, 3, 4, 5), (3, 2, 2, 2, 2), dict(pads=[1, 0, 1, 0, 1, 0])),
    ((1, 3, 7, 7), (4, 3, 3, 3), dict(auto_pad="SAME_LOWER", strides=[2, 2])),
], ids=str)
def test_small_convolutions_take_one_gather(xs, ws, attrs, monkeypatch):
    """Tiny column matrices: one padded gather and one GEMM per group, planned once per input shape."""
    from ort_core.providers.cpu.ops import conv

    calls = []
    gather = conv.conv_gather
    monkeypatch.setattr(conv, "conv_gather", lambda *a: calls.append(1) or gather(*a))
    rng = np.random.default_rng(5)
    check("Conv", [rand(rng, *xs), rand(rng, *ws), rand(rng, ws[0])], attrs, rtol=1e-4, atol=1e-5)
    assert calls
