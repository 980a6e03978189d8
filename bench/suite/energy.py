"""The suite's energy probe: tensortune's own meter (:mod:`tensortune.measure.energy`)."""
from tensortune.measure.energy import EnergyMeter, probe

__all__ = ["EnergyMeter", "probe"]
