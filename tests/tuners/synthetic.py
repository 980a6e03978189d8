"""A fake measurer with a known cost landscape over a real task's space (no building, no running)."""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from tensortune.measure import ErrorKind, MeasureInput, MeasureOptions, MeasureResult, MeasurerBase


def conv_landscape(config: Any) -> float:
    """A smooth-ish synthetic latency for conv2d configs: best with mid-size register tiles,
    a wide reduction split and unrolling; a band of configs "fails to build"."""
    f = config["tile_f"]
    x = config["tile_x"]
    rc = config["tile_rc"]
    cost = 1.0
    cost *= 1 + 0.3 * abs(math.log2(f[2]) - 4)
    cost *= 1 + 0.25 * abs(math.log2(x[1]) - 2)
    cost *= 1 + 0.1 * abs(math.log2(rc[1]) - 4)
    cost *= 1 + 0.05 * f[1]
    cost *= 0.9 if config["auto_unroll_max_step"] == 16 else 1.0
    return cost * 1e-3


class FakeMeasurer(MeasurerBase):
    """Measures by evaluating ``landscape``; configs for which ``fails`` is true are compile errors."""

    def __init__(self, landscape: Callable[[Any], float], fails: Callable[[Any], bool] = lambda c: False) -> None:
        self.landscape, self.fails = landscape, fails
        self.options = MeasureOptions(check_correctness=True)
        self.measured: list[int] = []

    def measure(self, inputs: Sequence[MeasureInput], on_result: Any = None) -> list[MeasureResult]:
        out = []
        for inp in inputs:
            self.measured.append(inp.config.index)
            threads = self.options.threads  # as the real runner reports it
            if self.fails(inp.config):
                r = MeasureResult([], ErrorKind.COMPILE, "synthetic failure", threads=threads)
            else:
                r = MeasureResult([self.landscape(inp.config)] * 3, threads=threads, extra={"verified": True})
            if on_result is not None:
                on_result(inp, r)
            out.append(r)
        return out
