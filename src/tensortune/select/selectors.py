"""Selectors: pick the batch to measure from scored candidates.

Each selector is a callable ``selector(candidates, scores, n, context) -> configs`` (the
:class:`Selector` protocol); a wrapper (epsilon-greedy here, the cold-candidate filter later)
takes an inner selector and changes its choice.

* ``top-k``: the ``n`` best scores.
* ``diversity``: AutoTVM's diversity-aware selection (Eq. 3 of Chen et al. 2018): from the
  ``lam * n`` best, greedily add the candidate that most increases
  ``L(S) = sum score(s) + alpha * sum_j |{values of knob j in S}|``. ``L`` is submodular,
  so the greedy choice is within ``1 - 1/e`` of the optimum. Scores are min-max
  normalised over the pool first, so ``alpha`` is in units of the pool's score range.
* ``epsilon-greedy`` (a wrapper, :func:`epsilon_mix`): replace a share ``epsilon`` of the
  inner selector's batch by random unmeasured configs.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..space import Config, ConfigSpace
from ..utils.options import make_options

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..task import Task

#: Defaults: lambda (pool size as a multiple of the batch) and alpha (weight of a new knob value).
DIVERSITY_LAMBDA = 2.0
DIVERSITY_ALPHA = 0.1
EPSILON = 0.05


def top_k(configs: Sequence[Config], scores: np.ndarray, n: int) -> list[Config]:
    """The ``n`` configs with the highest scores (stable for ties)."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return [configs[i] for i in order[:n]]


def diversity_select(configs: Sequence[Config], scores: np.ndarray, n: int, space: ConfigSpace,
                     lam: float = DIVERSITY_LAMBDA, alpha: float = DIVERSITY_ALPHA) -> list[Config]:
    """Greedy maximiser of ``sum score + alpha * (distinct knob values)`` over the top ``lam*n``."""
    scores = np.asarray(scores, dtype=np.float64)
    pool_n = min(len(configs), max(n, int(round(lam * n))))
    order = np.argsort(-scores, kind="stable")[:pool_n]
    pool = [configs[i] for i in order]
    s = scores[order]
    span = s.max() - s.min() if len(s) else 0.0
    s = (s - s.min()) / span if span > 0 else np.zeros_like(s)
    pos = np.array([space.positions(c) for c in pool], dtype=np.int64).reshape(len(pool), -1)
    seen = [set() for _ in range(pos.shape[1])]
    chosen: list[int] = []
    remain = list(range(len(pool)))
    while remain and len(chosen) < n:
        best_k, best_gain = -1, -np.inf
        for k in remain:
            gain = s[k] + alpha * sum(1 for j, v in enumerate(pos[k]) if v not in seen[j])
            if gain > best_gain:
                best_k, best_gain = k, gain
        chosen.append(best_k)
        remain.remove(best_k)
        for j, v in enumerate(pos[best_k]):
            seen[j].add(int(v))
    return [pool[k] for k in chosen]


def objective(configs: Sequence[Config], scores: np.ndarray, space: ConfigSpace, alpha: float) -> float:
    """``L(S)`` of Eq. 3 for a chosen set (scores as given; used by tests and reports)."""
    pos = np.array([space.positions(c) for c in configs], dtype=np.int64).reshape(len(configs), -1)
    distinct = sum(len(set(pos[:, j])) for j in range(pos.shape[1])) if len(configs) else 0
    return float(np.sum(scores)) + alpha * distinct


def epsilon_mix(batch: Sequence[Config], space: ConfigSpace, rng: random.Random, epsilon: float = EPSILON,
                exclude: set[int] | None = None) -> list[Config]:
    """``batch`` with ``epsilon * len(batch)`` of its last entries replaced by random unmeasured
    configs (the fractional part decided at random, so small batches still explore)."""
    want = epsilon * len(batch)
    n_rand = int(want) + (rng.random() < want - int(want))
    if n_rand == 0:
        return list(batch)
    keep = list(batch[: len(batch) - n_rand])
    taken = set(exclude or ()) | {c.index for c in batch}
    return keep + space.sample(rng, n_rand, exclude=taken)


# ---------------------------------------------------------------- the protocol and its parts
@dataclass
class SelectContext:
    """What a selector may use besides the scores: the space, the tuner's random generator
    (the only randomness a selector may draw on, so a seed fixes the batch), the configs
    already measured (``exclude``: never to be chosen), the task, and the task's measured
    history in trial order (``history``: a :class:`~tensortune.costmodel.base.TaskData`, None
    when the tuner keeps none; failures have cost ``inf``)."""

    space: ConfigSpace
    rng: random.Random
    exclude: set[int] = field(default_factory=set)
    task: Task = None
    history: Any = None


class Selector:
    """Base of every selector: picks up to ``n`` distinct configs to measure from scored
    candidates (best first). Subclasses implement :meth:`__call__`; the hooks below are no-ops a
    selector overrides when it has something to do there, so a tuner calls them on any selector."""

    name: str = ""
    #: whether the selector sizes its batch itself (up to ``n``) and picks representatives rather
    #: than the best-scored candidates (a tuner then measures the batch as it comes, unranked)
    adaptive: bool = False

    def __call__(self, candidates: Sequence[Config], scores: np.ndarray, n: int,
                 context: SelectContext) -> list[Config]:
        raise NotImplementedError

    def begin(self, database: Database, seed: int = 0) -> None:
        """A tuning session with ``database`` starts (e.g. a filter trains on its records)."""

    @property
    def notice(self) -> str:
        """One line on the selector's state for progress output ("" when it has none)."""
        return ""

    def report(self) -> dict[str, Any]:
        """What the selector did, for benchmarks (``{}`` when it keeps no account)."""
        return {}

    @property
    def innermost(self) -> Selector:
        """The selector itself (a wrapper: the one it wraps, all the way down)."""
        return self


class SelectorWrapper(Selector):
    """Base of a wrapper: changes the choice of the ``inner`` selector; the hooks pass through."""

    def __init__(self, inner: Selector) -> None:
        self.inner = inner

    @property
    def adaptive(self) -> bool:  # type: ignore[override]
        return self.inner.adaptive

    def begin(self, database: Database, seed: int = 0) -> None:
        self.inner.begin(database, seed)

    @property
    def notice(self) -> str:
        return self.inner.notice

    def report(self) -> dict[str, Any]:
        return self.inner.report()

    @property
    def innermost(self) -> Selector:
        return self.inner.innermost


@dataclass(frozen=True)
class NoOptions:
    """A part without settings."""


class TopK(Selector):
    """The ``n`` highest scores."""

    name = "top-k"
    Options = NoOptions

    def __init__(self, options: NoOptions | Mapping[str, Any] | None = None) -> None:
        self.options = make_options(NoOptions, options, owner="selector 'top-k'")

    def __call__(self, candidates: Sequence[Config], scores: np.ndarray, n: int,
                 context: SelectContext) -> list[Config]:
        return top_k(candidates, scores, n)


@dataclass(frozen=True)
class DiversityOptions:
    """``lam``: the pool is the ``lam * n`` best; ``alpha``: the weight of a new knob value."""

    lam: float = DIVERSITY_LAMBDA
    alpha: float = DIVERSITY_ALPHA

    def __post_init__(self) -> None:
        if self.lam < 1 or self.alpha < 0:
            raise ValueError("lam must be at least 1 and alpha at least 0")


class Diversity(Selector):
    """AutoTVM's diversity-aware selection (:func:`diversity_select`)."""

    name = "diversity"
    Options = DiversityOptions

    def __init__(self, options: DiversityOptions | Mapping[str, Any] | None = None) -> None:
        self.options = make_options(DiversityOptions, options, owner="selector 'diversity'")

    def __call__(self, candidates: Sequence[Config], scores: np.ndarray, n: int,
                 context: SelectContext) -> list[Config]:
        return diversity_select(candidates, scores, n, context.space, self.options.lam, self.options.alpha)


@dataclass(frozen=True)
class EpsilonOptions:
    """``epsilon``: the share of the batch replaced by random unmeasured configs."""

    epsilon: float = EPSILON

    def __post_init__(self) -> None:
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError("epsilon must lie in [0, 1]")


class EpsilonGreedy(SelectorWrapper):
    """Wrapper: the inner selector's batch with a share ``epsilon`` replaced by random
    unmeasured configs (:func:`epsilon_mix`)."""

    name = "epsilon-greedy"
    Options = EpsilonOptions

    def __init__(self, inner: Selector, options: EpsilonOptions | Mapping[str, Any] | None = None) -> None:
        super().__init__(inner)
        self.options = make_options(EpsilonOptions, options, owner="selector 'epsilon-greedy'")

    def __call__(self, candidates: Sequence[Config], scores: np.ndarray, n: int,
                 context: SelectContext) -> list[Config]:
        batch = self.inner(candidates, scores, n, context)
        return epsilon_mix(batch, context.space, context.rng, self.options.epsilon, exclude=context.exclude)
