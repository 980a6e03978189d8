"""Tests of knobs and ConfigSpace: enumeration, indexing, sampling, neighbours, JSON."""
from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest

from tensortune.space import (AnnotateKnob, ChoiceKnob, Config, ConfigSpace, ReorderKnob, SplitKnob,
                              knob_from_json)
from tensortune.space.space import DEFAULT_UNROLL_STEPS


# ---------------------------------------------------------------- helpers
def is_power_of_two(v: int) -> bool:
    return v >= 1 and v & (v - 1) == 0


def ordered_factorisations(n: int, parts: int) -> set[tuple[int, ...]]:
    """Every ordered tuple of ``parts`` positive integers whose product is ``n`` (brute force)."""
    divs = [d for d in range(1, n + 1) if n % d == 0]
    return {t for t in itertools.product(divs, repeat=parts) if math.prod(t) == n}


def small_space() -> ConfigSpace:
    """6 x 3 x 6 x 6 = 648 points, one knob of each kind."""
    s = ConfigSpace()
    s.define_split("tile", 12, 2)                              # 6 entities
    s.define_choice("c", [1, 2, 3])                            # 3
    s.define_annotate("ann", 2, candidates=("none", "unroll", "vec"))  # 4 + 2 = 6
    s.define_reorder("ord", 3)                                 # 6
    return s


def big_space() -> ConfigSpace:
    """20,000 points: large enough for the rejection-sampling path."""
    return ConfigSpace([ChoiceKnob("a", list(range(200))), ChoiceKnob("b", list(range(100)))])


def differing_knobs(space: ConfigSpace, a: Config, b: Config) -> list[tuple[int, int]]:
    """(knob number, position distance) of every knob where ``a`` and ``b`` differ."""
    pa, pb = space.positions(a), space.positions(b)
    return [(j, abs(x - y)) for j, (x, y) in enumerate(zip(pa, pb)) if x != y]


# ---------------------------------------------------------------- SplitKnob
@pytest.mark.parametrize("extent,parts", [(12, 3), (12, 2), (16, 3), (7, 2), (1, 3), (30, 4)])
def test_split_factors_are_exactly_all_factorisations(extent: int, parts: int) -> None:
    k = SplitKnob("x", extent, parts)
    ents = k.entities
    assert len(ents) == len(set(ents)), "duplicate entities"
    assert all(len(e) == parts and math.prod(e) == extent for e in ents)
    assert set(ents) == ordered_factorisations(extent, parts)


def test_split_12_into_3_has_18_entities() -> None:
    ents = SplitKnob("x", 12, 3).entities
    assert len(ents) == 18
    for e in [(12, 1, 1), (1, 1, 12), (1, 12, 1), (2, 3, 2), (3, 2, 2), (1, 3, 4)]:
        assert e in ents


def test_split_neighbour_order_is_by_innermost_factor() -> None:
    ents = SplitKnob("x", 24, 3).entities
    keys = [tuple(reversed(e)) for e in ents]
    assert keys == sorted(keys)


@pytest.mark.parametrize("extent,parts", [(12, 3), (13, 2), (100, 3), (5, 2), (64, 3)])
def test_split_power2_inner_powers_of_two_outer_ceil(extent: int, parts: int) -> None:
    ents = SplitKnob("x", extent, parts, policy="power2").entities
    assert ents and len(ents) == len(set(ents))
    for e in ents:
        inner = e[1:]
        assert all(is_power_of_two(f) for f in inner), e
        assert math.prod(inner) <= extent, e
        assert e[0] == math.ceil(extent / math.prod(inner)), e
        assert math.prod(e) >= extent  # the tiles cover the axis
    # every such combination is present
    pows = [1 << i for i in range(extent.bit_length())]
    expected = {(math.ceil(extent / math.prod(inner)),) + inner
                for inner in itertools.product(pows, repeat=parts - 1) if math.prod(inner) <= extent}
    assert set(ents) == expected


def test_split_power2_12_into_3() -> None:
    ents = set(SplitKnob("x", 12, 3, policy="power2").entities)
    assert (12, 1, 1) in ents and (2, 2, 4) in ents and (3, 1, 4) in ents and (2, 1, 8) in ents
    assert (1, 2, 8) not in ents  # inner product 16 > 12
    assert len(ents) == 10


@pytest.mark.parametrize("policy", ["factors", "power2"])
def test_split_max_innermost(policy: str) -> None:
    full = SplitKnob("x", 64, 3, policy=policy).entities
    capped = SplitKnob("x", 64, 3, policy=policy, max_innermost=8).entities
    assert capped and all(e[-1] <= 8 for e in capped)
    assert set(capped) == {e for e in full if e[-1] <= 8}


def test_split_min_innermost_and_its_fallback() -> None:
    k = SplitKnob("x", 12, 2, min_innermost=4)
    assert set(k.entities) == {(3, 4), (2, 6), (1, 12)}
    # impossible request: keep everything rather than an empty knob
    assert set(SplitKnob("x", 3, 2, min_innermost=4).entities) == {(3, 1), (1, 3)}


def test_split_single_output_and_bad_arguments() -> None:
    assert SplitKnob("x", 12, 1).entities == [(12,)]
    with pytest.raises(ValueError):
        SplitKnob("x", 0, 2)
    with pytest.raises(ValueError):
        SplitKnob("x", 8, 0)
    with pytest.raises(ValueError):
        SplitKnob("x", 8, 2, policy="fibonacci")


def test_split_encode_and_index_of() -> None:
    k = SplitKnob("x", 12, 2)
    assert k.width == 2
    assert k.encode((4, 3)) == pytest.approx([2.0, math.log2(3)])
    assert k.entities[k.index_of([4, 3])] == (4, 3)  # lists are accepted as tuples
    with pytest.raises(ValueError):
        k.index_of((5, 3))


# ---------------------------------------------------------------- other knobs
def test_choice_knob() -> None:
    k = ChoiceKnob("c", [16, 0, 64])
    assert k.entities == [16, 0, 64] and len(k) == 3
    assert k.index_of(64) == 2
    assert k.encode(64) == [64.0]  # numbers encode as themselves
    s = ChoiceKnob("s", ["a", "b", [1, 2]])
    assert s.entities[2] == (1, 2) and s.index_of([1, 2]) == 2
    assert s.encode("b") == [1.0]  # non-numbers encode as their position
    with pytest.raises(ValueError):
        ChoiceKnob("c", [])
    with pytest.raises(ValueError):
        k.index_of(5)


@pytest.mark.parametrize("axes", [1, 2, 3])
def test_annotate_at_most_one_vec_and_only_last(axes: int) -> None:
    cands = ("none", "unroll", "vec")
    ents = AnnotateKnob("a", axes, cands).entities
    assert len(ents) == len(set(ents))
    for e in ents:
        assert len(e) == axes
        assert e.count("vec") <= 1
        if "vec" in e:
            assert e[-1] == "vec"
    expected = {c for c in itertools.product(cands, repeat=axes)
                if c.count("vec") == 0 or (c.count("vec") == 1 and c[-1] == "vec")}
    assert set(ents) == expected
    assert len(ents) == 2 ** axes + 2 ** (axes - 1)


def test_annotate_rejects_unknown_annotation_and_encodes() -> None:
    with pytest.raises(ValueError):
        AnnotateKnob("a", 2, ("none", "tensorize"))
    k = AnnotateKnob("a", 2, ("none", "parallel", "vec"))
    assert ("parallel", "vec") in k.entities
    assert k.width == 2
    assert k.encode(("none", "vec")) == [0.0, 2.0]


def test_reorder_knob() -> None:
    k = ReorderKnob("r", 3)
    assert set(k.entities) == set(itertools.permutations(range(3))) and len(k) == 6
    r = ReorderKnob("r", 3, perms=[[2, 1, 0], [0, 1, 2]])
    assert r.entities == [(2, 1, 0), (0, 1, 2)]
    assert r.encode((2, 1, 0)) == [2.0, 1.0, 0.0]
    with pytest.raises(ValueError):
        ReorderKnob("r", 3, perms=[[0, 1, 1]])
    with pytest.raises(ValueError):
        ReorderKnob("r", 3, perms=[[0, 1]])


@pytest.mark.parametrize("knob", [
    SplitKnob("s", 24, 3, policy="power2", max_innermost=8, min_innermost=2),
    SplitKnob("f", 36, 2),
    ChoiceKnob("c", [0, 16, "x", [1, 2]]),
    AnnotateKnob("a", 3, ("none", "parallel", "vec")),
    ReorderKnob("r", 3, perms=[[2, 0, 1], [1, 0, 2]]),
])
def test_knob_json_round_trip(knob) -> None:
    back = knob_from_json(json.loads(json.dumps(knob.to_json())))
    assert type(back) is type(knob) and back.name == knob.name
    assert back.entities == knob.entities


def test_knob_from_json_unknown_kind() -> None:
    with pytest.raises(ValueError):
        knob_from_json({"kind": "tensorize", "name": "t"})


# ---------------------------------------------------------------- ConfigSpace indexing
def test_len_is_product_of_knob_sizes() -> None:
    s = small_space()
    assert s.dims == [6, 3, 6, 6]
    assert len(s) == 6 * 3 * 6 * 6
    assert len(ConfigSpace()) == 1 and ConfigSpace().get(0).knobs == {}


def test_get_index_of_round_trip_every_index() -> None:
    s = small_space()
    seen = set()
    for i in range(len(s)):
        c = s.get(i)
        assert c.index == i
        assert s.index_of(c.knobs) == i
        seen.add(tuple(sorted((k, str(v)) for k, v in c.knobs.items())))
    assert len(seen) == len(s)  # every index is a different point


def test_positions_from_positions_round_trip_and_mixed_radix() -> None:
    s = small_space()
    for i in range(len(s)):
        c = s.get(i)
        pos = s.positions(c)
        assert all(0 <= p < d for p, d in zip(pos, s.dims))
        assert s.from_positions(pos).index == i
        for k, p in zip(s.knobs, pos):
            assert c[k.name] == k.entities[p]
    # first knob least significant
    assert s.positions(s.get(1)) == [1, 0, 0, 0]
    assert s.positions(s.get(6)) == [0, 1, 0, 0]
    assert s.positions(s.get(18)) == [0, 0, 1, 0]


@pytest.mark.parametrize("bad", [-1, 648, 10_000])
def test_get_out_of_range(bad: int) -> None:
    with pytest.raises(IndexError):
        small_space().get(bad)


def test_from_positions_rejects_out_of_range_position() -> None:
    s = small_space()
    with pytest.raises((IndexError, ValueError)):
        s.from_positions([6, 0, 0, 0])  # knob 'tile' has 6 entities: positions 0..5


def test_index_of_errors() -> None:
    s = small_space()
    with pytest.raises(ValueError):
        s.index_of({"tile": (3, 4), "c": 1})  # missing knobs
    knobs = dict(s.get(0).knobs)
    knobs["c"] = 7
    with pytest.raises(ValueError):
        s.index_of(knobs)


def test_duplicate_knob_name_rejected() -> None:
    s = ConfigSpace()
    s.define_choice("x", [1, 2])
    with pytest.raises(ValueError):
        s.define_split("x", 8, 2)
    with pytest.raises(ValueError):
        ConfigSpace([ChoiceKnob("a", [1]), ChoiceKnob("a", [2])])


def test_define_unroll_adds_autotvm_knobs() -> None:
    s = ConfigSpace()
    s.define_unroll()
    assert [k.name for k in s.knobs] == ["auto_unroll_max_step", "unroll_explicit"]
    assert s.knob("auto_unroll_max_step").entities == list(DEFAULT_UNROLL_STEPS)
    assert s.knob("unroll_explicit").entities == [0, 1]
    with pytest.raises(KeyError):
        s.knob("tile_x")


# ---------------------------------------------------------------- sampling
@pytest.mark.parametrize("make", [small_space, big_space])
def test_sample_distinct_valid(make) -> None:
    s = make()
    got = s.sample(random.Random(3), 50)
    assert len(got) == 50
    assert len({c.index for c in got}) == 50
    for c in got:
        assert 0 <= c.index < len(s) and s.is_valid(c)
        assert s.get(c.index).knobs == c.knobs


@pytest.mark.parametrize("make", [small_space, big_space])
def test_sample_reproducible_with_seed(make) -> None:
    s = make()
    a = [c.index for c in s.sample(random.Random(11), 40)]
    b = [c.index for c in s.sample(random.Random(11), 40)]
    c = [c.index for c in s.sample(random.Random(12), 40)]
    assert a == b
    assert a != c


@pytest.mark.parametrize("make", [small_space, big_space])
def test_sample_respects_exclude(make) -> None:
    s = make()
    exclude = set(range(0, len(s), 20))  # small enough for the big space's rejection path
    got = s.sample(random.Random(0), 100, exclude=exclude)
    assert len(got) == 100
    assert not {c.index for c in got} & exclude


def test_sample_more_than_available_returns_all_remaining() -> None:
    s = small_space()
    exclude = set(range(600))
    got = s.sample(random.Random(0), 1000, exclude=exclude)
    assert sorted(c.index for c in got) == list(range(600, len(s)))


def test_constraints_filter_sampling_iteration_and_neighbours() -> None:
    s = small_space()
    s.add_constraint("no_c2", lambda c: c["c"] != 2)
    s.add_constraint("inner_small", lambda c: c["tile"][1] <= 4)
    ok = lambda c: c["c"] != 2 and c["tile"][1] <= 4  # noqa: E731
    assert len(s) == 648  # len counts every point
    valid = list(s)
    assert [c.index for c in valid] == [i for i in range(len(s)) if ok(s.get(i))]
    assert len(valid) == 648 * 2 // 3 * 4 // 6  # tile inner in {1,2,3,4}: 4 of 6
    assert all(ok(c) for c in s.sample(random.Random(1), 500))
    assert len(s.sample(random.Random(1), 1000)) == len(valid)
    for c in valid[::37]:
        assert all(ok(n) for n in s.neighbors(c))
    assert s.is_valid(s.get(0)) and not s.is_valid(s.get(6))  # get(6) has c == 2


def test_sample_big_space_with_constraint() -> None:
    s = big_space()
    s.add_constraint("sparse", lambda c: c["a"] % 10 == 0)
    got = s.sample(random.Random(5), 30)
    assert len(got) == 30 and all(c["a"] % 10 == 0 for c in got)


# ---------------------------------------------------------------- neighbours
def test_neighbors_one_knob_one_step() -> None:
    s = small_space()
    for i in range(0, len(s), 7):
        c = s.get(i)
        nbrs = s.neighbors(c)
        assert len({n.index for n in nbrs}) == len(nbrs)
        for n in nbrs:
            diff = differing_knobs(s, c, n)
            assert len(diff) == 1 and diff[0][1] == 1, (c, n)
        # and every such point is there
        pos = s.positions(c)
        expected = sum((p > 0) + (p < d - 1) for p, d in zip(pos, s.dims))
        assert len(nbrs) == expected


def test_neighbors_of_corner() -> None:
    s = small_space()
    nbrs = s.neighbors(s.get(0))
    assert sorted(s.positions(n) for n in nbrs) == sorted(
        [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])


# ---------------------------------------------------------------- vectors
def test_vector_and_vector_width() -> None:
    s = small_space()
    assert s.vector_width == 2 + 1 + 2 + 3
    knobs = {"tile": (3, 4), "c": 2, "ann": ("unroll", "vec"), "ord": (2, 0, 1)}
    c = s.get(s.index_of(knobs))
    v = c.vector()
    assert isinstance(v, np.ndarray) and v.dtype == np.float32 and v.shape == (8,)
    np.testing.assert_allclose(v, [math.log2(3), 2.0, 2.0, 1.0, 2.0, 2.0, 0.0, 1.0], rtol=1e-6)
    vecs = {tuple(s.get(i).vector()) for i in range(len(s))}
    assert len(vecs) == len(s)  # distinct configs, distinct vectors


# ---------------------------------------------------------------- JSON
def test_config_json_round_trip() -> None:
    s = small_space()
    for i in range(0, len(s), 13):
        c = s.get(i)
        d = json.loads(json.dumps(c.to_json()))
        assert d["index"] == i
        back = s.config_from_json(d)
        assert back == c and back.knobs == c.knobs
    assert s.config_from_json({"index": 5}) == s.get(5)


def test_config_from_json_knobs_win_over_index() -> None:
    s = small_space()
    d = s.get(100).to_json()
    d["index"] = 3
    assert s.config_from_json(d).index == 100


def test_space_json_round_trip() -> None:
    s = small_space()
    s.define_unroll()
    s.add_constraint("c_not_2", lambda c: c["c"] != 2)
    d = json.loads(json.dumps(s.to_json()))
    assert d["constraints"] == ["c_not_2"]
    back = ConfigSpace.from_json(d)
    assert [k.name for k in back.knobs] == [k.name for k in s.knobs]
    assert [k.kind for k in back.knobs] == [k.kind for k in s.knobs]
    assert [k.entities for k in back.knobs] == [k.entities for k in s.knobs]
    assert len(back) == len(s)
    for i in range(0, len(s), 97):
        assert back.get(i).knobs == s.get(i).knobs
