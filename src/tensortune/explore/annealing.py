"""Parallel simulated annealing over a config space with a cost model as energy (AutoTVM).

``n_chains`` Markov chains walk the space one knob one step at a time; a move to a config
with a lower score is accepted with probability ``exp((new - old) / T)``, the temperature
falling linearly from ``temp[0]`` to ``temp[1]``. With ``persistent`` chains the last
points are kept across calls (across model updates), as in AutoTVM.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..space import ConfigSpace
from ..utils.options import make_options
from .base import PositionSearch, ScoreFn, TopConfigs

#: AutoTVM's SimulatedAnnealingOptimizer defaults.
SA_CHAINS, SA_MAX_STEPS, SA_EARLY_STOP, SA_TEMP = 128, 500, 50, (1.0, 0.0)


@dataclass(frozen=True)
class AnnealingOptions:
    """``n_chains`` parallel chains of at most ``max_steps`` steps, stopped after ``early_stop``
    steps without a new top config; temperature from ``temp[0]`` to ``temp[1]``; ``persistent``
    chains continue from where the last call left them."""

    n_chains: int = SA_CHAINS
    max_steps: int = SA_MAX_STEPS
    early_stop: int = SA_EARLY_STOP
    temp: tuple[float, float] = SA_TEMP
    persistent: bool = True

    def __post_init__(self) -> None:
        if self.n_chains < 1 or self.max_steps < 0 or self.early_stop < 1:
            raise ValueError("n_chains and early_stop must be at least 1, max_steps at least 0")


class SimulatedAnnealing(PositionSearch):
    """Finds the configs a score function rates highest; explores by one-step neighbours."""

    name = "sa"
    Options = AnnealingOptions

    def __init__(self, space: ConfigSpace, seed: int = 0, options: AnnealingOptions | Mapping[str, Any] | None = None,
                 **overrides: Any) -> None:
        """``options`` (or keyword ``overrides`` of its fields) as :class:`AnnealingOptions`."""
        super().__init__(space, seed)
        self.options = opts = make_options(AnnealingOptions, options, owner="explorer 'sa'", **overrides)
        self.n_chains = opts.n_chains
        self.max_steps = opts.max_steps
        self.early_stop = opts.early_stop
        self.temp = opts.temp
        self.persistent = opts.persistent
        self.points: np.ndarray | None = None
        self.steps_run = 0

    def _moves(self, pos: np.ndarray) -> np.ndarray:
        """One valid neighbour per row (a row with no valid move found stays where it is)."""
        n, k = pos.shape
        out = pos.copy()
        movable = np.nonzero(self.dims > 1)[0]
        if len(movable) == 0:
            return out
        for _ in range(4):  # retry rows whose move was invalid
            pending = np.nonzero((out == pos).all(axis=1))[0]
            if len(pending) == 0:
                break
            knob = movable[self.np_rng.integers(0, len(movable), size=len(pending))]
            step = self.np_rng.choice((-1, 1), size=len(pending))
            cand = pos[pending].copy()
            cur = cand[np.arange(len(pending)), knob]
            new = cur + step
            bad = (new < 0) | (new >= self.dims[knob])
            new[bad] = cur[bad] - step[bad]
            cand[np.arange(len(pending)), knob] = np.clip(new, 0, self.dims[knob] - 1)
            for row, c, idx in zip(pending, cand, self.indices(cand)):
                if self.is_valid_index(int(idx)):
                    out[row] = c
        return out

    # ------------------------------------------------------------ search
    def find_maximums(self, score: ScoreFn, n: int, exclude: set[int] | None = None,
                      seeds: Sequence[int] = ()) -> list[int]:
        """Indices of up to ``n`` distinct configs with the highest scores seen, skipping
        ``exclude``. ``seeds`` (config indices) replace random chain starts when the chains
        are new."""
        exclude = exclude or set()
        if n <= 0:
            return []
        if self.points is None or not self.persistent:
            start = [self.space.positions(self.space.get(int(i))) for i in list(seeds)[: self.n_chains]]
            rand = self.random_positions(self.n_chains - len(start)) if len(start) < self.n_chains else None
            pts = np.array(start, dtype=np.int64).reshape(-1, len(self.dims))
            self.points = pts if rand is None else np.concatenate([pts, rand])
        if len(self.points) == 0:
            return []
        points = self.points
        scores = np.asarray(score(points), dtype=np.float64)
        top = TopConfigs(n, exclude)
        top.offer(scores, self.indices(points))
        t0, t1 = self.temp
        cool = (t0 - t1) / (self.max_steps + 1)
        t = t0
        last_change = 0
        step = 0
        for step in range(1, self.max_steps + 1):
            new = self._moves(points)
            new_scores = np.asarray(score(new), dtype=np.float64)
            with np.errstate(over="ignore"):
                prob = np.exp(np.minimum((new_scores - scores) / (t + 1e-5), 1.0))
            accept = self.np_rng.random(len(points)) < prob
            points = np.where(accept[:, None], new, points)
            scores = np.where(accept, new_scores, scores)
            if top.offer(new_scores, self.indices(new)):
                last_change = step
            if step - last_change >= self.early_stop:
                break
            t -= cool
        self.steps_run = step
        self.count(step, len(points) * (step + 1))
        self.points = points
        return top.best()

