"""Confirmation records: re-measurements of a task's top configs, marked in ``extra["confirm"]``;
``best`` takes the lowest median of the latest group, counts leave them out, exports keep them,
and version-2 files gain the ``extra`` column in place (or are read as they are)."""
from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from tensortune.database import (Database, ImportReport, MeasureContext, TaskRecord, TrialRecord, confirmed_best,
                                 export_jsonl, import_jsonl, top_configs)


def added(report: ImportReport) -> tuple[int, int]:
    """(tasks added, trials added) of an import."""
    return report.tasks_added, report.trials_added


KEY = "cd" * 10
HOT = json.dumps({"min_repeat_ms": 40, "mode": "hot", "number": 1, "repeat": 5}, sort_keys=True, separators=(",", ":"))
COLD = HOT.replace("hot", "cold")
TARGET = '{"kind":"llvm","mcpu":"znver4"}'
CONTEXT = MeasureContext(TARGET, 2, HOT, "AMD EPYC")


def task() -> TaskRecord:
    return TaskRecord(KEY, "matmul", "matmul", TARGET, 1e9, '{"op": "matmul"}', 1.0)


_clock = iter(range(1, 10_000))


def trial(index: int, cost: float | None, group: str | None = None, rnd: int = 1, of: int = 3,
          timing: str = HOT, verified: bool = True) -> TrialRecord:
    """A trial of config ``index`` (``cost`` None: a runtime error); with ``group``, a confirmation round."""
    extra = {"confirm": {"group": group, "round": rnd, "of": of}} if group else {}
    return TrialRecord(KEY, index, {"i": index}, [] if cost is None else [cost], "none" if cost else "runtime",
                       timestamp=float(next(_clock)), tuner="random", target=TARGET, threads=2, verified=verified,
                       timing=timing, cpu_model="AMD EPYC", extra=extra)


def add_group(db: Database, group: str, rounds: dict[int, list[float | None]]) -> None:
    """Store a confirmation group interleaved like a tuner does: round 1 of every config, then round 2, ..."""
    n = len(next(iter(rounds.values())))
    for r in range(n):
        for index, costs in rounds.items():
            db.add_trial(trial(index, costs[r], group, r + 1, n))


@pytest.fixture
def db(tmp_path: Path):
    with Database(tmp_path / "c.db") as d:
        d.add_task(task())
        yield d


def test_without_confirmations_the_fastest_trial_is_the_best(db: Database) -> None:
    for i, c in enumerate([2e-3, 0.5e-3, 1e-3]):
        db.add_trial(trial(i, c))
    assert db.best(KEY, CONTEXT).config_index == 1
    assert db.count(KEY) == db.count(KEY, confirmations=True) == 3


def test_a_lucky_trial_loses_to_the_lowest_median_of_the_confirmation(db: Database) -> None:
    db.add_trial(trial(0, 0.5e-3))  # one lucky measurement
    db.add_trial(trial(1, 1.0e-3))
    db.add_trial(trial(2, 3.0e-3))
    assert db.best(KEY, CONTEXT).config_index == 0
    # config 0 has the lowest single re-measurement too (0.4), but the higher median (2.0)
    add_group(db, "g1", {0: [0.4e-3, 2.0e-3, 2.1e-3], 1: [1.2e-3, 1.0e-3, 1.1e-3], 2: [3e-3, 3e-3, 3e-3]})
    best = db.best(KEY, CONTEXT)
    assert best.config_index == 1 and best.cost == pytest.approx(1.1e-3)  # the round whose cost is the median
    assert best.confirmation == {"group": "g1", "round": 3, "of": 3}
    assert db.best(KEY).config_index == 1  # without a context: the same records compete
    assert db.count(KEY) == 3 and db.count(KEY, confirmations=True) == 12 and db.count() == 3
    assert len(db.trials(KEY)) == 12  # every confirmation is stored and visible


def test_only_the_latest_group_counts(db: Database) -> None:
    db.add_trial(trial(0, 1e-3))
    add_group(db, "g1", {0: [1e-3] * 3, 1: [0.8e-3] * 3})
    add_group(db, "g2", {0: [1.5e-3] * 3, 2: [2e-3] * 3})  # config 1 is not in it: out of the choice
    best = db.best(KEY, CONTEXT)
    assert best.config_index == 0 and best.cost == pytest.approx(1.5e-3)
    assert best.confirmation["group"] == "g2"


def test_a_failed_round_drops_its_config_and_an_unverified_one_is_ignored(db: Database) -> None:
    add_group(db, "g1", {0: [1e-3, None, 1e-3], 1: [2e-3, 2e-3, 2e-3], 2: [3e-3] * 3})
    assert db.best(KEY, CONTEXT).config_index == 1  # config 0 failed once
    db.add_trial(trial(1, 0.1e-6, "g1", 3, 3, verified=False))  # never checked: no say in the median
    assert db.best(KEY, CONTEXT).cost == pytest.approx(2e-3)
    add_group(db, "g2", {0: [None] * 3})  # nothing of the latest group qualifies: the fastest trial
    assert db.best(KEY, CONTEXT).config_index == 0 and db.best(KEY, CONTEXT).cost == pytest.approx(1e-3)


def test_confirmations_of_another_context_do_not_change_this_one(db: Database) -> None:
    db.add_trial(trial(0, 1e-3))
    db.add_trial(trial(1, 2e-3))
    add_group(db, "cold", {1: [1e-3] * 3})
    for t in db.trials(KEY)[2:]:  # make that group a cold one
        db._con.execute("UPDATE trials SET timing = ? WHERE id = ?", (COLD, t.id))
    assert db.best(KEY, CONTEXT).config_index == 0
    assert db.best(KEY, CONTEXT._replace(timing=COLD)).config_index == 1


def test_even_rounds_take_the_lower_middle_and_candidates_rank_by_median() -> None:
    trials = [trial(5, 2e-3, "g", 1, 2), trial(6, 1.5e-3, "g", 1, 2), trial(5, 1e-3, "g", 2, 2),
              trial(6, 1.5e-3, "g", 2, 2)]
    best = confirmed_best(trials)
    assert best.config_index == 5 and best.cost == pytest.approx(1e-3)
    assert confirmed_best([trial(7, 1e-3), trial(8, 1e-3)]) is None  # no confirmation at all
    # the candidates: lowest median over every verified successful trial, confirmations included
    assert top_configs([trial(1, 3e-3), trial(2, 1e-3), trial(2, 9e-3), trial(2, 8e-3), trial(3, None),
                        trial(4, 2e-3)], 2) == [4, 1]


@pytest.mark.parametrize("mark, words", [({"round": 1, "of": 3}, "group"),
                                         ({"group": "g", "round": 0, "of": 3}, "round 0 of 3"),
                                         ({"group": "g", "round": 4, "of": 3}, "round 4 of 3"),
                                         ({"group": "g", "round": True, "of": 3}, "round True"),
                                         ("yes", "not an object")])
def test_a_bad_confirmation_mark_is_refused(db: Database, mark, words: str) -> None:
    t = trial(0, 1e-3)
    t.extra = {"confirm": mark}
    with pytest.raises(ValueError, match=words):
        db.add_trial(t)
    assert db.count(KEY, confirmations=True) == 0


def test_export_and_import_keep_the_marks_and_the_choice(db: Database, tmp_path: Path) -> None:
    db.add_trial(trial(0, 0.5e-3))
    db.add_trial(trial(1, 1e-3))
    add_group(db, "g1", {0: [2e-3] * 3, 1: [1e-3] * 3})
    stream = io.StringIO()
    assert export_jsonl(db, stream) == 1 + 8
    lines = [json.loads(ln) for ln in stream.getvalue().splitlines()]
    assert sum(ln.get("extra", {}).get("confirm") is not None for ln in lines) == 6
    with Database(tmp_path / "copy.db") as copy:
        assert added(import_jsonl(copy, io.StringIO(stream.getvalue()))) == (1, 8)
        assert copy.trials(KEY) == db.trials(KEY)
        assert copy.best(KEY, CONTEXT) == db.best(KEY, CONTEXT) and copy.best(KEY, CONTEXT).config_index == 1
    # a line written before trials had extra data imports as a plain trial
    old = {k: v for k, v in lines[1].items() if k != "extra"}
    with Database(tmp_path / "old.db") as copy:
        assert added(import_jsonl(copy, io.StringIO(json.dumps(lines[0]) + "\n" + json.dumps(old) + "\n"))) == (1, 1)
        assert copy.trials(KEY)[0].extra == {}


# ---------------------------------------------------------------- version 2 files
V2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tasks (workload_key TEXT PRIMARY KEY, op TEXT NOT NULL, kernel_class TEXT NOT NULL,
    target TEXT NOT NULL, flops REAL NOT NULL, task_json TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE trials (id INTEGER PRIMARY KEY, workload_key TEXT NOT NULL, config_index INTEGER NOT NULL,
    config TEXT NOT NULL, costs TEXT NOT NULL, error TEXT NOT NULL, error_msg TEXT NOT NULL,
    build_time REAL NOT NULL, run_time REAL NOT NULL, timestamp REAL NOT NULL, tuner TEXT NOT NULL,
    seed INTEGER, tvm_version TEXT NOT NULL, target TEXT NOT NULL, threads INTEGER NOT NULL,
    verified INTEGER NOT NULL, energy_j REAL, timing TEXT NOT NULL DEFAULT '',
    cpu_model TEXT NOT NULL DEFAULT '', cost REAL);
CREATE INDEX trials_by_task ON trials (workload_key, config_index);
CREATE INDEX trials_by_cost ON trials (workload_key, cost);
INSERT INTO meta VALUES ('application', 'tensortune'), ('schema_version', '2');
"""


def make_v2(path: Path) -> None:
    con = sqlite3.connect(path)
    con.executescript(V2)
    t = task()
    con.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
                (t.workload_key, t.op, t.kernel_class, t.target, t.flops, t.task_json, t.created))
    for k, cost in enumerate([3e-3, 1e-3]):
        con.execute("INSERT INTO trials (workload_key, config_index, config, costs, error, error_msg, build_time, "
                    "run_time, timestamp, tuner, seed, tvm_version, target, threads, verified, energy_j, timing, "
                    "cpu_model, cost) VALUES (?, ?, ?, ?, 'none', '', 0, 0, ?, 'random', 0, '0.27', ?, 2, 1, NULL, "
                    "?, 'AMD EPYC', ?)", (KEY, k, json.dumps({"i": k}), json.dumps([cost]), float(k), TARGET, HOT, cost))
    con.commit()
    con.close()


def test_a_schema_2_file_is_read_as_it_is_and_upgraded_when_written(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    make_v2(path)
    before = path.read_bytes()
    with Database(path, readonly=True) as db:
        assert [t.extra for t in db.trials(KEY)] == [{}, {}]
        assert db.best(KEY, CONTEXT).config_index == 1 and db.count(KEY) == 2
    assert path.read_bytes() == before  # reading changed nothing
    with Database(path) as db:
        assert [t.config_index for t in db.trials(KEY)] == [0, 1] and db.best(KEY, CONTEXT).config_index == 1
        add_group(db, "g1", {0: [1e-3] * 3, 1: [2e-3] * 3})
        assert db.best(KEY, CONTEXT).config_index == 0
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(
        Database.SCHEMA_VERSION) == "4"
    con.close()
