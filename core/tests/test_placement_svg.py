"""`ort-core explain --svg`: the placement as a picture - each node in its provider's colour, each fused
subgraph framed, declined nodes marked with their reasons, values crossing providers drawn red."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from onnx import TensorProto, helper

from ort_core.cli import main
from ort_core.placement_svg import CPU_COLOUR, PALETTE, placement_svg

from .conftest import import_test_plugins, make_model
from .test_heterogeneous import CPU, EXAMPLE, quiet_session

SVG = "{http://www.w3.org/2000/svg}"


def mixed_model():
    """MatMul, Relu (example) -> Softmax (CPU) -> Mul, Exp (example) -> Transpose (CPU)."""
    vi, node = helper.make_tensor_value_info, helper.make_node
    nodes = [node("MatMul", ["x", "x"], ["a"], name="mm"), node("Relu", ["a"], ["b"], name="relu"),
             node("Softmax", ["b"], ["c"], name="softmax"), node("Mul", ["c", "c"], ["d"], name="mul"),
             node("Exp", ["d"], ["e"], name="exp"), node("Transpose", ["e"], ["y"], name="tr")]
    return make_model(nodes, [vi("x", TensorProto.FLOAT, [4, 4])], [vi("y", TensorProto.FLOAT, [4, 4])])


def _groups(root):
    return [(g.find(f"{SVG}title").text, g) for g in root.iter(f"{SVG}g")]


def test_the_picture_shows_each_provider_its_clusters_declined_nodes_and_crossings():
    import_test_plugins("ort_ep_example.memory")
    sess = quiet_session(mixed_model(), [EXAMPLE, CPU])
    root = ET.fromstring(placement_svg(sess))
    nodes = {title.split("\n")[0]: g for title, g in _groups(root) if " on " in title.split("\n")[0]}
    assert len(nodes) == 6
    fills = {name.split(" ")[0]: g.find(f"{SVG}rect").get("fill") for name, g in nodes.items()}
    assert {fills[n] for n in ("mm", "relu", "mul", "exp")} == {PALETTE[0]}  # the example provider's colour
    assert fills["softmax"] == fills["tr"] == CPU_COLOUR
    declined = {name.split(" ")[0]: title for title, g in _groups(root) for name in [title.split("\n")[0]]
                if g.find(f"{SVG}rect").get("stroke-dasharray") == "3 2" and " on " in name}
    assert set(declined) == {"softmax", "tr"}
    assert "ExampleExecutionProvider: Softmax is not one of the example's ops" in declined["softmax"]
    clusters = [t for t, _ in _groups(root) if "fused subgraph" in t]
    assert clusters == ["[1] ExampleExecutionProvider: fused subgraph of 2 nodes",
                        "[3] ExampleExecutionProvider: fused subgraph of 2 nodes"]
    crossings = [p.find(f"{SVG}title").text for p in root.iter(f"{SVG}path") if p.get("stroke") == "#d62728"
                 and p.find(f"{SVG}title") is not None]
    assert sorted(crossings) == ["b", "c", "e"]  # relu -> softmax -> mul, exp -> transpose


def test_the_command_writes_the_picture(tmp_path, capsys):
    import_test_plugins("ort_ep_example.memory")
    model, picture = tmp_path / "m.onnx", tmp_path / "m.svg"
    model.write_bytes(mixed_model().SerializeToString())
    code = main(["explain", str(model), "--providers", f"{EXAMPLE},{CPU}", "--svg", str(picture)])
    assert code == 0 and f"placement drawn: {picture}" in capsys.readouterr().out
    assert ET.parse(picture).getroot().tag == f"{SVG}svg"
