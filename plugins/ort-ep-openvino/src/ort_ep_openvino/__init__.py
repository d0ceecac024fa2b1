"""OpenVINO execution provider for ort-core: fused ONNX subgraphs compiled by OpenVINO's C API.

Hooks in ``plugin``, the cffi binding in ``runtime``, option parsing in ``options``, what
OpenVINO takes in ``capability`` and the compiled-subgraph kernel in ``kernel``; see README.md.
"""

__version__ = "0.1.0"
