"""Exception and warning types of ort-core, mirroring onnxruntime's status codes.

Every error raised to users derives from OrtError and names the problem (file, node,
input, expected vs given). Builtin bases are kept so existing ``except ValueError`` works.
"""

from __future__ import annotations


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
    """A provider plugin failed or returned something malformed; the message names it.

    ``provider``: the provider whose plugin failed, when one session provider is at fault."""

    provider: str | None = None


class RunTerminated(OrtError, RuntimeError):
    """run() was stopped through RunOptions.terminate."""


class OrtWarning(UserWarning):
    """Warnings of ort-core: provider fallbacks, skipped plugins, ignored options."""


# ORT exposes its errors under these names too; keep them importable for drop-in code.
RuntimeException = Fail
NotImplemented = NotImplementedOp  # noqa: A001 - mirrors onnxruntime's name
InvalidProtobufError = InvalidProtobuf
