"""``onnxruntime.capi.onnxruntime_inference_collection``: where onnxruntime defines its Python classes and code
imports them from; ort-core's classes under those names (``Session``, onnxruntime's base class of
InferenceSession, is InferenceSession itself: ort-core has one class)."""

from __future__ import annotations

from ..iobinding import IOBinding
from ..ortvalue import OrtValue
from ..session import InferenceSession

Session = InferenceSession

__all__ = ["IOBinding", "InferenceSession", "OrtValue", "Session"]
