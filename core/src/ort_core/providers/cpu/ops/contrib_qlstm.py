"""CPU kernel for onnxruntime's com.microsoft DynamicQuantizeLSTM: the ONNX LSTM with 8-bit weights.

Inputs X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale, W_zero_point, R_scale,
R_zero_point; outputs Y?, Y_h?, Y_c?; attributes as LSTM (no layout: X is time-major). W and R are
int8 or uint8 and, unlike LSTM's, laid out for ``x @ W``: W is (D, input_size, 4H) and R is (D, H, 4H),
gate columns in LSTM's i, o, f, c order. Scales (float32) and zero points (W's type) are per direction,
(D,), or per direction and output column, (D, 4H); onnxruntime uses one zero point per direction (the
first), so per-column zero points must be 0 for int8 weights and all equal for uint8 weights.

Numerics follow onnxruntime's kernel, which never dequantizes the weights: it quantizes the float
operand of each matmul to uint8 on the fly (range widened to include 0, scale = range / 255, zero point
and values rounded half to even), multiplies integers exactly, and rescales the int32 sums in float32 by
a_scale * w_scale (one multiplier per tensor or per column):

- X @ W runs once per direction over the first max(sequence_lens) time steps, quantized as one tensor;
- H @ R runs at every step and is added in float32 to X's share. H is quantized per batch row when
  onnxruntime splits the batch over threads (batch > 4, or batch >= 2 with H <= 256; exact when its
  intra-op thread count is at least the batch size), else over the whole batch of the direction. The
  rows of finished sequences read as 0 there when Y is produced (onnxruntime reads them back from Y);
- then Wb + Rb (summed in float32) and the peepholes are added, and the gates run in float32.

The weights are stored shifted by their zero point as integer-valued float64, so that float BLAS
multiplies them exactly; this happens once at build time when W or R (with its scale and zero point)
is a constant initializer of the graph. The time loop, sequence_lens, directions and activation roles
are rnn.py's (RnnConfig, RnnSequence); only the per-step requantization of H is this module's own.
"""

from __future__ import annotations

import numpy as np

from ....errors import KernelError
from ....ir.graph import Node
from ..registry import register
from .contrib_matmul_nbits import constant_inputs
from .rnn import RnnConfig, RnnSequence

_F32 = np.float32
_INT8 = (np.dtype(np.int8), np.dtype(np.uint8))


class _QuantWeights:
    """W or R shifted by its zero point, (D, K, 4H) integer-valued float64, and its scale shaped
    (D, 1, 4H) or (D, 1, 1) to multiply gate rows."""

    def __init__(self, label: str, name: str, q, scale, zp, num_dirs: int, hidden: int, k: int | None):
        if q is None or scale is None or zp is None:
            raise KernelError(f"{label}: inputs {name}, {name}_scale and {name}_zero_point are required")
        q, scale, zp = np.asarray(q), np.asarray(scale), np.asarray(zp)
        if q.dtype not in _INT8:
            raise KernelError(f"{label}: {name} must be int8 or uint8, got {q.dtype}")
        want = (num_dirs, k if k is not None else (q.shape[1] if q.ndim == 3 else -1), 4 * hidden)
        if q.shape != want:
            raise KernelError(f"{label}: {name} has shape {q.shape}, expected {want} (directions, "
                              f"{'hidden_size' if k is not None else 'input_size'}, 4*hidden_size)")
        for pname, p in ((f"{name}_scale", scale), (f"{name}_zero_point", zp)):
            if p.shape not in ((num_dirs,), (num_dirs, 4 * hidden)):
                raise KernelError(f"{label}: {pname} has shape {p.shape}, expected ({num_dirs},) per tensor or "
                                  f"({num_dirs}, {4 * hidden}) per channel")
        if scale.dtype != np.float32:
            raise KernelError(f"{label}: {name}_scale must be float32, got {scale.dtype}")
        if zp.dtype != q.dtype:
            raise KernelError(f"{label}: {name}_zero_point ({zp.dtype}) must have {name}'s type {q.dtype}")
        if zp.ndim == 2:
            if q.dtype == np.int8 and zp.any():
                raise KernelError(f"{label}: per-channel {name}_zero_point must be 0 for int8 weights")
            if q.dtype == np.uint8 and (zp != zp.flat[0]).any():
                raise KernelError(f"{label}: per-channel {name}_zero_point must hold one value for uint8 weights")
        zp_dir = zp.reshape(num_dirs, -1)[:, 0].astype(np.float64)  # one zero point per direction
        self.shifted = q.astype(np.float64) - zp_dir[:, None, None]
        self.scale = scale.reshape(num_dirs, 1, -1)


def _quant_params(lo, hi):
    """uint8 scale and zero point (float32) of a range, widened to include 0, as onnxruntime picks them."""
    lo = np.minimum(lo, 0).astype(_F32)
    hi = np.maximum(hi, 0).astype(_F32)
    scale = np.where(hi == lo, _F32(1), (hi - lo) / _F32(255)).astype(_F32)
    zp = np.rint(np.clip(-lo / scale, 0, 255)).astype(_F32)
    return scale, zp


def _quantized_shifted(x, scale, zp):
    """uint8 quantization of float32 ``x`` (round half to even, saturate) minus the zero point, as
    integer-valued float64."""
    q = np.clip(np.rint(x / scale) + zp, 0, 255)
    return (q - zp).astype(np.float64)


def _rows_apart(batch: int, hidden: int) -> bool:
    """Whether onnxruntime quantizes H per batch row (it splits the batch over threads) rather than
    over the whole batch at once."""
    return batch == 1 or batch > 4 or (batch >= 2 and hidden <= 256)


@register("DynamicQuantizeLSTM", since=1, domain="com.microsoft")
def _dynamic_quantize_lstm(node: Node, opset: int, graph=None):
    cfg = RnnConfig(node, 1, 4, ("Sigmoid", "Tanh", "Tanh"))  # opset 1: no layout attribute
    label, D, H = cfg.label, cfg.num_dirs, cfg.hidden
    if H is None or H <= 0:
        raise KernelError(f"{label}: attribute hidden_size must be given and positive")
    input_forget = bool(node.attr("input_forget", 0))
    f, g, h_act = cfg.roles
    want_y = bool(cfg.outputs and cfg.outputs[0])

    def weights(name, args, k):
        return _QuantWeights(label, name, *args, D, H, k)

    consts_w = constant_inputs(node, graph, (1, 8, 9))
    consts_r = constant_inputs(node, graph, (2, 10, 11))
    pre_w = weights("W", consts_w, None) if consts_w else None
    pre_r = weights("R", consts_r, H) if consts_r else None

    def kernel(x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None,
               w_scale=None, w_zp=None, r_scale=None, r_zp=None):
        if x.dtype != np.float32 or x.ndim != 3:
            raise KernelError(f"{label}: X must be a 3-D float32 tensor, got {x.dtype} {tuple(x.shape)}")
        qw = pre_w or weights("W", (w, w_scale, w_zp), None)
        qr = pre_r or weights("R", (r, r_scale, r_zp), H)
        T, nb = x.shape[0], x.shape[1]
        # X is quantized once, over the time steps any sequence reaches
        lens = None if seq_lens is None else np.asarray(seq_lens).astype(np.int64).reshape(-1)
        t_max = T if lens is None or lens.size == 0 else int(np.clip(lens.max(), 0, T))
        seen = x[:t_max]
        lo, hi = (seen.min(), seen.max()) if seen.size else (0, 0)
        x_scale, x_zp = _quant_params(lo, hi)
        # rnn.py's RnnSequence takes W and R in the ONNX layout (D, 4H, K): transposed views
        seq = RnnSequence(cfg, _quantized_shifted(x, x_scale, x_zp), qw.shifted.transpose(0, 2, 1),
                        qr.shifted.transpose(0, 2, 1), None, seq_lens, fold_bias=1.0)
        x_mult = (x_scale * qw.scale).astype(_F32)  # (D, 1, 4H or 1)
        r_int = qr.shifted  # (D, H, 4H): h @ r
        bias = None
        if b is not None:
            if b.shape != (D, 8 * H) or b.dtype != np.float32:
                raise KernelError(f"{label}: B must be float32 of shape {(D, 8 * H)}, got {b.dtype} {b.shape}")
            bias = (b[:, :4 * H] + b[:, 4 * H:]).astype(_F32)[:, None, :]
        peep = None
        if p is not None:
            if p.shape != (D, 3 * H) or p.dtype != np.float32:
                raise KernelError(f"{label}: P must be float32 of shape {(D, 3 * H)}, got {p.dtype} {p.shape}")
            pc = p[:, None, :]
            peep = (pc[..., :H], pc[..., H:2 * H], pc[..., 2 * H:])  # i, o, f
        h_axes = (2,) if _rows_apart(nb, H) else (1, 2)
        # per step: rows whose sequence ended before it (onnxruntime reads their H back from Y, zeroed)
        dead = None if seq.valid is None or not want_y else ~seq.valid[:, 0]
        step_no = [0]

        def part(gates, k, extra=None):
            out = gates[..., k * H:(k + 1) * H]
            if extra is not None:
                out += extra
            if bias is not None:
                out += bias[..., k * H:(k + 1) * H]
            return cfg.clipped(out)

        def step(xw, h, c):
            s = step_no[0]
            step_no[0] += 1
            gates = xw.astype(_F32) * x_mult
            if dead is not None and s > 0:
                h = np.where(dead[s - 1], _F32(0), h)
            h_scale, h_zp = _quant_params(h.min(axis=h_axes, keepdims=True), h.max(axis=h_axes, keepdims=True))
            acc = np.matmul(_quantized_shifted(h, h_scale, h_zp), r_int)
            gates += acc.astype(_F32) * (h_scale * qr.scale).astype(_F32)
            i = f(part(gates, 0, None if peep is None else peep[0] * c))
            if input_forget:
                fg = _F32(1) - i
            else:
                fg = f(part(gates, 2, None if peep is None else peep[2] * c))
            c_new = (fg * c + i * g(part(gates, 3))).astype(_F32)
            o = f(part(gates, 1, None if peep is None else peep[1] * c_new))
            return (o * h_act(c_new)).astype(_F32), c_new

        for name, v in (("initial_h", h0), ("initial_c", c0)):
            if v is not None and v.dtype != np.float32:
                raise KernelError(f"{label}: {name} must be float32, got {v.dtype}")
        states = tuple(seq.initial(cfg, name, v).astype(_F32) for name, v in
                       (("initial_h", h0), ("initial_c", c0)))
        y, states = seq.run(cfg, step, states)
        if seq.lens is not None and not seq.lens.all():  # onnxruntime zeroes the states of empty sequences
            states = tuple(np.where((seq.lens == 0)[:, None], _F32(0), st) for st in states)
        return tuple(None if v is None else v.astype(_F32) for v in seq.outputs(cfg, y, states))

    return kernel
