"""Whole models from the onnx wheel (light, simple, pytorch-converted, pytorch-operator).

Run with default optimizations, as an application would; judged like the node cases.
"""

from __future__ import annotations

from .test_operators import check_case


def test_model(provider, model_case, ort_state):
    check_case(provider, model_case, ort_state)
