"""``--stop-after MINUTES``: end an invocation cleanly before a step that would not finish in time.

A results folder resumes per step (an operator suite's (workload, tuner), a whole-model suite's
system), and a step cut off half-way is done again from the start. On a machine lent for a
fixed session, a run that is stopped *between* steps loses nothing; this stops it there.
"""
from __future__ import annotations

import time


class Deadline:
    """The end of the invocation's time (``None``: no limit) and the check before each step."""

    def __init__(self, minutes: float | None, clock=time.time) -> None:
        self.clock = clock
        self.end = None if minutes is None else clock() + 60.0 * minutes
        self.stopped = ""  # the step it stopped before, once it has

    def left_s(self) -> float:
        """Seconds left (infinite without a limit)."""
        return float("inf") if self.end is None else self.end - self.clock()

    def allows(self, step: str, estimate_s: float | None) -> bool:
        """True when ``step`` (taking about ``estimate_s``; ``None``: unknown) may start now.

        An unknown estimate starts while any time is left. Once refused, every later step is
        refused too, so an invocation never skips a step to run a later one."""
        if self.stopped:
            return False
        left = self.left_s()
        if left > (estimate_s or 0.0):
            return True
        self.stopped = step
        est = "" if estimate_s is None else f" (it takes about {estimate_s / 60:.0f} min)"
        print(f"--stop-after: stopping before {step}{est} with {max(left, 0.0) / 60:.0f} min left; "
              f"the same command resumes from there", flush=True)
        return False
