"""Provider contract v2: one provider object per session from the plugin's factory, checked options,
its lifecycle, typed hand-back of one subgraph at compile, and placement redone by set_providers."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_core as ort
from ort_core.plugins import ExecutionProvider

from .conftest import install_fake_plugin, load_fake_plugin, make_model, relu_sin_add_mul_model

PICKY = "PickyExecutionProvider"

# A v2 plugin: a factory making one PickyProvider per session. It takes Relu, Add and Mul (fused) and
# hands back, at compile, any subgraph holding the op type named by its "refuse" option.
PICKY_SRC = """
    import numpy as np
    from ort_core.plugins import (Capability, ExecutionProvider, Preferences, ProviderInfo, UnsupportedSubgraph,
                                  hookimpl)

    INFO = ProviderInfo("PickyExecutionProvider", description="test",
                        options={"refuse": "", "fail": "", "keep_qdq": "0", "bake": "0", "fuse": "0", "fused_ops": ""})
    EVENTS = []
    OPS = {"Relu": lambda x: np.maximum(x, 0), "Add": np.add, "Mul": np.multiply}
    FUSED = {"MatMulBias": lambda a, w, b: a @ w + b,  # made by its transform (ort-core's fusion passes)
             "FusedGemm": lambda a, w, b: np.maximum(a @ w + b, 0)}  # declared in its preferences: made before


    class PickyProvider(ExecutionProvider):
        def preferences(self):
            fused = frozenset(op for op in self.options.get("fused_ops", "").split(",") if op)
            return Preferences(keep_qdq=self.options.get("keep_qdq") == "1",
                               bakes_weights=self.options.get("bake") == "1", fused_ops=fused)

        def get_capability(self, graph):
            EVENTS.append(("capability",))
            EVENTS.append(("offered", tuple(n.op_type for n in graph.nodes())))
            if self.options.get("fail") == "capability":
                raise RuntimeError("capability probe crashed")
            ops = {**OPS, "MatMul": np.matmul} if self.options.get("fuse") == "1" else OPS
            fused = {op.rpartition("::")[2] for op in self.options.get("fused_ops", "").split(",") if op}
            ids = [n.id for n in graph.nodes() if n.op_type in ops or n.op_type in fused]
            return Capability(tuple(ids), {n.id: "only Relu/Add/Mul" for n in graph.nodes() if n.id not in ids})

        def compile_subgraph(self, sub):
            ops = [n.op_type for n in sub.nodes]
            EVENTS.append(("compile", tuple(ops)))
            EVENTS.append(("subgraph", list(sub.inputs), sorted(sub.constants)))
            if self.options.get("refuse") in ops:
                raise UnsupportedSubgraph(f"{self.options['refuse']} is too large for the test device")
            table = {**OPS, "MatMul": np.matmul, **FUSED}
            steps = [(table[n.op_type], list(n.inputs), n.outputs[0]) for n in sub.nodes]
            inputs, outputs = list(sub.inputs), list(sub.outputs)

            def kernel(*xs):
                EVENTS.append(("call", len(xs)))
                env = {**sub.constants, **dict(zip(inputs, xs))}
                for fn, ins, out in steps:
                    env[out] = fn(*[env[i] for i in ins])
                return [env[o] for o in outputs]

            return kernel

        def transform(self, view):
            return view.fuse() if self.options.get("fuse") == "1" else 0

        def close(self):
            EVENTS.append(("close", self.serial))
            super().close()


    @hookimpl
    def ort_register_providers():
        return [INFO]


    @hookimpl
    def ort_create_provider(provider, options, session):
        EVENTS.append(("create", dict(options), session.model_path, dict(session.config)))
        ep = PickyProvider(INFO, options, session)
        ep.serial = len([e for e in EVENTS if e[0] == "instance"])  # not id(): a freed instance's id comes back
        EVENTS.append(("instance", ep.serial))
        return ep
"""


@pytest.fixture
def picky(tmp_path, fresh_registry):
    return load_fake_plugin(tmp_path, fresh_registry, "picky", PICKY_SRC, "ort_ep_picky_mod")


def _expected(x):
    return (np.sin(np.maximum(x, 0)) + x) * x


def _placement(sess) -> dict[str, str]:
    return {name: a.provider for a in sess.get_provider_graph_assignment_info() for name in a.node_names}


X = np.array([-2, -1, 1, 2], np.float32)


def test_factory_makes_one_instance_per_session_with_options_and_session_context(picky, tmp_path):
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(relu_sin_add_mul_model().SerializeToString())
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    with pytest.warns(ort.OrtWarning, match=f"{PICKY}: 3/4 nodes"):
        s1 = ort.InferenceSession(path, so, providers=[(PICKY, {"refuse": "Tanh"})])
        s2 = ort.InferenceSession(path, providers=[PICKY])
    creates = [e for e in picky.EVENTS if e[0] == "create"]
    assert creates[0][1:3] == ({"refuse": "Tanh"}, path) and creates[0][3]["session.intra_op.allow_spinning"] == "0"
    assert creates[1][1:3] == ({}, path)
    instances = [e[1] for e in picky.EVENTS if e[0] == "instance"]
    assert len(set(instances)) == 2  # one object per session
    np.testing.assert_allclose(s1.run(None, {"x": X})[0], _expected(X), rtol=1e-6)
    np.testing.assert_allclose(s2.run(None, {"x": X})[0], _expected(X), rtol=1e-6)


def test_instance_is_closed_when_its_session_goes_and_by_set_providers(picky):
    with pytest.warns(ort.OrtWarning):
        sess = ort.InferenceSession(relu_sin_add_mul_model(), providers=[PICKY])
    first = [e[1] for e in picky.EVENTS if e[0] == "instance"][0]
    assert ("close", first) not in picky.EVENTS
    with pytest.warns(ort.OrtWarning):
        sess.set_providers([PICKY])
    assert ("close", first) in picky.EVENTS  # the old instance is released by the rebuild
    second = [e[1] for e in picky.EVENTS if e[0] == "instance"][1]
    (y,) = sess.run(None, {"x": X})
    del sess
    gc.collect()
    assert ("close", second) in picky.EVENTS
    assert picky.EVENTS.count(("close", first)) == 1  # closed once only
    np.testing.assert_allclose(y, _expected(X), rtol=1e-6)


def test_unknown_option_of_a_v2_provider_names_the_valid_ones(picky):
    with pytest.raises(ort.InvalidArgument, match=r"unknown provider option\(s\) \['refuse_op'\] for "
                                                  f"'{PICKY}'; valid options: bake, fail, fuse, fused_ops, "
                                                  "keep_qdq, refuse"):
        ort.InferenceSession(relu_sin_add_mul_model(), providers=[(PICKY, {"refuse_op": "Add"})])


def test_unsupported_subgraph_goes_to_the_next_provider_alone(picky):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = ort.InferenceSession(relu_sin_add_mul_model(), providers=[(PICKY, {"refuse": "Mul"})])
    # the provider stays in the session with the subgraph it could compile
    assert sess.get_providers() == [PICKY, "CPUExecutionProvider"]
    assert _placement(sess) == {"relu": PICKY, "sin": "CPUExecutionProvider", "add": "CPUExecutionProvider",
                                "mul": "CPUExecutionProvider"}
    line = next(str(w.message) for w in caught if "provider assignment" in str(w.message))
    assert f"{PICKY}: 1/4 nodes" in line
    assert "handed back at compile: 1 subgraph(s)" in line and "Mul is too large for the test device" in line
    # Relu's subgraph was compiled once: the retry kept it
    assert [e[:2] for e in picky.EVENTS if e[0] == "compile"] == [("compile", ("Relu",)), ("compile", ("Add", "Mul"))]
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], _expected(X), rtol=1e-6)
    assert "handed back by its compile" in sess.explain()


def test_provider_whose_capability_fails_is_not_listed(picky):
    with pytest.warns(ort.OrtWarning, match="capability probe crashed; provider skipped"):
        sess = ort.InferenceSession(relu_sin_add_mul_model(), providers=[(PICKY, {"fail": "capability"})])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert set(_placement(sess).values()) == {"CPUExecutionProvider"}
    closes = [e for e in picky.EVENTS if e[0] == "close"]
    assert len(closes) == 1  # the skipped instance was released at once
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], _expected(X), rtol=1e-6)


def matmul_bias_relu_model():
    """y = Relu(x @ w + b): the CPU provider fuses MatMul + Add; the recorder takes Add and Relu."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    return make_model([helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
                       helper.make_node("Add", ["m", "b"], ["a"], name="add"),
                       helper.make_node("Relu", ["a"], ["y"], name="relu")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w, b])


def test_set_providers_places_the_unfused_model_again():
    from .conftest import import_test_plugins

    import_test_plugins("ort_ep_recorder.plugin")
    recorder = "RecorderExecutionProvider"
    model = matmul_bias_relu_model()
    sess = ort.InferenceSession(model)  # CPU only: MatMul + Add become one CPU-fused node
    assert "add" not in _placement(sess)
    with pytest.warns(ort.OrtWarning):
        sess.set_providers([recorder, "CPUExecutionProvider"])
        fresh = ort.InferenceSession(model, providers=[recorder, "CPUExecutionProvider"])
    assert _placement(sess) == _placement(fresh)
    assert _placement(sess)["add"] == recorder and _placement(sess)["relu"] == recorder
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], fresh.run(None, {"x": x})[0], rtol=1e-6)
    sess.set_providers(["CPUExecutionProvider"])  # and back: fused for the CPU again
    assert "add" not in _placement(sess)


def test_the_cpu_provider_is_an_execution_provider_object():
    sess = ort.InferenceSession(matmul_bias_relu_model())
    ep = sess._instances["CPUExecutionProvider"].ep
    assert isinstance(ep, ExecutionProvider) and ep.name == "CPUExecutionProvider" and ep.device.is_host


def qdq_matmul_model():
    """y = x @ DequantizeLinear(w_q, scale, zero_point): a quantized weight, as QDQ exports write it."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (4, 3)).astype(np.int8), "w_q"),
             numpy_helper.from_array(np.array(0.02, np.float32), "scale"),
             numpy_helper.from_array(np.array(0, np.int8), "zero_point")]
    return make_model([helper.make_node("DequantizeLinear", ["w_q", "scale", "zero_point"], ["w"], name="dq"),
                       helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)


def test_a_provider_that_keeps_qdq_groups_sees_the_dequantize_of_weights(picky):
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    plain = ort.InferenceSession(qdq_matmul_model())
    assert "DequantizeLinear" not in {n.op_type for n in plain._model.graph.nodes}  # folded for float providers
    with pytest.warns(ort.OrtWarning):
        kept = ort.InferenceSession(qdq_matmul_model(), providers=[(PICKY, {"keep_qdq": "1"})])
    offered = [e[1] for e in picky.EVENTS if e[0] == "offered"]
    assert offered == [("DequantizeLinear", "MatMul")]  # the weight's DequantizeLinear was offered
    # nobody took it, so the CPU provider folds it into a float weight after partitioning: not dequantized per run
    assert [n.op_type for n in kept._model.graph.nodes] == ["MatMul"]
    np.testing.assert_allclose(kept.run(None, {"x": x})[0], plain.run(None, {"x": x})[0], rtol=1e-6)
    # set_providers optimizes again for the new list: folded once no provider keeps QDQ
    kept.set_providers(["CPUExecutionProvider"])
    assert "DequantizeLinear" not in {n.op_type for n in kept._model.graph.nodes}


def add_weight_model():
    """y = Relu(x) + w with a constant w: Picky takes both nodes."""
    w = numpy_helper.from_array(np.array([1, -2, 3, -4], np.float32), "w")
    return make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                       helper.make_node("Add", ["r", "w"], ["y"], name="add")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])


@pytest.mark.parametrize("bake", ["0", "1"])
def test_weights_are_inputs_or_baked_as_the_provider_prefers(picky, bake):
    with pytest.warns(ort.OrtWarning):
        sess = ort.InferenceSession(add_weight_model(), providers=[(PICKY, {"bake": bake})])
    (sub,) = [e for e in picky.EVENTS if e[0] == "subgraph"]
    assert sub[2] == ["w"]  # the constant is offered to compile either way
    assert sub[1] == (["x"] if bake == "1" else ["x", "w"])  # ... and fed at run time only when not baked
    picky.EVENTS.clear()
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], np.maximum(X, 0) + [1, -2, 3, -4])
    assert picky.EVENTS == [("call", 1 if bake == "1" else 2)]


def conv_sigmoid_relu_model():
    """Relu(Sigmoid(Conv(x))): the CPU provider fuses Conv + Sigmoid; Picky takes the Relu."""
    w = numpy_helper.from_array(np.random.default_rng(4).standard_normal((2, 1, 3, 3)).astype(np.float32), "w")
    return make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                       helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid"),
                       helper.make_node("Relu", ["s"], ["y"], name="relu")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 5])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5, 5])], [w])


def test_provider_fusions_do_not_partition_the_graph_again(picky):
    with pytest.warns(ort.OrtWarning):
        sess = ort.InferenceSession(conv_sigmoid_relu_model(), providers=[PICKY])
    assert picky.EVENTS.count(("capability",)) == 1  # asked once, although the CPU provider fused after it
    assert [(a.provider, a.op_types) for a in sess.get_provider_graph_assignment_info()] == [
        ("CPUExecutionProvider", ("FusedConv",)), (PICKY, ("Relu",))]
    assert sess._optimizer_stats["cpu_fusion"] == 1
    x = np.random.default_rng(5).standard_normal((1, 1, 5, 5)).astype(np.float32)
    (expected,) = ort.InferenceSession(conv_sigmoid_relu_model(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected, rtol=1e-6)


def test_any_provider_may_fuse_its_own_nodes_with_the_fusion_passes(picky):
    """A provider that runs ort-core's fused ops fuses its claimed nodes in its transform (no second
    partitioning); the MatMul + bias Add it took arrive at its compile as one ort_core::MatMulBias."""
    model = matmul_bias_relu_model()
    with pytest.warns(ort.OrtWarning):
        sess = ort.InferenceSession(model, providers=[(PICKY, {"fuse": "1"})])
    assert [(a.provider, a.op_types) for a in sess.get_provider_graph_assignment_info()] == [
        (PICKY, ("MatMulBias", "Relu"))]
    assert sess._optimizer_stats[f"transform:{PICKY}"] == 1
    assert picky.EVENTS.count(("capability",)) == 1
    x = np.random.default_rng(6).standard_normal((2, 4)).astype(np.float32)
    (expected,) = ort.InferenceSession(model).run(None, {"x": x})
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected, rtol=1e-5)


DUAL_SRC = """
    import numpy as np
    from ort_core.memory import Device
    from ort_core.plugins import Capability, ExecutionProvider, ProviderInfo, hookimpl

    DEVICES = (Device("dual", 0), Device("dual", 1))
    INFO = ProviderInfo("DualExecutionProvider", DEVICES, description="test", options={"device_id": "0"})
    COPIES = []


    class Transfer:
        def can_copy(self, src, dst):
            return {src.type, dst.type} <= {"cpu", "dual"}

        def copy(self, value, src, dst):
            COPIES.append((str(src), str(dst)))
            return np.array(value, copy=True)


    class Dual(ExecutionProvider):
        def get_capability(self, graph):
            ids = [n.id for n in graph.nodes() if n.op_type == "Neg"]
            return Capability(tuple(ids), {n.id: "Neg only" for n in graph.nodes() if n.id not in ids})

        def compile_subgraph(self, sub):
            return lambda x: [np.negative(x)]

        def allocator(self, device):
            from ort_core.memory import HostAllocator
            return HostAllocator()

        def data_transfer(self):
            return Transfer()


    @hookimpl
    def ort_register_providers():
        return [INFO]


    @hookimpl
    def ort_create_provider(provider, options, session):
        k = int(options.get("device_id", 0))
        if k not in (0, 1):
            raise ValueError(f"device_id={k}: DualExecutionProvider has devices 0 and 1")
        return Dual(INFO, options, session, devices=[DEVICES[k]])
"""


def test_the_device_id_option_chooses_the_instances_device(tmp_path, fresh_registry):
    install_fake_plugin(tmp_path, "dual", DUAL_SRC, "ort_ep_dual_mod")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh_registry()
    import ort_ep_dual_mod

    model = make_model([helper.make_node("Neg", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                               [3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    x = np.array([1, -2, 3], np.float32)
    for k in (0, 1):
        with pytest.warns(ort.OrtWarning):
            sess = ort.InferenceSession(model, providers=[("DualExecutionProvider", {"device_id": str(k)})])
        ort_ep_dual_mod.COPIES.clear()
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], -x)
        assert ort_ep_dual_mod.COPIES == [("cpu:0", f"dual:{k}"), (f"dual:{k}", "cpu:0")]
    with pytest.raises(ort.InvalidArgument, match="device_id=2: DualExecutionProvider has devices 0 and 1"):
        ort.InferenceSession(model, providers=[("DualExecutionProvider", {"device_id": "2"})])


def gemm_relu_model():
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    return make_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"], name="gemm"),
                       helper.make_node("Relu", ["g"], ["r"], name="relu"),
                       helper.make_node("Sin", ["r"], ["y"], name="sin")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w, b])


def test_fused_ops_a_provider_declares_are_made_before_it_is_offered_nodes(picky):
    """Declared in its preferences, com.microsoft::FusedGemm is made before partitioning: the provider's
    get_capability sees one FusedGemm where the model has Gemm + Relu (asked once), and claims it."""
    model = gemm_relu_model()
    x = np.random.default_rng(8).standard_normal((2, 4)).astype(np.float32)
    (expected,) = ort.InferenceSession(model).run(None, {"x": x})
    with pytest.warns(ort.OrtWarning):
        sess = ort.InferenceSession(model, providers=[(PICKY, {"fused_ops": "com.microsoft::FusedGemm"})])
    assert [(a.provider, a.op_types) for a in sess.get_provider_graph_assignment_info()] == [
        (PICKY, ("FusedGemm",)), ("CPUExecutionProvider", ("Sin",))]
    assert sess._optimizer_stats["early_fusion"] == 1
    assert picky.EVENTS.count(("capability",)) == 1
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected, rtol=1e-5)
    # one that declares nothing is offered the standard ops
    with pytest.warns(ort.OrtWarning):
        plain = ort.InferenceSession(model, providers=[PICKY])
    assert "early_fusion" not in plain._optimizer_stats
    assert sorted((a.provider, a.op_types) for a in plain.get_provider_graph_assignment_info()) == [
        ("CPUExecutionProvider", ("Gemm",)), ("CPUExecutionProvider", ("Sin",)), (PICKY, ("Relu",))]


def test_fused_ops_must_be_named_with_their_domain(picky):
    with pytest.warns(ort.OrtWarning, match="fused_ops must hold 'domain::op_type'"):
        sess = ort.InferenceSession(gemm_relu_model(), providers=[(PICKY, {"fused_ops": "FusedGemm"})])
    assert sess.get_providers() == ["CPUExecutionProvider"]


def if_reading_outer_weights_model(overridable: bool):
    """y = If(c, then: x * w, else: x + w) with w an initializer of the main graph (fed when overridable)."""
    out = helper.make_tensor_value_info("r", TensorProto.FLOAT, [3])
    then = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["r"])], "then", [], [out])
    other = helper.make_graph([helper.make_node("Add", ["x", "w"], ["r"])], "else", [], [out])
    w = numpy_helper.from_array(np.array([1.0, -2.0, 3.0], np.float32), "w")
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])]
    if overridable:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [3]))
    return make_model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], inputs,
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], [w])


@pytest.mark.parametrize("overridable", [False, True])
def test_a_body_gets_the_enclosing_graphs_constants_as_constants(picky, overridable):
    """A provider compiling a graph body receives the main graph's weights it reads among its constants
    (to bake in: without it OpenVINO failed on silero VAD's If branch); an initializer a feed may override
    is an input only."""
    with pytest.warns(ort.OrtWarning):
        sess = ort.InferenceSession(if_reading_outer_weights_model(overridable), providers=[PICKY])
    x = np.array([0.5, 1.0, 2.0], np.float32)
    w = np.array([1.0, -2.0, 3.0], np.float32)
    np.testing.assert_allclose(sess.run(None, {"c": np.array(True), "x": x})[0], x * w)
    np.testing.assert_allclose(sess.run(None, {"c": np.array(False), "x": x})[0], x + w)
    subgraphs = [e for e in picky.EVENTS if e[0] == "subgraph"]
    assert len(subgraphs) == 2
    for _, inputs, constants in subgraphs:
        assert "w" in inputs and ("w" in constants) is not overridable
    if overridable:
        np.testing.assert_allclose(sess.run(None, {"c": np.array(True), "x": x, "w": 2 * w})[0], x * 2 * w)
