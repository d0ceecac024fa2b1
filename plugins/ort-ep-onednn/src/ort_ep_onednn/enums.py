"""Numeric values of the oneDNN 3.2 C API enums and macros this provider uses (dnnl_types.h,
dnnl_common_types.h).

ABI mode checks nothing against the headers: tests/test_enums.py verifies every value against the
library's own debug functions (dnnl_dt2str, dnnl_alg_kind2str, ...) or by behaviour.
"""

from __future__ import annotations

# dnnl_status_t
SUCCESS, OUT_OF_MEMORY, INVALID_ARGUMENTS, UNIMPLEMENTED = 0, 1, 2, 3

# dnnl_data_type_t
DT_UNDEF, DT_F16, DT_BF16, DT_F32, DT_S32, DT_S8, DT_U8 = 0, 1, 2, 3, 4, 5, 6

# dnnl_format_tag_t: only 'undef' and 'any' are used (plain layouts are given by strides)
TAG_UNDEF, TAG_ANY = 0, 1

# dnnl_format_kind_t
FMT_KIND_ANY, FMT_KIND_BLOCKED = 1, 2

# dnnl_engine_kind_t, dnnl_stream_flags_t
ENGINE_CPU = 1
STREAM_IN_ORDER = 0x1

# dnnl_prop_kind_t
FORWARD_TRAINING, FORWARD_INFERENCE = 64, 96

# dnnl_alg_kind_t
CONVOLUTION_DIRECT = 0x1
ELTWISE_RELU = 0x20
ELTWISE_TANH = 0x21
ELTWISE_ELU = 0x22
ELTWISE_SQUARE = 0x23
ELTWISE_ABS = 0x24
ELTWISE_SQRT = 0x25
ELTWISE_LINEAR = 0x26
ELTWISE_SOFT_RELU = 0x27
ELTWISE_HARDSIGMOID = 0x28
ELTWISE_LOGISTIC = 0x29
ELTWISE_EXP = 0x2A
ELTWISE_GELU_TANH = 0x2B
ELTWISE_SWISH = 0x2C
ELTWISE_LOG = 0x2D
ELTWISE_CLIP = 0x2E
ELTWISE_POW = 0x30
ELTWISE_GELU_ERF = 0x31
ELTWISE_ROUND = 0x32
ELTWISE_MISH = 0x33
ELTWISE_HARDSWISH = 0x34
POOLING_MAX = 0x1FF
POOLING_AVG_INCLUDE_PADDING = 0x2FF
POOLING_AVG_EXCLUDE_PADDING = 0x3FF
BINARY_ADD = 0x1FFF0
BINARY_MUL = 0x1FFF1
BINARY_MAX = 0x1FFF2
BINARY_MIN = 0x1FFF3
BINARY_DIV = 0x1FFF4
BINARY_SUB = 0x1FFF5
BINARY_EQ = 0x1FFFA
REDUCTION_MAX = 0x2FFF2
REDUCTION_MIN = 0x2FFF3
REDUCTION_SUM = 0x2FFF4
REDUCTION_MEAN = 0x2FFF6
SOFTMAX_ACCURATE = 0x30000
SOFTMAX_LOG = 0x30001

# dnnl_normalization_flags_t
USE_GLOBAL_STATS, USE_SCALE, USE_SHIFT, FUSE_NORM_RELU = 0x1, 0x2, 0x4, 0x8

# dnnl_query_t (the ones passed to dnnl_primitive_desc_query_md / dnnl_memory_desc_query)
QUERY_IMPL_INFO_STR = 8
QUERY_STRIDES = 14
QUERY_SRC_MD = 129
QUERY_WEIGHTS_MD = 131
QUERY_DST_MD = 133
QUERY_SCRATCHPAD_MD = 136
QUERY_NDIMS_S32 = 256
QUERY_DIMS = 257
QUERY_DATA_TYPE = 258
QUERY_SUBMEMORY_OFFSET_S64 = 259
QUERY_PADDED_DIMS = 260
QUERY_FORMAT_KIND = 262
QUERY_INNER_NBLKS_S32 = 263

# dnnl_fpmath_mode_t, dnnl_scratchpad_mode_t
FPMATH_STRICT, FPMATH_BF16 = 0, 1
SCRATCHPAD_LIBRARY, SCRATCHPAD_USER = 0, 1

# dnnl_cpu_isa_t: bits of dnnl_get_effective_cpu_isa() meaning bf16 instructions are there
CPU_ISA_AVX512_CORE_BF16 = 0xE7
CPU_ISA_AVX512_CORE_VNNI = 0x67

# DNNL_ARG_* (execution argument numbers)
ARG_SRC = 1
ARG_SRC_1 = 2
ARG_DST = 17
ARG_WEIGHTS = 33
ARG_BIAS = 41
ARG_MEAN = 49
ARG_VARIANCE = 50
ARG_SCALE = 51
ARG_SHIFT = 52
ARG_SCRATCHPAD = 80
ARG_MULTIPLE_SRC = 1024
ARG_ATTR_ZERO_POINTS = 8192
ARG_ATTR_MULTIPLE_POST_OP_BASE = 32768
ARG_FROM, ARG_TO = ARG_SRC, ARG_DST


def arg_post_op(index: int) -> int:
    """DNNL_ARG_ATTR_MULTIPLE_POST_OP(index): the argument base of the ``index``-th post-op."""
    return ARG_ATTR_MULTIPLE_POST_OP_BASE * (index + 1)


# dnnl_dims_t holds at most DNNL_MAX_NDIMS dimensions
MAX_NDIMS = 12
