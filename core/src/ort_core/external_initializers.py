"""Initializer data supplied by the caller instead of read from external-data files, and external files for
the optimized model's initializers (onnxruntime's ``add_external_initializers``,
``add_external_initializers_from_files_in_memory`` and ``session.optimized_model_external_initializers_*``).

Checks what the caller gives when it is given; the loader (``ir.load``) puts the data in place. Files on disk
are still read by ``ir.external``, never here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from .errors import Fail, InvalidArgument

FILE_NAME_KEY = "session.optimized_model_external_initializers_file_name"
"""Session config entry (onnxruntime's name): with ``optimized_model_filepath``, the file (beside the optimized
model) its initializers of at least ``MIN_SIZE_KEY`` bytes are written to."""
MIN_SIZE_KEY = "session.optimized_model_external_initializers_min_size_in_bytes"
DEFAULT_MIN_SIZE = 1024  # onnxruntime's default


@dataclass
class Supplied:
    """What a session's options supply: initializer name -> host array, external file name -> its bytes."""

    values: dict[str, np.ndarray] = field(default_factory=dict)
    files: dict[str, memoryview] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.values or self.files)


def checked_values(names: Any, ortvalues: Any, already: dict[str, Any], initializers: dict[str, Any]) -> dict:
    """name -> OrtValue for ``add_external_initializers(names, ortvalues)``; lists of equal length, tensors only,
    no name twice (nor one given to add_initializer too)."""
    from .ortvalue import OrtValue  # the options stand below the value types

    names, ortvalues = list(names), list(ortvalues)
    if len(names) != len(ortvalues):
        raise InvalidArgument(f"add_external_initializers: expecting names and ort_values lists to have equal "
                              f"length, got {len(names)} names and {len(ortvalues)} values")
    added: dict[str, Any] = {}
    for name, value in zip(names, ortvalues):
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"add_external_initializers: names must be non-empty strings, got {name!r}")
        if not isinstance(value, OrtValue) or not value.is_tensor():
            raise InvalidArgument(f"add_external_initializers('{name}'): the value must be a tensor OrtValue "
                                  f"(ort_core.OrtValue.ortvalue_from_numpy(array)), got {type(value).__name__}")
        if name in already or name in added:
            raise InvalidArgument(f"An OrtValue for this name has already been added: {name}")
        if name in initializers:
            raise InvalidArgument(f"add_external_initializers: '{name}' was given to add_initializer already")
        added[name] = value
    return added


def checked_files(names: Any, buffers: Any, lengths: Any, already: dict[str, memoryview]) -> dict[str, memoryview]:
    """file name -> the first ``length`` bytes of its buffer, for ``add_external_initializers_from_files_in_memory``
    (the buffers are kept, not copied, until a session reads them)."""
    names, buffers, lengths = list(names), list(buffers), list(lengths)
    if not len(names) == len(buffers) == len(lengths):
        raise InvalidArgument(f"add_external_initializers_from_files_in_memory: expecting 'names', 'buffers' and "
                              f"'lengths' to have equal length, got {len(names)}, {len(buffers)} and {len(lengths)}")
    added: dict[str, memoryview] = {}
    for name, buffer, length in zip(names, buffers, lengths):
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"add_external_initializers_from_files_in_memory: file names must be non-empty "
                                  f"strings, got {name!r}")
        try:
            view = memoryview(buffer).cast("B")
        except TypeError:
            raise InvalidArgument(f"add_external_initializers_from_files_in_memory('{name}'): the buffer must "
                                  f"support the buffer protocol (bytes, bytearray, numpy uint8 array), got "
                                  f"{type(buffer).__name__}") from None
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or not 0 <= length <= len(view):
            raise InvalidArgument(f"add_external_initializers_from_files_in_memory('{name}'): length {length!r} "
                                  f"must be an int from 0 to the buffer's {len(view)} bytes")
        key = _file_key(name)
        if key in already or key in added:
            raise InvalidArgument(f"add_external_initializers_from_files_in_memory: file '{name}' was given twice")
        added[key] = view[:int(length)]
    return added


def supplied(options: Any) -> Supplied:
    """The host arrays and file buffers a session made with ``options`` uses (arrays copied now)."""
    values = {}
    for name, ortvalue in options._external_values.items():
        value = np.array(ortvalue.numpy(), copy=True)
        value.flags.writeable = False
        values[name] = value
    return Supplied(values, dict(options._external_files))


def apply(proto: onnx.ModelProto, given: Supplied, label: str, max_tensor_bytes: int) -> None:
    """Put the supplied data into ``proto``'s external tensors, in place: a supplied value replaces the main
    graph's initializer of its name, which must be stored as external data (onnxruntime's rule) with the same
    type and shape; with files given, every other external tensor must be read from one of them."""
    from .ir.external import external_tensors

    inits = {t.name: t for t in proto.graph.initializer}
    for name, value in given.values.items():
        t = inits.get(name)
        if t is None:
            raise Fail(f"{label}: add_external_initializers: the model has no initializer '{name}'")
        if t.data_location != onnx.TensorProto.EXTERNAL:
            raise Fail(f"{label}: add_external_initializers: initializer '{name}' is not stored as external data "
                       "(onnxruntime replaces only those; SessionOptions.add_initializer replaces any)")
        want_type = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        if value.dtype != want_type or list(value.shape) != [int(d) for d in t.dims]:
            raise InvalidArgument(f"{label}: add_external_initializers('{name}'): given {value.dtype} "
                                  f"{list(value.shape)}, the model's initializer is {want_type} {list(t.dims)}")
        t.CopyFrom(onnx.numpy_helper.from_array(value, name))
    if not given.files:
        return
    for t in list(external_tensors(proto)):
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        data = given.files.get(_file_key(location))
        if data is None:
            raise Fail(f"{label}: tensor '{t.name}': external file '{location}' is not among the files given to "
                       f"add_external_initializers_from_files_in_memory ({sorted(given.files)})")
        offset, length = _int(info, "offset", t.name) or 0, _int(info, "length", t.name)
        length = len(data) - offset if length is None else length
        if offset + length > len(data) or length < 0:
            raise Fail(f"{label}: external initializer '{t.name}' offset {offset} + length {length} are beyond the "
                       f"{len(data)} bytes given for '{location}'")
        if length > max_tensor_bytes:
            raise InvalidArgument(f"{label}: external initializer '{t.name}' of {length} bytes is over the limit "
                                  f"of {max_tensor_bytes} bytes per tensor")
        t.raw_data = bytes(data[offset:offset + length])
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


def save_options(config: dict[str, str]) -> tuple[str, int] | None:
    """(file name, minimum size in bytes) from the session config, None when no file name is set; a size that
    is not a non-negative integer is refused, as onnxruntime refuses it."""
    name = config.get(FILE_NAME_KEY, "")
    text = config.get(MIN_SIZE_KEY)
    size = DEFAULT_MIN_SIZE
    if text is not None:
        try:
            size = int(text.strip())
        except ValueError:
            size = -1
        if size < 0:
            raise Fail(f"session config entry '{MIN_SIZE_KEY}' must be a non-negative number of bytes, got {text!r}")
    if not name:
        return None
    if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):
        raise InvalidArgument(f"session config entry '{FILE_NAME_KEY}' must name a file beside the optimized model, "
                              f"got {name!r}")
    return name, size


def save_with_external(proto: onnx.ModelProto, path: str, file_name: str, min_size: int) -> None:
    """Write ``proto`` to ``path``; initializers of at least ``min_size`` bytes go to ``file_name`` beside it
    (offsets in the file in the order written), the rest stay inside the model."""
    folder = os.path.dirname(os.path.abspath(path))
    target = os.path.join(folder, file_name)
    if not os.path.isdir(os.path.dirname(target)):
        raise Fail(f"cannot write the optimized model's external initializers: folder "
                   f"'{os.path.dirname(target)}' does not exist")
    with open(target, "wb") as f:
        offset = 0
        for t in _all_initializers(proto.graph):
            if t.data_location == onnx.TensorProto.EXTERNAL or t.data_type == onnx.TensorProto.STRING:
                continue
            if not t.HasField("raw_data"):
                t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t), t.name))
            raw = t.raw_data
            if len(raw) < min_size:
                continue
            f.write(raw)
            onnx.external_data_helper.set_external_data(t, file_name, offset=offset, length=len(raw))
            t.ClearField("raw_data")
            t.data_location = onnx.TensorProto.EXTERNAL
            offset += len(raw)
    onnx.save_model(proto, path)


def _all_initializers(g: onnx.GraphProto):
    yield from g.initializer
    for node in g.node:
        for a in node.attribute:
            if a.HasField("g"):
                yield from _all_initializers(a.g)
            for sub in a.graphs:
                yield from _all_initializers(sub)


def _file_key(name: str) -> str:
    return os.path.normpath(name.replace("\\", "/"))


def _int(info: dict[str, str], key: str, tensor: str) -> int | None:
    text = info.get(key)
    if text in (None, ""):
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgument(f"external initializer '{tensor}': {key} {text!r} is not a non-negative integer")
    return value
