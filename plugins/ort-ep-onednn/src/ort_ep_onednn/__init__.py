"""oneDNN execution provider for ort-core: fused fp32 subgraphs run as oneDNN primitives through its C API.

Hooks in ``plugin``, the cffi binding in ``library`` (enum values in ``enums``), option parsing in
``options``, what oneDNN takes in ``capability``, lowering to primitives in ``lowering`` and the kernel
in ``kernel``; see README.md.
"""

__version__ = "0.1.0"
