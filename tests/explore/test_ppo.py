"""The PPO explorer (Chameleon's adaptive exploration): its updater, episodes, reward and learning."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tensortune.explore import make_explorer
from tensortune.explore.ppo import PPOSearch
from tensortune.utils.options import OptionError

from test_explorer_contract import TARGET, score, space


def test_updater_clamps_and_rejects_invalid_configs() -> None:
    ex = PPOSearch(space(), seed=0)
    pos = np.array([[0, 1, 0, 6], [3, 4, 5, 0], [1, 0, 2, 2]])
    # decrement everything (action 0), increment everything (2), mixed
    new = ex._apply(pos, np.array([[0, 0, 0, 2], [2, 2, 2, 0], [0, 1, 1, 1]]))
    assert new[0].tolist() == [0, 1, 0, 6]  # a -> 0 and b -> 0 would break "not (a=0 and b=0)": rejected
    assert new[1].tolist() == [3, 4, 5, 0]  # clamped at every bound
    assert new[2].tolist() == [1, 0, 2, 2]  # a=0, b=0 again: rejected, the walker stays


def test_episodes_respect_min_and_max_steps_and_count_effort() -> None:
    ex = make_explorer("ppo", space(), seed=1, options={"n_episodes": 12, "min_steps": 10, "max_steps": 40})
    calls = []

    def counted(pos: np.ndarray) -> np.ndarray:
        calls.append(len(pos))
        return score(pos)

    got = ex.find_maximums(counted, 8)
    assert len(calls) == 1  # the whole walk is scored in one batch, after the episodes
    assert 10 <= ex.episode_steps <= 40 and ex.steps_run <= 40
    assert ex.stats["calls"] == 1 and ex.stats["steps"] == pytest.approx(ex.episode_steps)
    assert ex.stats["scored"] == calls[0] == 12 + round(12 * ex.episode_steps)
    assert len(got) == 8


def test_settled_episodes_end_early() -> None:
    """With stay_fraction 0.25 a walker settles as soon as one knob stays: far below max_steps."""
    ex = make_explorer("ppo", space(), seed=0, options={"n_episodes": 32, "min_steps": 0, "max_steps": 200,
                                                         "stay_fraction": 0.25, "epochs": 0})
    ex.find_maximums(score, 4)
    assert ex.episode_steps < 10


def test_agent_keeps_its_weights_and_learns_the_task() -> None:
    """Over a few calls on one score the episodes visit better configs: the reward is learnt.
    With no learning (epochs 0) the policy stays where it started."""
    def mean_visited_score(epochs: int) -> list[float]:
        ex = make_explorer("ppo", space(), seed=0, options={"n_episodes": 32, "min_steps": 30, "max_steps": 30,
                                                             "epochs": epochs, "lr": 3e-3})
        seen = []

        def track(pos: np.ndarray) -> np.ndarray:
            s = score(pos)
            seen.append(float(s[32:].mean()))  # the steps, not the start points
            return s

        before = [p.detach().clone() for p in ex.net.parameters()]
        for _ in range(8):
            ex.find_maximums(track, 4)
        moved = any(not torch.equal(a, b) for a, b in zip(before, ex.net.parameters()))
        assert moved == (epochs > 0) and ex.updates == (8 if epochs else 0)
        return seen

    learnt, fixed = mean_visited_score(3), mean_visited_score(0)
    assert learnt[-1] > learnt[0] + 1.0  # nearer TARGET by more than one knob step on average
    assert learnt[-1] > fixed[-1]


def test_starts_from_the_best_measured_configs() -> None:
    sp = space()
    best = sp.index_of(dict(zip("abcd", TARGET.tolist())))
    ex = make_explorer("ppo", sp, seed=0, options={"n_episodes": 8, "from_best": 0.5, "min_steps": 1, "max_steps": 1})
    starts = ex._starts([best, 5, 6, 7, 8, 9])
    assert len(starts) == 8 and (starts[0] == TARGET).all()
    assert [int(i) for i in ex.indices(starts[:4])] == [best, 5, 6, 7]  # half the episodes from the seeds


def test_options_are_checked() -> None:
    with pytest.raises(OptionError, match="stay_fraction"):
        make_explorer("ppo", space(), options={"stay_fraction": 0})
    with pytest.raises(OptionError, match="unknown option"):
        make_explorer("ppo", space(), options={"episodes": 3})
