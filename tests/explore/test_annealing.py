"""Simulated annealing: finds the maxima of a known score, respects constraints and exclusions."""
from __future__ import annotations

import numpy as np

from tensortune.explore.annealing import SA_CHAINS, SA_EARLY_STOP, SA_MAX_STEPS, SA_TEMP, SimulatedAnnealing
from tensortune.space import ConfigSpace


def grid_space(constrained: bool = False) -> ConfigSpace:
    s = ConfigSpace()
    for name in "abcd":
        s.define_choice(name, list(range(12)))
    if constrained:
        s.add_constraint("a_odd", lambda c: c["a"] % 2 == 1)
    return s


TARGET = np.array([7, 3, 9, 5])


def peak(pos: np.ndarray) -> np.ndarray:
    """A single smooth peak at TARGET: reachable by one-step moves only with a good walk."""
    return -np.abs(pos - TARGET).sum(axis=1).astype(float)


def test_defaults_are_autotvms() -> None:
    assert (SA_CHAINS, SA_MAX_STEPS, SA_EARLY_STOP, SA_TEMP) == (128, 500, 50, (1.0, 0.0))


def test_finds_the_peak_and_its_neighbourhood() -> None:
    space = grid_space()
    sa = SimulatedAnnealing(space, n_chains=16, seed=0)
    found = sa.find_maximums(peak, 9)
    best = space.get(found[0])
    assert [best[k] for k in "abcd"] == list(TARGET)
    # the rest of the top list are the peak's one-step neighbours (score -1)
    scores = peak(np.array([space.positions(space.get(i)) for i in found]))
    assert list(scores) == [0.0] + [-1.0] * 8
    assert len(set(found)) == 9


def test_excluded_configs_are_never_returned_and_constraints_hold() -> None:
    space = grid_space(constrained=True)
    target_idx = space.index_of(dict(zip("abcd", [7, 3, 9, 5])))
    sa = SimulatedAnnealing(space, n_chains=16, seed=1)
    found = sa.find_maximums(peak, 5, exclude={target_idx})
    assert target_idx not in found
    assert all(space.is_valid(space.get(i)) for i in found)
    # the walk itself stays on valid configs
    assert all(space.get(int(i))["a"] % 2 == 1 for i in sa.indices(sa.points))


def test_chains_persist_across_calls() -> None:
    space = grid_space()
    sa = SimulatedAnnealing(space, n_chains=8, max_steps=30, seed=2)
    sa.find_maximums(peak, 4)
    kept = sa.points.copy()
    calls: list[np.ndarray] = []

    def spy(pos: np.ndarray) -> np.ndarray:
        calls.append(pos.copy())
        return peak(pos)

    sa.find_maximums(spy, 4)
    np.testing.assert_array_equal(calls[0], kept)  # the second search starts where the first ended
    fresh = SimulatedAnnealing(space, n_chains=8, max_steps=30, seed=2, persistent=False)
    fresh.find_maximums(peak, 4)
    ended = fresh.points.copy()
    restart: list[np.ndarray] = []
    fresh.find_maximums(lambda pos: (restart.append(pos.copy()), peak(pos))[1], 4)
    assert restart[0].shape == ended.shape
    assert not np.array_equal(restart[0], ended)  # without persistence every search starts afresh


def test_early_stop_and_step_cap() -> None:
    space = grid_space()
    sa = SimulatedAnnealing(space, n_chains=8, max_steps=500, early_stop=5, seed=3)
    sa.find_maximums(lambda p: np.zeros(len(p)), 4)  # flat: nothing improves the top list
    assert sa.steps_run < 40
    capped = SimulatedAnnealing(space, n_chains=8, max_steps=7, early_stop=50, seed=3)
    capped.find_maximums(peak, 4)
    assert capped.steps_run == 7


def test_same_seed_same_result() -> None:
    a = SimulatedAnnealing(grid_space(), n_chains=8, max_steps=40, seed=5).find_maximums(peak, 6)
    b = SimulatedAnnealing(grid_space(), n_chains=8, max_steps=40, seed=5).find_maximums(peak, 6)
    assert a == b


def test_seeds_start_the_chains() -> None:
    space = grid_space()
    start = space.index_of(dict(zip("abcd", [7, 3, 9, 4])))
    sa = SimulatedAnnealing(space, n_chains=4, max_steps=1, seed=0)
    calls: list[np.ndarray] = []
    sa.find_maximums(lambda p: (calls.append(p.copy()), peak(p))[1], 2, seeds=[start])
    assert list(calls[0][0]) == [7, 3, 9, 4]
