"""Explorers: propose candidates against a cost model's score, by short name.

A new explorer is a class with ``name``, an ``Options`` dataclass, a constructor
``(space, seed=0, options=None)`` and :meth:`~.base.Explorer.find_maximums`; add it to
:data:`EXPLORERS` below and the contract test (``tests/explore/test_explorer_contract.py``) checks it.
The baselines' random / grid / genetic search are whole tuners (``tuners.baselines``).
"""
from ..registry import Registry
from .base import Explorer, ScoreFn, make_explorer

#: Explorers by name: ``"module:Class"``, imported on first use.
EXPLORERS: Registry = Registry("explorer", {
    "sa": "tensortune.explore.annealing:SimulatedAnnealing",
    "random": "tensortune.explore.random:RandomSearch",
    "ga": "tensortune.explore.genetic:GeneticSearch",
    "ppo": "tensortune.explore.ppo:PPOSearch",
    "dqn": "tensortune.explore.dqn:DQNSearch",
})

__all__ = ["EXPLORERS", "Explorer", "ScoreFn", "make_explorer"]
