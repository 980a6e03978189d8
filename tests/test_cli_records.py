"""The command line never loses or poisons a database: exports and compiles never overwrite one,
imports are validated line by line, and a reported best says where it came from and how it
was measured (only like with like is compared)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tensortune.cli import main
from tensortune.database import Database, TrialRecord
from tensortune.measure import MeasureOptions
from tensortune.task import Task

SHAPE = (32, 48, 64)
#: Short timings (the defaults take 0.2 s a candidate), stored as the trials' timing.
TIMING = MeasureOptions(repeat=3, min_repeat_ms=5)
TUNE = ["tune-op", "matmul", "--shape", ",".join(map(str, SHAPE)), "--tuner", "random", "--trials", "4", "--json",
        "--repeat", str(TIMING.repeat), "--min-repeat-ms", str(TIMING.min_repeat_ms), "--no-progress"]


def cli(capfd, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capfd.readouterr()
    return rc, out, err


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory) -> Path:
    """A database with 4 random-search trials of a small matmul (hot timing, short)."""
    db = tmp_path_factory.mktemp("records") / "runs.db"
    assert main([*TUNE, "--db", str(db)]) == 0
    return db


@pytest.fixture
def db_copy(tuned_db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "runs.db"
    with Database(tuned_db, readonly=True) as src, Database(copy) as dst:
        for t in src.tasks():
            dst.add_task(t)
        for t in src.trials():
            t.id = None
            dst.add_trial(t)
    return copy


# ---------------------------------------------------------------- export and compile outputs
def test_export_onto_the_database_is_refused_and_loses_nothing(db_copy: Path, capfd) -> None:
    before = digest(db_copy)
    for force in ([], ["--force"]):
        rc, _, err = cli(capfd, "db", "export", "--db", str(db_copy), "-o", str(db_copy), *force)
        assert rc == 2 and "database itself" in err and err.count("\n") == 1
    assert digest(db_copy) == before
    with Database(db_copy, readonly=True) as db:
        assert db.count() == 4


def test_export_refuses_other_databases_and_existing_files_unless_forced(db_copy: Path, tmp_path: Path, capfd) -> None:
    other = tmp_path / "other.db"
    Database(other).close()
    rc, _, err = cli(capfd, "db", "export", "--db", str(db_copy), "-o", str(other), "--force")
    assert rc == 2 and "SQLite file" in err
    notes = tmp_path / "notes.jsonl"
    notes.write_text("keep me\n")
    rc, _, err = cli(capfd, "db", "export", "--db", str(db_copy), "-o", str(notes))
    assert rc == 2 and "--force" in err and notes.read_text() == "keep me\n"
    rc, _, err = cli(capfd, "db", "export", "--db", str(db_copy), "-o", str(notes), "--force")
    with Database(db_copy, readonly=True) as d:
        conf = d.count(confirmations=True) - d.count()
    assert conf in (9, 12)  # the top 3 in 3 rounds, and the default beside them where it is not among them
    assert rc == 0 and [json.loads(ln)["kind"] for ln in notes.read_text().splitlines()] == ["task"] + ["trial"] * (4 + conf)
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]  # no temporary file left behind


def test_compile_refuses_to_write_over_a_database(db_copy: Path, capfd) -> None:
    before = digest(db_copy)
    rc, _, err = cli(capfd, "compile", "resnet18", "--db", str(db_copy), "-o", str(db_copy), "--force")
    assert rc == 2 and "database itself" in err
    assert digest(db_copy) == before


# ---------------------------------------------------------------- imports
def exported(db: Path, tmp_path: Path) -> list[dict]:
    dump = tmp_path / "dump.jsonl"
    assert main(["db", "export", "--db", str(db), "-o", str(dump)]) == 0
    return [json.loads(ln) for ln in dump.read_text().splitlines()]


@pytest.mark.parametrize("edit, words", [
    ({"config_index": 10 ** 9}, "outside the task's space"),
    ({"config": {"bogus": 1}}, "does not match config_index"),
    ({"costs": [0.0]}, "costs"),
    ({"error": "exploded"}, "unknown error kind"),
])
def test_import_names_the_bad_line_and_writes_nothing(db_copy: Path, tmp_path: Path, capfd, edit, words) -> None:
    lines = exported(db_copy, tmp_path)
    lines[3].update(edit)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    fresh = tmp_path / "fresh.db"
    capfd.readouterr()
    rc, _, err = cli(capfd, "db", "import", "--db", str(fresh), str(bad))
    assert rc == 2 and "line 4:" in err and words in err and err.count("\n") == 1
    assert not fresh.exists() or Database(fresh, readonly=True).count() == 0


# ---------------------------------------------------------------- where a best comes from
def test_a_rerun_reports_the_stored_best_and_how_it_was_measured(db_copy: Path, capfd) -> None:
    key = Task.from_op("matmul", SHAPE).workload_key
    with Database(db_copy) as db:
        hot_best = db.best(key)
        stored = db.trials(key)
        # a faster trial measured cold (another timing mode) and a faster unverified import
        cold = TrialRecord(**{**hot_best.to_json(), "id": None, "config_index": stored[0].config_index,
                              "costs": [hot_best.cost / 10], "timing": MeasureOptions.flushed().timing_key(),
                              "timestamp": 1.0})
        unverified = TrialRecord(**{**hot_best.to_json(), "id": None, "costs": [hot_best.cost / 20],
                                    "verified": False, "timestamp": 2.0})
        db.add_trial(cold)
        db.add_trial(unverified)
    rc, out, _ = cli(capfd, *TUNE, "--db", str(db_copy))
    summary = json.loads(out)
    assert rc == 0 and summary["trials_measured"] == 0
    assert summary["best_latency_ms"] == pytest.approx(hot_best.cost * 1e3)
    assert summary["best_source"] == {"from": "database", "trial_id": hot_best.id, "tuner": "random",
                                      "timestamp": hot_best.timestamp}
    measured = summary["measured"]
    assert measured["timing"]["mode"] == "hot" and measured["timing"] == json.loads(TIMING.timing_key())
    assert measured["threads"] == hot_best.threads and measured["cpu_model"] == hot_best.cpu_model != ""

    rc, out, _ = cli(capfd, "db", "best", "--db", str(db_copy), "--json")
    rows = json.loads(out)  # one row per context: hot and cold are never compared
    assert sorted(r["measured"]["timing"]["mode"] for r in rows) == ["cold", "hot"]
    assert {r["trial_id"] for r in rows} == {hot_best.id, cold.id}
    assert unverified.id not in {r["trial_id"] for r in rows}
