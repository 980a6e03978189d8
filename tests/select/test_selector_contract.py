"""The selector contract, run over every registered selector and every wrapper around each.

A selector picks at most ``n`` distinct valid configs from the scored candidates (a wrapper may
swap some for unmeasured configs of the space), never a measured one, the best-scored candidate
among them, and the same batch for the same random state. An adaptive selector (``adaptive =
True``: it sizes the batch itself and picks representatives, which may be synthesised configs)
is held to the same except the best-scored candidate and the batch size. No TVM is involved.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from tensortune.select import SELECTOR_WRAPPERS, SELECTORS, SelectContext, Selector, make_selector, wrap_selector
from tensortune.space import ConfigSpace
from tensortune.utils.options import OptionError


def space() -> ConfigSpace:
    s = ConfigSpace()
    s.define_choice("a", list(range(6)))
    s.define_choice("b", list(range(6)))
    s.define_choice("c", list(range(4)))
    return s


def compositions() -> list[tuple[str, str | None]]:
    return [(s, None) for s in SELECTORS.names()] + [(s, w) for w in SELECTOR_WRAPPERS.names() for s in SELECTORS.names()]


def build(sel: str, wrapper: str | None) -> Selector:
    inner = make_selector(sel)
    return inner if wrapper is None else wrap_selector(wrapper, inner)


@pytest.fixture(params=compositions(), ids=lambda p: p[0] if p[1] is None else f"{p[1]}({p[0]})")
def composition(request) -> tuple[str, str | None]:
    return request.param


def pick(selector: Selector, seed: int, n: int = 16) -> tuple[list, list, set[int]]:
    sp = space()
    rng = np.random.default_rng(seed)
    measured = set(range(0, len(sp), 7))
    candidates = [c for c in sp if c.index not in measured][:60]
    scores = rng.random(len(candidates))
    ctx = SelectContext(sp, random.Random(seed), set(measured))
    return selector(candidates, scores, n, ctx), list(zip(candidates, scores)), measured


def test_contract(composition) -> None:
    sel, wrapper = composition
    s = build(sel, wrapper)
    assert isinstance(s, Selector)
    batch, scored, measured = pick(s, 0)
    idx = [c.index for c in batch]
    assert 0 < len(batch) <= 16 and len(set(idx)) == len(idx)
    assert not set(idx) & measured
    assert all(c.space.is_valid(c) for c in batch)
    if getattr(s, "adaptive", False):
        assert [c.index for c in pick(build(sel, wrapper), 0)[0]] == idx
        return
    best = max(scored, key=lambda t: t[1])[0]
    assert best.index in idx
    if wrapper is None:  # a plain selector chooses among the candidates, as many as asked
        assert set(idx) <= {c.index for c, _ in scored} and len(batch) == 16
    assert [c.index for c in pick(build(sel, wrapper), 0)[0]] == idx  # same random state, same batch


def test_fewer_candidates_than_asked(composition) -> None:
    sel, wrapper = composition
    sp = space()
    cands = [sp.get(i) for i in (1, 2, 3)]
    batch = build(sel, wrapper)(cands, np.array([0.1, 0.9, 0.5]), 8, SelectContext(sp, random.Random(0), set()))
    assert len({c.index for c in batch}) == len(batch) <= 8 and batch[0].index == 2


def test_unknown_options_are_refused() -> None:
    for name in SELECTORS.names():
        with pytest.raises(OptionError, match="unknown option 'nope'"):
            make_selector(name, {"nope": "1"})
    for name in SELECTOR_WRAPPERS.names():
        with pytest.raises(OptionError, match="unknown option 'nope'"):
            wrap_selector(name, make_selector("top-k"), {"nope": "1"})
