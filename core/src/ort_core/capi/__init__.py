"""The ``onnxruntime.capi`` paths that code written for onnxruntime imports, with ort-core's objects behind
them, so that ``from ort_core.capi.onnxruntime_pybind11_state import InvalidArgument`` and the ``except``
clauses using it catch ort-core's errors. Nothing else lives here."""
