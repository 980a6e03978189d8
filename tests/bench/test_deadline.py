"""``python -m bench run --stop-after``: an invocation ends between steps, never inside one, and
the same command goes on; whole-model systems given as tuner specs with options, and a model
that gains a system in a later invocation."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.suite import cli, ops, wholemodel  # noqa: E402
from bench.suite.deadline import Deadline  # noqa: E402
from bench.suite.store import RunDir  # noqa: E402


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_step_starts_only_when_its_estimate_fits_and_a_refusal_is_final(capsys: pytest.CaptureFixture) -> None:
    clock = Clock()
    d = Deadline(10.0, clock)  # 600 s
    assert Deadline(None).allows("anything", 1e9) and Deadline(None).left_s() == float("inf")
    assert d.allows("C1 autotvm", 500.0) and d.allows("C1 oneshot", None)
    clock.t += 200.0
    assert not d.allows("C2 autotvm", 500.0)  # 400 s left
    assert d.stopped == "C2 autotvm" and "stopping before C2 autotvm (it takes about 8 min) with 7 min left" \
        in capsys.readouterr().out
    assert not d.allows("C2 oneshot", 1.0)  # a later, shorter step does not jump the queue
    clock.t += 1000.0
    late = Deadline(1.0, clock)  # a deadline counts from when it is made
    assert late.allows("at once", 59.0)
    clock.t += 61.0
    assert not late.allows("after the end", None)  # an unknown estimate needs some time left


def test_a_whole_model_system_estimate_follows_its_budget_or_its_earlier_walls() -> None:
    saved = {"resnet18": {"systems": {"oneshot": {"ok": True, "wall_s": 400.0},
                                      "autotvm": {"ok": True, "wall_s": 3650.0},
                                      "fasor": {"ok": False, "wall_s": 5.0}}}}
    assert wholemodel.system_estimate_s(saved, "oneshot", 3600.0) == 1200.0  # 3x its earlier wall
    assert wholemodel.system_estimate_s(saved, "autotvm", 3600.0) == pytest.approx(1.02 * 3600 + 120)
    assert wholemodel.system_estimate_s(saved, "fasor", 3600.0) == pytest.approx(1.02 * 3600 + 120)  # failed: no wall
    assert wholemodel.system_estimate_s({}, "metaschedule", 100.0) == pytest.approx(1.15 * 100 + 600)


def test_a_model_tuner_with_options_runs_as_tune_with_tuner_options(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
        seen.append(cmd)
        out = {"wall_s": 1.0, "tasks": [{"trials": 3}], "tasks_measured": 1, "measure": "cold"}
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(out) + "\n")

    monkeypatch.setattr(wholemodel.subprocess, "run", fake_run)
    db = wholemodel._db_path(tmp_path, "resnet18", "fasor:mode=quality")
    assert db.name == "resnet18-fasor_mode_quality.db"
    Path(f"{db}-wal").write_text("a journal an interrupted attempt left")
    r = wholemodel.tune_tensortune("resnet18", "fasor:mode=quality", 60.0, 0, db, tmp_path / "log")
    assert r["ok"] and r["trials"] == 3 and not Path(f"{db}-wal").exists()
    kept = json.loads(wholemodel.tune_json_path(db).read_text())  # the whole tune --json, beside the database
    assert kept["tasks"] == [{"trials": 3}] and kept["measure"] == "cold"
    cmd = seen[0]
    assert cmd[cmd.index("--tuner") + 1] == "fasor" and cmd[cmd.index("--option") + 1] == "mode=quality"
    with pytest.raises(SystemExit, match="unknown option 'nope'"):
        cli.check(cli.settings(cli.parser().parse_args(["run", "--model-tuners", "fasor:nope=1"])))
    cli.check(cli.settings(cli.parser().parse_args(["run", "--model-tuners", "fasor:mode=quality,oneshot"])))


@pytest.mark.slow  # end to end: a suite run stopped and resumed
def test_an_operator_run_stops_before_a_step_that_does_not_fit_and_resumes(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    wl = tmp_path / "workloads.json"
    wl.write_text(json.dumps({"square_matmul": {"MMT": {"M": 64, "N": 64, "K": 64}}}))
    monkeypatch.setenv("TENSORTUNE_WORKLOADS", str(wl))
    clock = Clock()
    monkeypatch.setattr(cli, "Deadline", lambda minutes: Deadline(minutes, clock))
    real, ran = ops.run_tensortune, []

    def timed(tuner: str, *a: Any, **k: Any) -> Any:
        ran.append(tuner)
        clock.t += 100.0  # each tuner takes 100 s of the test's clock
        return real(tuner, *a, **k)

    monkeypatch.setattr(ops, "run_tensortune", timed)
    out = tmp_path / "results"
    args = ["run", "--suite", "ops", "--tuners", "random,genetic", "--budget", "2", "--workloads", "MMT",
            "--rounds", "1", "--no-library", "--out", str(out), "--no-progress"]
    # 240 s: both tuners start (their times are not known yet), the final 120 s do not fit in 40
    assert cli.main([*args, "--stop-after", "4"]) == 0
    run = RunDir(out)
    assert ran == ["random", "genetic"] and not run.ops_summary()
    assert run.tuner_done("MMT", "random") and run.tuner_done("MMT", "genetic")
    assert cli.main(args) == 0  # the same command without a limit: only the final measurements
    assert ran == ["random", "genetic"] and run.ops_summary()["MMT"]["tuners"]["genetic"]["verified"]
    with pytest.raises(SystemExit, match="--stop-after must be positive"):
        cli.main([*args, "--stop-after", "0"])


def test_a_model_that_gains_a_system_is_tuned_for_it_and_benchmarked_again(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuning, compiling and timing are stand-ins: what is checked is which systems are tuned,
    which are compiled, and that the benchmark covers every system the model has."""
    import tensortune.database as database
    import tensortune.models.comparison as mbench
    import tensortune.models.compile as mcompile
    import tensortune.models.importer as importer
    from bench.suite import metaschedule as msa

    tuned: list[str] = []
    benched: list[list[str]] = []

    def fake_tune(name: str, tuner: str, budget_s: float, seed: int, db: Path, log: Path) -> dict[str, Any]:
        tuned.append(tuner)
        db.write_text("db")
        return {"ok": True, "wall_s": 1.0, "tune_wall_s": 1.0}

    def fake_ms(model: Any, budget_s: float, seed: int, options: Any, work_dir: Path, batch: int) -> Any:
        tuned.append("metaschedule")
        work_dir.mkdir()
        return {"ok": True, "wall_s": 1.0, "tune_wall_s": 1.0}, "ms-executable"

    class Report:
        def __init__(self, names: list[str]) -> None:
            self.names = names

        def table(self) -> str:
            return ""

        def to_json(self) -> dict[str, Any]:
            return {"rows": [{"name": n} for n in self.names]}

    def fake_bench(model: Any, db: Any, rounds: int, tuned: Any, extra: dict[str, Any]) -> Report:
        benched.append([tuned] + list(extra))
        return Report(["tensortune tuned", *extra])

    class NoDb:
        def __init__(self, *a: Any, **k: Any) -> None:
            pass

        def __enter__(self) -> "NoDb":
            return self

        def __exit__(self, *a: Any) -> None:
            pass

    monkeypatch.setattr(wholemodel, "tune_tensortune", fake_tune)
    monkeypatch.setattr(wholemodel, "tune_metaschedule", fake_ms)
    monkeypatch.setattr(mbench, "bench_model", fake_bench)
    monkeypatch.setattr(mcompile, "compile_model", lambda model, db, tj: "compiled")
    monkeypatch.setattr(mcompile, "CompiledModel", lambda model, ex, tasks, tj: ex)
    monkeypatch.setattr(importer, "load_model", lambda name: SimpleNamespace(mod=None))
    monkeypatch.setattr(database, "Database", NoDb)
    monkeypatch.setattr(msa, "load_relax_db", lambda d: "kept-ms-db")
    monkeypatch.setattr(msa, "compile_model", lambda db, mod, target: "ms-from-kept-db")
    run = RunDir(tmp_path)
    run.create()
    run.invocation = 0
    wholemodel.run_models(run, ["m"], ["autotvm", "metaschedule"], 1.0, 0, 1)
    assert tuned == ["autotvm", "metaschedule"] and benched == [["compiled", "metaschedule"]]
    run.invocation = 1  # a later invocation adds a tuner: only it is tuned, and every system is timed again
    wholemodel.run_models(run, ["m"], ["autotvm", "chameleon", "metaschedule"], 1.0, 0, 1)
    assert tuned == ["autotvm", "metaschedule", "chameleon"]
    assert benched[1] == ["compiled", "tensortune chameleon", "metaschedule"]
    m = run.read_json("models")["m"]
    assert [r["name"] for r in m["bench"]["rows"]] == ["tensortune autotvm", "tensortune chameleon", "metaschedule"]
    assert m["run"] == 1 and m["systems"]["autotvm"]["run"] == 0 and m["systems"]["chameleon"]["run"] == 1
    wholemodel.run_models(run, ["m"], ["autotvm"], 1.0, 0, 1)  # nothing new: nothing is done
    assert len(tuned) == 3 and len(benched) == 2
    # a system dropped (after a fix in its tuner) is tuned again, and the model benchmarked anew
    db = wholemodel._db_path(tmp_path / "models", "m", "autotvm")
    assert db.exists()
    assert cli.main(["drop", str(tmp_path), "m:autotvm", "--why", "a fix in autotvm"]) == 0
    m = run.read_json("models")["m"]
    assert not db.exists() and "autotvm" not in m["systems"] and "bench" not in m
    assert m["dropped"][0]["tuner"] == "autotvm" and m["dropped"][0]["result"]["run"] == 0
    assert [r["name"] for r in m["dropped"][0]["bench"]["rows"]] == ["tensortune autotvm", "tensortune chameleon",
                                                                      "metaschedule"]  # the benchmark kept with it
    run.invocation = 2
    wholemodel.run_models(run, ["m"], ["autotvm", "chameleon", "metaschedule"], 1.0, 0, 1)
    assert tuned[3:] == ["autotvm"] and len(benched) == 3
    assert run.read_json("models")["m"]["systems"]["autotvm"]["run"] == 2
    with pytest.raises(SystemExit, match=r"no system m:nope to drop \(systems: m:"):
        cli.main(["drop", str(tmp_path), "m:nope", "--why", "x"])
    # a checkout without two systems' stored state (a database, MetaSchedule's folder): when the
    # model is benchmarked again, a listed one is tuned again, and one not listed is dropped
    wholemodel._db_path(tmp_path / "models", "m", "chameleon").unlink()
    shutil.rmtree(tmp_path / "models" / "m-metaschedule")
    run.invocation = 3
    wholemodel.run_models(run, ["m"], ["autotvm", "chameleon", "fasor"], 1.0, 0, 1)
    assert tuned[4:] == ["chameleon", "fasor"] and benched[-1] == ["compiled", "tensortune chameleon",
                                                                   "tensortune fasor"]
    m = run.read_json("models")["m"]
    assert sorted(m["systems"]) == ["autotvm", "chameleon", "fasor"]
    gone = {d["tuner"]: d["why"] for d in m["dropped"][1:]}
    assert sorted(gone) == ["chameleon", "metaschedule"] and "m-metaschedule was missing" in gone["metaschedule"]


def test_models_json_keeps_the_checks_paired_verdict_where_there_is_one() -> None:
    out = {"changed": 2, "tasks": [{}, {}, {}], "latency_ms": {"untuned": 4.0, "tuned": 3.9, "confirmed": 3.8},
           "kept": "confirmed", "wall_s": 30.0}
    assert "paired_ratio" not in wholemodel._confirm_summary(out)  # a check from before the paired verdict
    got = wholemodel._confirm_summary({**out, "paired_ratio": 0.97})
    assert got == {"changed": 2, "tasks": 3, "latency_ms": out["latency_ms"], "kept": "confirmed", "paired_ratio": 0.97}
