"""Trimmer (Borowiec et al., "Trimmer: Cost-Efficient Deep Learning Auto-tuning for Cloud
Datacenters", CLOUD 2022) as the per-task tuner ``trimmer``.

AutoTVM's composition (XGBoost, simulated annealing, diversity-aware selection with epsilon)
with Trimmer's cold-candidate filter in front of every measurement (:mod:`tensortune.select.cold`:
a proposed candidate whose nearest measured neighbours, by the latency network's embedding,
were all cold is dropped and replaced). The filter trains its network on the tuning database
when the run starts; without a database (or with too few records) it passes everything through
and the tuner's status line says so. The rest of Trimmer, measuring only where it pays across a
model's operators, is the model scheduler's part.
"""
from __future__ import annotations

from dataclasses import dataclass

from .autotvm import AutoTVMOptions, AutoTVMTuner


@dataclass(frozen=True)
class TrimmerOptions(AutoTVMOptions):
    """AutoTVM's options with the cold filter on (its settings: ``cold_filter_options``)."""

    cold_filter: bool = True


class TrimmerTuner(AutoTVMTuner):
    """AutoTVM + the cold-candidate filter."""

    name = "trimmer"
    Options = TrimmerOptions


__all__ = ["TrimmerOptions", "TrimmerTuner"]
