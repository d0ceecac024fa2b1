"""Where onnx's type inference runs: a helper process running ir.inference (the default), this process, or
nowhere. The helper is a fresh interpreter started once per process (and again after a crash), never a fork
of this one, which may hold other threads' locks; a crash in onnx's C++ on a hostile model kills the helper,
not the interpreter. Models (weights left out) go in through a pipe, (name, type) records come back. POSIX
only (elsewhere isolated mode infers nothing).
"""

from __future__ import annotations

import atexit
import os
import select
import struct
import subprocess
import sys
import threading
import time

import onnx
from onnx import TensorProto, TypeProto

from .inference import CHILD_SECONDS, DATA_ELEMENTS, _count, _infer_main, infer_in_process

_END = 0xFFFFFFFF  # key length marking the end of one reply


MODES = ("isolated", "in_process", "off")

# The helper's program: ir.inference behind a pipe (stdin: requests; the original stdout: replies). It
# imports only the modules inference needs: stand-ins for the ort_core and ort_core.ir packages skip their
# __init__ files, which import the whole runtime (numpy, providers), a third of the helper's start-up.
_PROGRAM = """import sys, types
root = sys.argv[1]
for name, path in (("ort_core", root), ("ort_core.ir", root + "/ir")):
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
from ort_core.ir.isolated import serve
serve()
"""
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def infer_value_types(proto: onnx.ModelProto, mode: str = "isolated",
                      timeout: float = CHILD_SECONDS) -> dict[str, TypeProto]:
    """Inferred types of the main graph's values that the model does not declare, by name.

    ``mode`` "isolated": onnx runs in the helper process: ir.inference's guards avoid the crashes known
    from fuzzing, the helper contains the ones still unknown (its results up to a crash are kept; a helper
    still busy after ``timeout`` seconds is killed); off POSIX nothing is inferred. "in_process": here,
    for trusted models. "off": nothing is inferred.
    """
    if mode == "off":
        return {}
    if mode == "in_process":
        return infer_in_process(proto)
    return infer_in_helper(proto, timeout)


class _Helper:
    def __init__(self, process: subprocess.Popen) -> None:
        self.process, self.pid = process, process.pid
        self.to_helper, self.from_helper = process.stdin.fileno(), process.stdout.fileno()


_lock = threading.Lock()
_helper: _Helper | None = None


def prestart() -> None:
    """Start the helper now if none runs, without waiting for it: its start-up then overlaps the caller's
    loading of the model (a session calls this first)."""
    if os.name != "posix" or _helper is not None:
        return
    with _lock:
        if _helper is None:
            _start()


def infer_in_helper(proto: onnx.ModelProto, timeout: float) -> dict[str, TypeProto]:
    """Types inferred by the helper for ``proto``'s main graph; what arrived before a crash or a timeout."""
    if os.name != "posix":
        return {}
    request = _light(proto).SerializeToString()
    with _lock:
        helper = _helper or _start()
        if helper is None:
            return {}
        try:
            _write_all(helper.to_helper, struct.pack("<Q", len(request)) + request)
            records, complete = _read_reply(helper.from_helper, time.monotonic() + timeout)
        except OSError:
            records, complete = {}, False
        if not complete:
            _stop(helper)  # crashed or stuck: the next request forks a new helper
        return records


def _light(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` without the values of its large initializers: what inference needs, cheap to send."""
    light = onnx.ModelProto(ir_version=proto.ir_version)
    light.opset_import.extend(proto.opset_import)
    g, src = light.graph, proto.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    for t in src.initializer:  # the values inference would read (Reshape's shape, ...) travel with it
        if _count(t.dims) <= DATA_ELEMENTS and t.data_location != TensorProto.EXTERNAL:
            g.initializer.add().CopyFrom(t)
        else:
            g.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims)
    return light


def _start() -> _Helper | None:
    """Start the helper: a new interpreter (exec, not a bare fork), its stderr silenced, since a failed
    C++ assertion in onnx prints there before it aborts."""
    global _helper
    try:
        process = subprocess.Popen([sys.executable, "-c", _PROGRAM, _ROOT], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True, bufsize=0)
    except OSError:  # no memory or process slots: no inference, which is allowed
        return None
    _helper = _Helper(process)
    return _helper


def _stop(helper: _Helper) -> None:
    global _helper
    for stream in (helper.process.stdin, helper.process.stdout):
        try:
            stream.close()
        except OSError:
            pass
    try:
        helper.process.kill()
    except OSError:
        pass
    try:
        helper.process.wait()
    except ChildProcessError:
        pass
    if _helper is helper:
        _helper = None


def _forget_after_fork() -> None:
    """In any forked child (ours or the application's): this process has no helper of its own yet."""
    global _helper, _lock
    if _helper is not None:
        for stream in (_helper.process.stdin, _helper.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        _helper.process.returncode = 0  # not this process's child: never wait for it here
    _helper = None
    _lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def _stop_at_exit() -> None:
    """The helper ends with the process that started it (no process left behind, no ResourceWarning)."""
    helper = _helper
    if helper is not None:
        _stop(helper)


def serve() -> None:
    """The helper's main loop (run by ``_PROGRAM`` in the helper only): a model in on stdin, its records
    and an end marker out on the original stdout; exits when the pipe closes."""
    status = 0
    try:
        requests = 0
        replies = os.dup(1)
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)  # a stray print must not corrupt the replies
        os.close(quiet)

        def send(name: str, t: TypeProto) -> None:
            key, value = name.encode("utf-8", "surrogatepass"), t.SerializeToString()
            _write_all(replies, struct.pack("<II", len(key), len(value)) + key + value)

        while True:
            header = _read_exact(requests, 8)
            if header is None:
                break
            body = _read_exact(requests, struct.unpack("<Q", header)[0])
            if body is None:
                break
            try:
                _infer_main(onnx.ModelProto.FromString(body), send)
            except Exception:  # noqa: BLE001 - a Python-level failure ends this reply, not the helper
                pass
            _write_all(replies, struct.pack("<II", _END, 0))
    except BaseException:  # noqa: BLE001 - the parent sees the pipe close and forks anew
        status = 1
    finally:
        os._exit(status)


def _read_reply(fd: int, deadline: float) -> tuple[dict[str, TypeProto], bool]:
    """The records of one reply, and whether its end marker arrived (before EOF or the deadline)."""
    out: dict[str, TypeProto] = {}
    buf = b""
    while True:
        while len(buf) >= 8:
            n_key, n_value = struct.unpack_from("<II", buf)
            if n_key == _END:
                return out, True
            if len(buf) < 8 + n_key + n_value:
                break
            key = buf[8:8 + n_key].decode("utf-8", "surrogatepass")
            out[key] = TypeProto.FromString(buf[8 + n_key:8 + n_key + n_value])
            buf = buf[8 + n_key + n_value:]
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return out, False
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return out, False
        buf += chunk


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
