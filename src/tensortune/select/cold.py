"""Trimmer's cold-candidate filter (selector wrapper ``cold-filter``, §III-C and §IV-B).

A *cold* candidate is a measured one whose latency lies above a LOESS regression of the
task's latencies over trial order (statsmodels' ``lowess`` on the log latency, ``frac`` 2/3;
a failed candidate is cold too): measuring it bought nothing. The filter keeps the measured
candidates' embeddings, the middle layer of Trimmer's latency network
(:mod:`tensortune.learn.coldnet`), and drops a proposed candidate whose ``k`` most
cosine-similar measured candidates are all cold, before it is measured; the inner selector then
supplies a fresh candidate in its place (it is asked again, the dropped ones removed from its
pool, until the batch is full or the pool is empty).

Choices the paper leaves open, ours: ``k`` = 5, and an inverse epsilon-greedy schedule: each
proposed candidate is checked with probability ``p_start`` x ``decay`` ^ u, u being the cost-model
updates of the task so far (one per plan), at least ``p_min`` (0.9, 0.8 and 0.1 by default):
the filter acts most while the cost model knows little and steps back as it learns. Nothing is
filtered before the task has ``min_measured`` successful measurements (LOESS needs them).

The network is trained once per database (and cached for the process) on the database's
records of every task; where it holds fewer than ``min_records`` (a model's first task starts from
an empty database), the datasets named in ``datasets`` add theirs, in equal shares: dataset
databases or shard folders, by default the One-Shot issue's datasets shipped in the package
(``tensortune/dataset/shipped/{conv2d,depthwise_conv2d,dense}``; measured on another
CPU, which the network takes as an input). Without records enough the filter passes everything
through and says so in :attr:`ColdFilter.notice`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from ..space import Config
from ..utils.options import make_options
from .selectors import Selector, SelectorWrapper

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database

#: Ours (see the module docstring): neighbours, schedule, history needed, records wanted.
COLD_K, P_START, P_DECAY, P_MIN, MIN_MEASURED, MIN_RECORDS = 5, 0.9, 0.8, 0.1, 16, 2000
LOESS_FRAC = 2.0 / 3.0
#: Times the inner selector is asked again for replacements of dropped candidates.
MAX_ROUNDS = 8
#: The dataset shard folders shipped as package data (``tensortune/dataset/shipped/``), the
#: filter's default supplement.
SHIPPED_ROOT = Path(__file__).resolve().parents[1] / "dataset" / "shipped"
SHIPPED_DATASETS = ("conv2d", "depthwise_conv2d", "dense")


def shipped_datasets() -> tuple[str, ...]:
    """The shipped dataset shard folders that exist (all of them in an install of the package)."""
    return tuple(str(SHIPPED_ROOT / name) for name in SHIPPED_DATASETS if (SHIPPED_ROOT / name).is_dir())


@dataclass(frozen=True)
class ColdFilterOptions:
    """``k`` neighbours; the schedule ``p_start`` x ``decay`` ^ updates, at least ``p_min``;
    ``min_measured`` successes before filtering; ``min_records`` wanted to train the network,
    ``datasets``: dataset database files or shard folders that add records where the tuning
    database has fewer (default: :func:`shipped_datasets`);
    ``loess_frac``: the LOESS span."""

    k: int = COLD_K
    p_start: float = P_START
    decay: float = P_DECAY
    p_min: float = P_MIN
    min_measured: int = MIN_MEASURED
    min_records: int = MIN_RECORDS
    datasets: tuple[str, ...] = field(default_factory=shipped_datasets)
    loess_frac: float = LOESS_FRAC

    def __post_init__(self) -> None:
        if self.k < 1 or self.min_measured < 3:
            raise ValueError("k must be at least 1 and min_measured at least 3")
        if not (0 <= self.p_min <= self.p_start <= 1 and 0 < self.decay <= 1):
            raise ValueError("need 0 <= p_min <= p_start <= 1 and 0 < decay <= 1")
        if not 0 < self.loess_frac <= 1:
            raise ValueError("loess_frac must lie in (0, 1]")


def cold_mask(costs: Sequence[float], frac: float = LOESS_FRAC) -> np.ndarray:
    """Which of a task's measured candidates (costs in trial order, ``inf`` = failed) are cold:
    failed, or above the LOESS fit of log latency over trial order."""
    from statsmodels.nonparametric.smoothers_lowess import lowess

    costs = np.asarray(costs, dtype=np.float64)
    ok = np.isfinite(costs) & (costs > 0)
    cold = ~ok
    if ok.sum() >= 3:
        x = np.nonzero(ok)[0].astype(np.float64)
        y = np.log(costs[ok])
        fit = lowess(y, x, frac=frac, it=0, return_sorted=False)
        cold[ok] = y > fit
    return cold


def _unit(e: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (cosine similarity is then a dot product)."""
    return e / (np.linalg.norm(e, axis=1, keepdims=True) + 1e-12)


_NETS: dict[tuple[str, int], Any] = {}  # (database path, records) -> trained network, per process


@functools.lru_cache(maxsize=None)
def _shard_records(folder: str, limit: int) -> tuple[Any, ...]:
    """A shard folder's first ``limit`` samples, read once per process: every task's tuner asks
    for the network, and a shipped folder does not change while it runs."""
    from ..learn.coldnet import records_from_shards

    return tuple(records_from_shards(folder, limit=limit))


def network_for(database: Database, options: ColdFilterOptions, seed: int = 0) -> tuple[Any, str]:
    """The latency network trained on ``database`` (plus ``options.datasets`` where it has fewer
    than ``min_records``), cached per database and record count; (None, why) when there are too
    few records."""
    from ..database import Database
    from ..learn.coldnet import records_from, train_coldnet

    samples = records_from([database])
    sources = [str(getattr(database, "path", "database"))]
    base, n = len(samples), len(options.datasets)
    for i, path in enumerate(options.datasets):  # equal shares of what the database lacks; a
        # dataset with fewer leaves the rest to the next
        want = base + math.ceil((options.min_records - base) * (i + 1) / n) - len(samples)
        if want <= 0:
            continue
        if Path(path).is_dir():
            samples += _shard_records(str(path), options.min_records)[:want]
        else:
            with Database(path, readonly=True) as extra:
                samples += records_from([extra], limit=want)
        sources.append(str(path))
    key = ("|".join(sources), len(samples))
    if key not in _NETS:
        try:
            _NETS[key] = train_coldnet(samples, seed=seed)
        except ValueError as e:
            return None, f"cold filter off: {e}"
    net = _NETS[key]
    r = net.report
    extra = f" ({len(samples) - base} from datasets)" if len(samples) > base else ""
    return net, f"cold filter on: network of {r.records} records{extra}, test Spearman {r.test_spearman:.2f}"


@dataclass
class ColdReport:
    """Per task: candidates checked and filtered."""

    checked: int = 0
    filtered: int = 0
    calls: int = 0


def filtered_total(reports: Iterable[dict[str, Any] | None]) -> int | None:
    """Candidates dropped over several tasks' cold-filter reports (each the ``cold_filter`` of a
    tuner's search report: task key -> ``ColdReport`` as a dict; None where the filter was off), or
    None when there are no reports at all (a tuner without the filter)."""
    reports = list(reports)
    return sum(r["filtered"] for rep in reports for r in (rep or {}).values()) if reports else None


class ColdFilter(SelectorWrapper):
    """Wrapper: the inner selector's batch without the candidates whose nearest measured
    neighbours were all cold (module docstring)."""

    name = "cold-filter"
    Options = ColdFilterOptions

    def __init__(self, inner: Selector, options: ColdFilterOptions | Mapping[str, Any] | None = None) -> None:
        super().__init__(inner)
        self.options = make_options(ColdFilterOptions, options, owner="selector wrapper 'cold-filter'")
        self.net: Any = None
        self._notice = "cold filter off: no database"
        self.reports: dict[str, ColdReport] = {}

    def begin(self, database: Database, seed: int = 0) -> None:
        """Train (or fetch) the network on ``database``'s records."""
        super().begin(database, seed)
        if self.net is None:
            self.net, self._notice = network_for(database, self.options, seed)

    @property
    def notice(self) -> str:
        return self._notice

    def report(self) -> dict[str, Any]:
        """The inner selector's account and, per task, the candidates checked and filtered."""
        return {**self.inner.report(), "cold_filter": {k: vars(r) for k, r in self.reports.items()},
                "cold_filter_notice": self._notice}

    def _measured(self, context: Any) -> tuple[np.ndarray, np.ndarray]:
        """The task's measured candidates as unit embeddings, and which of them are cold (once
        per call: the refill rounds reuse them)."""
        from ..learn.coldnet import sample_of

        hist = context.history
        emb = self.net.embed([sample_of(context.task, c) for c in hist.configs])
        return _unit(emb), cold_mask(hist.costs, self.options.loess_frac)

    def _keep(self, candidates: Sequence[Config], context: Any, report: ColdReport,
              measured: tuple[np.ndarray, np.ndarray]) -> list[bool]:
        """Per candidate: False when it is checked and its k nearest measured are all cold."""
        from ..learn.coldnet import sample_of

        o = self.options
        p = max(o.p_min, o.p_start * o.decay ** report.calls)
        check = [context.rng.random() < p for _ in candidates]
        if not any(check):
            return [True] * len(candidates)
        emb_m, cold = measured
        emb_c = self.net.embed([sample_of(context.task, c) for c, chk in zip(candidates, check) if chk])
        sims = _unit(emb_c) @ emb_m.T
        k = min(o.k, len(emb_m))
        near = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        all_cold = cold[near].all(axis=1)
        keep, j = [], 0
        for chk in check:
            if chk:
                report.checked += 1
                keep.append(not bool(all_cold[j]))
                j += 1
            else:
                keep.append(True)
        return keep

    def __call__(self, candidates: Sequence[Config], scores: np.ndarray, n: int, context: Any) -> list[Config]:
        hist = context.history
        ok = 0 if hist is None else sum(1 for c in hist.costs if math.isfinite(c))
        if self.net is None or hist is None or ok < self.options.min_measured or context.task is None:
            return self.inner(candidates, scores, n, context)
        key = context.task.workload_key
        report = self.reports.setdefault(key, ColdReport())
        pool = list(candidates)
        pool_scores = np.asarray(scores, dtype=np.float64)
        batch: list[Config] = []
        dropped: set[int] = set()
        measured = self._measured(context)
        for _ in range(MAX_ROUNDS):
            if len(batch) >= n or not pool:
                break
            want = n - len(batch)
            chosen = {b.index for b in batch}
            picked = [c for c in self.inner(pool, pool_scores, want, context)
                      if c.index not in dropped and c.index not in chosen]
            if not picked:
                break
            keep = self._keep(picked, context, report, measured)
            batch += [c for c, k in zip(picked, keep) if k]
            gone = {c.index for c, k in zip(picked, keep) if not k}
            report.filtered += len(gone)
            dropped |= gone
            taken = gone | {c.index for c in batch}
            mask = [c.index not in taken for c in pool]
            pool = [c for c, m in zip(pool, mask) if m]
            pool_scores = pool_scores[np.asarray(mask, dtype=bool)] if len(mask) else pool_scores
        report.calls += 1
        return batch
