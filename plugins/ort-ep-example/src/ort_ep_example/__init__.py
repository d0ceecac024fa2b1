"""EXAMPLE execution provider for ort-core: a template for vendor plugins, not an accelerator.

The hook implementations are in ``plugin``, device memory and copies in ``memory``, the compiled
subgraph kernel in ``kernels``; README.md walks through all three.
"""

__version__ = "0.1.0"
