"""Feature extractors: a candidate (task, config) to a fixed-length numeric vector.

Every extractor caches per ``(workload_key, config index)``: the search scores the same
configs many times and a config's features never change.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..space import Config

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: Entries kept per extractor cache (a few MB of float32 rows).
DEFAULT_CACHE_SIZE = 200_000


@dataclass
class LoopTree:
    """The loop AST of a scheduled candidate, for tree-structured models.

    ``ctx[k]`` is the context vector of loop ``k`` (see ``features.loop_ast``), ``parent[k]``
    the index of its enclosing loop (-1 for outermost loops). Nodes are in pre-order, so a
    parent's index is always smaller than its children's.
    """

    ctx: np.ndarray  # float32 [n_loops, CTX_DIM]
    parent: np.ndarray  # int64 [n_loops]

    def __len__(self) -> int:
        return int(self.ctx.shape[0])


class CandidateCache:
    """A bounded LRU map keyed by ``(workload_key, config index)``: what is derived from a
    candidate (features, loop trees) never changes, and the search asks for it again and again."""

    def __init__(self, size: int = DEFAULT_CACHE_SIZE) -> None:
        self.size = int(size)
        self._items: OrderedDict[tuple[str, int], Any] = OrderedDict()

    def get(self, task: Task, config: Config, make: Callable[[], Any]) -> Any:
        """The cached value for the candidate, computing it with ``make()`` on a miss."""
        key = (task.workload_key, config.index)
        value = self._items.get(key)
        if value is None:
            value = make()
            self._items[key] = value
            if len(self._items) > self.size:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(key)
        return value

    def peek(self, task: Task, config: Config) -> Any:
        """The cached value for the candidate, or None (the entry's age is left as it is)."""
        return self._items.get((task.workload_key, config.index))

    def clear(self) -> None:
        """Forget everything."""
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class FeatureExtractor(ABC):
    """Maps candidates to rows of a float32 matrix; subclasses implement :meth:`extract_one`."""

    name: str = ""

    def __init__(self, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        self.cache = CandidateCache(cache_size)

    @abstractmethod
    def extract_one(self, task: Task, config: Config) -> np.ndarray:
        """Feature vector of one candidate (1-D float32; length may depend on the task)."""

    def extract(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        """Rows for ``configs`` (zero-padded to the longest row), cached per config."""
        return pad_rows([self.cache.get(task, c, lambda c=c: self.row(task, c)) for c in configs])

    def row(self, task: Task, config: Config) -> np.ndarray:
        """:meth:`extract_one` as float32, or an empty row (zeros once padded) for a config the
        template cannot schedule: the search goes on, and if the config is picked its build
        fails and is recorded as an ``instantiation`` error like any other fault."""
        try:
            return np.asarray(self.extract_one(task, config), dtype=np.float32)
        except Exception:  # noqa: BLE001 - a config that cannot be scheduled scores as empty
            return np.zeros(0, dtype=np.float32)


def pad_rows(rows: Sequence[np.ndarray], width: int | None = None) -> np.ndarray:
    """Stack 1-D rows into a matrix, zero-padding (or truncating) to ``width`` (default: longest)."""
    width = max((len(r) for r in rows), default=0) if width is None else width
    out = np.zeros((len(rows), width), dtype=np.float32)
    for i, r in enumerate(rows):
        n = min(len(r), width)
        out[i, :n] = r[:n]
    return out


class KnobFeatures(FeatureExtractor):
    """The config vector itself (``ConfigSpace.vectorize``): cheap, task-specific."""

    name = "knob"

    def extract_one(self, task: Task, config: Config) -> np.ndarray:
        return task.space.vectorize(config)

    def extract(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        # vectorising is cheaper than a cache lookup
        return pad_rows([task.space.vectorize(c) for c in configs])
