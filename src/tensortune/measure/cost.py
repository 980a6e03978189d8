"""What a tuning run cost: wall time, CPU-seconds and, where the machine can count it, energy.

A :class:`CostMeter` runs beside a tuning session. CPU-seconds are the session process's own
(``time.process_time``: the tuner's search and model fitting, every thread) plus what the
builder and runner processes spent on each measured candidate (read from the worker process
around each call, see :class:`~tensortune.measure.pool.Worker`). Energy comes from the RAPL
counters (:mod:`tensortune.measure.energy`) around the whole run; on a machine without a
readable counter it is ``None`` and the reason is given, never an estimate.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .energy import EnergyMeter, probe
from .result import MeasureResult


@dataclass
class RunCost:
    """Totals of one run (see the module docstring); ``unread``: candidates whose worker CPU
    time could not be read (a crashed or killed process), left out of ``build_cpu_s`` /
    ``run_cpu_s``."""

    wall_s: float = 0.0
    tuner_cpu_s: float = 0.0
    build_cpu_s: float = 0.0
    run_cpu_s: float = 0.0
    unread: int = 0
    energy_j: float | None = None
    energy_note: str = ""

    @property
    def cpu_s(self) -> float:
        """All CPU-seconds: the tuner's own, building and running."""
        return self.tuner_cpu_s + self.build_cpu_s + self.run_cpu_s

    def to_json(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall_s, 3), "cpu_s": round(self.cpu_s, 3),
                "cpu_split_s": {"tuner": round(self.tuner_cpu_s, 3), "build": round(self.build_cpu_s, 3),
                                "run": round(self.run_cpu_s, 3)},
                "cpu_unread_trials": self.unread,
                "energy_j": None if self.energy_j is None else round(self.energy_j, 3),
                **({"energy": self.energy_note} if self.energy_note else {})}


class CostMeter:
    """Accumulates a run's cost from its start (construction) on."""

    def __init__(self) -> None:
        self._wall0 = time.perf_counter()
        self._cpu0 = time.process_time()
        self._energy = EnergyMeter()
        self._energy.start()
        p = probe() if not self._energy.domains else {"available": True}
        self._note = "" if p["available"] else f"not available: {p['reason']}"
        self.build_cpu_s = 0.0
        self.run_cpu_s = 0.0
        self.unread = 0

    def add(self, result: MeasureResult) -> None:
        """Count one measured candidate's worker CPU time."""
        if result.build_cpu is not None:
            self.build_cpu_s += result.build_cpu
        if result.run_cpu is not None:
            self.run_cpu_s += result.run_cpu
        failed_run = result.run_time > 0 and result.run_cpu is None  # ran, but its runner's time is lost
        if result.build_cpu is None or failed_run:
            self.unread += 1

    def cpu_s(self) -> float:
        """CPU-seconds so far (this process and the workers' counted candidates)."""
        return time.process_time() - self._cpu0 + self.build_cpu_s + self.run_cpu_s

    def energy_j(self) -> float | None:
        """Joules so far, or None without a counter."""
        if not self._energy.domains:
            return None
        return self._energy.peek()

    def total(self) -> RunCost:
        """The totals now."""
        return RunCost(time.perf_counter() - self._wall0, time.process_time() - self._cpu0, self.build_cpu_s,
                       self.run_cpu_s, self.unread, self.energy_j(), self._note)
