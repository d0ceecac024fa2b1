"""Hook implementations of ExampleExecutionProvider: the module the entry point names.

Each hook is a thin answer built from ``memory`` (device, allocator, copies) and ``kernels``
(what it runs, how). An EXAMPLE to copy, not an accelerator: it computes with numpy.
"""

from __future__ import annotations

from ort_core.plugins import Capability, ProviderInfo, hookimpl

from . import __version__
from .kernels import compile_subgraph, unsupported_reason
from .memory import ALLOCATOR, DEVICE, TRANSFER, unavailable_reason

NAME = "ExampleExecutionProvider"
OPTIONS = {"device_id": 0}  # the options it accepts, with their defaults


@hookimpl
def ort_register_providers():
    # Loading the library here is cheap and tells the user *now* why the provider is off;
    # unavailable_reason never raises, as registration must not.
    reason = unavailable_reason()
    return [ProviderInfo(NAME, (DEVICE,), available=not reason, reason=reason,
                         description="EXAMPLE provider (template for vendors, not an accelerator): "
                                     "float elementwise ops and MatMul in libc memory via cffi",
                         version=__version__)]


@hookimpl
def ort_get_capability(provider, graph, options):
    _check_options(options)
    opset = graph.opset("")
    claimed, declined = [], {}
    for node in graph.nodes():
        why = unsupported_reason(node, opset, graph.type_of)
        if why is None:
            claimed.append(node.id)
        else:
            declined[node.id] = why
    # fuse=True: connected claimed nodes arrive in compile as one subgraph, so intermediates
    # never leave the device and the core inserts copies only at the borders
    return Capability(tuple(claimed), declined, fuse=True)


@hookimpl
def ort_compile(provider, subgraph, options):
    _check_options(options)
    return compile_subgraph(subgraph)


@hookimpl
def ort_allocator(provider, device):
    if device != DEVICE:
        raise ValueError(f"{NAME} allocates on {DEVICE} only, not {device}")
    return ALLOCATOR


@hookimpl
def ort_data_transfer(provider):
    return TRANSFER


def _check_options(options: dict) -> None:
    """Refuse what it does not understand: a silently ignored option is a bug report later."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown provider option(s) {unknown}; {NAME} accepts {sorted(OPTIONS)}")
    device_id = options.get("device_id", 0)
    if str(device_id) != str(DEVICE.id):
        raise ValueError(f"device_id={device_id!r}: {NAME} has a single device, id {DEVICE.id}")
