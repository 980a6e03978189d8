"""Contention on the measuring machine, judged beside every timed candidate.

Two signals, both taken by the runner process around each candidate's timing:

- **probe**: a fixed register-only FMA kernel (:mod:`tensortune.measure.peak` style, on one
  thread) timed right after the candidate, for about 20 ms (long enough to span
  several of the scheduler's time slices). Its time moves with whatever slows the cores: another
  process on them, a hypervisor's steal, a clock that dropped. Judged as a ratio to the quiet
  value, the fastest probe of the last :data:`QUIET_HORIZON_S` seconds (a host that changes state
  for minutes gets a new quiet value, not a run of flags).
- **others**: the CPU time the rest of the machine took while the candidate was timed (every
  non-idle tick of ``/proc/stat``, steal included, less the runner's own), in cores. Only what
  exceeds the cores the kernel leaves idle counts, less the error of counting in clock ticks over
  a short window (so a window of a few milliseconds says nothing).

A trial is *noisy* when either is over its tolerance; the flag is stored with the trial
(``extra["noise"]``), noisy trials give way to quiet ones where a config has both, the finalists
are re-measured in a quiet spell (:meth:`~tensortune.measure.Measurer.wait_quiet`), and the run
says how many of its trials were noisy (:class:`NoiseLog`).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..utils.placement import pinned_calls, tvm_pinned

#: A probe this much slower than the run's quiet probe flags the trial (the probe's own spread on
#: a quiet machine is a few percent).
PROBE_TOLERANCE = 1.15
#: Cores' worth of CPU time that other processes (or steal) may take beyond the idle cores.
BUSY_TOLERANCE = 0.25
#: The probe: ``PROBE_ACC`` x ``PROBE_LANES`` FMA chains per thread, ``PROBE_ITERS`` steps (a
#: fraction of a millisecond), repeated for ``PROBE_REPEAT_MS`` per timing, ``PROBE_REPEAT`` timings.
PROBE_ITERS = 200_000
PROBE_ACC = 8
PROBE_LANES = 8
PROBE_REPEAT = 5
PROBE_REPEAT_MS = 4
#: Seconds over which the fastest probe is the quiet value.
QUIET_HORIZON_S = 60.0
#: Seconds :meth:`Measurer.wait_quiet` waits at most for a quiet spell (MeasureOptions.quiet_wait_s).
QUIET_WAIT_S = 20.0
#: Seconds of each look while waiting for a quiet spell, and quiet looks needed in a row.
QUIET_LOOK_S = 0.3
QUIET_LOOKS = 2
#: A timing judged quiet this many seconds ago stands for a quiet machine now (no wait).
RECENT_S = 5.0


def cpu_ticks() -> tuple[int, int] | None:
    """``(busy, total)`` clock ticks of all CPUs since boot (``/proc/stat``; steal counts as busy),
    or None where the file is not there (not Linux)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu":
        return None
    v = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal (guest is in user)
    v += [0] * (8 - len(v))
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


class BusyWindow:
    """The cores' worth of CPU time the rest of the machine used over a window of this process's
    life, and the error of that figure (the counters tick ``SC_CLK_TCK`` times a second on each
    CPU): ``stop()`` after ``BusyWindow()`` gives ``(others, error)``, or None where
    ``/proc/stat`` cannot be read."""

    def __init__(self) -> None:
        self.t0, self.cpu0, self.ticks0 = time.perf_counter(), time.process_time(), cpu_ticks()

    def stop(self) -> tuple[float, float] | None:
        ticks = cpu_ticks()
        wall = time.perf_counter() - self.t0
        if ticks is None or self.ticks0 is None or wall <= 0:
            return None
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        busy = (ticks[0] - self.ticks0[0]) / hz
        own = time.process_time() - self.cpu0
        return max(0.0, busy - own) / wall, 2.0 * (os.cpu_count() or 1) / (hz * wall)


@dataclass(frozen=True)
class Sample:
    """What the runner saw around one timing: the probe's seconds, the others' cores and that
    figure's counting error (None: not measured)."""

    probe_s: float | None
    others: float | None
    others_error: float = 0.0


def probe_kernel() -> Any:
    """The probe's TIR: register-resident FMA chains on one thread (no thread pool: a parallel
    probe read 2x whenever the scheduler put two of the pool's threads on one core, with no other
    process running, so it judged the pool's placement rather than the machine)."""
    from tvm.script import tirx as T

    acc, lanes, iters = PROBE_ACC, PROBE_LANES, PROBE_ITERS

    @T.prim_func
    def fma(a: T.Buffer((acc, lanes), "float32"), out: T.Buffer((acc, lanes), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        reg = T.alloc_buffer((acc, lanes), "float32", scope="local")
        for j, v in T.grid(acc, lanes):
            reg[j, v] = a[j, v]
        for _k in T.serial(iters):
            for j in T.unroll(acc):
                for v in T.vectorized(lanes):
                    reg[j, v] = reg[j, v] * T.float32(0.999999) + T.float32(1e-6)
        for j, v in T.grid(acc, lanes):
            out[j, v] = reg[j, v]

    return fma


def make_probe() -> Callable[[], float]:
    """Build the probe for the host (once per process) and return ``f() -> seconds`` (the fastest
    of its timings: a competitor on its core slows every one of them)."""
    import numpy as np
    import tvm

    from ..target import host_target_json, make_target

    shape = (PROBE_ACC, PROBE_LANES)
    ex = tvm.compile(tvm.IRModule({"main": probe_kernel()}), target=make_target(host_target_json()))
    dev = tvm.cpu()
    a = tvm.runtime.tensor(np.full(shape, 0.5, "float32"), dev)
    out = tvm.runtime.tensor(np.zeros(shape, "float32"), dev)
    timer = ex.mod.time_evaluator("main", dev, number=1, repeat=PROBE_REPEAT, min_repeat_ms=PROBE_REPEAT_MS)
    with tvm_pinned():
        timer(a, out)  # first run: page in and spin up the thread pool

    @pinned_calls
    def probe() -> float:
        return min(timer(a, out).results)

    return probe


@dataclass
class NoiseLog:
    """The parent's judge and tally of the samples of one measurer.

    ``threads`` is the kernel's thread count and ``cores`` the machine's: other processes may use
    the ``cores - threads`` idle cores before anything counts."""

    threads: int
    cores: int
    probe_tolerance: float = PROBE_TOLERANCE
    busy_tolerance: float = BUSY_TOLERANCE
    probes: list[tuple[float, float]] = field(default_factory=list)  # (monotonic time, seconds) in the horizon
    judged: int = 0
    noisy: int = 0
    worst_probe: float = 1.0
    worst_others: float = 0.0
    waits: list[dict[str, Any]] = field(default_factory=list)
    last: tuple[float, bool] | None = None  # (monotonic time, noisy) of the latest judged timing

    @property
    def quiet_probe_s(self) -> float | None:
        """The quiet value: the fastest probe of the horizon (None before any)."""
        return min(p for _, p in self.probes) if self.probes else None

    def calibrate(self, probe_s: float | None) -> None:
        """Add a probe time to the horizon (and drop those older than :data:`QUIET_HORIZON_S`)."""
        now = time.monotonic()
        self.probes = [(t, p) for t, p in self.probes if now - t <= QUIET_HORIZON_S]
        if probe_s is not None and probe_s > 0:
            self.probes.append((now, probe_s))

    def verdict(self, sample: Sample) -> dict[str, Any]:
        """``{"probe": ratio to quiet, "others": excess cores, "noisy": bool}`` of a sample (not tallied)."""
        self.calibrate(sample.probe_s)
        quiet = self.quiet_probe_s
        ratio = sample.probe_s / quiet if sample.probe_s is not None and quiet else None
        excess = (max(0.0, sample.others - max(0, self.cores - self.threads) - sample.others_error)
                  if sample.others is not None else None)
        noisy = bool((ratio is not None and ratio > self.probe_tolerance)
                     or (excess is not None and excess > self.busy_tolerance))
        return {"probe": None if ratio is None else round(ratio, 4),
                "others": None if excess is None else round(excess, 3), "noisy": noisy}

    def judge(self, sample: Sample) -> dict[str, Any]:
        """The verdict of a candidate's sample, tallied."""
        v = self.verdict(sample)
        self.last = (time.monotonic(), v["noisy"])
        self.judged += 1
        self.noisy += v["noisy"]
        if v["probe"] is not None:
            self.worst_probe = max(self.worst_probe, v["probe"])
        if v["others"] is not None:
            self.worst_others = max(self.worst_others, v["others"])
        return v

    def quiet_since(self, seconds: float) -> bool:
        """Whether the latest judged timing was quiet and at most ``seconds`` ago."""
        return self.last is not None and not self.last[1] and time.monotonic() - self.last[0] <= seconds

    def to_json(self) -> dict[str, Any]:
        return {"trials": self.judged, "noisy": self.noisy, "worst_probe": round(self.worst_probe, 3),
                "worst_others_cores": round(self.worst_others, 3), "quiet_probe_ms":
                None if self.quiet_probe_s is None else round(self.quiet_probe_s * 1e3, 4),
                "quiet_waits": list(self.waits)}

    def describe(self) -> str:
        """One line for the run's output ("" when nothing was judged)."""
        if not self.judged:
            return ""
        if not self.noisy:
            return f"measurements: quiet ({self.judged} timed, probe within {self.worst_probe:.2f}x)"
        failed = [w for w in self.waits if not w["quiet"]]
        line = (f"measurements: NOISY, {self.noisy} of {self.judged} timed while the machine was busy "
                f"(probe up to {self.worst_probe:.2f}x its quiet time, others up to {self.worst_others:.2f} cores)")
        if failed:
            line += f"; {len(failed)} confirmation(s) found no quiet spell: their bests are uncertain"
        elif self.waits:
            line += "; finalists re-measured in a quiet spell"
        return line


def is_noisy(extra: dict[str, Any]) -> bool:
    """Whether a result's or trial's ``extra`` carries a noisy verdict."""
    noise = extra.get("noise")
    return bool(isinstance(noise, dict) and noise.get("noisy"))
