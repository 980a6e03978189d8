"""Where TVM's threads run: one core per thread, the calling thread on its own core.

TVM's thread pool (one per calling thread) pins each worker to a core but leaves the calling
thread, which runs the first share of every parallel loop, free on all of them. On a machine
with as many cores as threads the scheduler can park the calling thread on a worker's core and
leave it there for seconds: the same model then runs at one of two speeds (a 130-function
network read 6.5 or 12 ms, slower than on one thread). So tensortune places the pool itself:

- TVM binds nothing on its own (``TVM_BIND_THREADS=0`` before its pool starts, see
  :func:`unbind_tvm`), so it never widens an affinity mask the user set;
- :func:`tvm_pool` pins the calling thread's workers to one usable core each
  (``runtime.config_threadpool``), leaving the first usable core for the calling thread;
- :func:`tvm_pinned` holds the calling thread on that core while TVM code runs and gives it
  its own mask back afterwards, so other runtimes timed in the same thread (ONNX Runtime,
  OpenVINO, PyTorch) and the threads they start keep the cores they had.

With fewer usable cores than threads nothing is pinned (the pool shares the usable cores) and
a warning says so once.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable, Collection, Iterator, TypeVar

log = logging.getLogger(__name__)

R = TypeVar("R")

#: TVM's affinity modes (``threading::ThreadGroup::AffinityMode``): worker ``i`` on the listed
#: core ``i + 1``; every worker on all listed cores.
ONE_CORE_PER_THREAD = -2
SHARE_ALL_CORES = -3
#: The environment variable that turns TVM's own binding off (read when a pool is configured).
BIND_VAR = "TVM_BIND_THREADS"


@dataclass(frozen=True)
class Placement:
    """The cores of one calling thread's TVM pool: ``cores[0]`` for the calling thread, one
    each for the workers after it; empty when nothing is pinned, and ``note`` says why."""

    threads: int
    usable: tuple[int, ...]
    cores: tuple[int, ...] = ()
    note: str = ""

    @property
    def pinned(self) -> bool:
        return bool(self.cores)

    def describe(self) -> str:
        """The placement in words, for logs and reports."""
        if self.pinned:
            return f"{self.threads} threads on cores {','.join(map(str, self.cores))} (calling thread on {self.cores[0]})"
        return f"{self.threads} threads, not pinned ({self.note})"


def plan(threads: int, usable: Collection[int]) -> Placement:
    """Where ``threads`` TVM threads go on the ``usable`` cores (the calling thread's mask): the
    first ``threads`` of them, in order; nothing pinned for one thread, or for fewer cores than
    threads."""
    cores = tuple(sorted(usable))
    if threads <= 1:
        return Placement(threads, cores, note="one thread")
    if len(cores) < threads:
        return Placement(threads, cores, note=f"{threads} threads but {len(cores)} usable "
                                              f"core{'s' if len(cores) != 1 else ''} ({_span(cores)}): they share them")
    return Placement(threads, cores, cores[:threads])


def _span(cores: Collection[int]) -> str:
    return ",".join(map(str, sorted(cores))) or "none"


#: Set beside ``TVM_BIND_THREADS=0`` when tensortune set it, so that child processes (the
#: measurement workers) tell tensortune's value from a user's.
OURS_VAR = "TENSORTUNE_UNBOUND_TVM"
#: ``TVM_BIND_THREADS`` as the user set it (None: not set, or set by tensortune): ``"0"`` turns
#: placement off, as it turns off TVM's own binding.
USER_BIND = None if os.environ.get(OURS_VAR) else os.environ.get(BIND_VAR)


def unbind_tvm() -> None:
    """Keep TVM from pinning threads by itself when its pools start: :func:`tvm_pool` places
    them. Call before the first TVM run."""
    if BIND_VAR not in os.environ:
        os.environ[BIND_VAR] = "0"
        os.environ[OURS_VAR] = "1"


class _State(threading.local):
    placement: Placement | None = None
    depth: int = 0


_STATE = _State()
_WARNED: set[str] = set()
_WARN_LOCK = threading.Lock()


def _affinity_supported() -> bool:
    return hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity")


def tvm_pool() -> Placement:
    """The calling thread's TVM pool, started and placed (once per thread; see the module)."""
    if _STATE.placement is not None:
        return _STATE.placement
    import tvm

    usable = tuple(sorted(os.sched_getaffinity(0))) if _affinity_supported() else ()
    threads = int(tvm.get_global_func("runtime.NumThreads")())  # starts the pool (unbound)
    if USER_BIND == "0":
        placement = Placement(threads, usable, note=f"{BIND_VAR}=0")
    elif not usable:
        placement = Placement(threads, (), note="no affinity on this system")
    else:
        placement = plan(threads, usable)
    place = bool(usable) and threads > 1 and USER_BIND != "0"
    if place:
        cores = placement.cores or usable
        mode = ONE_CORE_PER_THREAD if placement.pinned else SHARE_ALL_CORES
        before = os.environ.get(BIND_VAR)
        os.environ[BIND_VAR] = "1"  # read while the pool is configured: bind to the cores given
        try:
            tvm.get_global_func("runtime.config_threadpool")(mode, threads, [str(c) for c in cores])
        except Exception as e:  # noqa: BLE001 - a runtime without it: TVM's pool runs unplaced
            placement = Placement(threads, usable, note=f"TVM's pool could not be configured: {e}".splitlines()[0])
        finally:
            if before is None:
                os.environ.pop(BIND_VAR, None)
            else:
                os.environ[BIND_VAR] = before
            os.sched_setaffinity(0, usable)  # the pool's configuration resets the caller's mask
    if place and not placement.pinned:
        _warn_once(f"TVM runs {placement.describe()}; timings are slower and noisier than with "
                   "one thread per free core")
    _STATE.placement = placement
    return placement


def _warn_once(message: str) -> None:
    with _WARN_LOCK:
        if message in _WARNED:
            return
        _WARNED.add(message)
    log.warning(message)


@contextlib.contextmanager
def tvm_pinned() -> Iterator[Placement]:
    """Hold the calling thread on its pool's first core inside the block (re-entrant: the
    outermost block pins and restores); its own mask comes back after it."""
    placement = tvm_pool()
    if _STATE.depth or not placement.pinned:
        _STATE.depth += 1
        try:
            yield placement
        finally:
            _STATE.depth -= 1
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {placement.cores[0]})
    _STATE.depth += 1
    try:
        yield placement
    finally:
        _STATE.depth -= 1
        os.sched_setaffinity(0, before)


def pinned_calls(fn: Callable[..., R]) -> Callable[..., R]:
    """``fn`` run inside :func:`tvm_pinned` at every call (a no-op inside an outer block)."""

    @functools.wraps(fn)
    def call(*args: object, **kwargs: object) -> R:
        with tvm_pinned():
            return fn(*args, **kwargs)

    return call


__all__ = ["Placement", "plan", "pinned_calls", "tvm_pinned", "tvm_pool", "unbind_tvm"]
