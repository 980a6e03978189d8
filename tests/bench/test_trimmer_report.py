"""bench.trimmer: the cold and failed candidates' share of a tuning database's time."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuners"))
from synthetic import FakeMeasurer, conv_landscape  # noqa: E402

from bench.trimmer import cold_shares  # noqa: E402


def _random_run(path: Path) -> list:
    """64 random trials of a synthetic conv2d landscape, some failing, timed 0.5 s + 0.25 s each,
    into a database at ``path``; returns them in trial order."""
    from tensortune.database import Database
    from tensortune.task import Task
    from tensortune.tuners import get_tuner

    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1),
                        target={"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2})

    class Timed(FakeMeasurer):
        def measure(self, inputs, on_result=None):
            def timed(inp, r):
                r.build_time, r.run_time = 0.5, 0.25
                r.build_cpu, r.run_cpu = 0.4, 0.2
                if on_result is not None:
                    on_result(inp, r)
            return super().measure(inputs, timed)

    fails = lambda c: c["auto_unroll_max_step"] == 0 and c["unroll_explicit"] == 1  # noqa: E731
    with Database(path) as db:
        get_tuner("random", task, seed=0).tune(64, Timed(conv_landscape, fails), database=db)
        return sorted((t for t in db.trials(task.workload_key) if t.confirmation is None), key=lambda t: t.id)


def test_cold_shares_count_failures_and_slow_trials(tmp_path) -> None:
    from tensortune.select.cold import cold_mask

    trials = _random_run(tmp_path / "d.db")
    s = cold_shares(tmp_path / "d.db")
    cold = cold_mask([t.cost for t in trials])
    assert s["trials"] == 64 and s["failed"] == sum(not t.ok for t in trials) > 0
    assert s["cold"] + s["failed"] == int(cold.sum())
    assert abs(s["cold_share_wall"] - cold.mean()) < 1e-9 and abs(s["cold_share_cpu"] - cold.mean()) < 1e-9


def test_systems_are_read_from_a_suite_folder_without_tuning(tmp_path) -> None:
    import json

    import pytest

    from bench.trimmer import main

    suite = tmp_path / "suite"
    (suite / "models").mkdir(parents=True)
    _random_run(suite / "models" / "m-autotvm.db")
    (suite / "meta.json").write_text(json.dumps({"machine": {"machine_id": {"cpu_model": "AMD EPYC", "llvm_cpu": "znver3",
                                                                            "cores": 2}}}))
    lat = lambda ms: {"median_ms": ms, "p25_ms": ms, "p75_ms": ms}  # noqa: E731
    (suite / "models.json").write_text(json.dumps({"m": {
        "budget_s": 3600.0,
        "systems": {"autotvm": {"ok": True, "tune_wall_s": 3600.0, "cpu_s": 7200.0}},  # tuned before tune.json was kept
        "bench": {"rows": [{"name": "tensortune autotvm", "outputs_match": True, "latency": lat(2.0)},
                           {"name": "tensortune untuned", "outputs_match": True, "latency": lat(5.0)}]}}}))
    out = tmp_path / "out"
    assert main(["--suite", str(suite), "--models", "m", "--tuners", "autotvm", "--out", str(out)]) == 0
    res = json.loads((out / "trimmer.json").read_text())
    row = res["rows"][0]
    assert (row["tuned_ms"], row["untuned_ms"], row["gain_ms"]) == (2.0, 5.0, 3.0) and row["trials"] == 64
    assert row["wall_s_per_ms"] == 1200.0 and row["cpu_s_per_ms"] == 2400.0 and res["machine"]["machine_id"]["llvm_cpu"] == "znver3"
    assert "3600 s of tuning per model and tuner (the systems of the suite folder" in (out / "trimmer.md").read_text()
    with pytest.raises(SystemExit, match="no benchmarked trimmer system of m there; add it with"):
        main(["--suite", str(suite), "--models", "m", "--tuners", "trimmer", "--out", str(out)])
