"""Measurement records: what goes into the builder and runner, and what comes out.

Errors are results: every candidate ends as a :class:`MeasureResult`, either with costs
(seconds per run) or with an :class:`ErrorKind` and the error message.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import TensortuneError

if TYPE_CHECKING:  # pragma: no cover
    from ..space import Config
    from ..task import Task


class ErrorKind(str, enum.Enum):
    """Why a candidate produced no usable timing (AutoTVM's taxonomy, plus wrong answer)."""

    NONE = "none"
    INSTANTIATION = "instantiation"  # the template could not apply the config
    COMPILE = "compile"  # TVM failed to lower / compile / export the module
    RUNTIME = "runtime"  # the kernel failed, crashed or aborted while running
    WRONG_ANSWER = "wrong_answer"  # output did not match the reference
    BUILD_TIMEOUT = "build_timeout"
    RUN_TIMEOUT = "run_timeout"
    UNKNOWN = "unknown"


@dataclass
class BuildResult:
    """Outcome of compiling one candidate.

    ``artifact`` is the path of the exported shared library (None on error); ``build_cpu``
    the builder process's CPU-seconds for it (None: not readable, e.g. the builder died).
    """

    artifact: str | None
    error: ErrorKind = ErrorKind.NONE
    error_msg: str = ""
    build_time: float = 0.0
    build_cpu: float | None = None


@dataclass
class MeasureResult:
    """Outcome of one trial.

    ``costs`` are seconds per run (one per repeat); ``cost`` is their median
    (``inf`` on error). ``spread`` is (max - min) / median of the costs. ``build_time`` and
    ``run_time`` are wall seconds; ``build_cpu`` and ``run_cpu`` the CPU-seconds the builder
    and the runner process spent on the candidate (None: not readable, e.g. the process died);
    ``energy_j`` the joules measured around it where the machine has a counter (else None).
    """

    costs: list[float]
    error: ErrorKind = ErrorKind.NONE
    error_msg: str = ""
    build_time: float = 0.0
    run_time: float = 0.0
    timestamp: float = 0.0
    threads: int = 0
    energy_j: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    build_cpu: float | None = None
    run_cpu: float | None = None

    @property
    def cpu_s(self) -> float | None:
        """CPU-seconds of building and running it (None when neither could be read)."""
        parts = [x for x in (self.build_cpu, self.run_cpu) if x is not None]
        return sum(parts) if parts else None

    @property
    def ok(self) -> bool:
        """True when the candidate built, ran and matched the reference."""
        return self.error is ErrorKind.NONE and bool(self.costs)

    @property
    def cost(self) -> float:
        """Median seconds per run, ``inf`` for a failed candidate."""
        if not self.ok:
            return float("inf")
        s = sorted(self.costs)
        n = len(s)
        return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])

    @property
    def spread(self) -> float:
        """Relative spread (max - min) / median of the repeats; 0 on error."""
        if not self.ok:
            return 0.0
        return (max(self.costs) - min(self.costs)) / self.cost


class WorkerStartError(TensortuneError, RuntimeError):
    """A worker process could not start (a broken environment, a plug-in that fails to import)."""

    exit_code = 1  # the environment, not the input


@dataclass(frozen=True)
class MeasureInput:
    """A candidate: a task and one config of its space."""

    task: Task
    config: Config
