"""The Tuner interface and the loop every tuner shares: propose, measure, record, update, confirm.

With a database, a ``tune`` call that measured anything ends by confirming: the top
:data:`CONFIRM_TOP` configs of the task in this measure context are measured again,
interleaved over :data:`CONFIRM_ROUNDS` rounds (A, B, C, then A, B, C again, ...), and every
re-measurement is stored as a trial marked ``extra["confirm"] = {"group", "round", "of"}``.
The best is then the config with the lowest median over the rounds of that group, not the one
lucky measurement (``Database.best``). The top configs are those with the lowest median over
their verified trials, confirmations included; when the latest group already holds exactly
them, in every round, nothing is measured again. Confirmations are no search trials: they never
count against ``n_trial`` nor in ``trials_measured`` (``TuneResult.confirm_measured`` has them).
"""
from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..measure import ErrorKind, MeasureInput, MeasureResult, Measurer
from ..space import Config

#: Default batch size: candidates proposed, built and run per round.
DEFAULT_BATCH_SIZE = 16
#: Configs confirmed at the end of a ``tune`` call that measured anything (0: no confirmation).
CONFIRM_TOP = 3
#: Rounds of a confirmation: each of the top configs is measured this many times, interleaved.
CONFIRM_ROUNDS = 3

Callback = Callable[["Tuner", Sequence[MeasureInput], Sequence[MeasureResult]], None]


@dataclass
class TuneResult:
    """What one ``tune`` call produced."""

    task: Any
    best_config: Config | None
    best_cost: float
    trials_measured: int
    errors: Counter
    history: list[dict[str, float]] = field(default_factory=list)
    stop_reason: str = ""
    verified: bool = False
    best_spread: float = 0.0  # (max - min) / median of the best config's repeats
    tuner_status: str = ""  # model-based tuners: model and transfer in one line
    #: where the best came from: {"from": "this run"} or {"from": "database", "trial_id", "tuner", "timestamp"}
    best_source: dict[str, Any] = field(default_factory=dict)
    #: how every compared cost was measured: target, threads, timing and CPU (a MeasureContext)
    context: Any = None
    #: re-measurements made by this call's confirmation (not in ``trials_measured``)
    confirm_measured: int = 0
    #: the confirmation group the best was chosen from: {"group", "rounds", "configs"} (empty: a
    #: single measurement)
    confirmation: dict[str, Any] = field(default_factory=dict)

    @property
    def best_gflops(self) -> float:
        """GFLOP/s of the best config (0 when none succeeded)."""
        return self.task.flops / self.best_cost / 1e9 if self.best_config is not None and self.best_cost < float("inf") else 0.0

    def to_json(self) -> dict[str, Any]:
        """The CLI's machine-readable summary."""
        return {
            "task": self.task.name,
            "workload_key": self.task.workload_key,
            "best_config": self.best_config.to_json()["knobs"] if self.best_config is not None else None,
            "best_latency_ms": self.best_cost * 1e3 if self.best_cost < float("inf") else None,
            "best_gflops": self.best_gflops,
            "trials_measured": self.trials_measured,
            "errors": dict(self.errors),
            "best_spread": self.best_spread,
            "verified": self.verified,
            "best_source": self.best_source or None,
            "measured": self.context.to_json() if self.context is not None else None,
            "stop_reason": self.stop_reason,
            "confirm_measured": self.confirm_measured,
            "confirmation": self.confirmation or None,
        }

    def describe_source(self) -> str:
        """Where the best came from and how it was measured, in one line."""
        if not self.best_source:
            return "no best"
        src = self.best_source
        where = "measured this run" if src["from"] == "this run" else (
            f"stored trial {src['trial_id']} ({src['tuner'] or 'unknown tuner'}, "
            f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(src['timestamp']))})")
        if self.confirmation:
            where += (f", median of {self.confirmation['rounds']} confirmation rounds of its top "
                      f"{len(self.confirmation['configs'])} configs")
        return f"{where}; {self.context.describe()}" if self.context is not None else where


class Tuner(ABC):
    """Base of every tuner: subclasses implement :meth:`next_batch` (and may refine :meth:`update`).

    Bookkeeping shared by all: the set of visited config indices (measured in this run or
    found in the database), the best config and cost, and an ``rng`` seeded from ``seed``.
    With ``start_from_default`` the template's default config is measured in the first
    batch (when not measured yet), so a tuned result is never worse than the untuned one.

    A tuner may be tuned again (the schedulers give a task one batch per round to the same
    tuner): it remembers which stored trials it already has, so a later ``tune`` call loads
    only the trials stored since by others. ``confirm_top`` and ``confirm_rounds`` (defaults
    :data:`CONFIRM_TOP`, :data:`CONFIRM_ROUNDS`) size the confirmation at the end of a call.
    """

    name: str = ""

    def __init__(self, task: Any, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
                 start_from_default: bool = True) -> None:
        self.task = task
        self.start_from_default = start_from_default
        self.space = task.space
        self.seed = seed
        self.rng = random.Random(seed)
        self.batch_size = batch_size
        self.visited: set[int] = set()
        self.best_config: Config | None = None
        self.best_cost = float("inf")
        self.best_result: MeasureResult | None = None
        self.confirm_top = CONFIRM_TOP
        self.confirm_rounds = CONFIRM_ROUNDS
        #: ids of the stored trials this tuner has (loaded or written), per database
        self._have_trials: dict[str, set[int]] = {}
        #: confirmation groups this tuner measured
        self._groups_made: set[str] = set()

    # ------------------------------------------------------------ the interface
    @abstractmethod
    def next_batch(self, n: int) -> list[Config]:
        """Up to ``n`` unvisited valid configs to measure next (empty: nothing left)."""

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Learn from measured configs (the base records them as visited and tracks the best).

        A result marked unverified (``extra["verified"] is False``: a stored trial whose output
        was never checked) is learnt from but never becomes the best.
        """
        for c, r in zip(configs, results):
            self.visited.add(c.index)
            if r.ok and r.extra.get("verified") is not False and r.cost < self.best_cost:
                self.best_cost, self.best_config, self.best_result = r.cost, c, r

    def load_history(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Past records of this task (from the database); by default treated like an update."""
        self.update(configs, results)

    # ------------------------------------------------------------ the loop
    def tune(
        self,
        n_trial: int,
        measurer: Measurer,
        early_stopping: int | None = None,
        time_budget: float | None = None,
        callbacks: Sequence[Callback] = (),
        database: Any = None,
    ) -> TuneResult:
        """Measure up to ``n_trial`` configs; stop early on the time budget (seconds of wall
        time) or after ``early_stopping`` trials without improvement, or when the space is
        exhausted. With a database, trials already stored for the task in this run's context
        (same machine, threads and timing) are loaded first (never measured again, and this
        tuner's stored trials count against ``n_trial``; trials a previous call of this tuner
        loaded or wrote are not loaded again) and every new trial is committed as it completes,
        with that context. Then, if anything was measured, the top configs are confirmed (see
        the module's docstring) and the best reported is the confirmed one.
        """
        from .records import history_from_db, measure_context, record_trial

        start = time.perf_counter()
        done_before = 0
        context = measure_context(self.task, measurer.options)
        have: set[int] = set()
        if database is not None:
            have = self._have_trials.setdefault(str(getattr(database, "path", id(database))), set())
            configs, results, done_before = history_from_db(database, self, context, have)
            if configs:
                self.load_history(configs, results)
        errors: Counter = Counter()
        history: list[dict[str, float]] = []
        measured = 0
        last_improve = 0
        stop = "trials"
        budget = max(0, n_trial - done_before)

        def commit(inp: MeasureInput, res: MeasureResult) -> None:
            if database is not None:
                have.add(record_trial(database, self, inp, res, context))

        while measured < budget:
            if time_budget is not None and time.perf_counter() - start >= time_budget:
                stop = "time_budget"
                break
            if early_stopping is not None and measured - last_improve >= early_stopping:
                stop = "early_stopping"
                break
            size = min(self.batch_size, budget - measured)
            first = self._unmeasured_default() if measured == 0 else None
            lead = [first] if first is not None else []
            batch = lead + [c for c in self.next_batch(size - len(lead))
                            if c.index not in self.visited and (first is None or c.index != first.index)]
            if not batch:
                stop = "space_exhausted"
                break
            inputs = [MeasureInput(self.task, c) for c in batch]
            results = measurer.measure(inputs, commit)
            before = self.best_cost
            self.update(batch, results)
            for k, r in enumerate(results):
                measured += 1
                if r.error is not ErrorKind.NONE:
                    errors[r.error.value] += 1
                history.append({"trial": measured, "elapsed": time.perf_counter() - start,
                                "cost": r.cost, "best": self.best_cost})
            if self.best_cost < before:
                last_improve = measured
            for cb in callbacks:
                cb(self, inputs, results)
        confirm_measured, confirmation = 0, {}
        if database is not None:
            if measured:
                confirm_measured = self._confirm(measurer, database, context, have)
            confirmation = self._adopt_confirmed(database, context)
        verified = self._verify_best(measurer)
        spread = self.best_result.spread if self.best_result is not None and verified else 0.0
        source: dict[str, Any] = {}
        if self.best_result is not None:
            stored = self.best_result.extra.get("stored")
            source = {"from": "database", **stored} if stored else {"from": "this run"}
        return TuneResult(self.task, self.best_config, self.best_cost, measured, errors, history, stop, verified, spread,
                          getattr(self, "status", ""), source, context, confirm_measured,
                          confirmation if self.best_config is not None else {})

    # ------------------------------------------------------------ confirmation
    def _confirm(self, measurer: Measurer, database: Any, context: Any, have: set[int]) -> int:
        """Measure the task's top ``confirm_top`` configs of ``context`` again, interleaved over
        ``confirm_rounds`` rounds, storing each result marked as a confirmation; return how many
        were measured. Nothing is measured when the latest confirmation group already holds
        exactly these configs, every one of them in every round (nothing new to confirm)."""
        import uuid

        from ..database import latest_confirmation, top_configs
        from .records import record_trial

        if self.confirm_top < 1 or self.confirm_rounds < 1:
            return 0
        trials = [t for t in database.trials(self.task.workload_key) if t.context == context]
        top = top_configs(trials, self.confirm_top)
        last = latest_confirmation(trials)
        if (top and {t.config_index for t in last} == set(top) and len(last) == len(top) * self.confirm_rounds
                and all(t.confirmation["of"] == self.confirm_rounds for t in last)):
            return 0
        configs = []
        for i in top:
            try:
                configs.append(self.space.get(i))
            except IndexError:  # a record of another space version
                continue
        if not configs:
            return 0
        group, rounds = uuid.uuid4().hex[:16], self.confirm_rounds
        self._groups_made.add(group)
        inputs = [MeasureInput(self.task, c) for c in configs]

        def commit(r: int, inp: MeasureInput, res: MeasureResult) -> None:
            mark = {"confirm": {"group": group, "round": r, "of": rounds}}
            have.add(record_trial(database, self, inp, res, context, extra=mark))

        if hasattr(measurer, "measure_rounds"):  # built once, run every round
            measurer.measure_rounds(inputs, rounds, commit)
        else:  # a measurer without it: build and run each round
            for r in range(1, rounds + 1):
                measurer.measure(inputs, lambda inp, res, r=r: commit(r, inp, res))
        return rounds * len(configs)

    def _adopt_confirmed(self, database: Any, context: Any) -> dict[str, Any]:
        """Make the database's confirmed best of ``context`` this tuner's best (when the latest
        confirmation group has one); return that group's description, or {} (best unchanged)."""
        from ..database import latest_confirmation
        from .records import result_of

        best = database.best(self.task.workload_key, context)
        if best is None or best.confirmation is None:
            return {}
        try:
            config = self.space.get(best.config_index)
        except IndexError:
            return {}
        result = result_of(best)
        if best.confirmation["group"] in self._groups_made:
            del result.extra["stored"]  # confirmed by this tuner: "this run"
        self.best_config, self.best_cost, self.best_result = config, best.cost, result
        group = latest_confirmation(t for t in database.trials(self.task.workload_key) if t.context == context)
        return {"group": best.confirmation["group"], "rounds": best.confirmation["of"],
                "configs": sorted({t.config_index for t in group})}

    def _unmeasured_default(self) -> Config | None:
        """The template's default config, if asked for and not measured yet."""
        make = getattr(self.task, "default_config", None)
        if not self.start_from_default or make is None:
            return None
        try:
            default = make()
        except Exception:  # noqa: BLE001 - a template without a usable default: plain search
            return None
        return None if default.index in self.visited else default

    def _verify_best(self, measurer: Measurer) -> bool:
        """Check the best config's output against the reference before reporting it."""
        if self.best_config is None:
            return False
        if measurer.options.check_correctness:
            return True  # every ok result already matched the reference
        res = measurer.verify(MeasureInput(self.task, self.best_config))
        if not res.ok:
            self.best_config, self.best_cost, self.best_result = None, float("inf"), None
            return False
        return True
