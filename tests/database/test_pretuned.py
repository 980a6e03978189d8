"""Tests of Fasor's pre-tuned schedule table (no tuning: trials with made-up costs are stored directly)."""
from __future__ import annotations

import json
import math
import random
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from tensortune.database import Database, TaskRecord, TrialRecord
from tensortune.database.pretuned import (FORMAT, PretunedEntry, PretunedError, PretunedTable, map_knobs,
                                          nearest_valid, target_type, task_key)
from tensortune.space import ConfigSpace
from tensortune.target import target_key
from tensortune.task import Task
from tensortune.utils.atomic import OutputError

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}
THREADS = 2
TYPE = "llvm/znver4/2"
TIMING = '{"min_repeat_ms":0,"mode":"hot","number":1,"repeat":3}'
#: the best config stored for matmul(M=64, N=256, K=128): not the template default
BEST = {"tile_y": [4, 4, 4], "tile_x": [4, 2, 32], "tile_k": [32, 4], "pack_b": 1, "auto_unroll_max_step": 16,
        "unroll_explicit": 0}
#: a cheaper config of the same task, measured but never verified
UNVERIFIED = {**BEST, "tile_k": [16, 8]}
#: a cheaper config that failed
FAILED = {**BEST, "tile_k": [64, 2]}


def matmul(m: int, n: int, k: int, kernel_class: str | None = None) -> Task:
    return Task("matmul", {"M": m, "N": n, "K": k}, ZNVER4, kernel_class=kernel_class)


def store_task(db: Database, task: Task) -> None:
    db.add_task(TaskRecord(task.workload_key, task.op, task.kernel_class, target_key(task.target_json),
                           float(task.flops), task.json_text, created=1.0))


def store_trial(db: Database, task: Task, knobs: dict, cost: float, *, error: str = "none", verified: bool = True,
                threads: int = THREADS, cpu: str = "CPU A", index: int | None = None) -> None:
    config = task.space.get(task.space.index_of(knobs))
    db.add_trial(TrialRecord(
        task.workload_key, config.index if index is None else index, config.to_json()["knobs"],
        [] if error != "none" else [cost, cost * 1.01, cost * 0.99], error, timestamp=1.0, tuner="random",
        target=target_key(task.target_json), threads=threads, verified=verified, timing=TIMING, cpu_model=cpu))


def knobs_of(config) -> dict:
    return config.to_json()["knobs"]


@pytest.fixture()
def db_path(tmp_path: Path) -> Path:
    """A database with matmul(64, 256, 128): BEST verified at 2 ms, cheaper configs that are
    unverified, failed or out of the space (an index beyond it, or stored knobs that are not the
    space's config at that index), a second machine and a second thread count; plus a task with
    no usable trial."""
    path = tmp_path / "tune.db"
    a, only_bad = matmul(64, 256, 128), matmul(32, 32, 64)
    with Database(path) as db:
        store_task(db, a)
        store_trial(db, a, a.default_config().to_json()["knobs"], 5e-3)
        store_trial(db, a, BEST, 2e-3)
        store_trial(db, a, UNVERIFIED, 1e-3, verified=False)
        store_trial(db, a, FAILED, 0.0, error="compile")
        store_trial(db, a, BEST, 0.5e-3, index=len(a.space) + 7)  # another space version's index
        default_index = a.default_config().index  # a record whose knobs are not those of its index here
        store_trial(db, a, {**BEST, "tile_k": [8, 16]}, 0.4e-3, index=default_index)
        store_trial(db, a, BEST, 3e-3, cpu="CPU B")  # same target type, another machine: slower
        store_trial(db, a, BEST, 4e-3, threads=1)  # another thread count: another target type
        store_task(db, only_bad)
        store_trial(db, only_bad, only_bad.default_config().to_json()["knobs"], 1e-3, verified=False)
        store_trial(db, only_bad, only_bad.default_config().to_json()["knobs"], 0.0, error="runtime")
    return path


# -- keys ---------------------------------------------------------------------------------------------

def test_target_type_and_task_key() -> None:
    assert target_type(ZNVER4, 2) == "llvm/znver4/2"
    assert target_type(target_key(ZNVER4), 16) == "llvm/znver4/16"
    assert target_type({"kind": "llvm"}, 1) == "llvm/generic/1"
    assert task_key("matmul", "gemm") == "matmul" and task_key("conv2d_nchwc", "conv2d_nchwc") == "conv2d_nchwc"
    assert task_key("matmul", "none") == "matmul/none" and task_key("primfunc", "generic") == "primfunc"


# -- building from a database -------------------------------------------------------------------------

def test_build_takes_the_best_verified_successful_trial_in_the_space(db_path: Path) -> None:
    table = PretunedTable()
    summary = table.build_from_database(db_path)
    a = matmul(64, 256, 128)
    # two target types (2 and 1 threads); CPU B's entry collides with CPU A's and is kept out
    assert len(table) == 2 and summary.added == 2 and summary.kept_out == 1
    entry = table.entries[(TYPE, "matmul", "matmul", (("K", 128), ("M", 64), ("N", 256)))]
    assert entry.knobs == BEST and entry.cost_s == pytest.approx(2e-3)
    assert entry.cpu_model == "CPU A" and entry.workload_key == a.workload_key and str(db_path) in entry.source
    one = table.entries[("llvm/znver4/1", "matmul", "matmul", (("K", 128), ("M", 64), ("N", 256)))]
    assert one.cost_s == pytest.approx(4e-3)
    # never the unverified, failed or out-of-space trials, and no entry for a task with none usable
    assert all(e.knobs not in (UNVERIFIED, FAILED) for e in table)
    assert not any(e.args == {"M": 32, "N": 32, "K": 64} for e in table)


def test_build_min_records_and_bad_tasks(db_path: Path) -> None:
    with Database(db_path) as db:
        db.add_task(TaskRecord("k" * 20, "nosuchop", "x", target_key(ZNVER4), 1.0, '{"op": "nosuchop", "args": {}}'))
        db.add_trial(TrialRecord("k" * 20, 0, {}, [1e-3], "none", target=target_key(ZNVER4), threads=2,
                                 verified=True))
        summary = PretunedTable().build_from_database(db, min_records=4)
    assert any("k" * 20 in s and "cannot rebuild" in s for s in summary.skipped)
    # CPU A has 4 verified successful trials in its context (the out-of-space ones included); B and 1 thread have 1
    table = PretunedTable.from_database(db_path, min_records=4)
    assert [e.cpu_model for e in table] == ["CPU A"]


# -- lookup ---------------------------------------------------------------------------------------------

def test_exact_hit_returns_the_stored_best_config(db_path: Path) -> None:
    table = PretunedTable.from_database(db_path)
    a = matmul(64, 256, 128)
    start = table.lookup(a, THREADS)
    assert start.how == "exact" and start.reason == "exact hit" and start.similarity is None
    assert knobs_of(start.config) == BEST and start.config.space is a.space
    assert start.config != a.default_config()
    assert start.entry is table.entries[(TYPE, "matmul", "matmul", (("K", 128), ("M", 64), ("N", 256)))]
    assert knobs_of(table.lookup(a, 1).config) == BEST  # its own entry on 1 thread
    other = table.lookup(a, 8)
    assert other.how == "default" and other.config == a.default_config() and "llvm/znver4/8" in other.reason


def test_similar_task_gets_the_mapped_config(db_path: Path) -> None:
    table = PretunedTable.from_database(db_path)
    b = matmul(128, 512, 256)  # same order of arguments (K, M, N): rho = 1
    start = table.lookup(b, THREADS)
    assert start.how == "similar" and start.similarity == pytest.approx(1.0)
    assert start.entry is not None and start.entry.args == {"M": 64, "N": 256, "K": 128}
    assert "rho=1.00" in start.reason
    assert start.config.space is b.space and b.space.is_valid(start.config)
    # the inner tiles are kept, the outer factors follow the new extents
    assert knobs_of(start.config) == {**BEST, "tile_y": [8, 4, 4], "tile_x": [8, 2, 32], "tile_k": [64, 4]}


def test_dissimilar_task_gets_the_default(db_path: Path) -> None:
    table = PretunedTable.from_database(db_path)
    c = matmul(256, 64, 512)  # (K, M, N) ranks 3, 2, 1 against 2, 1, 3: rho = -0.5
    start = table.lookup(c, THREADS)
    assert start.how == "default" and start.entry is None and start.similarity is None
    assert start.config == c.default_config()
    assert "tau=0.6" in start.reason and "rho=-0.50" in start.reason
    assert table.lookup(c, THREADS, tau=-0.6).how == "similar"  # above a lower threshold
    # rho must exceed tau: 1.0 is not above 1.0
    assert table.lookup(matmul(128, 512, 256), THREADS, tau=1.0).how == "default"
    # a constant argument vector has no rank correlation (NaN): never similar
    assert table.lookup(matmul(64, 64, 64), THREADS, tau=-1.0).how == "default"


def test_similar_prefers_the_same_kernel_class_on_ties() -> None:
    args = {"M": 64, "N": 256, "K": 128}
    table = PretunedTable([
        PretunedEntry(TYPE, "matmul", "matmul-relu", args, BEST, 1e-3),
        PretunedEntry(TYPE, "matmul", "matmul-add", args, {**BEST, "pack_b": 0}, 2e-3),
        PretunedEntry(TYPE, "matmul", "matmul-add", {"M": 1, "N": 3, "K": 2}, {**BEST, "pack_b": 0}, 2e-3),
    ])
    query = {"M": 128, "N": 512, "K": 256}
    for kernel_class in ("matmul-relu", "matmul-add"):
        entry, rho = table.similar(TYPE, "matmul", kernel_class, query)
        assert rho == pytest.approx(1.0) and entry.kernel_class == kernel_class
        assert entry.args == args  # of the rho = 1 entries of that class, the one with the nearest sizes
    entry, _ = table.similar(TYPE, "matmul", "matmul", query)
    assert entry.args == args and entry.kernel_class == "matmul-relu"  # nearest sizes, then stored first
    # an entry of another kernel class is used when it is the most similar one
    start = table.lookup(matmul(128, 512, 256, kernel_class="matmul-bias"), THREADS)
    assert start.how == "similar" and start.entry.kernel_class in ("matmul-relu", "matmul-add")
    assert table.similar(TYPE, "dense", "dense", query) is None
    assert table.similar(TYPE, "matmul", "matmul", {"M": 1, "N": 2}) is None  # other argument names


def test_similarity_is_spearman() -> None:
    rng = np.random.default_rng(0)
    names = ["a", "b", "c", "d", "e"]
    vectors = rng.integers(1, 6, size=(40, 5))  # small values: many ties
    vectors[3] = 2  # a constant vector: NaN, counts as -1
    for i, v in enumerate(vectors):
        table = PretunedTable([PretunedEntry(TYPE, "op", "op", dict(zip(names, map(int, v))), {}, 1e-3)])
        query = vectors[(i + 1) % len(vectors)]
        _, rho = table.similar(TYPE, "op", "op", dict(zip(names, map(int, query))))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns about the constant vector
            expected = spearmanr(v, query).statistic
        assert rho == pytest.approx(-1.0 if math.isnan(expected) else expected, abs=1e-9)


def test_conv_similar_across_kernel_classes_maps_into_a_constrained_space() -> None:
    base = dict(H=28, W=28, IC=64, OC=64, K=3, S=1, P=1, IB=16, OB=16)
    a = Task("conv2d_nchwc", base, ZNVER4)
    best = max(a.space, key=lambda c: (c["tile_x"][1] * c["tile_f"][1], c.index))  # a full register tile
    table = PretunedTable([PretunedEntry(TYPE, "conv2d_nchwc", "conv2d_nchwc", base, knobs_of(best), 1e-3)])
    assert table.lookup(a, THREADS).config == best
    b = Task("conv2d_nchwc", dict(base, H=14, W=14, IC=128, OC=128), ZNVER4, kernel_class="conv2d-add-relu")
    start = table.lookup(b, THREADS)  # same ranks, fused kernel class
    assert start.how == "similar" and start.entry.kernel_class == "conv2d_nchwc"
    assert start.config.space is b.space and b.space.is_valid(start.config)


# -- mapping --------------------------------------------------------------------------------------------

def small_space(constrained: bool = True) -> ConfigSpace:
    s = ConfigSpace()
    s.define_split("tile", 64, 3)
    s.define_choice("step", [0, 16, 64, 512])
    s.define_choice("mode", ["a", "b"])
    s.define_annotate("ann", 2)
    if constrained:
        s.add_constraint("small", lambda c: c["tile"][2] * c["tile"][1] <= 16)
    return s


def test_map_knobs_nearest_entities_and_fallbacks() -> None:
    s = small_space()
    default = s.get(s.index_of({"tile": (64, 1, 1), "step": 0, "mode": "b", "ann": ("none", "none")}))
    calls = []

    def make_default():
        calls.append(1)
        return default

    same = {"tile": [16, 2, 2], "step": 16, "mode": "a", "ann": ["unroll", "vec"]}
    config, note = map_knobs(s, same, make_default)
    assert knobs_of(config) == same and note == "" and not calls  # the default is not even computed
    # tile: inner (2, 2) kept; step: 20 -> 16; mode: unknown -> default's; ann: unknown -> default's
    config, note = map_knobs(s, {"tile": [8, 2, 2], "step": 20, "mode": "zzz", "ann": ["vec", "vec"]}, make_default)
    assert knobs_of(config) == {"tile": [16, 2, 2], "step": 16, "mode": "b", "ann": ["none", "none"]}
    assert "tile" in note and "mode" in note
    # a split of another extent: the nearest inner factors by log2 distance (3 -> 4, 6 -> 8: 0.83;
    # 2 and 4 or 4 and 4 are farther); the nearest numeric option; a missing knob: the default's
    free = small_space(constrained=False)
    config, _ = map_knobs(free, {"tile": [1, 3, 6], "step": 600, "ann": ["none", "vec"]},
                          lambda: free.get(free.index_of(default.knobs)))
    assert config["tile"] == (2, 4, 8)
    assert config["step"] == 512 and config["mode"] == "b" and config["ann"] == ("none", "vec")


def test_map_knobs_moves_an_invalid_config_to_the_nearest_valid_one() -> None:
    s = small_space()
    config, note = map_knobs(s, {"tile": [1, 8, 8], "step": 0, "mode": "a", "ann": ["none", "none"]},
                             lambda: s.get(0))
    assert config is not None and s.is_valid(config) and "nearest valid" in note
    assert config["step"] == 0 and config["mode"] == "a"  # only the offending knob moved
    assert config["tile"][1] * config["tile"][2] <= 16


def test_nearest_valid_walks_through_invalid_configs() -> None:
    s = ConfigSpace()
    s.define_choice("x", list(range(20)))
    s.define_choice("y", list(range(20)))
    s.add_constraint("far", lambda c: c["x"] + c["y"] >= 30)  # everything near (0, 0) is invalid
    start = s.get(s.index_of({"x": 0, "y": 0}))
    assert not s.neighbors(start)
    found = nearest_valid(s, start, budget=400)
    assert found is not None and found["x"] + found["y"] >= 30
    assert nearest_valid(s, start, budget=10) is None


def test_unmappable_config_falls_back_to_the_default() -> None:
    s = ConfigSpace()
    s.define_choice("x", list(range(50)))
    s.add_constraint("only", lambda c: c["x"] == 49)
    config, _ = map_knobs(s, {"x": 0}, lambda: s.get(49), budget=5)
    assert config is None


# -- collisions, files ------------------------------------------------------------------------------

def test_collision_keeps_the_lower_cost() -> None:
    args = {"M": 64, "N": 256, "K": 128}
    cheap = PretunedEntry(TYPE, "matmul", "matmul", args, BEST, 1e-3, cpu_model="fast")
    dear = PretunedEntry(TYPE, "matmul", "matmul", dict(reversed(args.items())), UNVERIFIED, 2e-3, cpu_model="slow")
    assert cheap.key() == dear.key()
    for order in ([cheap, dear], [dear, cheap]):
        table = PretunedTable(order)
        assert len(table) == 1 and next(iter(table)).cpu_model == "fast"
    table = PretunedTable([dear])
    assert table.merge(PretunedTable([cheap])) == 1 and next(iter(table)) is cheap
    assert table.merge(PretunedTable([dear])) == 0 and next(iter(table)) is cheap


def test_save_load_round_trip(db_path: Path, tmp_path: Path) -> None:
    table = PretunedTable.from_database(db_path)
    table.add(PretunedEntry("llvm/skylake/4", "conv2d_nchwc", "conv2d-add-relu", {"H": 7, "W": 7}, {"t": [1, 2]}, 3e-4,
                            "Xeon", "x.db [xgb]", "abc"))
    out = table.save(tmp_path / "pretuned.json")
    data = json.loads(out.read_text())
    assert data["format"] == FORMAT == "tensortune-pretuned/1" and len(data["entries"]) == 3
    back = PretunedTable.load(out)
    assert back.entries == table.entries
    assert back.save(tmp_path / "again.json").read_text() == out.read_text()
    b = matmul(128, 512, 256)
    assert knobs_of(back.lookup(b, THREADS).config) == knobs_of(table.lookup(b, THREADS).config)
    assert not list(tmp_path.glob(".pretuned.json.*"))  # no temporary file left
    with pytest.raises(OutputError):  # never over a database
        table.save(db_path)


@pytest.mark.parametrize("content, match", [
    ("{not json", "not a JSON file"),
    ('{"entries": []}', "not a pre-tuned table"),
    ('{"format": "tensortune-pretuned/99", "entries": []}', "not a pre-tuned table"),
    ('[1, 2]', "not a pre-tuned table"),
    ('{"format": "tensortune-pretuned/1", "entries": {}}', "'entries' is not a list"),
    ('{"format": "tensortune-pretuned/1", "entries": [{"target_type": "t", "op": "o", "kernel_class": "k", '
     '"args": {"a": 1}, "knobs": {}, "cost_s": -1}]}', "entry 0: field 'cost_s'"),
    ('{"format": "tensortune-pretuned/1", "entries": [{"target_type": "t", "op": "o", "kernel_class": "k", '
     '"args": {"a": 1.5}, "knobs": {}, "cost_s": 1}]}', "entry 0: field 'args'"),
    ('{"format": "tensortune-pretuned/1", "entries": ["x"]}', "entry 0"),
])
def test_load_rejects_malformed_files(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(PretunedError, match=match) as info:
        PretunedTable.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_load_rejects_a_missing_file_and_a_database(tmp_path: Path, db_path: Path) -> None:
    with pytest.raises(PretunedError, match="cannot read"):
        PretunedTable.load(tmp_path / "missing.json")
    with pytest.raises(PretunedError, match=str(db_path)):
        PretunedTable.load(db_path)


# -- speed -------------------------------------------------------------------------------------------

def test_lookup_over_thousands_of_entries_takes_milliseconds() -> None:
    rng = random.Random(0)
    sizes = [16, 32, 64, 128, 256, 512, 768, 1024, 2048, 3072]
    entries = [PretunedEntry(TYPE, "matmul", rng.choice(["matmul", "matmul-add"]),
                             {"M": rng.choice(sizes), "N": rng.choice(sizes), "K": rng.choice(sizes)}, BEST,
                             rng.uniform(1e-4, 1e-2))
               for _ in range(5000)]
    table = PretunedTable(entries)
    assert len(table) > 1500
    tasks = [matmul(128, 512, 256), matmul(256, 64, 512), matmul(48, 96, 80)]
    for t in tasks:  # build the spaces and the group index once
        t.space
        table.lookup(t, THREADS)
    start = time.perf_counter()
    for _ in range(20):
        for t in tasks:
            table.lookup(t, THREADS)
    per_lookup = (time.perf_counter() - start) / 60
    assert per_lookup < 0.02, f"{per_lookup * 1e3:.1f} ms per lookup"
