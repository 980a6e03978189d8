"""Measurement settings: the one place their defaults are declared."""
from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from ..target import cpu_count
from .noise import QUIET_WAIT_S

log = logging.getLogger(__name__)

#: The environment variable that sets the default ``quiet_wait_s``: the seconds a run waits for a
#: quiet spell before re-measuring its finalists (0 on a machine that is never quiet, where the
#: wait only costs time; the test suite sets it low, its own processes keep the machine busy).
QUIET_WAIT_ENV = "TENSORTUNE_QUIET_WAIT_S"


def default_quiet_wait_s() -> float:
    """``quiet_wait_s`` by default: :data:`QUIET_WAIT_ENV` where it is set to a number of seconds
    (a bad value is said once and ignored), else :data:`~tensortune.measure.noise.QUIET_WAIT_S`."""
    text = os.environ.get(QUIET_WAIT_ENV)
    if text is None:
        return QUIET_WAIT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        if text not in _BAD_ENV:
            _BAD_ENV.add(text)
            log.warning("%s=%r is not a number of seconds; waiting up to %s s", QUIET_WAIT_ENV, text, QUIET_WAIT_S)
        return QUIET_WAIT_S
    return seconds


_BAD_ENV: set[str] = set()

#: The timing mode of costs measured inside a running model (not by the runner).
IN_MODEL = "in-model"
#: The stored timing mode of cache-flushed timing (:meth:`MeasureOptions.flushed`): "cold" in every
#: trial's timing key, so records written before the name changed stay comparable.
FLUSHED_MODE = "cold"


@dataclass
class MeasureOptions:
    """How candidates are built and timed.

    ``number`` runs make one repeat (raised until a repeat lasts ``min_repeat_ms``);
    ``repeat`` repeats give the costs whose median is reported; ``cooldown_ms`` pauses
    between repeats; ``flush_cache`` flushes the CPU caches before each repeat;
    ``threads`` is the kernel's thread count (TVM_NUM_THREADS of the runner process);
    ``check_correctness`` compares every candidate's output with the reference first;
    ``rpc`` (``"tracker_host:port:key"``) times candidates on a device of a TVM RPC tracker
    instead of this machine (they are still built here), ``rpc_workers`` of them at once (one
    device each), each runner keeping its device's session for up to ``rpc_session_reuse``
    candidates (a new session costs about 0.1 s and a warm-up; 1: a session per candidate);
    ``runner_restart`` candidates are run by one runner process before a fresh one
    takes over: a process keeps every kernel library it loaded mapped (about 5 of the kernel's
    65,530 memory maps each), and past about 13,000 every further load fails;
    ``warmup_s`` seconds of untimed runs precede the first timing in a fresh process (a runner
    process, or an RPC device's session): the first tenths of a second of parallel runs in a
    new process read slow; ``probe`` times the contention probe
    beside every candidate and flags trials measured while the machine was busy, and
    ``quiet_wait_s`` bounds the wait for a quiet spell before finalists are re-measured
    (:mod:`tensortune.measure.noise`).
    """

    number: int = 1
    repeat: int = 5
    min_repeat_ms: int = 40
    cooldown_ms: int = 0
    flush_cache: bool = False
    check_correctness: bool = True
    seed: int = 0
    threads: int = field(default_factory=cpu_count)
    build_timeout: float = 20.0
    run_timeout: float = 30.0
    n_parallel: int = field(default_factory=cpu_count)
    imports: tuple[str, ...] = ()
    rpc: str | None = None
    rpc_workers: int = 1
    rpc_session_reuse: int = 32
    runner_restart: int = 2000
    warmup_s: float = 0.5
    probe: bool = True
    quiet_wait_s: float = field(default_factory=default_quiet_wait_s)

    @classmethod
    def flushed(cls, **overrides: Any) -> "MeasureOptions":
        """Cache-flushed timing: options that time a kernel as it runs inside a whole model: every run starts with its
        weights (every argument but the first) flushed from the caches, one run per repeat, 10
        repeats. A model's weights do not fit the caches (ResNet-18 47 MB, BERT-base 440 MB), so
        a config tuned on hot caches can lose to the default in the model (bert_base tuned hot
        ran slower than untuned; tuned flushed, faster: bench/results/models.md). ``tensortune tune MODEL``
        measures this way; ``tune-op`` keeps the hot defaults."""
        return cls(**{"flush_cache": True, "number": 1, "repeat": 10, "min_repeat_ms": 0, **overrides})

    def timing(self) -> str:
        """How candidates are timed, in words (recorded with model tuning results)."""
        return "flushed (caches flushed before every run)" if self.flush_cache else "hot (caches warm)"

    def timing_key(self) -> str:
        """The timing settings that make two costs comparable, as canonical JSON (stored with
        every trial): mode (``hot``, or :data:`FLUSHED_MODE` when caches are flushed), number, repeat
        and min_repeat_ms."""
        spec = {"mode": FLUSHED_MODE if self.flush_cache else "hot", "number": self.number, "repeat": self.repeat,
                "min_repeat_ms": self.min_repeat_ms}
        return json.dumps(spec, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def in_model_timing_key(model: str) -> str:
        """The timing key of costs measured inside ``model`` (:mod:`tensortune.models.in_model`): a
        function's time per call while the whole compiled model runs, which compares only with
        other costs measured inside the same model."""
        return json.dumps({"mode": IN_MODEL, "model": model}, sort_keys=True, separators=(",", ":"))

    def runner_opts(self) -> dict[str, Any]:
        """The settings the runner worker needs."""
        d = asdict(self)
        out = {k: d[k] for k in ("number", "repeat", "min_repeat_ms", "cooldown_ms", "flush_cache", "check_correctness",
                                 "seed", "warmup_s", "probe")}
        out["session_reuse"] = max(1, int(self.rpc_session_reuse))
        return out
