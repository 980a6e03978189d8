"""Chameleon's adaptive sampling: measure cluster representatives, as many as the candidates need.

(Ahn et al., ICLR 2020, §4 and Algorithm 1.)

1. **Clustering.** K-means (scikit-learn) runs over the candidates' knob positions (each knob
   scaled to [0, 1], so a knob with many values does not outweigh the rest) for k in
   ``range(k_min, k_max)``. The loop stops at the first k whose loss (inertia) satisfies
   ``threshold * loss >= previous loss`` (one more cluster no longer divides the loss by
   ``threshold``), and keeps that k's clustering: lines 4-5 assign before they test. Without a
   break the last k is kept.
2. **The batch.** (k is also kept at most the ``n`` asked for.) Each centroid, rounded to the nearest knob positions, is a config to measure;
   a centroid that rounds to an invalid config is snapped to its cluster's member nearest to
   it. So the batch size is k: it adapts to how spread the candidates are.
3. **Sample synthesis** (line 9). A centroid whose config was already measured (or already
   taken by another centroid) is replaced by the mode config: the most frequent value of each
   knob among the candidates. *Our extension*: when the mode too was measured (or taken, or
   breaks a constraint), the next most likely distinct config is taken, in order of the product
   of the knobs' value frequencies among the candidates (an exact best-first enumeration);
   when none is left the batch is one shorter.

Guard: with at most ``k_min`` distinct candidates (CPU spaces are far smaller than the paper's
GPU space of about 10^10 configs, and an explorer's candidates may repeat) there is nothing to
cluster, and every distinct unmeasured candidate is the batch, best-scored first.

The scores are not used by the clustering (Chameleon's explorer has already concentrated the
candidates where the cost model predicts well); they order the batch only.
"""
from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..space import Config, ConfigSpace
from ..utils.options import make_options
from .selectors import Selector

#: Algorithm 1's settings: k in range(8, 64), threshold 2.5.
K_MIN, K_MAX, THRESHOLD = 8, 64, 2.5
#: How many configs the next-most-likely enumeration may try before giving up on a centroid.
SYNTHESIS_TRIES = 4096


@dataclass(frozen=True)
class AdaptiveOptions:
    """``k`` tried over ``range(k_min, k_max)``; ``threshold`` of the loss-ratio stop; ``n_init``
    k-means restarts per k; ``next_likely``: our synthesis extension (see the module docstring)."""

    k_min: int = K_MIN
    k_max: int = K_MAX
    threshold: float = THRESHOLD
    n_init: int = 1
    next_likely: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.k_min < self.k_max:
            raise ValueError("k_min must be at least 1 and below k_max")
        if self.threshold <= 0 or self.n_init < 1:
            raise ValueError("threshold must be positive and n_init at least 1")


@dataclass
class AdaptiveReport:
    """What the last call did: the k kept, the losses by k, the candidates clustered, and how
    many centroids were measured as such, replaced by the mode, or by a next-likely config."""

    k: int = 0
    losses: dict[int, float] = field(default_factory=dict)
    candidates: int = 0
    centroids: int = 0
    mode: int = 0
    next_likely: int = 0
    dropped: int = 0


def choose_k(x: np.ndarray, k_min: int, k_max: int, threshold: float, seed: int, n_init: int = 1
             ) -> tuple[int, np.ndarray, np.ndarray, dict[int, float]]:
    """Algorithm 1's loop over distinct rows ``x``: ``(k, centroids, labels, losses by k)``."""
    from sklearn.cluster import KMeans

    previous = math.inf
    kept: tuple[int, np.ndarray, np.ndarray] | None = None
    losses: dict[int, float] = {}
    for k in range(k_min, max(k_min + 1, min(k_max, len(x) + 1))):
        km = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(x)
        losses[k] = float(km.inertia_)
        kept = (k, km.cluster_centers_, km.labels_)
        if threshold * km.inertia_ >= previous:
            break
        previous = km.inertia_
    assert kept is not None
    return kept[0], kept[1], kept[2], losses


def likely_configs(pos: np.ndarray) -> Iterator[tuple[int, ...]]:
    """Knob positions in order of decreasing likelihood under each knob's value frequencies in
    ``pos`` (independent knobs): first the mode config, then the next most likely, and so on
    (best-first over the product of the per-knob frequency rankings)."""
    ranked = []
    for j in range(pos.shape[1]):
        counts = Counter(int(v) for v in pos[:, j]).most_common()
        total = sum(c for _, c in counts)
        ranked.append([(v, -math.log(c / total)) for v, c in counts])
    first = (0,) * len(ranked)
    heap = [(sum(r[0][1] for r in ranked), first)]
    seen = {first}
    while heap:
        cost, ranks = heapq.heappop(heap)
        yield tuple(ranked[j][r][0] for j, r in enumerate(ranks))
        for j, r in enumerate(ranks):
            if r + 1 < len(ranked[j]):
                nxt = ranks[:j] + (r + 1,) + ranks[j + 1:]
                if nxt not in seen:
                    seen.add(nxt)
                    heapq.heappush(heap, (cost - ranked[j][r][1] + ranked[j][r + 1][1], nxt))


class AdaptiveSampling(Selector):
    """Chameleon's adaptive sampling and sample synthesis (module docstring). The batch size is
    its own choice, up to ``n``: :attr:`adaptive` tells the tuners and the contract test so."""

    name = "adaptive"
    Options = AdaptiveOptions
    adaptive = True

    def __init__(self, options: AdaptiveOptions | Mapping[str, Any] | None = None) -> None:
        self.options = make_options(AdaptiveOptions, options, owner="selector 'adaptive'")
        self.last = AdaptiveReport()
        self.history: list[AdaptiveReport] = []

    def report(self) -> dict[str, Any]:
        """The batch size chosen for each plan (its ``k``)."""
        return {"k": [r.k for r in self.history]}

    def __call__(self, candidates: Sequence[Config], scores: np.ndarray, n: int, context: Any) -> list[Config]:
        o = self.options
        space: ConfigSpace = context.space
        exclude = context.exclude
        report = AdaptiveReport(candidates=len(candidates))
        self.last = report
        self.history.append(report)
        if n <= 0 or not candidates:
            return []
        scores = np.asarray(scores, dtype=np.float64)
        order = np.argsort(-scores, kind="stable")
        pos = np.array([space.positions(candidates[i]) for i in order], dtype=np.int64).reshape(len(order), -1)
        distinct, first = np.unique(pos, axis=0, return_index=True)
        if len(distinct) <= o.k_min:  # the guard: nothing to cluster
            batch: list[Config] = []
            for i in sorted(first):
                c = candidates[order[i]]
                if c.index not in exclude and c.index not in {b.index for b in batch}:
                    batch.append(c)
            report.k = len(batch)
            return batch[:n]
        dims = np.array(space.dims, dtype=np.int64)
        scale = np.maximum(dims - 1, 1).astype(np.float64)
        x = distinct / scale
        k, centers, labels, report.losses = choose_k(x, o.k_min, min(o.k_max, n + 1), o.threshold,
                                                     seed=context.rng.randrange(2**31), n_init=o.n_init)
        report.k = k
        batch, taken = [], set()
        synth = _Synthesis(pos, o.next_likely)
        for c in range(k):
            snapped = np.clip(np.rint(centers[c] * scale), 0, dims - 1).astype(np.int64)
            config = space.from_positions([int(v) for v in snapped])
            if not space.is_valid(config):  # the cluster's member nearest to its centroid
                members = np.nonzero(labels == c)[0]
                near = members[np.argmin(((x[members] - centers[c]) ** 2).sum(axis=1))]
                config = space.from_positions([int(v) for v in distinct[near]])
            if config.index not in exclude and config.index not in taken:
                report.centroids += 1
            else:  # sample synthesis
                config = synth.next(space, exclude | taken, report)
                if config is None:
                    report.dropped += 1
                    continue
            taken.add(config.index)
            batch.append(config)
        return batch[:n]


class _Synthesis:
    """Line 9's replacement configs for one call: the mode config, then (our extension, when
    ``next_likely``) the next most likely ones, each offered once."""

    def __init__(self, pos: np.ndarray, next_likely: bool) -> None:
        self.pos = pos
        self.next_likely = next_likely
        self.order: Iterator[tuple[int, ...]] | None = None
        self.yielded = 0  # configs taken from the order so far (the first is the mode)

    def next(self, space: ConfigSpace, unavailable: set[int], report: AdaptiveReport) -> Config | None:
        if self.order is None:
            self.order = likely_configs(self.pos)
        limit = SYNTHESIS_TRIES if self.next_likely else 1
        while self.yielded < limit:
            positions = next(self.order, None)
            if positions is None:
                return None
            rank = self.yielded
            self.yielded += 1
            config = space.from_positions(list(positions))
            if config.index in unavailable or not space.is_valid(config):
                continue
            if rank == 0:
                report.mode += 1
            else:
                report.next_likely += 1
            return config
        return None
