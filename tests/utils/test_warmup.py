"""utils.warmup.warm_up: calls until the time is up, at least once, at most max_calls."""
from __future__ import annotations

from tensortune.utils.warmup import warm_up


def test_warm_up_calls_until_the_time_is_up_at_least_once_and_capped() -> None:
    now = [0.0]
    calls: list[float] = []

    def step(dt: float):
        def fn() -> None:
            calls.append(dt)
            now[0] += dt
        return fn

    warm_up(step(0.125), 0.3, clock=lambda: now[0])
    assert len(calls) == 3  # 0.125, 0.25, 0.375 >= 0.3
    calls.clear()
    warm_up(step(1.0), 0.3, clock=lambda: now[0])
    assert len(calls) == 1
    calls.clear()
    warm_up(step(0.0), 0.3, max_calls=7, clock=lambda: now[0])  # a clock that never moves
    assert len(calls) == 7
