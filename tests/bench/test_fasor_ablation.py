"""bench.fasor_ablation: each variant against the full Fasor from an operator-suite folder."""
from __future__ import annotations

import json

import pytest

from bench.fasor_ablation import FULL, label, main
from bench.suite.ops import Curve
from bench.suite.store import RunDir

NO_START = "fasor:mode=quality:start=false"


def curve(tuner: str, batches: list[tuple[int, float, float]]) -> Curve:
    """A tuner's batches: (trials so far, elapsed seconds, that batch's best ms)."""
    c = Curve(tuner)
    last = {"elapsed": 0.0, "build": 0.0, "run": 0.0}
    for trials, t, ms in batches:
        c.add(trials, t, ms * 1e-3, 8, 0, 0.3 * t, 0.5 * t, last)
    c.wall_s = batches[-1][1]
    return c


def add(run: RunDir, workload: str, curves: list[Curve], medians: dict[str, float]) -> None:
    flops = 2e8
    rows = [{"workload": workload, "group": "resnet18_conv2d", "op": "conv2d_nchwc", "seed": 0, "flops": flops, **r}
            for c in curves for r in c.rows]
    summary = {"group": "resnet18_conv2d", "op": "conv2d_nchwc", "flops": flops,
               "tuners": {c.tuner: {"trials": c.trials, "wall_s": c.wall_s, "split": c.totals(),
                                    "median_ms": medians[c.tuner], "check": "ok"} for c in curves}}
    run.add_ops(workload, rows, summary)


def test_time_to_the_same_latency_and_final_latency_against_the_full_system(tmp_path) -> None:
    run = RunDir(tmp_path / "r").create()
    full = curve(FULL, [(8, 1.0, 2.0), (16, 2.0, 1.0), (24, 3.0, 1.1)])
    slow = curve(NO_START, [(8, 2.0, 3.0), (16, 4.0, 1.5), (24, 6.0, 1.2), (32, 8.0, 1.3)])
    add(run, "C1", [full, slow], {FULL: 1.0, NO_START: 1.2})
    add(run, "C2", [curve(FULL, [(8, 1.0, 2.0)])], {FULL: 2.0})  # the variant did not run there
    assert main([str(run.path)]) == 0
    out = json.loads((run.path / "fasor_ablation.json").read_text())
    v = out["variants"][NO_START]
    assert v["workloads"] == 1 and set(v["per_workload"]) == {"C1"}
    row = v["per_workload"]["C1"]
    # the worse best is the variant's 1.2 ms: the full system had it after 2 s / 16 trials, the variant after 6 s / 24
    assert row["target_ms"] == pytest.approx(1.2)
    assert (row["full_s"], row["variant_s"], row["full_trials"], row["variant_trials"]) == (2.0, 6.0, 16, 24)
    assert v["time_ratio"] == pytest.approx(3.0) and v["trials_ratio"] == pytest.approx(1.5)
    assert v["latency_ratio"] == pytest.approx(1.2) and v["wall_ratio"] == pytest.approx(8.0 / 3.0)
    md = (run.path / "fasor_ablation.md").read_text()
    assert "| start=false | 3.00x | 1.50x | 1.200x |" in md and f"## start=false (`{NO_START}`)" in md


def test_a_variant_is_named_by_what_it_changes() -> None:
    full = "fasor:mode=quality:model=runs/moved"
    assert label(f"{full}:n_p=5", full) == "n_p=5"
    assert label("fasor:mode=quality:model=shipped", full) == "model=shipped"
    assert label("fasor:mode=quality", full) == "model unset"
    assert label("autotvm", full) == "autotvm"


def test_a_folder_without_the_full_system_is_refused(tmp_path, capsys) -> None:
    run = RunDir(tmp_path / "r").create()
    add(run, "C1", [curve(NO_START, [(8, 1.0, 2.0)])], {NO_START: 2.0})
    assert main([str(run.path)]) == 1
    assert f"no {FULL} to compare against" in capsys.readouterr().err
    assert main([str(tmp_path / "empty")]) == 1
