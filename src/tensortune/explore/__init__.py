"""Explorers: propose candidates against a cost model (simulated annealing; the baselines'
random / grid / genetic search live in ``tuners.baselines``)."""
from .annealing import SA_CHAINS, SA_EARLY_STOP, SA_MAX_STEPS, SA_TEMP, SimulatedAnnealing

EXPLORERS = {SimulatedAnnealing.name: SimulatedAnnealing}

__all__ = ["EXPLORERS", "SA_CHAINS", "SA_EARLY_STOP", "SA_MAX_STEPS", "SA_TEMP", "SimulatedAnnealing"]
