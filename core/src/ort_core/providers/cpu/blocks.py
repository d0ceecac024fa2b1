"""Row blocks for kernels whose temporaries would otherwise make many passes over memory.

A chain of element-wise passes (GELU's erf is a dozen), or a row-wise op with a few of them (softmax), is
run block by block: each block of rows (about ``block`` elements) goes through the whole chain while it is
in cache, and only the input and the result travel to and from memory. Whisper-tiny's encoder (1500
frames): BiasGelu 8.5 -> 2.6 ms and a [6, 1500, 1500] softmax 16 -> 9 ms per call this way.

Blocks run one after another on the calling thread. Spreading them over a second thread was measured and
dropped: these kernels sit next to BLAS products, and OpenBLAS's workers busy-wait for a while after each
product, so on a 2-core machine the second thread shared a core with a spinning worker (Whisper-tiny's
encoder 5-15% slower than with one thread).
"""

from __future__ import annotations

from collections.abc import Callable


def spans(n: int, step: int) -> list[tuple[int, int]]:
    """[0, n) cut into consecutive (start, stop) spans of at most ``step`` (at least 1)."""
    step = max(step, 1)
    return [(a, min(a + step, n)) for a in range(0, n, step)]


def over_rows(fn: Callable, rows: int, width: int, block: int) -> None:
    """Call ``fn(start, stop)`` over consecutive spans of ``rows`` rows of ``width`` elements, each span
    about ``block`` elements (at least one row)."""
    for start, stop in spans(rows, block // max(width, 1)):
        fn(start, stop)


def map_rows(fn: Callable, x, out, block: int) -> None:
    """``out[i:j] = fn(x[i:j])`` over row spans of the 2-D ``x`` (see ``over_rows``)."""
    def step(i: int, j: int) -> None:
        out[i:j] = fn(x[i:j])

    over_rows(step, x.shape[0], x.shape[1], block)
