"""Shrunken search spaces (Fasor, Sec. 5): a space restricted to fewer options and fewer knobs.

:func:`restrict` builds a :class:`~.space.ConfigSpace` whose knobs keep only some of their
parent's entities (the same names, values and encodings, and the parent's constraints), so any
explorer searches it unchanged; :meth:`ShrunkSpace.to_full` maps its configs back to the task's
own space for measuring and storing. Two rules fill it:

- **Empirical option pruning** (:func:`prune_options`):

  * a split keeps the entities whose inner factors are powers of two that divide the extent
    (when at least ``min_options`` remain; else the knob is left whole: a width of 7 or 56
    has few such factors, and the templates handle tails);
  * outer-loop parallelism: the outermost factors of the template's ``parallel_splits`` must
    multiply to at least the thread count (a constraint, where the extents allow it), so no
    candidate leaves cores idle;
  * vector widths: in these templates the vector lanes come from the layout's channel block,
    not from a knob, and the innermost split factors (which are unrolled or vectorised) are
    covered by the power-of-two rule.

- **Primitive selection** (:func:`select_knobs`): only the ``n_p`` knobs that move the task's
  limiting score most are tuned; the rest stay fixed at the start config's values. ``n_p`` counts
  knobs (each knob is one schedule-primitive decision: a split's factors, an unroll step, a
  choice), so a template with ``n_p`` or fewer knobs is tuned whole.

The start config (the template default, or the pre-tuned start) is always kept in the space.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from .knobs import Knob, SplitKnob
from .space import Config, ConfigSpace

#: A split pruned to fewer entities than this is left whole.
MIN_OPTIONS = 3


class RestrictedKnob(Knob):
    """A knob with a subset of its parent's entities (same name, order, values and encoding)."""

    def __init__(self, parent: Knob, positions: Sequence[int]) -> None:
        super().__init__(parent.name)
        self.parent = parent
        self.kind = parent.kind
        self.parent_positions = sorted(set(int(p) for p in positions))
        if not self.parent_positions or not all(0 <= p < len(parent) for p in self.parent_positions):
            raise ValueError(f"knob {parent.name!r}: positions must be a non-empty subset of 0..{len(parent) - 1}")
        self._entities = [parent.entities[p] for p in self.parent_positions]

    @property
    def entities(self) -> list[Any]:
        return self._entities

    def encode(self, value: Any) -> list[float]:
        return self.parent.encode(value)

    @property
    def width(self) -> int:
        return self.parent.width

    def to_json(self) -> dict[str, Any]:
        return {**self.parent.to_json(), "restricted_to": self.parent_positions}


@dataclass
class ShrunkSpace:
    """A restricted view of ``full`` (see the module): ``space`` is searched, ``to_full`` maps
    back. ``fixed`` names the knobs held at one value; ``report`` says what each rule did."""

    full: ConfigSpace
    space: ConfigSpace
    fixed: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)

    def to_full(self, config: Config) -> Config:
        """The task-space config with ``config``'s knob values."""
        return self.full.get(self.full.index_of(config.knobs))

    def from_full(self, config: Config) -> Config | None:
        """The shrunk-space config with ``config``'s knob values (None when pruned away)."""
        try:
            return self.space.get(self.space.index_of(config.knobs))
        except ValueError:
            return None

    @property
    def ratio(self) -> float:
        """Points of the shrunk space over points of the full one."""
        return len(self.space) / max(len(self.full), 1)


def restrict(full: ConfigSpace, keep: dict[str, Sequence[int]], extra_constraints: Sequence[tuple[str, Any]] = ()
             ) -> ConfigSpace:
    """``full`` with knob ``name`` restricted to entity positions ``keep[name]`` (others whole),
    its constraints and ``extra_constraints`` (``(name, fn)``) applied."""
    space = ConfigSpace([RestrictedKnob(k, keep[k.name]) if k.name in keep else k for k in full.knobs])
    for name, fn in [*full._constraints, *extra_constraints]:  # noqa: SLF001 - same package
        space.add_constraint(name, fn)
    return space


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def prune_options(full: ConfigSpace, start: Config, threads: int, parallel_splits: Sequence[str] = (),
                  min_options: int = MIN_OPTIONS) -> tuple[dict[str, list[int]], list[tuple[str, Any]], dict[str, Any]]:
    """The option-pruning rules (see the module): ``(positions kept per knob, extra constraints,
    report)``. ``start`` is always kept."""
    keep: dict[str, list[int]] = {}
    report: dict[str, Any] = {"pruned": {}, "parallel": None}
    for k in full.knobs:
        if not isinstance(k, SplitKnob) or k.num_outputs < 2:
            continue
        own = k.index_of(start.knobs[k.name])
        ok = [i for i, e in enumerate(k.entities)
              if i == own or all(_is_pow2(f) and k.extent % f == 0 for f in e[1:])]
        if len(ok) >= min(min_options, len(k)) and len(ok) < len(k):
            keep[k.name] = ok
            report["pruned"][k.name] = f"{len(k)} -> {len(ok)}"
    extra: list[tuple[str, Any]] = []
    splits = [full.knob(n) for n in parallel_splits if any(k.name == n for k in full.knobs)]
    if splits and threads > 1:
        reach = math.prod(max(e[0] for e in s.entities) for s in splits)
        names = [s.name for s in splits]
        have = math.prod(start.knobs[n][0] for n in names)
        if reach >= threads and have >= threads:
            extra.append(("parallel_outer", lambda c, names=tuple(names), t=threads:
                          math.prod(c[n][0] for n in names) >= t))
            report["parallel"] = f"outer factors of {'x'.join(names)} >= {threads}"
    return keep, extra, report


def select_knobs(full: ConfigSpace, ranking: Sequence[str], n_p: int) -> tuple[list[str], list[str]]:
    """``(tuned, fixed)`` knob names: the first ``n_p`` of ``ranking`` that the space has (then
    any knob the ranking does not name, in space order) are tuned; the rest are fixed."""
    names = [k.name for k in full.knobs]
    order = [n for n in ranking if n in names] + [n for n in names if n not in ranking]
    tuned = order[:max(n_p, 0)]
    return [n for n in names if n in tuned], [n for n in names if n not in tuned]


def shrink(full: ConfigSpace, start: Config, threads: int, parallel_splits: Sequence[str] = (),
           ranking: Sequence[str] | None = None, n_p: int | None = None, prune: bool = True) -> ShrunkSpace:
    """The shrunk space of a task (see the module): options pruned (``prune``) and only the top
    ``n_p`` knobs of ``ranking`` tuned, the others held at ``start``'s values."""
    keep: dict[str, list[int]] = {}
    extra: list[tuple[str, Any]] = []
    report: dict[str, Any] = {}
    if prune:
        keep, extra, report = prune_options(full, start, threads, parallel_splits)
    fixed: list[str] = []
    if ranking is not None and n_p is not None:
        tuned, fixed = select_knobs(full, ranking, n_p)
        for name in fixed:
            keep[name] = [full.knob(name).index_of(start.knobs[name])]
        report["tuned"], report["fixed"] = tuned, fixed
    space = restrict(full, keep, extra)
    if not space.is_valid(space.get(space.index_of(start.knobs))):  # the start must stay reachable
        space = restrict(full, keep)
        report["parallel"] = None
    report["points"] = f"{len(full)} -> {len(space)}"
    return ShrunkSpace(full, space, fixed, report)
