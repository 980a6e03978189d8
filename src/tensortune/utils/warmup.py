"""Warming a fresh process up before timing: the one loop the runner and the model timings share."""
from __future__ import annotations

import time
from typing import Any, Callable


def warm_up(fn: Callable[[], Any], seconds: float, max_calls: int | None = None,
            clock: Callable[[], float] = time.perf_counter) -> None:
    """Call ``fn()`` untimed until ``seconds`` have passed on ``clock``: at least once, at most
    ``max_calls`` times.

    A fresh process's first tenths of a second of parallel runs read slow (2x, at times 20x: a
    thread waiting a scheduler tick), whatever the time since the process started; after a few
    tenths of a second of runs they are steady."""
    end, calls = clock() + seconds, 0
    while True:
        fn()
        calls += 1
        if clock() >= end or (max_calls is not None and calls >= max_calls):
            return
