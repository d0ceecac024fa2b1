"""Attention fusion (CPU extended level): BERT-style (three projections) and GPT-2-style (one packed
projection + Split) self-attention subgraphs as PyTorch exports them become one attention node with the
Q/K/V weights packed once (the q.k scale folded into Q). Cross-attention is left alone.

The node is onnxruntime's ``com.microsoft::Attention`` (``scale`` 1, the scale being in the weights)
when it can take the mask: none, a constant causal ``Where`` condition (``unidirectional``), an additive
mask of shape (B or 1, H or 1, S, S) (its ``attention_bias``), BERT's ``(1 - keep[:, None, None, :]) * c``
over a 2-D key mask (its ``mask_index``, cast to int32 once, with ``mask_filter_value`` c). Other masks (an
additive (B, 1, 1, S) mask fed as an input, for one) make ``ort_core::SelfAttention``
(providers/cpu/ops/fused_transformer.py).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..ir.graph import Node
from .gelu_fusion import scaled
from .rewrite import CONTRIB, DOMAIN, Matcher, fresh_name

HEADS, KEYS_T = [0, 2, 1, 3], [0, 2, 3, 1]


class Scores(NamedTuple):
    """What feeds the Softmax: MatMul(q, k) -> [* factor] -> [Where(cond, ., fill)] -> [Add(., mask)]."""

    qk: Node
    factor: float
    mask: str
    cond: str
    fill: str
    nodes: list[Node]


def fuse_attention(m: Matcher) -> int:
    count, freed = 0, set()
    for node in list(m.graph.nodes):
        if m.eligible(node, "Softmax") and int(node.attr("axis", -1 if m.model.opset() >= 13 else 1)) in (-1, 3):
            for scores in _score_chains(m, node.inputs[0]):
                found = _match(m, node, scores)
                if found is not None:
                    nodes, inputs, out, heads = found
                    op, domain, inputs, attrs = _node_for(m, inputs, heads)
                    if m.replace(nodes, op, inputs, [out], attrs, domain=domain) is not None:
                        count += 1
                        freed.update(i for n in nodes for i in n.inputs)
                    break
    m.drop_unread(freed)  # the reshape targets read off shapes (reshape_target) fed only the fused nodes
    return count


def _node_for(m: Matcher, inputs: list[str], heads: int) -> tuple[str, str, list[str], dict]:
    """(op type, domain, inputs, attributes) of the fused node, from ``[x, weight, bias, mask, cond, fill]``:
    onnxruntime's Attention where it can take the mask, else ort-core's SelfAttention."""
    x, weight, bias, mask, cond, fill = inputs
    causal = bool(cond) and _causal(m, cond, fill)
    if not cond or causal:
        attrs = {"num_heads": heads, "scale": 1.0, **({"unidirectional": 1} if causal else {})}
        if not mask or _attention_bias(m, mask, x, heads):
            return "Attention", CONTRIB, _trimmed([x, weight, bias, "", "", mask]), attrs
        keep = _key_mask(m, mask, x)
        if keep is not None and m.makes("Attention", CONTRIB):
            raw, fill_value = keep
            attrs["mask_filter_value"] = fill_value
            return "Attention", CONTRIB, [x, weight, bias, _as_int32(m, raw)], attrs
    return "SelfAttention", DOMAIN, _trimmed(inputs), {"num_heads": heads}


def _key_mask(m: Matcher, mask: str, x: str) -> tuple[str, float] | None:
    """(keep, c) when the additive mask is ``(1 - keep[:, None, None, :]) * c`` over a 2-D (B, S) 0/1 mask
    of the keys, as BERT exports compute it: onnxruntime's Attention takes ``keep`` as its mask_index (a key
    whose mask is 0 gets ``mask_filter_value`` = c added to its scores), which is the same for 0/1 masks."""
    found = scaled(m, m.producer(mask, "Mul"))
    sub = m.producer(found[0], "Sub") if found is not None else None
    if sub is None or m.scalar(sub.inputs[0]) != 1.0:
        return None
    src = sub.inputs[1]
    if (cast := m.producer(src, "Cast")) is not None:
        src = cast.inputs[0]
    axes: list[int] = []
    while (unsqueeze := m.producer(src, "Unsqueeze")) is not None:
        step = unsqueeze.attr("axes")
        if step is None and len(unsqueeze.inputs) > 1:
            step = m.const(unsqueeze.inputs[1])
        if step is None:
            return None
        axes = [int(a) for a in np.asarray(step).reshape(-1)] + axes
        src = unsqueeze.inputs[0]
    shape, x_shape = m.shape(src), m.shape(x)
    if sorted(axes) != [1, 2] or shape is None or x_shape is None or len(shape) != 2:
        return None
    if shape[0] != x_shape[0] or shape[1] != x_shape[1]:
        return None
    return src, found[1]


def _as_int32(m: Matcher, name: str) -> str:
    """``name`` as int32 (the type of onnxruntime's mask_index): itself, a Cast to int32 of it already in the
    graph (the one made for an earlier layer), or a new one."""
    t = m.graph.type_of(name)
    if t is not None and t.elem_type == 6:
        return name
    for reader in m.readers(name):
        if reader.op_type == "Cast" and reader.attr("to") == 6:
            return reader.outputs[0]
    out = fresh_name(m.graph, f"{name}_int32")
    cast = Node("Cast", [name], [out], {"to": 6}, name=f"{name}_mask_index", id=max(m.by_id, default=0) + 1)
    producer = m.producers.get(name)
    at = m.graph.nodes.index(producer) + 1 if producer is not None else 0
    m.graph.nodes.insert(at, cast)
    m.by_id[cast.id] = cast
    m.producers[out] = cast
    m.consumers.setdefault(name, []).append(cast)
    return out


def _trimmed(inputs: list[str]) -> list[str]:
    while inputs and not inputs[-1]:
        inputs = inputs[:-1]
    return inputs


def _causal(m: Matcher, cond: str, fill: str) -> bool:
    """A constant lower-triangular condition over (S, S) (leading axes of one) with a fill low enough
    that softmax gives the hidden keys exactly 0, as onnxruntime's ``unidirectional`` does."""
    c, low = m.const(cond), m.scalar(fill)
    if c is None or low is None or low > -1e4 or c.dtype != np.bool_ or c.ndim < 2 or c.ndim > 4:
        return False
    if any(d != 1 for d in c.shape[:-2]) or c.shape[-1] != c.shape[-2]:
        return False
    return bool(np.array_equal(c.reshape(c.shape[-2:]), np.tri(c.shape[-1], dtype=bool)))


def _attention_bias(m: Matcher, mask: str, x: str, heads: int) -> bool:
    """An additive mask onnxruntime's Attention takes as its attention_bias: (B or 1, H or 1, S, S)."""
    shape, x_shape = m.shape(mask), m.shape(x)
    if shape is None or x_shape is None or len(shape) != 4:
        return False
    batch, seq = x_shape[0], x_shape[1]
    return shape[0] in (1, batch) and shape[1] in (1, heads) and shape[2] == seq and shape[3] == seq


def _score_chains(m: Matcher, name: str):
    """The candidate readings of Softmax's input (which Add operand is the mask is tried both ways)."""
    add = m.producer(name, "Add")
    if add is not None and len(add.inputs) == 2:
        for i in (0, 1):
            for s in _masked(m, add.inputs[i]):
                yield s._replace(mask=add.inputs[1 - i], nodes=[*s.nodes, add])
    yield from _masked(m, name)


def _masked(m: Matcher, name: str):
    where = m.producer(name, "Where")
    if where is not None:
        qk, factor, nodes = _scaled(m, where.inputs[1])
        if qk is not None:
            yield Scores(qk, factor, "", where.inputs[0], where.inputs[2], [*nodes, where])
    qk, factor, nodes = _scaled(m, name)
    if qk is not None:
        yield Scores(qk, factor, "", "", "", nodes)


def factor_of(m: Matcher, n: Node | None) -> tuple[str, float] | None:
    """(operand, factor) of a multiplication or division by a one-element constant, else None."""
    if n is not None and n.op_type == "Div" and m.scalar(n.inputs[1]) and m.const(n.inputs[0]) is None:
        return n.inputs[0], 1.0 / m.scalar(n.inputs[1])
    return scaled(m, n) if n is not None and n.op_type == "Mul" else None


def _scaled(m: Matcher, name: str) -> tuple[Node | None, float, list[Node]]:
    """Walk back over multiplications/divisions by constants to a MatMul: (matmul, factor, nodes)."""
    factor, nodes = 1.0, []
    while (s := factor_of(m, n := m.producer(name, "Mul", "Div"))) is not None:
        name, factor = s[0], factor * s[1]
        nodes.append(n)
    mm = m.producer(name, "MatMul")
    return mm, factor, [*nodes, mm] if mm is not None else nodes


def _transposed(m: Matcher, name: str, perm: list[int]) -> tuple[Node | None, list[Node]]:
    """The Transpose (or, for keys, Transpose pair) giving ``name`` with ``perm``: (first one, nodes)."""
    t = m.producer(name, "Transpose")
    if t is not None and list(t.attr("perm") or []) == perm:
        return t, [t]
    if t is not None and perm == KEYS_T and list(t.attr("perm") or []) == [0, 1, 3, 2]:
        inner = m.producer(t.inputs[0], "Transpose")
        if inner is not None and list(inner.attr("perm") or []) == HEADS:
            return inner, [inner, t]
    return None, []


def _head(m: Matcher, name: str, perm: list[int]):
    """Transpose(Reshape(p, (B, S, H, D)), perm), possibly times a constant before or after the reshape:
    (p, (H, D), factor, nodes, reshape target) or None."""
    factor, nodes = 1.0, []
    t, tn = _transposed(m, name, perm)
    if t is None and (s := factor_of(m, n := m.producer(name, "Mul", "Div"))) is not None:
        factor, nodes = s[1], [n]
        t, tn = _transposed(m, s[0], perm)
    r = m.producer(t.inputs[0], "Reshape") if t is not None else None
    target = reshape_target(m, r.inputs[1]) if r is not None and len(r.inputs) > 1 else None
    if target is None or len(target) != 4 or int(r.attr("allowzero", 0)) != 0 or \
            not all(isinstance(d, int) and d > 0 for d in target[2:]):
        return None
    nodes += [*tn, r]
    source = r.inputs[0]
    if (s := factor_of(m, n := m.producer(source, "Mul", "Div"))) is not None:
        source, factor = s[0], factor * s[1]
        nodes.append(n)
    return source, (int(target[2]), int(target[3])), factor, nodes, target


def _projection(m: Matcher, name: str):
    """(x, weight, bias or None, nodes) for MatMul(x, W) [+ b] with constant 2-D W and 1-D b."""
    nodes, bias = [], None
    add = m.producer(name, "Add")
    if add is not None and len(add.inputs) == 2:
        for i in (1, 0):
            b = m.const(add.inputs[i])
            if b is not None and b.ndim == 1 and m.producer(add.inputs[1 - i], "MatMul") is not None:
                name, bias, nodes = add.inputs[1 - i], b, [add]
                break
    mm = m.producer(name, "MatMul")
    w = m.const(mm.inputs[1]) if mm is not None else None
    if w is None or w.ndim != 2 or m.const(mm.inputs[0]) is not None:
        return None
    if bias is not None and (bias.shape[0] != w.shape[1] or bias.dtype != w.dtype):
        return None
    return mm.inputs[0], w, bias, [*nodes, mm]


def _projections(m: Matcher, names: list[str]):
    """[(x, W, b)] for q, k, v and the nodes: three projections, or one packed projection split in three."""
    split = m.producer(names[0], "Split")
    if split is not None:
        if split.outputs != names or not _even_split(m, split):
            return None
        found = _projection(m, split.inputs[0])
        if found is None or found[1].shape[1] % 3:
            return None
        x, w, b, nodes = found
        n = w.shape[1] // 3
        parts = [(x, w[:, i * n:(i + 1) * n], None if b is None else b[i * n:(i + 1) * n]) for i in range(3)]
        return parts, [*nodes, split]
    found = [_projection(m, name) for name in names]
    if any(f is None for f in found):
        return None
    return [f[:3] for f in found], [n for f in found for n in f[3]]


def _even_split(m: Matcher, split: Node) -> bool:
    shape = m.shape(split.inputs[0])
    axis = int(split.attr("axis", 0))
    if shape is None or len(shape) != 3 or axis not in (-1, 2) or len(split.outputs) != 3:
        return False
    sizes = split.attr("split")
    if sizes is None and len(split.inputs) > 1 and split.inputs[1]:
        sizes = m.const(split.inputs[1])
        if sizes is None:
            return False
    return sizes is None or len(set(int(s) for s in np.asarray(sizes).reshape(-1))) == 1


def reshape_target(m: Matcher, name: str) -> list | None:
    """A Reshape's target as a list: constant ints, or read off a Concat of one-element pieces (as exports
    compute ``view(batch, seq, heads, -1)``), each a constant or ``Unsqueeze(Gather(Shape(src), i), [0])``,
    which stands as ``(src, i)``; None for anything else."""
    c = m.const(name)
    if c is not None:
        return [int(v) for v in c.reshape(-1)] if c.ndim == 1 and c.dtype.kind in "iu" else None
    concat = m.producer(name, "Concat")
    if concat is None or int(concat.attr("axis", 0)) not in (0, -1):
        return None
    target: list = []
    for piece in concat.inputs:
        c = m.const(piece)
        if c is not None and c.ndim == 1 and c.dtype.kind in "iu":
            target += [int(v) for v in c]
            continue
        dim = _shape_dim(m, piece)
        if dim is None:
            return None
        target.append(dim)
    return target


def _shape_dim(m: Matcher, name: str) -> tuple[str, int] | None:
    """(src, i) when ``name`` is ``Unsqueeze(Gather(Shape(src), i), [0])`` (dim i of src as a 1-D value)."""
    unsqueeze = m.producer(name, "Unsqueeze")
    if unsqueeze is None:
        return None
    axes = unsqueeze.attr("axes")
    if axes is None and len(unsqueeze.inputs) > 1:
        axes = m.const(unsqueeze.inputs[1])
    gather = m.producer(unsqueeze.inputs[0], "Gather")
    if axes is None or [int(a) for a in np.asarray(axes).reshape(-1)] != [0] or gather is None:
        return None
    shape, index = m.producer(gather.inputs[0], "Shape"), m.const(gather.inputs[1])
    if shape is None or index is None or index.shape != () or int(gather.attr("axis", 0)) != 0:
        return None
    if int(shape.attr("start", 0)) != 0 or int(index) < 0:
        return None
    return shape.inputs[0], int(index)


def _resolves(m: Matcher, target: list, expected: list, x: str) -> bool:
    """Whether Reshape to ``target`` gives ``expected`` (ints; symbolic batch/sequence dims as None) for
    an input whose leading dims are those of ``expected`` (x's): 0 copies, one -1 is inferred, others must
    equal; a dim read off a shape (``reshape_target``) must be x's own dim at that place."""
    if target.count(-1) > 1:
        return False
    for i, (t, e) in enumerate(zip(target, expected)):
        if isinstance(t, tuple):
            if i >= 2 or not _same_dim(m, t, x, i):
                return False
        elif t == 0 and i >= 2 or t > 0 and t != e or t < -1:
            return False
    return True


def _same_dim(m: Matcher, dim: tuple[str, int], x: str, i: int) -> bool:
    """Whether dim ``dim[1]`` of ``dim[0]`` is x's dim ``i``: x itself, or a value of the same symbolic or
    static dim there."""
    src, j = dim
    if src == x:
        return i == j
    a, b = m.shape(src), m.shape(x)
    return a is not None and b is not None and j < len(a) and i < len(b) and a[j] == b[i] and a[j] is not None


def _match(m: Matcher, softmax: Node, scores: Scores):
    qk, factor, mask, cond, fill, nodes = scores
    probs = softmax.outputs[0]
    pv = m.sole_reader(probs, "MatMul")
    back = m.sole_reader(pv.outputs[0], "Transpose") if pv is not None and pv.inputs[0] == probs else None
    out_reshape = m.sole_reader(back.outputs[0], "Reshape") if back is not None else None
    if out_reshape is None or list(back.attr("perm") or []) != HEADS or int(out_reshape.attr("allowzero", 0)):
        return None
    heads = [_head(m, qk.inputs[0], HEADS), _head(m, qk.inputs[1], KEYS_T), _head(m, pv.inputs[1], HEADS)]
    if any(h is None for h in heads) or len({h[1] for h in heads}) != 1 or heads[2][2] != 1.0:
        return None
    found = _projections(m, [h[0] for h in heads])
    if found is None:
        return None
    parts, proj_nodes = found
    (n_heads, size), x = heads[0][1], parts[0][0]
    shape = m.shape(x)
    width = n_heads * size
    if shape is None or len(shape) != 3 or any(p[0] != x or p[1].shape[1] != width for p in parts):
        return None
    if parts[0][1].dtype not in (np.float32, np.float64) or len({p[1].dtype for p in parts}) != 1:
        return None
    batch, seq = (d if isinstance(d, int) else None for d in shape[:2])
    target = reshape_target(m, out_reshape.inputs[1]) if len(out_reshape.inputs) > 1 else None
    if target is None or len(target) != 3 or not _resolves(m, target, [batch, seq, width], x):
        return None
    if not all(_resolves(m, h[4], [batch, seq, n_heads, size], x) for h in heads):
        return None
    everything = [*proj_nodes, *[n for h in heads for n in h[3]], *nodes, softmax, pv, back, out_reshape]
    out = out_reshape.outputs[0]
    if not m.closed(everything, {out}, [x, mask, cond, fill]):
        return None
    factor *= heads[0][2] * heads[1][2]
    dtype = parts[0][1].dtype
    w = np.concatenate([parts[0][1] * dtype.type(factor), parts[1][1], parts[2][1]], axis=1)
    inputs = [x, m.add_constant(f"{out}_qkv_weight", w.astype(dtype, copy=False)), "", mask, cond, fill]
    if any(p[2] is not None for p in parts):
        b = [p[2] if p[2] is not None else np.zeros(width, dtype) for p in parts]
        inputs[2] = m.add_constant(f"{out}_qkv_bias", np.concatenate([b[0] * dtype.type(factor), *b[1:]]))
    return everything, inputs, out, n_heads
