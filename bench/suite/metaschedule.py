"""TVM's own tuner, MetaSchedule, driven so that it is measured like tensortune's tuners.

MetaSchedule runs with its defaults (``tune_tir`` / ``tune_relax``: post-order-apply space,
evolutionary search, XGBoost cost model, gradient task scheduler, its build function with its
30 s build timeout and its ``LocalRunner`` on all cores), with one change to how its builder
keeps its processes and three things added that do not change its search:

- its builder's worker processes are started once per benchmark process and register the host
  CPU's tensor intrinsics when they start (:class:`PersistentBuilder`). MetaSchedule's own
  ``LocalBuilder`` starts a new pool for every batch and imports that module inside the first
  candidate's 30 s build timeout; the import runs TVMScript, which calls ``inspect.stack()``
  hundreds of times, each walking all of ``sys.modules`` (thousands of modules once PyTorch is
  loaded, as tvm-ffi loads it): 161 s here on an AMD EPYC znver3, so every candidate was killed.
  tensortune's builder keeps its workers too, so this makes the two sides alike. Both there and in
  the tuning process only the host CPU's intrinsics are registered
  (:func:`tensortune.utils.intrinsics.register_host_intrinsics`: 4 s against 45 s for every
  backend's on a Zen 3; a CPU target's schedule rules name no others), so that a one-time import
  of GPU intrinsics is not counted as MetaSchedule's tuning time;

- its builder is wrapped to time the building of each batch (:class:`TimedBuilder`); the
  running is the time from the end of the build to the first measure callback;
- a measure callback (:class:`BatchRecorder`) records each batch: trials, best latency so far
  (median of each candidate's repeats, as tensortune reports), errors and the time split;
- an optional wall-time budget, so that a whole model can be given the same time as
  tensortune's scheduler. The gradient scheduler first gives every task one search iteration
  in a round-robin pass and joins their results only after it, so that pass always runs whole
  (its wall time is reported as it was). Once the budget is spent and that pass is over, the
  builder builds nothing more (every candidate
  it is given fails at once with :data:`DEADLINE_MSG`, and such batches are not reported as
  trials), and the measure callback terminates the task whose results it is handed. Each task
  still alive is thus picked once more and ends at once. Terminating *other* tasks from the
  callback is not safe: the gradient scheduler joins a task while it collects the alive ones
  (``NextTaskId``, step 2), and picking a task it had already counted alive but that the
  callback then terminated fails its ``ICHECK(!task->is_terminated)`` (seen on bert_base, whose
  first round-robin pass ended before the deadline).

The runner's timing settings (number, repeat, min_repeat_ms, cache flush) are set from the
same :class:`~tensortune.measure.MeasureOptions` tensortune's measurer uses, so both sides'
latencies come from the same timing protocol.
"""
from __future__ import annotations

import logging
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import functools

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from tensortune.measure import MeasureOptions
from tensortune.utils.intrinsics import register_host_intrinsics

#: MetaSchedule's default candidates per search iteration (``num_trials_per_iter``).
MS_BATCH = 64
#: MetaSchedule stores a failed candidate's run time as this many seconds.
MS_FAILED_S = 1e9
#: The build error of a candidate handed to the builder after the wall-time budget was spent.
DEADLINE_MSG = "tensortune harness: wall-time budget spent, not built"


def quiet_logs() -> None:
    """Keep MetaSchedule's per-iteration INFO/DEBUG tables off the terminal (its work
    directory keeps the full logs)."""
    for name in ("tvm.s_tir.meta_schedule", "tvm.meta_schedule"):
        lg = logging.getLogger(name)
        lg.setLevel(logging.WARNING)
        lg.propagate = False


@dataclass
class Clock:
    """Seconds spent in building and running since the start of a tuning run."""

    build_s: float = 0.0
    run_s: float = 0.0
    build_end: float = 0.0  # time.perf_counter() when the last batch finished building
    joined: bool = False  # a batch's results came back (the first round-robin pass is over)


#: MetaSchedule's ``LocalBuilder`` default build timeout.
MS_BUILD_TIMEOUT_S = 30.0


@functools.lru_cache(maxsize=None)
def _build_pool() -> PopenPoolExecutor:
    """One pool of build workers per process, each registering the host CPU's tensor intrinsics
    when it starts (outside any candidate's timeout)."""
    from tensortune.target import cpu_count

    return PopenPoolExecutor(max_workers=cpu_count(), timeout=MS_BUILD_TIMEOUT_S,
                             initializer=register_host_intrinsics)


@derived_object
class PersistentBuilder(PyBuilder):
    """MetaSchedule's ``LocalBuilder`` (its default build and export functions, its timeout and error
    messages) on a pool of worker processes kept for the whole benchmark process."""

    def build(self, build_inputs: list) -> list:
        jobs = [(None, None, b.mod, b.target, _serialize_params(b.params)) for b in build_inputs]
        results = []
        for r in _build_pool().map_with_error_catching(lambda x: _worker_func(*x), jobs):
            if r.status == StatusKind.COMPLETE:
                results.append(BuilderResult(r.value, None))
            elif r.status == StatusKind.TIMEOUT:
                results.append(BuilderResult(None, f"LocalBuilder: Timeout, killed after {MS_BUILD_TIMEOUT_S:g} seconds"))
            else:
                results.append(BuilderResult(None, "LocalBuilder: An exception occurred\n" + str(r.value)))
        return results


@derived_object
class TimedBuilder(PyBuilder):
    """MetaSchedule's builder with the wall time of each batch's build added to a :class:`Clock`."""

    def __init__(self, inner: Any, clock: Clock, deadline: float | None = None) -> None:
        super().__init__()
        self.inner, self.clock, self.deadline = inner, clock, deadline

    def build(self, build_inputs: list) -> list:
        t0 = time.perf_counter()
        if self.deadline is not None and t0 >= self.deadline and self.clock.joined:  # spent: fail at once
            self.clock.build_end = t0
            return [BuilderResult(None, DEADLINE_MSG) for _ in build_inputs]
        try:
            return self.inner.build(build_inputs)
        finally:
            self.clock.build_end = time.perf_counter()
            self.clock.build_s += self.clock.build_end - t0


def candidate_cost(builder_result: Any, runner_result: Any) -> float | None:
    """Median seconds of one MetaSchedule candidate (None: it failed to build or run)."""
    if builder_result.error_msg is not None or runner_result.error_msg is not None or not runner_result.run_secs:
        return None
    secs = sorted(float(getattr(x, "value", x)) for x in runner_result.run_secs)
    if secs[-1] >= MS_FAILED_S:
        return None
    return statistics.median(secs)


@derived_object
class BatchRecorder(PyMeasureCallback):
    """Calls ``on_batch(task_id, costs, errors)`` after every measured batch and stops the
    tuning when ``deadline`` (``time.perf_counter()`` value) has passed.

    It is the first measure callback, called as soon as the runner's results are in: the time
    since the batch finished building is the batch's running time (MetaSchedule's own
    callbacks, the cost model update among them, come after it and count as search)."""

    def __init__(self, on_batch: Callable[[int, list[float], int], None], clock: Clock,
                 deadline: float | None = None) -> None:
        super().__init__()
        self.on_batch, self.clock, self.deadline = on_batch, clock, deadline

    def apply(self, task_scheduler: Any, task_id: int, measure_candidates: list, builder_results: list,
              runner_results: list) -> None:
        self.clock.joined = True
        skipped = bool(builder_results) and all(b.error_msg == DEADLINE_MSG for b in builder_results)
        if not skipped:  # a batch the deadline kept from being built is no trial
            self.clock.run_s += time.perf_counter() - self.clock.build_end
            costs, errors = [], 0
            for b, r in zip(builder_results, runner_results):
                c = candidate_cost(b, r)
                if c is None:
                    errors += 1
                else:
                    costs.append(c)
            self.on_batch(int(task_id), costs, errors)
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            if not bool(task_scheduler.tasks_[int(task_id)].is_terminated):  # this task only (see the module)
                task_scheduler.terminate_task(int(task_id))


def evaluator_config(options: MeasureOptions) -> Any:
    """MetaSchedule's runner settings equal to tensortune's measure options."""
    return ms.runner.EvaluatorConfig(number=options.number, repeat=options.repeat,
                                     min_repeat_ms=options.min_repeat_ms, enable_cpu_cache_flush=options.flush_cache)


@dataclass
class MSSession:
    """The pieces one MetaSchedule tuning run is given: builder, runner, callbacks, clock."""

    options: MeasureOptions
    on_batch: Callable[[int, list[float], int], None]
    deadline: float | None = None
    clock: Clock = field(default_factory=Clock)

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``tune_tir`` / ``tune_relax``."""
        quiet_logs()
        register_host_intrinsics()  # before MetaSchedule's TuneContext imports every backend's
        callbacks = [BatchRecorder(self.on_batch, self.clock, self.deadline)]
        callbacks += list(ms.measure_callback.MeasureCallback.create("default"))
        # The runner is MetaSchedule's own: wrapping it in a PyRunner made its builds time out here.
        return {"builder": TimedBuilder(PersistentBuilder(), self.clock, self.deadline),
                "runner": ms.runner.LocalRunner(evaluator_config=evaluator_config(self.options)),
                "measure_callbacks": callbacks}


def tune_primfunc(func: Any, target: Any, trials: int, seed: int, session: MSSession, work_dir: str | None = None,
                  batch: int = MS_BATCH) -> Any:
    """``tune_tir`` on one PrimFunc; returns the best schedule's IRModule (None: nothing built)."""
    with tempfile.TemporaryDirectory(prefix="tensortune-ms-") as tmp:
        wd = work_dir or tmp
        db = ms.tune_tir(func, target, wd, max_trials_global=trials, num_trials_per_iter=min(batch, trials),
                         seed=seed, **session.kwargs())
        if not db.get_all_tuning_records():
            return None
        sch = ms.tir_integration.compile_tir(db, func, target)
        return None if sch is None else sch.mod


def export_module(mod: Any, target: Any, path: str) -> str:
    """Build a scheduled IRModule and write its shared library (for tensortune's runner)."""
    import tvm

    tvm.compile(mod, target=target).export_library(path)
    return path


def fuse_for_metaschedule(mod: Any, target: Any) -> Any:
    """The fused module ``compile_relax`` will build from ``mod``: the same passes, in its order
    (library dispatch, LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR).

    MetaSchedule extracts its tasks from the PrimFuncs of the module it is given and finds them
    again at compile time by structural hash, so the tuned module must be exactly this one. Any
    other (tensortune's planned and fused module, say) gives tasks that ``compile_relax`` never
    meets: it then builds every function unscheduled, 100x slower, and says nothing."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline

    try:
        dispatch = list(relax_pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):  # the same fallback as compile_relax
        dispatch = []
    seq = tvm.transform.Sequential([*dispatch, relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                    relax.transform.FoldConstant(), relax.transform.FuseOps(),
                                    relax.transform.FuseTIR()])
    with target, tvm.transform.PassContext(opt_level=3):
        return seq(mod)


def tune_relax_db(fused: Any, target: Any, trials: int, seed: int, session: MSSession, work_dir: str,
                  batch: int = MS_BATCH) -> Any:
    """``tune_relax`` on a model's module fused by :func:`fuse_for_metaschedule` (given an unfused
    one it finds no tasks); returns its database (also kept as JSON in ``work_dir``). What an
    earlier, interrupted attempt left in ``work_dir`` is removed first: MetaSchedule would load
    it and start warm, with more than its budget."""
    from tvm.s_tir.meta_schedule import relax_integration as ri

    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir, exist_ok=True)
    return ri.tune_relax(fused, {}, target, work_dir, max_trials_global=trials,
                         num_trials_per_iter=min(batch, trials), seed=seed, **session.kwargs())


def load_relax_db(work_dir: str) -> Any | None:
    """The database :func:`tune_relax_db` kept in ``work_dir`` (a finished tuning, read back for a
    resumed run), or None when it holds no tuning records."""
    records = os.path.join(work_dir, "database_tuning_record.json")
    if not os.path.isfile(records) or os.path.getsize(records) == 0:
        return None
    return ms.database.JSONDatabase(work_dir=work_dir, allow_missing=False)


def tasks_applied(database: Any, fused: Any, target: Any) -> tuple[int, int]:
    """(tasks in ``fused``, tasks the database holds a record for): what ``compile_relax`` will
    build tuned. The suite reports both, so a model built untuned cannot pass for a tuned one."""
    from tvm.s_tir.meta_schedule import relax_integration as ri

    tasks = ri.extract_tasks(fused, target)
    return len(tasks), sum(bool(database.has_workload(t.dispatched[0])) for t in tasks)


def compile_model(database: Any, unfused: Any, target: Any) -> Any:
    """``compile_relax`` on the module *before* fusion (the one :func:`fuse_for_metaschedule`
    fused): it runs the same fusion itself, so every tuned task is found again."""
    from tvm.s_tir.meta_schedule import relax_integration as ri

    with target:
        return ri.compile_relax(database, unfused, target, None)
