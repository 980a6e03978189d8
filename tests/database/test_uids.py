"""Every trial has an identity of its own (``uid``): exports write it, imports match by it, so a
round trip gives back every trial, an import adds nothing twice, and two trials are never taken
for one. Trials of older files and exports get the uid their content and occurrence give them."""
from __future__ import annotations

import dataclasses
import io
import json
import sqlite3
from pathlib import Path

import pytest

from tensortune.database import Database, TaskRecord, TrialRecord, export_jsonl, import_jsonl
from tensortune.database.jsonl import OTHER_CONTENT
from tensortune.database.records import UID_PATTERN, assign_content_uids

KEYS = ("ab" * 10, "cd" * 10)
TARGET = '{"kind":"llvm","mcpu":"znver4"}'
HOT = json.dumps({"min_repeat_ms": 40, "mode": "hot", "number": 1, "repeat": 5}, sort_keys=True, separators=(",", ":"))
IN_MODEL = json.dumps({"mode": "in-model", "model": "resnet18"}, sort_keys=True, separators=(",", ":"))


def trial(key: str, index: int, costs: list[float], tuner: str = "random", ts: float = 1.0, timing: str = HOT,
          cpu: str = "AMD EPYC", extra: dict | None = None) -> TrialRecord:
    return TrialRecord(key, index, {"i": index}, costs, "none", timestamp=ts, tuner=tuner, seed=0, target=TARGET,
                       threads=2, verified=True, timing=timing, cpu_model=cpu, extra=extra or {})


def history() -> list[TrialRecord]:
    """Trials the old import merged (it matched key, config, timestamp and tuner): several tuners,
    in-model confirmation rounds sharing one timestamp, trials timed over RPC, two trials that
    differ only in costs, and two byte-identical ones."""
    out = []
    for key in KEYS:
        out += [trial(key, i, [(i + 1) * 1e-3], tuner) for i in range(3) for tuner in ("random", "ga", "xgb")]
        out += [trial(key, i, [(5 - i + r) * 1e-4], "check", ts=9.0, timing=IN_MODEL,
                      extra={"confirm": {"group": "m1", "round": r, "of": 5}}) for r in range(1, 6) for i in (1, 2)]
        out += [trial(key, i, [2e-3 - i * 1e-4], "random", ts=5.0, cpu="rpc:pi4") for i in range(3)]
        out += [trial(key, 7, [3e-3], ts=7.0), trial(key, 7, [4e-3], ts=7.0)]  # only the costs differ
        out += [trial(key, 8, [6e-3], ts=8.0), trial(key, 8, [6e-3], ts=8.0)]  # byte-identical
    return out


def fill(db: Database) -> list[TrialRecord]:
    for n, key in enumerate(KEYS):
        db.add_task(TaskRecord(key, "matmul", "matmul", TARGET, 1e9 * (n + 1), "{}", 1.0))
    trials = history()
    for t in trials:
        db.add_trial(t)
    return trials


def bests(db: Database) -> list[tuple]:
    """What ``db best`` reports, per task and context (row ids aside)."""
    return [(task.workload_key, t.config_index, t.cost, t.context, t.tuner, t.uid) for task, t in db.best_all()]


def make_v3(path: Path) -> list[TrialRecord]:
    """A schema-3 file of :func:`history` (no uid column): a version-4 file taken back."""
    with Database(path) as db:
        trials = fill(db)
    con = sqlite3.connect(path)
    con.executescript("DROP INDEX trials_by_uid; ALTER TABLE trials DROP COLUMN uid; "
                      "UPDATE meta SET value = '3' WHERE key = 'schema_version';")
    con.close()
    return trials


# ---------------------------------------------------------------- identities
def test_new_trials_get_distinct_uids_and_a_copy_of_a_stored_one_gets_its_own(tmp_path: Path) -> None:
    with Database(tmp_path / "a.db") as db:
        trials = fill(db)
        uids = [t.uid for t in db.trials()]
        assert len(set(uids)) == len(trials) and all(UID_PATTERN.fullmatch(u) for u in uids)
        assert [t.uid for t in trials] == uids  # set on the records added
        copy = dataclasses.replace(trials[0], costs=[9e-3])  # carries the stored uid: a new measurement
        db.add_trial(copy)
        assert copy.uid not in uids and db.count(confirmations=True) == len(trials) + 1
        free = dataclasses.replace(trials[0], uid="mine-1")
        db.add_trial(free)
        assert free.uid == "mine-1" and db.trials()[-1].uid == "mine-1"


def test_a_bad_uid_is_refused() -> None:
    for uid in ("has space", "x" * 200, "-lead", "a/b"):
        with pytest.raises(ValueError, match="field 'uid'"):
            dataclasses.replace(trial(KEYS[0], 0, [1e-3]), uid=uid).validate()
    with pytest.raises(ValueError, match="field 'uid'"):
        TrialRecord.from_json({**trial(KEYS[0], 0, [1e-3]).to_json(), "uid": 5})


# ---------------------------------------------------------------- round trips
def test_a_round_trip_gives_back_every_trial_and_every_best(tmp_path: Path) -> None:
    stream = io.StringIO()
    with Database(tmp_path / "a.db") as a:
        trials = fill(a)
        export_jsonl(a, stream)
        before, uids = bests(a), [t.uid for t in a.trials()]
    with Database(tmp_path / "b.db") as b:
        report = import_jsonl(b, io.StringIO(stream.getvalue()))
        assert (report.tasks_added, report.trials_added, report.refused) == (2, len(trials), {})
        assert b.trials() == trials and [t.uid for t in b.trials()] == uids
        assert bests(b) == before
        again = import_jsonl(b, io.StringIO(stream.getvalue()))  # twice: nothing new
        assert again.added == 0 and (again.tasks_present, again.trials_present) == (2, len(trials))
        assert again.empty and "nothing was added" in again.why_nothing()
        assert b.count(confirmations=True) == len(trials)


def test_a_stored_uid_with_other_content_is_refused_with_its_reason(tmp_path: Path) -> None:
    stream = io.StringIO()
    with Database(tmp_path / "a.db") as a:
        fill(a)
        export_jsonl(a, stream)
    lines = [json.loads(ln) for ln in stream.getvalue().splitlines()]
    lines[2]["costs"] = [1.0]  # the same uid, other costs
    extra = {**lines[3], "uid": "new-1", "costs": [2.0]}  # a new trial
    with Database(tmp_path / "a.db") as a:
        report = import_jsonl(a, io.StringIO("".join(json.dumps(ln) + "\n" for ln in [*lines, extra])))
        assert report.trials_added == 1 and report.refused == {OTHER_CONTENT: 1}
        assert report.trials_present == len(lines) - 2 - 1
        assert f"refused 1: 1 {OTHER_CONTENT}" in report.describe()
        assert a.trials()[-1].uid == "new-1"


# ---------------------------------------------------------------- older files and exports
def test_a_schema_3_file_reads_as_it_is_and_upgrades_keeping_every_trial(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    trials = make_v3(path)
    before = path.read_bytes()
    with Database(path, readonly=True) as db:
        assert db.trials() == trials and {t.uid for t in db.trials()} == {""}
        old = io.StringIO()
        export_jsonl(db, old)  # an export of the file as it is: no uids
    assert path.read_bytes() == before
    with Database(path) as db:  # upgraded in place
        upgraded = db.trials()
        assert upgraded == trials and len({t.uid for t in upgraded}) == len(trials)
        again = io.StringIO()
        export_jsonl(db, again)
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "4"
    con.close()

    lines = [json.loads(ln) for ln in old.getvalue().splitlines()]
    assert {ln.get("uid") for ln in lines if ln["kind"] == "trial"} == {""}
    legacy = "".join(json.dumps({k: v for k, v in ln.items() if k != "uid"}) + "\n" for ln in lines)
    with Database(path) as db:  # the old export agrees with the upgrade
        report = import_jsonl(db, io.StringIO(legacy))
        assert report.added == 0 and report.trials_present == len(trials)
    with Database(tmp_path / "new.db") as fresh:  # and, into a new file, gives the same uids
        assert import_jsonl(fresh, io.StringIO(legacy)).trials_added == len(trials)
        assert [t.uid for t in fresh.trials()] == [t.uid for t in upgraded]
        assert import_jsonl(fresh, io.StringIO(again.getvalue())).trials_present == len(trials)


def test_content_uids_keep_identical_trials_apart_and_follow_the_order() -> None:
    a, b, c = trial(KEYS[0], 8, [6e-3]), trial(KEYS[0], 8, [6e-3]), trial(KEYS[0], 9, [6e-3])
    assert assign_content_uids([a, b, c]) == 3
    assert len({a.uid, b.uid, c.uid}) == 3
    again = [trial(KEYS[0], 8, [6e-3]), trial(KEYS[0], 9, [6e-3]), trial(KEYS[0], 8, [6e-3])]
    assign_content_uids(again)
    assert [t.uid for t in again] == [a.uid, c.uid, b.uid]
    kept = dataclasses.replace(a, uid="given")
    assert assign_content_uids([kept]) == 0 and kept.uid == "given"
