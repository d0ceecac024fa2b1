"""One model split over two device providers and the CPU: partition, copies at borders only,
strict mode, and the explain text. Uses the example plugin (device 'example') and the test
fixture's second-device provider (device 'second'), between which values go through the host."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_core as ort
from ort_core.cli import main
from ort_core.session import STRICT_KEY

from .conftest import import_test_plugins, make_model, record_copies, slow_down_example_device

EXAMPLE, SECOND, CPU = "ExampleExecutionProvider", "SecondDeviceExecutionProvider", "CPUExecutionProvider"


@pytest.fixture
def plugins(monkeypatch):
    example_memory, recorder = import_test_plugins("ort_ep_example.memory", "ort_ep_recorder.plugin")
    example_copies = record_copies(monkeypatch, example_memory.ExampleDataTransfer)
    recorder.COPIES.clear()
    return example_copies, recorder.COPIES


def alternating_model():
    """x -Add(ex)-> a -Mul(2nd)-> m -Relu(ex)-> r -Softmax(cpu)-> s -Mul(2nd, with a)-> y."""
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"),
             helper.make_node("Mul", ["a", "a"], ["m"], name="square"),
             helper.make_node("Relu", ["m"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["s"], name="softmax", axis=-1),
             helper.make_node("Mul", ["s", "a"], ["y"], name="scale")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])


def quiet_session(model, providers, so=None):
    with pytest.warns(ort.OrtWarning, match="provider assignment"):
        return ort.InferenceSession(model, so, providers=providers)


def test_alternating_subgraphs_match_cpu_and_copy_only_at_borders(plugins):
    example_copies, second_copies = plugins
    model = alternating_model()
    sess = quiet_session(model, [SECOND, EXAMPLE, CPU])
    placed = [(a.provider, a.node_names) for a in sess.get_provider_graph_assignment_info()]
    assert placed == [(EXAMPLE, ("add",)), (SECOND, ("square",)), (EXAMPLE, ("relu",)),
                      (CPU, ("softmax",)), (SECOND, ("scale",))]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    example_copies.clear()
    second_copies.clear()
    (y,) = sess.run(None, {"x": x})
    (expected,) = ort.InferenceSession(model).run(None, {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    # borders: x host->ex; a ex->2nd (through the host, once for both readers); m 2nd->ex (through
    # the host); r ex->host; s host->2nd; y 2nd->host. Nothing else moves.
    assert sorted(example_copies) == sorted([("cpu:0", "example:0"), ("example:0", "cpu:0"),
                                             ("cpu:0", "example:0"), ("example:0", "cpu:0")])
    assert sorted(second_copies) == sorted([("cpu:0", "second:0"), ("second:0", "cpu:0"),
                                            ("cpu:0", "second:0"), ("second:0", "cpu:0")])
    # explain counts copy steps (6); the two staged ones each call both devices' transfers (4 + 4)
    text = sess.explain()
    assert "copies between devices per run: 6" in text
    assert "'a' example:0 -> second:0" in text


def test_neighbouring_nodes_of_one_provider_are_fused(plugins):
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Tanh", ["a"], ["t"], name="tanh"),
             helper.make_node("Softmax", ["r"], ["s"], name="softmax"),
             helper.make_node("Sub", ["s", "t"], ["y"], name="sub")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    sess = quiet_session(model, [EXAMPLE])
    groups = [(a.provider, a.node_names) for a in sess.get_provider_graph_assignment_info()]
    # Tanh is independent of Softmax: it joins the first group instead of a group of its own
    assert groups == [(EXAMPLE, ("add", "relu", "tanh")), (CPU, ("softmax",)), (EXAMPLE, ("sub",))]
    x = np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ort.InferenceSession(model).run(None, {"x": x})[0],
                               rtol=1e-6)


def test_constants_cross_to_a_device_once_at_build(plugins):
    example_copies, _ = plugins
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    from onnx import numpy_helper

    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                       [numpy_helper.from_array(w, "w")])
    sess = quiet_session(model, [EXAMPLE])
    example_copies.clear()
    for _ in range(3):
        (y,) = sess.run(None, {"x": np.ones((2, 4), np.float32)})
    np.testing.assert_allclose(y, np.ones((2, 4)) @ w)
    assert example_copies.count(("cpu:0", "example:0")) == 3  # x only, once per run; w never again


def test_strict_mode_names_unclaimed_nodes(plugins):
    so = ort.SessionOptions()
    so.add_session_config_entry(STRICT_KEY, "1")
    unclaimed = r"node 'softmax' \(Softmax\).*ExampleExecutionProvider: Softmax is not"
    with pytest.raises(ort.NotImplementedOp, match=unclaimed):
        ort.InferenceSession(alternating_model(), so, providers=[SECOND, EXAMPLE])
    # naming the CPU provider explicitly allows it to take what the others decline
    with pytest.warns(ort.OrtWarning):
        sess = ort.InferenceSession(alternating_model(), so, providers=[SECOND, EXAMPLE, CPU])
    assert sess.run(None, {"x": np.ones((3, 4), np.float32)})[0].shape == (3, 4)


def test_strict_mode_refuses_missing_provider():
    so = ort.SessionOptions()
    so.add_session_config_entry(STRICT_KEY, "1")
    with pytest.raises(ort.InvalidArgument, match="'NoSuchExecutionProvider' is not installed"):
        ort.InferenceSession(alternating_model(), so, providers=["NoSuchExecutionProvider", CPU])


def test_explain_command(plugins, tmp_path, capsys):
    import onnx

    path = tmp_path / "alt.onnx"
    onnx.save(alternating_model(), str(path))
    assert main(["explain", str(path), "--providers", f"{SECOND},{EXAMPLE}"]) == 0
    out = capsys.readouterr().out
    assert "SecondDeviceExecutionProvider: 2/5 nodes" in out
    assert "[4] CPUExecutionProvider: node by node, 1 node" in out and "softmax (Softmax)" in out
    assert "declined, with each provider's reason:" in out
    assert "second device only runs ['Mul', 'Sub']" in out
    assert "copies between devices per run: 6" in out


def test_a_slow_asynchronous_device_is_waited_for_wherever_its_values_are_read(plugins, monkeypatch):
    """The example device computes on a worker thread; slowed down, every read of its values (by the host,
    by the second device through the host, as a graph output) must still wait for the work to finish."""
    slow_down_example_device(monkeypatch, 0.02)
    model = alternating_model()
    sess = quiet_session(model, [SECOND, EXAMPLE, CPU])
    (expected,) = ort.InferenceSession(model).run(None, {"x": np.ones((3, 4), np.float32)})
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)
        (expected,) = ort.InferenceSession(model).run(None, {"x": x})
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected, rtol=1e-6)


def loop_model():
    """A Loop whose body adds w to the carried y three times: the Add can run on the example device."""
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"], name="keep_going"),
         helper.make_node("Add", ["y_in", "w"], ["y_out"], name="body_add")],
        "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("y_in", TensorProto.FLOAT, [4])],
        [vi("c_out", TensorProto.BOOL, []), vi("y_out", TensorProto.FLOAT, [4])])
    node = helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body, name="loop")
    return make_model([node], [vi("M", TensorProto.INT64, []), vi("y0", TensorProto.FLOAT, [4]),
                               vi("w", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, [4])])


def test_loop_body_nodes_are_placed_on_a_device_provider(plugins, monkeypatch):
    example_copies, _ = plugins
    slow_down_example_device(monkeypatch, 0.005)  # the body's device work lags: every iteration must wait
    with pytest.warns(ort.OrtWarning, match="provider assignment"):  # the Loop itself stays on the CPU
        sess = ort.InferenceSession(loop_model(), providers=[EXAMPLE])
    assert sess._bodies.placements == [("node 'loop' (Loop) subgraph 'body'",
                                        [(CPU, ("keep_going",)), (EXAMPLE, ("body_add",))])]
    assert "    ExampleExecutionProvider: body_add" in sess.explain().split("graph bodies")[1]
    y0, w = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
    example_copies.clear()
    (y,) = sess.run(None, {"M": np.array(3, np.int64), "y0": y0, "w": w})
    np.testing.assert_array_equal(y, y0 + 3 * w)
    # per iteration: y_in and w go up to the device, y_out comes down
    assert example_copies.count(("cpu:0", "example:0")) == 6 and example_copies.count(("example:0", "cpu:0")) == 3
