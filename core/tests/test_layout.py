"""A provider's preferred layout (``Preferences.layout = "NHWC"``, optimizer/layout.py): the layout-sensitive ops it
claims reach its compile as channels-last ops of domain com.ms.internal.nhwc, and the Transposes between the
layouts cancel where its nodes meet. A fake provider that prefers NHWC records what it compiles and computes each
node with the CPU provider's kernels (the channels-last ones included); every result is checked against a session
on the CPU provider alone."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.optimizer.layout import NHWC_DOMAIN

from .conftest import load_fake_plugin, make_model

NAME = "ChannelsLastExecutionProvider"
pytestmark = pytest.mark.filterwarnings("ignore:provider assignment")

# Claims Conv, the pools, BatchNormalization, Relu, Add, Mul, Concat, Transpose (and the channels-last forms);
# "decline" lists op types it leaves to the CPU provider, "hand_back" makes compile hand every subgraph back,
# "layout" is what it prefers.
CHANNELS_LAST_SRC = """
    from ort_core.plugins import Capability, ExecutionProvider, Preferences, ProviderInfo, UnsupportedSubgraph, hookimpl
    from ort_core.providers.cpu import registry

    NAME = "ChannelsLastExecutionProvider"
    INFO = ProviderInfo(NAME, description="test", version="0.0.1",
                        options={"decline": "", "hand_back": "0", "layout": "NHWC"})
    OPS = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Relu", "Add", "Mul", "Transpose", "Concat",
           "BatchNormalization"}
    EVENTS = []


    class ChannelsLastProvider(ExecutionProvider):
        def preferences(self):
            return Preferences(layout=self.options.get("layout", "NHWC"))

        def get_capability(self, graph):
            declined = set(filter(None, self.options.get("decline", "").split(",")))
            ids = [n.id for n in graph.nodes() if n.op_type in OPS and n.op_type not in declined]
            return Capability(tuple(ids), {n.id: "not taken" for n in graph.nodes() if n.id not in ids})

        def compile(self, subgraphs):
            kernels = []
            for sub in subgraphs:
                EVENTS.append([(n.domain, n.op_type) for n in sub.nodes])
                if self.options.get("hand_back") == "1":
                    kernels.append(UnsupportedSubgraph("handed back for the test"))
                    continue
                steps = [(registry.lookup(n.domain, n.op_type, sub.opsets.get(n.domain or "", 17))
                          .build(n, sub.opsets.get(n.domain or "", 17), sub.graph), n) for n in sub.nodes]
                kernels.append(self._kernel(steps, list(sub.inputs), list(sub.outputs)))
            return kernels

        @staticmethod
        def _kernel(steps, inputs, outputs):
            def kernel(*xs):
                env = dict(zip(inputs, xs))
                for run, n in steps:
                    for name, value in zip(n.outputs, run(*[env[i] if i else None for i in n.inputs])):
                        env[name] = value
                return [env[o] for o in outputs]

            return kernel


    @hookimpl
    def ort_register_providers():
        return [INFO]


    @hookimpl
    def ort_create_provider(provider, options, session):
        return ChannelsLastProvider(INFO, options, session)
"""

rng = np.random.default_rng(7)


@pytest.fixture
def channels_last(tmp_path, fresh_registry):
    return load_fake_plugin(tmp_path, fresh_registry, "channels_last", CHANNELS_LAST_SRC, "ort_ep_channels_last_mod")


def _w(name, *shape):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def residual_model(extra_output: str | None = None):
    """x -> Conv -> Relu (r1) -> Conv -> Add(r1) -> Mul(per-channel scale) -> Relu -> MaxPool -> GlobalAveragePool
    -> Flatten (the CPU provider's)."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
             helper.make_node("Mul", ["s", "scale"], ["m"], name="scale"),
             helper.make_node("Relu", ["m"], ["r2"], name="relu2"),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["y"], name="flatten")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, TensorProto.FLOAT, [2, 8, 12, 12]))
    inits = [_w("w1", 8, 3, 3, 3), _w("b1", 8), _w("w2", 8, 8, 3, 3), _w("scale", 8, 1, 1)]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])], outputs, inits)


def _both(model, options=None):
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    ours = ort.InferenceSession(model.SerializeToString(), providers=[(NAME, options or {}), "CPUExecutionProvider"])
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got, want = ours.run(None, {"x": x}), cpu.run(None, {"x": x})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    return ours


def test_a_residual_block_stays_channels_last_between_one_transpose_in_and_one_out(channels_last):
    sess = _both(residual_model())
    (compiled,) = channels_last.EVENTS
    ops = [op if domain == "" else f"{domain}::{op}" for domain, op in compiled]
    assert ops.count("Transpose") == 2 and ops[0] == "Transpose" and ops[-1] == "Transpose"
    assert [op for op in ops if op.startswith(NHWC_DOMAIN)] == [
        f"{NHWC_DOMAIN}::{op}" for op in ("Conv", "Conv", "MaxPool", "GlobalAveragePool")]
    assert sorted(op for op in ops if "::" not in op and op != "Transpose") == ["Add", "Mul", "Relu", "Relu"]
    assert [a.provider for a in sess.get_provider_graph_assignment_info()] == [NAME, "CPUExecutionProvider"]


def test_a_value_the_model_returns_keeps_its_layout(channels_last):
    _both(residual_model(extra_output="r1"))  # r1 sits between the two convolutions: returned as NCHW
    (compiled,) = channels_last.EVENTS
    ops = [op for _, op in compiled]
    assert ops.count("Transpose") == 3, " ".join(ops)  # in, out, and the one giving r1 back in NCHW


def test_nodes_left_to_another_provider_read_and_write_nchw(channels_last):
    _both(residual_model(), {"decline": "Add"})  # the residual Add runs on the CPU provider, between two subgraphs
    first, second = ([op for _, op in ops] for ops in channels_last.EVENTS)
    # x in; r1 and c2 out to the CPU provider's Add, in NCHW
    assert first == ["Transpose", "Conv", "Relu", "Transpose", "Conv", "Transpose"], first
    # Mul and Relu read the Add's NCHW sum as it is; one Transpose in before MaxPool, one out after the pool
    assert second == ["Mul", "Relu", "Transpose", "MaxPool", "GlobalAveragePool", "Transpose"], second


def test_a_subgraph_handed_back_runs_its_channels_last_nodes_on_the_cpu_provider(channels_last):
    sess = _both(residual_model(), {"hand_back": "1"})
    assert {a.provider for a in sess.get_provider_graph_assignment_info()} == {"CPUExecutionProvider"}


def test_nchw_is_the_default_and_other_layouts_are_refused(channels_last):
    _both(residual_model(), {"layout": "NCHW"})
    assert all(domain == "" for ops in channels_last.EVENTS for domain, _ in ops)
    assert not any(op == "Transpose" for ops in channels_last.EVENTS for _, op in ops)
    with pytest.warns(ort.OrtWarning, match="layout must be 'NCHW' or 'NHWC', got 'NCWH'"):
        sess = _both(residual_model(), {"layout": "NCWH"})
    assert {a.provider for a in sess.get_provider_graph_assignment_info()} == {"CPUExecutionProvider"}


def test_qdq_groups_are_left_as_they_are(channels_last):
    scale = numpy_helper.from_array(np.array(0.02, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    q = numpy_helper.from_array(rng.integers(-50, 50, (4, 3, 3, 3)).astype(np.int8), "wq")
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"]),
             helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Conv", ["xd", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 12, 12])], [scale, zero, q])
    _both(model)
    assert all(domain != NHWC_DOMAIN for ops in channels_last.EVENTS for domain, _ in ops)


def test_branches_concatenated_on_channels_stay_channels_last(channels_last):
    """Two convolutions of one input, concatenated on the channel axis, then a third: one Transpose of the input
    (shared), the Concat on the last axis, one Transpose out."""
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "wb"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Conv", ["c", "wc"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 12, 12])],
                       [_w("wa", 4, 3, 3, 3), _w("wb", 6, 3, 1, 1), _w("wc", 5, 10, 1, 1)])
    _both(model, {"decline": ""})
    (compiled,) = channels_last.EVENTS
    assert [op for _, op in compiled] == ["Transpose", "Conv", "Conv", "Concat", "Conv", "Transpose"], compiled


def test_a_long_chain_keeps_two_transposes():
    """The rewrite on 500 Conv + Relu pairs (one pass in node order): one Transpose in, one out."""
    from ort_core.ir.load import load_model
    from ort_core.optimizer.layout import to_channels_last

    nodes, prev = [], "x"
    for i in range(500):
        nodes += [helper.make_node("Conv", [prev, "w"], [f"c{i}"]), helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    model = load_model(make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                                  [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4, 6, 6])],
                                  [_w("w", 4, 4, 1, 1)]).SerializeToString())
    assert to_channels_last(model, {n.id for n in model.graph.nodes}) > 0
    ops = [(n.domain, n.op_type) for n in model.graph.nodes]
    assert ops.count(("", "Transpose")) == 2 and ops.count((NHWC_DOMAIN, "Conv")) == 500
    assert ops[0] == ("", "Transpose") and ops[-1] == ("", "Transpose")


def test_batch_normalization_before_a_convolution_stays_channels_last(channels_last):
    """DenseNet's BatchNormalization -> Relu -> Conv (a normalization the optimizer cannot fold into a preceding
    convolution): all three channels-last between one Transpose in and one out."""
    stats = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in
             (("sc", rng.uniform(0.5, 2, 3)), ("bi", rng.standard_normal(3)), ("mu", rng.standard_normal(3)),
              ("va", rng.uniform(0.5, 2, 3)))]
    nodes = [helper.make_node("BatchNormalization", ["x", "sc", "bi", "mu", "va"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 12, 12])],
                       [*stats, _w("w", 4, 3, 3, 3)])
    _both(model)
    (compiled,) = channels_last.EVENTS
    assert compiled == [("", "Transpose"), (NHWC_DOMAIN, "BatchNormalization"), ("", "Relu"), (NHWC_DOMAIN, "Conv"),
                        ("", "Transpose")], compiled
