"""Thread budgets: how many threads a session's kernels may use (``intra_op_num_threads``), and the
process-wide thread pools that follow the budgets of the live sessions.

A session's budget is its ``intra_op_num_threads``, or, at 0 (the default), the CPUs this process may run
on. Kernels read it from the run's context (``limits.current().threads``: the CPU provider's tree walk
splits its batch over at most that many threads), and providers from their ``SessionContext``
(``intra_op_num_threads``: oneDNN's OpenMP threads and OpenVINO's inference threads follow it unless the
provider's own option, ``num_threads`` / ``num_of_threads``, says otherwise).

numpy's BLAS (OpenBLAS) has one thread pool per process, so two sessions with different budgets cannot
each have their own. The rule (onnxruntime's global thread pool in spirit): the BLAS pool follows the
largest budget among live sessions, where a session at the default counts as BLAS's own thread count
before ort-core changed it (the user's OPENBLAS_NUM_THREADS / OMP_NUM_THREADS, else every core). As long
as no session sets a budget, BLAS is left alone. The pool is resized when a session is created or
collected, through threadpoolctl, the well-kept library for exactly this (numpy wheels bundle OpenBLAS
under a mangled name, and threadpoolctl finds it).

Under load, at the default: OpenBLAS splits each product evenly over its threads, so when another process
keeps some of the cores busy, every product waits for its slowest (descheduled) thread; on 2 cores with one
busy process ResNet-50 took 3.2x its idle time with 2 BLAS threads and 1.0x-1.7x with one. So while every live
session is at the default budget, ``BlasPool.before_run`` looks at the machine at most every
``CHECK_INTERVAL`` seconds (the runnable threads in /proc/loadavg that are not this process's) and gives BLAS
only the CPUs the others leave free (at least one), up to its own count; when the load goes, BLAS gets its
threads back. An explicit budget is never changed; ``ORT_CORE_ADAPTIVE_BLAS=0`` turns this off; where there
is no /proc (not Linux) nothing changes.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from typing import Any


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def budget_of(intra_op_num_threads: Any) -> int:
    """The threads a session with this ``intra_op_num_threads`` may use (0: every available CPU). Raises
    ValueError for a negative or non-integer value, naming it."""
    if isinstance(intra_op_num_threads, bool) or not isinstance(intra_op_num_threads, int):
        raise ValueError(f"intra_op_num_threads={intra_op_num_threads!r}: expected a whole number "
                         "(0: one thread per available CPU)")
    if intra_op_num_threads < 0:
        raise ValueError(f"intra_op_num_threads={intra_op_num_threads}: must be >= 0 (0: one thread per "
                         "available CPU)")
    return intra_op_num_threads or available_cpus()


class BlasPool:
    """The process's BLAS thread count as the live sessions' budgets decide it (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, int] = {}  # session key -> its explicit budget, 0 for the default
        self._gone: deque[int] = deque()  # keys of collected sessions not yet counted out
        self._next = 0
        self._original: int | None = None  # BLAS's own thread count before the first change
        self._applied: int | None = None
        self._by_load = False  # whether the load check set ``_applied`` (not the sessions' budgets)
        self._next_check = 0.0  # monotonic time of the next look at the machine's load (before_run)
        self._controller: Any = None

    def register(self, owner: Any, intra_op_num_threads: int) -> None:
        """Count ``owner``'s budget (0: the default) while ``owner`` lives."""
        with self._lock:
            key, self._next = self._next, self._next + 1
            self._live[key] = int(intra_op_num_threads)
            self._settle()
        weakref.finalize(owner, self._drop, key).atexit = False

    def threads(self) -> int | None:
        """The BLAS thread count the live sessions ask for (None: leave BLAS as it is)."""
        with self._lock:
            self._settle()
            return self._wanted()

    def _drop(self, key: int) -> None:
        # A finalizer: it may run inside a garbage collection that interrupts this very object in the same
        # thread (while threadpoolctl is imported, say), so it never waits for the lock. When the lock is
        # busy, its holder counts the session out before letting go (``_settle``).
        self._gone.append(key)
        if self._lock.acquire(blocking=False):
            try:
                self._settle()
            finally:
                self._lock.release()

    def _settle(self) -> None:
        """Count out collected sessions and resize BLAS, until no collection is left (the lock is held)."""
        while True:
            while self._gone:
                self._live.pop(self._gone.popleft(), None)
            self._update()
            if not self._gone:
                return

    def before_run(self) -> None:
        """Before a run: at the default budget, fit BLAS's threads to the CPUs other processes leave free
        (see the module docstring). Costs a clock read, and a look at /proc every CHECK_INTERVAL seconds."""
        if self._by_load and os.environ.get(ADAPTIVE_ENV, "1") == "0":
            self._undo_load()  # turned off while an adjustment holds: BLAS gets its threads back now
            return
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + CHECK_INTERVAL
        if os.environ.get(ADAPTIVE_ENV, "1") == "0" or not self._lock.acquire(blocking=False):
            return
        try:
            if any(n > 0 for n in self._live.values()):  # an explicit budget rules the pool
                return
            others = others_running()
            if others is None:
                return
            controller = self._blas_controller()
            if controller is None:
                return
            self._remember_original(controller)
            target = fair_threads(available_cpus(), others, self._original)
            if target != (self._applied if self._applied is not None else self._original):
                controller.limit(limits=target, user_api="blas")
                self._applied, self._by_load = target, True
        finally:
            self._lock.release()

    def _undo_load(self) -> None:
        """Give BLAS back the thread count the sessions' budgets ask for, taking back the load check's."""
        with self._lock:
            if not self._by_load:
                return
            self._by_load, self._applied = False, None
            controller, wanted = self._blas_controller(), self._wanted()
            target = self._original if wanted is None else wanted
            if controller is not None and target is not None:
                controller.limit(limits=target, user_api="blas")
                self._applied = wanted

    def _remember_original(self, controller: Any) -> None:
        """Before the first change: BLAS's own thread count, to come back to."""
        if self._original is None:
            counts = [lib.num_threads for lib in controller.select(user_api="blas").lib_controllers]
            self._original = max(counts, default=available_cpus())

    def _blas_controller(self) -> Any:
        if self._controller is None:
            self._controller = _controller()
        return self._controller

    def _wanted(self) -> int | None:
        explicit = [n for n in self._live.values() if n > 0]
        if not explicit and (self._applied is None or self._by_load):
            return None  # defaults only: BLAS as it is (as the load check left it, which it revisits itself)
        if not explicit:
            return self._original
        if any(n == 0 for n in self._live.values()):
            return max(max(explicit), self._original or available_cpus())
        return max(explicit)

    def _update(self) -> None:
        wanted = self._wanted()
        if wanted is None or wanted == self._applied:
            return
        controller = self._blas_controller()
        if controller is None:
            return
        if self._original is None:  # the first change: remember what to come back to
            self._remember_original(controller)
            wanted = self._wanted()
        controller.limit(limits=wanted, user_api="blas")
        self._applied, self._by_load = wanted, False


ADAPTIVE_ENV = "ORT_CORE_ADAPTIVE_BLAS"
CHECK_INTERVAL = 0.5  # seconds between two looks at the machine's load


def fair_threads(cpus: int, others: int, ceiling: int) -> int:
    """BLAS threads for ``cpus`` CPUs of which ``others`` runnable threads of other processes take some: the
    CPUs left, at least 1, at most ``ceiling``."""
    return max(1, min(ceiling, cpus - others))


def others_running(loadavg: str | None = None, own: int | None = None) -> int | None:
    """Runnable threads of other processes right now: /proc/loadavg's running count (its fourth field,
    "running/total") minus this process's threads in state R; None where /proc cannot be read."""
    try:
        if loadavg is None:
            with open("/proc/loadavg", encoding="ascii") as f:
                loadavg = f.read()
        running = int(loadavg.split()[3].split("/")[0])
        if own is None:
            if running <= 1:  # the calling thread itself is running: no other process is
                return 0
            own = _own_running()
    except (OSError, ValueError, IndexError):
        return None
    return max(0, running - own)


def _own_running() -> int:
    """This process's threads the kernel has in state R (running or runnable)."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        if stat[stat.rfind(")") + 2:stat.rfind(")") + 3] == "R":
            count += 1
    return count


def _controller() -> Any:
    """threadpoolctl's view of the loaded thread pools (None when it is not installed)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # a dependency; without it BLAS keeps its own thread count
        return None
    return ThreadpoolController()


BLAS = BlasPool()
"""The process's one BLAS pool (what sessions register their budgets with)."""
