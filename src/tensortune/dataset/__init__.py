"""Shared learning data (One-Shot Tuner, Fasor, Trimmer): layer statistics of model definitions
and the task samplers drawn from them (:mod:`.layers`, :mod:`.tasks`)."""
