"""Builder and runner: results, the error taxonomy under injected faults, worker recovery.

Timeouts: real builds and runs get limits only a hanging candidate reaches (a 2-core machine
shared with other work can take many seconds to compile a schedule). The timeout paths are
driven by the fault plug-in's ``build_hang`` / ``run_hang``, which never finish; only while
one of them is in the batch are the limits short, and the only other work in such a batch is
the fault template's unscheduled 16x24x8 matmul (built in a fraction of a second).
"""
from __future__ import annotations

import contextlib
import os
import random
import sys
import time
from typing import Iterator

import pytest

from tensortune.measure import ErrorKind, MeasureInput, MeasureOptions, Measurer
from tensortune.task import Task

HERE = os.path.dirname(__file__)
#: Build and run limits for real work: only a candidate that hangs reaches them.
GENEROUS_TIMEOUT = 300.0
#: Limits while a batch holds a candidate that hangs on purpose (see the module docstring).
HANG_TIMEOUT = 3.0
HANGS = {"build_hang", "run_hang"}


@contextlib.contextmanager
def short_timeouts(m: Measurer, seconds: float = HANG_TIMEOUT) -> Iterator[None]:
    """Temporarily lower the build and run limits of ``m`` (builder and runner read them per call)."""
    assert m.builder.options is m.options and m.runner.options is m.options
    before = (m.options.build_timeout, m.options.run_timeout)
    m.options.build_timeout = m.options.run_timeout = seconds
    try:
        yield
    finally:
        m.options.build_timeout, m.options.run_timeout = before


@pytest.fixture(scope="module")
def measurer():
    # the workers import the fault plug-in; they inherit PYTHONPATH from this process
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE] + ([old] if old else []))
    sys.path.insert(0, HERE)
    import fault_plugin  # noqa: F401  (register the template here too, for the space)

    opts = MeasureOptions(build_timeout=GENEROUS_TIMEOUT, run_timeout=GENEROUS_TIMEOUT, imports=("fault_plugin",),
                          repeat=2, min_repeat_ms=5)
    m = Measurer(opts)
    yield m
    m.close()
    sys.path.remove(HERE)
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old


def faulty(fault: str) -> MeasureInput:
    task = Task("matmul", {"M": 16, "N": 24, "K": 8}, template="faulty")
    return MeasureInput(task, task.space.config_from_json({"knobs": {"fault": fault}}))


def test_real_configs_measure_and_verify(measurer):
    task = Task.from_op("matmul", [64, 64, 64])
    configs = [task.default_config()] + task.space.sample(random.Random(0), 3)
    build0, run0 = measurer.build_s, measurer.run_s
    t0 = time.perf_counter()
    results = measurer.measure([MeasureInput(task, c) for c in configs])
    # the measurer adds up its wall time of building and of running (the split of a tuning run)
    assert measurer.build_s > build0 and measurer.run_s > run0
    assert (measurer.build_s - build0) + (measurer.run_s - run0) <= time.perf_counter() - t0
    assert len(results) == 4
    r = results[0]
    assert r.ok and r.error is ErrorKind.NONE and r.extra["verified"]
    assert len(r.costs) == 2 and all(c > 0 for c in r.costs)
    assert r.cost == sorted(r.costs)[1] or r.cost == sum(r.costs) / 2
    assert r.threads == measurer.options.threads and r.build_time > 0 and r.run_time > 0
    assert r.extra["timed_s"] > 0
    # CPU-seconds of the builder's and the runner's work on each candidate, read from the workers
    # (a run of a few microseconds can read 0: process CPU time moves in 10 ms steps)
    for x in results:
        assert x.build_cpu is not None and 0 < x.build_cpu and x.run_cpu is not None and 0 <= x.run_cpu
        assert x.cpu_s == x.build_cpu + x.run_cpu
    assert sum(x.run_cpu for x in results) > 0  # the first includes the runner's start and warm-up


def first_and_second_batch(warmup_s: float) -> tuple[list[float], list[float]]:
    """The best timing of each of four 256^3 matmul configs in a fresh runner's first batch and in its second."""
    task = Task.from_op("matmul", [256, 256, 256])
    inputs = [MeasureInput(task, c) for c in [task.default_config()] + task.space.sample(random.Random(0), 3)]
    with Measurer(MeasureOptions(repeat=3, min_repeat_ms=5, threads=2, n_parallel=2, warmup_s=warmup_s)) as m:
        first, second = ([min(r.costs) for r in m.measure(inputs)] for _ in range(2))
    return first, second


@pytest.mark.alone
@pytest.mark.slow  # a timing comparison: it needs the host to itself (the fast suite runs two workers)
def test_fresh_runner_first_batch_reads_as_its_later_ones():
    # A fresh process's first tenths of a second of parallel runs read slow (2x, at times 20x, on
    # 2 threads); without the runner's warm-up (warmup_s=0) this batch of four read 2x its second,
    # every time. The shared host can also change state between two batches (a fresh clone's run
    # once read 2x with the warm-up, 2026-11-28): a second fresh runner settles which it was.
    warmup_s = MeasureOptions().warmup_s
    tries = [first_and_second_batch(warmup_s)]
    if sum(tries[0][0]) >= 1.4 * sum(tries[0][1]):
        tries.append(first_and_second_batch(warmup_s))
    first, second = tries[-1]
    assert sum(first) < 1.4 * sum(second), tries


def test_measure_rounds_builds_once_and_runs_interleaved(measurer):
    task = Task.from_op("matmul", [32, 32, 32])
    inputs = [MeasureInput(task, c) for c in [task.default_config()] + task.space.sample(random.Random(1), 1)]
    inputs.append(faulty("compile_error"))
    order = []
    rounds = measurer.measure_rounds(inputs, 3, lambda r, inp, res: order.append((r, inputs.index(inp), res.error)))
    assert [(r, k) for r, k, _ in order] == [(r, k) for r in (1, 2, 3) for k in range(3)]  # A B C, A B C, A B C
    for results in rounds:
        assert results[0].ok and results[1].ok and results[0].extra["verified"]
        assert results[2].error is ErrorKind.COMPILE  # a build error is a result of every round
    # one build per candidate (the same build time every round); no library left behind
    assert len({res[0].build_time for res in rounds}) == 1
    assert not [f for f in os.listdir(measurer.builder._dir) if f.endswith(".so")]


EXPECTED = {
    "raise": ErrorKind.INSTANTIATION,
    "compile_error": ErrorKind.COMPILE,
    "build_hang": ErrorKind.BUILD_TIMEOUT,
    "build_crash": ErrorKind.COMPILE,
    "segfault": ErrorKind.RUNTIME,
    "abort": ErrorKind.RUNTIME,
    "run_hang": ErrorKind.RUN_TIMEOUT,
    "wrong": ErrorKind.WRONG_ANSWER,
}


@pytest.mark.parametrize("fault", sorted(EXPECTED))
def test_fault_is_a_result_and_measurement_goes_on(measurer, fault):
    batch = [faulty("none"), faulty(fault), faulty("none")]
    with short_timeouts(measurer) if fault in HANGS else contextlib.nullcontext():
        results = measurer.measure(batch)
    assert [r.ok for r in results] == [True, False, True], [(r.error, r.error_msg) for r in results]
    bad = results[1]
    assert bad.error is EXPECTED[fault], bad.error_msg
    assert bad.error_msg
    assert bad.cost == float("inf")
    if fault in HANGS:  # ended by the limit, not by anything else
        assert f"exceeded {HANG_TIMEOUT:g} s" in bad.error_msg, bad.error_msg
    if fault in ("segfault", "abort", "run_hang"):  # the runner died or was killed: its CPU time is lost
        assert bad.run_cpu is None and bad.build_cpu is not None
    assert all(r.extra.get("verified") for r in (results[0], results[2]))
    # the workers are healthy afterwards, limits back to the generous ones
    assert measurer.options.build_timeout == measurer.options.run_timeout == GENEROUS_TIMEOUT
    assert measurer.measure([faulty("none")])[0].ok


@pytest.mark.slow  # end to end: every fault, hangs included, in one batch (each alone is tested above)
def test_every_fault_in_one_batch(measurer):
    batch = [faulty(f) for f in EXPECTED] + [faulty("none")]
    with short_timeouts(measurer):
        results = measurer.measure(batch)
    assert [r.error for r in results] == list(EXPECTED.values()) + [ErrorKind.NONE], \
        [(r.error, r.error_msg) for r in results]


def test_unchecked_runs_skip_the_reference_but_verify_checks(measurer):
    inp = faulty("wrong")
    res = measurer.runner.run([inp], measurer.builder.build([inp]), check_correctness=False)[0]
    assert res.ok and "verified" not in res.extra
    assert measurer.verify(inp).error is ErrorKind.WRONG_ANSWER


def test_cache_flush_cooldown_and_thread_count_are_applied():
    task = Task.from_op("matmul", [32, 48, 64])
    opts = MeasureOptions(flush_cache=True, cooldown_ms=1, repeat=3, min_repeat_ms=2, threads=1,
                          build_timeout=GENEROUS_TIMEOUT, run_timeout=GENEROUS_TIMEOUT)
    with Measurer(opts) as m:
        r = m.measure([MeasureInput(task, task.default_config())])[0]
    assert r.ok, r.error_msg
    assert len(r.costs) == 3
    assert r.threads == 1  # the runner process ran with TVM_NUM_THREADS=1 and reported it


def test_a_worker_that_cannot_start_raises_instead_of_failing_every_candidate():
    from tensortune.measure import WorkerStartError

    m = Measurer(MeasureOptions(imports=("tensortune_no_such_plugin",), n_parallel=1))
    try:
        with pytest.raises(WorkerStartError, match="tensortune_no_such_plugin"):
            m.start()
    finally:
        m.close()


def test_cold_options_time_single_runs_with_flushed_weights():
    cold = MeasureOptions.flushed(repeat=4)
    assert (cold.flush_cache, cold.number, cold.min_repeat_ms, cold.repeat) == (True, 1, 0, 4)
    assert MeasureOptions().flush_cache is False  # operator tuning keeps hot caches


def test_the_runner_process_is_replaced_every_runner_restart_candidates():
    """A process keeps the kernel libraries it loaded mapped; a fresh one takes over every
    ``runner_restart`` candidates (a 60-minute model run lost 6,300 trials to exhausted maps)."""
    task = Task.from_op("matmul", [32, 32, 32])
    configs = [task.default_config()] + task.space.sample(random.Random(1), 4)
    opts = MeasureOptions(runner_restart=2, repeat=1, min_repeat_ms=1, n_parallel=1,
                          build_timeout=GENEROUS_TIMEOUT, run_timeout=GENEROUS_TIMEOUT)
    with Measurer(opts) as m:
        results = m.measure([MeasureInput(task, c) for c in configs])
        assert all(r.ok for r in results), [r.error_msg for r in results]
        assert m.runner.restarts == 2  # candidates 3 and 5 ran in fresh processes


def test_a_tasks_setup_is_not_charged_to_its_first_candidates_run_timeout(measurer):
    """A new task's inputs and reference are made before its first candidate's timer starts: a
    candidate that runs in a fraction of the run timeout is not recorded as timed out because its
    reference took longer (an unscheduled build of a model's function can take seconds)."""
    import fault_plugin

    task = Task("slow_reference", {"M": 16, "N": 24, "K": 8}, template="faulty")
    inp = MeasureInput(task, task.space.config_from_json({"knobs": {"fault": "none"}}))
    before = measurer.options.run_timeout
    measurer.options.run_timeout = fault_plugin.SLOW_REFERENCE_S / 2
    try:
        r = measurer.measure([inp])[0]
    finally:
        measurer.options.run_timeout = before
    assert r.ok, (r.error, r.error_msg)


def test_a_load_that_fails_for_lack_of_memory_maps_is_run_again_in_a_fresh_process(tmp_path):
    """The process's fault, not the candidate's: the candidate is loaded again once, by a new process."""
    from tensortune.measure.measure import LocalRunner
    from tensortune.measure.pool import CallOutcome
    from tensortune.measure.result import BuildResult
    from tensortune.measure.worker import prepare_task

    class Exhausted:
        """A runner process whose memory maps ran out, until it is replaced."""

        def __init__(self) -> None:
            self.full, self.calls, self.runs, self.prepared, self.setups = True, 0, 0, None, 0

        def call(self, fn, args, timeout):
            if fn is prepare_task:  # the task set up in a new process, outside the candidate's timeout
                self.setups += 1
                return CallOutcome("ok", None, cpu_s=0.01)
            self.calls += 1
            if self.full:
                msg = ("Check failed: (lib_handle_ != nullptr) is false: Failed to load dynamic shared library "
                       "/tmp/k.so /tmp/k.so: cannot apply additional memory protection after relocation: "
                       "Cannot allocate memory")
                return CallOutcome("ok", ("runtime", [], msg, 2, 0.0), cpu_s=0.01)
            return CallOutcome("ok", ("none", [1e-3, 1e-3], "", 2, 0.01), cpu_s=0.02)

        def close(self) -> None:
            self.full, self.prepared = False, None

        def start(self) -> None:
            pass

    runner = LocalRunner(MeasureOptions(probe=False))  # the fake answers candidates only
    runner._worker.close()
    runner._worker = worker = Exhausted()
    task = Task.from_op("matmul", [32, 32, 32])
    art = tmp_path / "k.so"
    art.write_bytes(b"")
    r = runner.run([MeasureInput(task, task.default_config())], [BuildResult(str(art))])[0]
    assert r.ok and r.cost == 1e-3 and runner.restarts == 1 and worker.calls == 2 and worker.setups == 2
    # when the fresh process fails the same way, the error is recorded: one retry only
    worker.full = True
    worker.close = lambda: None
    r = runner.run([MeasureInput(task, task.default_config())], [BuildResult(str(art))])[0]
    assert r.error is ErrorKind.RUNTIME and "Cannot allocate memory" in r.error_msg and worker.calls == 4
    runner._log.close()


def test_a_measuring_worker_keeps_numpys_blas_on_its_own_thread() -> None:
    """A worker computes a task's numpy reference right before timing its candidates: BLAS threads
    left spinning after it took the cores from the first candidates (4-8 ms read for 0.3 ms)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from tensortune.measure import worker

    before = {i["prefix"]: i["num_threads"] for i in threadpool_info()}
    try:
        worker.init_worker()
        blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
        assert blas and all(i["num_threads"] == 1 for i in blas), blas
    finally:
        threadpool_limits(before)  # this test process's pools as they were
