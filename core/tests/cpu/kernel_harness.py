"""Test helper: run one node through our CPU kernel and through onnx's reference evaluator.

Used by the per-family kernel tests; the reference evaluator is only ever called from tests.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from ort_core.ir.graph import Node
from ort_core.ir.types import elem_type_of
from ort_core.providers.cpu import ops  # noqa: F401  (registers kernels)
from ort_core.providers.cpu.registry import lookup, no_bodies


def run_ours(op_type, inputs, attrs=None, opset=21, n_outputs=1, domain=""):
    """Outputs of our kernel for one node; ``None`` in inputs marks an omitted optional input."""
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = Node(op_type, names, [f"y{i}" for i in range(n_outputs)], dict(attrs or {}),
                domain=domain, name=f"test_{op_type}", id=0)
    kd = lookup(domain, op_type, opset)
    assert kd is not None, f"no CPU kernel for {op_type} at opset {opset}"
    kernel = kd.factory(node, opset, bodies=no_bodies) if kd.wants_bodies else kd.factory(node, opset)
    return list(kernel(*inputs))


def run_reference(op_type, inputs, attrs=None, opset=21, n_outputs=1, domain=""):
    """Outputs of onnx's reference evaluator for the same node (the spec made executable)."""
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, domain=domain, **dict(attrs or {}))
    g_inputs = [helper.make_tensor_value_info(n, elem_type_of(x.dtype), x.shape)
                for n, x in zip(names, inputs) if x is not None]
    g_outputs = [helper.make_empty_tensor_value_info(o) for o in outs]
    graph = helper.make_graph([node], "t", g_inputs, g_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    model.ir_version = onnx.IR_VERSION
    ref = ReferenceEvaluator(model)
    return ref.run(None, {n: x for n, x in zip(names, inputs) if x is not None})


def run_onnxruntime_ml(op_type, x, attrs, out_types, ml_opset=1):
    """Outputs of onnxruntime itself for one ai.onnx.ml node on a float input ``x`` (the test skips
    without onnxruntime): the baseline where the reference evaluator and onnxruntime differ."""
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node(op_type, ["x"], [f"y{i}" for i in range(len(out_types))], domain="ai.onnx.ml",
                            **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(f"y{i}", t, None) for i, t in enumerate(out_types)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", ml_opset)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def check(op_type, inputs, attrs=None, opset=21, n_outputs=1, rtol=1e-5, atol=1e-6):
    """Assert our kernel matches the reference evaluator in dtype, shape and values."""
    ours = run_ours(op_type, inputs, attrs, opset, n_outputs)
    ref = run_reference(op_type, inputs, attrs, opset, n_outputs)
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype} != reference {b.dtype}"
        assert a.shape == b.shape, f"output {i}: shape {a.shape} != reference {b.shape}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}")
    return ours


def run_onnxruntime(op_type, inputs, attrs=None, opset=21, n_outputs=1, domain="com.microsoft", domain_opset=1):
    """Outputs of onnxruntime's CPU provider for one node (the test skips without onnxruntime): the
    only reference for onnxruntime's contrib ops (domain com.microsoft). ``None`` in inputs marks an
    omitted optional input; the default domain is imported at ``opset``."""
    ort = pytest.importorskip("onnxruntime")
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, domain=domain, **dict(attrs or {}))
    g_inputs = [helper.make_tensor_value_info(n, elem_type_of(np.asarray(x).dtype), np.shape(x))
                for n, x in zip(names, inputs) if x is not None]
    graph = helper.make_graph([node], "t", g_inputs, [helper.make_empty_tensor_value_info(o) for o in outs])
    imports = [helper.make_opsetid("", opset)]
    if domain not in ("", "ai.onnx"):
        imports.append(helper.make_opsetid(domain, domain_opset))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: x for n, x in zip(names, inputs) if x is not None})


def check_onnxruntime(op_type, inputs, attrs=None, opset=21, n_outputs=1, domain="com.microsoft", rtol=1e-5,
                      atol=1e-6, domain_opset=1):
    """Assert our kernel matches onnxruntime's in dtype, shape and values, output by output (an output
    onnxruntime leaves empty or we omit is compared only when both give it)."""
    ours = run_ours(op_type, inputs, attrs, domain_opset if domain not in ("", "ai.onnx") else opset, n_outputs,
                    domain=domain)
    ref = run_onnxruntime(op_type, inputs, attrs, opset, n_outputs, domain, domain_opset)
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        if a is None or b is None:
            continue
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype} != onnxruntime's {b.dtype}"
        assert a.shape == b.shape, f"output {i}: shape {a.shape} != onnxruntime's {b.shape}"
        np.testing.assert_allclose(a.astype(np.float64) if a.dtype.kind == "f" else a,
                                   b.astype(np.float64) if b.dtype.kind == "f" else b,
                                   rtol=rtol, atol=atol, err_msg=f"output {i}")
    return ours
