"""Recorded runs: the device work of one fused subgraph for one input signature, traced once and replayed.

The first run with a signature (the inputs' shapes, dtypes and strides) walks the plan with *symbolic*
tensors: each input, output and intermediate gets a tag, and its address is ``tag << 48`` plus a byte offset,
so every shape, stride and cuBLAS argument computation of ``launch`` runs unchanged and is written down as a
``Command`` (a kernel launch with its parameter words, a cuBLAS product, a memset, a copy, an output handed
out as a view). Later runs with that signature only resolve the tags (the run's inputs and outputs, one
workspace block whose intermediates share bytes where their lifetimes allow) and issue the commands: no
shape arithmetic in Python per run. The same commands, resolved against fixed buffers, are what a CUDA graph
captures (``graphs``). Recording needs no GPU; replaying does.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ort_core.memory import DeviceTensor
from ort_core.memory.planned import Lifetime, assign_offsets

TAG_SHIFT = 48
OFFSET_MASK = (1 << TAG_SHIFT) - 1
MAX_TAGS = (1 << 15) - 1  # tagged addresses stay positive int64 words


def symbol(tag: int, offset: int = 0) -> int:
    """The symbolic address of byte ``offset`` of the value tagged ``tag`` (tag 0: a real address)."""
    return (tag << TAG_SHIFT) | offset


def tag_of(address: int) -> int:
    return address >> TAG_SHIFT


def check_real(address: int, what: str) -> int:
    """A real device address must leave the tag bits free (x86-64 and CUDA's unified addresses use 47 bits)."""
    if address >> TAG_SHIFT:
        raise ValueError(f"{what} is at {address:#x}, above the 2**48 addresses a recorded run can name")
    return address


@dataclass
class Launch:
    """cudaLaunchKernel of ``kernel`` with the parameter ``words``; ``slots``: which words are addresses."""

    kernel: Any
    grid: int
    block: int
    words: np.ndarray
    slots: tuple[int, ...]
    label: str
    native: Any = None  # the launch's cffi objects (launch.NativeLaunch), made once when it is recorded


@dataclass
class Gemm:
    """cublasGemmStridedBatchedEx; ``args`` in its order with the three operand addresses at 6, 10 and 15."""

    args: tuple
    label: str

    ADDRESSES = (6, 10, 15)


@dataclass
class Memset:
    address: int
    nbytes: int


@dataclass
class Memcpy:
    dst: int
    src: int
    nbytes: int


@dataclass
class Memcpy2D:
    """``height`` rows of ``width`` bytes, rows ``dpitch`` / ``spitch`` bytes apart (Concat's slices)."""

    dst: int
    dpitch: int
    src: int
    spitch: int
    width: int
    height: int


@dataclass
class Alias:
    """Output ``index`` handed out as a view of an input (no copy): its address, shape, dtype and strides."""

    index: int
    address: int
    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...] | None


@dataclass
class Trace:
    """What one signature's run does. Tags: 1..n_inputs the inputs, then the outputs, then intermediates."""

    n_inputs: int
    n_outputs: int
    commands: list[Any] = field(default_factory=list)
    outputs: dict[int, tuple[tuple[int, ...], np.dtype]] = field(default_factory=dict)  # written outputs
    scratch: list[int] = field(default_factory=list)  # bytes of each intermediate, in tag order
    offsets: list[int] = field(default_factory=list)  # their byte offsets in the workspace block
    workspace: int = 0  # the block's bytes
    lock: threading.Lock = field(default_factory=threading.Lock)  # replays share the launch parameter memory
    runs: int = 0  # replays so far (the CUDA graph of a signature is captured from its second run)

    def output_tag(self, index: int) -> int:
        return 1 + self.n_inputs + index

    def scratch_tag(self, j: int) -> int:
        return 1 + self.n_inputs + self.n_outputs + j

    @property
    def aliases(self) -> list[Alias]:
        return [c for c in self.commands if isinstance(c, Alias)]


class Recorder:
    """Hands symbolic tensors to ``launch``'s step functions and writes down what they enqueue."""

    def __init__(self, n_inputs: int, n_outputs: int, device: Any) -> None:
        self.trace = Trace(n_inputs, n_outputs)
        self.device = device

    def input(self, index: int, value: DeviceTensor) -> DeviceTensor:
        return DeviceTensor(symbol(1 + index), value.shape, value.dtype, self.device, strides=value.strides)

    def output(self, index: int, shape: tuple[int, ...], dtype: Any) -> DeviceTensor:
        self.trace.outputs[index] = (tuple(shape), np.dtype(dtype))
        return DeviceTensor(symbol(self.trace.output_tag(index)), shape, dtype, self.device)

    def scratch(self, shape: tuple[int, ...], dtype: Any) -> DeviceTensor:
        dtype = np.dtype(dtype)
        j = len(self.trace.scratch)
        tag = self.trace.scratch_tag(j)
        if tag > MAX_TAGS:
            raise ValueError(f"a fused subgraph with more than {MAX_TAGS} values cannot be recorded")
        self.trace.scratch.append(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        return DeviceTensor(symbol(tag), shape, dtype, self.device)

    def add(self, command: Any) -> None:
        self.trace.commands.append(command)

    def finish(self) -> Trace:
        """Place the intermediates in one block: bytes are shared by values whose commands do not overlap."""
        t = self.trace
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for i, command in enumerate(t.commands):
            for address in addresses(command):
                tag = tag_of(address)
                first.setdefault(tag, i)
                last[tag] = i
        lifetimes = [Lifetime(max(n, 1), first.get(t.scratch_tag(j), 0), last.get(t.scratch_tag(j), 0))
                     for j, n in enumerate(t.scratch)]
        t.offsets, t.workspace = assign_offsets(lifetimes)
        return t


def addresses(command: Any) -> list[int]:
    """Every address a command reads or writes."""
    if isinstance(command, Launch):
        return [int(command.words[s]) for s in command.slots]
    if isinstance(command, Gemm):
        return [command.args[k] for k in Gemm.ADDRESSES]
    if isinstance(command, Memset):
        return [command.address]
    if isinstance(command, (Memcpy, Memcpy2D)):
        return [command.dst, command.src]
    return [command.address]


def bases(trace: Trace, inputs: list[int], outputs: dict[int, int], workspace: int) -> list[int]:
    """Real base address of every tag (index = tag; tag 0 is 0, so real addresses resolve to themselves)."""
    table = [0] * (1 + trace.n_inputs + trace.n_outputs + len(trace.scratch))
    table[1:1 + trace.n_inputs] = inputs
    for k, address in outputs.items():
        table[trace.output_tag(k)] = address
    for j, offset in enumerate(trace.offsets):
        table[trace.scratch_tag(j)] = workspace + offset
    return table


def resolve(table: list[int], address: int) -> int:
    return table[address >> TAG_SHIFT] + (address & OFFSET_MASK)
