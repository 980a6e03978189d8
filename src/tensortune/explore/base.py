"""The explorer protocol: find the configs a score function rates highest.

An explorer searches a task's config space against a cheap score (a cost model's fast scorer
over knob positions) and never measures anything. Simulated annealing implements it; the RL
explorers (PPO, DQN) do too. Every registered explorer passes the contract test in
``tests/explore/test_explorer_contract.py``.

Construction: ``cls(space, seed=0, options=cls.Options(...))`` (options may also be a mapping
of ``key=value`` text, see :mod:`tensortune.utils.options`).
"""
from __future__ import annotations

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


def make_explorer(name: str, space: Any, seed: int = 0, options: Mapping[str, Any] | Any = None) -> Explorer:
    """The explorer registered as ``name`` over ``space`` (options checked against its ``Options``)."""
    from ..utils.options import make_options
    from . import EXPLORERS

    cls = EXPLORERS.get(name)
    return cls(space, seed=seed, options=make_options(cls.Options, options, owner=f"explorer {name!r}"))
