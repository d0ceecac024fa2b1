"""IOBinding: inputs and outputs bound to devices for InferenceSession.run_with_iobinding.

Mirrors onnxruntime.IOBinding. It only records what is bound and keeps the results; running
(and the copies between devices) is the session's job.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidArgument
from .io_types import NodeArg, check_feed
from .memory.device import HOST, Device
from .memory.tensor import DeviceTensor
from .ortvalue import OrtValue, find_device, to_dtype, write_into


@dataclass
class _Output:
    device: Device
    target: OrtValue | None  # pre-allocated by the caller, else None


class IOBinding:
    """Where a session's inputs come from and where its outputs go (``session.io_binding()``).

    Inputs are bound by reference: a bound numpy array or OrtValue is read at each run, not
    copied at bind time. Outputs bound to a device (``bind_output(name, 'example', 0)``) stay
    there: an output bound to the device of the provider producing it is handed over without
    any copy. Copies are synchronous, so ``synchronize_inputs``/``synchronize_outputs`` do
    nothing.
    """

    def __init__(self, session: Any) -> None:
        self._session = session
        self._inputs: dict[str, OrtValue] = {}
        self._outputs: dict[str, _Output] = {}
        self._results: list[OrtValue] = []

    # ------------------------------------------------------------------- inputs
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind a host array (aliased, not copied)."""
        arg = self._input_arg(name)
        self._inputs[name] = OrtValue(check_feed(arg, arr_on_cpu), HOST)

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any, shape: Any,
                   buffer_ptr: int) -> None:
        """Bind memory at ``buffer_ptr`` holding a tensor of ``element_type`` and ``shape``, on the host (viewed
        as a numpy array) or on a device (as a DeviceTensor); no copy: the memory must outlive the runs."""
        device = find_device(device_type, device_id)
        arg = self._input_arg(name)
        if device.is_host:
            self.bind_cpu_input(name, _from_pointer(buffer_ptr, element_type, shape, f"input '{name}'"))
            return
        value = OrtValue(_device_tensor(buffer_ptr, element_type, shape, device, f"input '{name}'"), device)
        checked_input(arg, value)
        self._inputs[name] = value

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Bind an OrtValue on any device; a consumer on that device reads it without a copy."""
        arg = self._input_arg(name)
        if not isinstance(ortvalue, OrtValue):
            raise InvalidArgument(f"bind_ortvalue_input('{name}') expects an OrtValue, got {type(ortvalue).__name__}")
        checked_input(arg, ortvalue)
        self._inputs[name] = ortvalue

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: copies between devices are synchronous."""

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    # ------------------------------------------------------------------ outputs
    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Any = None, buffer_ptr: int | None = None) -> None:
        """Have output ``name`` produced on a device, or written into a buffer there.

        Without ``buffer_ptr`` the run allocates the output on the device (any shape). With it
        (and ``element_type`` and ``shape``) the output is written into that memory, on the host or
        on a device (through its provider's data transfer).
        """
        self._output_name(name)
        device = find_device(device_type, device_id)
        if buffer_ptr is None:
            self._outputs[name] = _Output(device, None)
            return
        if element_type is None or shape is None:
            raise InvalidArgument(f"bind_output('{name}'): element_type and shape are needed with a buffer_ptr")
        if not device.is_host:
            target = _device_tensor(buffer_ptr, element_type, shape, device, f"output '{name}'")
            self._outputs[name] = _Output(device, OrtValue(target, device))
            return
        target = _from_pointer(buffer_ptr, element_type, shape, f"output '{name}'")
        self._outputs[name] = _Output(HOST, OrtValue(target, HOST))

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Have output ``name`` delivered into ``ortvalue`` (on its device).

        The output is written into the OrtValue's memory (same shape and dtype required): the
        array on the host, the DeviceTensor on a device (through its provider's ``copy_into``; a
        provider whose transfer cannot write into existing memory hands over its produced tensor
        instead, at another address).
        """
        self._output_name(name)
        if not isinstance(ortvalue, OrtValue):
            raise InvalidArgument(f"bind_ortvalue_output('{name}') expects an OrtValue, got "
                                  f"{type(ortvalue).__name__}")
        if not ortvalue.is_tensor():
            raise InvalidArgument(f"bind_ortvalue_output('{name}') needs a tensor OrtValue")
        self._outputs[name] = _Output(ortvalue.device, ortvalue)

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: copies between devices are synchronous."""

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def get_outputs(self) -> list[OrtValue]:
        """The last run's outputs in binding order, each on the device it was bound to."""
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> list[OrtValue]:
        return self.get_outputs()

    def copy_outputs_to_cpu(self) -> list[Any]:
        """The last run's outputs as numpy arrays: device outputs copied to the host, host
        outputs returned as they are."""
        return [v.numpy() for v in self._results]

    # ---------------------------------------------------------- for the session
    def _layout(self) -> list[tuple[str, Device]]:
        return [(name, out.device) for name, out in self._outputs.items()]

    def _store(self, values: list[Any]) -> None:
        """Keep a run's results, writing pre-allocated outputs into their targets."""
        results = []
        for (name, out), value in zip(self._outputs.items(), values):
            if out.target is None:
                results.append(OrtValue(value, out.device))
                continue
            target = out.target
            _check_same(name, target, value)
            if out.device.is_host:
                np.copyto(target.value, value)
            elif not write_into(target.value, value, out.device, out.device, self._session._transfers):
                target._set(value, out.device)
            results.append(target)
        self._results = results

    def _input_arg(self, name: str) -> NodeArg:
        return self._session._feedable_arg(name)

    def _output_name(self, name: str) -> None:
        names = [o.name for o in self._session.get_outputs()]
        if name not in names:
            raise InvalidArgument(f"invalid output name '{name}'; the model's outputs are {names}")


def checked_input(arg: NodeArg, ortvalue: OrtValue) -> Any:
    """The value to feed for ``arg``: host values through check_feed; device values by their
    ``dtype``/``shape`` attributes (a zero-stride stand-in goes through the same checks)."""
    value = ortvalue.value
    if ortvalue.device.is_host:
        return check_feed(arg, value)
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if arg.value_type.kind == "tensor" and dtype is not None and shape is not None:
        check_feed(arg, np.broadcast_to(np.empty((), np.dtype(dtype)), tuple(int(d) for d in shape)))
    return value


def _check_same(name: str, target: OrtValue, value: Any) -> None:
    got_dtype, got_shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    want_dtype, want_shape = target.value.dtype, tuple(target.value.shape)
    if got_dtype is None or got_shape is None:
        raise InvalidArgument(f"output '{name}' is not a tensor ({type(value).__name__}); it cannot be "
                              "written into a pre-allocated buffer")
    if np.dtype(got_dtype) != want_dtype or tuple(got_shape) != want_shape:
        raise InvalidArgument(f"output '{name}': the bound buffer is {want_dtype} {list(want_shape)}, "
                              f"the model produced {np.dtype(got_dtype)} {list(got_shape)}")


def _device_tensor(buffer_ptr: Any, element_type: Any, shape: Any, device: Device, what: str) -> DeviceTensor:
    """A DeviceTensor over the caller's device memory at ``buffer_ptr`` (the caller keeps it alive)."""
    dtype, shape, address = _pointer_args(buffer_ptr, element_type, shape, what)
    return DeviceTensor(address, shape, dtype, device)


def _pointer_args(buffer_ptr: Any, element_type: Any, shape: Any, what: str) -> tuple[np.dtype, tuple, int]:
    dtype = to_dtype(element_type)
    if dtype.kind in "OUS":
        raise InvalidArgument(f"{what}: string tensors cannot be bound through a raw pointer")
    try:
        shape = tuple(int(d) for d in shape)
        address = int(buffer_ptr)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{what}: shape must be ints and buffer_ptr an address, got shape {shape!r} "
                              f"and buffer_ptr {buffer_ptr!r}") from None
    if any(d < 0 for d in shape):
        raise InvalidArgument(f"{what}: shape {list(shape)} has a negative dimension")
    if int(np.prod(shape, dtype=np.int64)) and not address:
        raise InvalidArgument(f"{what}: buffer_ptr is NULL")
    return dtype, shape, address


def _from_pointer(buffer_ptr: Any, element_type: Any, shape: Any, what: str) -> np.ndarray:
    """A numpy array over host memory at ``buffer_ptr`` (no copy)."""
    dtype, shape, address = _pointer_args(buffer_ptr, element_type, shape, what)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not nbytes:
        return np.empty(shape, dtype)
    raw = (ctypes.c_char * nbytes).from_address(address)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)
