"""Shared helpers of the benchmark scripts: workloads, machine description, saving results."""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

#: workloads.json group -> tensortune op
GROUP_OPS = {
    "resnet18_conv2d": "conv2d",
    "mobilenet_v2_depthwise": "depthwise_conv2d",
    "bert_base_dense": "dense",
    "bert_base_batch_matmul": "batch_matmul",
    "square_matmul": "matmul",
}


def workloads_path() -> Path:
    """``$TENSORTUNE_WORKLOADS`` or ``shared/bench/workloads.json`` beside (or inside) the checkout."""
    env = os.environ.get("TENSORTUNE_WORKLOADS")
    for p in ([Path(env)] if env else []) + [ROOT.parent / "shared/bench/workloads.json", ROOT / "shared/bench/workloads.json"]:
        if p.is_file():
            return p
    raise SystemExit("workloads.json not found: set TENSORTUNE_WORKLOADS")


def load_workloads(groups: list[str]) -> list[tuple[str, str, str, dict[str, int]]]:
    """``(group, name, op, shape)`` for each workload of the chosen groups."""
    data = json.loads(workloads_path().read_text())
    out = []
    for g in groups:
        if g not in GROUP_OPS:
            raise SystemExit(f"unknown workload group {g!r}; known: {', '.join(GROUP_OPS)}")
        for name, shape in data[g].items():
            out.append((g, name, GROUP_OPS[g], dict(shape)))
    return out


def machine_info() -> dict[str, Any]:
    """CPU, thread count and library versions recorded with every result."""
    import numpy
    import tvm

    from tensortune.target import cpu_count, host_target_json

    info: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "python": platform.python_version(),
                            "tvm": tvm.__version__, "numpy": numpy.__version__, "cpus": cpu_count(),
                            "target": host_target_json()}
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


def save_json(name: str, payload: dict[str, Any]) -> Path:
    """Write ``bench/results/NAME.json``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1))
    return path
