"""The benchmark studies: ``python -m bench run --study NAME [ARGS]``, each a registered spec.

The suite (``python -m bench run`` without ``--study``: operator workloads, whole models, the
machine's peak) is the harness's own study; every other study is a module of ``bench/`` with a
``parser()`` (its own arguments: ``python -m bench run --study NAME --help``) and a
``main(argv)``, run in this process. Where a study writes a results folder, the invocation
(date, machine, commit, library versions, arguments, exit status, wall time) is appended to
that folder's ``meta.json`` under ``"studies"`` through the suite's store, as the suite's own
invocations are under ``"runs"``; a study that measures (``measures``) needs a quiet machine.
"""
from __future__ import annotations

import argparse
import importlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Study:
    """A study by name: its module under ``bench/``, a line on what it shows, and whether it
    measures (times or tunes anything) or only reads results folders."""

    name: str
    module: str
    summary: str
    measures: bool


STUDIES: dict[str, Study] = {s.name: s for s in (
    Study("chameleon", "bench.chameleon", "Chameleon's tables and figures from operator-suite folders", False),
    Study("trimmer", "bench.trimmer", "Trimmer's cold-candidate filter on whole models", True),
    Study("survey", "bench.survey", "survey tuning against sequential tuning", True),
    Study("race", "bench.race_study", "the race of (model, tuner) pairs with and without suspension", True),
    Study("predictors", "bench.predictors", "predictor accuracy and One-Shot's dataset ablation", False),
    Study("payback", "bench.payback", "One-Shot's one-time cost and after how many compilations it pays back", False),
    Study("fasor-ablation", "bench.fasor_ablation", "Fasor's ablations (Fig. 8) from an operator-suite folder", False),
    Study("fasor-accuracy", "bench.fasor_accuracy", "Fasor's cost-model accuracy before and after transfer", True),
    Study("versus", "bench.versus", "one tuner against a baseline in an operator-suite folder", False),
    Study("corpus", "bench.corpus", "Hugging Face models nobody here wrote, against the CPU runtimes", True),
    Study("ppo-overhead", "bench.ppo_overhead", "the PPO explorer's cost against stable-baselines3", True),
    Study("rpc-scaling", "bench.rpc_scaling", "parallel RPC measurement against the number of (simulated) devices", True),
    Study("placement", "bench.placement", "one speed per model in every process: TVM's threads placed or not", True),
    Study("hostpair", "bench.hostpair", "a model against OpenVINO as shipped, split by the host's near and far cores", True),
    Study("hostile", "bench.hostile", "bad inputs and faults against the command line, as a user runs it", False),
)}


def results_folder(args: argparse.Namespace) -> Path | None:
    """The folder a study's parsed arguments write to (``--out``, else its ``results``), if any."""
    out = getattr(args, "out", None) or getattr(args, "results", None)
    if isinstance(out, list):
        out = out[0] if len(out) == 1 else None
    return Path(out) if out else None


def _invocation(study: Study, argv: list[str]) -> dict[str, Any]:
    from tensortune.target import machine_id

    from .suite.provenance import LIBRARIES, git_state

    commit, dirty = git_state()
    try:
        from .common import machine_info

        info = machine_info()
    except ImportError:  # a study that reads results needs no TVM here
        info = {}
    return {"study": study.name, "argv": list(argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": machine_id(), "commit": commit, "dirty": dirty,
            "libraries": {k: info.get(k) for k in LIBRARIES}, "measures": study.measures}


def _record(folder: Path, entry: dict[str, Any]) -> None:
    """Append ``entry`` to ``folder/meta.json``'s ``studies`` (atomically; the folder is made)."""
    from .suite.store import RunDir

    run = RunDir(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = run.read_json("meta", {}) or {}
    meta.setdefault("studies", []).append(entry)
    run.write_json("meta", meta)


def run_study(name: str, argv: list[str]) -> int:
    """Run study ``name`` with its own arguments ``argv`` in this process; its exit status."""
    if name not in STUDIES:
        raise SystemExit(f"unknown study {name!r}; known: {', '.join(STUDIES)} (python -m bench studies)")
    study = STUDIES[name]
    module = importlib.import_module(study.module)
    args = module.parser().parse_args(argv)  # bad arguments: the study's one-line usage error, exit 2
    folder = results_folder(args)
    entry = _invocation(study, argv)
    t0 = time.perf_counter()
    rc: int | None = 1
    try:
        rc = module.main(argv)
    finally:
        if folder is not None and folder.is_dir():
            _record(folder, {**entry, "exit": rc or 0, "wall_s": round(time.perf_counter() - t0, 1)})
    return int(rc or 0)


def listing() -> str:
    """The studies, a line each."""
    width = max(len(n) for n in STUDIES)
    return "\n".join(f"{s.name:<{width}}  {'measures' if s.measures else 'reads   '}  {s.summary}"
                     for s in STUDIES.values())


__all__ = ["STUDIES", "Study", "listing", "results_folder", "run_study"]
