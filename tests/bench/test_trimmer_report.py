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
    (per,) = s["tasks"].values()  # the one task's own counts
    assert (per["trials"], per["cold"], per["failed"]) == (64, s["cold"], s["failed"])


def test_per_task_table_sets_each_tuner_beside_the_other() -> None:
    from bench.trimmer import filtered_per_task, per_task_tables

    run = {"tasks": [{"workload_key": "k1", "search": {"cold_filter": {"k1": {"checked": 9, "filtered": 4, "calls": 2}}}},
                     {"workload_key": "k2", "search": {"cold_filter": {}}}]}  # the filter was off there
    assert filtered_per_task(run) == {"k1": 4} and filtered_per_task({"tasks": [{"search": {}}]}) == {}
    rows = [{"model": "m", "tuner": "autotvm",
             "tasks": {"k1": {"task": "conv(a)", "trials": 10, "cold": 3, "failed": 1},
                       "k2": {"task": "dense(b)", "trials": 5, "cold": 2, "failed": 0}}},
            {"model": "m", "tuner": "trimmer",
             "tasks": {"k1": {"task": "conv(a)", "trials": 8, "cold": 1, "failed": 0, "filtered": 4}}}]
    lines = per_task_tables(rows)
    assert "| task | autotvm: trials | cold | failed | filtered | trimmer: trials | cold | failed | filtered |" in lines
    assert "| conv(a) | 10 | 3 | 1 | - | 8 | 1 | 0 | 4 |" in lines
    assert "| dense(b) | 5 | 2 | 0 | - | - | - | - | - |" in lines


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


def test_systems_are_read_from_a_finished_race_folder(tmp_path) -> None:
    """``--race``: each tuner's run to completion, its cost the model's rounds summed, its
    latencies the race's final benchmark, its filter drops as the race recorded them."""
    import json

    import pytest

    from bench.trimmer import main

    race = tmp_path / "race"
    (race / "all").mkdir(parents=True)
    (race / "race-all").mkdir()
    _random_run(race / "all" / "m-trimmer.db")
    _random_run(race / "all" / "m-autotvm.db")
    (race / "meta.json").write_text(json.dumps({"machine": {"cpu_model": "Intel Xeon", "llvm_cpu": "rocketlake", "cores": 2},
                                                "settings": {"models": ["m"], "rounds": 2, "batch": 32}}))
    rounds = [{"round": 1, "wall_s": 100.0, "cpu_s": 150.0}, {"round": 2, "wall_s": 200.0, "cpu_s": 450.0}]
    for tuner, filtered in (("trimmer", 7), ("autotvm", None)):
        (race / "race-all" / f"{tuner}.json").write_text(json.dumps({"entries": [
            {"model": "m", "tuner": tuner, "rounds": rounds, "cpu_s": 450.0, "trials": 64, "filtered": filtered}]}))
    with pytest.raises(SystemExit, match="no finished race with trimmer to completion there"):
        main(["--race", str(race), "--models", "m", "--tuners", "trimmer", "--out", str(tmp_path / "o")])
    (race / "final.json").write_text(json.dumps({"m": {
        "all trimmer": {"ms": 2.0, "ok": True}, "all autotvm": {"ms": 2.5, "ok": False},
        "suspend trimmer": {"ms": 1.0, "ok": True}, "tensortune untuned": {"ms": 5.0, "ok": True}}}))
    out = tmp_path / "out"
    assert main(["--race", str(race), "--models", "m", "--tuners", "trimmer,autotvm", "--out", str(out)]) == 0
    res = json.loads((out / "trimmer.json").read_text())
    trimmer, autotvm = res["rows"]
    assert (trimmer["tuned_ms"], trimmer["untuned_ms"], trimmer["gain_ms"], trimmer["filtered"]) == (2.0, 5.0, 3.0, 7)
    assert trimmer["tune_wall_s"] == 300.0 and trimmer["wall_s_per_ms"] == 100.0 and trimmer["cpu_s_per_ms"] == 150.0
    assert trimmer["trials"] == 64 and res["machine"]["machine_id"]["llvm_cpu"] == "rocketlake"
    # a final model whose outputs did not match has no latency, so no cost per ms
    assert autotvm["tuned_ms"] is None and autotvm["wall_s_per_ms"] is None and autotvm["filtered"] is None
    md = (out / "trimmer.md").read_text()
    assert "2 survey rounds of 32 measurements per task (the race to completion in" in md
    with pytest.raises(SystemExit, match="no m with chameleon"):
        (race / "race-all" / "chameleon.json").write_text(json.dumps({"entries": []}))
        main(["--race", str(race), "--models", "m", "--tuners", "chameleon", "--out", str(out)])
    with pytest.raises(SystemExit):
        main(["--race", str(race), "--suite", str(race), "--out", str(out)])


def test_filtered_count_is_none_without_the_filter_and_sums_its_reports() -> None:
    from bench.trimmer import filtered_count

    def task(key: str, search: dict) -> dict:
        return {"workload_key": key, "search": search}

    plain = {"tasks": [task("a", {"explorer": "sa"}), task("b", {"explorer": "sa"})]}
    assert filtered_count(plain) is None and filtered_count({}) is None
    with_filter = {"tasks": [task("a", {"cold_filter": {"a": {"checked": 40, "filtered": 7}}}),
                             task("b", {"cold_filter": {"b": {"checked": 0, "filtered": 0}}}),
                             task("c", {"cold_filter": None})]}  # the filter off on c: its network not yet fitted
    assert filtered_count(with_filter) == 7
