"""Where the host has put this process's CPUs: the cross-core round trip, and timing on near cores.

On the shared hosts these benchmarks run on, the hypervisor moves a VM's two virtual CPUs between
physical cores for minutes at a time. Two threads passing a flag back and forth
(``bench/probes/roundtrip.c``, built with the system C compiler) take about 80 ns a round trip on
near cores (one shared L3) and about 330 ns on far ones; every runtime is slower on far cores
(OpenVINO about 1.45x, tensortune 2x on PVTv2 in bf16, znver4), and the layout transforms, which
read what the other thread wrote, up to 7x. :class:`HostWait` waits for near cores
before a timing and repeats a timing the host moved under, so that the figures of one run
compare one machine; every entry records the round trips it was timed between.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

PROBE = Path(__file__).parent / "probes" / "roundtrip.c"
#: Seconds of round trips timed by one probe.
PROBE_S = 1
#: A round trip above this (ns) means far cores (80 ns near, 330 ns far on the hosts seen).
FAR_NS = 200.0
#: Longest wait for near cores before a timing (s), and timings tried before one on far cores is kept.
WAIT_S = 240.0
TRIES = 3
#: Seconds between probes while waiting.
POLL_S = 5.0

T = TypeVar("T")


def build_probe(folder: Path) -> Path | None:
    """The round-trip probe built with the system C compiler; None (said) where there is none."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    exe = folder / "roundtrip"
    if cc is None or subprocess.run([cc, "-O2", "-pthread", str(PROBE), "-o", str(exe)]).returncode != 0:
        print("no C compiler built the round-trip probe: rounds are not timed on the host", file=sys.stderr)
        return None
    return exe


def probe(exe: Path | None) -> float | None:
    """The median cross-core round trip (ns) over ``PROBE_S`` one-second windows, on the first two
    CPUs of this process's mask; None without a probe or with fewer than two CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if exe is None or len(cpus) < 2:
        return None
    out = subprocess.run([str(exe), str(cpus[0]), str(cpus[1]), str(PROBE_S)], capture_output=True, text=True, check=True)
    return statistics.median(float(v) for v in out.stdout.split())


def wait_for_near(exe: Path | None, wait_s: float = WAIT_S) -> float | None:
    """Probe every :data:`POLL_S` seconds until the round trip says near cores or ``wait_s`` has
    passed; the last round trip (None without a probe)."""
    end = time.monotonic() + wait_s
    trip = probe(exe)
    while trip is not None and trip >= FAR_NS and time.monotonic() < end:
        time.sleep(POLL_S)
        trip = probe(exe)
    return trip


def cores(trips: list[float | None]) -> str:
    """``near`` when every round trip was near, ``far`` when one was not, ``unknown`` without a probe."""
    if any(t is None for t in trips):
        return "unknown"
    return "near" if all(t < FAR_NS for t in trips) else "far"


class HostWait:
    """Timings on near cores: ``timed(fn)`` waits up to ``wait_s`` for near cores
    (:func:`wait_for_near`), runs ``fn`` and probes again; it runs ``fn`` again, up to ``tries``
    times, while a probe says far. Without a probe (``exe`` None) ``fn`` runs once, cores unknown."""

    def __init__(self, exe: Path | None = None, wait_s: float = WAIT_S, tries: int = TRIES) -> None:
        self.exe, self.wait_s, self.tries = exe, wait_s, tries

    def timed(self, timing: Callable[[], T]) -> tuple[T, dict[str, Any]]:
        """The last result of ``timing()`` and ``{"round_trip_ns": [before, after], "cores":
        near|far|unknown, "timings": n}``."""
        for n in range(1, max(1, self.tries) + 1):
            before = wait_for_near(self.exe, self.wait_s)
            result = timing()
            trips = [before, probe(self.exe)]
            where = cores(trips)
            if where != "far":
                break
        return result, {"round_trip_ns": trips, "cores": where, "timings": n}
