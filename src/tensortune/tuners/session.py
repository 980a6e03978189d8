"""A tuning session: one ``tune`` call of one tuner, over the tuner's step API.

The session owns what every tuner shares: the budget (trials, wall time, early stopping), the
database (history loaded first, every trial committed as it completes, in its measure
context), the confirmation of the top configs at the end, the check of the best against the
reference, and the callbacks. The tuner only proposes (:meth:`Tuner.ask`) and learns
(:meth:`Tuner.tell`). A tuner may run many sessions (a scheduler gives a task one batch per
round); it keeps its state between them.

With a database, a session that measured anything ends by confirming: the top
:data:`CONFIRM_TOP` configs of the task in this measure context are measured again,
interleaved over :data:`CONFIRM_ROUNDS` rounds (A, B, C, then A, B, C again, ...), and every
re-measurement is stored as a trial marked ``extra["confirm"] = {"group", "round", "of"}``.
The template default (where the tuner started from it) joins the group whatever its rank, so a
tuned result never loses to the untuned one by the luck of a single measurement. The best is
then the config with the lowest median over the rounds of that group, not the one lucky
measurement (``Database.best``). The top configs are those with the lowest median over
their verified trials, confirmations included; when the latest group already holds exactly
them, in every round, nothing is measured again. Confirmations are no search trials: they never
count against the trial limit nor in ``trials_measured`` (``TuneResult.confirm_measured`` has them).
"""
from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..budget import UNBOUNDED_TRIALS, Budget, BudgetMeter
from ..database import Database
from ..database.sqlite import claim_owner
from ..measure import ErrorKind, MeasureInput, MeasureResult
from ..measure.noise import is_noisy
from .result import TuneResult

if TYPE_CHECKING:  # pragma: no cover
    from ..measure import MeasurerBase
    from .base import Tuner

#: Configs confirmed at the end of a session that measured anything (0: no confirmation).
CONFIRM_TOP = 3
#: Rounds of a confirmation: each of the top configs is measured this many times, interleaved.
CONFIRM_ROUNDS = 3

#: Confirmations measured again (after another wait for a quiet spell) when a config of one was
#: timed while the machine was busy in every round (:mod:`tensortune.measure.noise`).
CONFIRM_RETRIES = 1

#: Seconds to wait before asking again when every config asked was taken by another writer.
CLAIM_WAIT_S = 0.05

Callback = Callable[["Tuner", Sequence[MeasureInput], Sequence[MeasureResult]], None]


class TuningSession:
    """Runs ``tuner`` against ``measurer`` (and ``database``, when given) for one budget."""

    def __init__(self, tuner: "Tuner", measurer: MeasurerBase, database: Database | None = None,
                 callbacks: Sequence[Callback] = ()) -> None:
        self.tuner = tuner
        self.measurer = measurer
        self.database = database
        self.callbacks = list(callbacks)

    def run(self, budget: Budget) -> "TuneResult":
        """Measure until ``budget`` is spent (:class:`~tensortune.budget.Budget`: its wall time counts
        from the start, the tuner's set-up, such as a transfer model's fit, included; its energy
        limit is refused with :class:`~tensortune.measure.energy.EnergyUnavailable` on a machine
        without a counter) or the space is exhausted. The result's ``cost`` has the run's wall time,
        CPU-seconds and energy (:class:`~tensortune.measure.cost.RunCost`). With a database, trials
        already stored for the task in this run's context (same machine, threads and timing) are
        loaded first (never measured again, and this tuner's stored trials count against the trial
        limit; trials an earlier session of this tuner loaded or wrote are not loaded again) and
        every new trial is committed as it completes, with that context. Then, if anything was
        measured, the top configs are confirmed (see the module's docstring) and the best reported
        is the confirmed one.
        """
        from ..database.trials import history_from_db, measure_context, record_trial

        from ..measure.cost import CostMeter

        tuner, measurer, database = self.tuner, self.measurer, self.database
        self.meter = meter = CostMeter()
        limit = BudgetMeter(budget, meter)
        context = measure_context(tuner.task, measurer.options)
        have: set[int] = set()
        if database is not None:
            tuner.begin(database)
            have = tuner._have_trials.setdefault(str(getattr(database, "path", id(database))), set())
            configs, results, limit.done_before = history_from_db(database, tuner, context, have)
            if configs:
                tuner.load_history(configs, results)
        errors: Counter = Counter()
        noisy = 0  # search trials timed while the machine was busy
        self.quiet: bool | None = None  # whether the confirmation found a quiet spell (None: no wait)
        self.confirm_noisy: bool | None = None  # whether its last group was timed while busy
        history: list[dict[str, float]] = []
        measured = 0
        last_improve = 0
        claim_limit = UNBOUNDED_TRIALS if budget.trials is None else budget.trials
        shared, owner = isinstance(database, Database), claim_owner()  # claims shared with other writers

        def commit(inp: MeasureInput, res: MeasureResult) -> None:
            meter.add(res)
            if database is not None:
                have.add(record_trial(database, tuner, inp, res, context))

        while True:
            stop = limit.stop(measured, last_improve)
            if stop:
                break
            left = limit.trials_left(measured)
            batch = tuner.ask(tuner.batch_size if left is None else min(tuner.batch_size, left))
            if not batch:
                stop = tuner.finished or "space_exhausted"
                break
            if shared:
                batch, granted_left = self._claim(batch, owner, context, claim_limit, have)
                if not batch:
                    if granted_left:  # every config asked is measured or being measured elsewhere
                        time.sleep(CLAIM_WAIT_S)
                        continue
                    stop = "trials"  # the budget is spent by this tuner's other writers
                    break
            inputs = [MeasureInput(tuner.task, c) for c in batch]
            try:
                results = measurer.measure(inputs, commit)
            finally:
                if shared:
                    database.release(owner)
            before = tuner.best_cost
            tuner.tell(batch, results)
            for r in results:
                measured += 1
                if r.error is not ErrorKind.NONE:
                    errors[r.error.value] += 1
                noisy += is_noisy(r.extra)
                history.append({"trial": measured, "elapsed": limit.elapsed(),
                                "cost": r.cost, "best": tuner.best_cost})
            if tuner.best_cost < before:
                last_improve = measured
            for cb in self.callbacks:
                cb(tuner, inputs, results)
        confirm_measured, confirmation = 0, {}
        if database is not None:
            if measured:
                confirm_measured = self.confirm(context, have)
            confirmation = self.adopt_confirmed(context)
        verified = self.verify_best()
        spread = tuner.best_result.spread if tuner.best_result is not None and verified else 0.0
        source: dict[str, Any] = {}
        if tuner.best_result is not None:
            stored = tuner.best_result.extra.get("stored")
            source = {"from": "database", **stored} if stored else {"from": "this run"}
        return TuneResult(tuner.task, tuner.best_config, tuner.best_cost, measured, errors, history, stop, verified,
                          spread, tuner.status, source, context, confirm_measured,
                          confirmation if tuner.best_config is not None else {}, meter.total(),
                          noise={"noisy_trials": noisy, "quiet_spell": self.quiet, "confirm_noisy": self.confirm_noisy})

    def _claim(self, batch: list[Any], owner: str, context: Any, n_trial: int, have: set[int]
               ) -> tuple[list[Any], int]:
        """The configs of ``batch`` this session may measure (:meth:`Database.claim`) and the budget
        left. With budget left, the others are measured, or being measured, by another writer: the
        tuner marks them visited and learns the trials other writers stored since it last looked
        (without, they may only have met the budget's end, and stay open to a later session)."""
        from ..database.trials import history_from_db

        tuner = self.tuner
        granted, left = self.database.claim(tuner.task.workload_key, context, tuner.name, owner,
                                            [c.index for c in batch], n_trial)
        if len(granted) < len(batch):
            if left:
                tuner.visited.update(c.index for c in batch if c.index not in set(granted))
            configs, results, _ = history_from_db(self.database, tuner, context, have)
            if configs:
                tuner.load_history(configs, results)
        keep = set(granted)
        return [c for c in batch if c.index in keep], left

    # ------------------------------------------------------------ confirmation
    def confirm(self, context: Any, have: set[int]) -> int:
        """Measure the task's top ``confirm_top`` configs of ``context`` again, interleaved over
        ``confirm_rounds`` rounds, storing each result marked as a confirmation; return how many
        were measured. Nothing is measured when the latest confirmation group already holds
        exactly these configs, every one of them in every round (nothing new to confirm)."""
        from ..database import latest_confirmation, top_configs
        from ..database.trials import record_trial

        tuner, database = self.tuner, self.database
        if tuner.confirm_top < 1 or tuner.confirm_rounds < 1:
            return 0
        trials = [t for t in database.trials(tuner.task.workload_key) if t.context == context]
        top = list(top_configs(trials, tuner.confirm_top))
        incumbent = self.incumbent(trials)
        if top and incumbent is not None and incumbent not in top:
            top.append(incumbent)  # the default is re-measured beside them: the rounds judge both alike
        last = latest_confirmation(trials)
        if (top and {t.config_index for t in last} == set(top) and len(last) == len(top) * tuner.confirm_rounds
                and all(t.confirmation["of"] == tuner.confirm_rounds for t in last)):
            return 0
        configs = []
        for i in top:
            try:
                configs.append(tuner.space.get(i))
            except IndexError:  # a record of another space version
                continue
        if not configs:
            return 0
        group, rounds = uuid.uuid4().hex[:16], tuner.confirm_rounds
        tuner._groups_made.add(group)

        def commit(r: int, inp: MeasureInput, res: MeasureResult) -> None:
            self.meter.add(res)
            mark = {"confirm": {"group": group, "round": r, "of": rounds}}
            have.add(record_trial(database, tuner, inp, res, context, extra=mark))

        inputs = [MeasureInput(tuner.task, c) for c in configs]
        measured = 0
        for attempt in range(1 + CONFIRM_RETRIES):
            self.quiet = self.measurer.wait_quiet()  # None: a measurer that does not watch contention
            if attempt and not self.quiet:  # still busy: a new group would be as noisy
                break
            if attempt:  # the previous group was timed while the machine was busy: a new group
                group = uuid.uuid4().hex[:16]
                tuner._groups_made.add(group)
            quiet: dict[int, bool] = {}  # config index -> whether any of its rounds was quiet

            def keep(r: int, inp: MeasureInput, res: MeasureResult) -> None:
                index = inp.config.index
                quiet[index] = quiet.get(index, False) or not is_noisy(res.extra)
                commit(r, inp, res)

            self.measurer.measure_rounds(inputs, rounds, keep)  # the real one builds once, runs every round
            measured += rounds * len(configs)
            # a noisy round is set aside where its config has a quiet one (database.confirmed_best):
            # only a config timed busy in every round leaves the group without a verdict
            self.confirm_noisy = not all(quiet.values())
            if not self.confirm_noisy:
                break
        return measured

    def incumbent(self, trials: Sequence[Any]) -> int | None:
        """The template default's config index when the tuner starts from it and it has a
        verified successful trial among ``trials`` (else None). It joins every confirmation
        group: on a noisy machine the top configs' first measurements are the lucky ones (the
        winner's curse), and a default measured once, unluckily, must not lose to them unless
        the interleaved rounds say so: a tuned result is never worse than the untuned one."""
        tuner = self.tuner
        make = getattr(tuner.task, "default_config", None)
        if not tuner.start_from_default or make is None:
            return None
        try:
            index = make().index
        except Exception:  # noqa: BLE001 - a template without a usable default
            return None
        return index if any(t.config_index == index and t.ok and t.verified for t in trials) else None

    def adopt_confirmed(self, context: Any) -> dict[str, Any]:
        """Make the database's confirmed best of ``context`` the tuner's best (when the latest
        confirmation group has one); return that group's description, or {} (best unchanged)."""
        from ..database import latest_confirmation
        from ..database.trials import result_of

        tuner, database = self.tuner, self.database
        best = database.best(tuner.task.workload_key, context)
        if best is None or best.confirmation is None:
            return {}
        try:
            config = tuner.space.get(best.config_index)
        except IndexError:
            return {}
        result = result_of(best)
        if best.confirmation["group"] in tuner._groups_made:
            del result.extra["stored"]  # confirmed by this tuner: "this run"
        tuner.best_config, tuner.best_cost, tuner.best_result = config, best.cost, result
        group = latest_confirmation(t for t in database.trials(tuner.task.workload_key) if t.context == context)
        return {"group": best.confirmation["group"], "rounds": best.confirmation["of"],
                "configs": sorted({t.config_index for t in group})}

    def verify_best(self) -> bool:
        """Check the best config's output against the reference before reporting it."""
        tuner = self.tuner
        if tuner.best_config is None:
            return False
        if self.measurer.options.check_correctness:
            return True  # every ok result already matched the reference
        res = self.measurer.verify(MeasureInput(tuner.task, tuner.best_config))
        if not res.ok:
            tuner.best_config, tuner.best_cost, tuner.best_result = None, float("inf"), None
            return False
        return True
