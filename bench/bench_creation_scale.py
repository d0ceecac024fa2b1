"""Session creation against graph size: ort-core and onnxruntime creating sessions for chains of 1,000 to
10,000 Add nodes (models.add_chain), side by side in one run, to show whether creation grows linearly.

Per size: the median of ``--repeats`` creations of each runtime (after one untimed creation per runtime and
size, so imports and caches are not counted), microseconds per node, and the growth from the smallest size
per node (1.00x: linear). Written as the "creation-scale" section of bench/results.md.

  python bench/bench_creation_scale.py [--sizes 1000,2500,5000,10000] [--repeats 3] [--markdown PATH]
"""

from __future__ import annotations

# isort: off
import ort_core  # before numpy, as the other benches import it
# isort: on
import argparse
import os
import sys
import time

import measure
import models

SECTION = "creation-scale"
HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,2500,5000,10000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--markdown", default=os.path.join(HERE, "results.md"))
    args = ap.parse_args(argv)
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    t_start = time.perf_counter()
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        data = models.add_chain(nodes=n).SerializeToString()
        makers = [lambda d=data: ort_core.InferenceSession(d), lambda d=data: onnxruntime.InferenceSession(d, so)]
        measure.creation_ms(makers, repeats=1)  # untimed: imports and caches
        ours, theirs = (ms / 1e3 for ms in measure.creation_ms(makers, args.repeats))
        rows.append((n, ours, theirs))
        print(f"{n} nodes: ort-core {ours:.3f} s, onnxruntime {theirs:.3f} s", flush=True)
    base_ours, base_theirs = rows[0][1] / rows[0][0], rows[0][2] / rows[0][0]
    lines = ["## Session creation against graph size", "",
             f"`python bench/bench_creation_scale.py` (chains of Add nodes; median of {args.repeats} creations "
             "each, after one untimed). Growth: time per node over the smallest graph's (1.00x: linear).", "",
             "| nodes | ort-core s | onnxruntime s | ratio | ort-core µs/node | growth | onnxruntime µs/node "
             "| growth |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, ours, theirs in rows:
        lines.append(f"| {n} | {ours:.3f} | {theirs:.3f} | {ours / theirs:.2f}x | {ours / n * 1e6:.0f} | "
                     f"{ours / n / base_ours:.2f}x | {theirs / n * 1e6:.0f} | {theirs / n / base_theirs:.2f}x |")
    measure.publish_section("\n".join(lines) + "\n", args.markdown, SECTION, time.perf_counter() - t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
