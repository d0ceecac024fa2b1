/*
 * example_ops.c - an example ort-core custom-op library (C ABI version 1).
 *
 * Two ops in the domain "ortc.example":
 *   ScaledSum(X...: T) -> (Y: T, SumSq: double)        T in {float, double}
 *       Y = alpha * (X_0 + X_1 + ...) + beta, every X of one shape; SumSq = sum of Y^2 (a scalar).
 *       attributes: alpha (float, default 1.0), beta (float, default 0.0).
 *   RowSelect(X: float[n, m], scale: float[] optional) -> Y: float[len(rows), m]
 *       Y[k] = X[rows[k]] * scale (or its negation with mode="negate"); negative rows count from the end.
 *       attributes: rows (ints, required), mode (string, "copy" or "negate", default "copy").
 *
 * Build:  cc -shared -fPIC -O2 -I<ort_core.customops.get_include()> example_ops.c -o libexample_ops.so
 */
#include <stdio.h>
#include <string.h>

#include "ort_core_custom_op.h"

static int64_t element_count(const ortc_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->rank; ++d) n *= t->dims[d];
    return n;
}

static int32_t fail(int32_t status, char *message, size_t size, const char *text) {
    snprintf(message, size, "%s", text);
    return status;
}

/* ------------------------------------------------------------------ ScaledSum */

static int32_t scaled_sum_shape(const ortc_tensor *in, int32_t n_in, const ortc_attr_value *attrs, int32_t n_attrs,
                                ortc_tensor *out, int32_t n_out, char *message, size_t size) {
    (void)attrs; (void)n_attrs; (void)n_out;
    for (int32_t k = 1; k < n_in; ++k) {
        if (in[k].rank != in[0].rank || memcmp(in[k].dims, in[0].dims, sizeof(int64_t) * (size_t)in[0].rank) != 0) {
            snprintf(message, size, "ScaledSum: input %d has a different shape than input 0", (int)k);
            return ORTC_INVALID_ARGUMENT;
        }
    }
    out[0].elem_type = in[0].elem_type;
    out[0].rank = in[0].rank;
    memcpy(out[0].dims, in[0].dims, sizeof(int64_t) * (size_t)in[0].rank);
    out[1].elem_type = ORTC_DOUBLE;
    out[1].rank = 0;
    return ORTC_OK;
}

#define SCALED_SUM(T)                                                           \
    do {                                                                        \
        T *y = (T *)out[0].data;                                                \
        for (int64_t i = 0; i < n; ++i) {                                       \
            double s = 0.0;                                                     \
            for (int32_t k = 0; k < n_in; ++k) s += (double)((const T *)in[k].data)[i]; \
            y[i] = (T)(alpha * s + beta);                                       \
            sumsq += (double)y[i] * (double)y[i];                               \
        }                                                                       \
    } while (0)

static int32_t scaled_sum_compute(const ortc_tensor *in, int32_t n_in, const ortc_attr_value *attrs,
                                  int32_t n_attrs, ortc_tensor *out, int32_t n_out, char *message, size_t size) {
    (void)n_attrs; (void)n_out;
    const double alpha = attrs[0].f, beta = attrs[1].f;
    const int64_t n = element_count(&in[0]);
    double sumsq = 0.0;
    if (in[0].elem_type == ORTC_FLOAT) SCALED_SUM(float);
    else if (in[0].elem_type == ORTC_DOUBLE) SCALED_SUM(double);
    else return fail(ORTC_INVALID_ARGUMENT, message, size, "ScaledSum: unsupported element type");
    *(double *)out[1].data = sumsq;
    return ORTC_OK;
}

static const ortc_arg scaled_sum_inputs[] = {{"X", "T", ORTC_ARG_VARIADIC}};
static const ortc_arg scaled_sum_outputs[] = {{"Y", "T", 0}, {"SumSq", "double", 0}};
static const ortc_type_constraint scaled_sum_types[] = {{"T", "float,double"}};
static const ortc_attr_def scaled_sum_attrs[] = {
    {"alpha", ORTC_ATTR_FLOAT, 0, {.f = 1.0}},
    {"beta", ORTC_ATTR_FLOAT, 0, {.f = 0.0}},
};

/* ------------------------------------------------------------------ RowSelect */

static int32_t row_select_shape(const ortc_tensor *in, int32_t n_in, const ortc_attr_value *attrs, int32_t n_attrs,
                                ortc_tensor *out, int32_t n_out, char *message, size_t size) {
    (void)n_attrs; (void)n_out;
    if (in[0].rank != 2) return fail(ORTC_INVALID_ARGUMENT, message, size, "RowSelect: X must be 2-D");
    if (n_in > 1 && in[1].data != NULL && in[1].rank != 0)
        return fail(ORTC_INVALID_ARGUMENT, message, size, "RowSelect: scale must be a scalar");
    const int64_t rows = in[0].dims[0];
    for (int64_t k = 0; k < attrs[0].count; ++k) {
        int64_t r = attrs[0].ints[k];
        if (r < -rows || r >= rows) {
            snprintf(message, size, "RowSelect: row %lld is out of range for X with %lld rows",
                     (long long)r, (long long)rows);
            return ORTC_INVALID_ARGUMENT;
        }
    }
    const char *mode = attrs[1].s;
    if (strcmp(mode, "copy") != 0 && strcmp(mode, "negate") != 0) {
        snprintf(message, size, "RowSelect: mode must be 'copy' or 'negate', got '%s'", mode);
        return ORTC_INVALID_ARGUMENT;
    }
    out[0].elem_type = ORTC_FLOAT;
    out[0].rank = 2;
    out[0].dims[0] = attrs[0].count;
    out[0].dims[1] = in[0].dims[1];
    return ORTC_OK;
}

static int32_t row_select_compute(const ortc_tensor *in, int32_t n_in, const ortc_attr_value *attrs,
                                  int32_t n_attrs, ortc_tensor *out, int32_t n_out, char *message, size_t size) {
    (void)n_attrs; (void)n_out; (void)message; (void)size;
    const int64_t rows = in[0].dims[0], cols = in[0].dims[1];
    float factor = (n_in > 1 && in[1].data != NULL) ? *(const float *)in[1].data : 1.0f;
    if (strcmp(attrs[1].s, "negate") == 0) factor = -factor;
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    for (int64_t k = 0; k < attrs[0].count; ++k) {
        int64_t r = attrs[0].ints[k] < 0 ? attrs[0].ints[k] + rows : attrs[0].ints[k];
        for (int64_t c = 0; c < cols; ++c) y[k * cols + c] = x[r * cols + c] * factor;
    }
    return ORTC_OK;
}

static const ortc_arg row_select_inputs[] = {{"X", "float", 0}, {"scale", "float", ORTC_ARG_OPTIONAL}};
static const ortc_arg row_select_outputs[] = {{"Y", "float", 0}};
static const ortc_attr_def row_select_attrs[] = {
    {"rows", ORTC_ATTR_INTS, 1, {.count = 0}},
    {"mode", ORTC_ATTR_STRING, 0, {.s = "copy", .count = 4}},
};

/* ------------------------------------------------------------------ the table */

static const ortc_op ops[] = {
    {"ortc.example", "ScaledSum", 1, 0, 1, scaled_sum_inputs, 2, scaled_sum_outputs, 1, scaled_sum_types,
     2, scaled_sum_attrs, scaled_sum_shape, scaled_sum_compute},
    {"ortc.example", "RowSelect", 1, 0, 2, row_select_inputs, 1, row_select_outputs, 0, NULL,
     2, row_select_attrs, row_select_shape, row_select_compute},
};

ORTC_EXPORT int32_t ortc_abi_version(void) { return ORTC_ABI_VERSION; }

ORTC_EXPORT const ortc_op *ortc_get_ops(int32_t *count) {
    *count = (int32_t)(sizeof(ops) / sizeof(ops[0]));
    return ops;
}
