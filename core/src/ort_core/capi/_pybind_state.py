"""``onnxruntime.capi._pybind_state``: onnxruntime's re-export of its compiled module, which libraries import as
``C`` (``from onnxruntime.capi import _pybind_state as C``); here the names of ort-core's
``onnxruntime_pybind11_state`` (and the quantizers' native routines it lends from an installed onnxruntime)."""

from __future__ import annotations

from .onnxruntime_pybind11_state import *  # noqa: F403
from .onnxruntime_pybind11_state import __all__, __getattr__  # noqa: F401 - the quantizers' native routines
