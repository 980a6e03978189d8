"""Tuners raced as Ray actors on a local Ray instance: two actors, one killed mid-race."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from tensortune.database import Database

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from tiny import one_conv  # noqa: E402

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module's races (race() then neither starts nor stops one)."""
    from tensortune.cluster.race import local_ray_options

    ray.init(log_to_driver=False, **local_ray_options())  # as a race starts its own
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    from tensortune.models.reference import export_onnx

    m, x = one_conv()  # the fewest tasks: every round tunes each one and confirms its top configs
    return export_onnx(m, x, str(tmp_path_factory.mktemp("race") / "tiny.onnx"))


@pytest.mark.slow  # end to end: Ray races (one race of three actors for both subjects)
@pytest.mark.timeout(600)
def test_a_race_survives_a_killed_actor_keeps_its_records_and_runs_its_rounds_in_step(local_ray, onnx_path,
                                                                                     tmp_path) -> None:
    """Three actors of one model, ``genetic`` killed after its first round: its death is told once,
    as it is found, and its records stay. Every actor of the model finishes round r before any
    starts round r + 1: the ranking after round 2 compares two round-2 changes, and the one
    suspended then runs no third round."""
    from tensortune.cluster.race import race

    rows, told = [], []
    out = race([onnx_path], ["random", "grid", "genetic"], tmp_path / "dbs", max_rounds=3, batch=2, suspend=True,
               on_round=lambda e, row: rows.append((e.tuner, row["round"])),
               kill_after={f"{onnx_path}/genetic": 1}, on_status=lambda e: told.append((e.tuner, e.status)))
    by = {e["tuner"]: e for e in out["entries"]}
    assert by["genetic"]["status"] == "died" and len(by["genetic"]["rounds"]) == 1
    with Database(by["genetic"]["db"], readonly=True) as db:  # the dead actor's records stay
        assert sum(db.count(t.workload_key) for t in db.tasks()) == by["genetic"]["trials"] > 0
    assert told[0] == ("genetic", "died") and [s for _, s in told].count("died") == 1  # told as found, once
    (gone,) = [t for t, status in told if status == "suspended"]
    kept = ({"random", "grid"} - {gone}).pop()
    assert len(by[gone]["rounds"]) == 2 and by[gone]["status"] == "suspended"
    assert len(by[kept]["rounds"]) == 3 and by[kept]["status"] == "done"
    assert all(r["latency_s"] > 0 for r in by[kept]["rounds"])
    assert [r for _, r in rows] == [1, 1, 1, 2, 2, 3]  # in step: no round r + 1 returned before round r's last
    assert out["cpu_s"] > 0 and (kept, 3) in rows


@pytest.mark.timeout(600)
@pytest.mark.slow  # end to end: Ray races
def test_each_task_batch_and_the_model_timing_hold_the_host(onnx_path, tmp_path, monkeypatch) -> None:
    """Nothing an actor does beside another's timing: its searches and model updates run inside
    its turn on the host, not only its measurements."""
    from contextlib import contextmanager

    import tensortune.measure.timing as timing_mod
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
    timing, timed = timing_mod.interleaved_rounds, []
    monkeypatch.setattr(timing_mod, "interleaved_rounds",
                        lambda fns, *a, **k: (seen.append(("timing", held[0])), timed.append(list(fns)),
                                              timing(fns, *a, **k))[2])
    first, second = c.round(), c.round()
    c.close()
    assert first["measured"] > 0 and first["latency_s"] > 0 and first["change"] is None
    assert [kind for kind, _ in seen] == (["tune"] * len(c.tasks) + ["timing"]) * 2
    assert all(inside for _, inside in seen) and not held[0]
    # the second round's model is timed in pairs with the first round's: its change is their ratio
    assert timed == [["now"], ["now", "before"]]
    # a ratio of two timings (its size is the host's business: a loaded host moved it by 0.99)
    assert second["latency_s"] > 0 and second["change"] is not None and -1 < second["change"] < math.inf


def test_a_round_counts_the_candidates_the_cold_filter_dropped(onnx_path, tmp_path) -> None:
    """A trimmer actor's round reports the filter's drops so far over the model's tasks (the
    filter's own per-task reports summed); a tuner without the filter reports none."""
    from tensortune.cluster.race import Competitor
    from tensortune.select.cold import ColdReport

    plain = Competitor(onnx_path, "autotvm", str(tmp_path / "a.db"), batch=2)
    assert plain.filtered() is None
    plain.close()
    c = Competitor(onnx_path, "trimmer", str(tmp_path / "t.db"), batch=2)
    assert len(c.tasks) >= 2 and c.filtered() == 0
    for i, (key, tuner) in enumerate(c.tuners.items()):
        tuner.selector.reports[key] = ColdReport(checked=10, filtered=i + 3, calls=1)
    assert c.filtered() == sum(range(3, 3 + len(c.tasks)))
    c.close()


def test_the_paired_change_ranks_and_a_round_that_measured_nothing_ends_the_actor() -> None:
    from tensortune.cluster.race import Entry, _settle_round

    def pair(change: float, measured: int = 4, tuner: str = "") -> Entry:
        e = Entry("m", tuner, "x")
        e.rounds = [{"latency_s": 1.0, "change": None, "measured": 4}, {"latency_s": 1.0, "change": change, "measured": measured}]
        return e

    a, b, c = pair(-0.05, tuner="a"), pair(0.01, tuner="b"), pair(-0.2, measured=0, tuner="c")
    b.rounds[-1]["latency_s"] = 0.8  # b's timings alone say it got faster (host drift); its paired change says it did not
    assert b.improvement == 0.01 and a.improvement == -0.05
    # c's tuners stopped: done early (told), and it leaves the ranking; then the worst still running
    assert _settle_round([a, b, c], False, None, True) == [c, b]
    assert (a.status, b.status, c.status) == ("running", "suspended", "done")
    assert _settle_round([a, b, c], False, None, True) == [] and a.status == "running"  # one left: it stays
    assert _settle_round([a, b, c], False, 2, True) == [] and a.status == "done"  # its rounds all run
    d, e = pair(0.3, tuner="d"), pair(-0.1, tuner="e")
    assert _settle_round([d, e], True, None, True) == [] and d.status == e.status == "done"  # the budget is spent
    old = Entry("m", "o", "w")  # rows from before the paired change: the two timings' change
    old.rounds = [{"latency_s": 1.0}, {"latency_s": 0.9}]
    assert old.improvement == pytest.approx(-0.1)


def test_the_worst_is_suspended(onnx_path, tmp_path) -> None:
    from tensortune.cluster.race import Entry, _suspend_worst

    a, b = Entry("m", "a", "x"), Entry("m", "b", "y")
    a.rounds = [{"latency_s": 1.0}, {"latency_s": 0.8}]
    b.rounds = [{"latency_s": 1.0}, {"latency_s": 0.99}]
    assert _suspend_worst([a, b], "m") is b
    assert b.status == "suspended" and a.status == "running"
    assert _suspend_worst([a, b], "m") is None  # one left running: it stays
    assert a.status == "running"


def test_a_race_needs_a_budget(tmp_path) -> None:
    from tensortune.cluster.race import race

    with pytest.raises(ValueError, match="budget"):
        race(["m"], ["random"], tmp_path)


@pytest.mark.timeout(600)
@pytest.mark.slow  # end to end: Ray races
def test_race_command(local_ray, onnx_path, tmp_path, capsys) -> None:
    import json

    from tensortune.cli import main

    assert main(["race", onnx_path, "--tuners", "random", "--rounds", "1", "--trials-per-round", "2", "--db-dir",
                 str(tmp_path / "d"), "--json"]) == 0
    seen = capsys.readouterr()
    out = json.loads(seen.out)
    assert "race: tiny.onnx random round 1: " in seen.err  # each round told on stderr, --json or not
    (e,) = out["entries"]
    assert e["status"] == "done" and len(e["rounds"]) == 1 and e["final_latency_ms"] > 0 and e["trials"] > 0
    assert out["energy_j"] is None and out["suspend"]
    assert main(["race", onnx_path, "--tuners", "random:nope=1", "--rounds", "1", "--db-dir", str(tmp_path / "d")]) == 2
    assert "unknown option 'nope'" in capsys.readouterr().err


def test_a_dying_host_lock_is_replaced_by_a_live_one(local_ray) -> None:
    """An earlier race's lock torn down (here: killed) while a new race asks for it by name."""
    from tensortune.cluster.race import host_lock

    node = ray.get_runtime_context().get_node_id()
    first = host_lock(node)
    ray.kill(first)
    second = host_lock(node)
    assert ray.get(second.alive.remote()) is True
    assert ray.get(second.acquire.remote("a")) is True and ray.get(second.release.remote("a")) is True


def test_a_local_race_without_rays_token_is_refused(monkeypatch) -> None:
    from tensortune.cluster.race import RaySecurityError, local_ray_options

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(RaySecurityError, match="every interface"):
        local_ray_options()
