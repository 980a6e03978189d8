"""The persistent worker: a child that hangs where its own timeout cannot answer is killed."""
from __future__ import annotations

import functools
import time

import pytest

from tensortune.measure.pool import KILL_GRACE, Worker

#: Blocks for 10 minutes in native code without releasing the GIL (``PyDLL`` keeps it held), so
#: the child's own timeout thread never runs: only the parent's watchdog can end it.
HOLD_GIL = functools.partial(exec, "import ctypes\nctypes.PyDLL(None).sleep(600)")


@pytest.mark.timeout(90)
def test_a_child_hung_holding_the_gil_is_killed_and_the_worker_goes_on() -> None:
    w = Worker()
    try:
        w.start()
        t0 = time.monotonic()
        out = w.call(HOLD_GIL, (), timeout=1.0)
        assert out.status == "timeout" and "killed" in out.message, (out.status, out.message)
        assert time.monotonic() - t0 < 1.0 + KILL_GRACE + 30
        again = w.call(functools.partial(eval, "6 * 7"), (), timeout=60.0)  # a fresh child answers
        assert again.status == "ok" and again.value == 42, (again.status, again.message)
    finally:
        w.close()
