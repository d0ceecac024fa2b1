"""Exception and warning types of ort-core, mirroring onnxruntime's status codes.

Every error raised to users derives from OrtError and names the problem (file, node,
input, expected vs given). Builtin bases are kept so existing ``except ValueError`` works.
"""

from __future__ import annotations

import os
import sys
import warnings
from contextvars import ContextVar, Token


class OrtError(Exception):
    """Base class of every error ort-core raises on purpose."""


class Fail(OrtError, RuntimeError):
    """Generic failure (ORT's FAIL status)."""


class InvalidArgument(OrtError, ValueError):
    """Bad argument from the caller: unknown input/output name, wrong dtype or shape."""


class NoSuchFile(OrtError, FileNotFoundError):
    """A model (or external-data) file does not exist."""


class InvalidProtobuf(OrtError, ValueError):
    """The model file is not a parseable ONNX protobuf."""


class InvalidGraph(OrtError, ValueError):
    """The model parses but its graph is not valid (cycle, unknown value, bad opset...)."""


class ExternalDataError(InvalidGraph):
    """A tensor's external data is refused: a location outside the model's folder (absolute, '..', a
    link leading out), not a regular file, or an offset/length beyond the file. Names tensor and location."""


class NotImplementedOp(OrtError, NotImplementedError):
    """No requested provider can run a node (op type / opset / attribute unsupported)."""


class KernelError(OrtError, RuntimeError):
    """A kernel failed while building or running; the message names the node."""


class PluginError(OrtError, RuntimeError):
    """A provider plugin failed or returned something malformed; the message names it."""


class RunTerminated(OrtError, RuntimeError):
    """run() was stopped through RunOptions.terminate."""


class OrtWarning(UserWarning):
    """Warnings of ort-core: provider fallbacks, skipped plugins, ignored options."""


# onnxruntime's names for these classes (capi.onnxruntime_pybind11_state re-exports them for drop-in code)
RuntimeException = KernelError  # a failure while running
NotImplemented = NotImplementedOp  # noqa: A001 - mirrors onnxruntime's name
EPFail = PluginError
InvalidProtobufError = InvalidProtobuf


_SEVERITY: ContextVar[int | None] = ContextVar("ort_core_log_severity", default=None)
_default_severity = [2]  # set_default_logger_severity; 0 verbose .. 4 fatal, as onnxruntime
_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def set_default_severity(severity: int) -> None:
    _default_severity[0] = severity


def severity(level: int | None) -> Token:
    """Use ``level`` (a session's log_severity_level) for the warnings of this thread until ``reset``."""
    return _SEVERITY.set(level)


def reset_severity(token: Token) -> None:
    _SEVERITY.reset(token)


def warn(message: str) -> None:
    """An OrtWarning pointing at the first line outside ort-core (the caller's), unless the session's
    ``log_severity_level`` or the default logger severity is error (3) or above."""
    if max(_SEVERITY.get() or 0, _default_severity[0]) >= 3:
        return
    frame, depth = sys._getframe(1), 2  # stacklevel 2 is warn's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame, depth = frame.f_back, depth + 1
    warnings.warn(message, OrtWarning, stacklevel=depth)
