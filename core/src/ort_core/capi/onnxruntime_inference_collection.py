"""``onnxruntime.capi.onnxruntime_inference_collection``: where onnxruntime defines its Python classes and code
imports them from; ort-core's classes under those names (``Session``, onnxruntime's base class of
InferenceSession, is InferenceSession itself: ort-core has one class)."""

from __future__ import annotations

from ..ep_devices import OrtDevice, OrtDeviceVendorId, copy_tensors
from ..iobinding import IOBinding
from ..model_compiler import ModelCompiler
from ..ortvalue import OrtValue
from ..session import InferenceSession
from ..sparse import SparseTensor

Session = InferenceSession

__all__ = ["IOBinding", "InferenceSession", "ModelCompiler", "OrtDevice", "OrtDeviceVendorId", "OrtValue", "Session",
           "SparseTensor", "copy_tensors"]
