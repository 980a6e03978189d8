"""Fasor's exploration: a deep Q-network agent that moves one knob at a time.

(Huang et al., "Fasor: A Fast Tensor Program Optimization Framework for Efficient DNN
Deployment", ICS 2024, the DQN-based search.)

* **State**: the walker's knob positions scaled to [0, 1] (position / max(size - 1, 1)),
  padded with zeros to ``max_knobs`` entries so that one network serves the spaces of one
  template whatever their knob sizes, followed by an optional fixed-length context vector (the
  task's features, :meth:`DQNSearch.set_context`). The input width, ``max_knobs`` + the context
  length, is fixed when the network is first used; a later context of another length, or a
  space with more knobs than ``max_knobs``, raises ValueError.
* **Actions**: ``2 * max_knobs``: action ``2j`` moves knob ``j`` down one position, ``2j + 1``
  up one ("moves one knob to an adjacent value"). An action that leaves a knob's range,
  touches a padded or size-1 knob, or reaches a config that breaks the space's constraints is
  masked out (Q = -inf) when actions are chosen; a walker with no valid action stays where it
  is and its episode ends (a terminal transition).
* **Network**: three fully connected layers (``hidden`` units, ReLU) and a target copy synced
  every ``target_sync`` updates; Adam, Huber loss, gradients clipped to norm ``grad_clip``;
  double-DQN targets (next action chosen by the online network among the valid next actions,
  valued by the target network); a replay memory of ``replay`` transitions (state, action,
  reward, next state, done, next valid-action mask), ``updates_per_step`` minibatches of
  ``batch`` per lockstep step once the memory holds ``batch`` transitions; epsilon-greedy
  with epsilon falling linearly from ``eps_start`` to ``eps_end`` over ``eps_decay_steps``
  lockstep steps counted across calls (and pre-training).
* **Reward**: Fasor's r = phi1 (T_prev - T) + phi2 CS/MS + phi3 #iter, here for a move from
  s to s' on step t (1, 2, ...) of an episode of at most ``max_steps``::

      r = phi[0] * (score(s') - score(s)) / scale
        + phi[1] * log1p(max(roofline(s'), 0))
        - phi[2] * t / max_steps

  ``score`` is the explorer's score function (higher is better, e.g. minus a predicted
  log-latency, so its rise is the paper's fall of T); ``scale`` is the standard deviation of
  the scores of the call's start configs (1 when about 0), so the reward does not depend on
  the score's units. ``roofline`` (optional, :meth:`DQNSearch.set_roofline`) maps positions
  [n, k] to the predicted ratio CS/MS of the compute-bound score over the memory-bound score;
  it enters through ``log1p`` so that huge ratios do not drown the other terms (no roofline
  function: the term is 0). The paper writes "+ phi3 #Iter", which read literally pays the
  agent for taking more iterations, against its stated aim of converging in few; the term is
  a **penalty** here (minus). ``phi`` defaults to Fasor's efficiency mode (0.35, 0.25, 0.4);
  its quality mode is (0.45, 0.35, 0.2). An episode cut at ``max_steps`` is not terminal
  (its last transition bootstraps: the time limit is not part of the state); only a walker
  with no valid action ends a true episode.
* **Episodes**: ``n_walkers`` walkers in lockstep, up to ``max_steps`` steps; a share
  ``from_seeds`` start from the ``seeds`` (cycling over them), the rest from random valid
  configs. Each lockstep step scores the configs reached in one call of the score function,
  on the indices not scored before in the call. Every visited config is a candidate.
* **Learning**: online, within a tuning task: the agent keeps its weights and its replay memory
  across calls. :meth:`DQNSearch.pretrain` is Fasor's offline pre-training (20 epochs on the
  dataset's tasks, :class:`DQNEnv`); :meth:`DQNSearch.save` writes the weights with
  ``torch.save``, :meth:`DQNSearch.load` (into an explorer) and :meth:`DQNSearch.from_file` (a
  new one) read them with ``torch.load(weights_only=True)``, never by unpickling objects.

Fasor gives gamma 0.95, the phi modes and the 20 pre-training epochs; the layer width, the
replay, batch, epsilon schedule, target sync, walkers and steps are ours (standard DQN values,
small enough that one call takes well under a second on the toy space).
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..space import ConfigSpace
from ..utils.options import make_options
from ..utils.threads import torch_threads
from .base import PositionSearch, ScoreFn, TopConfigs

#: Fasor's reward weights (phi1, phi2, phi3) per mode (the paper's; the explorer's default is efficiency's).
PHI = {"efficiency": (0.35, 0.25, 0.4), "quality": (0.45, 0.35, 0.2)}
#: Fasor: discount, the default reward weights, offline pre-training epochs.
DQN_GAMMA, DQN_PHI, DQN_PRETRAIN_EPOCHS = 0.95, PHI["efficiency"], 20
#: Ours: network, optimiser and replay.
DQN_HIDDEN, DQN_LR, DQN_REPLAY, DQN_BATCH, DQN_UPDATES_PER_STEP, DQN_TARGET_SYNC, DQN_GRAD_CLIP = \
    128, 1e-3, 20000, 128, 1, 100, 10.0
#: Ours: epsilon-greedy schedule.
DQN_EPS_START, DQN_EPS_END, DQN_EPS_DECAY_STEPS = 1.0, 0.05, 2000
#: Ours: the walk.
DQN_WALKERS, DQN_MAX_STEPS, DQN_FROM_SEEDS, DQN_MAX_KNOBS = 64, 32, 0.5, 16

#: Positions [n, k] -> the predicted CS/MS ratio per row.
RooflineFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class DQNOptions:
    """Fasor's DQN settings and the walk's own (see the module docstring)."""

    lr: float = DQN_LR
    gamma: float = DQN_GAMMA
    hidden: int = DQN_HIDDEN
    replay: int = DQN_REPLAY
    batch: int = DQN_BATCH
    updates_per_step: int = DQN_UPDATES_PER_STEP
    target_sync: int = DQN_TARGET_SYNC
    grad_clip: float = DQN_GRAD_CLIP
    eps_start: float = DQN_EPS_START
    eps_end: float = DQN_EPS_END
    eps_decay_steps: int = DQN_EPS_DECAY_STEPS
    n_walkers: int = DQN_WALKERS
    max_steps: int = DQN_MAX_STEPS
    from_seeds: float = DQN_FROM_SEEDS
    max_knobs: int = DQN_MAX_KNOBS
    phi: tuple[float, float, float] = DQN_PHI
    learn: bool = True

    def __post_init__(self) -> None:
        checks = [(self.lr > 0, "lr must be positive"),
                  (0 <= self.gamma <= 1, "gamma must lie in [0, 1]"),
                  (self.hidden >= 1 and self.batch >= 1, "hidden and batch must be at least 1"),
                  (self.replay >= self.batch, "replay must be at least batch"),
                  (self.updates_per_step >= 0, "updates_per_step must be at least 0"),
                  (self.target_sync >= 1, "target_sync must be at least 1"),
                  (self.grad_clip >= 0, "grad_clip must be at least 0 (0: no clipping)"),
                  (0 <= self.eps_end <= self.eps_start <= 1,
                   "eps_start and eps_end must satisfy 0 <= eps_end <= eps_start <= 1"),
                  (self.eps_decay_steps >= 0, "eps_decay_steps must be at least 0"),
                  (self.n_walkers >= 1 and self.max_steps >= 1, "n_walkers and max_steps must be at least 1"),
                  (0 <= self.from_seeds <= 1, "from_seeds must lie in [0, 1]"),
                  (self.max_knobs >= 1, "max_knobs must be at least 1"),
                  (len(self.phi) == 3 and all(np.isfinite(p) and p >= 0 for p in self.phi),
                   "phi must be three finite weights, each at least 0")]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


@dataclass
class DQNEnv:
    """One task to pre-train on: its space, score (higher is better), optional roofline ratio
    function and context vector, and the config indices worth starting from (best first)."""

    space: ConfigSpace
    score: ScoreFn
    roofline: RooflineFn | None = None
    context: np.ndarray | None = None
    seeds: Sequence[int] = ()


def _q_network(n_in: int, hidden: int, n_out: int) -> Any:
    """Three fully connected layers with ReLU between them."""
    from torch import nn

    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, n_out))


def _as_context(vec: Any) -> np.ndarray:
    """A context as a 1-D float32 array (None: empty)."""
    if vec is None:
        return np.zeros(0, dtype=np.float32)
    arr = np.asarray(vec, dtype=np.float32)
    if arr.ndim != 1:
        raise ValueError(f"a context must be a 1-D vector, got shape {arr.shape}")
    return arr


class _Replay:
    """A ring buffer of transitions (numpy arrays, allocated once)."""

    def __init__(self, capacity: int, width: int, n_actions: int) -> None:
        self.capacity = capacity
        self.state = np.zeros((capacity, width), dtype=np.float32)
        self.next_state = np.zeros((capacity, width), dtype=np.float32)
        self.action = np.zeros(capacity, dtype=np.int64)
        self.reward = np.zeros(capacity, dtype=np.float32)
        self.done = np.zeros(capacity, dtype=bool)
        self.next_mask = np.zeros((capacity, n_actions), dtype=bool)
        self.size = 0
        self.head = 0

    def push(self, state: np.ndarray, action: np.ndarray, reward: np.ndarray, next_state: np.ndarray,
             done: np.ndarray, next_mask: np.ndarray) -> None:
        for lo in range(0, len(action), self.capacity):
            hi = min(lo + self.capacity, len(action))
            rows = (self.head + np.arange(hi - lo)) % self.capacity
            self.state[rows] = state[lo:hi]
            self.action[rows] = action[lo:hi]
            self.reward[rows] = reward[lo:hi]
            self.next_state[rows] = next_state[lo:hi]
            self.done[rows] = done[lo:hi]
            self.next_mask[rows] = next_mask[lo:hi]
            self.head = int((self.head + hi - lo) % self.capacity)
            self.size = min(self.size + hi - lo, self.capacity)


class DQNSearch(PositionSearch):
    """Finds the configs a score function rates highest with Fasor's DQN agent (module docstring).

    Attributes beside :class:`PositionSearch`'s: ``roofline`` (the optional CS/MS function),
    ``context`` (the context vector), ``eps_steps`` (lockstep steps counted by the epsilon
    schedule), ``updates`` (gradient steps made), ``last_report`` (the last call's figures).
    """

    name = "dqn"
    Options = DQNOptions

    def __init__(self, space: ConfigSpace, seed: int = 0, options: DQNOptions | Mapping[str, Any] | None = None,
                 **overrides: Any) -> None:
        super().__init__(space, seed)
        self.options = make_options(DQNOptions, options, owner="explorer 'dqn'", **overrides)
        self._check_knobs(space)
        self.seed = seed
        self.roofline: RooflineFn | None = None
        self.context: np.ndarray | None = None
        self.n_actions = 2 * self.options.max_knobs
        self.in_width: int | None = None  # fixed when the network is built
        self.online: Any = None
        self.target: Any = None
        self.optimizer: Any = None
        self.memory: _Replay | None = None
        self.eps_steps = 0
        self.updates = 0
        self.last_report: dict[str, Any] = {}

    # ------------------------------------------------------------ set-up
    def _check_knobs(self, space: ConfigSpace) -> None:
        if len(space.dims) > self.options.max_knobs:
            raise ValueError(f"the space has {len(space.dims)} knobs, more than max_knobs={self.options.max_knobs}")

    def set_roofline(self, fn: RooflineFn | None) -> None:
        """Use ``fn`` (positions [n, k] -> CS/MS ratio [n]) in the reward's phi2 term (None: no term)."""
        self.roofline = fn

    def set_context(self, vec: np.ndarray | None) -> None:
        """The context vector appended to every state (None: none). Its length must match the
        network's input once the network exists (ValueError otherwise)."""
        ctx = _as_context(vec)
        self._check_context(ctx)
        self.context = ctx if len(ctx) else None

    def _check_context(self, ctx: np.ndarray) -> None:
        if self.in_width is not None and self.options.max_knobs + len(ctx) != self.in_width:
            raise ValueError(f"context of length {len(ctx)} does not fit the network: it takes "
                             f"{self.in_width - self.options.max_knobs} context values")

    def _build(self, context_dim: int) -> None:
        """The online and target networks, optimiser and replay memory for this input width."""
        import torch

        o = self.options
        width = o.max_knobs + context_dim
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.online = _q_network(width, o.hidden, self.n_actions)
            self.target = _q_network(width, o.hidden, self.n_actions)
        self.target.load_state_dict(self.online.state_dict())
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=o.lr)
        self.memory = _Replay(o.replay, width, self.n_actions)
        self.in_width = width

    def _ensure(self, ctx: np.ndarray) -> None:
        """Build the networks on first use; check the context's length after."""
        if self.online is None:
            self._build(len(ctx))
        self._check_context(ctx)

    @property
    def epsilon(self) -> float:
        """The exploration rate now (linear from ``eps_start`` to ``eps_end``)."""
        o = self.options
        if o.eps_decay_steps == 0:
            return o.eps_end
        frac = min(self.eps_steps / o.eps_decay_steps, 1.0)
        return o.eps_start + frac * (o.eps_end - o.eps_start)

    # ------------------------------------------------------------ states, moves, rewards
    def states(self, pos: np.ndarray, dims: np.ndarray, ctx: np.ndarray) -> np.ndarray:
        """Network inputs of rows of positions over knobs of sizes ``dims`` with context ``ctx``."""
        o = self.options
        n, k = pos.shape
        out = np.zeros((n, o.max_knobs + len(ctx)), dtype=np.float32)
        out[:, :k] = pos / np.maximum(dims - 1, 1)
        out[:, o.max_knobs:] = ctx
        return out

    def valid_actions(self, ps: PositionSearch, pos: np.ndarray) -> np.ndarray:
        """[n, 2 * max_knobs] booleans: which moves of each row stay in range (on a knob of size
        at least 2) and reach a valid config of ``ps``'s space."""
        n, k = pos.shape
        mask = np.zeros((n, self.n_actions), dtype=bool)
        for j in range(k):
            if ps.dims[j] < 2:
                continue
            for d, a in ((-1, 2 * j), (1, 2 * j + 1)):
                moved = pos[:, j] + d
                ok = (moved >= 0) & (moved < ps.dims[j])
                rows = np.flatnonzero(ok)
                if not len(rows):
                    continue
                cand = pos[rows].copy()
                cand[:, j] = moved[rows]
                valid = [ps.is_valid_index(int(i)) for i in ps.indices(cand)]
                mask[rows, a] = valid
        return mask

    @staticmethod
    def move(pos: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Positions after ``actions`` (2j: knob j down one, 2j + 1: up one); no checks."""
        new = pos.copy()
        rows = np.arange(len(pos))
        new[rows, actions // 2] += np.where(actions % 2 == 1, 1, -1)
        return new

    def reward(self, score_from: np.ndarray, score_to: np.ndarray, t: int, ratio: np.ndarray | None = None,
               scale: float = 1.0) -> np.ndarray:
        """Fasor's reward of moves from scores ``score_from`` to ``score_to`` on step ``t``
        (1-based) with CS/MS ratios ``ratio`` of the configs reached (None: no roofline term);
        the module docstring gives the formula (the iteration term is a penalty)."""
        p1, p2, p3 = self.options.phi
        r = p1 * (np.asarray(score_to, dtype=np.float64) - np.asarray(score_from, dtype=np.float64)) / scale
        if ratio is not None:
            r = r + p2 * np.log1p(np.maximum(np.asarray(ratio, dtype=np.float64), 0.0))
        return r - p3 * t / self.options.max_steps

    # ------------------------------------------------------------ learning
    def q_values(self, positions: np.ndarray, context: np.ndarray | None = None) -> np.ndarray:
        """The online network's Q-values [n, 2 * max_knobs] of rows of positions of this
        explorer's space (``context`` None: the one set with :meth:`set_context`); unmasked."""
        import torch

        ctx = _as_context(self.context if context is None else context)
        with torch_threads(1):
            self._ensure(ctx)
            states = self.states(np.asarray(positions, dtype=np.int64).reshape(-1, len(self.dims)), self.dims, ctx)
            with torch.no_grad():
                return self.online(torch.from_numpy(states)).numpy().astype(np.float64)

    def _update(self) -> float:
        """One double-DQN gradient step on a minibatch from the replay memory; the loss."""
        import torch
        import torch.nn.functional as F

        o, mem = self.options, self.memory
        assert mem is not None
        idx = self.np_rng.integers(0, mem.size, size=o.batch)
        s = torch.from_numpy(mem.state[idx])
        a = torch.from_numpy(mem.action[idx])
        r = torch.from_numpy(mem.reward[idx])
        s2 = torch.from_numpy(mem.next_state[idx])
        cont = torch.from_numpy(~mem.done[idx]).float()
        m2 = torch.from_numpy(mem.next_mask[idx])
        with torch.no_grad():
            best = self.online(s2).masked_fill(~m2, float("-inf")).argmax(dim=1, keepdim=True)
            q_next = self.target(s2).gather(1, best).squeeze(1)
            y = r + o.gamma * cont * q_next
        q = self.online(s).gather(1, a.unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(q, y)
        self.optimizer.zero_grad()
        loss.backward()
        if o.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.online.parameters(), o.grad_clip)
        self.optimizer.step()
        self.updates += 1
        if self.updates % o.target_sync == 0:
            self.target.load_state_dict(self.online.state_dict())
        return float(loss.detach())

    # ------------------------------------------------------------ episodes
    def _starts(self, ps: PositionSearch, seeds: Sequence[int]) -> np.ndarray:
        """Start positions: a share ``from_seeds`` of the walkers cycle over the valid seeds,
        the rest start from random valid configs."""
        o = self.options
        size = len(ps.space)
        good = [int(i) for i in seeds if 0 <= int(i) < size and ps.is_valid_index(int(i))]
        n_seed = min(o.n_walkers, int(round(o.from_seeds * o.n_walkers))) if good else 0
        pts = [ps.space.positions(ps.space.get(good[w % len(good)])) for w in range(n_seed)]
        seeded = np.array(pts, dtype=np.int64).reshape(-1, len(ps.dims))
        if n_seed == o.n_walkers:  # (random_positions(0) would return every valid config of a small space)
            return seeded
        rand = ps.random_positions(o.n_walkers - n_seed)
        return np.concatenate([seeded, rand]) if len(rand) else seeded

    def _episodes(self, ps: PositionSearch, score: ScoreFn, roofline: RooflineFn | None, ctx: np.ndarray,
                  start: np.ndarray, top: TopConfigs | None, learn: bool) -> dict[str, Any]:
        """Walk every walker from ``start`` for up to ``max_steps`` lockstep steps, offering each
        config reached to ``top``; with ``learn``, store the transitions and train. A report."""
        import torch

        o = self.options
        n = len(start)
        cache: dict[int, tuple[float, float]] = {}  # index -> (score, CS/MS ratio) in this call
        evaluated = 0

        def lookup(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            nonlocal evaluated
            idx = ps.indices(pos)
            todo = [i for i in dict.fromkeys(int(i) for i in idx) if i not in cache]
            if todo:
                first = {i: r for r, i in reversed(list(enumerate(int(i) for i in idx)))}
                rows = pos[[first[i] for i in todo]]
                s = np.asarray(score(rows), dtype=np.float64).reshape(-1)
                ratio = (np.asarray(roofline(rows), dtype=np.float64).reshape(-1) if roofline is not None
                         else np.zeros(len(todo)))
                evaluated += len(todo)
                for i, si, ri in zip(todo, s, ratio):
                    cache[i] = (float(si), float(ri))
            got = np.array([cache[int(i)] for i in idx], dtype=np.float64).reshape(-1, 2)
            return idx, got[:, 0], got[:, 1]

        pos = start.copy()
        idx, cur, _ = lookup(pos)
        if top is not None:
            top.offer(cur, idx)
        std = float(cur.std())
        scale = std if std > 1e-12 else 1.0
        start_score = cur.copy()
        best = cur.copy()
        masks = self.valid_actions(ps, pos)
        alive = masks.any(axis=1)
        lengths = np.zeros(n, dtype=np.int64)
        rewards: list[np.ndarray] = []
        states = self.states(pos, ps.dims, ctx)
        lockstep = 0
        for t in range(1, o.max_steps + 1):
            act_rows = np.flatnonzero(alive)
            if not len(act_rows):
                break
            lockstep += 1
            eps = self.epsilon
            m = masks[act_rows]
            with torch.no_grad():
                q = self.online(torch.from_numpy(states[act_rows])).numpy()
            actions = np.where(m, q, -np.inf).argmax(axis=1)
            explore = self.np_rng.random(len(act_rows)) < eps
            if explore.any():
                keys = np.where(m[explore], self.np_rng.random((int(explore.sum()), self.n_actions)), -1.0)
                actions[explore] = keys.argmax(axis=1)
            new = self.move(pos[act_rows], actions)
            new_idx, new_score, new_ratio = lookup(new)
            if top is not None:
                top.offer(new_score, new_idx)
            r = self.reward(cur[act_rows], new_score, t, new_ratio if roofline is not None else None, scale)
            new_masks = self.valid_actions(ps, new)
            new_states = self.states(new, ps.dims, ctx)
            done = ~new_masks.any(axis=1)
            if learn:
                assert self.memory is not None
                self.memory.push(states[act_rows], actions, r.astype(np.float32), new_states, done, new_masks)
            rewards.append(r)
            pos[act_rows], cur[act_rows], masks[act_rows], states[act_rows] = new, new_score, new_masks, new_states
            best[act_rows] = np.maximum(best[act_rows], new_score)
            lengths[act_rows] += 1
            alive[act_rows] = ~done
            self.eps_steps += 1
            if learn and self.memory is not None and self.memory.size >= o.batch:
                for _ in range(o.updates_per_step):
                    self._update()
        all_r = np.concatenate(rewards) if rewards else np.zeros(0)
        return {"walkers": n, "steps": float(lengths.mean()) if n else 0.0, "lockstep_steps": lockstep,
                "scored": int(n + lengths.sum()), "evaluated": evaluated,
                "mean_reward": float(all_r.mean()) if len(all_r) else 0.0, "epsilon": self.epsilon,
                "start_score": float(start_score.mean()), "final_score": float(cur.mean()),
                "best_score": float(best.max()), "transitions": int(len(all_r)) if learn else 0,
                "updates": self.updates}

    # ------------------------------------------------------------ search
    def find_maximums(self, score: ScoreFn, n: int, exclude: set[int] | None = None,
                      seeds: Sequence[int] = ()) -> list[int]:
        """Indices of up to ``n`` distinct configs with the highest scores among the start
        points and every config the walkers visited, skipping ``exclude``; the agent learns
        from the walk as it goes (unless the ``learn`` option is off)."""
        exclude = exclude or set()
        if n <= 0:
            return []
        ctx = _as_context(self.context)
        start = self._starts(self, seeds)
        if len(start) == 0:
            return []
        top = TopConfigs(n, exclude)
        with torch_threads(1):
            self._ensure(ctx)
            report = self._episodes(self, score, self.roofline, ctx, start, top, self.options.learn)
        self.last_report = report
        self.count(report["steps"], report["scored"])
        return top.best()

    def pretrain(self, envs: Sequence[DQNEnv], epochs: int = DQN_PRETRAIN_EPOCHS) -> dict[str, Any]:
        """Fasor's offline pre-training: ``epochs`` rounds of one call's worth of learning
        episodes in every env. Returns ``epochs``, ``transitions`` (stored), ``mean_reward``
        and ``final_score`` (per epoch, averaged over the envs) and ``seconds``."""
        if epochs < 0:
            raise ValueError("epochs must be at least 0")
        ctxs = [_as_context(e.context) for e in envs]
        if len({len(c) for c in ctxs}) > 1:
            raise ValueError(f"the envs' contexts differ in length: {sorted({len(c) for c in ctxs})}")
        for e in envs:
            self._check_knobs(e.space)
        walkers = [self if e.space is self.space else PositionSearch(e.space, seed=self.seed + 1 + i)
                   for i, e in enumerate(envs)]
        began = time.perf_counter()
        per_epoch_r: list[float] = []
        per_epoch_final: list[float] = []
        transitions = 0
        with torch_threads(1):
            if envs:
                self._ensure(ctxs[0])
            for _ in range(epochs):
                rs, finals = [], []
                for env, ps, ctx in zip(envs, walkers, ctxs):
                    start = self._starts(ps, env.seeds)
                    if not len(start):
                        continue
                    rep = self._episodes(ps, env.score, env.roofline, ctx, start, None, learn=True)
                    transitions += rep["transitions"]
                    rs.append(rep["mean_reward"])
                    finals.append(rep["final_score"])
                per_epoch_r.append(float(np.mean(rs)) if rs else 0.0)
                per_epoch_final.append(float(np.mean(finals)) if finals else 0.0)
        return {"epochs": epochs, "transitions": transitions, "mean_reward": per_epoch_r,
                "final_score": per_epoch_final, "seconds": time.perf_counter() - began}

    # ------------------------------------------------------------ weights
    def state_dict(self) -> dict[str, Any]:
        """The networks' tensors, the widths and counters: plain data for ``torch.save`` (and
        ``torch.load(weights_only=True)``). Builds the networks if they do not exist yet."""
        with torch_threads(1):
            self._ensure(_as_context(self.context))
        return {"online": {k: v.detach().clone() for k, v in self.online.state_dict().items()},
                "target": {k: v.detach().clone() for k, v in self.target.state_dict().items()},
                "in_width": int(self.in_width), "out_width": int(self.n_actions), "hidden": int(self.options.hidden),
                "max_knobs": int(self.options.max_knobs), "updates": int(self.updates),
                "eps_steps": int(self.eps_steps), "options": dataclasses.asdict(self.options)}

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Load :meth:`state_dict`'s output (the weights and the counters: a pre-trained agent
        goes on with the epsilon it reached); ValueError (one line) when its widths do not fit
        this explorer (its ``max_knobs``, ``hidden``, or its context's length)."""
        import torch

        try:
            in_w, out_w, hidden = int(d["in_width"]), int(d["out_width"]), int(d["hidden"])
            online, target = d["online"], d["target"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a DQN state dict (missing or bad {exc})") from None
        o = self.options
        if out_w != self.n_actions or hidden != o.hidden:
            raise ValueError(f"DQN weights of {out_w} actions and {hidden} hidden units do not fit this explorer's "
                             f"{self.n_actions} actions (max_knobs={o.max_knobs}) and {o.hidden} hidden units")
        want = self.in_width
        if want is None and self.context is not None:
            want = o.max_knobs + len(self.context)
        if (want is not None and in_w != want) or in_w < o.max_knobs:
            raise ValueError(f"DQN weights take {in_w} inputs; this explorer's states have "
                             f"{want if want is not None else f'at least {o.max_knobs}'}")
        if self.online is None:
            self._build(in_w - o.max_knobs)
        try:
            self.online.load_state_dict({k: torch.as_tensor(v) for k, v in online.items()})
            self.target.load_state_dict({k: torch.as_tensor(v) for k, v in target.items()})
        except (RuntimeError, AttributeError) as exc:
            raise ValueError(f"DQN weights do not fit the network: {str(exc).splitlines()[0]}") from None
        self.updates = int(d.get("updates", self.updates))
        self.eps_steps = int(d.get("eps_steps", self.eps_steps))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` to ``path`` with ``torch.save`` (atomically)."""
        import torch

        from ..utils.atomic import atomic_path

        sd = self.state_dict()
        with atomic_path(path, suffix=".pt") as tmp:
            torch.save(sd, tmp)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load the weights :meth:`save` wrote into this explorer (``torch.load(weights_only=True)``:
        plain data only); ValueError (one line) for an unreadable file or widths that do not fit."""
        self.load_state_dict(_read(path))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], space: ConfigSpace, seed: int = 0,
                  options: DQNOptions | Mapping[str, Any] | None = None, **overrides: Any) -> "DQNSearch":
        """A new explorer over ``space`` with the weights :meth:`save` wrote; its options are the
        saved ones unless ``options`` is given (``overrides`` apply on top either way)."""
        d = _read(path)
        if options is None and isinstance(d.get("options"), Mapping):
            known = {f.name for f in dataclasses.fields(DQNOptions)}
            options = {k: v for k, v in d["options"].items() if k in known}
        ex = cls(space, seed=seed, options=options, **overrides)
        ex.load_state_dict(d)
        return ex


def _read(path: str | os.PathLike[str]) -> Mapping[str, Any]:
    """A saved state dict, read with ``torch.load(weights_only=True)``; ValueError if unreadable."""
    import pickle

    import torch

    try:
        d = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise ValueError(f"{path}: not readable DQN weights (it holds objects, not only tensors and plain "
                         "data; refused)") from None
    except Exception as exc:  # noqa: BLE001 - a damaged file fails in many ways (struct, EOF, zip, OS errors)
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: not readable DQN weights ({msg})") from None
    if not isinstance(d, Mapping):
        raise ValueError(f"{path}: not a DQN state dict")
    return d
