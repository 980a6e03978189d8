"""Silence third-party warnings that tell a tensortune user nothing.

PyTorch's pytree registration, for one, prints ``FutureWarning: isinstance(treespec, LeafSpec)
is deprecated`` from ``copyreg`` on every command that builds a model, before any output of
ours. Deprecation and future warnings raised inside the libraries we drive (PyTorch, ONNX,
ONNX Runtime, XGBoost, scikit-learn, TVM) are about their internals, not about anything a user
can change, so the command line drops them. Every other warning, tensortune's own included,
is kept.

TVM's C++ side writes its own warnings straight to file descriptor 2; :func:`drop_native_lines`
drops the ones that are only noise for a build of ours and lets every other line through.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from typing import IO, Iterator, Sequence

log = logging.getLogger(__name__)

#: TVM's LLVM backend warns once per loop whose unroll hint it does not take: every loop of a
#: config with ``unroll_explicit`` 0, a value of AutoTVM's unroll knob that the space keeps.
TVM_UNROLL_HINT = "Unroll hint get ignore at CodeGenLLVM backend"

#: Modules whose deprecation / future warnings are dropped (a warning's module is where it was raised).
THIRD_PARTY = ("copyreg", "torch", "onnx", "onnxscript", "onnxruntime", "xgboost", "sklearn", "tvm", "tvm_ffi")


def quiet_third_party_warnings() -> None:
    """Install the filters (idempotent)."""
    pattern = r"(%s)(\..*)?$" % "|".join(THIRD_PARTY)
    for category in (DeprecationWarning, FutureWarning, PendingDeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=pattern)


def flush_stdio() -> None:
    """Flush Python's and C's stdio buffers, so that output written before a redirection of the file
    descriptors 1 and 2 is not caught by it, nor output written inside surfaces after it."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def redirected_fds(fds: Sequence[int], sink: IO[bytes]) -> Iterator[bool]:
    """Point the file descriptors ``fds`` at ``sink`` while inside (stdio flushed on both sides), so
    that what C++ code writes to them lands there too; yields whether they were redirected (where
    they cannot be, they are left as they were)."""
    flush_stdio()
    saved: list[int] = []  # duplicates of the original descriptors
    try:
        for fd in fds:
            saved.append(os.dup(fd))
        for fd in fds:
            os.dup2(sink.fileno(), fd)
    except OSError:
        _restore(fds, saved)
        saved = []
    try:
        yield bool(saved)
    finally:
        if saved:
            flush_stdio()
            _restore(fds, saved)


def _restore(fds: Sequence[int], saved: list[int]) -> None:
    for fd, old in zip(fds, saved):
        os.dup2(old, fd)
        os.close(old)


@contextlib.contextmanager
def drop_native_lines(*needles: str) -> Iterator[None]:
    """Inside, what is written to file descriptor 2 (by TVM's C++, or Python's own stderr) goes to
    a scratch file; on leaving, every line holding none of ``needles`` is written to the real
    descriptor 2, in order, and the dropped ones are counted in a debug log. Where descriptor 2
    cannot be redirected, nothing is dropped."""
    try:
        sink = tempfile.TemporaryFile()
    except OSError:
        yield
        return
    with sink:
        try:
            with redirected_fds((2,), sink):
                yield
        finally:
            sink.seek(0)
            lines = sink.read().decode("utf-8", "replace").splitlines(keepends=True)
            kept = [ln for ln in lines if not any(n in ln for n in needles)]
            if kept:
                os.write(2, "".join(kept).encode())
            if len(kept) < len(lines):
                log.debug("dropped %d lines of native output holding %s", len(lines) - len(kept), needles)
