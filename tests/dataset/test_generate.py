"""The dataset generator: trajectories stored per task and machine, resumed, exported as numbers.

A fake measurer stands in for building and timing (a deterministic cost per config index;
every seventh config fails), so the generator's bookkeeping is checked without measuring; one small
real run checks the path through the real measurer.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensortune.database import Database
from tensortune.app.dataset import DatasetSpec, check_spec, dataset_tasks, export, generate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuners"))
import synthetic  # noqa: E402

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}


def FakeMeasurer() -> Any:
    """A cost from the config's index; every seventh config fails to compile (no building)."""
    return synthetic.FakeMeasurer(lambda c: 1e-4 * (1 + c.index * 7919 % 50), fails=lambda c: c.index % 7 == 0)


SPEC = DatasetSpec("depthwise_conv2d", n_tasks=2, samples=12, seed=0)


@pytest.fixture(scope="module")
def tasks():
    return dataset_tasks(SPEC, target=ZNVER4)


def test_generate_stores_each_task_resumes_and_exports(tasks, tmp_path) -> None:
    path = tmp_path / "d.db"
    check_spec(SPEC, path)
    with Database(path) as db:
        m = FakeMeasurer()
        first = generate(SPEC, db, m, tasks[:1])  # stopped after one task
        assert [p.stored for p in first] == [12] and len(m.measured) == 12
        assert all(t.extra.get("confirm") is None for t in db.trials())  # samples, no confirmation rounds
        m2 = FakeMeasurer()
        again = generate(SPEC, db, m2, tasks)  # the rerun measures only the second task
        assert [p.stored for p in again] == [12, 12] and len(m2.measured) == 12
        assert {t.tuner for t in db.trials()} == {"autotvm"}
        from tensortune.app.dataset import status

        st = status(SPEC, db, tasks)
        assert (st["tasks"], st["complete"], st["samples"]) == (2, 2, 24) and st["measuring_hours"] >= 0
        assert sum(m["tasks"] for m in st["machines"].values()) == 2
        # the same task list built on another machine (its targets differ, so its workload keys
        # do): the samples stored for those ops and arguments still count (a dataset's one-time
        # cost read on another machine, bench.payback)
        from tensortune.task import Task

        other = [Task.from_op(t.op, t.args, target={**ZNVER4, "mcpu": "znver5"}) for t in tasks]
        assert {t.workload_key for t in other}.isdisjoint(t.workload_key for t in tasks)
        st2 = status(SPEC, db, other)
        assert (st2["complete"], st2["samples"], st2["measuring_hours"]) == (2, 24, st["measuring_hours"])
        default = tasks[0].default_config().index
        assert m.measured[0] != default  # ebs starts without the template default
        assert {t.op for t in tasks} == {"depthwise_conv2d_nchwc"}  # the form a model runs
        summary = export(db, tasks[0].op, tmp_path / "d.npz")
        # a cut: the first task, and its first 5 samples as measured (labels against their own best)
        cut = export(db, tasks[0].op, tmp_path / "cut.npz", max_tasks=1, max_samples=5)
        first5 = [t for t in db.trials(cut["tasks"][0]["workload_key"])][:5]
        assert len(cut["tasks"]) == 1 and cut["tasks"][0]["workload_key"] == summary["tasks"][0]["workload_key"]
        assert cut["tasks"][0]["best_s"] == min(t.cost for t in first5 if t.ok)
        assert cut["samples"] <= 5 and cut["cut"] == {"max_tasks": 1, "max_samples": 5}
        # the first task of a given order (the generator's kept list), not of the database
        second = export(db, tasks[0].op, tmp_path / "o.npz", max_tasks=1,
                        order=[{"op": t.op, "args": t.args} for t in reversed(tasks)])
        assert [t["args"] for t in second["tasks"]] == [tasks[1].args]
    with np.load(tmp_path / "d.npz", allow_pickle=False) as z:
        n = len(z["label"])
        assert z["curve"].shape == (n, 488) and z["knob"].shape[0] == n and z["task"].shape[0] == n
        assert n == summary["samples"] == 24 - summary["dropped"]
        assert np.all((z["label"] > 0) & (z["label"] <= 1)) and np.isclose(z["label"].max(), 1.0)
        assert set(z["task_index"]) == {0, 1} and set(z["machine_index"]) == {0}
    side = json.loads((tmp_path / "d.npz.json").read_text())
    assert side["machines"][0]["cpu_model"] and len(side["tasks"]) == 2 and "log_flops" in side["task_features"]


def test_a_space_smaller_than_the_samples_completes_when_every_config_is_measured(tmp_path) -> None:
    from tensortune.app.dataset import space_measured, status
    from tensortune.task import Task

    spec = DatasetSpec("depthwise_conv2d", n_tasks=1, samples=20, seed=0)
    tiny = Task.from_op("depthwise_conv2d_nchwc", dict(H=1, W=1, C=8, K=1, S=1, P=0, B=8), target=ZNVER4)
    n = sum(tiny.space.is_valid(c) for c in tiny.space)
    assert n < spec.samples  # 12 configs
    with Database(tmp_path / "d.db") as db:
        assert status(spec, db, [tiny])["complete"] == 0
        half = generate(DatasetSpec("depthwise_conv2d", n_tasks=1, samples=n // 2, seed=0), db, FakeMeasurer(), [tiny])
        assert [p.stored for p in half] == [n // 2] and not space_measured(tiny, n // 2)
        st = status(spec, db, [tiny])
        assert (st["complete"], st["exhausted"], st["samples"]) == (0, 0, n // 2)  # half of the space: not done
        rest = generate(spec, db, FakeMeasurer(), [tiny])
        assert [(p.stored, p.note) for p in rest] == [(n, "space_exhausted")] and space_measured(tiny, n)
        st = status(spec, db, [tiny])
        assert (st["tasks"], st["complete"], st["exhausted"], st["samples"]) == (1, 1, 1, n)


def test_settings_are_kept_and_other_settings_refused(tmp_path) -> None:
    path = tmp_path / "d.db"
    check_spec(SPEC, path)
    check_spec(SPEC, path)  # the same settings resume
    with pytest.raises(ValueError, match=r"samples 12 \(asked: 13\)"):
        check_spec(DatasetSpec("depthwise_conv2d", n_tasks=2, samples=13), path)
    with pytest.raises(ValueError, match="unknown code sampler"):
        DatasetSpec(code_sampler="greedy")


def test_a_task_measured_on_another_machine_is_left_to_it(tasks, tmp_path, monkeypatch) -> None:
    import tensortune.database.trials as records

    with Database(tmp_path / "d.db") as db:
        monkeypatch.setattr(records, "cpu_model", lambda: "Other CPU 9000")
        generate(SPEC, db, FakeMeasurer(), tasks[:1])
        monkeypatch.undo()
        m = FakeMeasurer()
        progress = generate(SPEC, db, m, tasks[:1])
        assert progress[0].measured == 0 and "another machine (Other CPU 9000)" in progress[0].note
        assert m.measured == []


@pytest.mark.slow  # end to end: a dataset run through the command line
def test_a_real_run_through_the_command_line(tmp_path, capfd) -> None:
    from tensortune.cli import main

    db = tmp_path / "real.db"
    args = ["dataset", "generate", "--db", str(db), "--op", "dense", "--tasks", "1", "--samples", "4",
            "--code", "random", "--unblocked", "--shards", str(tmp_path / "shards"), "--no-progress"]
    assert main(args) == 0
    assert "1/1 tasks complete" in capfd.readouterr().out
    assert len(list((tmp_path / "shards").glob("*.jsonl.gz"))) == 1  # the durable copy
    assert main(["dataset", "status", "--db", str(tmp_path / "new.db"), "--shards", str(tmp_path / "shards")]) == 0
    assert "1/1 tasks complete, 4 samples" in capfd.readouterr().out  # a new database, restored
    assert main(args[:-1] + ["--samples", "5"]) == 2  # other settings: refused, nothing measured
    assert "holds a dataset made with samples 4 (asked: 5)" in capfd.readouterr().err
    Path(str(db) + ".tasks.json").write_text("[]")  # a list its sampler could not fill: topped up
    assert main(args) == 0
    out = capfd.readouterr().out
    assert "1 tasks added to the 0 it kept" in out and "1/1 tasks complete" in out
    assert len(json.loads((tmp_path / "shards" / "tasks.json").read_text())) == 1
    assert main(["dataset", "status", "--db", str(db)]) == 0
    assert "1/1 tasks complete, 4 samples" in capfd.readouterr().out
    assert main(["dataset", "export", "--db", str(db), "--op", "dense", "-o", str(tmp_path / "x.npz")]) == 0
    assert "samples of 1 dense tasks" in capfd.readouterr().out
    assert main(["dataset", "export", "--db", str(db), "--op", "dense", "-o", str(tmp_path / "y.npz"),
                 "--max-tasks", "1", "--max-samples", "2"]) == 0  # a cut, in the kept list's order
    out = capfd.readouterr().out
    # the cut comes first: the task's first 2 stored samples, less any the export drops (a random
    # config can time > 20x the best of the two, depending on the host's state)
    m = re.search(r"(\d+) samples of 1 dense tasks on 1 machine\(s\) \((\d+) dropped", out)
    assert m and int(m[1]) >= 1 and int(m[1]) + int(m[2]) == 2, out


def test_model_form_is_what_a_compiled_model_runs() -> None:
    from tensortune.app.dataset import model_form

    op, args = model_form("conv2d", {"H": 28, "W": 28, "IC": 128, "OC": 256, "K": 3, "S": 1, "P": 1}, ZNVER4)
    assert op == "conv2d_nchwc" and (args["IB"], args["OB"]) == (16, 16)
    op, args = model_form("conv2d", {"H": 28, "W": 28, "IC": 240, "OC": 28, "K": 3, "S": 1, "P": 1}, ZNVER4)
    assert op == "conv2d_nchwc" and args["OC"] == 32  # channels padded to a block, as a model pads them
    assert model_form("conv2d", {"H": 7, "W": 7, "IC": 20, "OC": 4, "K": 1, "S": 1, "P": 0}, ZNVER4)[0] == "conv2d"
    assert model_form("dense", {"M": 1, "N": 1000, "K": 512}, ZNVER4) == ("dense_pack", {"M": 1, "N": 1000, "K": 512, "NB": 8})
    assert model_form("dense", {"M": 1, "N": 10, "K": 512}, ZNVER4) == ("dense", {"M": 1, "N": 10, "K": 512})
    assert model_form("depthwise_conv2d", {"H": 14, "W": 14, "C": 96, "K": 3, "S": 1, "P": 1}, ZNVER4)[0] == \
        "depthwise_conv2d_nchwc"


def test_a_dataset_made_before_blocked_forms_resumes_unblocked(tmp_path) -> None:
    path = tmp_path / "old.db"
    old = {k: v for k, v in DatasetSpec().__dict__.items() if k != "blocked"}
    Path(str(path) + ".dataset.json").write_text(json.dumps(old))
    check_spec(DatasetSpec(blocked=False), path)
    with pytest.raises(ValueError, match="blocked False"):
        check_spec(DatasetSpec(), path)


def test_the_task_list_is_kept_beside_the_dataset(tmp_path) -> None:
    from tensortune.app.dataset import frozen_tasks, tasks_path, top_up

    path = tmp_path / "d.db"
    first = frozen_tasks(SPEC, path, target=ZNVER4)
    assert tasks_path(path).exists() and len(first) == 2
    kept = json.loads(tasks_path(path).read_text())[1:]  # e.g. made under other layer statistics
    tasks_path(path).write_text(json.dumps(kept))
    assert [t.workload_key for t in frozen_tasks(SPEC, path, target=ZNVER4)] == [first[1].workload_key]
    # topped up only when asked (dataset generate), kept tasks first and never reordered
    extended = top_up(SPEC, path, frozen_tasks(SPEC, path, target=ZNVER4), target=ZNVER4)
    assert [t.workload_key for t in extended] == [first[1].workload_key, first[0].workload_key]
    assert [t.workload_key for t in frozen_tasks(SPEC, path, target=ZNVER4)] == [t.workload_key for t in extended]
    more = DatasetSpec("depthwise_conv2d", n_tasks=4, samples=12, seed=0)
    four = [t.workload_key for t in top_up(more, path, frozen_tasks(more, path, target=ZNVER4), target=ZNVER4)]
    assert len(set(four)) == 4 and four[:2] == [t.workload_key for t in extended]
    tasks_path(path).write_text("{broken")
    with pytest.raises(ValueError, match="not a dataset task list"):
        frozen_tasks(SPEC, path, target=ZNVER4)
