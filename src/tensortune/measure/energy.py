"""Energy from the CPU's RAPL counters (Linux powercap), where the machine exposes them.

``/sys/class/powercap/intel-rapl:N/energy_uj`` (package domains; AMD Zen exposes the same
interface) counts microjoules and wraps at ``max_energy_range_uj``. Virtual machines and
containers usually hide it; then :func:`probe` says so, every energy figure is reported as
unavailable (never estimated), and an energy budget is refused (:func:`require`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TensortuneError

POWERCAP = Path("/sys/class/powercap")


def _domains() -> list[Path]:
    if not POWERCAP.is_dir():
        return []
    return sorted(p for p in POWERCAP.glob("intel-rapl:*") if p.name.count(":") == 1 and (p / "energy_uj").exists())


def probe() -> dict[str, Any]:
    """Whether RAPL energy can be read here, and why not."""
    if not POWERCAP.is_dir():
        return {"available": False, "reason": f"{POWERCAP} does not exist (no RAPL powercap driver; usual in VMs)"}
    doms = _domains()
    if not doms:
        return {"available": False, "reason": f"no RAPL package domain under {POWERCAP}"}
    try:
        int((doms[0] / "energy_uj").read_text())
    except OSError as e:
        return {"available": False, "reason": f"{doms[0] / 'energy_uj'} is not readable ({e.strerror}; needs root)"}
    return {"available": True, "domains": [d.name for d in doms]}


class EnergyUnavailable(TensortuneError, RuntimeError):
    """An energy budget was asked for on a machine without a readable energy counter."""


def require() -> None:
    """Raise :class:`EnergyUnavailable` (one line, with the reason) unless energy can be read."""
    p = probe()
    if not p["available"]:
        raise EnergyUnavailable(f"an energy budget needs a readable energy counter, and this machine has none: "
                                f"{p['reason']}")


class EnergyMeter:
    """Joules used by all package domains between :meth:`start` and :meth:`stop` (None: unavailable).
    ``domains`` given (e.g. ``[]``: a meter that never counts) replaces the machine's."""

    def __init__(self, domains: list[Path] | None = None) -> None:
        self.domains = domains if domains is not None else (_domains() if probe()["available"] else [])
        self._start: list[int] = []

    def _read(self) -> list[int]:
        return [int((d / "energy_uj").read_text()) for d in self.domains]

    def start(self) -> None:
        """Take the first reading."""
        self._start = self._read() if self.domains else []

    def peek(self) -> float | None:
        """Joules since :meth:`start` so far (the meter keeps counting)."""
        return self.stop()

    def stop(self) -> float | None:
        """Joules since :meth:`start` (counter wrap-around handled; a wrap between two
        readings more than one counter range apart cannot be seen)."""
        if not self.domains or not self._start:
            return None
        total = 0
        for d, a, b in zip(self.domains, self._start, self._read()):
            rng = int((d / "max_energy_range_uj").read_text()) if (d / "max_energy_range_uj").exists() else 2**32
            total += b - a if b >= a else b + rng - a
        return total / 1e6
