"""ort-conformance: the shared suite that certifies an ort-core execution provider.

Run ``ort-conformance --provider NAME [--report DIR]``; see README.md for what is checked and
the certification criteria.
"""

PINNED_ONNX = "1.23.2"
"""The onnx release whose backend test cases the published pass counts refer to."""

__version__ = "0.1.0"
