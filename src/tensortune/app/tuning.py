"""The tuning workflows: one operator (:func:`tune_op`) or every task of a model
(:func:`tune_model`), each under one :class:`~tensortune.budget.Budget`, every trial stored in a
database as it completes (so a run resumes where the last one stopped).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..budget import Budget
from ..errors import UsageError
from ..precision import DEFAULT_PRECISION
from .checks import (check_db_path, check_energy, check_output, check_precision, check_runnable, check_scheduler, open_db,
                     target_of, tuner_options)
from .deploy import PROFILE_RUNS, check_after_tuning, load
from . import deploy

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..measure import MeasureOptions, Measurer, MeasurerBase
    from ..models.comparison import BenchReport
    from ..models.compile import CompiledModel
    from ..models.in_model import InModelReport
    from ..models.importer import Model
    from ..models.profile import ModelProfile
    from ..scheduler import TaskOutcome, TaskScheduler
    from ..scheduler.survey import SurveyOptions
    from ..tuners.result import TuneResult
    from ..task import Task

#: A model's budget when none is given: five minutes of wall time.
DEFAULT_MODEL_BUDGET = Budget(wall_s=300.0)
#: An operator's budget when none is given.
DEFAULT_OP_BUDGET = Budget(trials=64)
#: The default task scheduler of a model's tuning.
DEFAULT_SCHEDULER = "sequential"
#: The default tuner, of a model and of one operator alike.
DEFAULT_TUNER = "autotvm"


def model_measure_options(threads: int | None = None) -> MeasureOptions:
    """How model tuning times candidates: cache-flushed, since a model's weights come from memory,
    not the caches; on ``threads`` threads (default: every usable core), as the model will run."""
    from ..measure import MeasureOptions

    return MeasureOptions.flushed(threads=threads) if threads else MeasureOptions.flushed()


def make_measurer(options: MeasureOptions, rpc: str | None = None, rpc_workers: int = 1) -> Measurer:
    """A Measurer; with ``rpc`` (``HOST:PORT:KEY``) its runner times on that tracker's devices,
    ``rpc_workers`` candidates at once (UsageError in one line when the text is malformed or no
    such device answers)."""
    from ..measure import DeviceUnavailable, Measurer
    from ..measure.measure import parse_rpc

    if isinstance(rpc_workers, bool) or not isinstance(rpc_workers, int) or rpc_workers < 1:
        raise UsageError(f"rpc_workers={rpc_workers!r}: a whole number of at least 1")
    if rpc is None:
        if rpc_workers > 1:
            raise UsageError("rpc_workers needs rpc (the tracker whose devices measure at once)")
        return Measurer(options)
    try:
        parse_rpc(rpc)
        options.rpc, options.rpc_workers = rpc, rpc_workers
        return Measurer(options)
    except (ValueError, DeviceUnavailable) as e:
        raise UsageError(str(e)) from None


def check_cluster(scheduler: str, rpc: str | None, slots_per_node: int, budget: Budget) -> None:
    """UsageError in one line for what a cluster run cannot take."""
    if budget.cpu_s is not None or budget.energy_j is not None:
        raise UsageError("--ray-address takes --trials and --time-budget, not a CPU or energy budget (the tasks are "
                         "tuned at once, and this machine's counters do not see the nodes)")
    if rpc is not None:
        raise UsageError("--ray-address and --rpc: the cluster's nodes time the candidates, or the tracker's devices; not both")
    if scheduler != DEFAULT_SCHEDULER:
        raise UsageError(f"--scheduler {scheduler}: a cluster tunes tasks at once, one per slot (the parallel "
                         f"scheduler); leave --scheduler at {DEFAULT_SCHEDULER}")
    if isinstance(slots_per_node, bool) or not isinstance(slots_per_node, int) or slots_per_node < 1:
        raise UsageError(f"slots_per_node={slots_per_node!r}: a whole number of at least 1")


def _noise(measurers: Sequence[MeasurerBase]) -> dict[str, Any]:
    """The contention met while measuring, from a measurer that watched it (one line otherwise)."""
    log = getattr(measurers[0], "noise", None) if len(measurers) == 1 else None
    if log is not None:
        return {**log.to_json(), "summary": log.describe()}
    return {"summary": f"timed on {len(measurers)} slots of a cluster: each trial's record has its node's verdict"}


def tune_op(op: str, shape: Sequence[int], tuner: str = DEFAULT_TUNER, budget: Budget | int = DEFAULT_OP_BUDGET,
            database: str = "runs.db", *, seed: int = 0, batch_size: int | None = None,
            options: Mapping[str, Any] | Sequence[str] = (), rpc: str | None = None, rpc_workers: int = 1,
            repeat: int | None = None, min_repeat_ms: int | None = None, target: Any = None,
            progress: bool = False, precision: str = DEFAULT_PRECISION) -> TuneResult:
    """Tune one operator (``op`` of :data:`tensortune.task.ops.OPS`, with its ``shape`` values) with
    ``tuner`` until ``budget`` (a :class:`Budget` or a number of trials) is spent; ``options``: the
    tuner's settings (a mapping or ``KEY=VALUE`` texts); ``repeat`` / ``min_repeat_ms`` override the
    timing of each candidate; ``rpc`` / ``rpc_workers``: time them on a tracker's devices, that many
    at once; ``target``: the CPU the kernels are built for (``--target``:
    :func:`tensortune.target.parse_target`; default this one's), whose records are its own;
    ``precision`` ``bf16``: the op's bf16 form (:func:`tensortune.task.ops_bf16.bf16_form`)."""
    from ..limits import check_seed
    from ..task import OpError, Task, get_op
    from ..task.ops_bf16 import bf16_form
    from ..tuners import DEFAULT_BATCH_SIZE, get_tuner
    from ..utils.progress import ProgressBar

    tj = target_of(target)
    check_runnable(tj, rpc)
    budget = Budget.of(budget)
    check_energy(budget.energy_j)
    settings = tuner_options(tuner, options)
    precision = check_precision(precision, tj)
    try:
        check_seed(seed)
        if precision == "bf16" or op.endswith("_bf16"):
            op, shape = bf16_form(op, get_op(op).parse_args(shape))
            if precision != "bf16":
                check_precision("bf16", tj)
        task = Task.from_op(op, shape, target=tj)
    except (OpError, ValueError) as e:
        raise UsageError(str(e)) from None
    try:
        t = get_tuner(tuner, task, seed=seed, batch_size=batch_size or DEFAULT_BATCH_SIZE, options=settings)
    except ValueError as e:
        raise UsageError(str(e)) from None
    check_db_path(database, must_exist=False)
    from ..measure import MeasureOptions

    timing = {k: v for k, v in (("repeat", repeat), ("min_repeat_ms", min_repeat_ms)) if v is not None}
    measurer = make_measurer(MeasureOptions(**timing), rpc, rpc_workers)
    try:
        db = open_db(database)
    except BaseException:
        measurer.close()
        raise
    bar = ProgressBar(budget.trials, desc=f"{tuner} {task.name}", disable=not progress)
    try:
        with measurer as m:
            res = t.tune(budget, m, callbacks=[bar], database=db)
        bar.settle(task.flops / res.best_cost / 1e9 if res.best_cost < float("inf") else 0.0)
        return res
    finally:
        bar.close()
        db.close()


@dataclass
class TunedModel:
    """What :func:`tune_model` did, and the deploy steps on its result: :meth:`compile`,
    :meth:`export`, :meth:`bench`, :meth:`profile` and :meth:`check_in_model` use the model's best records
    in :attr:`database`."""

    model: Model
    database: str
    tuner: str
    scheduler: str
    budget: Budget
    outcomes: list[TaskOutcome]
    #: seconds of the whole call, the in-model check included
    wall_s: float
    #: wall time, CPU-seconds (split), energy and the budget that stopped it (:meth:`TaskScheduler.cost`)
    cost: dict[str, Any] = field(default_factory=dict)
    #: contention met while measuring (:class:`~tensortune.measure.noise.NoiseLog`; ``summary``: one line)
    noise: dict[str, Any] = field(default_factory=dict)
    #: the in-model check (JSON; ``{"skipped": why}`` when not run), None before one was asked for
    check: dict[str, Any] | None = None
    #: the survey scheduler's rounds and stop (None for the others)
    survey: dict[str, Any] | None = None

    def estimate(self) -> tuple[float, int]:
        """(milliseconds: weight x best latency summed over tasks with a measured schedule, those tasks)."""
        from ..scheduler import estimated_total

        total, n = estimated_total(self.outcomes)
        return total * 1e3, n

    @property
    def estimated_total_ms(self) -> float:
        """The estimated latency of the model, in milliseconds (:meth:`estimate`)."""
        return self.estimate()[0]

    def to_json(self) -> dict[str, Any]:
        """The ``tensortune tune --json`` object."""
        total_ms, measured = self.estimate()
        return {"model": self.model.name, "tuner": self.tuner, "scheduler": self.scheduler,
                "budget": self.budget.to_json(), "tasks": [o.to_json() for o in self.outcomes],
                "estimated_total_ms": total_ms, "tasks_measured": measured,
                "wall_s": self.wall_s, "cost": self.cost, "noise": self.noise or None,
                **({"survey": self.survey} if self.survey else {}),
                **({"in_model_check": self.check} if self.check is not None else {}),
                "measure": model_measure_options().timing()}

    def compile(self, layout: str | None = None) -> CompiledModel:
        """The model built with its best records."""
        return deploy.compile(self.model, self.database, layout)

    def export(self, path: str, force: bool = False) -> tuple[str, str]:
        """Write the compiled model to ``path`` (a shared library TVM's runtime loads) and its JSON
        description beside it; returns both paths."""
        for p in (path, path + ".json"):
            check_output(p, force, db=self.database)
        return self.compile().export(path)

    def bench(self, threads: int | None = None, with_onnxruntime: bool = True,
              extra: Mapping[str, Any] | None = None) -> BenchReport:
        """Tuned and untuned, checked and timed beside PyTorch, ONNX Runtime and OpenVINO (and ``extra``)."""
        return deploy.bench(self.model, self.database, threads, with_onnxruntime, extra=extra)

    def profile(self, threads: int | None = None, runs: int = PROFILE_RUNS, peak: bool = True) -> ModelProfile:
        """Every fused function of the tuned model timed."""
        return deploy.profile(self.model, self.database, threads, runs, peak)

    def check_in_model(self, threads: int | None = None, say: Callable[[str], None] | None = None) -> InModelReport:
        """The in-model check again (each tuned task's candidates timed inside the model)."""
        return deploy.check_in_model(self.model, self.database, threads, say=say)


def model_latency_fn(model: Model, db: Database) -> Callable[[bool], Any]:
    """``f(tuned) -> Timed(seconds, change, vs_first)``: the model compiled with ``db``'s bests (or
    untuned), timed beside the build timed before it and the first (the untuned one, which the
    survey times first: :class:`~tensortune.measure.timing.PairedTiming`; compiled once)."""
    from ..models.compile import compile_model
    from ..measure.timing import PairedTiming
    from ..models.reference import set_threads
    from ..target import cpu_count

    untuned: list[Any] = []
    timing = PairedTiming()

    def latency(tuned: bool) -> Any:
        set_threads(cpu_count())
        if tuned:
            cm = compile_model(model, db)
        else:
            if not untuned:
                untuned.append(compile_model(model, None))
            cm = untuned[0]
        return timing.time(cm.callable(model.example_inputs))

    return latency


def check_tuning(tuner: str, scheduler: str, budget: Budget, database: str,
                 options: Mapping[str, Any] | Sequence[str] = ()) -> dict[str, Any]:
    """The tuner's checked options; UsageError for a bad model-tuning argument (before a model is
    imported, nothing measured or written)."""
    settings = tuner_options(tuner, options)
    check_scheduler(scheduler)
    if budget.trials is None and budget.wall_s is None and scheduler != "survey":
        raise UsageError("give a budget of trials per task, of wall time, or both (or the survey scheduler)")
    check_energy(budget.energy_j)
    check_db_path(database, must_exist=False)
    return settings


def tune_model(model: Any, example_inputs: Sequence[Any] | None = None, tuner: str = DEFAULT_TUNER,
               budget: Budget | int = DEFAULT_MODEL_BUDGET, database: str = "runs.db", target: Any = None, *,
               scheduler: str = DEFAULT_SCHEDULER, options: Mapping[str, Any] | Sequence[str] = (),
               seed: int = 0, batch_size: int | None = None, rpc: str | None = None, rpc_workers: int = 1,
               survey: SurveyOptions | None = None, check: bool = True, threads: int | None = None,
               ray_address: str | None = None, slots_per_node: int = 1,
               progress: bool = False, say: Callable[[str], None] | None = None,
               precision: str | None = None) -> TunedModel:
    """Tune every task of ``model`` (a ``torch.nn.Module`` with ``example_inputs``, an ONNX path, a
    built-in name, a Hugging Face spec, or a loaded :class:`Model`) with ``tuner`` under ``budget``
    (an int: trials per task; ``trials`` per task, the rest for the whole model), every trial
    stored in ``database`` (a rerun resumes). Then, unless ``check`` is False or nothing was
    measured here, the in-model check times each tuned task's best inside the model and keeps the
    fastest there. ``options``: the tuner's settings; ``survey``: the survey scheduler's options;
    ``threads``: the threads candidates are timed on and the model is checked with (default: every
    usable core); ``target``: another x86-64 CPU to build for (:func:`tensortune.target.parse_target`;
    its candidates timed on ``rpc``'s devices, or here if this CPU runs its code; the in-model
    check is then skipped), whose records ``compile(target=)`` uses; ``ray_address`` (``auto`` or ``HOST:PORT``): the tasks are tuned at once on
    ``slots_per_node`` slots of every node of that Ray cluster (:mod:`tensortune.cluster.nodes`,
    :class:`~tensortune.scheduler.ParallelScheduler`), this process writing the database;
    ``say`` gets the check's progress lines; ``precision``: ``f32`` or ``bf16`` (default: the
    model's own, f32 unless a loaded :class:`Model` says otherwise; :mod:`tensortune.precision`)."""
    from ..limits import check_seed
    from ..scheduler import SCHEDULERS
    from ..tuners import DEFAULT_BATCH_SIZE, get_tuner
    from ..scheduler.progress import ModelProgress

    from ..target import is_host

    tj = target_of(target)
    check_runnable(tj, rpc)
    budget = Budget.of(budget)
    settings = check_tuning(tuner, scheduler, budget, database, options)
    if ray_address is not None:
        check_cluster(scheduler, rpc, slots_per_node, budget)
    foreign = not is_host(tj)
    if foreign and (ray_address is not None or scheduler == "survey"):
        raise UsageError(f"--target {tj['mcpu']}: the {'cluster' if ray_address else 'survey scheduler'} times on "
                         "this machine's CPU kind; tune another CPU's target with --rpc or on this machine")
    try:
        check_seed(seed)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if precision is not None:  # before the model's import
        check_precision(precision, tj)
    m = load(model, example_inputs, precision=precision)
    if precision is None:  # a loaded Model's own
        check_precision(m.precision, tj)
    from ..models.compile import model_tasks

    tasks = model_tasks(m, tj)
    bs = batch_size or DEFAULT_BATCH_SIZE
    # a bad rpc, or a cluster that cannot be joined, fails before the database is made
    if ray_address is None:
        measurers: list[MeasurerBase] = [make_measurer(model_measure_options(threads), rpc, rpc_workers)]
    else:
        from ..cluster.nodes import connect, start_slots

        connect(ray_address)
        measurers = list(start_slots(model_measure_options(threads), slots_per_node))
        scheduler = "parallel"
    try:
        db = open_db(database)
    except BaseException:
        for me in measurers:
            me.close()
        raise

    def make_tuner(task: Task, round_: int) -> Any:
        return get_tuner(tuner, task, seed=seed + round_, batch_size=bs, options=settings)

    out = TunedModel(m, database, tuner, scheduler, budget, [], 0.0)
    t0 = time.perf_counter()
    try:
        with ExitStack() as held:
            for me in measurers:
                held.enter_context(me)
            bar = ModelProgress(m.name, tasks, budget.trials, budget.wall_s, disable=not progress)
            extra: dict[str, Any] = {}
            if scheduler == "survey":
                from ..scheduler.survey import SurveyOptions

                extra = {"model_latency": model_latency_fn(m, db), "options": survey or SurveyOptions()}
            if scheduler == "parallel":
                from ..scheduler import ParallelScheduler

                sched: TaskScheduler = ParallelScheduler(tasks, make_tuner, measurers, db, budget,
                                                         lambda: open_db(database), callbacks=[bar], batch_size=bs)
            else:
                sched = SCHEDULERS[scheduler](tasks, make_tuner, measurers[0], db, budget, callbacks=[bar],
                                              batch_size=bs, **extra)
            try:
                out.outcomes = sched.run()
                bar.settle(out.outcomes)
            finally:
                bar.close()
                out.cost = sched.cost()
                out.noise = _noise(measurers)
                out.survey = sched.report()
    finally:
        db.close()
    out.wall_s = time.perf_counter() - t0
    if rpc:
        out.check = {"skipped": "candidates were timed on an RPC device, not on this machine"}
    elif foreign:
        out.check = {"skipped": f"built for {tj['mcpu']}, not this machine's CPU"}
    elif not check:
        out.check = {"skipped": "not asked for"}
    elif any(o.best_s < float("inf") for o in out.outcomes):
        out.check = check_after_tuning(m, database, threads, say=say)
        out.wall_s += out.check["wall_s"]
        out.cost["wall_s"] = out.cost.get("wall_s", 0.0) + out.check["wall_s"]
        out.cost["check_s"] = out.check["wall_s"]
    return out
