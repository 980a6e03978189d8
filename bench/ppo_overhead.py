"""The PPO explorer's cost, ours against stable-baselines3: ``python -m bench run --study ppo-overhead``.

    python -m bench run --study ppo-overhead [--workload C6] [--iterations 5] [--out bench/results/ppo_overhead]

(``make bench-ppo`` installs stable-baselines3, the ``rl`` extra, and runs it.)

Chameleon's issue allows a maintained RL library where its overhead fits. Both agents walk the
same space (a ResNet-18 workload's blocked conv2d template) against the same score (an XGBoost
knob-feature model, fitted on 128 configs labelled by a fixed synthetic function: the cost of
scoring is real, its values need not be), with Table 9's settings, 128 walkers, and the same
number of transitions per iteration:

* ``tensortune``: :class:`tensortune.explore.ppo.PPOSearch` (one ``find_maximums`` call: the
  episodes, one batched scoring of every visited config at their end, one PPO update);
* ``stable-baselines3``: ``PPO("MlpPolicy")`` over a vectorised environment of the same 128
  walkers (a ``VecEnv`` that moves them in one numpy step). Its rollout asks for each step's
  reward at that step, so the score runs once per step on 128 configs; ``learn`` for the same
  number of transitions is one iteration. (Its ``MlpPolicy`` cannot share a first layer between
  policy and value in stable-baselines3 2.x; the networks are otherwise the same size.)

Printed and saved (``OUT/ppo_overhead.json``, ``.md``): seconds per iteration (median of
``--iterations`` after one warm-up), and the share of it spent scoring.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .common import machine_info, machine_line, write_text


def scorer(task: Any, seed: int = 0) -> Callable[[np.ndarray], np.ndarray]:
    """An XGBoost knob-feature model's position scorer, fitted on 128 random configs whose
    labels are a fixed smooth function of their knob positions."""
    import random

    from tensortune.costmodel import make_cost_model
    from tensortune.costmodel.base import TaskData

    space = task.space
    configs = space.sample(random.Random(seed), 128)
    dims = np.maximum(np.array(space.dims) - 1, 1)
    target = np.random.default_rng(seed).random(len(dims))
    costs = [1.0 + float(np.abs(np.array(space.positions(c)) / dims - target).sum()) for c in configs]
    model = make_cost_model("xgb", feature="knob", seed=seed)
    model.fit([TaskData(task, configs, costs)])
    fn = model.position_scorer(task)
    assert fn is not None
    return fn


class Timed:
    """A score function that adds up its calls' seconds."""

    def __init__(self, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        self.fn, self.seconds, self.calls = fn, 0.0, 0

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.fn(pos)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out


def run_ours(task: Any, score: Timed, iterations: int) -> dict[str, Any]:
    from tensortune.explore.ppo import PPOSearch

    ex = PPOSearch(task.space, seed=0)
    times, scoring, transitions = [], [], []
    for i in range(iterations + 1):
        score.seconds = 0.0
        before = ex.stats["scored"]
        t0 = time.perf_counter()
        ex.find_maximums(score, 256)
        if i:  # the first is a warm-up
            times.append(time.perf_counter() - t0)
            scoring.append(score.seconds)
            transitions.append(ex.stats["scored"] - before - ex.options.n_episodes)
    return {"seconds": statistics.median(times), "scoring_s": statistics.median(scoring),
            "transitions": int(statistics.median(transitions)), "episode_steps": ex.episode_steps}


def run_sb3(task: Any, score: Timed, iterations: int, steps: int) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecEnv

    from tensortune.explore.base import PositionSearch
    from tensortune.explore.ppo import PPOOptions

    o = PPOOptions()
    walk = PositionSearch(task.space, seed=0)
    k = len(walk.dims)
    scale = np.maximum(walk.dims - 1, 1).astype(np.float32)

    class Walkers(VecEnv):
        """128 knob walkers moved in one numpy step; reward = the score of where each lands."""

        def __init__(self) -> None:
            super().__init__(o.n_episodes, gym.spaces.Box(0.0, 1.0, (k,), np.float32),
                             gym.spaces.MultiDiscrete([3] * k))
            self.pos = walk.random_positions(o.n_episodes)
            self.t = np.zeros(o.n_episodes, dtype=np.int64)
            self.actions: np.ndarray | None = None

        def reset(self) -> np.ndarray:
            self.pos = walk.random_positions(self.num_envs)
            self.t[:] = 0
            return self.pos.astype(np.float32) / scale

        def step_async(self, actions: np.ndarray) -> None:
            self.actions = actions

        def step_wait(self) -> Any:
            new = np.clip(self.pos + self.actions - 1, 0, walk.dims - 1)
            for row, idx in enumerate(walk.indices(new)):
                if not walk.is_valid_index(int(idx)):
                    new[row] = self.pos[row]
            reward = np.asarray(score(new), dtype=np.float32)
            self.t += 1
            settled = (new == self.pos).sum(axis=1) >= int(np.ceil(o.stay_fraction * k))
            done = (settled & (self.t >= o.min_steps)) | (self.t >= o.max_steps)
            self.pos = new
            infos = [{} for _ in range(self.num_envs)]
            if done.any():
                fresh = walk.random_positions(int(done.sum()))
                for j, row in enumerate(np.nonzero(done)[0]):
                    infos[row]["terminal_observation"] = self.pos[row].astype(np.float32) / scale
                    self.pos[row] = fresh[j]
                    self.t[row] = 0
            return self.pos.astype(np.float32) / scale, reward, done, infos

        def close(self) -> None:
            pass

        def get_attr(self, name: str, indices: Any = None) -> list:
            return [getattr(self, name)] * self.num_envs

        def set_attr(self, name: str, value: Any, indices: Any = None) -> None:
            setattr(self, name, value)

        def env_method(self, *args: Any, **kwargs: Any) -> list:
            return [None] * self.num_envs

        def env_is_wrapped(self, wrapper_class: Any, indices: Any = None) -> list[bool]:
            return [False] * self.num_envs

    torch.set_num_threads(1)  # as ours runs
    model = PPO("MlpPolicy", Walkers(), n_steps=steps, batch_size=256, n_epochs=o.epochs, learning_rate=o.lr,
                gamma=o.gamma, gae_lambda=o.gae_lambda, clip_range=o.clip, vf_coef=o.value_coef,
                ent_coef=o.entropy_coef, policy_kwargs={"net_arch": {"pi": [o.hidden, o.hidden],
                                                                     "vf": [o.hidden, o.hidden]}},
                device="cpu", seed=0, verbose=0)
    times, scoring = [], []
    for i in range(iterations + 1):
        score.seconds = 0.0
        t0 = time.perf_counter()
        model.learn(total_timesteps=steps * o.n_episodes, reset_num_timesteps=False)
        if i:
            times.append(time.perf_counter() - t0)
            scoring.append(score.seconds)
    return {"seconds": statistics.median(times), "scoring_s": statistics.median(scoring),
            "transitions": steps * o.n_episodes}


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study ppo-overhead", description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="C6", help="a resnet18_conv2d workload of bench/workloads.json")
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--out", default="bench/results/ppo_overhead")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    from tensortune.models.layout import blocked_workload
    from tensortune.target import host_target_json
    from tensortune.task import Task

    from .common import load_workloads

    found = {name: (op, shape) for _, name, op, shape in load_workloads(["resnet18_conv2d"])}
    if a.workload not in found:
        raise SystemExit(f"unknown workload {a.workload!r}; known: {', '.join(found)}")
    op, args = blocked_workload(*found[a.workload], host_target_json())
    task = Task.from_op(op, args)
    print(f"{a.workload}: {op}, {len(task.space):,} configs, {len(task.space.dims)} knobs", flush=True)
    score = Timed(scorer(task))
    ours = run_ours(task, score, a.iterations)
    print(f"tensortune PPO: {ours['seconds']:.2f} s per iteration ({ours['transitions']} transitions, "
          f"scoring {ours['scoring_s']:.2f} s)", flush=True)
    steps = max(1, round(ours["transitions"] / 128))
    try:
        sb3 = run_sb3(task, score, a.iterations, steps)
        print(f"stable-baselines3 PPO: {sb3['seconds']:.2f} s per iteration ({sb3['transitions']} transitions, "
              f"scoring {sb3['scoring_s']:.2f} s)", flush=True)
    except ImportError as e:
        sb3 = {"error": f"stable-baselines3 is not installed ({e}); make bench-ppo installs it"}
        print(sb3["error"], file=sys.stderr)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"machine": machine_info(), "workload": a.workload, "op": op, "space": len(task.space),
              "iterations": a.iterations, "tensortune": ours, "stable_baselines3": sb3}
    (out / "ppo_overhead.json").write_text(json.dumps(result, indent=1))
    ratio = f"{sb3['seconds'] / ours['seconds']:.1f}x" if "seconds" in sb3 else "-"
    write_text(out / "ppo_overhead.md", "\n".join([
        "# PPO explorer: tensortune's compact PPO against stable-baselines3", "",
        f"{machine_line(result['machine'])}; workload {a.workload} ({op}, {len(task.space):,} configs); "
        f"median of {a.iterations} iterations after a warm-up.", "",
        "| agent | s per iteration | transitions | scoring s |", "|---|---:|---:|---:|",
        f"| tensortune | {ours['seconds']:.2f} | {ours['transitions']} | {ours['scoring_s']:.2f} |",
        f"| stable-baselines3 | {sb3.get('seconds', float('nan')):.2f} | {sb3.get('transitions', '-')} | "
        f"{sb3.get('scoring_s', float('nan')):.2f} |", "", f"stable-baselines3 / tensortune: {ratio}", ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
