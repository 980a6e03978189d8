"""The explorer contract, run over every registered explorer (as Optuna's sampler test suites
run over every sampler): a new explorer added to ``EXPLORERS`` is checked here with no new test.

On a space of 4 x 5 x 6 x 7 = 840 configs (one constraint) with a known score, an explorer must
return at most ``n`` distinct valid configs, none excluded, best first, reproducibly for a seed,
and find configs among the best of the space. No TVM is involved.
"""
from __future__ import annotations

import numpy as np
import pytest

from tensortune.explore import EXPLORERS, Explorer, make_explorer
from tensortune.space import ConfigSpace
from tensortune.utils.options import OptionError

TARGET = np.array([3, 1, 4, 2])


def space() -> ConfigSpace:
    s = ConfigSpace()
    s.define_choice("a", list(range(4)))
    s.define_choice("b", list(range(5)))
    s.define_choice("c", list(range(6)))
    s.define_choice("d", list(range(7)))
    s.add_constraint("not_a0_b0", lambda c: not (c["a"] == 0 and c["b"] == 0))
    return s


def score(pos: np.ndarray) -> np.ndarray:
    """Higher nearer TARGET (one peak, so "best of the space" is well defined)."""
    return -np.abs(np.asarray(pos) - TARGET).sum(axis=1).astype(np.float64)


def all_scores(sp: ConfigSpace) -> dict[int, float]:
    return {c.index: float(score(np.array([sp.positions(c)]))[0]) for c in sp}


@pytest.fixture(params=EXPLORERS.names())
def name(request) -> str:
    return request.param


def test_is_an_explorer_with_options(name) -> None:
    cls = EXPLORERS.get(name)
    ex = make_explorer(name, space(), seed=0)
    assert isinstance(ex, Explorer) and ex.name == name
    assert cls.Options.__dataclass_params__.frozen
    with pytest.raises(OptionError, match="unknown option 'nope'.*known:"):
        make_explorer(name, space(), options={"nope": 1})


def test_returns_distinct_valid_unexcluded_configs_best_first(name) -> None:
    sp = space()
    scores = all_scores(sp)
    exclude = set(sorted(scores, key=scores.get, reverse=True)[:5])  # the 5 best are taken already
    got = make_explorer(name, sp, seed=0).find_maximums(score, 32, exclude=exclude)
    assert 0 < len(got) <= 32 and len(set(got)) == len(got)
    assert not set(got) & exclude
    assert all(sp.is_valid(sp.get(i)) for i in got)
    s = [scores[i] for i in got]
    assert s == sorted(s, reverse=True)
    # the best found is within the best 5% of the configs left
    left = sorted((v for k, v in scores.items() if k not in exclude), reverse=True)
    assert s[0] >= left[len(left) // 20]


def test_reproducible_for_a_seed_and_accepts_seeds(name) -> None:
    sp = space()
    a = make_explorer(name, sp, seed=3).find_maximums(score, 16, seeds=[sp.index_of({"a": 1, "b": 1, "c": 1, "d": 1})])
    b = make_explorer(name, sp, seed=3).find_maximums(score, 16, seeds=[sp.index_of({"a": 1, "b": 1, "c": 1, "d": 1})])
    assert a == b
    assert make_explorer(name, sp, seed=0).find_maximums(score, 0) == []


def test_everything_excluded_gives_nothing(name) -> None:
    sp = space()
    everything = {c.index for c in sp}
    assert make_explorer(name, sp, seed=0).find_maximums(score, 8, exclude=everything) == []
