"""Selectors: top-k, diversity-aware (Eq. 3, submodular greedy), epsilon-greedy mixing."""
from __future__ import annotations

import itertools
import math
import random

import numpy as np

from tensortune.select import DIVERSITY_LAMBDA, EPSILON, diversity_select, epsilon_mix, objective, top_k
from tensortune.space import ConfigSpace


def space() -> ConfigSpace:
    s = ConfigSpace()
    s.define_choice("a", list(range(4)))
    s.define_choice("b", list(range(4)))
    s.define_choice("c", list(range(3)))
    return s


def test_top_k_orders_by_score() -> None:
    sp = space()
    configs = [sp.get(i) for i in range(6)]
    picked = top_k(configs, np.array([0.1, 0.9, 0.5, 0.7, 0.0, 0.3]), 3)
    assert [c.index for c in picked] == [1, 3, 2]


def test_alpha_zero_is_top_k() -> None:
    sp = space()
    rng = np.random.default_rng(0)
    configs = [sp.get(i) for i in range(len(sp))]
    scores = rng.random(len(configs))
    assert diversity_select(configs, scores, 8, sp, lam=2, alpha=0.0) == top_k(configs, scores, 8)


def test_diversity_prefers_new_knob_values() -> None:
    sp = space()
    # near-identical scores for configs that differ only in knob c, one slightly worse but new everywhere
    same = [sp.index_of({"a": 0, "b": 0, "c": c}) for c in range(3)]
    other = sp.index_of({"a": 3, "b": 3, "c": 0})
    configs = [sp.get(i) for i in same + [other]]
    scores = np.array([1.0, 0.99, 0.98, 0.95])
    picked = diversity_select(configs, scores, 2, sp, lam=2, alpha=1.0)
    assert [c.index for c in picked] == [same[0], other]
    assert [c.index for c in top_k(configs, scores, 2)] == same[:2]


def test_greedy_is_within_the_submodular_bound_of_the_optimum() -> None:
    sp = space()
    rng = np.random.default_rng(1)
    for trial in range(5):
        configs = [sp.get(int(i)) for i in rng.choice(len(sp), 10, replace=False)]
        scores = rng.random(10)
        alpha = 0.3
        picked = diversity_select(configs, scores, 4, sp, lam=10, alpha=alpha)
        norm = (scores - scores.min()) / (scores.max() - scores.min())
        by_index = {c.index: s for c, s in zip(configs, norm)}
        got = objective(picked, np.array([by_index[c.index] for c in picked]), sp, alpha)
        best = max(objective(list(sub), np.array([by_index[c.index] for c in sub]), sp, alpha)
                   for sub in itertools.combinations(configs, 4))
        assert got >= (1 - 1 / math.e) * best - 1e-9
        assert got <= best + 1e-9


def test_pool_is_the_top_lambda_b() -> None:
    sp = space()
    configs = [sp.get(i) for i in range(20)]
    scores = np.arange(20, dtype=float)  # best are the last ones
    picked = diversity_select(configs, scores, 4, sp, lam=DIVERSITY_LAMBDA, alpha=10.0)
    assert all(c.index >= 20 - int(DIVERSITY_LAMBDA * 4) for c in picked)


def test_epsilon_mix_replaces_a_share_with_unmeasured_random_configs() -> None:
    sp = space()
    batch = [sp.get(i) for i in range(40)]
    visited = set(range(40))
    mixed = epsilon_mix(batch, sp, random.Random(0), 0.1, exclude=visited)
    assert len(mixed) == 40
    assert mixed[:36] == batch[:36]
    assert all(c.index not in visited for c in mixed[36:])
    assert EPSILON == 0.05
    # small batches: the fractional share is drawn at random, about epsilon on average
    rng = random.Random(1)
    n_random = sum(sum(c.index >= 40 for c in epsilon_mix(batch[:10], sp, rng, 0.05, exclude=visited))
                   for _ in range(400))
    assert 100 < n_random < 300  # expected 0.5 per batch of 10 -> 200
