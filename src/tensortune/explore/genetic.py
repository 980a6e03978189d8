"""A genetic algorithm over knob positions, scored by a cost model (One-Shot Tuner's GA search).

A population of ``population`` valid configs evolves for ``steps`` generations: the ``elites``
best are kept, the rest are children of two parents drawn with probability proportional to
their score (shifted to be positive), by uniform crossover and per-knob mutation with
probability ``mutation``; an invalid child is drawn again (a few times, then replaced by a
random valid config). The best distinct configs seen in any generation are returned.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..space import ConfigSpace
from ..utils.options import make_options
from .base import PositionSearch, ScoreFn, TopConfigs

#: One-Shot Tuner's GA (its Table 2): population 512, 120 steps, mutation 0.1, 96 elites.
GA_POPULATION, GA_STEPS, GA_MUTATION, GA_ELITES = 512, 120, 0.1, 96


@dataclass(frozen=True)
class GeneticSearchOptions:
    """Population size, generations, per-knob mutation probability and elites kept per generation."""

    population: int = GA_POPULATION
    steps: int = GA_STEPS
    mutation: float = GA_MUTATION
    elites: int = GA_ELITES

    def __post_init__(self) -> None:
        if self.population < 2 or self.steps < 0 or not 0.0 <= self.mutation <= 1.0:
            raise ValueError("population must be at least 2, steps at least 0 and mutation in [0, 1]")
        if not 0 <= self.elites < self.population:
            raise ValueError("elites must lie in [0, population)")


class GeneticSearch(PositionSearch):
    """Finds the configs a score function rates highest by evolving a population."""

    name = "ga"
    Options = GeneticSearchOptions

    def __init__(self, space: ConfigSpace, seed: int = 0, options: GeneticSearchOptions | Mapping[str, Any] | None = None,
                 **overrides: Any) -> None:
        super().__init__(space, seed)
        self.options = make_options(GeneticSearchOptions, options, owner="explorer 'ga'", **overrides)
        self.steps_run = 0

    def _random(self, n: int) -> list[list[int]]:
        return [self.space.positions(c) for c in self.space.sample(self.rng, n)]

    def _child(self, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        for _ in range(8):
            pick = self.np_rng.random(len(a)) < 0.5
            child = np.where(pick, a, b)
            mutate = self.np_rng.random(len(a)) < self.options.mutation
            if mutate.any():
                child[mutate] = (self.np_rng.random(int(mutate.sum())) * self.dims[mutate]).astype(np.int64)
            if self.is_valid_index(int((child * self.radix).sum())):
                return child
        return None

    def find_maximums(self, score: ScoreFn, n: int, exclude: set[int] | None = None,
                      seeds: Sequence[int] = ()) -> list[int]:
        """Indices of up to ``n`` distinct configs with the highest scores seen, skipping
        ``exclude``; ``seeds`` (config indices) join the first generation."""
        exclude = exclude or set()
        o = self.options
        if n <= 0:
            return []
        start = [self.space.positions(self.space.get(int(i))) for i in list(seeds)[: o.population]]
        start += self._random(o.population - len(start))
        if not start:
            return []
        pop = np.array(start, dtype=np.int64)
        top = TopConfigs(n, exclude)
        step = 0
        for step in range(o.steps + 1):
            scores = np.asarray(score(pop), dtype=np.float64)
            top.offer(scores, self.indices(pop))
            if step == o.steps:
                break
            order = np.argsort(-scores, kind="stable")
            elites = pop[order[: min(o.elites, len(pop))]]
            weights = scores - scores.min() + 1e-9
            weights = weights / weights.sum()
            children = []
            want = len(pop) - len(elites)
            parents = self.np_rng.choice(len(pop), size=(want, 2), p=weights)
            for a, b in parents:
                c = self._child(pop[a], pop[b])
                if c is None:  # no valid child of these parents: a random config instead
                    r = self._random(1)
                    c = np.array(r[0], dtype=np.int64) if r else pop[a].copy()
                children.append(c)
            pop = np.concatenate([elites, np.array(children, dtype=np.int64).reshape(-1, len(self.dims))])
        self.steps_run = step
        self.count(step, len(pop) * (step + 1))
        return top.best()
