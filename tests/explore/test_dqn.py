"""The DQN explorer (Fasor's search): states, masked moves, reward, batched scoring, learning,
pre-training and saved weights."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tensortune.explore import make_explorer
from tensortune.explore.base import PositionSearch
from tensortune.explore.dqn import DQNEnv, DQNSearch
from tensortune.space import ConfigSpace
from tensortune.utils.options import OptionError

from test_explorer_contract import TARGET, score, space

SMALL = {"n_walkers": 8, "max_steps": 6, "batch": 16, "hidden": 32}


def odd_space() -> ConfigSpace:
    """a (4) x one (size 1) x b (5), a + b != 3 and not both 0: a size-1 knob and holes."""
    s = ConfigSpace()
    s.define_choice("a", list(range(4)))
    s.define_choice("one", ["only"])
    s.define_choice("b", list(range(5)))
    s.add_constraint("holes", lambda c: c["a"] + c["b"] != 3 and not (c["a"] == 0 and c["b"] == 0))
    return s


def odd_score(pos: np.ndarray) -> np.ndarray:
    return -np.abs(np.asarray(pos)[:, [0, 2]] - [3, 4]).sum(axis=1).astype(np.float64)


def transitions(ex: DQNSearch, dims: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The replay memory's (positions, actions, rewards, next positions), positions recovered
    from the scaled states."""
    mem = ex.memory
    k, n = len(dims), mem.size
    scale = np.maximum(dims - 1, 1)
    pos = np.rint(mem.state[:n, :k] * scale).astype(np.int64)
    nxt = np.rint(mem.next_state[:n, :k] * scale).astype(np.int64)
    return pos, mem.action[:n].copy(), mem.reward[:n].astype(np.float64), nxt


# ------------------------------------------------------------ states and moves
def test_states_are_scaled_padded_positions_then_context() -> None:
    ex = DQNSearch(space(), seed=0, options=SMALL)
    s = ex.states(np.array([[3, 0, 5, 3]]), ex.dims, np.array([7.0, 8.0], dtype=np.float32))
    assert s.shape == (1, 16 + 2)
    assert s[0, :4].tolist() == pytest.approx([1.0, 0.0, 1.0, 0.5])
    assert not s[0, 4:16].any() and s[0, 16:].tolist() == [7.0, 8.0]


def test_masks_keep_moves_in_range_valid_and_off_size_one_and_padded_knobs() -> None:
    sp = odd_space()
    ex = DQNSearch(sp, seed=0, options={**SMALL, "max_knobs": 5})
    m = ex.valid_actions(ex, np.array([[0, 0, 1], [3, 0, 4], [1, 0, 1]]))
    assert m.shape == (3, 10)
    assert not m[:, 2:4].any() and not m[:, 6:].any()  # the size-1 knob and the padding
    # (0, 1): a down leaves the range, a up gives a+b=2 fine, b down gives (0, 0), b up gives a+b=2
    assert m[0, :2].tolist() == [False, True] and m[0, 4:6].tolist() == [False, True]
    # (3, 4): a down gives a+b=6 fine, a up out of range; b down gives 3+3 fine, b up out of range
    assert m[1, :2].tolist() == [True, False] and m[1, 4:6].tolist() == [True, False]
    # (1, 1): a down (0, 1) fine, a up (2, 1) breaks a+b != 3, b down (1, 0) fine, b up (1, 2) breaks it
    assert m[2, :2].tolist() == [True, False] and m[2, 4:6].tolist() == [True, False]


@pytest.mark.parametrize("eps", [1.0, 0.0])
def test_walkers_only_make_valid_one_knob_moves(eps: float) -> None:
    """Random (eps 1) and greedy (eps 0, an untrained net's arbitrary Q) walks alike."""
    sp = odd_space()
    ex = DQNSearch(sp, seed=2, options={**SMALL, "max_knobs": 5, "eps_start": eps, "eps_end": eps,
                                        "n_walkers": 12, "max_steps": 10})
    got = ex.find_maximums(odd_score, 6)
    pos, act, _, nxt = transitions(ex, ex.dims)
    assert len(act) > 50 and set(act.tolist()) <= {0, 1, 4, 5}  # knob 0 and knob 2 only
    delta = nxt - pos
    assert (np.abs(delta).sum(axis=1) == 1).all()  # exactly one knob moved one position
    assert (delta[np.arange(len(act)), act // 2] == np.where(act % 2 == 1, 1, -1)).all()
    assert (nxt >= 0).all() and (nxt < ex.dims).all() and (nxt[:, 1] == 0).all()
    assert all(sp.is_valid(sp.from_positions(p)) for p in nxt)
    assert all(sp.is_valid(sp.get(i)) for i in got)


def test_a_walker_with_no_valid_move_stays_and_ends() -> None:
    """Every neighbour of (1, 1) breaks the constraint: the walker never leaves it."""
    sp = ConfigSpace()
    sp.define_choice("a", list(range(3)))
    sp.define_choice("b", list(range(3)))
    sp.add_constraint("island", lambda c: (c["a"], c["b"]) == (1, 1) or abs(c["a"] - 1) + abs(c["b"] - 1) == 2)
    ex = DQNSearch(sp, seed=0, options={**SMALL, "from_seeds": 1.0})
    got = ex.find_maximums(lambda p: np.zeros(len(p)), 3, seeds=[sp.index_of({"a": 1, "b": 1})])
    assert got == [sp.index_of({"a": 1, "b": 1})]
    assert ex.last_report["steps"] == 0 and ex.last_report["scored"] == 8 and ex.memory.size == 0


# ------------------------------------------------------------ reward
def test_reward_signs_and_the_iteration_penalty() -> None:
    sp = space()
    up = DQNSearch(sp, options={**SMALL, "phi": (1.0, 0.0, 0.0)})
    assert up.reward(np.array([-3.0]), np.array([-2.0]), t=1)[0] > 0  # a move toward a higher score
    assert up.reward(np.array([-2.0]), np.array([-3.0]), t=1)[0] < 0
    assert up.reward(np.array([0.0]), np.array([4.0]), t=1, scale=2.0)[0] == pytest.approx(2.0)
    it = DQNSearch(sp, options={**SMALL, "phi": (0.0, 0.0, 1.0)})
    r = [it.reward(np.zeros(1), np.zeros(1), t=t)[0] for t in range(1, 7)]
    assert all(a > b for a, b in zip(r, r[1:])) and r[-1] == pytest.approx(-1.0)  # a penalty growing with t
    roof = DQNSearch(sp, options={**SMALL, "phi": (0.0, 2.0, 0.0)})
    assert roof.reward(np.zeros(2), np.zeros(2), 1, ratio=np.array([math.e - 1, 0.0])).tolist() == \
        pytest.approx([2.0, 0.0])  # log1p of the CS/MS ratio
    default = DQNSearch(sp)
    assert default.options.phi == (0.35, 0.25, 0.4) and default.options.gamma == 0.95


def test_stored_rewards_follow_the_score_and_the_step() -> None:
    ex = DQNSearch(space(), seed=1, options={**SMALL, "phi": (1.0, 0.0, 0.0)})
    ex.find_maximums(score, 4)
    pos, _, r, nxt = transitions(ex, ex.dims)
    diff = score(nxt) - score(pos)
    assert (np.sign(r) == np.sign(diff)).all() and (diff != 0).all()
    it = DQNSearch(space(), seed=1, options={**SMALL, "phi": (0.0, 0.0, 1.0)})
    it.find_maximums(score, 4)
    _, _, r, _ = transitions(it, it.dims)
    steps = np.arange(1, 7) / 6
    assert np.allclose(np.sort(r), np.sort(-np.repeat(steps, 8)), atol=1e-6)  # no walker ends early here


def test_roofline_term_uses_log1p_and_is_batched_with_the_score() -> None:
    ex = DQNSearch(space(), seed=0, options={**SMALL, "phi": (0.0, 0.5, 0.0)})
    roof_rows, score_rows = [], []

    def roofline(pos: np.ndarray) -> np.ndarray:
        roof_rows.append(len(pos))
        return np.full(len(pos), math.e ** 2 - 1)

    def counted(pos: np.ndarray) -> np.ndarray:
        score_rows.append(len(pos))
        return score(pos)

    ex.set_roofline(roofline)
    ex.find_maximums(counted, 4)
    _, _, r, _ = transitions(ex, ex.dims)
    assert np.allclose(r, 1.0)
    assert roof_rows == score_rows


def test_scoring_is_one_call_per_step_on_unseen_configs_only() -> None:
    calls: list[np.ndarray] = []

    def counted(pos: np.ndarray) -> np.ndarray:
        calls.append(np.array(pos))
        return score(pos)

    ex = make_explorer("dqn", space(), seed=0, options={**SMALL, "n_walkers": 16, "max_steps": 20})
    got = ex.find_maximums(counted, 8)
    rows = np.concatenate(calls)
    idx = ex.indices(rows)
    assert len(calls) <= 1 + 20 and len(set(idx.tolist())) == len(idx) == ex.last_report["evaluated"]
    assert ex.last_report["scored"] == 16 + 16 * 20 > len(idx)  # revisits are not scored again
    assert ex.stats == {"calls": 1, "steps": 20.0, "scored": 16 + 16 * 20}
    assert len(got) == 8 and set(got) <= set(idx.tolist())


# ------------------------------------------------------------ walk and learning
def test_starts_cycle_over_the_seeds() -> None:
    sp = space()
    ex = DQNSearch(sp, seed=0, options={**SMALL, "n_walkers": 10, "from_seeds": 0.5})
    starts = ex._starts(ex, [7, 9])
    assert len(starts) == 10
    assert [int(i) for i in ex.indices(starts[:5])] == [7, 9, 7, 9, 7]


def test_agent_learns_online_and_epsilon_decays_across_calls() -> None:
    ex = DQNSearch(space(), seed=0, options={**SMALL, "eps_decay_steps": 12})
    before = [p.detach().clone() for p in ex.state_dict()["online"].values()]
    ex.find_maximums(score, 4)
    assert ex.last_report["epsilon"] == pytest.approx(1.0 - 0.95 * 6 / 12)
    ex.find_maximums(score, 4)
    assert ex.epsilon == pytest.approx(0.05) and ex.stats["calls"] == 2 and ex.updates > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, ex.online.state_dict().values()))
    frozen = DQNSearch(space(), seed=0, options={**SMALL, "learn": False})
    frozen.find_maximums(score, 4)
    assert frozen.updates == 0 and frozen.memory.size == 0


def test_pretraining_improves_the_greedy_policy() -> None:
    """After Fasor's pre-training, greedy walkers from random configs end nearer the peak than
    an untrained network's (same start configs, same seed)."""
    opts = {"n_walkers": 16, "max_steps": 12, "batch": 64, "hidden": 64, "eps_decay_steps": 200,
            "updates_per_step": 2, "target_sync": 50}
    ex = DQNSearch(space(), seed=0, options=opts)
    rep = ex.pretrain([DQNEnv(space(), score)], epochs=20)
    assert rep["epochs"] == 20 and len(rep["mean_reward"]) == 20 and rep["transitions"] == 20 * 16 * 12
    assert rep["seconds"] > 0

    def greedy_final(weights: dict) -> tuple[float, float]:
        ev = DQNSearch(space(), seed=100, options={**opts, "n_walkers": 32, "eps_start": 0.0, "eps_end": 0.0,
                                                   "learn": False})
        ev.load_state_dict(weights)
        ev.find_maximums(score, 4)
        return ev.last_report["final_score"], ev.last_report["start_score"]

    trained, start = greedy_final(ex.state_dict())
    untrained, start2 = greedy_final(DQNSearch(space(), seed=0, options=opts).state_dict())
    assert start == start2
    assert trained > untrained + 1.0 and trained > start + 1.0


def test_pretraining_serves_spaces_of_different_dims_with_one_network() -> None:
    small = ConfigSpace()
    small.define_choice("a", list(range(3)))
    small.define_choice("b", list(range(9)))
    envs = [DQNEnv(space(), score, context=np.array([1.0, 0.0]), seeds=[5]),
            DQNEnv(small, lambda p: -np.abs(np.asarray(p) - [2, 4]).sum(axis=1).astype(float),
                   roofline=lambda p: np.ones(len(p)), context=np.array([0.0, 1.0]))]
    ex = DQNSearch(space(), seed=0, options=SMALL)
    rep = ex.pretrain(envs, epochs=2)
    assert rep["transitions"] == 2 * 2 * 8 * 6 and ex.in_width == 16 + 2
    with pytest.raises(ValueError, match="context"):
        ex.pretrain([DQNEnv(space(), score)], epochs=1)  # no context: 0 values, the net takes 2
    with pytest.raises(ValueError, match="differ in length"):
        DQNSearch(space()).pretrain([envs[0], DQNEnv(small, score)], epochs=1)


# ------------------------------------------------------------ context and weights
def test_context_width_is_fixed_at_first_use() -> None:
    ex = DQNSearch(space(), seed=0, options=SMALL)
    ex.set_context(np.arange(3.0))
    ex.find_maximums(score, 4)
    assert ex.in_width == 19
    with pytest.raises(ValueError, match="context of length 4"):
        ex.set_context(np.arange(4.0))
    with pytest.raises(ValueError, match="context of length 0"):
        ex.set_context(None)
    q1 = ex.q_values(np.array([[1, 2, 3, 4]]))
    q2 = ex.q_values(np.array([[1, 2, 3, 4]]), context=np.array([5.0, 5.0, 5.0]))
    assert q1.shape == (1, 32) and not np.allclose(q1, q2)  # the context reaches the network
    with pytest.raises(ValueError, match="more than max_knobs"):
        DQNSearch(space(), options={**SMALL, "max_knobs": 3})


def test_save_load_round_trip_and_width_checks(tmp_path) -> None:
    ex = DQNSearch(space(), seed=0, options=SMALL)
    ex.find_maximums(score, 4)
    ex.find_maximums(score, 4)
    path = tmp_path / "dqn.pt"
    ex.save(path)
    pts = np.array([[0, 1, 0, 0], [3, 4, 5, 6], list(TARGET)])
    back = DQNSearch.from_file(path, space(), seed=7)
    assert back.options == ex.options
    assert np.array_equal(back.q_values(pts), ex.q_values(pts)) and back.eps_steps == ex.eps_steps
    assert not np.array_equal(DQNSearch(space(), seed=7, options=SMALL).q_values(pts), ex.q_values(pts))
    sd = torch.load(path, weights_only=True)  # plain data
    other = DQNSearch(space(), seed=3, options=SMALL)
    other.load_state_dict(sd)
    assert np.array_equal(other.q_values(pts), ex.q_values(pts))
    with pytest.raises(ValueError, match="actions"):
        DQNSearch(space(), options={**SMALL, "max_knobs": 8}).load(path)
    with pytest.raises(ValueError, match="hidden"):
        DQNSearch(space(), options={**SMALL, "hidden": 16}).load_state_dict(sd)
    with_ctx = DQNSearch(space(), options=SMALL)
    with_ctx.set_context(np.ones(2))
    with pytest.raises(ValueError, match="take 16 inputs"):
        with_ctx.load_state_dict(sd)
    with pytest.raises(ValueError, match="not a DQN state dict"):
        other.load_state_dict({"online": {}})
    for junk in (b"not a checkpoint", b"junk"):
        (tmp_path / "junk.pt").write_bytes(junk)
        with pytest.raises(ValueError, match="not readable"):
            other.load(tmp_path / "junk.pt")
    same = DQNSearch(space(), seed=5, options=SMALL)
    same.load(path)  # into an existing explorer (as the Fasor tuner does)
    assert np.array_equal(same.q_values(pts), ex.q_values(pts))


def test_options_are_checked() -> None:
    with pytest.raises(OptionError, match="phi"):
        make_explorer("dqn", space(), options={"phi": "1,2"})
    with pytest.raises(OptionError, match="eps_end"):
        make_explorer("dqn", space(), options={"eps_start": 0.1, "eps_end": 0.5})
    ex = make_explorer("dqn", space(), options={"phi": "0.45,0.35,0.2", "learn": "false"})
    assert ex.options.phi == (0.45, 0.35, 0.2) and ex.options.learn is False
    assert isinstance(ex, PositionSearch)


def test_replay_memory_is_a_ring_of_the_newest_transitions() -> None:
    ex = DQNSearch(space(), seed=0, options={**SMALL, "replay": 20})
    ex.find_maximums(score, 4)  # 8 walkers x 6 steps = 48 transitions through a memory of 20
    mem = ex.memory
    assert mem.size == 20 and mem.head == 48 % 20
    it = DQNSearch(space(), seed=0, options={**SMALL, "replay": 20, "phi": (0.0, 0.0, 1.0)})
    it.find_maximums(score, 4)
    assert sorted(set(np.round(-it.memory.reward * 6).astype(int).tolist())) == [4, 5, 6]  # the last steps kept
