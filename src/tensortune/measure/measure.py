"""Builder and runner: compile candidates in parallel, then time them one at a time.

Both keep their worker processes alive across batches; a closed builder hands its workers to the
next builder of the process (:class:`~.pool.WorkerCache`). Every candidate ends as a
:class:`MeasureResult`; a crash, hang or wrong answer costs that candidate only.
"""
from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any, Callable, ContextManager, Sequence

from ..target import cpu_count
from ..utils.scratch import scratch_dir
from .base import MeasurerBase
from .energy import EnergyMeter
from .noise import QUIET_LOOK_S, QUIET_LOOKS, RECENT_S, NoiseLog, Sample
from .options import MeasureOptions
from .pool import WORKERS, Worker
from .result import BuildResult, ErrorKind, MeasureInput, MeasureResult
from .worker import SESSION_SPAN, build_candidate, init_worker, prepare_task, probe_state, rpc_run_candidate, run_candidate


def with_variant(inp: MeasureInput, opts: dict[str, Any]) -> dict[str, Any]:
    """``opts`` naming the inputs the candidate's function takes where its template transforms
    them (a Winograd config's kernel), so the runner times it on those."""
    variant = inp.task.template.input_variant(inp.task, inp.config)
    return {**opts, "variant": variant} if variant else opts


#: Name prefix of the builders' folders of compiled candidates (:mod:`tensortune.utils.scratch`).
BUILD_PREFIX = "tensortune-build-"


class LocalBuilder:
    """Compiles candidates in ``n_parallel`` persistent worker processes."""

    def __init__(self, options: MeasureOptions | None = None) -> None:
        self.options = options or MeasureOptions()
        self._dir = scratch_dir(BUILD_PREFIX)  # a killed process's folder goes at the next start
        self._log = open(os.path.join(self._dir, "workers.log"), "ab")  # TVM's warnings go here, not the terminal
        self._workers = [WORKERS.take(init_worker, (tuple(self.options.imports), None), self._log)
                         for _ in range(max(1, self.options.n_parallel))]
        self._pool = ThreadPoolExecutor(len(self._workers))
        self._started = False

    def start(self) -> None:
        """Start every worker now (in parallel)."""
        if not self._started:
            list(self._pool.map(lambda w: w.start(), self._workers))
            self._started = True

    def build(self, inputs: Sequence[MeasureInput],
              on_built: Callable[[int, BuildResult], None] | None = None) -> list[BuildResult]:
        """Build a batch; the results are in input order, and ``on_built(k, result)`` is called
        (from a builder thread) as the ``k``-th finishes."""
        self.start()
        jobs = [(i.task.json_text, i.config.to_json()["knobs"]) for i in inputs]
        results: list[BuildResult | None] = [None] * len(jobs)
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for k in range(len(jobs)):
            todo.put(k)

        def lane(worker: Worker) -> None:  # each worker takes the next candidate when free
            while True:
                try:
                    k = todo.get_nowait()
                except queue.Empty:
                    return
                results[k] = r = self._build_one(worker, *jobs[k])
                if on_built is not None:
                    on_built(k, r)

        list(self._pool.map(lane, self._workers))
        return [r for r in results if r is not None]

    def _build_one(self, worker: Worker, task_json: str, knobs: dict[str, Any]) -> BuildResult:
        t0 = time.perf_counter()
        out = worker.call(build_candidate, (task_json, knobs, self._dir), self.options.build_timeout)
        dt = time.perf_counter() - t0
        if out.status == "ok":
            kind, path, msg, secs = out.value
            return BuildResult(path, ErrorKind(kind), msg, secs, out.cpu_s)
        if out.status == "timeout":
            return BuildResult(None, ErrorKind.BUILD_TIMEOUT, "build " + out.message, dt, out.cpu_s)
        if out.status == "crash":
            return BuildResult(None, ErrorKind.COMPILE, "builder crashed: " + out.message, dt, out.cpu_s)
        return BuildResult(None, ErrorKind.UNKNOWN, out.message, dt, out.cpu_s)

    def close(self) -> None:
        """Hand the workers back (idle for the next builder, or stopped) and remove build artifacts."""
        for w in self._workers:
            WORKERS.give(w)  # idle for the next builder (pool.WorkerCache), or closed
        self._pool.shutdown(wait=False)
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)


class LocalRunner:
    """Times built candidates one at a time in a separate persistent process."""

    def __init__(self, options: MeasureOptions | None = None) -> None:
        self.options = options or MeasureOptions()
        self._log = tempfile.TemporaryFile()
        # a fresh process, never one reused from the cache: a runner idled while another process
        # took the cores timed a 256^3 matmul 25x slow when reused later on a quiet machine
        self._worker = Worker(init_worker, (tuple(self.options.imports), self.options.threads), self._log)
        self._energy = EnergyMeter()  # no domains where the machine has no counter: energy stays None
        self.restarts = 0  # runner processes replaced (every options.runner_restart candidates, or a failed load)
        self.noise = NoiseLog(self.options.threads, cpu_count())  # contention verdicts of this runner's timings
        self._calibrated = False

    def start(self) -> None:
        """Start the runner process now."""
        self._worker.start()

    def _look(self, window_s: float) -> Sample | None:
        """One look at the machine from the runner process (:func:`probe_state`); None if it failed."""
        out = self._worker.call(probe_state, (window_s,), self.options.run_timeout)
        return Sample(*out.value) if out.status == "ok" else None

    def _calibrate(self) -> None:
        """The probe's quiet value, before the first candidate: the fastest of a few short looks."""
        if not self.options.probe or self._calibrated:
            return
        self._calibrated = True  # once: a runner that cannot probe is not asked again at every batch
        for _ in range(3):
            look = self._look(0.0)
            if look is not None:
                self.noise.calibrate(look.probe_s)

    def wait_quiet(self, max_s: float | None = None) -> bool | None:
        """Look at the machine until :data:`QUIET_LOOKS` looks in a row find it quiet, for at most
        ``max_s`` seconds (``options.quiet_wait_s``); True when it was found quiet, False when the
        time ran out, None when nothing is probed. A machine whose last timing (within
        :data:`RECENT_S`) was quiet is taken as quiet at once; after a wait that found none, the
        next looks only briefly (a machine busy for good would cost the whole wait at every task's
        confirmation). The wait is logged in ``noise.waits``."""
        if not self.options.probe:
            return None
        self._calibrate()
        if self.noise.quiet_since(RECENT_S):
            self.noise.waits.append({"quiet": True, "waited_s": 0.0})
            return True
        limit = self.options.quiet_wait_s if max_s is None else max_s
        if self.noise.waits and not self.noise.waits[-1]["quiet"]:  # busy at the last wait: look briefly
            limit = min(limit, QUIET_LOOK_S * (QUIET_LOOKS + 1))
        t0, streak = time.perf_counter(), 0
        while True:
            look = self._look(QUIET_LOOK_S)
            streak = streak + 1 if look is not None and not self.noise.verdict(look)["noisy"] else 0
            waited = time.perf_counter() - t0
            if streak >= QUIET_LOOKS or waited >= limit:
                quiet = streak >= QUIET_LOOKS
                self.noise.waits.append({"quiet": quiet, "waited_s": round(waited, 2)})
                return quiet

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult],
            on_result: Callable[[MeasureInput, MeasureResult], None] | None = None,
            check_correctness: bool | None = None, keep_artifacts: bool = False) -> list[MeasureResult]:
        """Run each successfully built candidate; build errors pass through as results.

        ``on_result`` is called as each candidate completes (to commit it at once). Built
        libraries are deleted once run, unless ``keep_artifacts`` (they are run again).
        """
        opts = self._opts(check_correctness)
        if opts["probe"] and any(b.artifact for b in builds):
            self._calibrate()
        out = []
        for inp, b in zip(inputs, builds):
            r = self._run_one(inp, b, opts, keep_artifacts)
            out.append(r)
            if on_result is not None:
                on_result(inp, r)
        return out

    def _opts(self, check_correctness: bool | None) -> dict[str, Any]:
        """The worker's settings for one batch (``check_correctness`` overrides the options')."""
        opts = self.options.runner_opts()
        if check_correctness is not None:
            opts["check_correctness"] = check_correctness
        return opts

    def _run_one(self, inp: MeasureInput, b: BuildResult, opts: dict[str, Any], keep: bool = False,
                 worker: Worker | None = None) -> MeasureResult:
        """Run one candidate in ``worker`` (default: the runner's own process)."""
        worker = worker or self._worker
        now, threads = time.time(), self.options.threads
        if b.error is not ErrorKind.NONE or b.artifact is None:
            return MeasureResult([], b.error, b.error_msg, b.build_time, 0.0, now, threads, build_cpu=b.build_cpu)
        if worker.runs >= max(1, self.options.runner_restart):
            self._restart(worker)
        self._prepare(inp, opts, worker)
        self._energy.start()
        for attempt in range(2):  # a load that failed for the process's fault is run again, once
            if attempt:
                self._restart(worker)
                self._prepare(inp, opts, worker)
            t0 = time.perf_counter()
            res = worker.call(*self._call(inp, b, opts), self.options.run_timeout)
            worker.runs += 1
            if not (res.status == "ok" and res.value[0] == ErrorKind.RUNTIME.value and _cannot_load(res.value[2])):
                break
        joules = self._energy.stop()
        dt = time.perf_counter() - t0
        if not keep:
            try:
                os.remove(b.artifact)
            except OSError:
                pass
        if res.status == "ok":
            kind, costs, msg, got_threads, timed = res.value[:5]
            noise = res.value[5] if len(res.value) > 5 else None
            r = MeasureResult(costs, ErrorKind(kind), msg, b.build_time, dt, now, got_threads or threads, joules,
                              build_cpu=b.build_cpu, run_cpu=res.cpu_s)
            r.extra["timed_s"] = timed
            r.extra["run_interval"] = (now, now + dt)  # when it was being run (wall clock)
            if noise is not None:
                r.extra["noise"] = self.noise.judge(Sample(*noise))
            if opts["check_correctness"] and r.ok:
                r.extra["verified"] = True
            return r
        kind, msg = {
            "timeout": (ErrorKind.RUN_TIMEOUT, "run " + res.message),
            "crash": (ErrorKind.RUNTIME, "candidate crashed the runner: " + res.message),
        }.get(res.status, (ErrorKind.UNKNOWN, res.message))
        return MeasureResult([], kind, msg, b.build_time, dt, now, threads, joules, build_cpu=b.build_cpu,
                             run_cpu=res.cpu_s)

    def _prepare(self, inp: MeasureInput, opts: dict[str, Any], worker: Worker) -> None:
        """Set the task up in ``worker``'s process when it has not (a new or restarted process, or a
        new task), under the longer of the build and run timeouts: a restarted runner on a loaded
        machine spent seconds of the next candidate's run timeout on it, and a clean candidate was
        recorded as timed out. A setup that fails is left to the candidate's own call, which
        records the error."""
        key = (inp.task.json_text, int(opts.get("seed", 0)), with_variant(inp, opts).get("variant", ""))
        if worker.prepared == key:
            return
        out = worker.call(prepare_task, key, max(self.options.build_timeout, self.options.run_timeout))
        worker.prepared = key if out.status == "ok" else None

    def _call(self, inp: MeasureInput, b: BuildResult, opts: dict[str, Any]) -> tuple[Callable[..., Any], tuple]:
        """The worker function that runs one candidate, and its arguments."""
        return run_candidate, (inp.task.json_text, b.artifact, with_variant(inp, opts))

    def _restart(self, worker: Worker | None = None) -> None:
        """A fresh runner process (started now, so that no candidate's run time includes it)."""
        worker = worker or self._worker
        worker.close()
        worker.start()
        worker.runs = 0
        self.restarts += 1

    def close(self) -> None:
        """Stop the runner process."""
        self._worker.close()
        self._log.close()


class RPCRunner(LocalRunner):
    """Times built candidates on devices registered with a TVM RPC tracker (AutoTVM's
    ``RPCRunner``): each candidate is uploaded to a device of ``options.rpc`` (``host:port:key``),
    checked against the reference computed here and timed there, from the same kind of persistent
    worker process (so a hung device ends at the run timeout). ``options.rpc_workers`` candidates
    are on devices at once, each runner holding a session that the tracker gave it on a free device
    (AutoTVM's ``n_parallel``) for up to ``options.rpc_session_reuse`` candidates, so N devices
    time N candidates at a time; a session that fails is dropped, so a device that drops out
    leaves the next candidates to the others. A candidate goes to a device as soon as it is built
    (:meth:`run_as_built`), and results are handed back in the caller's thread, in the order the
    candidates finish. Energy is not measured (the counters here do not see the
    device), and the thread count recorded is the device's."""

    def __init__(self, options: MeasureOptions) -> None:
        self.device = parse_rpc(options.rpc or "")
        options.threads = device_threads(self.device)  # the context records the device's thread count
        options.probe = False  # the contention probe would time this machine, not the device
        super().__init__(options)
        self._energy = EnergyMeter([])
        self._more = [Worker(init_worker, (tuple(options.imports), options.threads), self._log)
                      for _ in range(max(1, options.rpc_workers) - 1)]

    def start(self) -> None:
        super().start()
        for w in self._more:
            w.start()

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult],
            on_result: Callable[[MeasureInput, MeasureResult], None] | None = None,
            check_correctness: bool | None = None, keep_artifacts: bool = False) -> list[MeasureResult]:
        if not self._more:
            return super().run(inputs, builds, on_result, check_correctness, keep_artifacts)
        built: queue.SimpleQueue[tuple[int, BuildResult]] = queue.SimpleQueue()
        for k, b in enumerate(builds):
            built.put((k, b))
        return self.run_as_built(inputs, built, on_result, check_correctness, keep_artifacts)

    def run_as_built(self, inputs: Sequence[MeasureInput], built: queue.SimpleQueue[tuple[int, BuildResult]],
                     on_result: Callable[[MeasureInput, MeasureResult], None] | None = None,
                     check_correctness: bool | None = None, keep_artifacts: bool = False) -> list[MeasureResult]:
        """Time each candidate on a free device as soon as its build arrives on ``built`` (``(k,
        build)`` pairs, one per input, in any order), so building and timing overlap; results are
        handed to ``on_result`` in the caller's thread as they finish. Returns them in input order."""
        opts = self._opts(check_correctness)
        free: queue.Queue[Worker] = queue.Queue()
        for w in [self._worker, *self._more]:
            free.put(w)
        events: queue.SimpleQueue[tuple[str, int, Any]] = queue.SimpleQueue()

        def feed() -> None:  # builds, as they arrive, become events of this loop
            for _ in range(len(inputs)):
                k, b = built.get()
                events.put(("built", k, b))

        def one(k: int, b: BuildResult) -> None:
            worker = free.get()
            try:
                events.put(("ran", k, self._run_one(inputs[k], b, opts, keep_artifacts, worker)))
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                events.put(("failed", k, e))
            finally:
                free.put(worker)

        out: list[MeasureResult | None] = [None] * len(inputs)
        done = 0
        with ThreadPoolExecutor(max_workers=1 + len(self._more), thread_name_prefix="rpc") as pool:
            threading.Thread(target=feed, name="rpc-feed", daemon=True).start()
            while done < len(inputs):
                kind, k, value = events.get()
                if kind == "built":
                    pool.submit(one, k, value)
                    continue
                if kind == "failed":
                    raise value
                out[k] = value
                done += 1
                if on_result is not None:
                    on_result(inputs[k], value)  # here, not in a pool thread: the database is the caller's
        return [r for r in out if r is not None]

    def close(self) -> None:
        for w in self._more:
            w.close()
        super().close()

    def _prepare(self, inp: MeasureInput, opts: dict[str, Any], worker: Worker) -> None:
        """Nothing: the reference is made at the first candidate, and the device session's own
        timeout (``session_opts``) spans it."""

    def _call(self, inp: MeasureInput, b: BuildResult, opts: dict[str, Any]) -> tuple[Callable[..., Any], tuple]:
        return rpc_run_candidate, (inp.task.json_text, b.artifact, self.session_opts(with_variant(inp, opts)), self.device)

    def session_opts(self, opts: dict[str, Any]) -> dict[str, Any]:
        """``opts`` with the device session's timeout: :data:`~tensortune.measure.worker.SESSION_SPAN`
        run timeouts, as a session may be kept for several candidates (each ended by the run timeout)."""
        return {**opts, "session_timeout": self.options.run_timeout * SESSION_SPAN}


#: What a failed library load says when the process, not the candidate, is at fault (its memory
#: maps exhausted): ``dlopen``'s "cannot apply additional memory protection after relocation:
#: Cannot allocate memory", "failed to map segment from shared object", and the like.
_LOAD_FAILURES = ("Cannot allocate memory", "failed to map segment")


def _cannot_load(message: str) -> bool:
    """True when a runtime error is a library load that failed for lack of memory maps."""
    return "Failed to load dynamic shared library" in message and any(m in message for m in _LOAD_FAILURES)


class DeviceUnavailable(RuntimeError):
    """The RPC tracker cannot be reached, or it has no device of the key."""


def device_threads(device: tuple[str, int, str], timeout: float = 30.0) -> int:
    """The thread count a device of the tracker runs kernels with (``runtime.NumThreads`` there);
    :class:`DeviceUnavailable` in one line when no session can be had."""
    import socket

    from tvm import rpc

    host, port, key = device
    try:
        socket.create_connection((host, port), timeout=5).close()  # fail fast: TVM retries for a minute
        tracker = rpc.connect_tracker(host, port)
        servers = [s for s in tracker.summary().get("server_info", []) if str(s.get("key", "")).endswith(f":{key}")]
        if not servers:
            raise RuntimeError(f"the tracker has no device of that key (it has: "
                               f"{', '.join(sorted({str(s.get('key', '')) for s in tracker.summary().get('server_info', [])})) or 'none'})")
        remote = tracker.request(key, priority=1, session_timeout=timeout)
        return int(remote.get_function("runtime.NumThreads")())
    except Exception as e:  # noqa: BLE001 - any failure to reach the device is the same answer
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        raise DeviceUnavailable(f"no rpc device {key!r} at tracker {host}:{port}: "
                                f"{lines[-1] if lines else type(e).__name__}") from None


def parse_rpc(text: str) -> tuple[str, int, str]:
    """``"host:port:key"`` -> ``(host, port, key)``; ValueError in one line otherwise."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0] or not parts[2] or not parts[1].isdigit() or not 0 < int(parts[1]) < 65536:
        raise ValueError(f"--rpc takes TRACKER_HOST:PORT:KEY (e.g. 127.0.0.1:9190:rasp4), got {text!r}")
    return parts[0], int(parts[1]), parts[2]


class Measurer(MeasurerBase):
    """Builder + runner pair: ``measure(batch)`` builds all in parallel, then runs one by one.

    ``build_s`` and ``run_s`` add up the wall time it has spent building and running (every
    call: searches' batches, repeated rounds, correctness checks), so a tuning run's wall time
    splits into building, running and the rest (search, cost-model updates, bookkeeping)."""

    def __init__(self, options: MeasureOptions | None = None,
                 turn: Callable[[], ContextManager[object]] | None = None) -> None:
        """``turn``: a context held around each timing (not the building), e.g. a node's
        measurement lock shared with other measurers of the machine."""
        self.options = options or MeasureOptions()
        self.turn = turn or nullcontext
        self.builder = LocalBuilder(self.options)
        self.runner = RPCRunner(self.options) if self.options.rpc else LocalRunner(self.options)
        self.build_s = 0.0
        self.run_s = 0.0
        self._runner_started: Future[None] | None = None

    def _build(self, inputs: Sequence[MeasureInput],
               on_built: Callable[[int, BuildResult], None] | None = None) -> list[BuildResult]:
        if self._runner_started is None:  # the runner process starts while the first batch builds
            pool = ThreadPoolExecutor(1)
            self._runner_started = pool.submit(self.runner.start)
            pool.shutdown(wait=False)
        t0 = time.perf_counter()
        try:
            return self.builder.build(inputs, on_built)
        finally:
            self.build_s += time.perf_counter() - t0

    def _run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult], *args: Any, **kw: Any) -> Any:
        if self._runner_started is not None:
            self._runner_started.result()  # a runner that could not start raises here (WorkerStartError)
        with self.turn():
            t0 = time.perf_counter()
            try:
                return self.runner.run(inputs, builds, *args, **kw)
            finally:
                self.run_s += time.perf_counter() - t0

    def start(self) -> None:
        """Start all worker processes."""
        self.builder.start()
        self.runner.start()

    def measure(self, inputs: Sequence[MeasureInput],
                on_result: Callable[[MeasureInput, MeasureResult], None] | None = None) -> list[MeasureResult]:
        """Build then run ``inputs`` (``on_result`` as each completes). On RPC devices each
        candidate is timed as soon as it is built (:meth:`RPCRunner.run_as_built`: building here
        cannot disturb a timing there), and ``run_s`` counts the time the timing went on past
        the building."""
        if isinstance(self.runner, RPCRunner) and inputs:
            return self._pipelined(inputs, on_result)
        return self._run(inputs, self._build(inputs), on_result)

    def _pipelined(self, inputs: Sequence[MeasureInput],
                   on_result: Callable[[MeasureInput, MeasureResult], None] | None) -> list[MeasureResult]:
        assert isinstance(self.runner, RPCRunner)
        built: queue.SimpleQueue[tuple[int, BuildResult]] = queue.SimpleQueue()
        sent: set[int] = set()

        def arrived(k: int, b: BuildResult) -> None:
            sent.add(k)
            built.put((k, b))

        def build() -> None:
            try:
                self._build(inputs, arrived)
            except Exception as e:  # noqa: BLE001 - what was not built is an error, and the runs go on
                for k in range(len(inputs)):
                    if k not in sent:
                        arrived(k, BuildResult(None, ErrorKind.UNKNOWN, f"builder failed: {e}"))

        pool = ThreadPoolExecutor(2, thread_name_prefix="build")
        if self._runner_started is None:  # started here, not in the build thread: the runs wait on it
            self._runner_started = pool.submit(self.runner.start)
        t0, build_s = time.perf_counter(), self.build_s
        building = pool.submit(build)
        pool.shutdown(wait=False)
        self._runner_started.result()
        try:
            with self.turn():
                return self.runner.run_as_built(inputs, built, on_result)
        finally:
            building.result()
            self.run_s += max(0.0, time.perf_counter() - t0 - (self.build_s - build_s))

    def measure_rounds(self, inputs: Sequence[MeasureInput], rounds: int,
                       on_result: Callable[[int, MeasureInput, MeasureResult], None] | None = None) -> list[list[MeasureResult]]:
        """Build ``inputs`` once, then run them all ``rounds`` times in turn (round 1: A B C, round 2:
        A B C, ...), so drift of the machine hits every candidate alike; ``on_result(round, inp, res)``
        as each run completes. Returns one list of results per round."""
        builds = self._build(inputs)
        out = []
        try:
            for r in range(1, rounds + 1):
                cb = None if on_result is None else (lambda inp, res, r=r: on_result(r, inp, res))
                out.append(self._run(inputs, builds, cb, keep_artifacts=r < rounds))
        finally:
            for b in builds:
                if b.artifact and os.path.exists(b.artifact):
                    os.remove(b.artifact)
        return out

    @property
    def noise(self) -> NoiseLog:
        """The contention verdicts of every timing so far (:mod:`tensortune.measure.noise`)."""
        return self.runner.noise

    def wait_quiet(self, max_s: float | None = None) -> bool | None:
        """Wait for a quiet spell on the machine (:meth:`LocalRunner.wait_quiet`)."""
        return self.runner.wait_quiet(max_s)

    def verify(self, inp: MeasureInput) -> MeasureResult:
        """Build and run one candidate with the correctness check forced on."""
        return self._run([inp], self._build([inp]), check_correctness=True)[0]

    def close(self) -> None:
        """Stop every worker process."""
        if self._runner_started is not None:
            try:
                self._runner_started.result()  # never close a runner while its start is under way
            except Exception:  # noqa: BLE001 - a runner that failed to start has nothing to stop
                pass
        self.builder.close()
        self.runner.close()

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
