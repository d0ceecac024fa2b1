"""``onnxruntime.capi.build_and_package_info``: which distribution serves onnxruntime and its version (the one
``onnxruntime.__version__`` reports once ``ort_core.install_as_onnxruntime()`` ran). No ``cuda_version``: as in
onnxruntime's CPU build, importing it raises ImportError."""

from __future__ import annotations

from ..compat import ONNXRUNTIME_API_VERSION as __version__  # noqa: F401

package_name = "ort-core"
