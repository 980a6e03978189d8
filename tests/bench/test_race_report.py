"""``python -m bench run --study race``: a stopped race folder goes on only on the same kind of machine
with the same settings."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench.race_study as race
import tensortune.target as target
from tensortune.cluster.race import db_slug

HERE = {"cpu_model": "AMD EPYC", "llvm_cpu": "znver4", "cores": 2}
SETTINGS = {"models": ["mobilenet_v2"], "tuners": "trimmer,autotvm", "rounds": 8, "batch": 64}


@pytest.fixture
def machine(monkeypatch):
    here = dict(HERE)
    monkeypatch.setattr(target, "machine_id", lambda: dict(here))
    return here


def test_the_first_start_records_the_folder_and_the_same_start_goes_on(tmp_path, machine) -> None:
    assert race.check_folder(tmp_path, SETTINGS) is None
    kept = json.loads((tmp_path / "meta.json").read_text())
    assert kept == {"machine": HERE, "settings": SETTINGS}
    assert race.check_folder(tmp_path, dict(SETTINGS)) is None


def test_another_kind_of_machine_or_other_settings_are_refused(tmp_path, machine) -> None:
    race.check_folder(tmp_path, SETTINGS)
    why = race.check_folder(tmp_path, {**SETTINGS, "rounds": 4})
    assert why and "rounds=8" in why and "--out" in why
    machine["llvm_cpu"] = "znver5"
    why = race.check_folder(tmp_path, SETTINGS)
    assert why and "znver4" in why and "znver5" in why
    (tmp_path / "meta.json").write_text("[1, 2]")
    assert "not a race folder" in race.check_folder(tmp_path, SETTINGS)


def test_a_refused_folder_runs_nothing_and_exits_2(tmp_path, machine, monkeypatch, capsys) -> None:
    args = ["--models", "mobilenet_v2", "--tuners", "trimmer,autotvm", "--out", str(tmp_path)]
    race.check_folder(tmp_path, {**SETTINGS, "rounds": 3})
    monkeypatch.setattr(race, "run_json", lambda *a, **k: pytest.fail("a refused folder must not race"))
    assert race.main(args) == 2
    assert "rounds=3" in capsys.readouterr().err


def _output(tuners: list[str], cpu: float, wall: float, suspend: bool, energy=None) -> dict:
    entries = [{"model": "mobilenet_v2", "tuner": t, "status": "done", "rounds": [{}, {}], "trials": 128,
                "final_latency_ms": 2.0 + i, "cpu_s": cpu / len(tuners), "energy_j": energy} for i, t in enumerate(tuners)]
    return {"entries": entries, "wall_s": wall, "cpu_s": cpu, "energy_j": energy, "suspend": suspend, "batch": 64}


@pytest.fixture
def fake_race(monkeypatch):
    """``run_json`` faked: each part's output is written to its kept file, as the real one does."""
    class Calls(list):
        finals: list

    calls = Calls()

    def run_json(cmd, keep, fresh=()):
        if keep.exists():
            return json.loads(keep.read_text())
        calls.append((cmd, keep, list(fresh)))
        tuners = cmd[cmd.index("--tuners") + 1].split(",")
        out = _output(tuners, 100.0 * len(tuners), 60.0 * len(tuners), "--no-suspend" not in cmd)
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text(json.dumps(out))
        db_dir = Path(cmd[cmd.index("--db-dir") + 1])
        db_dir.mkdir(parents=True, exist_ok=True)
        for t in tuners:  # each pair's database, as the race leaves it
            (db_dir / f"{db_slug('mobilenet_v2', t)}.db").write_text("")
        return out

    def final_benchmark(runs, models, out):
        finals.append(models)
        rows = {"tensortune untuned": {"ms": 4.0, "ok": True, "check": "ok"}}
        for mode, r in runs.items():
            for i, e in enumerate(r["entries"]):  # the final benchmark's figures, not the races' own
                rows[race.system_name(mode, e["tuner"])] = {"ms": 1.0 + i + (mode == "suspend"), "ok": True, "check": "ok"}
        if "all trimmer" in rows and "suspend trimmer" in rows:  # the pairs' in-model checks
            rows["all trimmer"]["in_model"] = {"latency_ms": {"tuned": 3.0, "untuned": 4.0, "confirmed": 2.5},
                                               "changed": 2, "kept": "confirmed", "wall_s": 30.0}
            rows["suspend trimmer"]["in_model"] = {"skipped": "failed: no reference"}
        return {"mobilenet_v2": rows}

    finals: list = []
    monkeypatch.setattr(race, "run_json", run_json)
    monkeypatch.setattr(race, "final_benchmark", final_benchmark)
    calls.finals = finals
    return calls


def test_the_race_to_completion_runs_one_tuner_at_a_time_and_sums_their_costs(tmp_path, machine, fake_race,
                                                                             capsys) -> None:
    assert race.main(["--tuners", "trimmer,chameleon:variant=ppo-greedy", "--out", str(tmp_path)]) == 0
    cmds = [c for c, _, _ in fake_race]
    assert [c[c.index("--tuners") + 1] for c in cmds] == ["trimmer,chameleon:variant=ppo-greedy", "trimmer",
                                                          "chameleon:variant=ppo-greedy"]
    assert "--no-suspend" not in cmds[0] and all("--no-suspend" in c for c in cmds[1:])
    # each part of the race to completion drops only its own databases on a fresh start
    assert fake_race[2][2] == [tmp_path / "all" / "mobilenet_v2-chameleon_variant_ppo-greedy.db"]
    assert (tmp_path / "race-all" / "chameleon_variant_ppo-greedy.json").exists()
    result = json.loads((tmp_path / "race.json").read_text())
    assert result["runs"]["all"]["cpu_s"] == 200.0 and result["runs"]["all"]["wall_s"] == 120.0
    assert result["runs"]["all"]["energy_j"] is None and len(result["runs"]["all"]["entries"]) == 2
    assert result["cpu_saving"] == pytest.approx(0.0)
    text = (tmp_path / "race.md").read_text()
    assert "2 parts" in text and "| all | mobilenet_v2 | trimmer | done | 2 | 128 | 1.000 | 100 |" in text
    # the final latencies are the final benchmark's (kept), not each race's last-round timings
    assert result["best_ms"] == {"suspend": {"mobilenet_v2": 2.0}, "all": {"mobilenet_v2": 1.0}}
    assert "| all chameleon:variant=ppo-greedy | match | 2.000 | 2.00x |" in text
    assert "| all trimmer | 3.000 | 4.000 | 2.500 | 2 | confirmed | 30 |" in text  # its in-model check
    assert "| suspend trimmer | failed: no reference |" in text
    assert json.loads((tmp_path / "final.json").read_text()) == result["final"] and fake_race.finals == [["mobilenet_v2"]]
    assert race.main(["--tuners", "trimmer,chameleon:variant=ppo-greedy", "--out", str(tmp_path)]) == 0
    assert fake_race.finals == [["mobilenet_v2"]]  # read back, not benchmarked again
    (tmp_path / "all" / "mobilenet_v2-trimmer.db").unlink()  # a kept part whose database is gone runs again
    (tmp_path / "final.json").unlink()
    assert race.main(["--tuners", "trimmer,chameleon:variant=ppo-greedy", "--out", str(tmp_path)]) == 0
    assert [c[c.index("--tuners") + 1] for c, _, _ in fake_race][3:] == ["trimmer"]
    assert (tmp_path / "race-all" / "trimmer.json.lost").exists() and (tmp_path / "all" / "mobilenet_v2-trimmer.db").exists()


def test_stop_after_stops_before_a_part_that_does_not_fit_and_the_same_command_goes_on(tmp_path, machine,
                                                                                      fake_race) -> None:
    args = ["--tuners", "trimmer,autotvm", "--out", str(tmp_path)]
    (tmp_path / "race-suspend.json").write_text(json.dumps(_output(["trimmer", "autotvm"], 150.0, 3000.0, True)))
    (tmp_path / "suspend").mkdir()
    for t in ("trimmer", "autotvm"):  # the kept part's databases
        (tmp_path / "suspend" / f"{db_slug('mobilenet_v2', t)}.db").write_text("")
    # a part of the race to completion is estimated at 50 min with none kept: 30 min is too little
    assert race.main([*args, "--stop-after", "30"]) == 0
    assert fake_race == [] and not (tmp_path / "race.md").exists()
    assert race.main([*args, "--stop-after", "55"]) == 0  # one part fits; then its 60 s is the estimate
    assert len(fake_race) == 2 and (tmp_path / "race.md").exists()
    assert race.main([*args, "--stop-after", "1"]) == 0  # everything kept: nothing runs again
    assert len(fake_race) == 2
    (tmp_path / "final.json").unlink()  # both races kept, the final benchmark not yet: it needs 15 min
    (tmp_path / "race.md").unlink()
    assert race.main([*args, "--stop-after", "10"]) == 0
    assert fake_race.finals == [["mobilenet_v2"]] and not (tmp_path / "race.md").exists()
    assert race.main([*args, "--stop-after", "16"]) == 0
    assert fake_race.finals == [["mobilenet_v2"]] * 2 and (tmp_path / "race.md").exists() and len(fake_race) == 2


def test_parts_and_estimates() -> None:
    rows = race.parts(Path("R"), ["mobilenet_v2", "m.onnx"], ["autotvm"])
    assert rows[0] == ("suspend", "", Path("R/race-suspend.json"), [Path("R/suspend")])
    assert rows[1] == ("all", "autotvm", Path("R/race-all/autotvm.json"),
                       [Path("R/all/mobilenet_v2-autotvm.db"), Path("R/all/m-autotvm.db")])
    assert race.estimate_s("all", [], 1, 8, 64) == 50 * 60
    assert race.estimate_s("suspend", [], 2, 4, 64) == 105 * 60
    assert race.estimate_s("all", [{"wall_s": 10.0}, {"wall_s": 30.0}], 1, 8, 64) == 30.0
    both = race.combine([_output(["a"], 10.0, 5.0, False, energy=3.0), _output(["b"], 20.0, 5.0, False, energy=4.0)])
    assert both["energy_j"] == 7.0 and both["cpu_s"] == 30.0 and both["parts"] == 2


@pytest.mark.timeout(600)
@pytest.mark.slow  # end to end: the race's final benchmark
def test_the_final_benchmark_checks_and_times_every_raced_pair_together(tmp_path, monkeypatch) -> None:
    import sys

    import tensortune.models.in_model as in_model
    from tensortune.database import Database
    from tensortune.models.reference import export_onnx

    checked, real = [], in_model.check_in_model

    def check_in_model(model, db, *args, **kwargs):  # the real check, its database seen
        checked.append((Path(db.path).relative_to(tmp_path).as_posix(), db.readonly))
        return real(model, db, *args, **kwargs)

    monkeypatch.setattr(in_model, "check_in_model", check_in_model)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from tiny import tiny

    m, x = tiny()
    onnx = export_onnx(m, x, str(tmp_path / "tiny.onnx"))
    runs = {}
    for mode in ("suspend", "all"):
        db = tmp_path / mode / "tiny-random.db"
        db.parent.mkdir()
        Database(db).close()  # a race's database (no records: the model compiles untuned)
        runs[mode] = {"entries": [{"model": onnx, "tuner": "random", "db": "elsewhere/when/it/ran.db"},
                                  {"model": onnx, "tuner": "gone", "db": str(tmp_path / mode / "none.db")}]}
    rows = race.final_benchmark(runs, [onnx], tmp_path)[onnx]
    assert {"suspend random", "all random", "tensortune untuned", "onnxruntime"} <= set(rows)
    assert "tensortune tuned" not in rows and "suspend gone" not in rows  # no database: nothing to benchmark
    assert all(rows[k]["ok"] and rows[k]["ms"] > 0 for k in ("suspend random", "all random", "tensortune untuned"))
    # each pair's database had the in-model check first (writable: its verdict is stored), as `tune` ends
    assert checked == [("suspend/tiny-random.db", False), ("all/tiny-random.db", False)]
    assert rows["all random"]["in_model"]["model"] == "tiny" and "in_model" not in rows["onnxruntime"]

    def failing(model, db, *args, **kwargs):
        raise RuntimeError("no reference\nmore")

    monkeypatch.setattr(in_model, "check_in_model", failing)  # a failed check is a result: benchmarked all the same
    rows = race.final_benchmark(runs, [onnx], tmp_path)[onnx]
    assert rows["all random"]["in_model"] == {"skipped": "failed: no reference"} and rows["all random"]["ok"]
