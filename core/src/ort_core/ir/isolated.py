"""A forked helper process running ir.inference, so that a crash in onnx's C++ on a hostile model kills
the helper, not the interpreter: models (weights left out) go in through a pipe, (name, type) records come
back; forked on first use and again after a crash. POSIX only (no fork: nothing is inferred).
"""

from __future__ import annotations

import os
import select
import signal
import struct
import threading
import time
import warnings

import onnx
from onnx import TensorProto, TypeProto

from .inference import DATA_ELEMENTS, _count

_END = 0xFFFFFFFF  # key length marking the end of one reply


class _Helper:
    def __init__(self, pid: int, to_helper: int, from_helper: int) -> None:
        self.pid, self.to_helper, self.from_helper = pid, to_helper, from_helper


_lock = threading.Lock()
_helper: _Helper | None = None


def infer_in_helper(proto: onnx.ModelProto, timeout: float) -> dict[str, TypeProto]:
    """Types inferred by the helper for ``proto``'s main graph; what arrived before a crash or a timeout."""
    if not hasattr(os, "fork"):
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
    global _helper
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: forking with threads alive
            pid = os.fork()
    except OSError:  # no memory or process slots: no inference, which is allowed
        for fd in (requests_r, requests_w, replies_r, replies_w):
            os.close(fd)
        return None
    if pid == 0:
        os.close(requests_w)
        os.close(replies_r)
        _serve(requests_r, replies_w)  # never returns
    os.close(requests_r)
    os.close(replies_w)
    _helper = _Helper(pid, requests_w, replies_r)
    return _helper


def _stop(helper: _Helper) -> None:
    global _helper
    for fd in (helper.to_helper, helper.from_helper):
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        os.kill(helper.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.waitpid(helper.pid, 0)
    except ChildProcessError:
        pass
    if _helper is helper:
        _helper = None


def _forget_after_fork() -> None:
    """In any forked child (ours or the application's): this process has no helper of its own yet."""
    global _helper, _lock
    if _helper is not None:
        for fd in (_helper.to_helper, _helper.from_helper):
            try:
                os.close(fd)
            except OSError:
                pass
    _helper = None
    _lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _serve(requests: int, replies: int) -> None:
    """The helper's loop: a model in, its records and an end marker out; exits when the pipe closes."""
    from .inference import _infer_main

    status = 0
    try:
        # keep none of the application's files, sockets or pipes open in the helper
        low, high = sorted((requests, replies))
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, _max_fd())
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 2)  # a failed C++ assertion would print on the application's stderr
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


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (AttributeError, ValueError, OSError):
        return 4096


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
