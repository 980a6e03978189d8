"""The timing protocol of whole callables (a compiled model, a framework's inference, a kernel
wrapped as a callable): how every latency tensortune reports beside another is measured.

Each system is warmed up (called for ``warmup_s``, at least once: a fresh process's first tenths
of a second of parallel runs read slow), then measured in ``rounds`` rounds; inside a round the
systems are timed one after the other (never concurrently), in an order rotated each round, and
each round contributes the median of its runs. Reported figures are over those per-round
medians, so slow machine drift (thermal, other load) is shared by all systems instead of
favouring one. :class:`PairedTiming` times successive builds of one model beside each other.

It imports neither PyTorch nor TVM: the benchmarks, the in-model check, the survey scheduler and
the race all time through it.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np

from ..utils.warmup import warm_up

DEFAULT_MIN_TIME_S: float = 0.2
"""Minimum measuring time of one :func:`time_callable` call (one system in one round)."""
DEFAULT_MAX_RUNS: int = 1000
"""Maximum timed runs of one :func:`time_callable` call."""
DEFAULT_ROUNDS: int = 5
"""Rounds of :func:`interleaved_latency`."""
DEFAULT_WARMUP_S: float = 0.3
"""Untimed calls of each system before the rounds, in seconds (at least one call): the first tenths
of a second of parallel runs in a fresh process read up to 2x slow (the runner's
:attr:`~tensortune.measure.MeasureOptions.warmup_s`)."""
PAIRED_ROUNDS: int = 5
"""Rounds of :class:`PairedTiming`: each the model beside the one timed before it."""



@dataclass
class Latency:
    """Latency of one system in milliseconds, over ``samples`` per-round medians."""

    median_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    max_ms: float
    samples: int

    def spread(self) -> float:
        """Interquartile range relative to the median, ``(p75 - p25) / median`` (0 for a zero median and range)."""
        iqr = self.p75_ms - self.p25_ms
        if self.median_ms <= 0:
            return 0.0 if iqr == 0 else math.inf
        return iqr / self.median_ms

    def to_json(self) -> dict:
        """The fields as a dict, plus ``spread``."""
        d = asdict(self)
        spread = self.spread()
        d["spread"] = spread if math.isfinite(spread) else None
        return d

    @classmethod
    def from_samples_s(cls, samples_s: Sequence[float]) -> Latency:
        """Summarise per-round times given in seconds."""
        ms = np.asarray(samples_s, dtype=np.float64) * 1e3
        if ms.size == 0:
            raise ValueError("no latency samples")
        p25, med, p75 = np.percentile(ms, [25, 50, 75])
        return cls(median_ms=float(med), p25_ms=float(p25), p75_ms=float(p75),
                   min_ms=float(ms.min()), max_ms=float(ms.max()), samples=int(ms.size))


def time_callable(fn: Callable[[], None], min_time_s: float = DEFAULT_MIN_TIME_S,
                  max_runs: int = DEFAULT_MAX_RUNS) -> list[float]:
    """Time ``fn``: one untimed warm-up call, then repeated calls until ``min_time_s`` has elapsed.

    At least one and at most ``max_runs`` timed calls are made; elapsed time is wall time since the
    first timed call. Returns the seconds of each timed call (``time.perf_counter`` around the call).
    """
    if max_runs < 1:
        raise ValueError(f"max_runs must be >= 1, got {max_runs}")
    fn()
    times: list[float] = []
    clock = time.perf_counter
    start = clock()
    while True:
        t0 = clock()
        fn()
        t1 = clock()
        times.append(t1 - t0)
        if len(times) >= max_runs or t1 - start >= min_time_s:
            return times


def interleaved_rounds(fns: dict[str, Callable[[], None]], rounds: int = DEFAULT_ROUNDS,
                       min_time_s: float = DEFAULT_MIN_TIME_S,
                       warmup_s: float = DEFAULT_WARMUP_S) -> dict[str, list[float]]:
    """Per-round median seconds of several callables timed in interleaved rounds.

    Every callable is first called for ``warmup_s`` seconds (at least once, at most
    :data:`DEFAULT_MAX_RUNS` times; the warm-up). Then, in each of ``rounds`` rounds, every callable
    is timed with :func:`time_callable` (``min_time_s``), one after the other, never concurrently; the
    order is rotated by one each round (round ``r`` starts with system ``r mod n``, in ``fns`` order).
    Returns, per key of ``fns`` (in ``fns`` order), the median of each round's runs: entry ``r`` of
    two keys was measured moments apart, so their ratio is a paired comparison that a slow spell of a
    shared machine hits on both sides.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not fns:
        raise ValueError("no callables to time")
    names = list(fns)
    for name in names:  # warm-up: for warmup_s, at least one call and at most DEFAULT_MAX_RUNS
        warm_up(fns[name], warmup_s, DEFAULT_MAX_RUNS, clock=time.perf_counter)
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            per_round[name].append(float(np.median(time_callable(fns[name], min_time_s))))
    return per_round


def interleaved_latency(fns: dict[str, Callable[[], None]], rounds: int = DEFAULT_ROUNDS,
                        min_time_s: float = DEFAULT_MIN_TIME_S,
                        warmup_s: float = DEFAULT_WARMUP_S) -> dict[str, Latency]:
    """Latency of several systems measured in interleaved rounds, so machine drift hits all of them alike.

    The rounds are :func:`interleaved_rounds`'; each :class:`Latency` is over a system's ``rounds``
    per-round medians. Returns one :class:`Latency` per key of ``fns``, in ``fns`` order.
    """
    per_round = interleaved_rounds(fns, rounds, min_time_s, warmup_s)
    return {name: Latency.from_samples_s(per_round[name]) for name in per_round}


class Timed(NamedTuple):
    """One build's timing by :class:`PairedTiming`: its median ``seconds``; its ``change`` against
    the build timed before it (``now / before - 1``); ``vs_first``, its latency over the first
    build's (``now / first``), both timed in the same rounds. None for the first build."""

    seconds: float
    change: float | None
    vs_first: float | None


class PairedTiming:
    """Successive builds of one model timed in pairs: each beside the one timed before it (and
    beside the first one, e.g. the untuned model).

    Timed alone, minutes apart, the same model varies by about 10% on a 2-core host, more than a
    late round's real gain, and two processes read it up to 5% apart. Timed in interleaved rounds
    beside the build before it, the host's drift hits both, and their per-round ratio gives the
    change. The survey scheduler's rate rule and the race's ranking decide on that change, and the
    survey's speed-up goal on the ratio to the first build."""

    def __init__(self, rounds: int = PAIRED_ROUNDS, min_time_s: float = DEFAULT_MIN_TIME_S) -> None:
        self.rounds, self.min_time_s = rounds, min_time_s
        self._first: Callable[[], None] | None = None
        self._before: Callable[[], None] | None = None

    def time(self, fn: Callable[[], None]) -> Timed:
        """Time ``fn`` (one inference) beside the build timed before it and the first build (the
        medians of the per-round ratios); ``fn`` is the next one's pair."""
        fns = {"now": fn}
        if self._before is not None:
            fns["before"] = self._before
        if self._first is not None and self._first is not self._before:
            fns["first"] = self._first
        per_round = interleaved_rounds(fns, self.rounds, self.min_time_s)
        if self._first is None:
            self._first = fn
        self._before = fn

        def ratio(other: str) -> float | None:
            if other not in per_round:
                return None
            return float(np.median([a / b for a, b in zip(per_round["now"], per_round[other])]))

        change = ratio("before")
        return Timed(float(np.median(per_round["now"])), None if change is None else change - 1,
                     ratio("first") if "first" in per_round else change)


__all__ = ["DEFAULT_MAX_RUNS", "DEFAULT_MIN_TIME_S", "DEFAULT_ROUNDS", "DEFAULT_WARMUP_S", "PAIRED_ROUNDS", "Latency",
           "PairedTiming", "Timed", "interleaved_latency", "interleaved_rounds", "time_callable"]
