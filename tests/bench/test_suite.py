"""The benchmark suite (``python -m bench``): its bookkeeping, and ``--quick``'s code paths on a tiny budget.

The benchmark itself never runs here; the end-to-end test runs every part (peak, operators with a
tensortune tuner and MetaSchedule, a whole model with both, the report) on a 64^3 matmul and a
tiny ONNX model with budgets of a few trials and seconds.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "models"))

from bench.suite import cli, report  # noqa: E402
from bench.suite.ops import Curve  # noqa: E402
from bench.suite.peak import roofline  # noqa: E402
from bench.suite.store import RunDir  # noqa: E402


def _row(tuner: str, batch: int, trials: int, t: float, best: float | None) -> dict:
    return {"workload": "W", "tuner": tuner, "batch": batch, "trials": trials, "elapsed_s": t, "best_ms": best,
            "flops": 1e9}


def test_time_to_quality_first_batch_within_target() -> None:
    work = {"a": [_row("a", 1, 8, 5.0, 2.0), _row("a", 2, 16, 9.0, 1.04), _row("a", 3, 24, 14.0, 1.0)],
            "b": [_row("b", 1, 8, 30.0, None), _row("b", 2, 16, 60.0, 1.5)]}
    best, per = report.time_to_quality(work, 0.95)
    assert best == 1.0
    assert per["a"] == {"seconds": 9.0, "trials": 16}  # 1.04 <= 1 / 0.95 = 1.0526
    assert per["b"] == {"seconds": None, "trials": None}


def test_curve_splits_wall_time_per_batch() -> None:
    c = Curve("random")
    last = {"elapsed": 0.0, "build": 0.0, "run": 0.0}
    c.add(4, 10.0, 0.002, 4, 0, 6.0, 3.0, last)  # 1 s of search
    c.add(8, 16.0, 0.003, 3, 1, 9.0, 5.0, last)  # 6 s: 3 build, 2 run, 1 search; the best stays 2 ms
    c.wall_s = 17.5
    assert [r["best_ms"] for r in c.rows] == [2.0, 2.0]
    assert [round(r["search_s"], 6) for r in c.rows] == [1.0, 1.0]
    assert c.errors == 1
    assert c.totals() == pytest.approx({"search_s": 2.0, "build_s": 9.0, "run_s": 5.0, "other_s": 1.5})


def test_rundir_replaces_a_workloads_rows(tmp_path: Path) -> None:
    run = RunDir(tmp_path).create()
    run.add_ops("C1", [{**_row("random", 1, 4, 1.5, 0.25), "best_ms": 0.25}], {"tuners": {}})
    run.add_ops("C2", [_row("random", 1, 4, 2.0, None)], {"tuners": {}})
    run.add_ops("C1", [_row("random", 1, 4, 1.0, 0.5), _row("random", 2, 8, 2.0, 0.4)], {"tuners": {"x": 1}})
    rows = run.ops_rows()
    assert [(r["workload"], r["batch"]) for r in rows] == [("C2", 1), ("C1", 1), ("C1", 2)]
    assert rows[0]["best_ms"] is None and rows[1]["best_ms"] == 0.5 and rows[1]["trials"] == 4
    assert run.ops_done() == {"C1", "C2"} and run.ops_summary()["C1"] == {"tuners": {"x": 1}}


def test_roofline_bounds() -> None:
    peak = {"peak_gflops": 200.0, "bandwidth_gbs": 20.0}
    assert roofline(50.0, 1.0, peak) == {"intensity": 1.0, "attainable_gflops": 20.0, "fraction": 2.5}
    assert roofline(100.0, 50.0, peak)["fraction"] == 0.5


def _workloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A workloads.json of one tiny matmul (the checkout may have no shared/ beside it)."""
    wl = tmp_path / "workloads.json"
    wl.write_text(json.dumps({"square_matmul": {"MMT": {"M": 64, "N": 64, "K": 64}}}))
    monkeypatch.setenv("TENSORTUNE_WORKLOADS", str(wl))


def test_bad_arguments_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _workloads(tmp_path, monkeypatch)
    with pytest.raises(SystemExit, match="unknown tuner"):
        cli.main(["run", "--tuners", "nope", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="unknown workload"):
        cli.main(["run", "--workloads", "C99", "--suite", "ops", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="no such results folder"):
        cli.main(["report", str(tmp_path / "missing")])


@pytest.mark.timeout(900)
def test_quick_code_paths_on_a_tiny_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tiny import tiny

    from tensortune.models.reference import export_onnx

    _workloads(tmp_path, monkeypatch)
    module, inputs = tiny()
    onnx = export_onnx(module, inputs, str(tmp_path / "tiny.onnx"))
    out = tmp_path / "results"
    assert cli.main(["run", "--quick", "--tuners", "random,metaschedule", "--budget", "2", "--workloads", "MMT",
                     "--models", onnx, "--model-tuners", "random,metaschedule", "--model-budget", "3",
                     "--ms-batch", "2", "--rounds", "1", "--out", str(out), "--no-progress"]) == 0
    run = RunDir(out)
    rows = run.ops_rows()
    assert {r["tuner"] for r in rows} == {"random", "metaschedule"}
    assert all(r["workload"] == "MMT" and r["trials"] <= 2 for r in rows)
    s = run.ops_summary()["MMT"]["tuners"]
    assert s["random"]["check"] == "ok" and s["random"]["median_ms"] > 0
    assert s["metaschedule"]["trials"] == 2  # whether its kernel is right is in its check, not assumed
    assert s["metaschedule"]["check"] == "ok" or s["metaschedule"]["median_ms"] is None
    assert run.read_json("peak")["peak_gflops"] > 0
    models = run.read_json("models")["tiny"]
    assert models["systems"]["random"]["ok"] and "metaschedule" in models["systems"]
    names = {r["name"]: r for r in models["bench"]["rows"]}
    assert {"tensortune random", "tensortune untuned", "onnxruntime"} <= set(names)
    assert names["tensortune random"]["outputs_match"]
    # a second run resumes: everything is done, nothing is measured again
    assert cli.main(["run", "--quick", "--suite", "ops,models", "--tuners", "random,metaschedule", "--budget", "2",
                     "--workloads", "MMT", "--models", onnx, "--out", str(out), "--no-progress"]) == 0
    assert len(run.ops_rows()) == len(rows)
    meta = run.read_json("meta")  # both invocations listed with their own settings and times
    assert [sorted(r["settings"]["suites"]) for r in meta["runs"]] == [["models", "ops", "peak"], ["models", "ops"]]
    assert meta["runs"][0]["wall_s"] > 0 and meta["wall_s"] == pytest.approx(sum(r["wall_s"] for r in meta["runs"]))
    ms = models["systems"]["metaschedule"]
    if ms["ok"]:  # MetaSchedule's per-task outcome is recorded, failed tasks named
        assert ms["candidates_per_round"] == 2 and ms["tasks_measured"] >= 1
        assert len(ms["tasks_without_valid"]) <= ms["tasks_measured"]
    assert cli.main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "## Operators" in md and "| MMT |" in md and "## Whole models" in md and "Energy:" in md
    for png in ("curves_time.png", "curves_trials.png", "ttq.png", "breakdown.png", "roofline.png", "models.png"):
        assert (out / png).stat().st_size > 1000, png
