"""The loaded QNN backend: dlopen with its stdout kept out of ours, the API-version check, the backend's log,
its backend and device handles, and QNN contexts.

One ``Backend`` per library path, process-wide (the library's own state is process-wide); what to build in a
graph is ``graph``'s and ``lowering``'s business. Every failing call raises ``QnnError`` naming the call, QNN's
message for the code and the ERROR lines the backend logged meanwhile.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import tempfile
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, NamedTuple

import cffi

from . import library
from . import qnn_api as q

log = logging.getLogger("ort_ep_qnn")
backend_log = logging.getLogger("ort_ep_qnn.backend")

ffi = cffi.FFI()
ffi.cdef(q.CDEF)
ffi.cdef(q.SYSTEM_CDEF)
ffi.cdef(q.LIBC_CDEF)
_libc = ffi.dlopen(None)


class QnnUnavailable(RuntimeError):
    """The QNN library cannot be used here; the message says why and what to do."""


class QnnError(RuntimeError):
    """A QNN call failed; the message names the call, QNN's error text and the backend's ERROR lines."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------------------------------------- log
class LogBridge:
    """The backend's log callback: messages are formatted with libc's vsnprintf, numbered and kept in a
    short ring (ERROR lines of a failing call go into its QnnError) and passed to the ``ort_ep_qnn.backend``
    logger at DEBUG: the backend logs ERROR lines on calls that succeed, so none is shown by itself."""

    LEVELS = {q.LOG_ERROR: "ERROR", q.LOG_WARN: "WARN", q.LOG_INFO: "INFO", q.LOG_VERBOSE: "VERBOSE",
              q.LOG_DEBUG: "DEBUG"}

    def __init__(self) -> None:
        self._records: deque[tuple[int, int, str]] = deque(maxlen=400)
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self.callback = ffi.callback("void(const char*, uint32_t, uint64_t, void*)", self._on_message)

    def _on_message(self, fmt: Any, level: int, timestamp: int, args: Any) -> None:
        try:
            buf = ffi.new("char[2048]")
            _libc.vsnprintf(buf, 2048, fmt, args)
            text = ffi.string(buf).decode("utf-8", "replace").strip()
            with self._lock:
                self._records.append((next(self._counter), int(level), text))
            backend_log.debug("[%s] %s", self.LEVELS.get(int(level), level), text)
        except Exception:  # noqa: BLE001 - an exception must never cross back into C
            pass

    def mark(self) -> int:
        """A position in the log; ``errors_since(mark)`` gives the ERROR lines logged after it."""
        with self._lock:
            return self._records[-1][0] if self._records else 0

    def errors_since(self, mark: int) -> list[str]:
        with self._lock:
            return [text for n, level, text in self._records if n > mark and level == q.LOG_ERROR]


LOG = LogBridge()


# -------------------------------------------------------------------------------------------- loading
def _dlopen_quietly(path: str) -> Any:
    """dlopen ``path`` with file descriptor 1 pointed at a temporary file: libQnnHtp's initializers print to
    the process's stdout. What they print goes to the log; anything else printed meanwhile (another thread)
    is written back to stdout."""
    _libc.fflush(ffi.NULL)
    try:
        saved = os.dup(1)
    except OSError:  # no stdout to protect
        return ffi.dlopen(path)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 1)
        try:
            lib = ffi.dlopen(path)
        finally:
            _libc.fflush(ffi.NULL)
            os.dup2(saved, 1)
            os.close(saved)
        capture.seek(0)
        printed = capture.read().decode("utf-8", "replace")
    others = []
    for line in printed.splitlines():
        if "LIBNATIVE" in line or "Qnn" in line or "QNN" in line:
            backend_log.debug("[stdout] %s", line.strip())
        else:
            others.append(line)
    if others:
        os.write(1, ("\n".join(others) + "\n").encode())
    return lib


def _version(v: Any) -> tuple[int, int, int]:
    return int(v.major), int(v.minor), int(v.patch)


def _fmt(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def _supported_text() -> str:
    backends = "; ".join(f"{q.BACKEND_NAMES.get(b, b)} API {', '.join(_fmt(x) for x in vs)}"
                         for b, vs in q.VERIFIED_BACKEND_API.items())
    return f"core API {', '.join(_fmt(v) for v in q.VERIFIED_CORE_API)} with {backends}"


class Target(NamedTuple):
    """What the HTP backend compiles for: Qualcomm's SoC model id and the HTP architecture (0: the backend's
    default for either; on the x86 simulator an HTP v68)."""

    soc_model: int = 0
    htp_arch: int = 0

    def __str__(self) -> str:
        return f"soc_model={self.soc_model}" + (f", htp_arch={self.htp_arch}" if self.htp_arch else "")


class Backend:
    """One loaded QNN backend library: its interface table (``api``), versions, build id, log and backend
    handles, and one device handle per target (SoC model, HTP architecture). Graph building and finalizing go
    through ``lock`` (one at a time: the backend's log ring is shared); executions of different graphs may run
    together."""

    def __init__(self, path: str, found_in: str = "") -> None:
        self.path, self.found_in = path, found_in
        try:
            self.lib = _dlopen_quietly(path)
        except OSError as e:
            raise QnnUnavailable(f"cannot load {path} ({e}); {library.HOW_TO_GET}") from None
        try:
            get_providers = self.lib.QnnInterface_getProviders
        except AttributeError:
            raise QnnUnavailable(f"{path} does not export QnnInterface_getProviders: not a QNN backend library; "
                                 f"{library.HOW_TO_GET}") from None
        providers, count = ffi.new("const QnnInterface_t***"), ffi.new("uint32_t*")
        status = get_providers(providers, count)
        if status != q.SUCCESS or count[0] == 0:
            raise QnnUnavailable(f"{path}: QnnInterface_getProviders returned {q.error_code(status)} with "
                                 f"{count[0]} providers")
        self.interface = providers[0][0]
        self.backend_id = int(self.interface.backendId)
        self.provider_name = ffi.string(self.interface.providerName).decode() if self.interface.providerName else ""
        self.core_api = _version(self.interface.apiVersion.coreApiVersion)
        self.backend_api = _version(self.interface.apiVersion.backendApiVersion)
        self._check_versions()  # before any call through the table: its layout depends on them
        self.api = self.interface.api
        self.lock = threading.RLock()
        self.build_id = self._build_id()
        self._devices: dict[int, Any] = {}
        self.log_handle = self._create_log()
        handle = ffi.new("Qnn_BackendHandle_t*")
        self.check(self.api.backendCreate(self.log_handle, ffi.NULL, handle), "QnnBackend_create", unavailable=True)
        self.handle = handle[0]
        self._closed = False
        self._system: System | None = None
        self._perf: Any = None

    def _check_versions(self) -> None:
        core = self.core_api[:2]
        name = q.BACKEND_NAMES.get(self.backend_id, f"id {self.backend_id}")
        if self.backend_id != q.BACKEND_HTP:
            raise QnnUnavailable(f"{self.path} is QNN's {name} backend ({self.provider_name}); this provider drives "
                                 f"only the HTP backend ({library.htp_file_name()}) so far")
        if core not in q.VERIFIED_CORE_API or self.backend_api[:2] not in q.VERIFIED_BACKEND_API[self.backend_id]:
            raise QnnUnavailable(
                f"{self.path} reports QNN core API {_fmt(self.core_api)} with {name} API {_fmt(self.backend_api)}; "
                f"this provider's declarations of QNN's structs are verified for {_supported_text()} only (the "
                f"layouts change between API versions), so it does not call it: pip install "
                f"'{library.WHEEL}==2.7.*' (QNN SDK 2.51)")

    def _build_id(self) -> str:
        version, text = ffi.new("Qnn_ApiVersion_t*"), ffi.new("const char**")
        self.check(self.api.backendGetApiVersion(version), "QnnBackend_getApiVersion", unavailable=True)
        # the table's offsets are checked once by asking it what the provider list already said
        if (_version(version.coreApiVersion), _version(version.backendApiVersion)) != (self.core_api,
                                                                                        self.backend_api):
            raise QnnUnavailable(f"{self.path}: its interface table does not have the layout declared here")
        self.check(self.api.backendGetBuildId(text), "QnnBackend_getBuildId", unavailable=True)
        return ffi.string(text[0]).decode() if text[0] != ffi.NULL else ""

    def _create_log(self) -> Any:
        handle = ffi.new("Qnn_LogHandle_t*")
        # WARN and ERROR only: the HTP backend logs hundreds of INFO lines per graph
        self.check(self.api.logCreate(LOG.callback, q.LOG_WARN, handle), "QnnLog_create", unavailable=True)
        return handle[0]

    @property
    def sdk_version(self) -> str:
        """The QNN SDK release of the library, e.g. '2.51.0' (from its build id 'v2.51.0.260929181845')."""
        parts = self.build_id.lstrip("v").split(".")
        return ".".join(parts[:3]) if len(parts) >= 3 else self.build_id

    def describe(self) -> str:
        return (f"QNN SDK {self.sdk_version} {q.BACKEND_NAMES.get(self.backend_id, '')} backend "
                f"(core API {_fmt(self.core_api)}, backend API {_fmt(self.backend_api)})")

    # ------------------------------------------------------------------------------------------ calls
    def error_text(self, status: int) -> str:
        code = q.error_code(status)
        message = ffi.new("const char**")
        try:
            if self.api.errorGetMessage(status, message) == q.SUCCESS and message[0] != ffi.NULL:
                return ffi.string(message[0]).decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - the message is a nicety
            pass
        return f"error {code}"

    def check(self, status: int, call: str, mark: int | None = None, unavailable: bool = False) -> None:
        """Raise (QnnError, or QnnUnavailable while loading) when ``status`` is not success."""
        if status == q.SUCCESS:
            return
        errors = LOG.errors_since(mark) if mark is not None else []
        detail = f"; backend: {' | '.join(errors[-6:])}" if errors else ""
        text = f"{call} failed: {self.error_text(status)} (code {q.error_code(status)}){detail}"
        if unavailable:
            raise QnnUnavailable(f"{self.path}: {text}")
        raise QnnError(text, q.error_code(status))

    def device(self, target: Target) -> Any:
        """The device handle for ``target`` (SoC model and HTP architecture; 0: the backend's default), created
        once."""
        with self.lock:
            if target in self._devices:
                return self._devices[target]
            handle = ffi.new("Qnn_DeviceHandle_t*")
            mark = LOG.mark()
            customs = []
            if target.soc_model:
                custom = ffi.new("QnnHtpDevice_CustomConfig_t*")
                custom.option, custom.socModel = q.HTP_DEVICE_CONFIG_SOC, target.soc_model
                customs.append(custom)
            if target.htp_arch:
                custom = ffi.new("QnnHtpDevice_CustomConfig_t*")
                custom.option = q.HTP_DEVICE_CONFIG_ARCH
                custom.arch.deviceId, custom.arch.arch = 0, target.htp_arch
                customs.append(custom)
            configs = [ffi.new("QnnDevice_Config_t*") for _ in customs]
            for config, custom in zip(configs, customs):
                config.option, config.customConfig = q.DEVICE_CONFIG_CUSTOM, custom
            listed = ffi.new(f"const QnnDevice_Config_t*[{len(configs) + 1}]", [*configs, ffi.NULL])
            status = self.api.deviceCreate(self.log_handle, listed if configs else ffi.NULL, handle)
            self.check(status, f"QnnDevice_create({target})", mark)
            self._devices[target] = handle[0]
            return handle[0]

    def perf_infrastructure(self) -> Any:
        """The HTP backend's performance infrastructure (``QnnHtpDevice_PerfInfrastructure_t``: power-config ids and
        power votes), fetched once; raises QnnError when the backend has none."""
        with self.lock:
            if self._perf is None:
                found = ffi.new("void**")
                mark = LOG.mark()
                self.check(self.api.deviceGetInfrastructure(found), "QnnDevice_getInfrastructure", mark)
                infra = ffi.cast("QnnHtpDevice_Infrastructure_t*", found[0])
                if infra == ffi.NULL or infra.infraType != q.HTP_INFRASTRUCTURE_PERF:
                    kind = "none" if infra == ffi.NULL else f"type {infra.infraType}"
                    raise QnnError(f"QnnDevice_getInfrastructure gave {kind}, not the HTP performance infrastructure")
                self._perf = infra.perfInfra
            return self._perf

    def create_context(self, target: Target) -> Context:
        return Context(self, target)

    def context_from_binary(self, target: Target, blob: bytes) -> Context:
        """A context deserialized from ``blob`` (``Context.binary()``, or onnxruntime's QNN context binary):
        its graphs are finalized already and are found with ``Context.retrieve``."""
        return Context(self, target, blob)

    def system(self) -> System:
        """libQnnSystem of the same SDK (the folder of the backend library), loaded once."""
        with self.lock:
            if self._system is None:
                self._system = System(os.path.join(os.path.dirname(self.path), library.system_file_name()))
            return self._system

    def close(self) -> None:
        """Free the devices, the backend and the log (at exit: the backend's threads must not log into a
        finalizing interpreter)."""
        with self.lock:
            if self._closed:
                return
            self._closed = True
            for handle in self._devices.values():
                self.api.deviceFree(handle)
            self._devices.clear()
            self.api.backendFree(self.handle)
            self.api.logFree(self.log_handle)


class Context:
    """A QNN context on one device: the graphs of one provider instance (or of capability probes) live in it;
    freed with ``close``. Given ``blob`` (a serialized context), it is deserialized instead of created empty."""

    def __init__(self, backend: Backend, target: Target, blob: bytes | None = None) -> None:
        self.backend, self.target = backend, target
        device = backend.device(target)
        handle = ffi.new("Qnn_ContextHandle_t*")
        with backend.lock:
            mark = LOG.mark()
            if blob is None:
                backend.check(backend.api.contextCreate(backend.handle, device, ffi.NULL, handle),
                              "QnnContext_create", mark)
            else:
                buf = ffi.from_buffer(blob)
                backend.check(backend.api.contextCreateFromBinary(backend.handle, device, ffi.NULL, buf, len(blob),
                                                                  handle, ffi.NULL),
                              f"QnnContext_createFromBinary({len(blob)} bytes)", mark)
        self.handle = handle[0]
        self.graphs = 0
        self.closed = False

    def retrieve(self, name: str) -> Any:
        """The handle of the finalized graph ``name`` of a deserialized context."""
        b = self.backend
        handle = ffi.new("Qnn_GraphHandle_t*")
        with b.lock:
            mark = LOG.mark()
            b.check(b.api.graphRetrieve(self.handle, name.encode(), handle), f"QnnGraph_retrieve({name})", mark)
        return handle[0]

    def binary(self) -> bytes:
        """The serialized context (every finalized graph in it)."""
        b = self.backend
        size, written = ffi.new("uint64_t*"), ffi.new("uint64_t*")
        with b.lock:
            mark = LOG.mark()
            b.check(b.api.contextGetBinarySize(self.handle, size), "QnnContext_getBinarySize", mark)
            buf = ffi.new("uint8_t[]", size[0])
            b.check(b.api.contextGetBinary(self.handle, buf, size[0], written), "QnnContext_getBinary", mark)
        return bytes(ffi.buffer(buf, written[0]))

    def close(self) -> None:
        b = self.backend
        with b.lock:
            if not self.closed and not b._closed:
                b.api.contextFree(self.handle, ffi.NULL)
            self.closed = True


# ------------------------------------------------------------------------------------------- system
@dataclass(frozen=True)
class TensorInfo:
    """A graph input or output as a serialized context describes it (deep-copied out of QNN's memory)."""

    id: int
    name: str
    kind: int
    data_type: int
    shape: tuple[int, ...]
    encoding: tuple[int, int, float, int]  # (definition, encoding, scale, offset): scale/offset only


@dataclass(frozen=True)
class GraphInfo:
    """A graph of a serialized context: its name, inputs and outputs (in QNN's order)."""

    name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]


class System:
    """libQnnSystem: ``graphs(blob)`` reads the graphs of a serialized context and their input and output
    tensors (``QnnSystemContext_getBinaryInfo``) without loading it."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.lib = ffi.dlopen(path)
            get_providers = self.lib.QnnSystemInterface_getProviders
        except (OSError, AttributeError) as e:
            raise QnnError(f"cannot use QNN's system library {path} ({e}); it reads serialized contexts back "
                           f"({library.HOW_TO_GET})") from None
        providers, count = ffi.new("const QnnSystemInterface_t***"), ffi.new("uint32_t*")
        status = get_providers(providers, count)
        if status != q.SUCCESS or count[0] == 0:
            raise QnnError(f"{path}: QnnSystemInterface_getProviders returned {q.error_code(status)}")
        self.interface = providers[0][0]
        self.version = _version(self.interface.systemApiVersion)
        if self.version[:2] not in q.VERIFIED_SYSTEM_API:
            raise QnnError(f"{path} reports QNN system API {_fmt(self.version)}; this provider's declarations of its "
                           f"structs are verified for system API "
                           f"{', '.join(_fmt(v) for v in q.VERIFIED_SYSTEM_API)} only")
        self.lock = threading.Lock()

    def graphs(self, blob: bytes) -> list[GraphInfo]:
        """The graphs of the serialized context ``blob``; QnnError when it is not one this library reads."""
        api = self.interface
        handle = ffi.new("QnnSystemContext_Handle_t*")
        with self.lock:
            status = api.systemContextCreate(handle)
            if status != q.SUCCESS:
                raise QnnError(f"QnnSystemContext_create failed (code {q.error_code(status)})")
            try:
                buf = ffi.new("uint8_t[]", bytes(blob))  # the library may write into the buffer it reads
                info, size = ffi.new("const void**"), ffi.new("uint64_t*")
                status = api.systemContextGetBinaryInfo(handle[0], buf, len(blob), info, size)
                if status != q.SUCCESS or info[0] == ffi.NULL:
                    raise QnnError(f"QnnSystemContext_getBinaryInfo failed (code {q.error_code(status)}): not a QNN "
                                   "context binary this library reads")
                return _read_binary_info(ffi.cast("QnnSystemContext_BinaryInfoHead_t*", info[0]))
            finally:
                api.systemContextFree(handle[0])


def _read_binary_info(head: Any) -> list[GraphInfo]:
    if int(head.version) not in q.SYSTEM_BINARY_INFO_VERSIONS:
        raise QnnError(f"the context binary's info has version {int(head.version)}; this provider reads version(s) "
                       f"{q.SYSTEM_BINARY_INFO_VERSIONS} only")
    v3 = head.v3
    base = ffi.cast("uint8_t*", v3.graphs)
    out = []
    for k in range(int(v3.numGraphs)):
        entry = ffi.cast("QnnSystemContext_GraphInfoHead_t*", base + k * q.SYSTEM_GRAPH_INFO_STRIDE)
        if int(entry.version) not in q.SYSTEM_GRAPH_INFO_VERSIONS:
            raise QnnError(f"graph {k} of the context binary has info version {int(entry.version)}; this provider "
                           f"reads version(s) {q.SYSTEM_GRAPH_INFO_VERSIONS} only")
        g = entry.info
        out.append(GraphInfo(ffi.string(g.graphName).decode(),
                             tuple(_tensor_info(g.graphInputs[i]) for i in range(int(g.numGraphInputs))),
                             tuple(_tensor_info(g.graphOutputs[i]) for i in range(int(g.numGraphOutputs)))))
    return out


def _tensor_info(t: Any) -> TensorInfo:
    v1 = t.v1  # every tensor version starts with the version-1 fields
    qp = v1.quantizeParams
    encoding = (int(qp.encodingDefinition), int(qp.quantizationEncoding), 0.0, 0)
    if encoding[1] == q.ENCODING_SCALE_OFFSET:
        encoding = (encoding[0], encoding[1], float(qp.scaleOffsetEncoding.scale),
                    int(qp.scaleOffsetEncoding.offset))
    shape = tuple(int(v1.dimensions[i]) for i in range(int(v1.rank)))
    return TensorInfo(int(v1.id), ffi.string(v1.name).decode(), int(v1.type), int(v1.dataType), shape, encoding)


# ----------------------------------------------------------------------------------------- registry
_backends: dict[str, Backend] = {}
_failures: dict[str, str] = {}
_lock = threading.Lock()


def backend(path: str | None = None) -> Backend:
    """The process-wide Backend for ``path`` (default: the discovered HTP library), loaded once; raises
    QnnUnavailable with the reason (remembered: a library that failed to load is not tried again)."""
    found_in = ""
    if not path:
        path, found_in = library.find_backend()
        if path is None:
            raise QnnUnavailable(found_in)
    key = os.path.realpath(path)
    with _lock:
        if key in _backends:
            return _backends[key]
        if key in _failures:
            raise QnnUnavailable(_failures[key])
        if not os.path.isfile(path):
            _failures[key] = f"backend_path {path} does not exist; {library.HOW_TO_GET}"
            raise QnnUnavailable(_failures[key])
        try:
            loaded = Backend(path, found_in)
        except QnnUnavailable as e:
            _failures[key] = str(e)
            raise
        _backends[key] = loaded
        return loaded


def unavailable_reason() -> str:
    """Why the default QNN backend cannot be used here, or "" when it loads and its backend initialises."""
    try:
        backend()
    except QnnUnavailable as e:
        return str(e)
    return ""


@atexit.register
def _close_all() -> None:
    for b in list(_backends.values()):
        try:
            b.close()
        except Exception:  # noqa: BLE001 - nothing to do about it at exit
            pass
