"""Knob features straight from entity positions, for explorers that score many configs."""
from __future__ import annotations

import numpy as np

from ..space import ConfigSpace


class KnobTable:
    """Per-knob lookup tables of ``Knob.encode``: rows of positions -> config vectors in one
    numpy gather (the same vectors as ``ConfigSpace.vectorize``, without building configs)."""

    def __init__(self, space: ConfigSpace) -> None:
        self.tables = [np.array([k.encode(e) for e in k.entities], dtype=np.float32).reshape(len(k), k.width)
                       for k in space.knobs]

    def encode(self, positions: np.ndarray) -> np.ndarray:
        """Config vectors of rows of entity positions ``[n, n_knobs]``."""
        positions = np.asarray(positions, dtype=np.int64)
        if not self.tables:
            return np.zeros((len(positions), 0), dtype=np.float32)
        return np.concatenate([t[positions[:, j]] for j, t in enumerate(self.tables)], axis=1)
