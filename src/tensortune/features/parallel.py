"""Feature extraction spread over worker processes, for searches that score thousands of candidates.

Loop-AST and curve features lower each candidate's schedule (milliseconds each); a search over a
pre-trained model (One-Shot Tuner: 512 annealing chains) asks for tens of thousands. A
:class:`ParallelExtractor` keeps one persistent worker process per core (the measurement layer's
:class:`~tensortune.measure.pool.Worker`), splits the candidates it has not seen between them,
and caches every row like any extractor. A worker that fails (crash, timeout) is answered by
extracting its share here, so the search goes on.
"""
from __future__ import annotations

import atexit
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..space import Config
from .base import DEFAULT_CACHE_SIZE, CandidateCache, pad_rows

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: Seconds a worker may take for its share of one call.
CALL_TIMEOUT = 900.0
#: Below this many new candidates a call extracts in this process (workers cost a round trip).
MIN_PARALLEL = 16

_POOL: list[Any] = []
_POOL_LOCK = threading.Lock()
_TASKS: dict[str, Any] = {}  # worker side: tasks by their JSON text
_EXTRACTORS: dict[str, Any] = {}  # worker side: extractors by name


def _rows_in_worker(task_json: str, name: str, indices: list[int]) -> np.ndarray:
    """Worker side: the rows of ``indices`` of the task given as JSON text."""
    import json

    from ..task import Task
    from . import get_extractor

    task = _TASKS.get(task_json)
    if task is None:
        if len(_TASKS) > 64:
            _TASKS.clear()
        task = _TASKS[task_json] = Task.from_json(json.loads(task_json))
    ex = _EXTRACTORS.get(name) or _EXTRACTORS.setdefault(name, get_extractor(name, cache_size=0))
    return pad_rows([ex.row(task, task.space.get(i)) for i in indices])


def _workers(n: int) -> list[Any]:
    """``n`` shared worker processes (started on first use, stopped at exit)."""
    from ..measure.pool import Worker

    with _POOL_LOCK:
        new = [Worker() for _ in range(n - len(_POOL))]
        if new:  # each start imports TVM (seconds): start them side by side
            with ThreadPoolExecutor(len(new)) as ex:
                list(ex.map(lambda w: w.start(), new))
            _POOL.extend(new)
        return _POOL[:n]


@atexit.register
def _close_pool() -> None:
    for w in _POOL:
        w.close()
    _POOL.clear()


class ParallelExtractor:
    """The extractor called ``name`` run in ``workers`` processes (default: one per core)."""

    def __init__(self, name: str = "curve", workers: int | None = None, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        from . import get_extractor

        self.name = name
        self.local = get_extractor(name, cache_size=0)
        self.workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
        self.cache = CandidateCache(cache_size)
        self.fallbacks = 0  # worker shares extracted here after a worker failed

    def extract(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        """Rows for ``configs`` (zero-padded to the longest), each extracted once."""
        rows: dict[int, np.ndarray] = {}
        missing = []
        for c in configs:
            r = self.cache.peek(task, c)
            if r is None:
                missing.append(c)
            else:
                rows[c.index] = r
        missing = list({c.index: c for c in missing}.values())
        for c, r in zip(missing, self._extract(task, missing)):
            rows[c.index] = self.cache.get(task, c, lambda r=r: r)
        return pad_rows([rows[c.index] for c in configs])

    def _extract(self, task: Task, configs: list[Config]) -> list[np.ndarray]:
        if len(configs) < MIN_PARALLEL or self.workers == 1:
            return [self.local.row(task, c) for c in configs]
        pool = _workers(self.workers)
        parts = [configs[i::len(pool)] for i in range(len(pool))]

        def run(worker: Any, part: list[Config]) -> list[np.ndarray]:
            out = worker.call(_rows_in_worker, (task.json_text, self.name, [c.index for c in part]), CALL_TIMEOUT)
            if out.status == "ok":
                return list(out.value)
            self.fallbacks += 1
            return [self.local.row(task, c) for c in part]

        with ThreadPoolExecutor(len(pool)) as ex:
            results = list(ex.map(run, pool, parts))
        out: list[np.ndarray] = [np.zeros(0)] * len(configs)
        for w, res in enumerate(results):
            for j, r in enumerate(res):
                out[w + j * len(pool)] = np.asarray(r, dtype=np.float32)
        return out
