"""Fasor's pre-tuned schedule database: the best known config of every task, the start point of a search.

Fasor (Huang et al., ICS 2024) begins its exploration (stage 1) from a table of the best
schedules found so far. An entry is keyed by

* the **target type**: LLVM kind, ``mcpu`` and thread count, e.g. ``llvm/znver4/2``
  (:func:`target_type`; the CPU model is kept in the entry, not in the key),
* the **task key**: the task's op, e.g. ``conv2d_nchwc`` (``op/template`` when the task uses
  another template than its op's usual one, see :func:`task_key`),
* the **kernel class**, e.g. ``conv2d-add-relu``,
* the **arguments**: the task's shape arguments, in sorted key order.

:meth:`PretunedTable.lookup` finds a start point for a task: an exact key is an O(1) hit;
otherwise the entry of the same target type and op whose argument vector is most similar by
Spearman's rank correlation is used when that correlation exceeds ``tau`` (Fasor's 0.6);
otherwise the template's default config. Spearman over the raw argument vector is the
paper's measure, and it is coarse: it compares only the *order* of the argument values
within each vector (``H=56, IC=64, K=3`` ranks like ``H=7, IC=512, K=1``), not their sizes,
so a "similar" start point is a guess that the search still has to confirm.

A stored config is mapped onto the task's own space knob by knob (:func:`map_knobs`); when
the result breaks the space's constraints, the closest valid config nearby is taken.
"""
from __future__ import annotations

import json
import math
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from ..errors import TensortuneError
from ..space import ChoiceKnob, Config, ConfigSpace, Knob, SplitKnob

if TYPE_CHECKING:  # pragma: no cover
    from ..task.task import Task
    from .records import MeasureContext, TrialRecord
    from .sqlite import Database

#: The ``format`` field of a saved table.
FORMAT = "tensortune-pretuned/1"
#: Fasor's similarity threshold: an entry is used as a start point only when the Spearman
#: correlation of its arguments with the task's exceeds this.
DEFAULT_TAU = 0.6
#: How many configs the search for a valid config near a mapped one visits (breadth first).
NEIGHBOR_BUDGET = 400
#: Correlations closer than this are ties (the kernel class, then the argument sizes decide).
RHO_TIE = 1e-9
#: ``how`` of a :class:`StartPoint`.
HOW_EXACT, HOW_SIMILAR, HOW_DEFAULT = "exact", "similar", "default"

#: The key of an entry: (target type, task key, kernel class, sorted (name, value) arguments).
EntryKey = tuple[str, str, str, tuple[tuple[str, int], ...]]


class PretunedError(TensortuneError, ValueError):
    """A pre-tuned table file that cannot be read (the message is one line and names the file)."""


# -- keys -------------------------------------------------------------------------------------------

def target_type(target_json: Mapping[str, Any] | str, threads: int) -> str:
    """The short type of a target and thread count: ``kind/mcpu/threads``, e.g. ``llvm/znver4/2``.

    ``target_json`` is a target dict or its JSON text (as stored in a measurement context); a
    target without ``mcpu`` reads as ``generic``.
    """
    spec = json.loads(target_json) if isinstance(target_json, str) else target_json
    return f"{spec.get('kind', 'llvm')}/{spec.get('mcpu') or 'generic'}/{int(threads)}"


def task_key(op: str, template: str) -> str:
    """The task key of an op scheduled by ``template``: the op when the template is the op's
    usual one (``generic`` for PrimFunc tasks), else ``op/template`` (another space)."""
    from ..task.ops import OPS

    usual = "generic" if op == "primfunc" else (OPS[op].template if op in OPS else op)
    return op if template == usual else f"{op}/{template}"


def _args_key(args: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((str(k), int(v)) for k, v in args.items()))


# -- entries ----------------------------------------------------------------------------------------

@dataclass
class PretunedEntry:
    """The best known config of one task on one target type.

    ``op`` is the task key (:func:`task_key`: the op, or ``op/template``), ``args`` the shape
    arguments; ``knobs`` are the config's knob values as JSON (``Config.to_json()["knobs"]``: tuples as
    lists), ``cost_s`` its cost in seconds, ``cpu_model`` the CPU it was measured on,
    ``source`` where it came from (database path and tuner), ``workload_key`` the task's key
    in that database.
    """

    target_type: str
    op: str
    kernel_class: str
    args: dict[str, int]
    knobs: dict[str, Any]
    cost_s: float
    cpu_model: str = ""
    source: str = ""
    workload_key: str = ""

    def key(self) -> EntryKey:
        """``(target type, task key, kernel class, sorted arguments)``: the table's key."""
        return (self.target_type, self.op, self.kernel_class, _args_key(self.args))

    def describe(self) -> str:
        """Short text for people, e.g. ``conv2d_nchwc{H=28,IC=64,...}``."""
        return f"{self.op}{{{','.join(f'{k}={v}' for k, v in _args_key(self.args))}}}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict of all fields."""
        return {"target_type": self.target_type, "op": self.op, "kernel_class": self.kernel_class,
                "args": dict(_args_key(self.args)), "knobs": _jsonable(self.knobs), "cost_s": self.cost_s,
                "cpu_model": self.cpu_model, "source": self.source, "workload_key": self.workload_key}

    @classmethod
    def from_json(cls, data: Any) -> PretunedEntry:
        """Inverse of :meth:`to_json`; raises ValueError naming the first bad field."""
        if not isinstance(data, dict):
            raise ValueError(f"expected an object, got {type(data).__name__}")
        for name in ("target_type", "op", "kernel_class"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise ValueError(f"field {name!r}: expected a non-empty string")
        for name in ("cpu_model", "source", "workload_key"):
            if not isinstance(data.get(name, ""), str):
                raise ValueError(f"field {name!r}: expected a string")
        args = data.get("args")
        if not isinstance(args, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in args.values()):
            raise ValueError("field 'args': expected an object of integers")
        if not isinstance(data.get("knobs"), dict):
            raise ValueError("field 'knobs': expected an object")
        cost = data.get("cost_s")
        if not isinstance(cost, (int, float)) or isinstance(cost, bool) or not (math.isfinite(cost) and cost > 0):
            raise ValueError(f"field 'cost_s': {cost!r} is not a positive finite number of seconds")
        return cls(data["target_type"], data["op"], data["kernel_class"], dict(args), dict(data["knobs"]),
                   float(cost), data.get("cpu_model", ""), data.get("source", ""), data.get("workload_key", ""))


def _jsonable(value: Any) -> Any:
    """``value`` with tuples turned into lists (as JSON would)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


@dataclass
class StartPoint:
    """Where a search starts: ``config`` (a config of the task's space), ``how`` it was found
    (``"exact"``, ``"similar"`` or ``"default"``), the Spearman ``similarity`` of the entry used
    (None unless similar), the ``entry`` used (None for the default) and a one-line ``reason``."""

    config: Config
    how: str
    similarity: float | None
    entry: PretunedEntry | None
    reason: str


@dataclass
class BuildSummary:
    """What :meth:`PretunedTable.build_from_database` did: entries taken into the table
    (``added``, new keys or cheaper than the stored entry), entries seen but kept out by a
    cheaper one (``kept_out``), and tasks or contexts skipped with the reason (``skipped``)."""

    tasks: int = 0
    contexts: int = 0
    added: int = 0
    kept_out: int = 0
    skipped: list[str] = field(default_factory=list)


# -- mapping a config onto a space --------------------------------------------------------------------

def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _log2(v: Any) -> float:
    return math.log2(max(1.0, float(v)))


def _split_distance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """Sum of |log2| differences of the inner factors (the outermost one dropped)."""
    return sum(abs(_log2(x) - _log2(y)) for x, y in zip(a[1:], b[1:]))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _nearest_entity(knob: Knob, value: Any, fallback: Any) -> tuple[Any, bool]:
    """The entity of ``knob`` for a stored ``value`` and whether it is ``value`` itself.

    The value itself when it is an entity; else for a split the entity whose inner factors are
    nearest in sum |log2| distance (same number of factors), for a choice the numerically
    nearest option; else ``fallback`` (the default config's value).
    """
    value = _freeze(value)
    try:
        return knob.entities[knob.index_of(value)], True
    except (ValueError, TypeError):
        pass
    if isinstance(knob, SplitKnob):
        if isinstance(value, tuple) and len(value) == knob.num_outputs and all(_is_number(v) for v in value):
            return min(knob.entities, key=lambda e: _split_distance(e, value)), False
    elif isinstance(knob, ChoiceKnob):
        numeric = [e for e in knob.entities if _is_number(e)]
        if _is_number(value) and numeric:
            return min(numeric, key=lambda e: abs(e - value)), False
    return fallback, False


def _config_distance(space: ConfigSpace, a: Config, b: Config) -> float:
    """How far two configs of one space are apart: split knobs by the |log2| distance of their
    inner factors, other knobs 1 when they differ."""
    d = 0.0
    for k in space.knobs:
        x, y = a.knobs[k.name], b.knobs[k.name]
        d += _split_distance(x, y) if isinstance(k, SplitKnob) else float(x != y)
    return d


def nearest_valid(space: ConfigSpace, start: Config, budget: int = NEIGHBOR_BUDGET) -> Config | None:
    """``start`` when it is valid, else the valid config closest to it (:func:`_config_distance`;
    ties: fewer steps, then the lower index) among the first ``budget`` configs a breadth-first
    walk from it visits, one knob one entity step at a time; None when there is none.

    The walk passes through invalid configs too (:meth:`ConfigSpace.neighbors` returns valid
    ones only, so it cannot leave an invalid start whose next steps are all invalid)."""
    if space.is_valid(start):
        return start
    dims = space.dims
    seen = {start.index}
    queue: deque[tuple[list[int], int]] = deque([(space.positions(start), 0)])
    best: tuple[float, int, int] | None = None
    best_config: Config | None = None
    visited = 0
    while queue and visited < budget:
        pos, depth = queue.popleft()
        for j, n in enumerate(dims):
            for step in (-1, 1):
                p = pos[j] + step
                if not 0 <= p < n:
                    continue
                q = list(pos)
                q[j] = p
                c = space.from_positions(q)
                if c.index in seen:
                    continue
                seen.add(c.index)
                visited += 1
                if space.is_valid(c):
                    rank = (_config_distance(space, start, c), depth + 1, c.index)
                    if best is None or rank < best:
                        best, best_config = rank, c
                queue.append((q, depth + 1))
                if visited >= budget:
                    break
            if visited >= budget:
                break
    return best_config


def map_knobs(space: ConfigSpace, knobs: Mapping[str, Any], default: Callable[[], Config],
              budget: int = NEIGHBOR_BUDGET) -> tuple[Config | None, str]:
    """Map stored knob values onto ``space``: per knob the stored value when it is an entity,
    else the nearest entity (:func:`_nearest_entity`; knobs not stored take the value of
    ``default()``, called only when needed); then the closest valid config (:func:`nearest_valid`).

    Returns the config (None when no valid config was found) and a note: ``""`` when the stored
    values were taken as they are, else what was changed.
    """
    default_config: Config | None = None
    values: dict[str, Any] = {}
    changed: list[str] = []
    for k in space.knobs:
        if k.name in knobs:
            fallback = None
            if not _holds(k, knobs[k.name]):
                default_config = default_config or default()
                fallback = default_config.knobs[k.name]
            values[k.name], same = _nearest_entity(k, knobs[k.name], fallback)
        else:
            default_config = default_config or default()
            values[k.name], same = default_config.knobs[k.name], False
        if not same:
            changed.append(k.name)
    config = space.get(space.index_of(values))
    valid = nearest_valid(space, config, budget)
    notes = []
    if changed:
        notes.append(f"knobs {', '.join(changed)} mapped")
    if valid is not None and valid.index != config.index:
        notes.append("moved to the nearest valid config")
    return valid, "; ".join(notes)


def _holds(knob: Knob, value: Any) -> bool:
    try:
        knob.index_of(_freeze(value))
        return True
    except (ValueError, TypeError):
        return False


# -- the table --------------------------------------------------------------------------------------------

@dataclass
class _Group:
    """The entries of one (target type, task key, argument names): precomputed for similarity search."""

    entries: list[PretunedEntry]
    #: centred ranks of every entry's argument vector, one row per entry, scaled to unit length
    #: (all-zero rows: a constant vector, whose correlation counts as -1)
    ranks: np.ndarray
    constant: np.ndarray
    logs: np.ndarray
    kernel_classes: np.ndarray


def _centred_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of average ranks (as :func:`scipy.stats.spearmanr` ranks), centred and scaled to unit
    length, and which rows are constant (zero length)."""
    from scipy.stats import rankdata

    r = rankdata(values, axis=1)
    r = r - r.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(r, axis=1)
    constant = norm < 1e-12
    r[~constant] /= norm[~constant, None]
    r[constant] = 0.0
    return r, constant


class PretunedTable:
    """Best known configs by (target type, task key, kernel class, arguments): see the module."""

    def __init__(self, entries: Iterable[PretunedEntry] = ()) -> None:
        """A table of ``entries`` (added one by one: :meth:`add`). Change :attr:`entries` only
        through :meth:`add` and :meth:`merge`, which also refresh the similarity index."""
        self.entries: dict[EntryKey, PretunedEntry] = {}
        self._groups: dict[tuple[str, str, tuple[str, ...]], _Group] | None = None
        for e in entries:
            self.add(e)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[PretunedEntry]:
        return iter(self.entries.values())

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def __repr__(self) -> str:
        return f"PretunedTable({len(self)} entries)"

    # -- filling -----------------------------------------------------------------------------------

    def add(self, entry: PretunedEntry) -> bool:
        """Store ``entry``; on a key collision the lower-cost entry stays (the stored one on a
        tie). Returns whether ``entry`` was stored."""
        key = entry.key()
        old = self.entries.get(key)
        if old is not None and old.cost_s <= entry.cost_s:
            return False
        self.entries[key] = entry
        self._groups = None
        return True

    def merge(self, other: PretunedTable) -> int:
        """Add every entry of ``other`` (:meth:`add`: the cheaper one wins); returns how many were taken."""
        return sum(self.add(e) for e in other)

    def build_from_database(self, db: Database | str | os.PathLike[str], min_records: int = 1) -> BuildSummary:
        """Add the best verified, successful trial of every task and measurement context of a
        tensortune database (a :class:`~tensortune.database.Database` or its path, opened read-only).

        One entry per task and context (the context's target and thread count give the target
        type), only where the task has at least ``min_records`` verified successful trials in
        that context. The best is :meth:`Database.best`'s (confirmation-aware); when that config
        is not in the task's current space (index beyond it, stored knob values that differ from
        the space's, or rejected by its constraints), the cheapest verified successful trial of
        the context that is in it. Tasks that cannot be rebuilt are skipped and reported.
        """
        from .sqlite import Database

        if not isinstance(db, Database):
            with Database(db, readonly=True) as opened:
                return self.build_from_database(opened, min_records)
        from ..task import Task

        summary = BuildSummary()
        for rec in db.tasks():
            try:
                task = Task.from_json(json.loads(rec.task_json))
                space = task.space
            except Exception as e:  # noqa: BLE001 - an unknown op/template, another version's task
                summary.skipped.append(f"task {rec.workload_key}: cannot rebuild it ({type(e).__name__}: {e})")
                continue
            summary.tasks += 1
            trials: list[TrialRecord] | None = None
            for ctx, count in db.contexts(rec.workload_key):
                if ctx.in_model:  # a model's in-model check: its costs are no kernel's alone
                    continue
                if count < min_records:
                    summary.skipped.append(f"task {rec.workload_key}: {count} verified trials in a context "
                                           f"(fewer than {min_records})")
                    continue
                summary.contexts += 1
                best = db.best(rec.workload_key, ctx)
                config = _in_space(space, best) if best is not None else None
                if config is None:
                    if trials is None:
                        trials = db.trials(rec.workload_key, ok_only=True)
                    best, config = _best_in_space(space, trials, ctx)
                if best is None or config is None:
                    summary.skipped.append(f"task {rec.workload_key}: no verified trial of {ctx.describe()} "
                                           "is in the current space")
                    continue
                entry = PretunedEntry(
                    target_type=target_type(ctx.target, ctx.threads), op=task_key(task.op, task.template_name),
                    kernel_class=task.kernel_class, args=dict(task.args), knobs=config.to_json()["knobs"],
                    cost_s=best.cost, cpu_model=ctx.cpu_model, source=f"{db.path} [{best.tuner or 'unknown tuner'}]",
                    workload_key=rec.workload_key)
                if self.add(entry):
                    summary.added += 1
                else:
                    summary.kept_out += 1
        return summary

    @classmethod
    def from_database(cls, db: Database | str | os.PathLike[str], min_records: int = 1) -> PretunedTable:
        """A new table filled by :meth:`build_from_database`."""
        table = cls()
        table.build_from_database(db, min_records)
        return table

    # -- files -------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """``{"format": FORMAT, "entries": [...]}``, entries in key order."""
        return {"format": FORMAT, "entries": [self.entries[k].to_json() for k in sorted(self.entries)]}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the table as JSON, atomically; refuses folders and SQLite files (a database is
        never overwritten: :func:`~tensortune.utils.atomic.check_output_path`). Returns the path."""
        from ..utils.atomic import atomic_write, check_output_path

        target = check_output_path(path, overwrite=True, what="pre-tuned table")
        return atomic_write(target, json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PretunedTable:
        """Read a table written by :meth:`save`; raises :class:`PretunedError` (one line, naming the
        file) when it cannot be read, is not JSON, or is not a ``tensortune-pretuned/1`` table."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise PretunedError(f"{path}: cannot read the pre-tuned table ({type(e).__name__}: {e})") from None
        try:
            data = json.loads(text)
        except ValueError as e:
            raise PretunedError(f"{path}: not a JSON file ({e})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise PretunedError(f"{path}: not a pre-tuned table (format {found!r}, expected {FORMAT!r})")
        if not isinstance(data.get("entries"), list):
            raise PretunedError(f"{path}: field 'entries' is not a list")
        table = cls()
        for i, d in enumerate(data["entries"]):
            try:
                table.add(PretunedEntry.from_json(d))
            except ValueError as e:
                raise PretunedError(f"{path}: entry {i}: {e}") from None
        return table

    # -- lookup ------------------------------------------------------------------------------------

    def _group_index(self) -> dict[tuple[str, str, tuple[str, ...]], _Group]:
        """Entries grouped by (target type, task key, argument names), with their rank rows (built
        once after a change)."""
        if self._groups is None:
            members: dict[tuple[str, str, tuple[str, ...]], list[PretunedEntry]] = {}
            for e in self.entries.values():
                if e.args:  # no argument vector, no similarity
                    members.setdefault((e.target_type, e.op, tuple(sorted(e.args))), []).append(e)
            groups = {}
            for key, entries in members.items():
                values = np.array([[v for _, v in _args_key(e.args)] for e in entries], dtype=np.float64)
                values = values.reshape(len(entries), len(key[2]))
                ranks, constant = _centred_ranks(values)
                groups[key] = _Group(entries, ranks, constant, np.log2(np.maximum(values, 1.0)),
                                     np.array([e.kernel_class for e in entries], dtype=object))
            self._groups = groups
        return self._groups

    def similar(self, target: str, op: str, kernel_class: str, args: Mapping[str, int]
                ) -> tuple[PretunedEntry, float] | None:
        """The entry of target type ``target`` and task key ``op`` (any kernel class) whose argument
        names are those of ``args`` and whose argument vector is most similar by Spearman's rho
        (NaN, from a constant vector, counts as -1), with that rho; None when there is no such entry.

        Ties (within :data:`RHO_TIE`) go to the same kernel class, then to the smallest sum of
        |log2| differences of the arguments, then to the entry stored first.
        """
        items = _args_key(args)
        if not items:
            return None
        group = self._group_index().get((target, op, tuple(k for k, _ in items)))
        if group is None:
            return None
        values = np.array([[v for _, v in items]], dtype=np.float64)
        q, q_const = _centred_ranks(values)
        if q_const[0]:
            rho = np.full(len(group.entries), -1.0)
        else:
            rho = np.clip(group.ranks @ q[0], -1.0, 1.0)
            rho[group.constant] = -1.0
        top = rho.max()
        tied = np.flatnonzero(rho >= top - RHO_TIE)
        if len(tied) > 1:
            other_class = group.kernel_classes[tied] != kernel_class
            size = np.abs(group.logs[tied] - np.log2(np.maximum(values[0], 1.0))).sum(axis=1)
            tied = tied[np.lexsort((tied, size, other_class))]
        best = int(tied[0])
        return group.entries[best], round(float(rho[best]), 12)  # 1.0, not 0.9999999999999998

    def lookup(self, task: Task, threads: int, tau: float = DEFAULT_TAU) -> StartPoint:
        """The start point of a search for ``task`` run with ``threads`` threads.

        1. an entry with exactly the task's key (an O(1) hit): its config;
        2. else the most Spearman-similar entry of the same target type and task key whose
           argument names are the task's (:meth:`similar`), when its rho > ``tau``: its config
           mapped onto the task's space (:func:`map_knobs`);
        3. else, or when the mapping finds no valid config, the template's default config.
        """
        space = task.space
        default_cache: list[Config] = []

        def default() -> Config:
            if not default_cache:
                default_cache.append(_default_config(task))
            return default_cache[0]

        ttype, op = target_type(task.target_json, threads), task_key(task.op, task.template_name)
        exact = self.entries.get((ttype, op, task.kernel_class, _args_key(task.args)))
        if exact is not None:
            config, note = map_knobs(space, exact.knobs, default)
            if config is not None:
                return StartPoint(config, HOW_EXACT, None, exact, "exact hit" + (f" ({note})" if note else ""))
            return StartPoint(default(), HOW_DEFAULT, None, None,
                              "exact hit, but its config maps onto no valid config of this space")
        found = self.similar(ttype, op, task.kernel_class, task.args)
        if found is None:
            return StartPoint(default(), HOW_DEFAULT, None, None,
                              f"no entry for {op} on {ttype} with arguments {','.join(sorted(task.args))}")
        entry, rho = found
        if not rho > tau:
            return StartPoint(default(), HOW_DEFAULT, None, None,
                              f"no entry above tau={tau:g} (best {entry.describe()}, rho={rho:.2f})")
        config, note = map_knobs(space, entry.knobs, default)
        if config is None:
            return StartPoint(default(), HOW_DEFAULT, None, None,
                              f"similar to {entry.describe()} (rho={rho:.2f}), but its config maps onto "
                              "no valid config of this space")
        return StartPoint(config, HOW_SIMILAR, rho, entry,
                          f"similar to {entry.describe()} (rho={rho:.2f})" + (f"; {note}" if note else ""))


def _default_config(task: Task) -> Config:
    """The template's default config (:meth:`Task.default_config`), else the space's first valid one."""
    try:
        return task.default_config()
    except (ValueError, KeyError, IndexError, TypeError):  # a default outside this space
        for c in task.space:
            return c
        raise PretunedError(f"{task.name}: its space has no valid config") from None


def _in_space(space: ConfigSpace, trial: TrialRecord) -> Config | None:
    """The config of ``trial`` in ``space``, or None when it is not in it (index beyond the space,
    stored knob values that differ from the space's at that index, or an invalid config)."""
    if not 0 <= trial.config_index < len(space):
        return None
    config = space.get(trial.config_index)
    if trial.config and _jsonable(trial.config) != _jsonable(config.knobs):
        return None
    return config if space.is_valid(config) else None


def _best_in_space(space: ConfigSpace, trials: Iterable[TrialRecord], ctx: MeasureContext
                   ) -> tuple[TrialRecord | None, Config | None]:
    """The cheapest verified successful trial of ``ctx`` whose config is in ``space``, and that config."""
    best: TrialRecord | None = None
    best_config: Config | None = None
    for t in trials:
        if t.context != ctx or not (t.ok and t.verified) or (best is not None and t.cost >= best.cost):
            continue
        config = _in_space(space, t)
        if config is not None:
            best, best_config = t, config
    return best, best_config


__all__ = ["BuildSummary", "DEFAULT_TAU", "FORMAT", "PretunedEntry", "PretunedError", "PretunedTable", "StartPoint",
           "map_knobs", "nearest_valid", "target_type", "task_key"]
