"""Chameleon's adaptive exploration: an actor-critic PPO agent that walks the config space.

(Ahn et al., "Chameleon: Adaptive Code Optimization for Expedited Deep Neural Network
Compilation", ICLR 2020, §3.2 and Table 9.)

* **State**: the current config as knob positions scaled to [0, 1].
* **Action**: for every knob, decrement, stay or increment (one categorical head of 3 per
  knob). The configuration updater applies the action, clamps each knob to its range, and
  rejects a result that breaks the space's constraints (the walker stays where it was).
* **Networks**: the policy and the value network share their first layer (``hidden`` units,
  tanh); each has one more hidden layer of its own.
* **Episodes**: ``n_episodes`` walkers start from the best measured configs (a share
  ``from_best`` of them, from the ``seeds``) and random ones, and take up to ``max_steps``
  steps. After ``min_steps`` steps an episode ends at the first step on which the walker stays
  put on at least ``stay_fraction`` of its knobs (it chose "stay" or hit a bound): the agent
  has settled. (The rule and the 128 come from the authors' released RL optimizer; the paper's
  Table 9 gives only the 500.) The walkers move in lockstep, one batched forward pass a step.
* **Reward**: the score function's predicted fitness of each config visited, scored in one
  batch at the end of the episodes (no measurement inside the search), standardised over that
  batch so the settings do not depend on the cost model's scale.
* **Learning**: GAE (``gamma``, ``gae_lambda``) and the clipped PPO objective with value and
  entropy terms, ``epochs`` passes of minibatches of ``minibatch`` transitions, Adam. The
  agent keeps its weights across the calls on one task (one explorer per tuner), so it learns
  the task over the tuning iterations.

The defaults are Table 9's (Adam 1e-3, discount 0.9, GAE 0.99, 3 epochs, clip 0.3, value
coefficient 1.0, entropy coefficient 0.1, 128 episodes, 500 steps at most); the hidden width,
minibatch size and the termination rule are ours (the paper gives none of them).

It is a compact PyTorch PPO rather than stable-baselines3: ``bench/ppo_overhead.py`` measures
both on the same walk (see the README); the batched end-of-episode reward does not fit
stable-baselines3's per-step environment interface without a wrapper that defers rewards.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..space import ConfigSpace
from ..utils.options import make_options
from ..utils.threads import torch_threads
from .base import PositionSearch, ScoreFn, TopConfigs

#: Chameleon's Table 9.
PPO_LR, PPO_GAMMA, PPO_GAE, PPO_EPOCHS, PPO_CLIP = 1e-3, 0.9, 0.99, 3, 0.3
PPO_VALUE_COEF, PPO_ENTROPY_COEF, PPO_EPISODES, PPO_MAX_STEPS = 1.0, 0.1, 128, 500
#: Ours: the settle rule's minimum length and share (from the authors' code), net width, minibatch.
PPO_MIN_STEPS, PPO_STAY_FRACTION, PPO_HIDDEN, PPO_MINIBATCH, PPO_FROM_BEST = 128, 0.75, 64, 256, 0.5


@dataclass(frozen=True)
class PPOOptions:
    """Chameleon's PPO settings (Table 9) and the walk's own (see the module docstring)."""

    lr: float = PPO_LR
    gamma: float = PPO_GAMMA
    gae_lambda: float = PPO_GAE
    epochs: int = PPO_EPOCHS
    clip: float = PPO_CLIP
    value_coef: float = PPO_VALUE_COEF
    entropy_coef: float = PPO_ENTROPY_COEF
    n_episodes: int = PPO_EPISODES
    max_steps: int = PPO_MAX_STEPS
    min_steps: int = PPO_MIN_STEPS
    stay_fraction: float = PPO_STAY_FRACTION
    hidden: int = PPO_HIDDEN
    minibatch: int = PPO_MINIBATCH
    from_best: float = PPO_FROM_BEST

    def __post_init__(self) -> None:
        checks = [(self.lr > 0, "lr must be positive"),
                  (0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1, "gamma and gae_lambda must lie in [0, 1]"),
                  (self.epochs >= 0, "epochs must be at least 0"),
                  (self.clip > 0, "clip must be positive"),
                  (self.value_coef >= 0 and self.entropy_coef >= 0, "value_coef and entropy_coef must be at least 0"),
                  (self.n_episodes >= 1 and self.max_steps >= 1, "n_episodes and max_steps must be at least 1"),
                  (self.min_steps >= 0, "min_steps must be at least 0"),
                  (0 < self.stay_fraction <= 1, "stay_fraction must lie in (0, 1]"),
                  (self.hidden >= 1 and self.minibatch >= 1, "hidden and minibatch must be at least 1"),
                  (0 <= self.from_best <= 1, "from_best must lie in [0, 1]")]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


def _actor_critic(n_knobs: int, hidden: int) -> Any:
    """The policy (3 logits per knob) and value networks over one shared first layer."""
    import torch
    from torch import nn

    class ActorCritic(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = nn.Sequential(nn.Linear(n_knobs, hidden), nn.Tanh())
            self.policy = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 3 * n_knobs))
            self.value = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))

        def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = self.shared(obs)
            return self.policy(h).view(-1, n_knobs, 3), self.value(h).squeeze(-1)

    return ActorCritic()


class PPOSearch(PositionSearch):
    """Finds the configs a score function rates highest with a PPO agent (module docstring)."""

    name = "ppo"
    Options = PPOOptions

    def __init__(self, space: ConfigSpace, seed: int = 0, options: PPOOptions | Mapping[str, Any] | None = None,
                 **overrides: Any) -> None:
        import torch

        super().__init__(space, seed)
        self.options = make_options(PPOOptions, options, owner="explorer 'ppo'", **overrides)
        self.generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net = _actor_critic(len(self.dims), self.options.hidden)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=self.options.lr)
        self.scale = np.maximum(self.dims - 1, 1).astype(np.float32)
        self.steps_run = 0  # lockstep steps of the last call (its longest episode)
        self.episode_steps = 0.0  # mean episode length of the last call
        self.updates = 0  # PPO updates made (one per call)

    # ------------------------------------------------------------ rollout
    def _starts(self, seeds: Sequence[int]) -> np.ndarray:
        o = self.options
        n_best = min(len(seeds), int(round(o.from_best * o.n_episodes)))
        best = [self.space.positions(self.space.get(int(i))) for i in list(seeds)[:n_best]]
        pts = np.array(best, dtype=np.int64).reshape(-1, len(self.dims))
        rand = self.random_positions(o.n_episodes - len(pts))
        return np.concatenate([pts, rand]) if len(rand) else pts

    def _apply(self, pos: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """The configuration updater: positions moved by ``actions - 1``, clamped to the knob
        ranges; a row whose result is invalid stays where it was."""
        new = np.clip(pos + actions - 1, 0, self.dims - 1)
        for row, idx in enumerate(self.indices(new)):
            if not self.is_valid_index(int(idx)):
                new[row] = pos[row]
        return new

    def _rollout(self, start: np.ndarray) -> dict[str, np.ndarray]:
        """Walk every episode with the current policy until it settles or reaches ``max_steps``.

        Returns per step ``t`` and episode ``e``: ``obs``, ``actions``, ``logp``, ``value``,
        ``next`` (the positions reached), ``alive`` (the step belongs to the episode) and
        ``last`` (the episode's final step)."""
        import torch

        o = self.options
        n, k = start.shape
        pos = start.copy()
        alive = np.ones(n, dtype=bool)
        steps: dict[str, list[np.ndarray]] = {key: [] for key in ("obs", "actions", "logp", "value", "next", "alive",
                                                                  "last")}
        need = int(np.ceil(o.stay_fraction * k))
        with torch.no_grad():
            for t in range(o.max_steps):
                obs = pos.astype(np.float32) / self.scale
                logits, value = self.net(torch.from_numpy(obs))
                probs = torch.softmax(logits, dim=-1).reshape(-1, 3)
                act = torch.multinomial(probs, 1, generator=self.generator).view(n, k)
                logp = torch.log(probs.gather(1, act.reshape(-1, 1)).view(n, k) + 1e-12).sum(-1)
                actions = act.numpy().astype(np.int64)
                new = self._apply(pos, actions)
                new = np.where(alive[:, None], new, pos)
                settled = (new == pos).sum(axis=1) >= need
                last = alive & ((settled & (t + 1 >= o.min_steps)) | (t + 1 == o.max_steps))
                for key, val in (("obs", obs), ("actions", actions), ("logp", logp.numpy()), ("value", value.numpy()),
                                 ("next", new), ("alive", alive.copy()), ("last", last)):
                    steps[key].append(val)
                pos = new
                alive = alive & ~last
                if not alive.any():
                    break
        return {key: np.stack(val) for key, val in steps.items()}

    # ------------------------------------------------------------ learning
    def _advantages(self, rewards: np.ndarray, values: np.ndarray, alive: np.ndarray,
                    last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """GAE advantages and returns [T, n]; an episode's last step is terminal."""
        o = self.options
        adv = np.zeros_like(rewards)
        running = np.zeros(rewards.shape[1], dtype=np.float64)
        next_value = np.zeros(rewards.shape[1], dtype=np.float64)
        for t in range(rewards.shape[0] - 1, -1, -1):
            cont = (~last[t]).astype(np.float64)
            delta = rewards[t] + o.gamma * next_value * cont - values[t]
            running = delta + o.gamma * o.gae_lambda * cont * running
            running = np.where(alive[t], running, 0.0)
            adv[t] = running
            next_value = np.where(alive[t], values[t], 0.0)
        return adv, adv + values

    def _update(self, roll: dict[str, np.ndarray], rewards: np.ndarray) -> None:
        """``epochs`` passes of clipped PPO over the rollout's transitions."""
        import torch

        o = self.options
        values = roll["value"].astype(np.float64)
        adv, ret = self._advantages(rewards, values, roll["alive"], roll["last"])
        mask = roll["alive"]
        obs = torch.from_numpy(roll["obs"][mask])
        actions = torch.from_numpy(roll["actions"][mask])
        old_logp = torch.from_numpy(roll["logp"][mask])
        adv_t = torch.from_numpy(adv[mask]).float()
        adv_t = (adv_t - adv_t.mean()) / (adv_t.std() + 1e-8) if len(adv_t) > 1 else adv_t
        ret_t = torch.from_numpy(ret[mask]).float()
        total = len(obs)
        for _ in range(o.epochs):
            order = torch.from_numpy(self.np_rng.permutation(total))
            for lo in range(0, total, o.minibatch):
                idx = order[lo: lo + o.minibatch]
                logits, value = self.net(obs[idx])
                logp_all = torch.log_softmax(logits, dim=-1)
                logp = logp_all.gather(2, actions[idx].unsqueeze(-1)).squeeze(-1).sum(-1)
                entropy = -(logp_all.exp() * logp_all).sum(-1).sum(-1).mean()
                ratio = torch.exp(logp - old_logp[idx])
                a = adv_t[idx]
                policy_loss = -torch.min(ratio * a, torch.clamp(ratio, 1 - o.clip, 1 + o.clip) * a).mean()
                value_loss = ((value - ret_t[idx]) ** 2).mean()
                loss = policy_loss + o.value_coef * value_loss - o.entropy_coef * entropy
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
        self.updates += 1

    # ------------------------------------------------------------ search
    def find_maximums(self, score: ScoreFn, n: int, exclude: set[int] | None = None,
                      seeds: Sequence[int] = ()) -> list[int]:
        """Indices of up to ``n`` distinct configs with the highest scores among the start
        points and every config the episodes visited, skipping ``exclude``; then one PPO update
        on the episodes' rewards."""
        exclude = exclude or set()
        if n <= 0:
            return []
        start = self._starts(seeds)
        if len(start) == 0:
            return []
        with torch_threads(1):
            return self._search(score, n, exclude, start)

    def _search(self, score: ScoreFn, n: int, exclude: set[int], start: np.ndarray) -> list[int]:
        roll = self._rollout(start)
        alive = roll["alive"]
        visited = roll["next"][alive]  # [m, k]: every step of every episode
        scores = np.asarray(score(np.concatenate([start, visited])), dtype=np.float64)
        top = TopConfigs(n, exclude)
        top.offer(scores, self.indices(np.concatenate([start, visited])))
        step_scores = scores[len(start):]
        std = step_scores.std()
        rewards = np.zeros(alive.shape, dtype=np.float64)
        rewards[alive] = (step_scores - step_scores.mean()) / std if std > 0 else 0.0
        lengths = alive.sum(axis=0)
        self.steps_run = int(alive.shape[0])
        self.episode_steps = float(lengths.mean())
        self.count(self.episode_steps, len(start) + int(alive.sum()))
        if self.options.epochs:
            self._update(roll, rewards)
        return top.best()
