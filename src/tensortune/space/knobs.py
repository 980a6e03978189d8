"""Knobs: the dimensions of a search space.

A knob has a finite, ordered list of *entities* (its possible values). A config picks one
entity per knob. Order matters: neighbouring entities are "one step" apart, which is what
simulated annealing and RL agents move along.

Kinds (short names for JSON): ``split``, ``choice``, ``annotate``, ``reorder``. Unroll knobs
(``auto_unroll_max_step`` + ``unroll_explicit``) are two ``choice`` knobs added by
:meth:`ConfigSpace.define_unroll`.
"""
from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from typing import Any, Sequence

SPLIT_POLICIES = ("factors", "power2", "any")


def divisors(n: int) -> list[int]:
    """Every divisor of ``n``, ascending."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


class Knob(ABC):
    """One dimension of a space: a name and an ordered list of entities."""

    kind: str = ""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    @abstractmethod
    def entities(self) -> list[Any]:
        """All values of this knob, in neighbour order."""

    def __len__(self) -> int:
        return len(self.entities)

    def index_of(self, value: Any) -> int:
        """Position of ``value`` among the entities (ValueError if absent)."""
        key = _freeze(value)
        if not hasattr(self, "_lookup"):
            self._lookup = {_freeze(e): i for i, e in enumerate(self.entities)}
        try:
            return self._lookup[key]
        except KeyError:
            raise ValueError(f"{value!r} is not a value of knob {self.name!r}") from None

    @abstractmethod
    def encode(self, value: Any) -> list[float]:
        """Numeric features of one value (for learned cost models)."""

    @property
    @abstractmethod
    def width(self) -> int:
        """Length of :meth:`encode`'s output."""

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """JSON description from which :func:`knob_from_json` rebuilds the knob."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {len(self)} entities)"


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


class SplitKnob(Knob):
    """Split an axis of ``extent`` into ``num_outputs`` factors, outermost first.

    ``policy="factors"``: every exact factorisation. ``policy="power2"``: inner factors are
    powers of two (a non-divisible split leaves a partial tile, which TVM guards), the
    outermost factor is the ceiling quotient. ``policy="any"``: every inner factor up to
    ``max_innermost`` (prime and odd extents get full-width register tiles; the template
    handles the tail). ``max_innermost`` bounds the innermost factor,
    ``min_innermost`` asks for at least that (when the extent allows it).
    """

    kind = "split"

    def __init__(
        self,
        name: str,
        extent: int,
        num_outputs: int,
        policy: str = "factors",
        max_innermost: int | None = None,
        min_innermost: int | None = None,
    ) -> None:
        super().__init__(name)
        if extent < 1 or num_outputs < 1:
            raise ValueError(f"split {name!r}: extent and num_outputs must be >= 1")
        if policy not in SPLIT_POLICIES:
            raise ValueError(f"split {name!r}: unknown policy {policy!r} (use one of {SPLIT_POLICIES})")
        self.extent, self.num_outputs, self.policy = extent, num_outputs, policy
        self.max_innermost, self.min_innermost = max_innermost, min_innermost
        self._entities = self._enumerate()

    def _candidates(self, n: int) -> list[int]:
        if self.policy == "factors":
            return divisors(n)
        if self.policy == "any":
            return list(range(1, min(n, self.max_innermost or n) + 1))
        out, p = [], 1
        while p <= n:
            out.append(p)
            p *= 2
        return out

    def _enumerate(self) -> list[tuple[int, ...]]:
        def rec(rem: int, k: int) -> list[tuple[int, ...]]:
            # returns inner factors (k of them), ordered outer->inner
            if k == 0:
                return [()]
            out = []
            for f in self._candidates(rem):
                nxt = rem // f if self.policy == "factors" else math.ceil(rem / f)
                for rest in rec(nxt, k - 1):
                    out.append(rest + (f,))
            return out

        inners = rec(self.extent, self.num_outputs - 1)
        ents = []
        for inner in inners:
            prod = math.prod(inner)
            outer = math.ceil(self.extent / prod)
            ent = (outer,) + inner
            if self.policy in ("power2", "any") and self.num_outputs > 1 and prod > self.extent:
                continue
            last = ent[-1]
            if self.max_innermost is not None and last > self.max_innermost:
                continue
            ents.append(ent)
        if self.min_innermost is not None:
            big = [e for e in ents if e[-1] >= self.min_innermost]
            ents = big or ents
        ents = sorted(set(ents), key=lambda e: tuple(reversed(e)))
        return ents

    @property
    def entities(self) -> list[tuple[int, ...]]:
        return self._entities

    def encode(self, value: Any) -> list[float]:
        return [math.log2(max(1, v)) for v in value]

    @property
    def width(self) -> int:
        return self.num_outputs

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "name": self.name, "extent": self.extent,
            "num_outputs": self.num_outputs, "policy": self.policy,
            "max_innermost": self.max_innermost, "min_innermost": self.min_innermost,
        }


class ChoiceKnob(Knob):
    """A categorical knob over an explicit list of JSON-serialisable options."""

    kind = "choice"

    def __init__(self, name: str, options: Sequence[Any]) -> None:
        super().__init__(name)
        if not options:
            raise ValueError(f"choice {name!r} needs at least one option")
        self._entities = [_freeze(o) for o in options]

    @property
    def entities(self) -> list[Any]:
        return self._entities

    def encode(self, value: Any) -> list[float]:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return [float(value)]
        return [float(self.index_of(value))]

    @property
    def width(self) -> int:
        return 1

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "options": [list(o) if isinstance(o, tuple) else o for o in self._entities]}


ANNOTATIONS = ("none", "unroll", "vec", "parallel")


class AnnotateKnob(Knob):
    """Annotation of ``num_axes`` loops, each one of ``candidates`` (none/unroll/vec/parallel).

    At most one axis is vectorised and it must be the last one marked "vec".
    """

    kind = "annotate"

    def __init__(self, name: str, num_axes: int, candidates: Sequence[str] = ("none", "unroll", "vec")) -> None:
        super().__init__(name)
        bad = [c for c in candidates if c not in ANNOTATIONS]
        if bad:
            raise ValueError(f"annotate {name!r}: unknown annotations {bad}")
        self.num_axes, self.candidates = num_axes, tuple(candidates)
        ents = []
        for combo in itertools.product(self.candidates, repeat=num_axes):
            if combo.count("vec") > 1 or ("vec" in combo and combo[-1] != "vec"):
                continue
            ents.append(tuple(combo))
        self._entities = ents

    @property
    def entities(self) -> list[tuple[str, ...]]:
        return self._entities

    def encode(self, value: Any) -> list[float]:
        return [float(ANNOTATIONS.index(v)) for v in value]

    @property
    def width(self) -> int:
        return self.num_axes

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "num_axes": self.num_axes, "candidates": list(self.candidates)}


class ReorderKnob(Knob):
    """A permutation of ``num_axes`` loops; ``perms`` restricts the allowed orders."""

    kind = "reorder"

    def __init__(self, name: str, num_axes: int, perms: Sequence[Sequence[int]] | None = None) -> None:
        super().__init__(name)
        self.num_axes = num_axes
        if perms is None:
            perms = list(itertools.permutations(range(num_axes)))
        for p in perms:
            if sorted(p) != list(range(num_axes)):
                raise ValueError(f"reorder {name!r}: {p} is not a permutation of {num_axes} axes")
        self._entities = [tuple(p) for p in perms]
        self._explicit = perms is not None

    @property
    def entities(self) -> list[tuple[int, ...]]:
        return self._entities

    def encode(self, value: Any) -> list[float]:
        return [float(v) for v in value]

    @property
    def width(self) -> int:
        return self.num_axes

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "num_axes": self.num_axes, "perms": [list(p) for p in self._entities]}


KNOB_KINDS: dict[str, type[Knob]] = {
    k.kind: k for k in (SplitKnob, ChoiceKnob, AnnotateKnob, ReorderKnob)
}


def knob_from_json(d: dict[str, Any]) -> Knob:
    """Rebuild a knob from :meth:`Knob.to_json` output."""
    d = dict(d)
    kind = d.pop("kind")
    if kind not in KNOB_KINDS:
        raise ValueError(f"unknown knob kind {kind!r}")
    return KNOB_KINDS[kind](**d)
