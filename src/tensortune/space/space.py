"""ConfigSpace: a product of knobs, with indexing, sampling, neighbours and a validity filter."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .knobs import AnnotateKnob, ChoiceKnob, Knob, ReorderKnob, SplitKnob, knob_from_json

Constraint = Callable[["Config"], bool]

#: Default values for the unroll knobs (AutoTVM's choices).
DEFAULT_UNROLL_STEPS = (0, 16, 64, 512)


@dataclass(frozen=True)
class Config:
    """One point of a space: its index and its knob values."""

    index: int
    knobs: dict[str, Any]
    space: "ConfigSpace"

    def __getitem__(self, name: str) -> Any:
        return self.knobs[name]

    def vector(self) -> np.ndarray:
        """Numeric vector for learning (log2 split factors, option indices, ...)."""
        return self.space.vectorize(self)

    def to_json(self) -> dict[str, Any]:
        """``{"index": i, "knobs": {...}}`` with tuples as lists."""
        return {"index": self.index, "knobs": {k: list(v) if isinstance(v, tuple) else v for k, v in self.knobs.items()}}

    def __hash__(self) -> int:
        return hash(self.index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and other.index == self.index and other.space is self.space

    def __repr__(self) -> str:
        return f"Config(#{self.index}, {self.to_json()['knobs']})"


class ConfigSpace:
    """An ordered product of knobs.

    The index of a config is mixed-radix over the knobs (first knob least significant).
    Constraints (``add_constraint``) mark configs invalid; ``len`` counts all points,
    sampling and neighbours return valid ones only.
    """

    def __init__(self, knobs: Sequence[Knob] = ()) -> None:
        self.knobs: list[Knob] = []
        self._constraints: list[tuple[str, Constraint]] = []
        for k in knobs:
            self.add(k)

    # ----- building
    def add(self, knob: Knob) -> Knob:
        """Append a knob (names must be unique)."""
        if any(k.name == knob.name for k in self.knobs):
            raise ValueError(f"duplicate knob {knob.name!r}")
        self.knobs.append(knob)
        return knob

    def define_split(self, name: str, extent: int, num_outputs: int, policy: str = "factors",
                     max_innermost: int | None = None, min_innermost: int | None = None) -> SplitKnob:
        """Add a :class:`SplitKnob`."""
        return self.add(SplitKnob(name, extent, num_outputs, policy, max_innermost, min_innermost))  # type: ignore[return-value]

    def define_choice(self, name: str, options: Sequence[Any]) -> ChoiceKnob:
        """Add a categorical knob."""
        return self.add(ChoiceKnob(name, options))  # type: ignore[return-value]

    def define_unroll(self, steps: Sequence[int] = DEFAULT_UNROLL_STEPS, explicit: Sequence[int] = (0, 1)) -> None:
        """Add ``auto_unroll_max_step`` and ``unroll_explicit`` (AutoTVM's unroll knobs)."""
        self.define_choice("auto_unroll_max_step", steps)
        self.define_choice("unroll_explicit", explicit)

    def define_annotate(self, name: str, num_axes: int, candidates: Sequence[str] = ("none", "unroll", "vec")) -> AnnotateKnob:
        """Add an annotation knob over ``num_axes`` loops."""
        return self.add(AnnotateKnob(name, num_axes, candidates))  # type: ignore[return-value]

    def define_reorder(self, name: str, num_axes: int, perms: Sequence[Sequence[int]] | None = None) -> ReorderKnob:
        """Add a loop-order knob."""
        return self.add(ReorderKnob(name, num_axes, perms))  # type: ignore[return-value]

    def add_constraint(self, name: str, fn: Constraint) -> None:
        """Mark configs for which ``fn(config)`` is False as invalid."""
        self._constraints.append((name, fn))

    # ----- indexing
    def __len__(self) -> int:
        return math.prod(len(k) for k in self.knobs) if self.knobs else 1

    @property
    def dims(self) -> list[int]:
        """Number of entities of each knob."""
        return [len(k) for k in self.knobs]

    def knob(self, name: str) -> Knob:
        """The knob called ``name``."""
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    def get(self, index: int) -> Config:
        """The config at ``index`` (0 <= index < len)."""
        if not 0 <= index < len(self):
            raise IndexError(f"config index {index} out of range for a space of {len(self)}")
        vals, rem = {}, index
        for k in self.knobs:
            rem, i = divmod(rem, len(k))
            vals[k.name] = k.entities[i]
        return Config(index, vals, self)

    def positions(self, config: Config) -> list[int]:
        """Entity position of each knob in ``config``."""
        out, rem = [], config.index
        for k in self.knobs:
            rem, i = divmod(rem, len(k))
            out.append(i)
        return out

    def from_positions(self, pos: Sequence[int]) -> Config:
        """The config whose knobs sit at entity positions ``pos``."""
        if len(pos) != len(self.knobs) or any(not 0 <= p < len(k) for p, k in zip(pos, self.knobs)):
            raise IndexError(f"positions {list(pos)} do not fit knob sizes {self.dims}")
        idx, mul = 0, 1
        for k, p in zip(self.knobs, pos):
            idx += p * mul
            mul *= len(k)
        return self.get(idx)

    def indices(self, positions: np.ndarray) -> np.ndarray:
        """Config indices of rows of knob positions ``[n, n_knobs]`` (mixed radix, vectorised)."""
        radix = np.concatenate([[1], np.cumprod(np.asarray(self.dims, dtype=np.int64))[:-1]]).astype(np.int64)
        return (np.asarray(positions, dtype=np.int64) * radix).sum(axis=1)

    def index_of(self, knobs: dict[str, Any]) -> int:
        """Index of the config with these knob values."""
        missing = [k.name for k in self.knobs if k.name not in knobs]
        if missing:
            raise ValueError(f"config lacks knobs {missing}")
        return self.from_positions([k.index_of(knobs[k.name]) for k in self.knobs]).index

    def config_from_json(self, d: dict[str, Any]) -> Config:
        """Config from :meth:`Config.to_json` (knob values win over the index)."""
        if "knobs" in d:
            return self.get(self.index_of(d["knobs"]))
        return self.get(int(d["index"]))

    # ----- validity, sampling, neighbours
    def is_valid(self, config: Config) -> bool:
        """True when every constraint accepts ``config``."""
        return all(fn(config) for _, fn in self._constraints)

    def sample(self, rng: random.Random, n: int = 1, exclude: set[int] | None = None,
               max_tries: int | None = None) -> list[Config]:
        """Up to ``n`` distinct valid configs drawn uniformly, skipping ``exclude`` (none for ``n <= 0``)."""
        if n <= 0:
            return []
        exclude = set(exclude or ())
        size = len(self)
        if size <= 4 * (n + len(exclude)) or size < 10_000:
            pool = [i for i in range(size) if i not in exclude]
            rng.shuffle(pool)
            out = []
            for i in pool:
                c = self.get(i)
                if self.is_valid(c):
                    out.append(c)
                    if len(out) == n:
                        break
            return out
        out, seen = [], set(exclude)
        tries = max_tries or 100 * n + 1000
        while len(out) < n and tries > 0:
            tries -= 1
            i = rng.randrange(size)
            if i in seen:
                continue
            seen.add(i)
            c = self.get(i)
            if self.is_valid(c):
                out.append(c)
        return out

    def neighbors(self, config: Config) -> list[Config]:
        """Valid configs that differ from ``config`` by one knob moved one step."""
        pos = self.positions(config)
        out = []
        for j, k in enumerate(self.knobs):
            for d in (-1, 1):
                p = pos[j] + d
                if 0 <= p < len(k):
                    q = list(pos)
                    q[j] = p
                    c = self.from_positions(q)
                    if self.is_valid(c):
                        out.append(c)
        return out

    def __iter__(self) -> Iterator[Config]:
        """All valid configs in index order."""
        for i in range(len(self)):
            c = self.get(i)
            if self.is_valid(c):
                yield c

    # ----- features
    @property
    def vector_width(self) -> int:
        """Length of a config vector."""
        return sum(k.width for k in self.knobs)

    def vectorize(self, config: Config) -> np.ndarray:
        """Numeric vector of ``config`` (see :meth:`Knob.encode`)."""
        out: list[float] = []
        for k in self.knobs:
            out.extend(k.encode(config.knobs[k.name]))
        return np.asarray(out, dtype=np.float32)

    # ----- JSON
    def to_json(self) -> dict[str, Any]:
        """Knob descriptions; constraints are code and are re-added by the template."""
        return {"knobs": [k.to_json() for k in self.knobs], "constraints": [n for n, _ in self._constraints]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ConfigSpace":
        """Rebuild the knobs of a space (without its constraints)."""
        return cls([knob_from_json(k) for k in d["knobs"]])

    def __repr__(self) -> str:
        return f"ConfigSpace({len(self)} points, knobs={[k.name for k in self.knobs]})"
