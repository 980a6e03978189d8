"""The explorer protocol: find the configs a score function rates highest.

An explorer searches a task's config space against a cheap score (a cost model's fast scorer
over knob positions) and never measures anything. Simulated annealing implements it; the RL
explorers (PPO, DQN) do too. Every registered explorer passes the contract test in
``tests/explore/test_explorer_contract.py``.

Construction: ``cls(space, seed=0, options=cls.Options(...))`` (options may also be a mapping
of ``key=value`` text, see :mod:`tensortune.utils.options`).
"""
from __future__ import annotations

import heapq
import random
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

#: Scores positions [n, n_knobs] (int64 knob indices) -> scores [n] (higher is better).
ScoreFn = Callable[[np.ndarray], np.ndarray]


@runtime_checkable
class Explorer(Protocol):
    """Proposes candidates against a score function."""

    name: str

    def find_maximums(self, score: ScoreFn, n: int, exclude: set[int] | None = None,
                      seeds: Sequence[int] = ()) -> list[int]:
        """Indices of up to ``n`` distinct valid configs with the highest scores found, best first,
        none of them in ``exclude``. ``seeds`` are config indices worth starting from (best
        first); an explorer may use them or not."""
        ...

    def set_roofline(self, fn: ScoreFn | None) -> None:
        """A second score over positions (the cost model's compute-over-memory ratio) for a
        reward that has a roofline term (DQN's); explorers without one ignore it."""
        ...


def make_explorer(name: str, space: Any, seed: int = 0, options: Mapping[str, Any] | Any = None) -> Explorer:
    """The explorer registered as ``name`` over ``space`` (options checked against its ``Options``)."""
    from ..utils.options import make_options
    from . import EXPLORERS

    cls = EXPLORERS.get(name)
    return cls(space, seed=seed, options=make_options(cls.Options, options, owner=f"explorer {name!r}"))


class PositionSearch:
    """Shared state of explorers that move through knob positions: the space, seeded random
    generators (``rng`` for config sampling, ``np_rng`` for moves), knob sizes, the radix that
    turns a row of positions into a config index, a cache of validity checks, and :attr:`stats`,
    the search effort so far (the figure Chameleon's Fig. 7a compares):

    * ``calls``: searches run;
    * ``steps``: sequential search steps summed over the calls (per call: the steps a chain,
      episode or generation walked, averaged over the walkers);
    * ``scored``: configs scored (every walker's every step).
    """

    def __init__(self, space: Any, seed: int = 0) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.dims = np.array(space.dims, dtype=np.int64)
        self.radix = np.concatenate([[1], np.cumprod(self.dims)[:-1]]).astype(np.int64)
        self.stats: dict[str, float] = {"calls": 0, "steps": 0.0, "scored": 0}
        self._valid: dict[int, bool] = {}

    def set_roofline(self, fn: ScoreFn | None) -> None:
        """Ignored: no roofline term in this explorer's search (see :class:`Explorer`)."""

    def indices(self, pos: np.ndarray) -> np.ndarray:
        """Config indices of rows of positions."""
        return (pos * self.radix).sum(axis=1)

    def is_valid_index(self, idx: int) -> bool:
        """Whether the config at ``idx`` meets the space's constraints (cached)."""
        ok = self._valid.get(idx)
        if ok is None:
            ok = self.space.is_valid(self.space.get(int(idx)))
            if len(self._valid) < 1_000_000:
                self._valid[idx] = ok
        return ok

    def random_positions(self, n: int) -> np.ndarray:
        """``n`` rows of positions of random valid configs (repeats when the space is smaller)."""
        configs = self.space.sample(self.rng, n) if n > 0 else []
        if not configs:
            return np.zeros((0, len(self.dims)), dtype=np.int64)
        pts = [self.space.positions(c) for c in configs]
        while len(pts) < n:
            pts.append(pts[self.rng.randrange(len(configs))])
        return np.array(pts, dtype=np.int64)

    def count(self, steps: float, scored: int) -> None:
        """Add one search's effort to :attr:`stats`."""
        self.stats["calls"] += 1
        self.stats["steps"] += float(steps)
        self.stats["scored"] += int(scored)


class TopConfigs:
    """The ``n`` best distinct config indices offered so far, none of them in ``exclude``."""

    def __init__(self, n: int, exclude: set[int] | None = None) -> None:
        self.n = n
        self.exclude = exclude or set()
        self._heap: list[tuple[float, int]] = []  # min-heap of (score, index)
        self._members: set[int] = set()

    def offer(self, scores: np.ndarray, indices: np.ndarray) -> bool:
        """Consider scored configs; True when the top changed."""
        changed = False
        for s, i in zip(scores, indices):
            i = int(i)
            if i in self.exclude or i in self._members:
                continue
            if len(self._heap) < self.n:
                heapq.heappush(self._heap, (float(s), i))
                self._members.add(i)
                changed = True
            elif s > self._heap[0][0]:
                _, old = heapq.heapreplace(self._heap, (float(s), i))
                self._members.discard(old)
                self._members.add(i)
                changed = True
        return changed

    def best(self) -> list[int]:
        """The indices, best first."""
        return [i for _, i in sorted(self._heap, reverse=True)]
