"""Tests of the ``tensortune`` command line: argument errors, tune-op, best, export/import, resume."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tensortune.cli import main
from tensortune.database import Database
from tensortune.task import Task

SCRIPT = Path(sys.executable).parent / "tensortune"
#: Short timings (the defaults take 0.2 s a candidate): these tests check the command line, not speed.
FAST = ["--repeat", "3", "--min-repeat-ms", "5"]
TUNE = ["tune-op", "matmul", "--shape", "32,48,64", "--tuner", "random", "--trials", "4", *FAST]
SUMMARY_KEYS = {"task", "best_config", "best_latency_ms", "best_gflops", "trials_measured", "errors"}


def cli(capfd, *args: str) -> tuple[int, str, str]:
    """Run ``tensortune args`` in-process; return (status, stdout, stderr) at file-descriptor level."""
    rc = main(list(args))
    out, err = capfd.readouterr()
    return rc, out, err


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with a digest of its content ("dir" for folders)."""
    return {str(p.relative_to(folder)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))}


def one_json_line(out: str):
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    return json.loads(lines[0])


# ---------------------------------------------------------------- bad arguments
def tune(shape: str = "32,48,64", tuner: str = "random", trials: str = "4", db: str = "x.db") -> list[str]:
    return ["tune-op", "matmul", f"--shape={shape}", "--tuner", tuner, f"--trials={trials}", "--db", db, *FAST]


BAD_ARGS = {
    "unknown op": ["tune-op", "nope", "--shape", "1,2,3", "--trials", "4", "--db", "x.db"],
    "unknown tuner": tune(tuner="annealing"),
    "too few shape values": tune(shape="32,48"),
    "too many shape values": tune(shape="32,48,64,2"),
    "zero size": tune(shape="0,48,64"),
    "negative size": tune(shape="32,-48,64"),
    "non-integer shape": tune(shape="32,x,64"),
    "fractional shape": tune(shape="32,4.5,64"),
    "empty shape": tune(shape=""),
    "negative padding": ["tune-op", "conv2d", "--shape=8,8,4,4,3,1,-1", "--trials", "4", "--db", "x.db"],
    "kernel larger than input": ["tune-op", "conv2d", "--shape", "4,4,2,2,7,1,1", "--trials", "4", "--db", "x.db"],
    "zero trials": tune(trials="0"),
    "negative trials": tune(trials="-2"),
    "non-integer trials": tune(trials="many"),
    "db in a missing folder": tune(db="missing/x.db"),
    "model option for a plain tuner": tune() + ["--no-transfer"],
    "unknown cost model": tune(tuner="autotvm") + ["--cost-model", "svm"],
    "unknown feature kind": tune(tuner="autotvm") + ["--feature", "pixels"],
    "unknown objective": tune(tuner="autotvm") + ["--objective", "lambdamart"],
    "unknown tuner option": tune(tuner="autotvm") + ["--option", "plan_sise=32"],
    "tuner option without a value": tune(tuner="autotvm") + ["--option", "plan_size"],
    "tuner option of the wrong type": tune(tuner="autotvm") + ["--option", "plan_size=many"],
    "tuner option out of range": tune(tuner="autotvm") + ["--option", "epsilon=2"],
    "unknown explorer": tune(tuner="autotvm") + ["--option", "explorer=ppo9"],
    "unknown explorer option": tune(tuner="autotvm") + ["-O", "explorer.chains=3"],
    "unknown cost model option": tune(tuner="autotvm") + ["-O", "cost_model.depth=3"],
    "option of another tuner": tune(tuner="genetic") + ["-O", "plan_size=32"],
    "model tuning with an unknown option": ["tune", "resnet18", "--db", "x.db", "--trials", "4",
                                            "-O", "nope=1"],
    "db is a directory": tune(db="adir"),
    "db is a text file": tune(db="notes.txt"),
    "no command": [],
    "unknown command": ["frobnicate"],
    "best on a missing db": ["db", "best", "--db", "x.db"],
    "best on a text file": ["db", "best", "--db", "notes.txt"],
    "export from a missing db": ["db", "export", "--db", "x.db", "-o", "out.jsonl"],
    "import a missing file": ["db", "import", "--db", "x.db", "nothere.jsonl"],
}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("my notes, not a database\n")
    (tmp_path / "adir").mkdir()
    return tmp_path


@pytest.mark.parametrize("case", sorted(BAD_ARGS))
def test_bad_arguments_one_line_no_file(case: str, workdir: Path, capfd) -> None:
    before = snapshot(workdir)
    rc, out, err = cli(capfd, *BAD_ARGS[case])
    assert rc != 0
    assert out == ""
    assert len(err.splitlines()) == 1 and err.endswith("\n"), err
    assert err.startswith("tensortune: error: ")
    assert snapshot(workdir) == before  # nothing created, nothing touched


def test_bad_arguments_console_script(workdir: Path) -> None:
    before = snapshot(workdir)
    p = subprocess.run([str(SCRIPT), *tune(shape="32,48")], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert p.stdout == ""
    assert len(p.stderr.splitlines()) == 1 and "3 shape values" in p.stderr
    assert snapshot(workdir) == before


def test_malformed_import_creates_no_database(workdir: Path, capfd) -> None:
    (workdir / "bad.jsonl").write_text('{"kind": "bogus"}\n')
    before = snapshot(workdir)
    rc, out, err = cli(capfd, "db", "import", "--db", "new.db", "bad.jsonl")
    assert rc != 0 and len(err.splitlines()) == 1 and "line 1" in err
    assert snapshot(workdir) == before


# ---------------------------------------------------------------- a real tuning run
@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> tuple[Path, dict]:
    """``tensortune tune-op ... --json`` once, through the console script."""
    db = tmp_path_factory.mktemp("cli") / "tune.db"
    p = subprocess.run([str(SCRIPT), *TUNE, "--db", str(db), "--json"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return db, one_json_line(p.stdout)


def test_tune_op_json_summary(tuned) -> None:
    db, summary = tuned
    task = Task.from_op("matmul", (32, 48, 64))
    assert isinstance(summary, dict) and SUMMARY_KEYS <= set(summary)
    assert summary["trials_measured"] == 4
    assert summary["task"] == task.name
    assert isinstance(summary["errors"], dict)
    assert summary["best_latency_ms"] > 0
    assert summary["best_gflops"] == pytest.approx(task.flops / (summary["best_latency_ms"] / 1e3) / 1e9)
    cfg = task.space.config_from_json({"knobs": summary["best_config"]})
    assert task.space.is_valid(cfg)
    with Database(db, readonly=True) as d:
        trials = [t for t in d.trials(task.workload_key) if t.confirmation is None]
        assert len(trials) == 4 and len({t.config_index for t in trials}) == 4
        assert cfg.index in {t.config_index for t in trials}
        # then its top 3 were measured again, 3 rounds each, and stored marked as confirmations, with
        # the template default beside them where its first timing left it out of the top 3
        from tensortune.database import top_configs

        group = set(top_configs(trials, 3)) | {task.default_config().index}
        # (once more after a quiet spell, where a config was timed while the machine was busy in every round)
        from tensortune.tuners.session import CONFIRM_RETRIES

        assert summary["confirm_measured"] == d.count(confirmations=True) - d.count()
        assert summary["confirm_measured"] in [3 * len(group) * (1 + r) for r in range(1 + CONFIRM_RETRIES)]


def test_best_json(tuned, capfd) -> None:
    db, summary = tuned
    rc, out, _ = cli(capfd, "db", "best", "--db", str(db), "--json")
    assert rc == 0
    rows = one_json_line(out)
    assert isinstance(rows, list) and len(rows) == 1
    row = rows[0]
    assert row["workload_key"] == Task.from_op("matmul", (32, 48, 64)).workload_key
    assert row["best_config"] == summary["best_config"]
    assert row["best_latency_ms"] == pytest.approx(summary["best_latency_ms"])
    assert row["best_gflops"] == pytest.approx(summary["best_gflops"])
    assert row["trials"] == 4 and row["tuner"] == "random"


def test_best_names_task_like_tune_op(tuned, capfd) -> None:
    db, summary = tuned
    _, out, _ = cli(capfd, "db", "best", "--db", str(db), "--json")
    assert one_json_line(out)[0]["task"] == summary["task"]


def test_best_text_and_empty_db(tuned, tmp_path: Path, capfd) -> None:
    db, _ = tuned
    rc, out, _ = cli(capfd, "db", "best", "--db", str(db))
    assert rc == 0 and "GFLOPS" in out and "4 trials" in out
    Database(tmp_path / "empty.db").close()
    rc, out, _ = cli(capfd, "db", "best", "--db", str(tmp_path / "empty.db"), "--json")
    assert rc == 0 and json.loads(out) == []


def test_export_then_import(tuned, tmp_path: Path, capfd) -> None:
    db, summary = tuned
    conf = summary["confirm_measured"]  # 9 or 12 (see test_tune_op_json_summary)
    dump = tmp_path / "dump.jsonl"
    rc, _, err = cli(capfd, "db", "export", "--db", str(db), "-o", str(dump))
    assert rc == 0 and f"exported {1 + 4 + conf} records" in err  # the task, 4 trials and the confirmations
    lines = [json.loads(ln) for ln in dump.read_text().splitlines()]
    assert [ln["kind"] for ln in lines] == ["task"] + ["trial"] * (4 + conf)
    assert sum("confirm" in ln["extra"] for ln in lines[1:]) == conf

    fresh = tmp_path / "fresh.db"
    rc, out, _ = cli(capfd, "db", "import", "--db", str(fresh), str(dump))
    assert rc == 0 and f"imported 1 tasks and {4 + conf} trials" in out
    with Database(db, readonly=True) as a, Database(fresh, readonly=True) as b:
        assert b.count() == a.count() == 4 and b.count(confirmations=True) == 4 + conf
        key = a.tasks()[0].workload_key
        assert sorted(t.config_index for t in b.trials(key)) == sorted(t.config_index for t in a.trials(key))
        assert b.best(key).config_index == a.best(key).config_index

    rc, out, err = cli(capfd, "db", "import", "--db", str(fresh), str(dump))  # again: nothing new, said so
    assert rc == 1 and "nothing was added" in err and f"already stored: 1 tasks and {4 + conf} trials" in err
    rc, out, _ = cli(capfd, "db", "import", "--db", str(fresh), str(dump), "--allow-empty")
    assert rc == 0 and "imported 0 tasks and 0 trials" in out
    with Database(fresh, readonly=True) as b:
        assert b.count() == 4


def test_export_to_stdout(tuned, capfd) -> None:
    db, summary = tuned
    conf = summary["confirm_measured"]
    rc, out, err = cli(capfd, "db", "export", "--db", str(db))
    assert rc == 0
    assert [json.loads(ln)["kind"] for ln in out.splitlines()] == ["task"] + ["trial"] * (4 + conf)
    assert err.strip() == f"exported {1 + 4 + conf} records"


def test_rerun_resumes_without_measuring(tuned, capfd) -> None:
    db, summary = tuned
    rc, out, _ = cli(capfd, *TUNE, "--db", str(db), "--json")
    assert rc == 0
    again = one_json_line(out)
    assert again["trials_measured"] == 0
    assert again["best_config"] == summary["best_config"]
    assert again["best_latency_ms"] == pytest.approx(summary["best_latency_ms"])
    with Database(db, readonly=True) as d:
        assert d.count() == 4


def test_autotvm_from_the_cli_with_and_without_transfer(tmp_path: Path, capfd) -> None:
    """``--tuner autotvm`` tunes; with other tasks' records in the database, ``--no-transfer``
    keeps them out and the default reports that there are too few of them."""
    db = str(tmp_path / "a.db")
    base = ["tune-op", "matmul", "--shape", "32,48,64", "--tuner", "autotvm", "--trials", "4", *FAST, "--db", db, "--json"]
    rc, out, _ = cli(capfd, *base)
    first = one_json_line(out)
    assert rc == 0 and first["trials_measured"] == 4 and first["verified"]
    assert first["tuner_status"].startswith("xgb/rank/itervar, no transfer (0 successful records")
    other = ["tune-op", "matmul", "--shape", "48,32,64", "--tuner", "autotvm", "--trials", "2", *FAST, "--db", db, "--json"]
    rc, out, _ = cli(capfd, *other, "--no-transfer")
    assert rc == 0 and one_json_line(out)["tuner_status"] == "xgb/rank/itervar, no transfer"
    rc, out, _ = cli(capfd, *other[:-1], "--trials", "3", "--transfer", "--json")
    status = one_json_line(out)["tuner_status"]
    assert rc == 0 and status.startswith("xgb/rank/itervar, no transfer (")
    assert "need 64" in status  # 4 + 2 records are too little history: a notice, not an error


def test_tuner_options_reach_the_tuner(workdir: Path, capfd) -> None:
    """``--option`` settings (and the old flags, their shortcuts) are the tuner's options."""
    rc, out, _ = cli(capfd, *tune(tuner="autotvm", trials="6"), "--json", "--no-transfer", "-O", "plan_size=4",
                     "-O", "explorer=random", "-O", "explorer.pool=64", "-O", "selector=top-k", "--feature", "knob")
    assert rc == 0 and one_json_line(out)["trials_measured"] == 6
    rc, out, err = cli(capfd, *tune(tuner="genetic", trials="4", db="g.db"), "-O", "pop_size=4", "--json")
    assert rc == 0 and one_json_line(out)["trials_measured"] == 4, err


def test_help_imports_no_heavy_library() -> None:
    """``tensortune --help`` loads neither PyTorch, XGBoost, Ray, ONNX nor TVM's compiler."""
    code = ("import sys, contextlib, io\n"
            "from tensortune.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: main(['tune', '--help'])\n"
            "    except SystemExit: pass\n"
            "print(sorted(m for m in ('torch', 'xgboost', 'ray', 'onnx', 'onnxruntime', 'tvm', 'sklearn') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_third_party_warnings_are_quiet_ours_are_not() -> None:
    import warnings

    from tensortune.utils.quiet import quiet_third_party_warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_third_party_warnings()
        for module in ("copyreg", "torch.utils._pytree", "xgboost.core"):
            warnings.warn_explicit("isinstance(treespec, LeafSpec) is deprecated", FutureWarning, "x.py", 1, module=module)
        warnings.warn_explicit("a model input was renamed", UserWarning, "x.py", 1, module="torch.onnx")
        warnings.warn_explicit("ours", FutureWarning, "x.py", 1, module="tensortune.models.importer")
    assert sorted(str(w.message) for w in seen) == ["a model input was renamed", "ours"]


def test_fasor_show_names_each_shipped_model_with_its_machine_and_command(capfd, tmp_path, monkeypatch) -> None:
    from tensortune.costmodel.fasor import FASOR_SHIPPED
    from tensortune.costmodel.pretrained import available_ops

    monkeypatch.setenv("TENSORTUNE_CACHE", str(tmp_path))
    rc, out, _ = cli(capfd, "fasor", "show")
    assert rc == 0
    lines = out.splitlines()
    for op in available_ops(FASOR_SHIPPED):
        line = next(x for x in lines if x.strip().startswith(op + ":"))
        assert "tasks" in line and "held-out R^2" in line and "znver" in line
    assert any("made by: tensortune fasor pretrain" in x for x in lines)
