"""Measurements behind the bench: latency, session creation, peak memory and ort-core's BLAS floor.

Latency: rounds alternate the runtimes (see ``timed``), so the noisy machine's ups and downs fall on
all of them alike. Session creation: wall time of ``InferenceSession(path)`` with default options,
alternating the runtimes, median of a few, after each runtime already created one session for the
model (the first creation in a process also pays lazy imports and caches, so it is left out).

Peak memory: each runtime runs in a fresh subprocess (this file run as a script): import the runtime
and numpy, load the feeds, let ort-core discover its plugins; then reset the kernel's high-water mark
(``echo 5 > /proc/self/clear_refs``) and take the resident set (VmRSS) as the baseline; load the
model, create the session, run it N times; peak = VmHWM - baseline. Without clear_refs (not Linux) it
is ru_maxrss at the end minus ru_maxrss after the imports. So it counts what the model costs: weights,
session structures, arenas and intermediate tensors at their high point, not the runtime's code.
Helper processes (ort-core's forked shape-inference helper) are not counted.

BLAS floor: ort-core runs the model with profiling on; every GEMM-carrying node in the trace (Conv,
ConvTranspose, MatMul, Gemm, their ort_core fused forms, attention ops, LSTM/GRU/RNN) is turned into
the matrix products it needs at least (Conv: per group (Cout/g x Cin/g*kh*kw) @ (Cin/g*kh*kw x
batch*out spatial), stacked over the groups; recurrent ops: one input projection over the whole
sequence plus one recurrent product per step), and ``np.matmul`` on random float32 arrays of exactly
those shapes (into preallocated outputs) is timed: all of them in one call, timed in the same
alternating rounds as the runtimes (so it sees the same noise), median over the rounds. The floor is
the time the products alone take through numpy's BLAS on this machine; everything else a runtime does
(im2col copies, elementwise ops, normalisation, softmax, dispatch, allocation) is above the floor.
"""

from __future__ import annotations

import collections
import gc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np

CPU = "CPUExecutionProvider"
GEMM_OPS = {"Conv", "FusedConv", "ConvTranspose", "MatMul", "FusedMatMul", "MatMulBias", "Gemm", "FusedGemm",
            "Attention", "SelfAttention", "MultiHeadAttention", "LSTM", "GRU", "RNN"}


# ------------------------------------------------------------------------------------------- latency
def machine() -> str:
    """The machine line of a bench header: architecture, cores, Python, and which kernels numpy's BLAS runs
    (OpenBLAS picks them at load time; OPENBLAS_CORETYPE set in the environment overrides its choice)."""
    from ort_core import blas_info

    core = blas_info()["core"]
    blas = f", numpy's OpenBLAS on its {core} kernels" if core else ""
    return f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}{blas}"


def timed(fns: list, runs: int, warmup: int = 2, block: int = 10, settle: float = 0.3) -> list[np.ndarray]:
    """Milliseconds per call of each function, measured in rounds: each round gives every
    function, after a pause, one or two untimed calls and then ``block`` timed ones. Rounds spread the
    machine's ups and downs over all runtimes alike; the pause lets the previous runtime's
    threads stop spinning (BLAS and inference thread pools busy-wait a while after a call), which
    would otherwise be timed against the next runtime's work."""
    per_call = []
    for fn in fns:
        t0 = time.perf_counter()
        for _ in range(warmup):
            fn()
        per_call.append((time.perf_counter() - t0) / max(warmup, 1))
    t: list[list[float]] = [[] for _ in fns]
    while len(t[0]) < runs:
        for k, fn in enumerate(fns):
            time.sleep(settle)
            for _ in range(2 if per_call[k] < 0.05 else 1):
                fn()
            for _ in range(min(block, runs - len(t[k]))):
                t0 = time.perf_counter()
                fn()
                t[k].append(time.perf_counter() - t0)
    return [np.array(x) * 1e3 for x in t]


def plan_runs(fns: list, max_runs: int, budget_s: float, min_runs: int = 5) -> tuple[int, int]:
    """(runs, block): as many runs as fit ``budget_s`` seconds for all ``fns`` (one call each timed
    here), between ``min_runs`` and ``max_runs``, in blocks small enough for at least three rounds."""
    t0 = time.perf_counter()
    for fn in fns:
        fn()
    per_round = time.perf_counter() - t0
    runs = max_runs if budget_s <= 0 else max(min(min_runs, max_runs), min(max_runs, int(budget_s / per_round)))
    return runs, max(1, min(10, runs // 3))


def placed(sess, provider: str) -> tuple[int, int, int]:
    """(nodes on ``provider``, nodes in all, subgraphs) of an ort-core session's placement."""
    info = sess.get_provider_graph_assignment_info()
    return sum(len(a.node_names) for a in info if a.provider == provider), sum(len(a.node_names) for a in info), \
        len(info)


def summary(ms: np.ndarray) -> tuple[float, float]:
    return float(np.median(ms)), float(np.percentile(ms, 90))


# ---------------------------------------------------------------------------------- session creation
def creation_ms(factories: list, repeats: int = 3) -> list[float]:
    """Median wall time (ms) of each factory over ``repeats`` calls, alternating the factories."""
    t: list[list[float]] = [[] for _ in factories]
    for _ in range(repeats):
        for k, make in enumerate(factories):
            gc.collect()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                sess = make()
                t[k].append((time.perf_counter() - t0) * 1e3)
            del sess
    return [statistics.median(x) for x in t]


# -------------------------------------------------------------------------------------- peak memory
def peak_memory_mb(runtime: str, path: str, feeds_npz: str, runs: int) -> float | None:
    """Peak resident memory (MiB) that loading and running ``path`` costs ``runtime`` ("ort-core" or
    "onnxruntime") in a fresh subprocess; None when the subprocess fails (its stderr is printed)."""
    cmd = [sys.executable, os.path.abspath(__file__), runtime, path, feeds_npz, str(runs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        print(f"  peak memory of {runtime} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])["peak_kib"] / 1024.0


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _maxrss_kib() -> int:
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss // 1024 if sys.platform == "darwin" else rss  # bytes on macOS, KiB on Linux


def _peak_worker(runtime: str, path: str, feeds_npz: str, runs: int) -> None:
    feeds = dict(np.load(feeds_npz))
    if runtime == "ort-core":
        import ort_core

        ort_core.get_available_providers()  # plugin discovery: the runtime's cost, not the model's

        def make():
            return ort_core.InferenceSession(path)
    else:
        import onnxruntime

        def make():
            return onnxruntime.InferenceSession(path, providers=[CPU])
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # resets VmHWM to the current VmRSS
        method, base = "VmHWM", _status_kib("VmRSS")
    except OSError:
        method, base = "ru_maxrss", _maxrss_kib()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = make()
    for _ in range(runs):
        sess.run(None, feeds)
    peak = _status_kib("VmHWM") if method == "VmHWM" else _maxrss_kib()
    print(json.dumps({"peak_kib": peak - base, "method": method}))


# --------------------------------------------------------------------------------------- BLAS floor
def profile_ort_core(path: str, make_feeds, runs: int, folder: str) -> dict:
    """Run ort-core ``runs`` times with profiling on, on ``make_feeds(session.get_inputs())``. Returns
    ``steps``: per executed step, op, median duration in ms, input and output shapes, the attributes
    of the optimized model's node of that name."""
    import onnx

    import ort_core

    opts = ort_core.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(folder, "profile_")
    opts.optimized_model_filepath = os.path.join(folder, "optimized.onnx")
    sess = ort_core.InferenceSession(path, opts)
    feeds = make_feeds(sess.get_inputs())
    sess.run(None, feeds)  # warm-up, dropped below
    for _ in range(runs):
        sess.run(None, feeds)
    trace = sess.end_profiling()
    with open(trace, encoding="utf-8") as f:
        events = [e for e in json.load(f) if e.get("cat") == "Node"]
    os.remove(trace)
    optimized = onnx.load(opts.optimized_model_filepath, load_external_data=False)
    attrs = {n.name: {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in optimized.graph.node}
    per_run = len(events) // (runs + 1)
    steps = []
    for k in range(per_run):
        same = [events[r * per_run + k] for r in range(1, runs + 1)]
        e = same[0]
        name = e["name"].removesuffix("_kernel_time")  # onnxruntime's event name: the node's name
        steps.append({"op": e["args"]["op_name"], "ms": statistics.median(x["dur"] for x in same) / 1e3,
                      "inputs": [_shape(d) for d in e["args"]["input_type_shape"]],
                      "outputs": [_shape(d) for d in e["args"]["output_type_shape"]],
                      "attrs": attrs.get(name, {})})
    return {"steps": steps}


def _shape(type_shape: dict) -> list[int] | None:
    (dtype, shape), = type_shape.items()
    return None if dtype == "NoneType" else list(shape)


def top_ops(steps: list[dict], n: int = 3) -> list[tuple[str, float]]:
    """The ``n`` op types taking the most time, with their share of the profiled total."""
    by_op: collections.Counter = collections.Counter()
    for s in steps:
        by_op[s["op"]] += s["ms"]
    total = sum(by_op.values()) or 1.0
    return [(op, ms / total) for op, ms in by_op.most_common(n)]


def gemm_products(step: dict) -> list[tuple[tuple, tuple, int]]:
    """The matrix products a step needs at least: ``(a_shape, b_shape, times)`` for ``np.matmul``."""
    op, ins, outs = step["op"].rpartition("::")[2], step["inputs"], step["outputs"]
    if op not in GEMM_OPS or len(ins) < 2 or ins[0] is None or ins[1] is None or not outs or outs[0] is None:
        return []
    x, w, y = ins[0], ins[1], outs[0]
    if op in ("Conv", "FusedConv"):
        groups = x[1] // w[1]
        m, k, n = w[0] // groups, w[1] * math.prod(w[2:]), y[0] * math.prod(y[2:])
        return [_grouped(groups, m, k, n)]
    if op == "ConvTranspose":
        groups = y[1] // w[1]
        m, k, n = w[1] * math.prod(w[2:]), x[1] // groups, x[0] * math.prod(x[2:])
        return [_grouped(groups, m, k, n)]
    if op in ("MatMul", "FusedMatMul", "MatMulBias"):
        return [(tuple(x), tuple(w), 1)]
    if op in ("Gemm", "FusedGemm"):
        m, n = y
        return [((m, math.prod(x) // m), (math.prod(x) // m, n), 1)]
    if op in ("LSTM", "GRU", "RNN"):
        seq, batch, size = x
        dirs, gates_h = w[0], w[1]
        hidden = ins[2][2] if len(ins) > 2 and ins[2] else gates_h // {"LSTM": 4, "GRU": 3}.get(op, 1)
        return [((seq * batch, size), (size, gates_h), dirs), ((batch, hidden), (hidden, gates_h), dirs * seq)]
    return _attention_products(step)


def _attention_products(step: dict) -> list[tuple[tuple, tuple, int]]:
    """Attention (ONNX, q/k/v in 3-D or 4-D) and the contrib form (input, packed QKV weight): the
    projection if packed, then scores = q k^T and context = p v for every (batch, head)."""
    ins, attrs = step["inputs"], step["attrs"]
    out = []
    if len(ins[1]) == 2:  # contrib Attention: input (B, S, hidden) @ weight (hidden, 3 hidden)
        b, s, hidden = ins[0]
        out.append(((b * s, hidden), tuple(ins[1]), 1))
        heads = int(attrs.get("num_heads", max(1, hidden // 64)))
        q = k = v = [b, heads, s, hidden // heads]
    elif len(ins[0]) == 4:
        q, k, v = ins[0], ins[1], ins[2] if len(ins) > 2 and ins[2] else ins[1]
    else:  # 3-D (B, S, heads * D)
        heads_q = int(attrs.get("q_num_heads", attrs.get("num_heads", max(1, ins[0][2] // 64))))
        heads_kv = int(attrs.get("kv_num_heads", heads_q))
        (b, sq, hq), (_, skv, hk) = ins[0], ins[1]
        hv = ins[2][2] if len(ins) > 2 and ins[2] else hk
        q, k = [b, heads_q, sq, hq // heads_q], [b, heads_kv, skv, hk // heads_kv]
        v = [b, heads_kv, skv, hv // heads_kv]
    bh = q[0] * q[1]
    out.append(((bh, q[2], q[3]), (bh, k[3], k[2]), 1))
    out.append(((bh, q[2], k[2]), (bh, v[2], v[3]), 1))
    return out


def _grouped(groups: int, m: int, k: int, n: int) -> tuple[tuple, tuple, int]:
    return ((m, k), (k, n), 1) if groups == 1 else ((groups, m, k), (groups, k, n), 1)


def floor_fn(steps: list[dict]):
    """A function doing every product of the steps once with ``np.matmul`` on seeded float32 arrays of
    those shapes, into preallocated outputs (arrays shared between products of one shape pair). Timed
    in the same rounds as the runtimes, its median is the floor; None when there is no product."""
    counts: collections.Counter = collections.Counter()
    for step in steps:
        for a, b, times in gemm_products(step):
            counts[(a, b)] += times
    if not counts:
        return None
    rng = np.random.default_rng(0)
    work = []
    for (a_shape, b_shape), times in counts.items():
        a = rng.standard_normal(a_shape, dtype=np.float32)
        b = rng.standard_normal(b_shape, dtype=np.float32)
        work.append((a, b, np.matmul(a, b), times))
    matmul = np.matmul

    def run() -> None:
        for a, b, out, times in work:
            for _ in range(times):
                matmul(a, b, out=out)

    return run


if __name__ == "__main__":
    _peak_worker(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))


# ------------------------------------------------------------------------------------------- output
def publish(text: str, path: str | None, seconds: float | None = None) -> None:
    """Print a bench's Markdown (and how long the run took), and write it to ``path`` when one is given;
    sections other benches keep in that file (``publish_section``) stay at its end."""
    print(f"\n{text}" + (f"\n({seconds:.0f} s)" if seconds is not None else ""))
    if path:
        kept = "".join(_sections(path).values())
        with open(path, "w", encoding="utf-8") as f:
            f.write(text if not kept else text.rstrip("\n") + "\n\n" + kept)
        print(f"Markdown written to {path}")


def publish_section(text: str, path: str | None, name: str, seconds: float | None = None) -> None:
    """Print a bench's Markdown and put it into ``path`` as the section ``name``, replacing that section
    and leaving the rest of the file as it was (a new file holds only the section)."""
    print(f"\n{text}" + (f"\n({seconds:.0f} s)" if seconds is not None else ""))
    if not path:
        return
    block = f"<!-- section:{name} -->\n{text.rstrip()}\n<!-- /section:{name} -->\n"
    body = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    old = _sections(path).get(name)
    body = body.replace(old, block) if old else (body.rstrip("\n") + "\n\n" if body else "") + block
    with open(path, "w", encoding="utf-8") as f:
        f.write(body)
    print(f"Markdown section '{name}' written to {path}")


def _sections(path: str) -> dict[str, str]:
    """Marked sections of a Markdown file: name -> the text from its opening marker through its closing one."""
    if not os.path.exists(path):
        return {}
    text = open(path, encoding="utf-8").read()
    found = {}
    for m in re.finditer(r"<!-- section:([\w-]+) -->\n.*?<!-- /section:\1 -->\n?", text, flags=re.S):
        found[m.group(1)] = m.group(0)
    return found
