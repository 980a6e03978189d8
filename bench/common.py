"""Shared helpers of the benchmark scripts: workloads, machine description, saving results.

Every result file (JSON, Markdown, CSV, PNG) is written atomically (:func:`write_text`,
:func:`save_figure`, :func:`save_json`): a run stopped mid-write leaves the old file or the new
one, never a truncated one.
"""
from __future__ import annotations

import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: workloads.json group -> tensortune op
GROUP_OPS = {
    "resnet18_conv2d": "conv2d",
    "mobilenet_v2_depthwise": "depthwise_conv2d",
    "bert_base_dense": "dense",
    "bert_base_batch_matmul": "batch_matmul",
    "square_matmul": "matmul",
    "odd_conv2d": "conv2d",
}


#: The benchmark workloads, kept in the repository.
WORKLOADS = ROOT / "bench" / "workloads.json"


def workloads_path() -> Path:
    """``$TENSORTUNE_WORKLOADS`` when set, else ``bench/workloads.json`` of the repository."""
    env = os.environ.get("TENSORTUNE_WORKLOADS")
    p = Path(env) if env else WORKLOADS
    if not p.is_file():
        raise SystemExit(f"workloads file {p} not found" + (" (from TENSORTUNE_WORKLOADS)" if env else ""))
    return p


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


def machine_line(info: dict[str, Any] | None = None) -> str:
    """``AMD EPYC (znver3, 2 cores)``: the machine of a result, for report headers."""
    mid = (info or machine_info()).get("machine_id", {})
    return f"{mid.get('cpu_model', '?')} ({mid.get('llvm_cpu', '?')}, {mid.get('cores', '?')} cores)"


def machine_info() -> dict[str, Any]:
    """CPU (``machine_id``: model, LLVM cpu, cores), thread count and library versions recorded with every result."""
    import numpy
    import tvm

    from tensortune.target import cpu_count, host_target_json, machine_id

    info: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "python": platform.python_version(),
                            "tvm": tvm.__version__, "numpy": numpy.__version__, "cpus": cpu_count(),
                            "target": host_target_json(), "machine_id": machine_id()}
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


def geomean(xs: list[float | None]) -> float | None:
    """Geometric mean of the positive, finite values of ``xs`` (None when there are none)."""
    ok = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in ok) / len(ok)) if ok else None


def gflops(flops: float, ms: float | None) -> float | None:
    """GFLOP/s of ``flops`` done in ``ms`` milliseconds (None without a time)."""
    return flops / (ms * 1e-3) / 1e9 if ms else None


def fmt(x: Any, spec: str = ".1f") -> str:
    """``x`` formatted for a table cell; "-" for a missing value (None or NaN)."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def remove_database(path: str | os.PathLike[str]) -> None:
    """Remove a SQLite database with its ``-wal`` and ``-shm`` files, or a folder of databases
    (what an interrupted run left: a new run must not inherit its trials or its journal)."""
    import shutil

    path = Path(path)
    if path.is_dir():
        shutil.rmtree(path)
    for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if f.is_file():
            f.unlink()


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write a result file (Markdown, CSV, JSON text) atomically."""
    from tensortune.utils.atomic import atomic_write

    return atomic_write(path, text)


def save_figure(fig: Any, path: str | os.PathLike[str], **savefig_kw: Any) -> Path:
    """Write a Matplotlib figure atomically (a temporary file renamed over ``path``)."""
    from tensortune.utils.atomic import atomic_path

    target = Path(path)
    with atomic_path(target, suffix=target.suffix) as tmp:
        fig.savefig(tmp, format=target.suffix.lstrip(".") or None, **savefig_kw)
    return target
