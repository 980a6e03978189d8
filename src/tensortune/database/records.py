"""Plain records stored in the tuning database: one per task, one per measured trial.

Every trial has an identity of its own, its ``uid``: random for a new measurement, kept by
export and import, so a round trip gives back every trial and an import adds each one once.
Trials stored before identities existed (an older database, an older export) get one derived
from their content and its occurrence (:func:`assign_content_uids`), the same in an upgraded
database and in an import of its old export, and byte-identical trials still apart.

Records are checked twice: :meth:`from_json` checks types, :meth:`validate` checks values
(finite positive costs, a known error kind, a non-negative config index, ...). Imports
validate every record before anything is written; rows read back from a database are
validated too, and a bad one is skipped instead of crashing tuning or reporting.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from collections import Counter
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Iterable, Mapping, NamedTuple

from ..limits import INT64_MAX

#: Every error kind a trial may carry (``tensortune.measure.ErrorKind``'s values; kept here so the
#: database layer does not import the measurement layer).
ERROR_KINDS = ("none", "instantiation", "compile", "runtime", "wrong_answer", "build_timeout", "run_timeout",
               "unknown")

#: What a trial's ``uid`` may be: a short token (a hex uuid4 or content hash when made here).
UID_PATTERN = re.compile(r"[0-9A-Za-z][0-9A-Za-z._:-]{0,127}")

_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "dict": (dict,), "list": (list,),
}


def _check(name: str, value: Any, kind: str) -> Any:
    """Return ``value`` converted to ``kind`` (e.g. "float", "int?"), or raise ValueError."""
    if kind.endswith("?"):
        if value is None:
            return None
        kind = kind[:-1]
    if isinstance(value, _TYPES[kind]) and (kind == "bool" or not isinstance(value, bool)):
        if kind == "float":
            return float(value)
        if kind == "list":  # the only list field is ``costs``
            return [_check(name, v, "float") for v in value]
        return value
    raise ValueError(f"field {name!r}: expected {kind}, got {type(value).__name__}")


def _check_json_object(name: str, text: str) -> None:
    """Raise ValueError unless ``text`` is the JSON text of an object."""
    try:
        ok = isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        ok = False
    if not ok:
        raise ValueError(f"field {name!r}: not the JSON text of an object")


def _from_json(cls: type, data: Mapping[str, Any], kinds: Mapping[str, str]) -> Any:
    """Build a ``cls`` from a JSON object, checking types; unknown keys are ignored."""
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    kwargs = {}
    for f in fields(cls):
        if f.name in data:
            kwargs[f.name] = _check(f.name, data[f.name], kinds[f.name])
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ValueError(f"missing field {f.name!r}")
    return cls(**kwargs)


@dataclass
class TaskRecord:
    """A tuning task: identified by ``workload_key``; ``task_json`` is opaque to the database."""

    workload_key: str
    op: str
    kernel_class: str
    target: str
    flops: float
    task_json: str
    created: float = 0.0

    _KINDS = {"workload_key": "str", "op": "str", "kernel_class": "str", "target": "str",
              "flops": "float", "task_json": "str", "created": "float"}

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict of all fields."""
        return asdict(self)

    def validate(self) -> None:
        """Raise ValueError naming the first bad value (types are checked by :meth:`from_json`)."""
        if not self.workload_key:
            raise ValueError("field 'workload_key': empty")
        if not (math.isfinite(self.flops) and self.flops >= 0):  # 0: a pure data-movement function
            raise ValueError(f"field 'flops': {self.flops!r} is not a non-negative finite number")
        if not math.isfinite(self.created) or self.created < 0:
            raise ValueError(f"field 'created': {self.created!r} is not a non-negative finite number")
        for name in ("task_json", "target"):
            _check_json_object(name, getattr(self, name))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskRecord:
        """Inverse of :meth:`to_json`; raises ValueError on missing or mistyped fields."""
        return _from_json(cls, data, cls._KINDS)


@dataclass
class TrialRecord:
    """One measured configuration of a task.

    ``costs`` are seconds per run (empty on error); ``error`` is "none" or an error kind
    (an ``ErrorKind`` member is stored as its value); ``id`` is set by the database.

    How it was measured: ``target`` (the LLVM target, with its cpu and cores), ``cpu_model``
    (the CPU's name), ``threads`` and ``timing`` (canonical JSON of the timing settings: mode
    hot or cold, number, repeat, min_repeat_ms; empty when not recorded, e.g. trials stored by
    schema version 1). Two trials' costs are comparable only when :attr:`context` agrees.

    ``extra`` is a JSON object of further facts about the trial. ``extra["confirm"]`` marks a
    confirmation: a re-measurement of one of the task's top configs made after a search
    (``{"group": id, "round": r, "of": R}``, see :attr:`confirmation` and :func:`confirmed_best`).
    Confirmations do not count against a task's trial budget.

    ``uid`` is the trial's identity (see the module's docstring): "" until the database gives it
    one. Equality compares content only, as for ``id``: two trials of one content may be two
    measurements.
    """

    workload_key: str
    config_index: int
    config: dict[str, Any]
    costs: list[float]
    error: str
    error_msg: str = ""
    build_time: float = 0.0
    run_time: float = 0.0
    timestamp: float = 0.0
    tuner: str = ""
    seed: int | None = None
    tvm_version: str = ""
    target: str = ""
    threads: int = 0
    verified: bool = False
    energy_j: float | None = None
    timing: str = ""
    cpu_model: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    id: int | None = field(default=None, compare=False)
    uid: str = field(default="", compare=False)

    _KINDS = {"workload_key": "str", "config_index": "int", "config": "dict", "costs": "list",
              "error": "str", "error_msg": "str", "build_time": "float", "run_time": "float",
              "timestamp": "float", "tuner": "str", "seed": "int?", "tvm_version": "str",
              "target": "str", "threads": "int", "verified": "bool", "energy_j": "float?",
              "timing": "str", "cpu_model": "str", "extra": "dict", "id": "int?",
              "uid": "str?"}

    def __post_init__(self) -> None:
        self.error = getattr(self.error, "value", self.error)  # accept an ErrorKind enum member
        if self.uid is None:  # JSON null: none yet
            self.uid = ""

    @property
    def ok(self) -> bool:
        """True when the trial ran without error and has timings."""
        return self.error == "none" and bool(self.costs)

    @property
    def cost(self) -> float:
        """Median of ``costs`` in seconds; ``inf`` when not :attr:`ok`."""
        return float(statistics.median(self.costs)) if self.ok else math.inf

    @property
    def context(self) -> MeasureContext:
        """Where and how the trial was measured: only trials of one context are compared."""
        return MeasureContext(self.target, self.threads, self.timing, self.cpu_model)

    @property
    def confirmation(self) -> dict[str, Any] | None:
        """``{"group", "round", "of"}`` when the trial is a confirmation re-measurement, else None."""
        confirm = self.extra.get("confirm")
        return confirm if isinstance(confirm, dict) else None

    @property
    def noisy(self) -> bool:
        """Whether it was timed while the machine was busy (``extra["noise"]["noisy"]``)."""
        noise = self.extra.get("noise")
        return bool(isinstance(noise, dict) and noise.get("noisy"))

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict of all fields."""
        return asdict(self)

    def validate(self) -> None:
        """Raise ValueError naming the first bad value (types are checked by :meth:`from_json`).

        A successful trial needs at least one cost; every cost must be a positive finite number
        of seconds; the error kind must be known; times and counts must be finite and >= 0.
        """
        if not self.workload_key:
            raise ValueError("field 'workload_key': empty")
        if self.config_index < 0:
            raise ValueError(f"field 'config_index': {self.config_index} is negative")
        if self.error not in ERROR_KINDS:
            raise ValueError(f"field 'error': unknown error kind {self.error!r} (known: {', '.join(ERROR_KINDS)})")
        for c in self.costs:
            if not (math.isfinite(c) and c > 0):
                raise ValueError(f"field 'costs': {c!r} is not a positive finite number of seconds")
        if self.error == "none" and not self.costs:
            raise ValueError("field 'costs': empty for a trial without error")
        for name in ("build_time", "run_time", "timestamp"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"field {name!r}: {v!r} is not a non-negative finite number")
        if self.energy_j is not None and not (math.isfinite(self.energy_j) and self.energy_j >= 0):
            raise ValueError(f"field 'energy_j': {self.energy_j!r} is not a non-negative finite number")
        for name in ("config_index", "threads", "seed"):
            v = getattr(self, name)
            if v is not None and not 0 <= v <= INT64_MAX:
                raise ValueError(f"field {name!r}: {v} is out of range (0 to {INT64_MAX})")
        if self.timing:
            _check_json_object("timing", self.timing)
        if self.target:
            _check_json_object("target", self.target)
        try:
            json.dumps(self.extra)
        except (TypeError, ValueError):
            raise ValueError("field 'extra': not a JSON object") from None
        if "confirm" in self.extra:
            _check_confirm(self.extra["confirm"])
        if self.uid and not UID_PATTERN.fullmatch(self.uid):
            raise ValueError(f"field 'uid': {self.uid[:40]!r} is not an identifier (letters, digits, '._:-', "
                             "at most 128)")

    def content(self) -> str:
        """Canonical JSON of every field but ``id`` and ``uid``: what the trial says."""
        data = {k: v for k, v in asdict(self).items() if k not in ("id", "uid")}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialRecord:
        """Inverse of :meth:`to_json`; raises ValueError on missing or mistyped fields."""
        return _from_json(cls, data, cls._KINDS)


class ContentUids:
    """Deterministic uids for trials without one, in stored order: a hash of the content
    (:meth:`TrialRecord.content`) and of its occurrence number (1st, 2nd, ...), so two
    byte-identical trials stay apart, and the same trials in the same order (an upgraded
    database, an old export of it) get the same uids."""

    def __init__(self) -> None:
        self._seen: Counter[str] = Counter()

    def next(self, content: str) -> str:
        """The uid of the next trial of ``content``."""
        digest = hashlib.sha256(content.encode()).hexdigest()
        self._seen[digest] += 1
        return hashlib.sha256(f"{digest}:{self._seen[digest]}".encode()).hexdigest()[:32]


def assign_content_uids(trials: Iterable[TrialRecord]) -> int:
    """Give each of ``trials`` (in stored order) without a uid its content uid (:class:`ContentUids`);
    return how many got one."""
    uids, n = ContentUids(), 0
    for t in trials:
        if not t.uid:
            t.uid = uids.next(t.content())
            n += 1
    return n


def _check_confirm(confirm: Any) -> None:
    """Raise ValueError unless ``confirm`` is ``{"group": non-empty str, "round": r, "of": R}``, 1 <= r <= R."""
    if not isinstance(confirm, dict):
        raise ValueError("field 'extra': 'confirm' is not an object")
    group, rnd, of = confirm.get("group"), confirm.get("round"), confirm.get("of")
    if not isinstance(group, str) or not group:
        raise ValueError("field 'extra': 'confirm' needs a non-empty string 'group'")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (rnd, of)) or not 1 <= rnd <= of:
        raise ValueError(f"field 'extra': 'confirm' round {rnd!r} of {of!r} is not 1 <= round <= of")


def latest_confirmation(trials: Iterable[TrialRecord]) -> list[TrialRecord]:
    """The trials of the latest confirmation group in ``trials`` (in stored order: the group of the
    last confirmation trial), all its rounds and nothing else; empty when there is none."""
    confirms = [t for t in trials if t.confirmation is not None]
    if not confirms:
        return []
    group = confirms[-1].confirmation["group"]  # type: ignore[index]
    return [t for t in confirms if t.confirmation["group"] == group]  # type: ignore[index]


def confirmed_best(trials: Iterable[TrialRecord]) -> TrialRecord | None:
    """The best of the latest confirmation group in ``trials`` (give trials of one task and one
    context, in stored order), or None when there is no group or no config of it qualifies.

    Each config of the group is judged by the median cost of its verified successful rounds (the
    lower middle one for an even count); a config with a failed round is dropped, an unverified
    round is ignored. The config with the lowest median wins (ties: the earlier trial), and the
    trial returned is its round whose cost is that median, so ``cost`` is the median.
    """
    rounds: dict[int, list[TrialRecord]] = {}
    failed: set[int] = set()
    for t in latest_confirmation(trials):
        if not t.ok:
            failed.add(t.config_index)
        elif t.verified:
            rounds.setdefault(t.config_index, []).append(t)
    best: TrialRecord | None = None
    for index, ts in rounds.items():
        if index in failed:
            continue
        ts = _quiet_first(ts)
        median = statistics.median_low([t.cost for t in ts])
        pick = next(t for t in ts if t.cost == median)
        if best is None or median < best.cost:
            best = pick
    return best


def _quiet_first(trials: list[TrialRecord]) -> list[TrialRecord]:
    """The quiet ones of ``trials`` when there are any, else all: contention only slows a kernel,
    so a noisy time says less about a config than a quiet one."""
    quiet = [t for t in trials if not t.noisy]
    return quiet or trials


def top_configs(trials: Iterable[TrialRecord], k: int) -> list[int]:
    """Up to ``k`` config indices of ``trials`` (one task, one context) with the lowest median cost
    over their verified successful trials (confirmations included; noisy ones only for a config
    without a quiet one), best first; ties go to the config measured first."""
    runs: dict[int, list[TrialRecord]] = {}
    for t in trials:
        if t.ok and t.verified:
            runs.setdefault(t.config_index, []).append(t)
    costs = {i: [t.cost for t in _quiet_first(ts)] for i, ts in runs.items()}
    order = sorted(costs, key=lambda i: statistics.median_low(costs[i]))  # stable: first measured first
    return order[:max(0, k)]


class MeasureContext(NamedTuple):
    """Where and how trials were measured; costs are compared only within one context.

    ``target`` is the canonical JSON of the LLVM target (cpu and cores included), ``timing``
    the canonical JSON of the timing settings ("" = not recorded), ``cpu_model`` the CPU's name.
    """

    target: str
    threads: int
    timing: str
    cpu_model: str

    def to_json(self) -> dict[str, Any]:
        """The context as JSON for people and scripts: timing parsed (None: not recorded),
        threads, CPU model (None: not recorded) and the target dict."""
        return {"timing": json.loads(self.timing) if self.timing else None, "threads": self.threads,
                "cpu_model": self.cpu_model or None, "target": json.loads(self.target)}

    @property
    def in_model(self) -> bool:
        """Whether the costs were measured inside a running model (``tensortune check``), not alone."""
        if '"in-model"' not in self.timing:
            return False
        try:
            return json.loads(self.timing).get("mode") == "in-model"
        except (ValueError, AttributeError):
            return False

    def describe(self) -> str:
        """One line for people: timing, threads and CPU."""
        return f"{describe_timing(self.timing)}, {self.threads} threads, {self.cpu_model or 'CPU not recorded'}"


def describe_timing(timing: str) -> str:
    """``timing`` JSON text in words, e.g. ``hot (number 1, repeat 5, min 40 ms)``."""
    if not timing:
        return "timing not recorded"
    t = json.loads(timing)
    if t.get("mode") == "in-model":
        return f"in-model (inside {t.get('model', '?')})"
    return (f"{t.get('mode', '?')} (number {t.get('number', '?')}, repeat {t.get('repeat', '?')}, "
            f"min {t.get('min_repeat_ms', '?')} ms)")
