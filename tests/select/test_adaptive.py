"""Chameleon's adaptive sampling: Algorithm 1's k loop, centroids as the batch, sample synthesis."""
from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from tensortune.select import SelectContext, make_selector, wrap_selector
from tensortune.select.adaptive import choose_k, likely_configs
from tensortune.space import ConfigSpace


def space(constraint: bool = False) -> ConfigSpace:
    s = ConfigSpace()
    for name, n in (("a", 8), ("b", 8), ("c", 6)):
        s.define_choice(name, list(range(n)))
    if constraint:
        s.add_constraint("a_not_7", lambda c: c["a"] != 7)
    return s


def blobs(sp: ConfigSpace, centres: list[tuple[int, int, int]], per: int, rng: random.Random) -> list:
    """Candidates scattered one step around each centre."""
    out = {}
    for centre in centres:
        for _ in range(per):
            pos = [min(max(v + rng.choice((-1, 0, 1)), 0), d - 1) for v, d in zip(centre, sp.dims)]
            c = sp.from_positions(pos)
            out[c.index] = c
    return list(out.values())


def test_k_loop_stops_where_the_loss_no_longer_drops_by_the_threshold() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((200, 3))
    k, centers, labels, losses = choose_k(x, 8, 64, 2.5, seed=0)
    ks = sorted(losses)
    assert ks[0] == 8 and ks[-1] == k and len(centers) == k and set(labels) == set(range(k))
    for prev, cur in zip(ks, ks[1:-1]):  # every k before the last divided the loss by more than 2.5
        assert 2.5 * losses[cur] < losses[prev]
    if len(ks) > 1:  # the last one broke the loop, and its clustering is the one kept
        assert 2.5 * losses[k] >= losses[ks[-2]]
    # a tiny threshold never breaks: the loop runs to k_max - 1
    k2, _, _, losses2 = choose_k(x, 8, 14, 1e-9, seed=0)
    assert k2 == 13 and sorted(losses2) == list(range(8, 14))


def test_batch_is_the_snapped_centroids_and_adapts_to_the_candidates() -> None:
    sp = space()
    rng = random.Random(0)
    sel = make_selector("adaptive")
    sizes = []
    for n_blobs in (3, 12):
        centres = [tuple(rng.randrange(d) for d in sp.dims) for _ in range(n_blobs)]
        cands = blobs(sp, centres, 30, rng)
        batch = sel(cands, np.zeros(len(cands)), 64, SelectContext(sp, random.Random(1), set()))
        rep = sel.last
        assert len(batch) == rep.k == rep.centroids and rep.mode == rep.next_likely == 0
        assert len({c.index for c in batch}) == len(batch)
        sizes.append(len(batch))
    assert all(8 <= s < 64 for s in sizes)
    assert len(sel.history) == 2


def test_invalid_centroid_snaps_to_its_nearest_member() -> None:
    sp = space(constraint=True)
    rng = random.Random(3)
    cands = [c for c in blobs(sp, [(6, 2, 2), (6, 6, 4), (1, 1, 1), (2, 6, 0)], 40, rng) if sp.is_valid(c)]
    batch = make_selector("adaptive")(cands, np.zeros(len(cands)), 64, SelectContext(sp, random.Random(0), set()))
    assert batch and all(sp.is_valid(c) for c in batch)


def test_measured_centroids_are_replaced_by_the_mode_then_the_next_most_likely() -> None:
    sp = space()
    rng = random.Random(0)
    cands = blobs(sp, [(2, 2, 2), (5, 5, 3), (1, 6, 4), (6, 1, 1)], 60, rng)
    ctx = SelectContext(sp, random.Random(0), set())
    sel = make_selector("adaptive")
    first = sel(cands, np.zeros(len(cands)), 64, ctx)
    # measure every centroid of that batch: the same clustering must synthesise all of them
    ctx2 = SelectContext(sp, random.Random(0), {c.index for c in first})
    again = sel(cands, np.zeros(len(cands)), 64, ctx2)
    rep = sel.last
    assert rep.k == len(first) and rep.centroids == 0 and rep.mode == 1 and rep.next_likely == rep.k - 1
    pos = np.array([sp.positions(c) for c in cands])
    mode = [max(set(pos[:, j].tolist()), key=pos[:, j].tolist().count) for j in range(3)]
    assert sp.positions(again[0]) == mode  # the mode config first
    assert not {c.index for c in again} & ctx2.exclude and len({c.index for c in again}) == len(again)
    # without the extension only the mode is synthesised; the rest of the batch is dropped
    plain = make_selector("adaptive", {"next_likely": False})
    out = plain(cands, np.zeros(len(cands)), 64, SelectContext(sp, random.Random(0), {c.index for c in first}))
    assert len(out) == 1 and plain.last.dropped == plain.last.k - 1


def test_likely_configs_enumerate_by_decreasing_likelihood() -> None:
    pos = np.array([[0, 1], [0, 1], [0, 2], [1, 2], [0, 2], [2, 1]])
    order = list(likely_configs(pos))
    assert order[0] == (0, 1) or order[0] == (0, 2)  # knob 1 ties between 1 and 2
    p = [{v: list(pos[:, j]).count(v) / len(pos) for v in set(pos[:, j])} for j in range(2)]
    like = [math.prod(p[j][v] for j, v in enumerate(cfg)) for cfg in order]
    assert like == sorted(like, reverse=True)
    assert sorted(order) == sorted(itertools.product(sorted(p[0]), sorted(p[1])))


def test_few_distinct_candidates_are_measured_as_they_are() -> None:
    sp = space()
    cands = [sp.get(i) for i in (5, 9, 5, 12, 9)]
    out = make_selector("adaptive")(cands, np.array([0.1, 0.5, 0.1, 0.9, 0.5]), 64,
                                    SelectContext(sp, random.Random(0), {12}))
    assert [c.index for c in out] == [9, 5]


def test_epsilon_wrapper_keeps_the_adaptive_mark() -> None:
    assert wrap_selector("epsilon-greedy", make_selector("adaptive")).adaptive
    assert not getattr(wrap_selector("epsilon-greedy", make_selector("top-k")), "adaptive", False)
