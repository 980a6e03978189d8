"""Plain records stored in the tuning database: one per task, one per measured trial."""
from __future__ import annotations

import math
import statistics
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Mapping

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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskRecord:
        """Inverse of :meth:`to_json`; raises ValueError on missing or mistyped fields."""
        return _from_json(cls, data, cls._KINDS)


@dataclass
class TrialRecord:
    """One measured configuration of a task.

    ``costs`` are seconds per run (empty on error); ``error`` is "none" or an error kind
    (an ``ErrorKind`` member is stored as its value); ``id`` is set by the database.
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
    id: int | None = field(default=None, compare=False)

    _KINDS = {"workload_key": "str", "config_index": "int", "config": "dict", "costs": "list",
              "error": "str", "error_msg": "str", "build_time": "float", "run_time": "float",
              "timestamp": "float", "tuner": "str", "seed": "int?", "tvm_version": "str",
              "target": "str", "threads": "int", "verified": "bool", "energy_j": "float?", "id": "int?"}

    def __post_init__(self) -> None:
        self.error = getattr(self.error, "value", self.error)  # accept an ErrorKind enum member

    @property
    def ok(self) -> bool:
        """True when the trial ran without error and has timings."""
        return self.error == "none" and bool(self.costs)

    @property
    def cost(self) -> float:
        """Median of ``costs`` in seconds; ``inf`` when not :attr:`ok`."""
        return float(statistics.median(self.costs)) if self.ok else math.inf

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict of all fields."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialRecord:
        """Inverse of :meth:`to_json`; raises ValueError on missing or mistyped fields."""
        return _from_json(cls, data, cls._KINDS)
