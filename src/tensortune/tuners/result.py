"""What one tuning call produced: :class:`TuneResult` (the session makes it, the app and the command
line report it)."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..space import Config

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


@dataclass
class TuneResult:
    """What one ``tune`` call produced."""

    task: Task
    best_config: Config | None
    best_cost: float
    trials_measured: int
    errors: Counter
    history: list[dict[str, float]] = field(default_factory=list)
    stop_reason: str = ""
    verified: bool = False
    best_spread: float = 0.0  # (max - min) / median of the best config's repeats
    tuner_status: str = ""  # model-based tuners: model and transfer in one line
    #: where the best came from: {"from": "this run"} or {"from": "database", "trial_id", "tuner", "timestamp"}
    best_source: dict[str, Any] = field(default_factory=dict)
    #: how every compared cost was measured: target, threads, timing and CPU (a MeasureContext)
    context: Any = None
    #: re-measurements made by this call's confirmation (not in ``trials_measured``)
    confirm_measured: int = 0
    #: the confirmation group the best was chosen from: {"group", "rounds", "configs"} (empty: a
    #: single measurement)
    confirmation: dict[str, Any] = field(default_factory=dict)
    #: what the call cost: wall time, CPU-seconds (tuner, building, running), energy or why not
    #: (a :class:`~tensortune.measure.cost.RunCost`; None for a result made elsewhere)
    cost: Any = None
    #: contention while it measured (:mod:`tensortune.measure.noise`): ``noisy_trials`` (search
    #: trials timed while the machine was busy), ``quiet_spell`` (whether the confirmation waited
    #: for and found one; None: no wait) and ``confirm_noisy`` (a config of its last group timed
    #: while busy in every round)
    noise: dict[str, Any] = field(default_factory=dict)

    @property
    def best_gflops(self) -> float:
        """GFLOP/s of the best config (0 when none succeeded)."""
        return self.task.flops / self.best_cost / 1e9 if self.best_config is not None and self.best_cost < float("inf") else 0.0

    def to_json(self) -> dict[str, Any]:
        """The CLI's machine-readable summary."""
        return {
            "task": self.task.name,
            "workload_key": self.task.workload_key,
            "best_config": self.best_config.to_json()["knobs"] if self.best_config is not None else None,
            "best_latency_ms": self.best_cost * 1e3 if self.best_cost < float("inf") else None,
            "best_gflops": self.best_gflops,
            "trials_measured": self.trials_measured,
            "errors": dict(self.errors),
            "best_spread": self.best_spread,
            "verified": self.verified,
            "best_source": self.best_source or None,
            "measured": self.context.to_json() if self.context is not None else None,
            "stop_reason": self.stop_reason,
            "confirm_measured": self.confirm_measured,
            "confirmation": self.confirmation or None,
            "cost": self.cost.to_json() if self.cost is not None else None,
            "noise": self.noise or None,
        }

    def describe_source(self) -> str:
        """Where the best came from and how it was measured, in one line."""
        if not self.best_source:
            return "no best"
        src = self.best_source
        where = "measured this run" if src["from"] == "this run" else (
            f"stored trial {src['trial_id']} ({src['tuner'] or 'unknown tuner'}, "
            f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(src['timestamp']))})")
        if self.confirmation:
            where += (f", median of {self.confirmation['rounds']} confirmation rounds of its top "
                      f"{len(self.confirmation['configs'])} configs")
        return f"{where}; {self.context.describe()}" if self.context is not None else where

    def describe_noise(self) -> str:
        """One line on contention when there was any ("" for a quiet run)."""
        n = self.noise
        if not n or not (n.get("noisy_trials") or n.get("confirm_noisy") or n.get("quiet_spell") is False):
            return ""
        parts = [f"NOISY: {n.get('noisy_trials', 0)} of {self.trials_measured} trials were timed while the "
                 "machine was busy"]
        if n.get("quiet_spell") is False or n.get("confirm_noisy"):
            parts.append("no quiet spell came for the confirmation, so the best is uncertain: run it again "
                         "on a quiet machine")
        elif n.get("quiet_spell"):
            parts.append("the finalists were re-measured in a quiet spell")
        return "; ".join(parts)
