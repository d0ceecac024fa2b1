"""Every enum value in ort_ep_onednn.enums checked against the loaded oneDNN itself.

Names come from the library's debug functions (dnnl_dt2str, dnnl_alg_kind2str, ...); values without
a debug function (queries, DNNL_ARG_* numbers, normalization flags) are checked by behaviour.
"""

from __future__ import annotations

import numpy as np
import pytest
from ort_ep_onednn import enums as E
from ort_ep_onednn import library as L

if L.unavailable_reason():
    pytest.skip(f"oneDNN unavailable: {L.unavailable_reason()}", allow_module_level=True)

from ort_ep_onednn import primitives as P  # noqa: E402

LIB = L.library()


def name(fn: str, value: int) -> str:
    return LIB.ffi.string(getattr(LIB.lib, fn)(value)).decode()


def test_library_is_onednn_3_2_with_openmp():
    assert LIB.version_info[:2] == (3, 2)
    assert LIB.cpu_runtime == 2  # DNNL_RUNTIME_OMP


@pytest.mark.parametrize("fn,value,expected", [
    ("dnnl_status2str", E.SUCCESS, "success"),
    ("dnnl_status2str", E.OUT_OF_MEMORY, "out_of_memory"),
    ("dnnl_status2str", E.INVALID_ARGUMENTS, "invalid_arguments"),
    ("dnnl_status2str", E.UNIMPLEMENTED, "unimplemented"),
    ("dnnl_dt2str", E.DT_UNDEF, "undef"),
    ("dnnl_dt2str", E.DT_F16, "f16"),
    ("dnnl_dt2str", E.DT_BF16, "bf16"),
    ("dnnl_dt2str", E.DT_F32, "f32"),
    ("dnnl_dt2str", E.DT_S32, "s32"),
    ("dnnl_dt2str", E.DT_S8, "s8"),
    ("dnnl_dt2str", E.DT_U8, "u8"),
    ("dnnl_fmt_tag2str", E.TAG_UNDEF, "undef"),
    ("dnnl_fmt_tag2str", E.TAG_ANY, "any"),
    ("dnnl_fmt_kind2str", E.FMT_KIND_ANY, "any"),
    ("dnnl_fmt_kind2str", E.FMT_KIND_BLOCKED, "blocked"),
    ("dnnl_engine_kind2str", E.ENGINE_CPU, "cpu"),
    ("dnnl_prop_kind2str", E.FORWARD_TRAINING, "forward_training"),
    ("dnnl_prop_kind2str", E.FORWARD_INFERENCE, "forward_inference"),
    ("dnnl_fpmath_mode2str", E.FPMATH_STRICT, "strict"),
    ("dnnl_fpmath_mode2str", E.FPMATH_BF16, "bf16"),
    ("dnnl_scratchpad_mode2str", E.SCRATCHPAD_LIBRARY, "library"),
    ("dnnl_scratchpad_mode2str", E.SCRATCHPAD_USER, "user"),
    ("dnnl_cpu_isa2str", E.CPU_ISA_AVX512_CORE_BF16, "cpu_isa_avx512_core_bf16"),
    ("dnnl_cpu_isa2str", E.CPU_ISA_AVX512_CORE_VNNI, "cpu_isa_avx512_core_vnni"),
])
def test_enum_names_from_debug_functions(fn, value, expected):
    assert name(fn, value) == expected


ALGS = {name_: getattr(E, name_) for name_ in dir(E)
        if name_.split("_")[0] in ("CONVOLUTION", "ELTWISE", "POOLING", "BINARY", "REDUCTION", "SOFTMAX")}


@pytest.mark.parametrize("const", sorted(ALGS))
def test_alg_kinds_from_debug_function(const):
    # dnnl_alg_kind2str spells them as the enum without its 'dnnl_' prefix, lower case
    assert name("dnnl_alg_kind2str", ALGS[const]) == const.lower()


def test_query_values_by_behaviour():
    md = P.plain_md(LIB, (2, 3, 5))
    ffi, c = LIB.ffi, LIB.lib
    n = ffi.new("int *")
    assert c.dnnl_memory_desc_query(md.ptr, E.QUERY_NDIMS_S32, n) == E.SUCCESS and n[0] == 3
    dims = ffi.new("dnnl_dims_t **")
    assert c.dnnl_memory_desc_query(md.ptr, E.QUERY_DIMS, dims) == E.SUCCESS
    assert [dims[0][0][i] for i in range(3)] == [2, 3, 5]
    assert md.data_type() == E.DT_F32
    assert md.format_kind() == E.FMT_KIND_BLOCKED
    assert P.any_md(LIB, (2, 3)).format_kind() == E.FMT_KIND_ANY
    # a convolution descriptor answers its src/weights/dst layouts and its implementation name
    src, w, dst = P.any_md(LIB, (1, 16, 8, 8)), P.any_md(LIB, (16, 16, 3, 3)), P.any_md(LIB, (1, 16, 8, 8))
    pd = P.convolution(LIB, src, w, None, dst, [1, 1], [0, 0], [1, 1], [1, 1], P.Attr(LIB))
    assert pd.md(E.QUERY_SRC_MD, 0, (1, 16, 8, 8)).dims == (1, 16, 8, 8)
    assert pd.md(E.QUERY_WEIGHTS_MD, 0, (16, 16, 3, 3)).size == 16 * 16 * 9 * 4
    assert pd.md(E.QUERY_DST_MD, 0, (1, 16, 8, 8)).format_kind() == E.FMT_KIND_BLOCKED
    assert pd.impl.split(":")[0] in ("brgconv", "jit", "brg", "gemm", "x64") and not pd.is_ref, pd.impl
    assert pd.scratchpad_md() is None or pd.scratchpad_md().size > 0


def _run(pd, pairs):
    """Execute ``pd`` once on numpy arrays: pairs of (DNNL_ARG_*, Md, array)."""
    ffi, c = LIB.ffi, LIB.lib
    keep, args = [], []
    for arg, md, arr in pairs:
        m = ffi.new("dnnl_memory_t *")
        assert c.dnnl_memory_create(m, md.ptr, LIB.engine, ffi.cast("void *", arr.ctypes.data)) == E.SUCCESS
        keep.append(ffi.gc(m[0], c.dnnl_memory_destroy))
        args.append((arg, keep[-1]))
    scratch = pd.scratchpad_md()
    if scratch is not None:
        buf = np.zeros(scratch.size, np.uint8)
        m = ffi.new("dnnl_memory_t *")
        c.dnnl_memory_create(m, scratch.ptr, LIB.engine, ffi.cast("void *", buf.ctypes.data))
        keep += [buf, ffi.gc(m[0], c.dnnl_memory_destroy)]
        args.append((E.ARG_SCRATCHPAD, keep[-1]))
    s = ffi.new("dnnl_stream_t *")
    c.dnnl_stream_create(s, LIB.engine, E.STREAM_IN_ORDER)
    arr = ffi.new("dnnl_exec_arg_t[]", args)
    status = c.dnnl_primitive_execute(pd.primitive(), s[0], len(args), arr)
    c.dnnl_stream_wait(s[0])
    c.dnnl_stream_destroy(s[0])
    return status


def test_arg_numbers_and_post_ops_by_behaviour():
    """SRC/WEIGHTS/BIAS/DST/SRC_1, the post-op argument base and sum/eltwise post-ops: a matmul
    with bias, a relu, a sum onto dst and a binary add computes what numpy does."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    bias, prev = rng.standard_normal((1, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    extra = rng.standard_normal((4, 3)).astype(np.float32)
    post = P.PostOps()
    post.eltwise(E.ELTWISE_RELU)
    post.sum()
    idx = post.binary(E.BINARY_ADD, P.plain_md(LIB, (4, 3)))
    mds = [P.plain_md(LIB, s) for s in ((4, 5), (5, 3), (1, 3), (4, 3))]
    pd = P.matmul(LIB, mds[0], mds[1], mds[2], mds[3], P.Attr(LIB, post))
    out = prev.copy()
    assert _run(pd, [(E.ARG_SRC, mds[0], a), (E.ARG_WEIGHTS, mds[1], b), (E.ARG_BIAS, mds[2], bias),
                     (E.ARG_DST, mds[3], out), (E.arg_post_op(idx) | E.ARG_SRC_1, mds[3], extra)]) == E.SUCCESS
    np.testing.assert_allclose(out, np.maximum(a @ b + bias, 0) + prev + extra, rtol=1e-5, atol=1e-6)


def test_normalization_flags_and_arg_numbers_by_behaviour():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    mean, var = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    scale, shift = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    md, c = P.plain_md(LIB, (2, 3, 4)), P.plain_md(LIB, (3,))
    pd = P.batch_norm(LIB, md, md, 1e-5, E.USE_GLOBAL_STATS | E.USE_SCALE | E.USE_SHIFT, P.Attr(LIB))
    y = np.empty_like(x)
    assert _run(pd, [(E.ARG_SRC, md, x), (E.ARG_DST, md, y), (E.ARG_MEAN, c, mean), (E.ARG_VARIANCE, c, var),
                     (E.ARG_SCALE, c, scale), (E.ARG_SHIFT, c, shift)]) == E.SUCCESS
    ref = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) * scale[:, None] + shift[:, None]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    assert (ref < 0).any()
    pd = P.batch_norm(LIB, md, md, 1e-5, E.USE_GLOBAL_STATS | E.USE_SCALE | E.USE_SHIFT | E.FUSE_NORM_RELU,
                      P.Attr(LIB))
    assert _run(pd, [(E.ARG_SRC, md, x), (E.ARG_DST, md, y), (E.ARG_MEAN, c, mean), (E.ARG_VARIANCE, c, var),
                     (E.ARG_SCALE, c, scale), (E.ARG_SHIFT, c, shift)]) == E.SUCCESS
    np.testing.assert_allclose(y, np.maximum(ref, 0), rtol=1e-5, atol=1e-5)  # FUSE_NORM_RELU: the ReLU applied


def test_concat_multiple_src_numbers_by_behaviour():
    a, b = np.ones((2, 2), np.float32), np.full((2, 3), 2, np.float32)
    ma, mb, md = P.plain_md(LIB, (2, 2)), P.plain_md(LIB, (2, 3)), P.plain_md(LIB, (2, 5))
    pd = P.concat(LIB, md, 1, [ma, mb], P.Attr(LIB))
    y = np.zeros((2, 5), np.float32)
    assert _run(pd, [(E.ARG_MULTIPLE_SRC, ma, a), (E.ARG_MULTIPLE_SRC + 1, mb, b), (E.ARG_DST, md, y)]) == E.SUCCESS
    np.testing.assert_array_equal(y, np.concatenate([a, b], axis=1))
