"""Trimmer's cold-candidate filter: LOESS cold marks, the latency network, dropping and replacing."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from tensortune.costmodel.base import TaskData
from tensortune.database import Database
from tensortune.learn.coldnet import records_from, sample_of, train_coldnet
from tensortune.select import SelectContext, make_selector, wrap_selector
from tensortune.select.cold import ColdFilter, cold_mask
from tensortune.task import Task
from tensortune.tuners import get_tuner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuners"))
from synthetic import FakeMeasurer, conv_landscape  # noqa: E402

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """Random-search records of two conv2d tasks over the synthetic landscape."""
    path = tmp_path_factory.mktemp("cold") / "d.db"
    with Database(path) as d:
        for shape in ((14, 14, 64, 64, 3, 1, 1), (28, 28, 32, 64, 3, 1, 1)):
            t = Task.from_op("conv2d", shape, target=ZNVER4)
            get_tuner("random", t, seed=0).tune(300, FakeMeasurer(conv_landscape), database=d)
    with Database(path, readonly=True) as d:
        yield d


def test_cold_marks_failures_and_what_lies_above_the_trend() -> None:
    costs = [10.0, 9.0, 8.0, 20.0, 7.0, float("inf"), 6.0, 5.5, 5.0, 12.0, 4.5, 4.0]
    cold = cold_mask(costs)
    assert cold[5] and cold[3] and cold[9]  # the failure and the two spikes
    assert not cold[0] or not cold[-1]
    assert cold_mask([1.0, float("inf")]).tolist() == [False, True]  # too few to fit: only failures


def test_network_learns_latency_and_embeds_candidates(db) -> None:
    samples = records_from([db])
    assert len(samples) >= 500 and all(s.op == "conv2d" for s in samples)
    net = train_coldnet(samples, seed=0)
    r = net.report
    assert r.records == len(samples) and r.epochs == 10 and r.test_spearman > 0.3
    emb = net.embed(samples[:7])
    assert emb.shape == (7, 32)
    with pytest.raises(ValueError, match="at least 10"):
        train_coldnet(samples[:3])


def test_filter_drops_candidates_near_cold_ones_and_refills_the_batch(db) -> None:
    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    sp = task.space
    rng = random.Random(0)
    measured = sp.sample(rng, 60)
    costs = [conv_landscape(c) for c in measured]
    cold = cold_mask(costs)
    assert 0 < cold.sum() < len(costs)
    f = wrap_selector("cold-filter", make_selector("top-k"), {"p_start": 1.0, "p_min": 1.0, "k": 1})
    assert isinstance(f, ColdFilter)
    f.begin(db)
    assert f.net is not None and f.notice.startswith("cold filter on")
    # candidates: exact copies of cold measured configs first (their nearest neighbour is
    # themselves), then fresh ones
    cold_ones = [c for c, k in zip(measured, cold) if k][:4]
    fresh = sp.sample(rng, 40, exclude={c.index for c in measured})
    cands = cold_ones + fresh
    scores = np.linspace(1.0, 0.0, len(cands))  # the cold copies rank first
    ctx = SelectContext(sp, random.Random(0), set(), task, TaskData(task, measured, costs))
    batch = f(cands, scores, 8, ctx)
    assert len(batch) == 8 and not {c.index for c in batch} & {c.index for c in cold_ones}
    rep = f.reports[task.workload_key]
    assert rep.filtered >= len(cold_ones) and rep.checked >= 8 and rep.calls == 1


def test_filter_waits_for_history_and_follows_its_schedule(db) -> None:
    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    sp = task.space
    f = wrap_selector("cold-filter", make_selector("top-k"), {"p_start": 0.5, "decay": 0.5, "p_min": 0.0})
    cands = sp.sample(random.Random(1), 20)
    few = TaskData(task, cands[:5], [1e-3] * 5)
    out = f(cands[5:], np.zeros(15), 4, SelectContext(sp, random.Random(0), set(), task, few))
    assert len(out) == 4 and not f.reports  # no network, and too little history: passed through
    f.begin(db)
    measured = sp.sample(random.Random(2), 40, exclude={c.index for c in cands})
    hist = TaskData(task, measured, [conv_landscape(c) for c in measured])
    for _ in range(6):
        f(cands, np.zeros(20), 4, SelectContext(sp, random.Random(0), set(), task, hist))
    rep = f.reports[task.workload_key]
    assert rep.calls == 6 and rep.checked < 4 * 6  # checked with probability 0.5, 0.25, ...


def test_any_model_based_tuner_takes_the_filter(db, tmp_path) -> None:
    import shutil

    path = tmp_path / "copy.db"
    shutil.copy(db.path, path)
    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    with Database(path) as d:
        tuner = get_tuner("autotvm", task, seed=0, batch_size=8,
                          options={"feature": "knob", "plan_size": 16, "warmup": 8, "n_finalists": 32,
                                   "n_random_pool": 16, "explorer_options": {"n_chains": 16, "max_steps": 20},
                                   "cold_filter": True,
                                   # the database's own records only (the shipped datasets' supplement
                                   # is tested below): a network of hundreds of records, not 2,000
                                   "cold_filter_options": {"min_measured": 8, "datasets": ()}})
        res = tuner.tune(120, FakeMeasurer(conv_landscape), database=d)
    assert "cold filter on" in res.tuner_status
    rep = tuner.search_report()["cold_filter"][task.workload_key]
    assert rep["calls"] >= 1 and rep["checked"] >= 1


def test_shard_folders_supply_records_and_an_empty_database_gets_a_network(tmp_path) -> None:
    from tensortune.learn.coldnet import records_from_shards
    from tensortune.select.cold import ColdFilterOptions, network_for, shipped_datasets

    shipped = shipped_datasets()
    assert [Path(p).name for p in shipped] == ["conv2d", "depthwise_conv2d", "dense"]
    assert ColdFilterOptions().datasets == shipped
    some = records_from_shards(shipped[0], limit=50)
    assert len(some) == 50 and {s.op for s in some} == {"conv2d_nchwc"}
    assert all(s.mcpu and np.isfinite(s.cost) and s.cost > 0 and s.knobs for s in some)
    # a model's first task: nothing in the database yet, so the datasets supply all the records,
    # in equal shares
    with Database(tmp_path / "empty.db") as empty:
        net, notice = network_for(empty, ColdFilterOptions(min_records=300))
    assert net is not None and notice.startswith("cold filter on: network of 300 records (300 from datasets)")
    assert set(net.vocab.ops) == {"conv2d_nchwc", "depthwise_conv2d_nchwc", "dense_pack"}
    # without datasets, the same database gives no network
    with Database(tmp_path / "empty.db") as empty:
        net, notice = network_for(empty, ColdFilterOptions(datasets=()))
    assert net is None and notice.startswith("cold filter off")


def test_a_bad_shard_is_named(tmp_path) -> None:
    from tensortune.database import DatabaseError
    from tensortune.learn.coldnet import records_from_shards

    (tmp_path / "00.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(DatabaseError, match="00.jsonl.gz"):
        records_from_shards(tmp_path)
