"""A persistent worker process with a hard timeout, on TVM's ``PopenWorker``.

``PopenWorker`` keeps one Python process alive across calls (TVM takes seconds to import)
and restarts it after a crash. Its own timeout is answered by a thread inside the child,
which cannot run while native code holds the interpreter; a watchdog here kills the child
``grace`` seconds after the deadline, so a hung candidate always ends.

The child is started with PyTorch kept out of it (:data:`KEPT_OUT`): tvm-ffi imports PyTorch
whenever it can, which makes every worker start (and every restart after a crashed
candidate) seconds slower and makes TVMScript's ``inspect.stack()`` calls walk thousands of
extra modules. Workers build and time TIR only; nothing in them needs PyTorch. Nor does the child see the
working directory on ``sys.path`` (:mod:`tensortune.utils.child`).
"""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
from typing import IO, Any, Callable

from tvm.support.popen_pool import PopenWorker, kill_child_processes

from ..utils.child import python_command
from .result import WorkerStartError

#: Modules a worker process may not import (an import raises ImportError, as if not installed).
KEPT_OUT = ("torch",)
_BOOT = ("import sys, runpy\n"
         "for name in {kept!r}: sys.modules[name] = None\n"
         "runpy.run_module('tvm.exec.popen_worker', run_name='__main__', alter_sys=True)\n")


class _LeanPopenWorker(PopenWorker):
    """TVM's ``PopenWorker`` whose child runs ``tvm.exec.popen_worker`` with :data:`KEPT_OUT` blocked.

    Only the start of the process differs from TVM's (POSIX only; elsewhere TVM's own start)."""

    def _start(self) -> None:
        if self._proc is not None or sys.platform == "win32":
            super()._start()
            return
        main_read, worker_write = os.pipe()
        worker_read, main_write = os.pipe()
        cmd = python_command(_BOOT.format(kept=KEPT_OUT), str(worker_read), str(worker_write))
        self._proc = subprocess.Popen(cmd, pass_fds=(worker_read, worker_write), stdout=self._stdout,
                                      stderr=self._stderr)
        os.close(worker_read)
        os.close(worker_write)
        self._reader = os.fdopen(main_read, "rb")
        self._writer = os.fdopen(main_write, "wb")

#: Seconds past the deadline before the parent kills a child that did not answer.
KILL_GRACE = 3.0


class CallOutcome:
    """What a call returned, or how it failed: ``"ok"``, ``"timeout"``, ``"crash"``, ``"error"``;
    ``cpu_s``: the CPU-seconds (user + system, all threads) the child spent on the call, None
    when they could not be read (the child died or was killed)."""

    __slots__ = ("status", "value", "message", "cpu_s")

    def __init__(self, status: str, value: Any = None, message: str = "", cpu_s: float | None = None) -> None:
        self.status, self.value, self.message, self.cpu_s = status, value, message, cpu_s


class Worker:
    """One persistent child process; ``call`` never raises for faults of the callee."""

    def __init__(self, initializer: Callable[..., None] | None = None, initargs: tuple = (),
                 log: IO[Any] | None = None) -> None:
        self._w = _LeanPopenWorker(initializer, initargs, stdout=log, stderr=log)
        self._lock = threading.Lock()
        self.key: tuple | None = None  # (initializer, initargs) when it came from a WorkerCache
        self.runs = 0  # candidate libraries the current child process has loaded (the runner counts them)
        self.prepared: object = None  # what the current child process has set up (the runner's key)

    def start(self) -> None:
        """Start the process now (and run the initializer) instead of at the first call.

        Raises :class:`WorkerStartError` when it cannot start: a broken environment must not turn
        into a tuning run where every candidate fails.
        """
        out = self.call(_noop, (), timeout=600.0)
        if out.status != "ok":
            raise WorkerStartError(f"could not start a worker process ({out.status}): {out.message}")

    def call(self, fn: Callable[..., Any], args: tuple, timeout: float) -> CallOutcome:
        """Run ``fn(*args)`` in the child with a deadline of ``timeout`` seconds."""
        with self._lock:
            fired, answered, guard = threading.Event(), threading.Event(), threading.Lock()

            def kill() -> None:
                # Kill the process only: ``PopenWorker.kill`` first closes the reader, whose lock
                # this call's ``recv`` holds while it waits for the child, so the watchdog hung
                # with it (a child deadlocked in native code stopped a dataset run for 8 min).
                # The dead child's pipe gives ``recv`` its EOF, and ``recv`` cleans up.
                with guard:
                    if answered.is_set():
                        return
                    fired.set()
                _kill_tree(self._w)

            dog = threading.Timer(timeout + KILL_GRACE, kill)
            dog.daemon = True
            before = self.cpu_seconds()
            try:
                self._w.send(fn, args, None, timeout)
                dog.start()
                try:
                    value = self._w.recv()
                finally:
                    with guard:
                        answered.set()
                    if fired.is_set():  # killed (maybe just after it answered): restart it next call
                        self.prepared = None
                        self._w.kill()
                after = self.cpu_seconds()
                # a child started by this call: its start-up is this call's cost too
                spent = None if after is None else after - (before or 0.0)
                return CallOutcome("ok", value, cpu_s=spent)
            except TimeoutError:
                self.prepared = None
                return CallOutcome("timeout", message=f"exceeded {timeout:g} s")
            except ChildProcessError:
                self.prepared = None  # a new child process starts at the next call
                if fired.is_set():
                    return CallOutcome("timeout", message=f"exceeded {timeout:g} s (killed)")
                return CallOutcome("crash", message="the worker process died (segfault, abort or exit)")
            except Exception as e:  # noqa: BLE001 - an exception raised by fn, re-raised here
                lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
                return CallOutcome("error", message=(lines[-1] if lines else type(e).__name__)[:2000])
            finally:
                dog.cancel()

    def cpu_seconds(self) -> float | None:
        """CPU-seconds the child process has used so far (None: no live child)."""
        import psutil

        proc = getattr(self._w, "_proc", None)
        if proc is None or proc.poll() is not None:
            return None
        try:
            t = psutil.Process(proc.pid).cpu_times()
        except (psutil.Error, OSError):
            return None
        return float(t.user + t.system)

    def close(self) -> None:
        """Stop the child process."""
        self.prepared = None
        self._w.kill()

    @property
    def alive(self) -> bool:
        """Whether a started child process is running."""
        proc = getattr(self._w, "_proc", None)
        return proc is not None and proc.poll() is None


class WorkerCache:
    """Started workers kept idle for the next measurer of the same kind.

    A worker takes about a second to start (it imports TVM); a process that makes measurer after
    measurer (a Python session tuning task after task, a test suite) would pay it every time.
    :meth:`take` hands out an idle live worker made with the same initializer and arguments, or a
    new one; :meth:`give` keeps a live worker (at most ``max_idle``, the oldest dropped first, none
    idle longer than ``idle_s``) and closes the rest. A reused worker keeps what it cached (the
    tasks it built). Builders use it; runners start fresh (measure.LocalRunner)."""

    def __init__(self, max_idle: int = 6, idle_s: float = 300.0) -> None:
        self.max_idle, self.idle_s = max_idle, idle_s
        self._idle: list[tuple[float, tuple, Worker]] = []  # (given at, key, worker), oldest first
        self._lock = threading.Lock()

    def take(self, initializer: Callable[..., None], initargs: tuple, log: IO[Any] | None = None) -> Worker:
        key = (initializer, initargs)
        with self._lock:
            self._expire()
            for i, (_, k, w) in enumerate(self._idle):
                if k == key:
                    del self._idle[i]
                    return w
        w = Worker(initializer, initargs, log)
        w.key = key
        return w

    def give(self, worker: Any) -> None:
        key = getattr(worker, "key", None)
        if key is None or not isinstance(worker, Worker) or not worker.alive or self.max_idle < 1:
            worker.close()
            return
        with self._lock:
            self._idle.append((time.monotonic(), key, worker))
            drop = self._idle[:-self.max_idle] if len(self._idle) > self.max_idle else []
            del self._idle[:len(drop)]
            self._expire()
        for _, _, w in drop:
            w.close()

    def _expire(self) -> None:
        """Close the workers idle longer than ``idle_s`` (the lock is held)."""
        now = time.monotonic()
        old = [e for e in self._idle if now - e[0] > self.idle_s]
        self._idle = [e for e in self._idle if now - e[0] <= self.idle_s]
        for _, _, w in old:
            w.close()

    def clear(self) -> None:
        """Close every idle worker (at exit, or where a fresh process is wanted)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for _, _, w in idle:
            w.close()


#: The process's cache of idle workers (closed at exit).
WORKERS = WorkerCache()
atexit.register(WORKERS.clear)


def _kill_tree(worker: PopenWorker) -> None:
    """SIGKILL a worker's child process and its descendants, touching none of its pipes."""
    proc = getattr(worker, "_proc", None)
    if proc is None:
        return
    try:
        kill_child_processes(proc.pid)
    except (TypeError, OSError):
        pass
    try:
        proc.kill()
    except OSError:
        pass


def _noop() -> None:
    return None
