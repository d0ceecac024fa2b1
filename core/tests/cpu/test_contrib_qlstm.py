"""com.microsoft DynamicQuantizeLSTM on the CPU provider against onnxruntime 1.32 (the reference).

Our kernel emulates onnxruntime's dynamic uint8 quantization of X and of H at every step and its exact
integer matmuls, so results agree to the float32 rounding of the gate functions (sigmoid/tanh are
onnxruntime's MLAS approximations there).
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper

from ort_core.errors import KernelError

from .kernel_harness import run_ours

ort = pytest.importorskip("onnxruntime")

OP = "DynamicQuantizeLSTM"
# observed: below 1e-6 on every case here (AVX512-VNNI host). A value landing on the other side of a rounding
# boundary of H's quantization would shift one level (~range / 255) and break this on purpose: such a flip
# means the emulation of onnxruntime's quantization drifted.
ATOL = 1e-5
RTOL = 1e-5


def _quantize_weights(w_float, dtype, per_channel, rng):
    """(D, K, 4H) float weights -> quantized weights, scale, zero point in onnxruntime's conventions."""
    D, _, N = w_float.shape
    axis = (1,) if per_channel else (1, 2)
    amax = np.abs(w_float).max(axis=axis, keepdims=True)
    if dtype == np.int8:
        scale = (amax / 127).astype(np.float32)
        zp = np.zeros_like(scale, dtype=np.int8)
        if not per_channel:
            zp = rng.integers(-3, 4, size=zp.shape).astype(np.int8)
        q = np.clip(np.rint(w_float / scale) + zp, -128, 127).astype(np.int8)
    else:
        scale = (2 * amax / 255).astype(np.float32)
        zp = np.full(scale.shape, 128, dtype=np.uint8)
        if not per_channel:
            zp = rng.integers(120, 136, size=zp.shape).astype(np.uint8)
        q = np.clip(np.rint(w_float / scale) + zp.astype(np.float32), 0, 255).astype(np.uint8)
    shape = (D, N) if per_channel else (D,)
    return q, scale.reshape(shape), zp.reshape(shape)


def _case(rng, T=5, B=2, isz=6, H=4, D=1, dtype=np.int8, per_channel=False, bias=True, init=False, seq=None,
          peep=False):
    """The 12 inputs of one node (None where omitted)."""
    x = rng.standard_normal((T, B, isz)).astype(np.float32)
    w, ws, wz = _quantize_weights(rng.standard_normal((D, isz, 4 * H)) * 0.5, dtype, per_channel, rng)
    r, rs, rz = _quantize_weights(rng.standard_normal((D, H, 4 * H)) * 0.5, dtype, per_channel, rng)
    b = rng.standard_normal((D, 8 * H)).astype(np.float32) * 0.3 if bias else None
    lens = None if seq is None else np.asarray(seq, dtype=np.int32)
    h0 = rng.standard_normal((D, B, H)).astype(np.float32) * 0.5 if init else None
    c0 = rng.standard_normal((D, B, H)).astype(np.float32) * 0.5 if init else None
    p = rng.standard_normal((D, 3 * H)).astype(np.float32) * 0.3 if peep else None
    return [x, w, r, b, lens, h0, c0, p, ws, wz, rs, rz]


def _model(inputs, attrs, n_outputs=3, const_weights=False):
    names = [f"x{i}" if v is not None else "" for i, v in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(OP, names, outs, domain="com.microsoft", **attrs)
    inits, g_inputs = [], []
    for i, (n, v) in enumerate(zip(names, inputs)):
        if v is None:
            continue
        if const_weights and i in (1, 2, 8, 9, 10, 11):
            inits.append(onnx.numpy_helper.from_array(v, n))
        else:
            g_inputs.append(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
    graph = helper.make_graph([node], "t", g_inputs, [helper.make_empty_tensor_value_info(o) for o in outs],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def _run_onnxruntime(inputs, attrs, n_outputs=3):
    """onnxruntime with enough intra-op threads that it splits every batch of these tests row by row."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 8
    sess = ort.InferenceSession(_model(inputs, attrs, n_outputs).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {f"x{i}": v for i, v in enumerate(inputs) if v is not None})


def _check(inputs, attrs, n_outputs=3, atol=ATOL):
    ours = run_ours(OP, inputs, attrs, opset=1, n_outputs=n_outputs, domain="com.microsoft")
    ref = _run_onnxruntime(inputs, attrs, n_outputs)
    assert len(ours) == len(ref)
    for k, (a, b) in enumerate(zip(ours, ref)):
        assert a.dtype == b.dtype == np.float32, f"output {k}"
        assert a.shape == b.shape, f"output {k}: {a.shape} != {b.shape}"
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=atol, err_msg=f"output {k}")
    return ours, ref


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_directions_types_scales(direction, dtype, per_channel):
    rng = np.random.default_rng(hash((direction, dtype == np.int8, per_channel)) % 2**32)
    D = 2 if direction == "bidirectional" else 1
    inputs = _case(rng, D=D, dtype=dtype, per_channel=per_channel)
    _check(inputs, {"direction": direction, "hidden_size": 4})


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("bias,init,peep", [(False, False, False), (True, True, False), (False, True, True),
                                            (True, True, True)])
def test_optional_inputs(direction, bias, init, peep):
    rng = np.random.default_rng(7 + 2 * bias + 4 * init + 8 * peep)
    D = 2 if direction == "bidirectional" else 1
    inputs = _case(rng, T=6, B=3, isz=5, H=6, D=D, bias=bias, init=init, peep=peep)
    _check(inputs, {"direction": direction, "hidden_size": 6})


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("n_outputs", [1, 3])
def test_sequence_lens(direction, n_outputs):
    rng = np.random.default_rng(11 + n_outputs)
    D = 2 if direction == "bidirectional" else 1
    inputs = _case(rng, T=6, B=4, H=5, D=D, init=True, seq=[6, 3, 0, 5])
    _check(inputs, {"direction": direction, "hidden_size": 5}, n_outputs=n_outputs)
    inputs[4] = np.array([2, 3, 1, 2], dtype=np.int32)  # max length below T: X quantized over 3 steps
    _check(inputs, {"direction": direction, "hidden_size": 5}, n_outputs=n_outputs)


def test_omitted_y():
    """Y omitted: Y_h and Y_c alone (H of finished rows is kept, not zeroed)."""
    rng = np.random.default_rng(3)
    inputs = _case(rng, T=5, B=3, H=4, seq=[5, 2, 4], init=True)
    ours = run_ours(OP, inputs, {"hidden_size": 4}, opset=1, n_outputs=3, domain="com.microsoft")
    node_outs = _model(inputs, {"hidden_size": 4})
    node_outs.graph.node[0].output[0] = ""
    del node_outs.graph.output[0]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 8
    sess = ort.InferenceSession(node_outs.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {f"x{i}": v for i, v in enumerate(inputs) if v is not None})
    for a, b in zip(ours[1:], ref):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_whole_batch_quantization():
    """2 <= batch <= 4 with hidden_size > 256: onnxruntime quantizes H over the whole batch."""
    rng = np.random.default_rng(5)
    inputs = _case(rng, T=4, B=3, isz=8, H=260, init=True, seq=[4, 2, 3])
    _check(inputs, {"hidden_size": 260})


def test_attributes():
    rng = np.random.default_rng(9)
    inputs = _case(rng, T=5, B=2, H=4, D=2, init=True)
    _check(inputs, {"direction": "bidirectional", "hidden_size": 4, "clip": 0.7})
    _check(inputs, {"direction": "bidirectional", "hidden_size": 4, "input_forget": 1})
    acts = ["HardSigmoid", "Tanh", "Softsign", "Sigmoid", "Affine", "Tanh"]
    _check(inputs, {"direction": "bidirectional", "hidden_size": 4, "activations": acts,
                    "activation_alpha": [0.3, 0.8], "activation_beta": [0.4, 0.1]})


def test_larger_batch_per_row():
    rng = np.random.default_rng(13)
    inputs = _case(rng, T=7, B=6, isz=16, H=32, D=2, dtype=np.uint8, per_channel=True, init=True,
                   seq=[7, 1, 4, 7, 0, 6])
    _check(inputs, {"direction": "bidirectional", "hidden_size": 32})


def test_constant_weights_session():
    """Through a session: W and R are constant initializers, prepared once at build time."""
    from ort_core import InferenceSession

    rng = np.random.default_rng(17)
    inputs = _case(rng, T=5, B=2, H=8, D=2, dtype=np.uint8, per_channel=True, init=True)
    model = _model(inputs, {"direction": "bidirectional", "hidden_size": 8}, const_weights=True)
    feed = {f"x{i}": v for i, v in enumerate(inputs) if v is not None and i not in (1, 2, 8, 9, 10, 11)}
    ours = InferenceSession(model.SerializeToString()).run(None, feed)
    ref = _run_onnxruntime(inputs, {"direction": "bidirectional", "hidden_size": 8})
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_bad_inputs():
    rng = np.random.default_rng(19)
    inputs = _case(rng, H=4, dtype=np.int8, per_channel=True)
    bad = list(inputs)
    bad[9] = np.ones_like(inputs[9])  # per-channel int8 zero points must be 0
    with pytest.raises(KernelError, match="zero_point"):
        run_ours(OP, bad, {"hidden_size": 4}, opset=1, n_outputs=3, domain="com.microsoft")
    bad = list(inputs)
    bad[1] = inputs[1].transpose(0, 2, 1)  # ONNX LSTM's layout is not this op's
    with pytest.raises(KernelError, match="W has shape"):
        run_ours(OP, bad, {"hidden_size": 4}, opset=1, n_outputs=3, domain="com.microsoft")
    with pytest.raises(KernelError, match="hidden_size"):
        run_ours(OP, inputs, {}, opset=1, n_outputs=3, domain="com.microsoft")


MODEL = os.path.expanduser("~/.cache/ort-core/models/ddddocr_old_quant.onnx")
needs_model = pytest.mark.skipif(not os.path.exists(MODEL), reason="ddddocr_old_quant.onnx not fetched")


def _ocr_input():
    rng = np.random.default_rng(23)
    x = rng.random((1, 1, 64, 160), dtype=np.float32)
    x[..., 40:120] = (x[..., 40:120] > 0.5).astype(np.float32)
    return {"input1": x}


@needs_model
def test_ddddocr_lstm_node():
    """The real node LSTM_202_quant (bidirectional, hidden 512, int8 per-tensor weights as constant
    initializers) alone, both runtimes fed onnxruntime's own values of its inputs: near bit-exact."""
    from ort_core import InferenceSession

    model = onnx.load(MODEL)
    node = next(n for n in model.graph.node if n.op_type == OP)
    feeds = [n for n in node.input if n and n not in {i.name for i in model.graph.initializer}]
    for name in [*feeds, *node.output]:
        model.graph.output.append(helper.make_empty_tensor_value_info(name))
    n_out = len(model.graph.output) - len(feeds) - len(node.output)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    full = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    values = dict(zip([o.name for o in model.graph.output][n_out:], full.run(None, _ocr_input())[n_out:]))

    used = set(node.input)
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                                               for n in feeds],
                              [helper.make_empty_tensor_value_info(o) for o in node.output],
                              initializer=[i for i in model.graph.initializer if i.name in used])
    single = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12),
                                                     helper.make_opsetid("com.microsoft", 1)])
    single.ir_version = 8
    feed = {n: values[n] for n in feeds}
    ref = ort.InferenceSession(single.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    ours = InferenceSession(single.SerializeToString()).run(None, feed)
    for name, a, b in zip(node.output, ours, ref):
        np.testing.assert_allclose(a, values[name], rtol=1e-5, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)


@needs_model
def test_ddddocr_old_quant():
    """The whole model. Upstream of the LSTM, float ops that differ from onnxruntime's in the last bit
    (its Sigmoid, ...) feed 21 DynamicQuantizeLinear nodes whose ranges then differ, so the LSTM's
    input already differs by up to ~0.2; the logits agree to ~0.15 (of ~18) and decode alike."""
    from ort_core import InferenceSession

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    (ref,) = ort.InferenceSession(MODEL, opts, providers=["CPUExecutionProvider"]).run(None, _ocr_input())
    (ours,) = InferenceSession(MODEL).run(None, _ocr_input())
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    np.testing.assert_array_equal(ours.argmax(-1), ref.argmax(-1))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=0.3)
