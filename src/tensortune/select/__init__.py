"""Selectors: which scored candidates to measure, by short name.

A new selector is a class with ``name``, an ``Options`` dataclass, a constructor
``(options=None)`` and ``__call__(candidates, scores, n, context)`` (:class:`Selector`); a
wrapper's constructor takes the inner selector first. A selector with ``adaptive = True``
(Chameleon's ``adaptive``) sizes its batch itself, up to ``n``, and picks representatives
rather than the best-scored candidates: a tuner then measures the batch as it comes. Add it to :data:`SELECTORS` or
:data:`SELECTOR_WRAPPERS` and the contract test (``tests/select/test_selector_contract.py``) checks it.
"""
from typing import Any, Mapping

from ..registry import Registry
from .selectors import (DIVERSITY_ALPHA, DIVERSITY_LAMBDA, EPSILON, Diversity, EpsilonGreedy, SelectContext, Selector,
                        TopK, diversity_select, epsilon_mix, objective, top_k)

#: Selectors by name.
SELECTORS: Registry = Registry("selector", {
    "top-k": "tensortune.select.selectors:TopK",
    "diversity": "tensortune.select.selectors:Diversity",
    "adaptive": "tensortune.select.adaptive:AdaptiveSampling",
})
#: Wrappers around a selector, by name.
SELECTOR_WRAPPERS: Registry = Registry("selector wrapper", {
    "epsilon-greedy": "tensortune.select.selectors:EpsilonGreedy",
    "cold-filter": "tensortune.select.cold:ColdFilter",
})


def make_selector(name: str, options: Mapping[str, Any] | Any = None) -> Selector:
    """The selector registered as ``name`` (options checked against its ``Options``)."""
    from ..utils.options import make_options

    cls = SELECTORS.get(name)
    return cls(make_options(cls.Options, options, owner=f"selector {name!r}"))


def wrap_selector(name: str, inner: Selector, options: Mapping[str, Any] | Any = None) -> Selector:
    """``inner`` wrapped by the wrapper registered as ``name``."""
    from ..utils.options import make_options

    cls = SELECTOR_WRAPPERS.get(name)
    return cls(inner, make_options(cls.Options, options, owner=f"selector wrapper {name!r}"))


__all__ = ["DIVERSITY_ALPHA", "DIVERSITY_LAMBDA", "EPSILON", "Diversity", "EpsilonGreedy", "SELECTORS",
           "SELECTOR_WRAPPERS", "SelectContext", "Selector", "TopK", "diversity_select", "epsilon_mix",
           "make_selector", "objective", "top_k", "wrap_selector"]
