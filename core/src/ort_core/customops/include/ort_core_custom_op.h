/*
 * ort_core_custom_op.h - the C ABI of ort-core custom-op libraries, version 1.
 *
 * A custom-op library is a shared library exporting two functions:
 *
 *     int32_t ortc_abi_version(void);              must return ORTC_ABI_VERSION
 *     const ortc_op *ortc_get_ops(int32_t *count); the op table; stores its length in *count
 *
 * ort-core loads it with SessionOptions.register_custom_ops_library(path) through cffi in ABI
 * mode (dlopen: no compiler is involved when loading). Build it against this header, e.g.
 *
 *     cc -shared -fPIC -O2 -I"$(python -c 'import ort_core.customops as c; print(c.get_include())')" \
 *        my_ops.c -o libmy_ops.so
 *
 * Calls, for each run of each node using an op:
 *   1. op->shape(...)    sets every output's elem_type, rank and dims (output data is NULL);
 *   2. the core allocates each output buffer: C order, dense, uninitialised;
 *   3. op->compute(...)  reads the inputs and writes every output's data.
 * Both return ORTC_OK, or another status with a message written to `message`.
 *
 * Memory ownership:
 *   - The op table and every string and array it points to belong to the library and must stay
 *     valid while it is loaded (static const data). The core never writes or frees them, and
 *     never unloads a library.
 *   - Input tensors (structs and data) and attribute values belong to the core and are valid
 *     only during the call: read them, never write them, never keep pointers to them.
 *   - Output data belongs to the core; the library writes it during compute only.
 *   - `message` is a core buffer of `message_size` bytes: write a NUL-terminated, possibly
 *     truncated text (snprintf does both) when returning an error; leave it alone otherwise.
 *
 * Threads: shape and compute are called from several threads at once, without the Python GIL.
 * They must be reentrant and keep no state between calls.
 *
 * Types: tensors carry ONNX TensorProto element type codes (ORTC_FLOAT, ...). Declarations use
 * type names, as in ONNX: an element type ("float", "double", "int64", "bool", ...) or the name
 * of one of the op's type constraints ("T"), whose allowed types are listed comma-separated
 * ("float,double"). String tensors cannot cross this ABI.
 *
 * Versioning: ORTC_ABI_VERSION changes whenever a struct, a signature or a rule here changes;
 * the core refuses a library reporting another version than the one it implements.
 */
#ifndef ORT_CORE_CUSTOM_OP_H
#define ORT_CORE_CUSTOM_OP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define ORTC_EXPORT __declspec(dllexport)
#else
#define ORTC_EXPORT __attribute__((visibility("default")))
#endif

/* ---- ORTC_CDEF_BEGIN: the part ort-core hands to cffi; plain declarations only ---- */

#define ORTC_ABI_VERSION 1
#define ORTC_MAX_RANK 16

/* status codes returned by shape and compute */
#define ORTC_OK 0
#define ORTC_FAIL 1
#define ORTC_INVALID_ARGUMENT 2

/* element type codes (onnx.TensorProto); 0 marks an omitted optional input */
#define ORTC_UNDEFINED 0
#define ORTC_FLOAT 1
#define ORTC_UINT8 2
#define ORTC_INT8 3
#define ORTC_UINT16 4
#define ORTC_INT16 5
#define ORTC_INT32 6
#define ORTC_INT64 7
#define ORTC_BOOL 9
#define ORTC_FLOAT16 10
#define ORTC_DOUBLE 11
#define ORTC_UINT32 12
#define ORTC_UINT64 13
#define ORTC_BFLOAT16 16

/* ortc_arg.flags */
#define ORTC_ARG_OPTIONAL 1 /* the node may omit it: inputs arrive with data NULL, elem_type 0 */
#define ORTC_ARG_VARIADIC 2 /* last input/output only: takes all remaining node values */

/* attribute kinds: ortc_attr_def.type, selecting the field of ortc_attr_value that is set */
#define ORTC_ATTR_INT 1    /* .i */
#define ORTC_ATTR_FLOAT 2  /* .f (ONNX floats are 32-bit; passed widened) */
#define ORTC_ATTR_STRING 3 /* .s, NUL-terminated UTF-8; .count = its length in bytes */
#define ORTC_ATTR_INTS 4   /* .ints[0 .. .count) */
#define ORTC_ATTR_FLOATS 5 /* .floats[0 .. .count) */

typedef struct ortc_tensor {
    void *data;                   /* elements in C order; NULL for an omitted input (and outputs in shape) */
    int32_t elem_type;            /* ORTC_FLOAT, ... */
    int32_t rank;                 /* 0 for a scalar */
    int64_t dims[ORTC_MAX_RANK];  /* dims[0 .. rank) */
} ortc_tensor;

typedef struct ortc_attr_value {
    int64_t i;
    double f;
    const char *s;
    const int64_t *ints;
    const double *floats;
    int64_t count;
} ortc_attr_value;

typedef struct ortc_arg {
    const char *name;  /* for messages */
    const char *type;  /* element type name ("float") or type constraint name ("T") */
    int32_t flags;     /* ORTC_ARG_OPTIONAL | ORTC_ARG_VARIADIC */
} ortc_arg;

typedef struct ortc_type_constraint {
    const char *name;   /* "T" */
    const char *types;  /* "float,double" */
} ortc_type_constraint;

typedef struct ortc_attr_def {
    const char *name;
    int32_t type;                   /* ORTC_ATTR_* */
    int32_t required;               /* 1: the node must set it; 0: default_value is used */
    ortc_attr_value default_value;
} ortc_attr_def;

/* Both receive the node's inputs (n_inputs = values the node passes, omitted ones included),
   the attribute values in the order of the op's attrs table, and the outputs
   (n_outputs = declared outputs, or the node's output count with a variadic last output). */
typedef int32_t (*ortc_shape_fn)(const ortc_tensor *inputs, int32_t n_inputs,
                                 const ortc_attr_value *attrs, int32_t n_attrs,
                                 ortc_tensor *outputs, int32_t n_outputs,
                                 char *message, size_t message_size);
typedef int32_t (*ortc_compute_fn)(const ortc_tensor *inputs, int32_t n_inputs,
                                   const ortc_attr_value *attrs, int32_t n_attrs,
                                   ortc_tensor *outputs, int32_t n_outputs,
                                   char *message, size_t message_size);

typedef struct ortc_op {
    const char *domain;          /* not "" nor "ai.onnx": e.g. "com.example" */
    const char *op_type;
    int32_t since_version;       /* first opset version of domain implemented, >= 1 */
    int32_t until_version;       /* last one, inclusive; 0 = no upper bound */
    int32_t n_inputs;
    const ortc_arg *inputs;
    int32_t n_outputs;
    const ortc_arg *outputs;
    int32_t n_type_constraints;
    const ortc_type_constraint *type_constraints;
    int32_t n_attrs;
    const ortc_attr_def *attrs;
    ortc_shape_fn shape;
    ortc_compute_fn compute;
} ortc_op;

int32_t ortc_abi_version(void);
const ortc_op *ortc_get_ops(int32_t *count);

/* ---- ORTC_CDEF_END ---- */

#ifdef __cplusplus
}
#endif

#endif /* ORT_CORE_CUSTOM_OP_H */
