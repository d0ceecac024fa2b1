"""``ort-conformance diff MODEL --provider NAME``: find the first node a provider computes differently.

The model runs twice with every intermediate tensor of its main graph made a graph output: once with
``providers=[NAME, "CPUExecutionProvider"]`` and once on the CPU provider alone, both with graph
optimizations off (so each intermediate keeps its name). Outputs are compared node by node in the
graph's order (ONNX requires a topological one) with the suite's comparison (compare.py); the first
node whose outputs differ beyond rtol/atol is named with its op type, the provider that ran it and both
values, as Polygraphy does for TensorRT. Exit status: 0 when nothing differs, 1 when something does,
2 for a usage error or a model that cannot be loaded or run.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np

from .compare import mismatch

CPU = "CPUExecutionProvider"

EPILOG = """\
examples:
  ort-conformance diff model.onnx --provider OpenVINOExecutionProvider
  ort-conformance diff model.onnx --provider MyExecutionProvider --inputs feeds.npz --atol 1e-4
"""


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ort-conformance diff", epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 description="run a model on a provider and on the CPU provider with every "
                                             "intermediate value exposed; name the first node whose outputs differ")
    ap.add_argument("model", help="an .onnx file")
    ap.add_argument("--provider", required=True, help="the provider to check, e.g. OpenVINOExecutionProvider")
    ap.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    ap.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    ap.add_argument("--seed", type=int, default=0, help="seed for the random inputs (default 0)")
    ap.add_argument("--inputs", metavar="FILE.npz", default=None,
                    help="input values by name; inputs it lacks get seeded random data")
    return ap


class DiffError(Exception):
    """The model cannot be loaded, prepared or run: exit status 2."""


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)  # exits 2 on a usage error
    try:
        return _diff(args)
    except DiffError as e:
        print(f"ort-conformance diff: error: {e}", file=sys.stderr)
        return 2


def expose_intermediates(model):
    """A copy of ``model`` whose main graph outputs every node output of known tensor type (in node
    order after the original outputs); returns (model, [(node, [output names]) in graph order])."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a model shape inference cannot handle still runs; fewer values exposed
        inferred = model
    known = {vi.name: vi.type for vi in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input)}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    nodes = []
    for node in out.graph.node:
        names = []
        for name in node.output:
            t = known.get(name)
            if not name or t is None or t.WhichOneof("value") != "tensor_type" or not t.tensor_type.elem_type:
                continue
            if name not in have:
                # element type only: a shape inferred here must not constrain what the runtime computes
                out.graph.output.append(onnx.helper.make_tensor_value_info(name, t.tensor_type.elem_type, None))
                have.add(name)
            names.append(name)
        nodes.append((node, names))
    return out, nodes


def _diff(args) -> int:
    import onnx

    import ort_core

    if args.provider not in ort_core.get_available_providers():
        raise DiffError(f"provider {args.provider} is not installed or not available here; available: "
                        f"{', '.join(ort_core.get_available_providers())}")
    try:
        model = onnx.load(args.model)
    except Exception as e:  # noqa: BLE001 - protobuf and OS errors alike
        raise DiffError(f"cannot load {args.model}: {e}") from e
    exposed, nodes = expose_intermediates(model)
    data = exposed.SerializeToString()
    target = _session(data, [args.provider, CPU] if args.provider != CPU else [CPU])
    reference = _session(data, [CPU])
    feeds = _feeds(reference, args.inputs, args.seed)
    names = [o.name for o in reference.get_outputs()]
    try:
        got = dict(zip(names, target.run(names, feeds)))
    except Exception as e:  # noqa: BLE001 - a provider's failure is a finding, reported as such
        raise DiffError(f"run on {args.provider} failed: {type(e).__name__}: {e}") from e
    try:
        expected = dict(zip(names, reference.run(names, feeds)))
    except Exception as e:  # noqa: BLE001
        raise DiffError(f"run on {CPU} failed: {type(e).__name__}: {e}") from e
    ran_by = {name: a.provider for a in target.get_provider_graph_assignment_info() for name in a.node_names}
    on_provider = sum(1 for node, _ in nodes if ran_by.get(node.name) == args.provider)
    print(f"{args.model}: {len(nodes)} nodes, {on_provider} run by {args.provider}, "
          f"{sum(len(n) for _, n in nodes)} node outputs compared (rtol {args.rtol:g}, atol {args.atol:g})")
    if not on_provider and args.provider != CPU:
        print(f"note: {args.provider} took no node of this model; every node ran on {CPU}")

    first = None  # (node, message)
    bad_outputs: list[str] = []
    for node, outs in nodes:
        for name in outs:
            m = mismatch(expected[name], got[name], args.rtol, args.atol, where=f"output '{name}'")
            if m:
                bad_outputs.append(name)
                if first is None:
                    first = (node, m)
    if first is None:
        print(f"no difference: every node output agrees with {CPU}")
        return 0
    node, message = first
    first_outs = [n for n in node.output if n in bad_outputs]
    label = node.name or f"(unnamed, outputs {', '.join(node.output)})"
    print(f"first differing node: {label} (op {node.op_type}, run by {ran_by.get(node.name, '?')})")
    print(f"  {message}")
    later = [n for n in bad_outputs if n not in first_outs]
    downstream = _downstream(nodes, set(first_outs))
    print(f"downstream: {len(later)} more node output(s) differ, "
          f"{len([n for n in later if n in downstream])} of them computed from {label}'s outputs")
    return 1


def _session(data: bytes, providers: list[str]):
    import ort_core

    so = ort_core.SessionOptions()
    so.graph_optimization_level = ort_core.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the provider-assignment summary
            return ort_core.InferenceSession(data, sess_options=so, providers=providers)
    except Exception as e:  # noqa: BLE001 - OrtError and what a plugin raises
        raise DiffError(f"cannot create a session on {', '.join(providers)}: {type(e).__name__}: {e}") from e


def _feeds(sess, path: str | None, seed: int) -> dict[str, np.ndarray]:
    from ort_core.cli import random_input

    feeds = {}
    if path:
        try:
            with np.load(path, allow_pickle=False) as f:
                feeds = {k: f[k] for k in f.files}
        except (OSError, ValueError) as e:
            raise DiffError(f"cannot read --inputs {path}: {e}") from e
        wanted = {a.name for a in sess.get_inputs()}
        extra = sorted(set(feeds) - wanted)
        if extra:
            raise DiffError(f"--inputs {path} has values for {', '.join(extra)}, which are not inputs of the model "
                            f"(its inputs: {', '.join(sorted(wanted))})")
    rng = np.random.default_rng(seed)
    for arg in sess.get_inputs():
        if arg.name not in feeds:
            try:
                feeds[arg.name] = random_input(arg, rng)
            except ValueError as e:
                raise DiffError(f"{e} (or give it in --inputs FILE.npz)") from e
    return feeds


def _downstream(nodes, start: set[str]) -> set[str]:
    """Every value computed from ``start`` (graph order is topological, so one pass does)."""
    reached = set(start)
    for node, _ in nodes:
        if any(i in reached for i in node.input):
            reached.update(o for o in node.output if o)
    return reached
