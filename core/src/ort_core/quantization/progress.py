"""A one-line progress counter on stderr for calibration: shown when stderr is a terminal or when asked
(extra_options ``CalibProgress``), silent otherwise, so logs and tests stay clean. Not a general widget."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, label: str, show: bool | None = None, stream=None) -> None:
        self.stream = stream or sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.show = bool(isatty and isatty()) if show is None else bool(show)
        self.label, self.count, self.start = label, 0, time.perf_counter()

    def step(self) -> None:
        self.count += 1
        if self.show:
            elapsed = time.perf_counter() - self.start
            self.stream.write(f"\r{self.label}: {self.count} batches, {elapsed:.1f} s")
            self.stream.flush()

    def close(self) -> None:
        if self.show:
            self.stream.write("\n")
            self.stream.flush()
