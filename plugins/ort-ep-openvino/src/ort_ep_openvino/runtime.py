"""cffi binding (ABI mode) to OpenVINO's C API, the libopenvino_c shipped in the openvino wheel.

Declares only the functions called, finds the library without importing openvino's Python API,
and wraps each handle with ownership and status checks; what to compile is not decided here.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import sys
import threading
from typing import Any

import cffi
import numpy as np

from ort_core.plugins import LoadOnce, missing_symbols

LIBRARY_ENV = "ORT_EP_OPENVINO_LIBRARY"
"""Environment variable naming libopenvino_c to load instead of the one in the openvino wheel."""

# Written from OpenVINO's documented C API (openvino/c/*.h); ABI mode checks nothing against the
# headers, so every signature must match exactly. Enums are passed as int (their C ABI size).
_CDEF = """
typedef int ov_status_e;
typedef int ov_element_type_e;
typedef struct ov_core ov_core_t;
typedef struct ov_model ov_model_t;
typedef struct ov_compiled_model ov_compiled_model_t;
typedef struct ov_infer_request ov_infer_request_t;
typedef struct ov_tensor ov_tensor_t;
typedef struct ov_output_const_port ov_output_const_port_t;
typedef struct { int64_t rank; int64_t* dims; } ov_shape_t;
typedef struct { char** devices; size_t size; } ov_available_devices_t;
typedef struct { const char* buildNumber; const char* description; } ov_version_t;

ov_status_e ov_get_openvino_version(ov_version_t* version);
void ov_version_free(ov_version_t* version);
const char* ov_get_error_info(ov_status_e status);
const char* ov_get_last_err_msg();
void ov_free(const char* content);

ov_status_e ov_core_create(ov_core_t** core);
void ov_core_free(ov_core_t* core);
ov_status_e ov_core_get_available_devices(const ov_core_t* core, ov_available_devices_t* devices);
void ov_available_devices_free(ov_available_devices_t* devices);
ov_status_e ov_core_get_property(const ov_core_t* core, const char* device_name, const char* property_key,
                                 char** property_value);
ov_status_e ov_core_read_model_from_memory_buffer(const ov_core_t* core, const char* model_str,
                                                  const size_t str_len, const ov_tensor_t* weights,
                                                  ov_model_t** model);
ov_status_e ov_core_compile_model(const ov_core_t* core, const ov_model_t* model, const char* device_name,
                                  const size_t property_args_size, ov_compiled_model_t** compiled_model, ...);
void ov_model_free(ov_model_t* model);

ov_status_e ov_compiled_model_create_infer_request(const ov_compiled_model_t* compiled_model,
                                                   ov_infer_request_t** infer_request);
ov_status_e ov_compiled_model_get_property(const ov_compiled_model_t* compiled_model, const char* property_key,
                                           char** property_value);
void ov_compiled_model_free(ov_compiled_model_t* compiled_model);
ov_status_e ov_compiled_model_inputs_size(const ov_compiled_model_t* compiled_model, size_t* size);
ov_status_e ov_compiled_model_input_by_index(const ov_compiled_model_t* compiled_model, const size_t index,
                                            ov_output_const_port_t** input_port);
ov_status_e ov_compiled_model_outputs_size(const ov_compiled_model_t* compiled_model, size_t* size);
ov_status_e ov_compiled_model_output_by_index(const ov_compiled_model_t* compiled_model, const size_t index,
                                             ov_output_const_port_t** output_port);
ov_status_e ov_port_get_any_name(const ov_output_const_port_t* port, char** tensor_name);
void ov_output_const_port_free(ov_output_const_port_t* port);

ov_status_e ov_infer_request_set_input_tensor_by_index(ov_infer_request_t* infer_request, const size_t idx,
                                                       const ov_tensor_t* tensor);
ov_status_e ov_infer_request_get_output_tensor_by_index(const ov_infer_request_t* infer_request,
                                                        const size_t idx, ov_tensor_t** tensor);
ov_status_e ov_infer_request_infer(ov_infer_request_t* infer_request);
void ov_infer_request_free(ov_infer_request_t* infer_request);

ov_status_e ov_tensor_create_from_host_ptr(const ov_element_type_e type, const ov_shape_t shape, void* host_ptr,
                                           ov_tensor_t** tensor);
ov_status_e ov_tensor_get_shape(const ov_tensor_t* tensor, ov_shape_t* shape);
ov_status_e ov_tensor_get_element_type(const ov_tensor_t* tensor, ov_element_type_e* type);
ov_status_e ov_tensor_get_byte_size(const ov_tensor_t* tensor, size_t* byte_size);
ov_status_e ov_tensor_data(const ov_tensor_t* tensor, void** data);
void ov_tensor_free(ov_tensor_t* tensor);
ov_status_e ov_shape_free(ov_shape_t* shape);
"""
_SYMBOLS = tuple(re.findall(r"\b(ov_\w+)\(", _CDEF))  # every function the cdef declares

# ov_element_type_e (ov_common.h) <-> numpy. Only types numpy (with ml_dtypes for bfloat16) holds
# with the same bytes; the rest never cross the border.
_OV_TYPES = {"bool": 1, "float16": 3, "float32": 4, "float64": 5, "int8": 7, "int16": 8, "int32": 9,
             "int64": 10, "uint8": 16, "uint16": 17, "uint32": 18, "uint64": 19}
_NP_TYPES = {v: np.dtype(k) for k, v in _OV_TYPES.items()}
try:  # bfloat16 comes from ml_dtypes, which onnx depends on
    import ml_dtypes

    _OV_TYPES["bfloat16"] = 2
    _NP_TYPES[2] = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - onnx always brings it
    pass


def ov_element_type(dtype: np.dtype) -> int | None:
    """OpenVINO's element-type code for a numpy dtype, or None when it has no exact counterpart."""
    return _OV_TYPES.get(np.dtype(dtype).name)


class RuntimeUnavailable(RuntimeError):
    """libopenvino_c could not be found or loaded; the message says why and what to do."""


class OpenVINOError(RuntimeError):
    """An OpenVINO C API call failed; the message names the call and carries OpenVINO's text."""


def library_candidates() -> list[str]:
    """libopenvino_c files in the installed openvino package (found without importing it)."""
    spec = importlib.util.find_spec("openvino")
    if spec is None or not spec.submodule_search_locations:
        return []
    found: list[str] = []
    for root in spec.submodule_search_locations:
        libs = os.path.join(root, "libs")
        if sys.platform == "win32":
            patterns = ["openvino_c.dll"]
        elif sys.platform == "darwin":
            patterns = ["libopenvino_c*.dylib"]
        else:
            patterns = ["libopenvino_c.so*"]
        for pattern in patterns:
            found += sorted(glob.glob(os.path.join(libs, pattern)))
    return found


class Runtime:
    """The loaded library: ``ffi`` for types and buffers, ``lib`` for calls, ``version`` of OpenVINO."""

    def __init__(self, ffi: cffi.FFI, lib: Any, library: str) -> None:
        self.ffi, self.lib, self.library = ffi, lib, library
        # ov_get_last_err_msg is one process-wide string: reading and compiling one model at a time, across
        # every core, keeps the message we report the one our call produced (compiles use every CPU anyway)
        self.lock = threading.RLock()
        v = ffi.new("ov_version_t *")
        self.check(lib.ov_get_openvino_version(v), "ov_get_openvino_version")
        self.build = ffi.string(v.buildNumber).decode()
        lib.ov_version_free(v)
        self.version = self.build.split("-")[0]  # '2026.4.1-22982-...' -> '2026.4.1'

    def check(self, status: int, call: str) -> None:
        """Raise OpenVINOError naming ``call`` when ``status`` is not OK, with OpenVINO's message."""
        if status == 0:
            return
        raise OpenVINOError(f"{call} failed: {self.error_text(status)}")

    def error_text(self, status: int) -> str:
        ffi, lib = self.ffi, self.lib
        info = lib.ov_get_error_info(status)
        what = ffi.string(info).decode(errors="replace") if info != ffi.NULL else f"status {status}"
        msg = lib.ov_get_last_err_msg()  # a fresh copy (or NULL), ours to free
        if msg == ffi.NULL:
            return what
        try:
            detail = ffi.string(msg).decode(errors="replace")
        finally:
            lib.ov_free(msg)
        return f"{what}: {_tidy(detail)}"


def _tidy(message: str) -> str:
    """OpenVINO's messages stack 'Exception from file:line:' frames; keep the words that explain."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not (ln.startswith("Exception from ") or ln.startswith("Check '"))]
    return " | ".join(useful or lines)


def load_runtime(library: str | None = None) -> Runtime:
    """dlopen libopenvino_c ($ORT_EP_OPENVINO_LIBRARY, else the openvino wheel's) and check its symbols.

    Raises RuntimeUnavailable with an actionable reason; never any other error.
    """
    library = library or os.environ.get(LIBRARY_ENV)
    if not library:
        candidates = library_candidates()
        if not candidates:
            if importlib.util.find_spec("openvino") is None:
                raise RuntimeUnavailable("the openvino package is not installed: pip install openvino "
                                         f"(or set {LIBRARY_ENV} to the path of libopenvino_c)")
            raise RuntimeUnavailable("the installed openvino package has no libopenvino_c in its libs folder; "
                                     f"reinstall openvino or set {LIBRARY_ENV} to the path of libopenvino_c")
        library = candidates[0]
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    try:
        lib = ffi.dlopen(library)
    except OSError as e:
        raise RuntimeUnavailable(f"cannot load {library} ({e}); reinstall openvino or set {LIBRARY_ENV}") from None
    missing = missing_symbols(lib, _SYMBOLS)
    if missing:
        raise RuntimeUnavailable(f"{library} lacks {', '.join(missing[:5])}: OpenVINO too old or not its C API "
                                 "library; pip install -U openvino")
    try:
        return Runtime(ffi, lib, library)
    except OpenVINOError as e:
        raise RuntimeUnavailable(f"{library}: {e}") from None


runtime: LoadOnce[Runtime] = LoadOnce(load_runtime, RuntimeUnavailable)
"""``runtime()``: the process-wide runtime, loaded once; raises RuntimeUnavailable when it cannot be."""


def unavailable_reason() -> str:
    """Why OpenVINO cannot run here (library missing, no CPU device), or "" when it can."""
    try:
        devices = Core(runtime()).available_devices()  # a core of its own: providers own theirs
    except (RuntimeUnavailable, OpenVINOError) as e:
        return str(e)
    if not devices:
        return "OpenVINO reports no available device"
    return ""


class Core:
    """An ov_core_t: device queries, reading ONNX bytes into a model, compiling it for a device. Each provider
    instance makes its own and frees it with its session; a compiled model keeps the core it came from alive."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        out = rt.ffi.new("ov_core_t **")
        rt.check(rt.lib.ov_core_create(out), "ov_core_create")
        self.ptr = rt.ffi.gc(out[0], rt.lib.ov_core_free)
        self._devices: list[str] | None = None

    def available_devices(self) -> list[str]:
        if self._devices is None:
            ffi, lib = self.rt.ffi, self.rt.lib
            d = ffi.new("ov_available_devices_t *")
            self.rt.check(lib.ov_core_get_available_devices(self.ptr, d), "ov_core_get_available_devices")
            try:
                self._devices = [ffi.string(d.devices[i]).decode() for i in range(d.size)]
            finally:
                lib.ov_available_devices_free(d)
        return list(self._devices)

    def get_property(self, device: str, key: str) -> str:
        ffi, lib = self.rt.ffi, self.rt.lib
        out = ffi.new("char **")
        self.rt.check(lib.ov_core_get_property(self.ptr, device.encode(), key.encode(), out),
                      f"ov_core_get_property({device}, {key})")
        try:
            return ffi.string(out[0]).decode()
        finally:
            lib.ov_free(out[0])

    def read_model(self, onnx_bytes: bytes) -> Any:
        """An ov_model_t* (owned) from a serialized ONNX model; weights must be inside it."""
        ffi, lib = self.rt.ffi, self.rt.lib
        out = ffi.new("ov_model_t **")
        with self.rt.lock:
            self.rt.check(lib.ov_core_read_model_from_memory_buffer(self.ptr, onnx_bytes, len(onnx_bytes),
                                                                    ffi.NULL, out),
                          "ov_core_read_model_from_memory_buffer")
        return ffi.gc(out[0], lib.ov_model_free)

    def compile_model(self, model: Any, device: str, properties: dict[str, str]) -> CompiledModel:
        ffi, lib = self.rt.ffi, self.rt.lib
        out = ffi.new("ov_compiled_model_t **")
        # variadic pairs <char* key, char* value>; the count is of arguments, not pairs, and cffi
        # wants variadic arguments as typed cdata, hence the explicit char* casts
        keep = [ffi.new("char[]", str(s).encode()) for kv in properties.items() for s in kv]
        args = [ffi.cast("char *", b) for b in keep]
        with self.rt.lock:
            self.rt.check(lib.ov_core_compile_model(self.ptr, model, device.encode(), len(args), out, *args),
                          f"ov_core_compile_model({device})")
        return CompiledModel(self, ffi.gc(out[0], lib.ov_compiled_model_free))


class CompiledModel:
    """An ov_compiled_model_t: makes infer requests and answers property queries."""

    def __init__(self, core: Core, ptr: Any) -> None:
        self.core, self.rt, self.ptr = core, core.rt, ptr  # the core outlives the models it compiled

    def create_infer_request(self) -> InferRequest:
        out = self.rt.ffi.new("ov_infer_request_t **")
        self.rt.check(self.rt.lib.ov_compiled_model_create_infer_request(self.ptr, out),
                      "ov_compiled_model_create_infer_request")
        return InferRequest(self.rt, self.rt.ffi.gc(out[0], self.rt.lib.ov_infer_request_free), self)

    def port_names(self) -> tuple[list[str], list[str]]:
        """The tensor names of the compiled model's inputs and outputs, in index order."""
        ffi, lib, check = self.rt.ffi, self.rt.lib, self.rt.check
        result = []
        for size_fn, port_fn, what in ((lib.ov_compiled_model_inputs_size, lib.ov_compiled_model_input_by_index,
                                        "input"),
                                       (lib.ov_compiled_model_outputs_size, lib.ov_compiled_model_output_by_index,
                                        "output")):
            n = ffi.new("size_t *")
            check(size_fn(self.ptr, n), f"ov_compiled_model_{what}s_size")
            names = []
            for i in range(n[0]):
                port = ffi.new("ov_output_const_port_t **")
                check(port_fn(self.ptr, i, port), f"ov_compiled_model_{what}_by_index({i})")
                try:
                    text = ffi.new("char **")
                    check(lib.ov_port_get_any_name(port[0], text), "ov_port_get_any_name")
                    names.append(ffi.string(text[0]).decode())
                    lib.ov_free(text[0])
                finally:
                    lib.ov_output_const_port_free(port[0])
            result.append(names)
        return result[0], result[1]

    def get_property(self, key: str) -> str:
        ffi, lib = self.rt.ffi, self.rt.lib
        out = ffi.new("char **")
        self.rt.check(lib.ov_compiled_model_get_property(self.ptr, key.encode(), out),
                      f"ov_compiled_model_get_property({key})")
        try:
            return ffi.string(out[0]).decode()
        finally:
            lib.ov_free(out[0])


class InferRequest:
    """An ov_infer_request_t: one inference at a time; callers pool them for concurrency."""

    __slots__ = ("rt", "ptr", "compiled")

    def __init__(self, rt: Runtime, ptr: Any, compiled: CompiledModel) -> None:
        self.rt, self.ptr = rt, ptr
        self.compiled = compiled  # the requests need the compiled model alive

    def set_input(self, index: int, array: np.ndarray, element_type: int) -> None:
        """Point input ``index`` at ``array``'s memory (C-contiguous; no copy). The array must stay
        alive and unchanged until ``infer`` returns."""
        ffi, lib = self.rt.ffi, self.rt.lib
        dims = ffi.new("int64_t[]", array.shape or (0,))
        shape = ffi.new("ov_shape_t *", (array.ndim, dims))
        tensor = ffi.new("ov_tensor_t **")
        # a zero-size array may point at numpy's shared empty buffer; OpenVINO never reads it
        self.rt.check(lib.ov_tensor_create_from_host_ptr(element_type, shape[0], ffi.from_buffer(array),
                                                         tensor), "ov_tensor_create_from_host_ptr")
        try:
            self.rt.check(lib.ov_infer_request_set_input_tensor_by_index(self.ptr, index, tensor[0]),
                          f"ov_infer_request_set_input_tensor_by_index({index})")
        finally:
            lib.ov_tensor_free(tensor[0])  # the request keeps its own reference

    def infer(self) -> None:
        self.rt.check(self.rt.lib.ov_infer_request_infer(self.ptr), "ov_infer_request_infer")

    def output(self, index: int) -> np.ndarray:
        """Output ``index`` copied into a new numpy array (the request reuses its buffers)."""
        ffi, lib, check = self.rt.ffi, self.rt.lib, self.rt.check
        tensor = ffi.new("ov_tensor_t **")
        check(lib.ov_infer_request_get_output_tensor_by_index(self.ptr, index, tensor),
              f"ov_infer_request_get_output_tensor_by_index({index})")
        t = tensor[0]
        try:
            et = ffi.new("ov_element_type_e *")
            check(lib.ov_tensor_get_element_type(t, et), "ov_tensor_get_element_type")
            dtype = _NP_TYPES.get(et[0])
            if dtype is None:
                raise OpenVINOError(f"output {index} has OpenVINO element type {et[0]}, which has no numpy "
                                    "counterpart")
            nbytes = ffi.new("size_t *")
            check(lib.ov_tensor_get_byte_size(t, nbytes), "ov_tensor_get_byte_size")
            shape_out = ffi.new("ov_shape_t *")
            if lib.ov_tensor_get_shape(t, shape_out) == 0:
                shape = tuple(shape_out.dims[i] for i in range(shape_out.rank))
                lib.ov_shape_free(shape_out)
            elif nbytes[0] == dtype.itemsize:
                shape = ()  # the C API cannot express a rank-0 shape (ov_shape_create refuses rank 0)
            else:
                check(lib.ov_tensor_get_shape(t, shape_out), "ov_tensor_get_shape")
            out = np.empty(shape, dtype)
            if nbytes[0] != out.nbytes:
                raise OpenVINOError(f"output {index}: {nbytes[0]} bytes for shape {shape} of {dtype}")
            if out.nbytes:
                data = ffi.new("void **")
                check(lib.ov_tensor_data(t, data), "ov_tensor_data")
                ffi.memmove(out, data[0], out.nbytes)
            return out
        finally:
            lib.ov_tensor_free(t)


def compile_bytes(c: Core, onnx_bytes: bytes, device: str, properties: dict[str, str]) -> CompiledModel:
    """Read and compile ONNX bytes on core ``c``. OpenVINO's CPU plugin sometimes fails to generate a fused
    "snippet" kernel (e.g. "not enough registers"); the model then compiles without snippets."""
    model = c.read_model(onnx_bytes)
    try:
        return c.compile_model(model, device, properties)
    except OpenVINOError as e:
        if device != "CPU" or "snippet" not in str(e).lower():
            raise
        return c.compile_model(model, device, {**properties, "SNIPPETS_MODE": "DISABLE"})
