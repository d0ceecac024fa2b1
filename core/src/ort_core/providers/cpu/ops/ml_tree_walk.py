"""Traversal strategies of the tree-ensemble kernels: which leaf each (sample, tree) pair reaches.

Four strategies, each vectorized over all pairs with Python looping over tree levels only; the first
three are Hummingbird's (Nakandala et al., OSDI 2020):

- ``walk`` (tree traversal): one gather of the packed 16-byte node record per level, ``node = base +
  (x[f] <= t)``; pairs that reached their leaf leave the active set (compacted once 40% of them
  finished), and the loop stops when none is left, so a deep but mostly shallow ensemble (LightGBM:
  depth 18, mean leaf depth 7) costs its mean path rather than its depth.
- ``perfect`` (perfect-tree traversal): trees padded to perfect ones, ``position = 2 * position +
  step``: no child lookup and no finished check, every pair runs all levels.
- ``gemm``: for shallow trees (depth <= 4), every padded node's comparison at once, one ``x`` gather
  and one compare over [samples, trees * nodes]; the leaf follows from the comparison bits without a
  loop over levels (Hummingbird's GEMM strategy, its path-matrix product tabulated, see _gemm_tables).
- ``allnodes``: every node's comparison at once ([samples, nodes]), turned into a next-node table that
  the pairs then follow with one gather per level: the fewest numpy calls per level.
- ``scalar``: no numpy at all: each (sample, tree) pair walks its path in plain Python over lists made once.
  At batch 1 on a single tree every numpy call costs more than the whole path (a run of the bench's
  depth-21 decision trees: 37 -> 17-21 us); with many trees or samples the Python steps add up and the
  vectorized strategies win (``choose``: about 80 ns per step of a path). Plain
  ``x <= t`` trees without NaN in the input only (other branch modes and missing-value tracks take ``walk``).

Where each wins (bench/classic_ml.py's trees, one thread, batches 1/16/128/1000): ``perfect`` for
balanced trees of modest depth (sklearn gradient boosting, depth 3; XGBoost, depth 6; a depth-12
random forest) from batch 16 on, 10-25% ahead of ``walk``; ``walk`` for deep or lopsided trees
(LightGBM, depth 18-20; random forests and single trees of depth 21-26) from batch 16 on; ``allnodes``
at batch 1 (and 16 for small trees) unless the model has very many nodes (a 100-tree random forest:
180k-280k nodes): 2-3x ahead of the walks on a single tree or LightGBM; ``gemm`` never: at batch 1 it
ties ``allnodes`` on depth-3 trees, from batch 16 on it is 2x behind ``perfect`` (it compares every
padded node). ``choose`` encodes this as a cost model; ``FORCE_STRATEGY`` in ml_tree overrides it.

Blocks and threads: a batch is cut into row blocks of at most 64k pairs (ml_tree), which keeps the
walk's arrays in cache (2.5x faster than one block of 600k pairs). The walk is independent per sample,
so the blocks of a large batch run on a small shared thread pool (numpy releases the GIL inside its
loops; 1.3-1.8x on 2 cores). A batch uses at most ``thread_budget()`` threads: the session's budget
(``intra_op_num_threads``, by default the CPUs this process may run on), at most ``MAX_THREADS`` (4), so
that several sessions running at once do not oversubscribe the machine; a batch gets threads only when
each has at least ``MIN_PAIRS_PER_THREAD`` pairs of work.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ....limits import current
from ....threads import available_cpus
from .ml_tree_table import Forest

MAX_THREADS = 4
MIN_PAIRS_PER_THREAD = 1 << 15
GEMM_MAX_DEPTH = 4  # path matrix [2**d - 1, 2**d] per tree position; comparisons for every padded node
PERFECT_MAX_SLACK = 4.0  # padded positions per real node up to which the perfect walk is considered
STRATEGIES = ("walk", "perfect", "gemm", "allnodes", "scalar")
SCALAR_NS_PER_STEP = 80  # one Python step of the scalar walk (2-core x86: 64-78 ns measured on 100-tree models)
_COMPACT_MIN = 4096  # below this many active pairs numpy's per-call cost outweighs compacting
_COMPACT_FRACTION = 0.4  # compact the active pairs once this share of them has finished (LightGBM: best of 0.15-0.6)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def thread_budget() -> int:
    """Threads for one batch: the running session's budget, at most MAX_THREADS."""
    return max(1, min(MAX_THREADS, current().threads or available_cpus()))


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=MAX_THREADS - 1, thread_name_prefix="ort-core-trees")
        return _pool


def one_block(n: int, pairs_per_row: int, max_rows: int) -> bool:
    """Whether a batch of ``n`` rows is one block on the calling thread whatever the thread budget (too few
    pairs for a second thread: see ``run_blocks``)."""
    return n <= max_rows and n * max(pairs_per_row, 1) < 2 * MIN_PAIRS_PER_THREAD


def run_blocks(fn, n: int, pairs_per_row: int, max_rows: int) -> None:
    """Call ``fn(start, stop)`` over row blocks of ``[0, n)`` of at most ``max_rows`` rows (small
    blocks keep the walk's arrays in cache), the blocks dealt round-robin to the calling thread and
    pool workers when the batch is worth it (see the module docstring)."""
    if one_block(n, pairs_per_row, max_rows):
        fn(0, n)
        return
    threads = min(thread_budget(), n * max(pairs_per_row, 1) // MIN_PAIRS_PER_THREAD)
    if threads <= 1 and n <= max_rows:
        fn(0, n)
        return
    blocks = max(-(-n // max(max_rows, 1)), threads, 1)
    edges = np.linspace(0, n, blocks + 1).astype(np.int64).tolist()
    spans = [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    if threads <= 1 or len(spans) <= 1:
        for a, b in spans:
            fn(a, b)
        return
    groups = [spans[i::threads] for i in range(threads)]

    def run(group: list) -> None:
        for a, b in group:
            fn(a, b)

    futures = [_executor().submit(run, g) for g in groups[1:]]
    run(groups[0])
    for f in futures:
        f.result()


def choose(forest: Forest, n: int) -> str:
    """The strategy for ``n`` samples, by a cost model fitted on bench/classic_ml.py's trees (2-core
    x86, ns): a level costs the walk ~4 us of numpy calls plus ~4 ns per active pair (pairs leave at
    their leaf: mean leaf depth), the perfect walk ~3.5 us plus ~3 ns per pair for every level (only for
    trees whose padding stays small), allnodes ~1.5 ns per (sample, node) plus ~0.7 us per level. gemm
    never won there (see the module docstring) and is only run when forced."""
    d, t, m = forest.depth, forest.roots.size, forest.size
    if d == 0:
        return "perfect"
    pairs = n * t
    costs = {"walk": d * 4000 + pairs * forest.mean_depth * 4, "allnodes": n * m * 1.5 + d * 700}
    if not forest.any_special:
        costs["scalar"] = 1500 + pairs * max(forest.mean_depth, 1.0) * SCALAR_NS_PER_STEP
    if perfect_fits(forest):
        costs["perfect"] = d * 3500 + pairs * d * 3
    return min(costs, key=costs.get)


def perfect_fits(forest: Forest, slack: float = PERFECT_MAX_SLACK) -> bool:
    """Whether padding the trees to perfect ones costs at most ``slack`` times the real node count
    (and stays under 4M positions)."""
    padded = forest.roots.size * 2.0 ** (forest.depth + 1)
    return padded <= min(max(slack * forest.size, 4096), 1 << 22)


def leaves(forest: Forest, x: np.ndarray, strategy: str) -> np.ndarray:
    """[n, trees] new ids of the leaves reached by each sample (``x``: [n, F] C-contiguous, in the
    comparison dtype)."""
    n, t = x.shape[0], forest.roots.size
    if forest.depth == 0 or n == 0 or t == 0:
        return np.broadcast_to(forest.roots, (n, t))
    check_nan = forest.any_nan_step and x.dtype.kind == "f" and bool(np.isnan(x).any())
    if strategy == "scalar" and (forest.any_special or check_nan):
        strategy = "walk"  # the scalar walk knows plain x <= t only
    return _STRATEGY[strategy](forest, x, check_nan).reshape(n, t)


def scalar_row(forest: Forest, row: list, dtype) -> list[int]:
    """The leaf each tree sends one sample (``row``: its features as Python floats) to, walked in plain Python
    over lists made once; plain ``x <= t`` trees and a row without NaN only."""
    base, feature, threshold, roots = forest.lists(dtype)
    out = []
    for node in roots:
        while True:  # a leaf sends every sample to itself (its threshold is NaN: x <= NaN never holds)
            nxt = base[node] + (row[feature[node]] <= threshold[node])
            if nxt == node:
                break
            node = nxt
        out.append(node)
    return out


def _scalar(forest: Forest, x: np.ndarray, check_nan: bool) -> np.ndarray:
    return np.array([leaf for row in x.tolist() for leaf in scalar_row(forest, row, x.dtype)], dtype=np.intp)


def _walk(forest: Forest, x: np.ndarray, check_nan: bool) -> np.ndarray:
    n, f = x.shape
    t = forest.roots.size
    rec = forest.records(x.dtype)
    xf = x.reshape(-1)
    cur = np.tile(forest.roots, n)
    off = np.repeat(np.arange(0, n * f, f, dtype=np.intp), t)
    out = pos = None  # pos: the pair of each active entry, once compaction began
    for level in range(forest.depth):
        r = rec.take(cur)
        v = xf.take(off + r["f"])
        th = r["t"]
        step = np.less_equal(v, th)
        if forest.any_special or check_nan:
            forest.fix_steps(step, v, th, lambda cur=cur: cur, check_nan)
        nxt = r["b"] + step
        done = nxt == cur  # leaves stay where they are
        cur = nxt if nxt.dtype == np.intp else nxt.astype(np.intp)
        k = np.count_nonzero(done)
        if k == cur.size:
            break
        if level < forest.depth - 1 and k >= _COMPACT_FRACTION * cur.size and cur.size >= _COMPACT_MIN:
            if out is None:
                out = np.empty(n * t, dtype=np.intp)
                pos = np.arange(n * t, dtype=np.intp)
            gone = done.nonzero()[0]
            out.put(pos.take(gone), cur.take(gone))
            keep = (~done).nonzero()[0]
            cur, off, pos = cur.take(keep), off.take(keep), pos.take(keep)
    if out is None:
        return cur
    out[pos] = cur
    return out


def _allnodes(forest: Forest, x: np.ndarray, check_nan: bool) -> np.ndarray:
    n = x.shape[0]
    m, t = forest.size, forest.roots.size
    feat, th = forest.columns(x.dtype)
    v = x.take(feat, axis=1)  # [n, nodes]: every node's comparison at once
    step = np.less_equal(v, th)
    if forest.any_special or check_nan:
        flat_v, flat_th = v.reshape(-1), np.broadcast_to(th, v.shape).reshape(-1)
        forest.fix_steps(step.reshape(-1), flat_v, flat_th,
                         lambda: np.broadcast_to(np.arange(m, dtype=np.intp), v.shape).reshape(-1), check_nan)
    nxt = forest.base + step  # [n, nodes]: where each node sends each sample
    cur = np.tile(forest.roots, n) if n > 1 else forest.roots.copy()
    if n > 1:
        rows = np.arange(0, n * m, m, dtype=np.intp)
        nxt += rows[:, None]
        cur += np.repeat(rows, t)
    nxt = nxt.reshape(-1)
    for level in range(forest.depth):
        cur = nxt.take(cur)
        if level % 4 == 3 and level < forest.depth - 1 and (nxt.take(cur) == cur).all():
            break
    if n > 1:
        cur -= np.repeat(rows, t)
    return cur


def _perfect(forest: Forest, x: np.ndarray, check_nan: bool) -> np.ndarray:
    n, f = x.shape
    t = forest.roots.size
    nodes, recs, leaf = forest.perfect(x.dtype)
    xf = x.reshape(-1)
    p = np.tile(np.arange(t, dtype=np.intp), n) if n > 1 else np.arange(t, dtype=np.intp)
    off = np.repeat(np.arange(0, n * f, f, dtype=np.intp), t) if n > 1 else None  # one row: no offsets
    for level, rec in enumerate(recs):
        r = rec.take(p)
        v = xf.take(r["f"] if off is None else off + r["f"])
        th = r["t"]
        step = np.less_equal(v, th)
        if forest.any_special or check_nan:
            forest.fix_steps(step, v, th, lambda p=p, level=level: nodes[level][p], check_nan)
        p *= 2
        p += step
    return leaf.take(p)


def _gemm(forest: Forest, x: np.ndarray, check_nan: bool) -> np.ndarray:
    n = x.shape[0]
    t = forest.roots.size
    feat, th, node_ids, table = _gemm_tables(forest, x.dtype)
    v = x.take(feat, axis=1)  # [n, trees * inner]: every padded node's comparison at once
    step = np.less_equal(v, th)
    if forest.any_special or check_nan:
        flat_v, flat_th = v.reshape(-1), np.broadcast_to(th, v.shape).reshape(-1)
        forest.fix_steps(step.reshape(-1), flat_v, flat_th,
                         lambda: np.broadcast_to(node_ids, v.shape).reshape(-1), check_nan)
    inner = 2 ** forest.depth - 1
    bits = np.packbits(step.reshape(n * t, inner), axis=1, bitorder="little")
    code = bits[:, 0] if inner <= 8 else bits.view("<u2")[:, 0]
    idx = table.take(code)
    idx += np.tile(np.arange(t, dtype=np.intp) << forest.depth, n)
    return forest.perfect(x.dtype)[2].take(idx)


def _gemm_tables(forest: Forest, dtype) -> tuple:
    """Per padded node of every tree (tree-major, breadth-first within a tree): features, thresholds and
    node ids; and the leaf of the perfect tree for each vector of comparison bits. Hummingbird multiplies
    the comparisons [pairs, 2**d - 1] with the path matrix [2**d - 1, 2**d] (+1 where the path to a leaf
    takes the second child, -1 the first) and keeps the leaf whose sum counts all its second-child turns;
    with at most 15 comparisons per tree that product is a function of the packed bits, tabulated here
    once (numpy's BLAS is slow on so skinny a product, and threads it)."""
    key = ("gemm", np.dtype(dtype))
    got = forest._perfect.get(key)
    if got is None:
        nodes, recs, _ = forest.perfect(dtype)
        t, d = forest.roots.size, forest.depth

        def by_tree(parts: list) -> np.ndarray:
            return np.concatenate([a.reshape(t, -1) for a in parts], axis=1).reshape(-1)

        feat = by_tree([r["f"].astype(np.intp) for r in recs])
        th = by_tree([r["t"] for r in recs])
        node_ids = by_tree(nodes[:-1])
        code = np.arange(2 ** (2 ** d - 1), dtype=np.int64)
        leaf = np.zeros(code.size, dtype=np.intp)
        for level in range(d):  # the path of every bit vector, a level at a time
            leaf = 2 * leaf + ((code >> (2 ** level - 1 + leaf)) & 1)
        got = (feat, th, node_ids, leaf)
        forest._perfect[key] = got
    return got


_STRATEGY = {"walk": _walk, "perfect": _perfect, "gemm": _gemm, "allnodes": _allnodes, "scalar": _scalar}
