"""EPContext models in onnxruntime's shared layout: a provider whose subgraphs live in one compiled blob
(``SharedContext``) gets one node with ``main_context=1`` holding it and ``main_context=0`` nodes naming their graph
in it; ``saved_context`` reads them back; ``ep_sdk_version`` carries the provider's SDK version."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import onnx
import pytest
from onnx import helper

import ort_core as ort
from ort_core.errors import InvalidArgument, InvalidGraph
from ort_core.ir.graph import Graph, Node
from ort_core.plugins import ExecutionProvider, ProviderInfo
from ort_core.plugins.provider import SessionContext

from .conftest import load_fake_plugin, relu_sin_add_mul_model

SHARING = "SharingExecutionProvider"
pytestmark = pytest.mark.filterwarnings("ignore:provider assignment")

# A provider keeping every subgraph of a session in one blob (as QNN keeps every graph in one context): a JSON map
# graph name -> steps. Its options: "sdk" (the SDK version it reports), "strict" (refuse contexts saved by another
# SDK version), "bad" (a broken export: "nameless", "twice", "type").
SHARING_SRC = """
    import json

    import numpy as np
    from ort_core.plugins import Capability, ExecutionProvider, ProviderInfo, hookimpl, is_context_node
    from ort_core.plugins.provider import SharedContext

    NAME = "SharingExecutionProvider"
    INFO = ProviderInfo(NAME, description="test", version="0.0.1", options={"sdk": "7.1.0", "strict": "0", "bad": ""})
    OPS = {"Relu": lambda x: np.maximum(x, 0), "Add": np.add, "Mul": np.multiply}
    EVENTS = []


    class SharingProvider(ExecutionProvider):
        @property
        def sdk_version(self):
            return self.options.get("sdk", "7.1.0")

        def get_capability(self, graph):
            ids = [n.id for n in graph.nodes() if n.op_type in OPS or is_context_node(n, NAME)]
            return Capability(tuple(ids), {n.id: "only Relu/Add/Mul" for n in graph.nodes() if n.id not in ids})

        def compile(self, subgraphs):
            programs, kernels = {}, []
            for sub in subgraphs:
                steps = []
                for n in sub.nodes:
                    if is_context_node(n, NAME):
                        saved = self.saved_context(n, sub.graph, strict_version=self.options.get("strict") == "1")
                        EVENTS.append(("load", n.name, saved.main.name, saved.graph))
                        steps += json.loads(saved.blob)[saved.graph]
                    else:
                        EVENTS.append(("compile", n.op_type))
                        steps.append([n.op_type, list(n.inputs), n.outputs[0]])
                programs[f"{sub.name}_graph"] = steps
                kernels.append(self._kernel(steps, list(sub.inputs), list(sub.outputs)))
            self._blob = json.dumps(programs).encode()
            return kernels

        @staticmethod
        def _kernel(steps, inputs, outputs):
            def kernel(*xs):
                env = dict(zip(inputs, xs))
                for op, ins, out in steps:
                    env[out] = OPS[op](*[env[i] for i in ins])
                return [env[o] for o in outputs]

            return kernel

        def export_context(self, sub):
            bad = self.options.get("bad")
            if bad == "type":
                return 42
            graph = "" if bad == "nameless" else "same" if bad == "twice" else f"{sub.name}_graph"
            return SharedContext(self._blob, graph)


    @hookimpl
    def ort_register_providers():
        return [INFO]


    @hookimpl
    def ort_create_provider(provider, options, session):
        return SharingProvider(INFO, options, session)
"""


@pytest.fixture
def sharing(tmp_path, fresh_registry):
    return load_fake_plugin(tmp_path, fresh_registry, "sharing", SHARING_SRC, "ort_ep_sharing_mod")


X = np.array([-2, -1, 1, 2], np.float32)
WANT = (np.sin(np.maximum(X, 0)) + X) * X


def _save(tmp_path) -> str:
    path = str(tmp_path / "m.onnx")
    onnx.save(relu_sin_add_mul_model(), path)
    return path


def _write(path, embed: str, options: dict | None = None) -> str:
    so = ort.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_embed_mode", embed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ort.InferenceSession(path, so, providers=[(SHARING, options or {}), "CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], WANT, rtol=1e-6)
    return os.path.splitext(path)[0] + "_ctx.onnx"


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _load(path, options: dict | None = None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort.InferenceSession(path, providers=[(SHARING, options or {}), "CPUExecutionProvider"])


@pytest.mark.parametrize("embed", ["1", "0"])
def test_a_shared_blob_is_written_once_in_the_main_node(sharing, tmp_path, embed):
    ctx = _write(_save(tmp_path), embed)
    main, sin, other = onnx.load(ctx).graph.node
    assert [n.op_type for n in (main, sin, other)] == ["EPContext", "Sin", "EPContext"]
    a, b = _attrs(main), _attrs(other)
    assert (main.name, other.name) == ("SharingExecutionProvider_0_graph", "SharingExecutionProvider_2_graph")
    assert (a["main_context"], b["main_context"]) == (1, 0)
    assert a["partition_name"] == main.name.encode() and b["partition_name"] == other.name.encode()
    assert a["source"] == b["source"] == SHARING.encode() and a["embed_mode"] == b["embed_mode"] == int(embed)
    assert "ep_cache_context" not in b  # the blob is in the main node only
    bins = sorted(f for f in os.listdir(tmp_path) if f.endswith(".bin"))
    if embed == "1":
        assert bins == [] and set(json.loads(a["ep_cache_context"])) == {main.name, other.name}
    else:
        assert bins == ["m_ctx_SharingExecutionProvider_0.bin"] and a["ep_cache_context"] == bins[0].encode()


@pytest.mark.parametrize("embed", ["1", "0"])
def test_a_shared_context_model_loads_back_without_compiling(sharing, tmp_path, embed):
    ctx = _write(_save(tmp_path), embed)
    sharing.EVENTS.clear()
    sess = _load(ctx)
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], WANT, rtol=1e-6)
    main, other = "SharingExecutionProvider_0_graph", "SharingExecutionProvider_2_graph"
    # each node gets the blob of the main node and its own graph's name; nothing is compiled again
    assert sharing.EVENTS == [("load", main, main, main), ("load", other, main, other)]
    assert [(a.provider, a.op_types) for a in sess.get_provider_graph_assignment_info()] == [
        (SHARING, ("EPContext",)), ("CPUExecutionProvider", ("Sin",)), (SHARING, ("EPContext",))]


def test_the_model_compiler_writes_the_shared_layout(sharing, tmp_path):
    so = ort.SessionOptions()
    so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == SHARING], {})
    out = str(tmp_path / "compiled.onnx")
    ort.ModelCompiler(so, _save(tmp_path), embed_compiled_data_into_model=False).compile_to_file(out)
    nodes = [n for n in onnx.load(out).graph.node if n.op_type == "EPContext"]
    assert [_attrs(n)["main_context"] for n in nodes] == [1, 0]
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".bin")) == ["compiled_SharingExecutionProvider_0.bin"]
    np.testing.assert_allclose(_load(out).run(None, {"x": X})[0], WANT, rtol=1e-6)


def test_the_providers_sdk_version_is_written_and_a_mismatch_is_the_providers_call(sharing, tmp_path):
    ctx = _write(_save(tmp_path), "1", {"sdk": "7.1.0"})
    assert {_attrs(n)["ep_sdk_version"] for n in onnx.load(ctx).graph.node if n.op_type == "EPContext"} == {b"7.1.0"}
    # onnxruntime's QNN provider ignores ep_sdk_version on load: so does saved_context by default
    np.testing.assert_allclose(_load(ctx, {"sdk": "7.2.0"}).run(None, {"x": X})[0], WANT, rtol=1e-6)
    # strict_version (onnxruntime's OpenVINO provider's way): a clear refusal naming the node and both versions
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(Exception, match="no requested provider can run 2 node"):
            ort.InferenceSession(ctx, providers=[(SHARING, {"sdk": "7.2.0", "strict": "1"}), "CPUExecutionProvider"])
    assert any("node 'SharingExecutionProvider_0_graph' (com.microsoft::EPContext): its context was saved by "
               "SharingExecutionProvider SDK '7.1.0', and SharingExecutionProvider runs '7.2.0': compile the model "
               "again" in str(w.message) for w in seen), [str(w.message) for w in seen]


@pytest.mark.parametrize("bad, message", [
    ("nameless", "expected bytes and a graph name"),
    ("twice", "named graph 'same' for two subgraphs of one shared context"),
    ("type", "export_context returned int, expected bytes, a SharedContext or None"),
])
def test_a_broken_export_is_refused_naming_the_plugin(sharing, tmp_path, bad, message):
    with pytest.raises(InvalidArgument, match=message) as caught:
        _write(_save(tmp_path), "1", {"bad": bad})
    assert "sharing" in str(caught.value).lower()


def _context_node(name, main, source="X", node_id=0, **attrs):
    values = {"main_context": main, "source": source, **attrs}
    if main:
        values.setdefault("ep_cache_context", b"blob of " + name.encode())
    return Node("EPContext", ["x"], ["y"], values, domain="com.microsoft", name=name, id=node_id)


def _provider(version="1.0") -> ExecutionProvider:
    return ExecutionProvider(ProviderInfo("X", version=version), session=SessionContext(model_path=None))


def _graph(*nodes) -> Graph:
    return Graph("g", list(nodes), [], [])


def test_saved_context_finds_the_main_node_of_a_shared_blob():
    ep = _provider()
    first, a, second, b = (_context_node("first", 1, node_id=0), _context_node("a", 0, node_id=1, partition_name="pa"),
                           _context_node("second", 1, node_id=2), _context_node("b", 0, node_id=3))
    graph = _graph(first, a, second, b)
    saved = ep.saved_context(a, graph)
    assert (saved.main.name, saved.graph, saved.blob) == ("first", "pa", b"blob of first")  # the nearest before it
    saved = ep.saved_context(b, graph)
    assert (saved.main.name, saved.graph, saved.blob) == ("second", "b", b"blob of second")  # no partition_name
    saved = ep.saved_context(first, graph)
    assert (saved.main is first, saved.graph, saved.sdk_version) == (True, "first", "")
    only = _context_node("only", 1, node_id=5, source="x ")  # source compared as onnxruntime's QNN does
    late = _context_node("late", 0, node_id=4)
    assert ep.saved_context(late, _graph(late, only)).main is only  # the only main node, wherever it is


def test_saved_context_names_what_is_missing():
    ep = _provider()
    orphan = _context_node("orphan", 0)
    with pytest.raises(InvalidGraph, match="node 'orphan' .*main_context=0, but the model has none EPContext"):
        ep.saved_context(orphan, _graph(orphan, _context_node("other", 1, source="Y", node_id=1)))
    with pytest.raises(InvalidGraph, match="main_context must be 0 or 1, got 2"):
        ep.saved_context(_context_node("odd", 2), _graph())
    node = _context_node("v", 1, ep_sdk_version="0.9")
    assert ep.saved_context(node, _graph(node)).sdk_version == "0.9"
    with pytest.raises(InvalidGraph, match="saved by X SDK '0.9', and X runs '1.0'"):
        ep.saved_context(node, _graph(node), strict_version=True)
