"""Random search as an explorer: score a random pool of unmeasured configs, keep the best."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..space import ConfigSpace
from ..utils.options import make_options
from .base import ScoreFn

#: Configs drawn and scored per call.
RANDOM_POOL = 2048


@dataclass(frozen=True)
class RandomSearchOptions:
    """``pool``: configs drawn and scored per call (the seeds are scored too)."""

    pool: int = RANDOM_POOL

    def __post_init__(self) -> None:
        if self.pool < 1:
            raise ValueError("pool must be at least 1")


class RandomSearch:
    """Uniform samples, ranked by the score: the explorer without a search strategy (an ablation
    baseline for simulated annealing and the RL explorers)."""

    name = "random"
    Options = RandomSearchOptions

    def __init__(self, space: ConfigSpace, seed: int = 0,
                 options: RandomSearchOptions | Mapping[str, Any] | None = None) -> None:
        self.space = space
        self.options = make_options(RandomSearchOptions, options, owner="explorer 'random'")
        self.rng = random.Random(seed)
        self.stats: dict[str, float] = {"calls": 0, "steps": 0.0, "scored": 0}

    def set_roofline(self, fn: ScoreFn | None) -> None:
        """Ignored: a random search has no reward."""

    def find_maximums(self, score: ScoreFn, n: int, exclude: set[int] | None = None,
                      seeds: Sequence[int] = ()) -> list[int]:
        exclude = exclude or set()
        if n <= 0:
            return []
        pool = [self.space.get(int(i)) for i in dict.fromkeys(seeds) if int(i) not in exclude]
        taken = exclude | {c.index for c in pool}
        pool += self.space.sample(self.rng, self.options.pool, exclude=taken)
        if not pool:
            return []
        pos = np.array([self.space.positions(c) for c in pool], dtype=np.int64).reshape(len(pool), -1)
        scores = np.asarray(score(pos), dtype=np.float64)
        self.stats["calls"] += 1
        self.stats["steps"] += 1
        self.stats["scored"] += len(pool)
        order = np.argsort(-scores, kind="stable")[:n]
        return [pool[k].index for k in order]
