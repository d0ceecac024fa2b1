"""The bench's models: the onnx wheel's light models by name, and models built here with onnx.helper.

Built models (seeded random weights, batch 1) keep the node forms a PyTorch export produces, since the
optimizer's fusions are written against exactly these forms: BERT and GPT-2 encoder/decoder stacks, a
stacked LSTM, a chain of tiny Adds (dispatch overhead), a seeded ResNet-18. Builders take their sizes
as arguments so that tests can build small versions; nothing here times or runs anything.
"""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = ["resnet50", "densenet121", "inception_v2", "squeezenet", "shufflenet", "vgg19"]
CONV = [*LIGHT_MODELS, "resnet18_seeded", "demo"]
TRANSFORMERS = ["bert", "gpt2"]
DEFAULT = [*CONV, *TRANSFORMERS, "lstm", "gru", "adds1000"]
OPSET = 17


class _Builder:
    """Collects nodes and initializers under unique names, PyTorch-export style."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, prefix: str, value, dtype=np.float32) -> str:
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op_type) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(f"/{op_type}"), **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(self, x: str, cin: int, cout: int, std: float = 0.02) -> str:
        """``Add(MatMul(x, W), b)`` with W stored [in, out], as torch.nn.Linear exports."""
        w = self.const("weight", self.rng.normal(0.0, std, (cin, cout)))
        b = self.const("bias", self.rng.normal(0.0, std, cout))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layer_norm(self, x: str, hidden: int, eps: float) -> str:
        """The decomposed LayerNorm of an opset-17 PyTorch export (ReduceMean axes as attribute)."""
        m = self.op("ReduceMean", [x], axes=[-1])
        d = self.op("Sub", [x, m])
        p = self.op("Pow", [d, self.const("two", 2.0)])
        v = self.op("ReduceMean", [p], axes=[-1])
        e = self.op("Add", [v, self.const("eps", eps)])
        s = self.op("Sqrt", [e])
        n = self.op("Div", [d, s])
        gamma = self.const("gamma", self.rng.uniform(0.8, 1.2, hidden))
        beta = self.const("beta", self.rng.normal(0.0, 0.05, hidden))
        return self.op("Add", [self.op("Mul", [n, gamma]), beta])

    def heads(self, x: str, heads: int, head_dim: int, perm: list[int]) -> str:
        shape = self.const("shape", [0, 0, heads, head_dim], np.int64)
        return self.op("Transpose", [self.op("Reshape", [x, shape])], perm=perm)

    def merge_heads(self, x: str, hidden: int) -> str:
        t = self.op("Transpose", [x], perm=[0, 2, 1, 3])
        return self.op("Reshape", [t, self.const("shape", [0, 0, hidden], np.int64)])

    def output(self, value: str, name: str) -> None:
        """Rename ``value`` (the last node's output) to the graph output ``name``, as exporters do."""
        last = self.nodes[-1]
        if last.output[0] != value:
            raise ValueError(f"graph output '{value}' must come from the last node")
        last.output[0] = name

    def model(self, name: str, inputs: list, outputs: list) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="ort-core bench")
        model.ir_version = 8
        return model


def _float(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def bert(layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, seq: int = 128,
         batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """A BERT-base encoder stack (post-LN, erf GELU) from the embedding output ``x`` (batch, seq, hidden)
    and the additive attention ``mask`` (batch, 1, 1, seq): 0 for tokens, -10000 for padding."""
    b = _Builder(seed)
    d = hidden // heads
    x = "x"
    for _ in range(layers):
        q = b.heads(b.linear(x, hidden, hidden), heads, d, [0, 2, 1, 3])
        k = b.heads(b.linear(x, hidden, hidden), heads, d, [0, 2, 3, 1])
        v = b.heads(b.linear(x, hidden, hidden), heads, d, [0, 2, 1, 3])
        s = b.op("Div", [b.op("MatMul", [q, k]), b.const("scale", math.sqrt(d))])
        p = b.op("Softmax", [b.op("Add", [s, "mask"])], axis=-1)
        c = b.merge_heads(b.op("MatMul", [p, v]), hidden)
        o = b.linear(c, hidden, hidden)
        h = b.layer_norm(b.op("Add", [o, x]), hidden, 1e-12)
        f = b.linear(h, hidden, ffn)
        erf = b.op("Erf", [b.op("Div", [f, b.const("sqrt2", 1.4142135)])])
        gelu = b.op("Mul", [b.op("Mul", [f, b.op("Add", [erf, b.const("one", 1.0)])]), b.const("half", 0.5)])
        g = b.linear(gelu, ffn, hidden)
        x = b.layer_norm(b.op("Add", [g, h]), hidden, 1e-12)
    b.output(x, "y")
    return b.model("bert", [_float("x", [batch, seq, hidden]), _float("mask", [batch, 1, 1, seq])],
                   [_float("y", [batch, seq, hidden])])


def gpt2(layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, seq: int = 128,
         batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """A GPT-2 decoder stack (pre-LN, fused QKV projection split in three, causal Where mask, tanh
    GELU, final LayerNorm) from the embedding output ``x`` (batch, seq, hidden) to the hidden state."""
    b = _Builder(seed)
    d = hidden // heads
    causal = b.const("causal_mask", np.tril(np.ones((seq, seq), dtype=bool))[None, None], bool)
    x = "x"
    for _ in range(layers):
        a = b.layer_norm(x, hidden, 1e-5)
        qkv = b.linear(a, hidden, 3 * hidden)
        q, k, v = b.op("Split", [qkv, b.const("split", [hidden] * 3, np.int64)], n_out=3, axis=2)
        q = b.heads(q, heads, d, [0, 2, 1, 3])
        k = b.heads(k, heads, d, [0, 2, 3, 1])
        v = b.heads(v, heads, d, [0, 2, 1, 3])
        s = b.op("Div", [b.op("MatMul", [q, k]), b.const("scale", math.sqrt(d))])
        s = b.op("Where", [causal, s, b.const("masked_bias", -1e4)])
        p = b.op("Softmax", [s], axis=-1)
        c = b.merge_heads(b.op("MatMul", [p, v]), hidden)
        x = b.op("Add", [x, b.linear(c, hidden, hidden)])
        m = b.layer_norm(x, hidden, 1e-5)
        f = b.linear(m, hidden, ffn)
        cube = b.op("Mul", [b.const("c", 0.044715), b.op("Pow", [f, b.const("three", 3.0)])])
        inner = b.op("Mul", [b.const("sqrt_2_over_pi", 0.7978845608), b.op("Add", [f, cube])])
        gelu = b.op("Mul", [b.op("Mul", [b.const("half", 0.5), f]),
                            b.op("Add", [b.const("one", 1.0), b.op("Tanh", [inner])])])
        x = b.op("Add", [x, b.linear(gelu, ffn, hidden)])
    y = b.layer_norm(x, hidden, 1e-5)
    b.output(y, "y")
    return b.model("gpt2", [_float("x", [batch, seq, hidden])], [_float("y", [batch, seq, hidden])])


def _recurrent(op: str, gates: int, n_out: int, seq: int, batch: int, input_size: int, hidden: int, layers: int,
               seed: int, **attrs) -> onnx.ModelProto:
    """Stacked unidirectional ONNX ``op`` layers (``gates`` gate blocks in W and R; biases Wb and Rb), X (seq,
    batch, input_size) to the last layer's Y squeezed to (seq, batch, hidden)."""
    b = _Builder(seed)
    x, cin = "x", input_size
    scale = 1.0 / math.sqrt(hidden)
    for _ in range(layers):
        w = b.const("W", b.rng.uniform(-scale, scale, (1, gates * hidden, cin)))
        r = b.const("R", b.rng.uniform(-scale, scale, (1, gates * hidden, hidden)))
        bias = b.const("B", b.rng.uniform(-scale, scale, (1, 2 * gates * hidden)))
        y = b.op(op, [x, w, r, bias], n_out=n_out, hidden_size=hidden, **attrs)[0]  # Y (seq, 1, batch, hidden)
        x, cin = b.op("Squeeze", [y, b.const("axes", [1], np.int64)]), hidden
    b.output(x, "y")
    return b.model(op.lower(), [_float("x", [seq, batch, input_size])], [_float("y", [seq, batch, hidden])])


def lstm(seq: int = 128, batch: int = 1, input_size: int = 256, hidden: int = 512, layers: int = 2,
         seed: int = 0) -> onnx.ModelProto:
    """Stacked unidirectional ONNX LSTMs (gates iofc, biases Wb and Rb)."""
    return _recurrent("LSTM", 4, 3, seq, batch, input_size, hidden, layers, seed)


def gru(seq: int = 128, batch: int = 1, input_size: int = 256, hidden: int = 512, layers: int = 2,
        seed: int = 0) -> onnx.ModelProto:
    """Stacked unidirectional ONNX GRUs as PyTorch exports them (gates zrh, linear_before_reset=1)."""
    return _recurrent("GRU", 3, 2, seq, batch, input_size, hidden, layers, seed, linear_before_reset=1)


def add_chain(nodes: int = 1000, width: int = 16, seed: int = 0) -> onnx.ModelProto:
    """``nodes`` tiny Adds on a (1, width) tensor: odd steps add a distinct constant, even steps add the
    graph input again, so no two constants meet and no folding (or re-association) can shrink it."""
    b = _Builder(seed)
    y = "x"
    for k in range(nodes):
        other = b.const("c", b.rng.uniform(-1e-3, 1e-3, width)) if k % 2 == 0 else "x"
        y = b.op("Add", [y, other])
    b.output(y, "y")
    return b.model(f"adds{nodes}", [_float("x", [1, width])], [_float("y", [1, width])])


def resnet18_seeded(seed: int = 0) -> onnx.ModelProto:
    """A ResNet-18 (Conv-BatchNorm-Relu, residual Adds, 224x224 input) with seeded random weights.

    The light models' weights are constants (every channel alike), which hides numeric
    differences; He-initialised weights and random BatchNorm statistics do not.
    """
    b = _Builder(seed)
    rng = b.rng

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int, relu: bool = True) -> str:
        w = b.const("w", rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k)))
        c = b.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        bn = [b.const("g", rng.uniform(0.5, 1.0, cout)), b.const("b", rng.normal(0, 0.1, cout)),
              b.const("m", rng.normal(0, 0.1, cout)), b.const("v", rng.uniform(0.5, 1.5, cout))]
        y = b.op("BatchNormalization", [c, *bn], epsilon=1e-5)
        return b.op("Relu", [y]) if relu else y

    def block(x: str, cin: int, cout: int, stride: int) -> str:
        y = conv_bn(conv_bn(x, cin, cout, 3, stride), cout, cout, 3, 1, relu=False)
        skip = x if stride == 1 and cin == cout else conv_bn(x, cin, cout, 1, stride, relu=False)
        return b.op("Relu", [b.op("Add", [y, skip])])

    x = conv_bn("input", 3, 64, 7, 2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        x = block(block(x, cin, cout, stride), cout, cout, 1)
        cin = cout
    f = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    w = b.const("fc_w", rng.standard_normal((1000, 512)) * np.sqrt(1.0 / 512))
    bias = b.const("fc_b", rng.normal(0, 0.01, 1000))
    b.nodes.append(helper.make_node("Gemm", [f, w, bias], ["logits"], transB=1, name="/fc"))
    return b.model("resnet18_seeded", [_float("input", [1, 3, 224, 224])], [_float("logits", [1, 1000])])


BUILDERS = {"resnet18_seeded": resnet18_seeded, "bert": bert, "gpt2": gpt2, "lstm": lstm, "gru": gru,
            "adds1000": lambda: add_chain(1000)}


def resolve(model: str, folder: str) -> str:
    """A model name or path -> a file path; built models are saved into ``folder`` once."""
    if model == "demo":
        from ort_core.cli import demo_model_path

        return demo_model_path()
    if model in BUILDERS:
        path = os.path.join(folder, f"{model}.onnx")
        if not os.path.exists(path):
            onnx.save(BUILDERS[model](), path)
        return path
    if os.path.exists(model):
        return model
    path = os.path.join(LIGHT, f"light_{model}.onnx")
    if not os.path.exists(path):
        known = sorted(f[6:-5] for f in os.listdir(LIGHT) if f.startswith("light_") and f.endswith(".onnx"))
        raise SystemExit(f"unknown model '{model}': not a file, not one of {['demo', *BUILDERS]} and not a light "
                         f"model in {LIGHT} ({', '.join(known)})")
    return path


def feeds(inputs, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for a session's ``get_inputs()``; an input named ``mask`` gets an additive attention
    mask (0 for the tokens, -10000 for the last eighth, the padding) instead of noise."""
    from ort_core.cli import random_input

    rng = np.random.default_rng(seed)
    out = {}
    for arg in inputs:
        if arg.name == "mask":
            shape = [d if isinstance(d, int) else 1 for d in arg.shape]
            mask = np.zeros(shape, np.float32)
            mask[..., shape[-1] - max(1, shape[-1] // 8):] = -10000.0
            out[arg.name] = mask
        else:
            out[arg.name] = random_input(arg, rng)
    return out
