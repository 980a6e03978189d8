"""Shard folders: a dataset's durable copy, one gzip JSON-lines file per task, restored into a
fresh database (settings, task list and samples) and refused, with the shard named, when corrupt."""
from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

from tensortune.database import Database, DatabaseError
from tensortune.app.dataset import DatasetSpec, check_spec, dataset_tasks, generate, read_spec, tasks_path
from tensortune.dataset.shards import restore, save_sidecars, save_task, shard_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuners"))
import synthetic  # noqa: E402

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}
SPEC = DatasetSpec("depthwise_conv2d", n_tasks=2, samples=10, seed=0)


def fake():
    return synthetic.FakeMeasurer(lambda c: 1e-4 * (1 + c.index * 7919 % 50))


def test_a_dataset_survives_as_shards_and_resumes_from_them(tmp_path) -> None:
    tasks = dataset_tasks(SPEC, target=ZNVER4)
    first, folder = tmp_path / "a.db", tmp_path / "shards"
    check_spec(SPEC, first)
    tasks_path(first).write_text("[]")  # any task list: copied as it is
    with Database(first) as db:
        generate(SPEC, db, fake(), tasks[:1])
        save_sidecars(first, folder)
        tasks_path(first).write_text('[{"topped": "up"}]')  # a task list grows: the shard folder's follows
        save_sidecars(first, folder)
        assert (folder / "tasks.json").read_text() == '[{"topped": "up"}]'
        tasks_path(first).write_text("[]")
        save_sidecars(first, folder)
        path = save_task(db, folder, tasks[0].workload_key)
        assert path == shard_path(folder, tasks[0].workload_key)
        assert save_task(db, folder, tasks[1].workload_key) is None  # nothing measured: no shard
        blob = path.read_bytes()
        assert save_task(db, folder, tasks[0].workload_key).read_bytes() == blob  # same records, same bytes
        n = len(db.trials())
    second = tmp_path / "b.db"  # a new session: the database is gone, the shards are not
    with Database(second) as db:
        assert restore(second, db, folder) == (1, n)
        assert restore(second, db, folder) == (0, 0)  # tasks already held are not imported again
        assert read_spec(second) == SPEC and tasks_path(second).read_text() == "[]"
        m = fake()
        progress = generate(SPEC, db, m, tasks)
        assert [p.stored for p in progress] == [10, 10] and len(m.measured) == 10  # only the second task


def test_a_corrupt_shard_is_named_and_nothing_is_written(tmp_path) -> None:
    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / "0123456789abcdef.jsonl.gz").write_bytes(b"not gzip")
    with Database(tmp_path / "d.db") as db:
        with pytest.raises(DatabaseError, match="0123456789abcdef.jsonl.gz: not a gzip"):
            restore(tmp_path / "d.db", db, folder)
        (folder / "0123456789abcdef.jsonl.gz").write_bytes(gzip.compress(b'{"kind": "trial"}\n'))
        with pytest.raises(DatabaseError, match="0123456789abcdef.jsonl.gz, line 1"):
            restore(tmp_path / "d.db", db, folder)
        assert db.trials() == [] and db.tasks() == []
