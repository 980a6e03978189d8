"""Shrunken spaces (Fasor): option pruning, knob selection, and the mapping back to the task."""
from __future__ import annotations

import random

import pytest

from tensortune.space import ConfigSpace
from tensortune.space.shrink import MIN_OPTIONS, prune_options, restrict, select_knobs, shrink


def space() -> ConfigSpace:
    s = ConfigSpace()
    s.define_split("tile_f", 48, 2)  # divisors of 48: 1 2 3 4 6 8 12 16 24 48
    s.define_split("tile_y", 7, 2)  # 1 and 7: no power-of-two choice beyond 1
    s.define_split("tile_x", 32, 2)
    s.define_choice("unroll", [0, 1])
    s.add_constraint("tile", lambda c: c["tile_f"][1] * c["tile_x"][1] <= 64)
    return s


def test_pruning_keeps_power_of_two_divisors_and_the_start() -> None:
    s = space()
    start = s.get(s.index_of({"tile_f": (8, 6), "tile_y": (7, 1), "tile_x": (4, 8), "unroll": 0}))
    keep, extra, report = prune_options(s, start, threads=1)
    inner_f = sorted(s.knob("tile_f").entities[i][1] for i in keep["tile_f"])
    assert inner_f == [1, 2, 4, 6, 8, 16]  # powers of two dividing 48, plus the start's 6
    assert "tile_y" not in keep  # fewer than MIN_OPTIONS would remain: left whole
    assert "tile_x" not in keep  # every inner factor of 32 is a power of two: nothing to prune
    assert MIN_OPTIONS == 3 and report["pruned"]["tile_f"] == "10 -> 6" and not extra


def test_parallel_rule_is_a_constraint_only_where_reachable() -> None:
    s = space()
    start = s.get(s.index_of({"tile_f": (6, 8), "tile_y": (7, 1), "tile_x": (4, 8), "unroll": 0}))
    _, extra, report = prune_options(s, start, threads=4, parallel_splits=("tile_f", "tile_y"))
    (name, fn), = extra
    assert name == "parallel_outer" and "tile_f" in report["parallel"]
    assert fn(start) and not fn(s.get(s.index_of({"tile_f": (1, 48), "tile_y": (1, 7), "tile_x": (4, 8), "unroll": 0})))
    lone = s.get(s.index_of({"tile_f": (1, 48), "tile_y": (1, 7), "tile_x": (32, 1), "unroll": 0}))
    assert prune_options(s, lone, threads=4, parallel_splits=("tile_f", "tile_y"))[1] == []  # the start breaks it


def test_selection_fixes_the_rest_at_the_start_and_maps_back() -> None:
    s = space()
    start = s.get(s.index_of({"tile_f": (8, 6), "tile_y": (7, 1), "tile_x": (4, 8), "unroll": 1}))
    tuned, fixed = select_knobs(s, ["tile_x", "unroll", "tile_f"], 2)
    assert tuned == ["tile_x", "unroll"] and fixed == ["tile_f", "tile_y"]
    sh = shrink(s, start, threads=1, ranking=["tile_x", "unroll", "tile_f"], n_p=2)
    assert sh.space.dims == [1, 1, len(s.knob("tile_x")), 2] and sh.fixed == ["tile_f", "tile_y"]
    rng = random.Random(0)
    for c in sh.space.sample(rng, 10):
        full = sh.to_full(c)
        assert full.space is s and s.is_valid(full) and full["tile_f"] == (8, 6) and full["tile_y"] == (7, 1)
        assert sh.from_full(full).index == c.index
    assert sh.from_full(s.get(s.index_of({"tile_f": (1, 48), "tile_y": (7, 1), "tile_x": (4, 8), "unroll": 1}))) is None
    assert 0 < sh.ratio < 1 and sh.report["points"].startswith(str(len(s)))


def test_restricted_space_keeps_constraints_and_encodings() -> None:
    s = space()
    r = restrict(s, {"tile_x": [0, 5]})
    assert r.dims[2] == 2 and r.vector_width == s.vector_width
    bad = {"tile_f": (1, 48), "tile_y": (7, 1), "tile_x": (1, 32), "unroll": 0}
    assert not r.is_valid(r.get(r.index_of(bad)))  # 48 x 32 > 64: the parent's constraint holds
    c = r.get(r.index_of({**bad, "tile_f": (48, 1)}))
    assert (r.vectorize(c) == s.vectorize(s.get(s.index_of(c.knobs)))).all()
    with pytest.raises(ValueError):
        restrict(s, {"unroll": []})
