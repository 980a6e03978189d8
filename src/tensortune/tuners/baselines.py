"""Baseline tuners: random, grid and genetic (AutoTVM's GATuner)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from ..measure import MeasureResult
from ..space import Config
from .base import DEFAULT_BATCH_SIZE, Tuner

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


class RandomTuner(Tuner):
    """Uniform sampling without replacement."""

    name = "random"

    def next_batch(self, n: int) -> list[Config]:
        return self.space.sample(self.rng, n, exclude=self.visited)


class GridTuner(Tuner):
    """Every valid config in index order."""

    name = "grid"

    def __init__(self, task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
                 start_from_default: bool = True, options: Any = None, **overrides: Any) -> None:
        super().__init__(task, seed, batch_size, start_from_default, options, **overrides)
        self._cursor = 0

    def next_batch(self, n: int) -> list[Config]:
        out: list[Config] = []
        size = len(self.space)
        while len(out) < n and self._cursor < size:
            c = self.space.get(self._cursor)
            self._cursor += 1
            if c.index not in self.visited and self.space.is_valid(c):
                out.append(c)
        return out


#: AutoTVM's GATuner defaults.
GA_POP_SIZE, GA_ELITE_NUM, GA_MUTATION_PROB = 100, 3, 0.1


@dataclass(frozen=True)
class GeneticOptions:
    """Generation size, genes kept unchanged, per-knob mutation probability (AutoTVM's GATuner)."""

    pop_size: int = GA_POP_SIZE
    elite_num: int = GA_ELITE_NUM
    mutation_prob: float = GA_MUTATION_PROB

    def __post_init__(self) -> None:
        if self.pop_size < 1 or self.elite_num < 0 or not 0.0 <= self.mutation_prob <= 1.0:
            raise ValueError("pop_size must be at least 1, elite_num at least 0, mutation_prob in [0, 1]")


class GeneticTuner(Tuner):
    """Genetic algorithm over knob positions (AutoTVM's GATuner).

    Each generation of ``pop_size`` genes is measured; the next keeps the ``elite_num`` best,
    and fills the rest by score-proportional parent selection, uniform crossover and
    per-knob mutation with probability ``mutation_prob``. Children already measured are
    redrawn, so no config is measured twice.
    """

    name = "genetic"
    Options = GeneticOptions

    def __init__(self, task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
                 start_from_default: bool = True, options: Any = None, **overrides: Any) -> None:
        super().__init__(task, seed, batch_size, start_from_default, options, **overrides)
        self.pop_size = min(self.options.pop_size, len(self.space))
        self.elite_num = min(self.options.elite_num, self.pop_size)
        self.mutation_prob = self.options.mutation_prob
        self.scores: dict[int, float] = {}  # config index -> GFLOPS-like score (0 for failures)
        self._pending: list[Config] = []

    def _score(self, r: MeasureResult) -> float:
        return 1.0 / r.cost if r.ok else 0.0

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        super().update(configs, results)
        for c, r in zip(configs, results):
            self.scores[c.index] = self._score(r)

    def next_batch(self, n: int) -> list[Config]:
        out: list[Config] = []
        taken: set[int] = set()
        while len(out) < n:
            if not self._pending:
                self._pending = self._next_generation(self.visited | taken)
                if not self._pending:
                    break  # the space is exhausted
            c = self._pending.pop(0)
            if c.index not in self.visited and c.index not in taken:
                taken.add(c.index)
                out.append(c)
        return out

    def _next_generation(self, exclude: set[int]) -> list[Config]:
        measured = [(s, i) for i, s in self.scores.items()]
        if len(measured) < self.pop_size:
            return self.space.sample(self.rng, self.pop_size, exclude=exclude)
        measured.sort(reverse=True)
        parents = [self.space.get(i) for _, i in measured[: self.pop_size]]
        weights = [s for s, _ in measured[: self.pop_size]]
        if sum(weights) <= 0:
            weights = [1.0] * len(parents)
        children: list[Config] = []
        seen = set(exclude)
        tries = 0
        while len(children) < self.pop_size - self.elite_num and tries < 20 * self.pop_size:
            tries += 1
            a, b = self.rng.choices(parents, weights=weights, k=2)
            pa, pb = self.space.positions(a), self.space.positions(b)
            pos = [pa[j] if self.rng.random() < 0.5 else pb[j] for j in range(len(pa))]
            for j, k in enumerate(self.space.knobs):
                if self.rng.random() < self.mutation_prob:
                    pos[j] = self.rng.randrange(len(k))
            c = self.space.from_positions(pos)
            if c.index in seen or not self.space.is_valid(c):
                continue
            seen.add(c.index)
            children.append(c)
        if len(children) < self.pop_size - self.elite_num:
            children += self.space.sample(self.rng, self.pop_size - self.elite_num - len(children), exclude=seen)
        return children
