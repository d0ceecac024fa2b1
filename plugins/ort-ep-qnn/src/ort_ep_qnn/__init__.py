"""QNN execution provider for ort-core: fused ONNX subgraphs built as QNN graphs and run by Qualcomm's HTP backend.

Hooks and the provider object in ``plugin``, the cffi declarations in ``qnn_api``, library discovery in
``library``, loading and handles in ``runtime``, graphs in ``graph``, ONNX-to-QNN rules in ``lowering`` (over
``emitter``), QDQ groups in ``qdq``, what is claimed in ``capability``, options in ``options``, the kernel in
``kernel`` and saved contexts (EPContext nodes) in ``contexts``; see README.md.
"""

__version__ = "0.1.0"
