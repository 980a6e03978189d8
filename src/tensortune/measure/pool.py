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

import os
import subprocess
import sys
import threading
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
                        self._w.kill()
                after = self.cpu_seconds()
                # a child started by this call: its start-up is this call's cost too
                spent = None if after is None else after - (before or 0.0)
                return CallOutcome("ok", value, cpu_s=spent)
            except TimeoutError:
                return CallOutcome("timeout", message=f"exceeded {timeout:g} s")
            except ChildProcessError:
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
        self._w.kill()


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
