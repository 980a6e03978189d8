"""A model's tasks tuned on a local Ray cluster of two nodes: both measure at once, the driver
alone writes the database, and a node killed mid-run loses at most its batch in flight."""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tensortune.database import Database

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from tiny import tiny  # noqa: E402

ray = pytest.importorskip("ray")
TRIALS, BATCH = 6, 3


@pytest.fixture(scope="module")
def two_nodes():
    """A head and a worker node of one CPU each, on this machine; the driver joins the head. One
    cluster for the module (each start costs seconds): the test that removes the worker node
    comes last."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "_system_config": {"health_check_period_ms": 500,
                                                                               "health_check_failure_threshold": 4}})
    worker = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    yield cluster, worker
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="module")
def model():
    from tensortune.app import load

    m, x = tiny()
    return load(m, x)


def _run(model, db_path: Path, kill=None):
    """Tune ``model`` on every slot of the cluster; ``kill(slot)`` wraps each slot's measure."""
    from tensortune.app.checks import open_db
    from tensortune.app.tuning import model_measure_options
    from tensortune.budget import Budget
    from tensortune.cluster.nodes import start_slots
    from tensortune.models.compile import model_tasks
    from tensortune.scheduler import ParallelScheduler
    from tensortune.tuners import get_tuner

    # each repeat at least 20 ms: the timed spans, which show the nodes measuring at once, are then
    # not a few milliseconds between seconds of builds (an F(6, 3) candidate builds in 3 s)
    slots = start_slots(replace(model_measure_options(1), min_repeat_ms=20))
    if kill is not None:
        kill(slots)
    tasks = model_tasks(model)
    db = open_db(str(db_path))
    try:
        sched = ParallelScheduler(tasks, lambda t, r: get_tuner("random", t, seed=r, batch_size=BATCH), slots, db,
                                  Budget(trials=TRIALS), lambda: open_db(str(db_path)), batch_size=BATCH)
        outcomes = sched.run()
    finally:
        db.close()
        for s in slots:
            s.close()
    return slots, sched, outcomes, tasks


def _stored(db_path: Path, tasks) -> dict[str, list[int]]:
    with Database(db_path, readonly=True) as db:
        return {t.task.workload_key: [r.config_index for r in db.trials(t.task.workload_key) if not r.extra.get("confirm")]
                for t in tasks if t.tunable}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_nodes_measure_at_once_and_every_record_is_stored_once(two_nodes, model, tmp_path) -> None:
    slots, sched, outcomes, tasks = _run(model, tmp_path / "c.db")
    assert len(slots) == 2 and len({s.info.node_id for s in slots}) == 2
    a, b = (s.intervals for s in slots)
    assert a and b, "both nodes measured"
    assert any(s0 < e1 and s1 < e0 for s0, e0 in a for s1, e1 in b), "the two nodes' timings overlap"
    stored = _stored(tmp_path / "c.db", tasks)
    assert all(len(ix) == len(set(ix)) == TRIALS for ix in stored.values()), stored  # each once, all there
    assert all(o.best_s < float("inf") and o.trials_total == TRIALS for o in outcomes if o.mtask.tunable)
    assert not sched.lost and sched.cost()["measurers"] == 2


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tune_ray_address_then_compile_uses_the_cluster_records(two_nodes, tmp_path, capsys) -> None:
    """``tensortune tune --ray-address``: the nodes' records are this machine's, so compile builds
    every tuned task with its best stored config."""
    import json

    from tensortune.cli import main
    from tensortune.models.compile import chosen_trial, model_tasks
    from tensortune.models.reference import export_onnx

    cluster, _ = two_nodes
    m, x = tiny()
    path = export_onnx(m, x, str(tmp_path / "tiny.onnx"))
    db = str(tmp_path / "t.db")
    assert main(["tune", path, "--ray-address", cluster.address, "--tuner", "random", "--trials", "4",
                 "--batch-size", "2", "--threads", "1", "--db", db, "--no-check", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["scheduler"] == "parallel" and out["cost"]["measurers"] == 2
    assert all(t["trials"] == 4 and t["best_latency_ms"] for t in out["tasks"])
    from tensortune.app import load

    with Database(db, readonly=True) as d:
        for mt in model_tasks(load(path)):
            if mt.tunable:
                trial, why = chosen_trial(mt.task, d)
                assert trial is not None and trial.error == "none", why


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_node_of_another_cpu_kind_is_refused_before_anything_is_measured(two_nodes, monkeypatch) -> None:
    import tensortune.target
    from tensortune.app.tuning import model_measure_options
    from tensortune.cluster import nodes
    from tensortune.errors import UsageError

    here = tensortune.target.host_target_json()  # the driver (only) takes itself for another CPU
    monkeypatch.setattr(tensortune.target, "host_target_json", lambda num_cores=None: {**here, "mcpu": "another-cpu"})
    with pytest.raises(UsageError, match="a cluster tunes for one CPU kind, the driver's"):
        nodes.start_slots(model_measure_options(1))
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if "slot" in str(a)]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_node_killed_mid_batch_loses_that_batch_and_its_task_goes_on(two_nodes, model, tmp_path) -> None:
    cluster, worker = two_nodes
    died: list[int] = []

    def kill(slots) -> None:
        (victim,) = [s for s in slots if s.info.node_id == worker.node_id]
        measure, calls = victim.measure, []

        def measure_then_die(inputs, on_result=None):
            calls.append(len(inputs))
            if len(calls) == 2:  # its second batch: the node goes while it builds
                died.append(len(inputs))
                threading.Timer(0.5, cluster.remove_node, (worker,)).start()
            return measure(inputs, on_result)

        victim.measure = measure_then_die

    t0 = time.time()
    slots, sched, outcomes, tasks = _run(model, tmp_path / "k.db", kill)
    assert died and len(sched.lost) == 1 and "died with a batch in flight" in sched.lost[0], sched.lost
    stored = _stored(tmp_path / "k.db", tasks)
    assert all(len(ix) == len(set(ix)) == TRIALS for ix in stored.values()), stored  # the others finished every task
    assert all(o.best_s < float("inf") for o in outcomes if o.mtask.tunable)
    assert time.time() - t0 < 600


@pytest.mark.parametrize("argv, says", [
    (["--ray-address", "127.0.0.1:1"], "--ray-address 127.0.0.1:1: nothing answers there"),
    (["--ray-address", "head-without-port"], "--ray-address takes auto or HOST:PORT"),
    (["--ray-address", "auto", "--rpc", "127.0.0.1:9190:k"], "--ray-address and --rpc"),
    (["--ray-address", "auto", "--scheduler", "round-robin"], "leave --scheduler at sequential"),
    (["--ray-address", "auto", "--cpu-budget", "60"], "not a CPU or energy budget"),
])
def test_what_a_cluster_run_cannot_take_is_refused_in_one_line(argv, says, tmp_path, capsys) -> None:
    from tensortune.cli import main

    db = tmp_path / "r.db"
    assert main(["tune", "resnet18", "--trials", "2", "--db", str(db), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not db.exists()
