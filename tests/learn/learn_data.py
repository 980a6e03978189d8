"""A synthetic training file: labels a known smooth function of the knob columns, per task."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tensortune.features.loop_ast import CURVE_DIM


def write_training(path: Path, n_tasks: int = 8, rows: int = 60, seed: int = 0, op: str = "conv2d") -> Path:
    """``path`` (.npz + .json) with ``n_tasks`` tasks of ``rows`` rows each."""
    rng = np.random.default_rng(seed)
    proj = rng.normal(size=(6, CURVE_DIM)) * (rng.random((6, CURVE_DIM)) < 0.05)
    curve, knob, task, label, tidx = [], [], [], [], []
    for t in range(n_tasks):
        k = rng.integers(0, 8, size=(rows, 6)).astype(np.float32)
        speed = np.exp(-0.3 * (k[:, 0] - 4) ** 2 - 0.2 * (k[:, 1] - 2) ** 2) + 0.05 * k[:, 2]
        c = (np.log2(1 + k) @ proj).astype(np.float32)  # like real curve features: a function of the schedule
        curve.append(c)
        knob.append(k)
        task.append(np.tile(np.array([t, 2 * t, 3.0], dtype=np.float32), (rows, 1)))
        label.append((speed / speed.max()).astype(np.float32))
        tidx += [t] * rows
    np.savez(path, curve=np.concatenate(curve), knob=np.concatenate(knob), task=np.concatenate(task),
             label=np.concatenate(label), task_index=np.array(tidx, dtype=np.int32),
             machine_index=np.zeros(len(tidx), dtype=np.int32))
    summary = {"op": op, "samples": len(tidx), "task_features": ["a", "b", "c"],
               "tasks": [{"name": f"t{t}", "args": {"t": t}, "best_s": 1e-4 * (1 + t)} for t in range(n_tasks)],
               "machines": [{"cpu_model": "Test CPU", "target": json.dumps({"kind": "llvm", "mcpu": "znver4"}),
                             "threads": 2, "timing": "{}"}], "dropped": 0, "max_slowdown": 20.0}
    Path(str(path) + ".json").write_text(json.dumps(summary))
    return path
