"""bench.versus: one tuner against a baseline from an operator-suite folder's summaries."""
from __future__ import annotations

import json

import pytest

from bench.suite.store import RunDir
from bench.versus import compare, main

FLOPS = 2e9  # 1 ms = 2,000 GFLOP/s


def _side(ms: float | None, wall: float, trials: int) -> dict:
    return {"median_ms": ms, "wall_s": wall, "trials": trials, "check": "ok" if ms else "wrong output"}


def _summaries() -> dict:
    lib = {"name": "pytorch", "median_ms": 1.25}
    return {
        "A": {"flops": FLOPS, "library": lib, "tuners": {"autotvm": _side(1.0, 600.0, 1000), "oneshot": _side(1.01, 50.0, 64)}},
        "B": {"flops": FLOPS, "library": lib, "tuners": {"autotvm": _side(1.0, 400.0, 1000), "oneshot": _side(1.05, 40.0, 64)}},
        "C": {"flops": FLOPS, "library": lib, "tuners": {"autotvm": _side(1.0, 300.0, 1000), "oneshot": _side(None, 30.0, 64)}},
        "D": {"flops": FLOPS, "library": lib, "tuners": {"autotvm": _side(1.0, 300.0, 1000)}},
    }


def test_ratios_targets_and_failed_checks() -> None:
    cmp = compare(_summaries(), "oneshot", "autotvm", within=0.02, less_wall=10.0)
    rows = cmp["workloads"]
    assert list(rows) == ["A", "B", "C"]  # D: the tuner did not run there
    assert rows["A"]["gflops_ratio"] == pytest.approx(1 / 1.01) and rows["A"]["wall_ratio"] == pytest.approx(12.0)
    assert rows["A"]["baseline_gflops"] == pytest.approx(2000.0) and rows["A"]["library_gflops"] == pytest.approx(1600.0)
    assert [rows[w]["met"] for w in "ABC"] == [True, False, False]  # B: 5% slower; C: its kernel failed the check
    assert rows["C"]["gflops_ratio"] is None and rows["C"]["tuner_gflops"] is None
    assert cmp["within_target"] == 1 and cmp["met"] == 1
    assert cmp["geomean_gflops_ratio"] == pytest.approx((1 / 1.01 / 1.05) ** 0.5)
    assert cmp["min_gflops_ratio"] == pytest.approx(1 / 1.05)
    assert cmp["geomean_wall_ratio"] == pytest.approx(10.0 * 12 ** (1 / 3) / 10 ** (1 / 3))
    assert cmp["total_wall_ratio"] == pytest.approx(1300 / 120)
    looser = compare(_summaries(), "oneshot", "autotvm", within=0.06, less_wall=10.0)
    assert looser["met"] == 2


def test_report_files_and_a_folder_without_the_pair(tmp_path, capsys) -> None:
    run = RunDir(tmp_path / "r").create()
    for w, s in _summaries().items():
        run.add_ops(w, [], s)
    assert main([str(run.path), "--tuner", "oneshot", "--baseline", "autotvm"]) == 0
    md = (run.path / "versus-oneshot-autotvm.md").read_text()
    assert "| A | 2000.0 | 1980.2 | 0.990 | 1600.0 (pytorch) | 1000 | 64 | 600.0 | 50.0 | 12.0x | yes |" in md
    assert "| C | 2000.0 | - | - |" in md and "both targets met on 1 of 3" in md
    saved = json.loads((run.path / "versus-oneshot-autotvm.json").read_text())
    assert saved["met"] == 1 and set(saved["workloads"]) == {"A", "B", "C"}
    assert main([str(run.path), "--tuner", "chameleon"]) == 1
    assert "no workload where both chameleon and autotvm ran" in capsys.readouterr().err
