"""Tuners raced as Ray actors on a local Ray instance: two actors, one killed mid-race."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tensortune.database import Database

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from tiny import tiny  # noqa: E402

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module's races (race() then neither starts nor stops one)."""
    ray.init(include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    from tensortune.models.reference import export_onnx

    m, x = tiny()
    return export_onnx(m, x, str(tmp_path_factory.mktemp("race") / "tiny.onnx"))


@pytest.mark.timeout(600)
def test_race_survives_a_killed_actor_and_keeps_its_records(local_ray, onnx_path, tmp_path) -> None:
    from tensortune.cluster.race import race

    rows = []
    out = race([onnx_path], ["random", "grid"], tmp_path / "dbs", max_rounds=3, batch=2, suspend=False,
               on_round=lambda e, row: rows.append((e.tuner, row["round"])), kill_after={f"{onnx_path}/grid": 1})
    by = {e["tuner"]: e for e in out["entries"]}
    assert by["grid"]["status"] == "died" and len(by["grid"]["rounds"]) == 1
    assert by["random"]["status"] == "done" and len(by["random"]["rounds"]) == 3
    assert all(r["latency_s"] > 0 for r in by["random"]["rounds"])
    with Database(by["grid"]["db"], readonly=True) as db:  # the dead actor's records stay
        assert sum(db.count(t.workload_key) for t in db.tasks()) == by["grid"]["trials"] > 0
    assert out["cpu_s"] > 0 and ("random", 3) in rows


@pytest.mark.timeout(600)
def test_each_task_batch_and_the_model_timing_hold_the_host(onnx_path, tmp_path, monkeypatch) -> None:
    """Nothing an actor does beside another's timing: its searches and model updates run inside
    its turn on the host, not only its measurements."""
    from contextlib import contextmanager

    import tensortune.models.reference as reference
    from tensortune.cluster.race import Competitor

    held, seen = [False], []

    @contextmanager
    def turn():
        assert not held[0], "turns do not nest"
        held[0] = True
        try:
            yield
        finally:
            held[0] = False

    c = Competitor(onnx_path, "random", str(tmp_path / "c.db"), batch=2, turn=turn)
    for tuner in c.tuners.values():
        def tune(*args, _tune=tuner.tune, **kwargs):
            seen.append(("tune", held[0]))
            return _tune(*args, **kwargs)
        tuner.tune = tune
    timing = reference.interleaved_latency
    monkeypatch.setattr(reference, "interleaved_latency",
                        lambda *a, **k: (seen.append(("timing", held[0])), timing(*a, **k))[1])
    row = c.round()
    c.close()
    assert row["measured"] > 0 and row["latency_s"] > 0
    assert [kind for kind, _ in seen] == ["tune"] * len(c.tasks) + ["timing"]
    assert all(inside for _, inside in seen) and not held[0]


def test_the_worst_is_suspended(onnx_path, tmp_path) -> None:
    from tensortune.cluster.race import Entry, _suspend_worst

    a, b = Entry("m", "a", "x"), Entry("m", "b", "y")
    a.rounds = [{"latency_s": 1.0}, {"latency_s": 0.8}]
    b.rounds = [{"latency_s": 1.0}, {"latency_s": 0.99}]
    _suspend_worst([a, b], "m")
    assert b.status == "suspended" and a.status == "running"
    _suspend_worst([a, b], "m")  # one left running: it stays
    assert a.status == "running"


def test_a_race_needs_a_budget(tmp_path) -> None:
    from tensortune.cluster.race import race

    with pytest.raises(ValueError, match="budget"):
        race(["m"], ["random"], tmp_path)


@pytest.mark.timeout(600)
def test_race_command(local_ray, onnx_path, tmp_path, capsys) -> None:
    import json

    from tensortune.cli import main

    assert main(["race", onnx_path, "--tuners", "random", "--rounds", "1", "--batch", "2", "--db-dir",
                 str(tmp_path / "d"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (e,) = out["entries"]
    assert e["status"] == "done" and len(e["rounds"]) == 1 and e["final_latency_ms"] > 0 and e["trials"] > 0
    assert out["energy_j"] is None and out["suspend"]
    assert main(["race", onnx_path, "--tuners", "random:nope=1", "--rounds", "1", "--db-dir", str(tmp_path / "d")]) == 2
    assert "unknown option 'nope'" in capsys.readouterr().err


def test_a_dying_host_lock_is_replaced_by_a_live_one(local_ray) -> None:
    """An earlier race's lock torn down (here: killed) while a new race asks for it by name."""
    from tensortune.cluster.race import host_lock

    node = ray.util.get_node_ip_address()
    first = host_lock(node)
    ray.kill(first)
    second = host_lock(node)
    assert ray.get(second.alive.remote()) is True
    assert ray.get(second.acquire.remote("a")) is True and ray.get(second.release.remote("a")) is True
