"""``python -m bench soak``: faults at scale (a benchmark, not a test).

    python -m bench soak [--trials 5000] [--fault-rate 0.1] [--run-timeout 2] [--seed 0]
                         [--out bench/results/soak.json] [--db bench/results/soak.db]
                         [--sample-interval 5] [--window 60] [--no-progress]

One task, a 64x64x64 matmul on the ``soak_gemm`` template (:mod:`.faults`: the real GEMM schedule
space, a deterministic ``--fault-rate`` of its configs made to crash the runner, hang or compute a
wrong answer), is tuned by the ``random`` tuner through the project's own machinery: a
:class:`~tensortune.measure.Measurer` (persistent builder and runner processes, timeouts, errors
as results) and the SQLite :class:`~tensortune.database.Database`, where every trial is committed as
it completes. A background thread samples, every ``--sample-interval`` seconds, the RSS, USS and
open file descriptors of the main process and of every worker by role (workers are restarted after
crashes and hangs, so a role outlives its processes), the worker processes alive (and zombies), the
trials committed in the database and the errors by kind.

Targets, each printed PASS or FAIL and saved with the samples in ``--out`` (a PNG beside it):

- **0 trials lost**: trials committed to the database = trials requested, and this run's measured
  = completed = newly committed trials, no config measured twice;
- **faults recorded**: every faulty candidate recorded with its error (crash -> ``runtime``,
  hang -> ``run_timeout``, wrong -> ``wrong_answer``), every fault class met at least once;
- **0 wrong kernels reported**: no faulty candidate recorded ok, nor as the best (the database's or
  the tuner's);
- **best verified**: the best config is clean and passes a fresh build, run and correctness check;
- **faults contained**: no clean candidate recorded with an error (a fault costs its candidate only);
- **memory flat**: per role, the median of the last quarter (by trials) exceeds the first quarter's
  by at most ``max(16 MiB, 5%)``; **open files flat**: by at most 2 descriptors;
- **no leaked processes**: never more worker processes than builders + 1 runner, no zombies;
- **throughput steady**: median trials/min of the last quarter's windows at least 75% of the
  first quarter's.

Memory and descriptor trends are judged within each session (one invocation: a resumed run starts
fresh processes) that ran at least a fifth of the trials. Rerunning the same command resumes from
``--db``: stored trials count, samples of earlier sessions are kept in ``<db>.samples.jsonl``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "bench" / "results" / "soak.json"
DEFAULT_DB = ROOT / "bench" / "results" / "soak.db"
def _git() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout (:func:`.provenance.git_state`)."""
    from .provenance import git_state

    return git_state(ROOT)


#: The tuner that proposes candidates: uniform, so it meets faults at the planned rate.
TUNER = "random"

#: Flatness tolerances (last-quarter median minus first-quarter median).
MEM_TOL_MIB = 16.0
MEM_TOL_FRAC = 0.05
FD_TOL = 2
#: Throughput is steady when the last quarter keeps at least this share of the first quarter's.
THROUGHPUT_KEEP = 0.75
#: Sessions judged for memory and descriptors: those that ran at least this share of the trials.
SESSION_SHARE = 0.2


@dataclass(frozen=True)
class SoakSettings:
    """What one soak measures, and how."""

    trials: int = 5000
    fault_rate: float = 0.1
    #: seconds before a hanging kernel is stopped (the runner is then restarted)
    run_timeout: float = 2.0
    build_timeout: float = 20.0
    seed: int = 0
    shape: tuple[int, int, int] = (64, 64, 64)
    batch_size: int = 16
    repeat: int = 2
    min_repeat_ms: int = 5
    #: builder processes (0: one per core)
    n_parallel: int = 0
    sample_interval_s: float = 5.0
    #: width of a throughput window
    window_s: float = 60.0

    def check(self) -> None:
        """Refuse impossible settings (one line, exit status 2 from the CLI)."""
        if self.trials < 1:
            raise SoakError("--trials must be at least 1")
        if not 0.0 <= self.fault_rate <= 1.0:
            raise SoakError("--fault-rate must be within [0, 1]")
        if self.run_timeout <= 0 or self.build_timeout <= 0:
            raise SoakError("--run-timeout must be positive")
        if self.sample_interval_s <= 0 or self.window_s <= 0:
            raise SoakError("--sample-interval and --window must be positive")


class SoakError(Exception):
    """A soak that cannot run (bad settings, a database of another fault plan)."""


# ------------------------------------------------------------------------------------- plumbing
@contextlib.contextmanager
def worker_path() -> Iterator[None]:
    """Put the checkout on the workers' ``PYTHONPATH`` for the whole run.

    The worker processes (``python -m tvm.exec.popen_worker``, restarted after every crash and hang)
    import :mod:`bench.suite.faults` by name; ``bench`` is not an installed package, so they find
    it only with the checkout on their path, whatever the current directory.
    """
    old = os.environ.get("PYTHONPATH")
    parts = [p for p in (old or "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in parts if Path(p).resolve() != ROOT])
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


class CountingDatabase:
    """The tuner's view of the database: everything forwarded, committed trials counted by error."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self._lock = threading.Lock()
        self.completed = 0
        self.errors: Counter = Counter()

    def add_trial(self, trial: Any) -> int:
        row = self._db.add_trial(trial)
        with self._lock:
            self.completed += 1
            if trial.error != "none":
                self.errors[trial.error] += 1
        return row

    def snapshot(self) -> tuple[int, Counter]:
        """Trials committed through this object and their errors, so far."""
        with self._lock:
            return self.completed, Counter(self.errors)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def _child_pids() -> set[int]:
    """Process ids of this process's children (and theirs) now."""
    import psutil

    try:
        return {c.pid for c in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


def _worker_pid(worker: Any) -> int | None:
    """The process id of a :class:`tensortune.measure.pool.Worker` now (None between restarts)."""
    proc = getattr(getattr(worker, "_w", None), "_proc", None)
    return getattr(proc, "pid", None) if proc is not None else None


def roles(measurer: Any) -> dict[str, int | None]:
    """Role -> current process id: ``main``, ``builder0``..., ``runner``."""
    out: dict[str, int | None] = {"main": os.getpid()}
    for i, w in enumerate(getattr(measurer.builder, "_workers", [])):
        out[f"builder{i}"] = _worker_pid(w)
    out["runner"] = _worker_pid(getattr(measurer.runner, "_worker", None))
    return out


def proc_stats(pid: int | None) -> dict[str, Any] | None:
    """RSS and USS (MiB) and open descriptors (``/proc/PID/fd``) of one process; None if gone."""
    import psutil

    if pid is None:
        return None
    try:
        p = psutil.Process(pid)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        rss = p.memory_info().rss
        try:
            uss: float | None = p.memory_full_info().uss / 2**20
        except (psutil.AccessDenied, AttributeError):
            uss = None
        return {"pid": pid, "rss_mib": round(rss / 2**20, 2), "uss_mib": None if uss is None else round(uss, 2),
                "fds": fds}
    except (psutil.Error, OSError):
        return None


class Sampler(threading.Thread):
    """Samples the run every ``interval`` seconds into memory and ``path`` (one JSON line each)."""

    def __init__(self, measurer: Any, db_path: Path, key: str, session: int, path: Path, interval: float,
                 counting: CountingDatabase, before: int, before_errors: Counter, total: int,
                 progress: bool, preexisting: set[int] = frozenset()) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.measurer, self.db_path, self.key, self.session = measurer, db_path, key, session
        self.path, self.interval, self.counting = path, interval, counting
        self.before, self.before_errors, self.total, self.progress = before, before_errors, total, progress
        self.samples: list[dict[str, Any]] = []
        self.t0 = time.perf_counter()
        self._stop_event = threading.Event()
        self._last_print = 0.0
        #: children of this process from before its workers started: not the run's, never counted
        self.preexisting = preexisting

    def take(self) -> dict[str, Any]:
        """One sample of every process, the database and the counters."""
        import psutil

        from tensortune.database import Database

        procs = {role: proc_stats(pid) for role, pid in roles(self.measurer).items()}
        me = psutil.Process()
        try:
            kids = [c for c in me.children() if c.pid not in self.preexisting]
            zombies = sum(1 for c in me.children(recursive=True)
                          if c.pid not in self.preexisting and c.status() == psutil.STATUS_ZOMBIE)
        except psutil.Error:
            kids, zombies = [], 0
        build_dir = getattr(self.measurer.builder, "_dir", None)
        try:
            build_files = len(os.listdir(build_dir)) if build_dir else None
        except OSError:
            build_files = None
        committed: int | None
        try:
            with Database(self.db_path, readonly=True) as db:
                committed = db.count(self.key)
        except Exception:  # noqa: BLE001 - a sample never stops the run
            committed = None
        done, errors = self.counting.snapshot()
        return {"session": self.session, "t": round(time.perf_counter() - self.t0, 3), "time": time.time(),
                "trials": committed if committed is not None else self.before + done,
                "completed": self.before + done, "errors": dict(self.before_errors + errors), "procs": procs,
                "children": len(kids), "zombies": zombies, "build_dir_files": build_files,
                "load": round(os.getloadavg()[0], 2)}

    def _record(self, s: dict[str, Any]) -> None:
        self.samples.append(s)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(s) + "\n")
        if self.progress and (s["t"] - self._last_print >= 30.0 or self._stop_event.is_set()):
            self._last_print = s["t"]
            print(progress_line(s, self.samples, self.total), flush=True)

    def run(self) -> None:
        self._record(self.take())
        while not self._stop_event.wait(self.interval):
            self._record(self.take())

    def stop(self) -> None:
        """Stop sampling; take a last sample (while the workers still live)."""
        self._stop_event.set()
        self.join()
        self._record(self.take())


def progress_line(s: dict[str, Any], samples: Sequence[dict[str, Any]], total: int) -> str:
    """``[soak] 1234/5000 trials, 21.3/min; errors ...; RSS MiB ...; fds ...``."""
    prev = [x for x in samples if x["session"] == s["session"] and s["t"] - x["t"] >= 60.0]
    ref = prev[-1] if prev else (samples[0] if samples else s)
    dt = s["t"] - ref["t"]
    rate = f"{(s['trials'] - ref['trials']) / dt * 60:.1f}/min" if dt > 0 else "-"
    errs = ", ".join(f"{k} {v}" for k, v in sorted(s["errors"].items())) or "none"
    rss = " ".join(f"{r} {p['rss_mib']:.0f}" for r, p in s["procs"].items() if p)
    fds = " ".join(f"{r} {p['fds']}" for r, p in s["procs"].items() if p)
    return f"[soak] {s['trials']}/{total} trials, {rate}; errors: {errs}; RSS MiB: {rss}; fds: {fds}"


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Samples of earlier sessions (a torn last line from a killed run is skipped)."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for ln in lines:
        try:
            out.append(json.loads(ln))
        except json.JSONDecodeError:
            continue
    return out


# ------------------------------------------------------------------------------------- the run
def check_plan(db: Any, task: Any) -> None:
    """Refuse a database whose stored trials were made under another fault plan (rate)."""
    bad = 0
    for t in db.trials(task.workload_key):
        try:
            c = task.space.get(t.config_index)
        except IndexError:
            bad += 1
            continue
        if c.to_json()["knobs"] != t.config or not task.space.is_valid(c):
            bad += 1
    if bad:
        raise SoakError(f"{db.path} holds {bad} trials of another fault plan (another --fault-rate); "
                        "use another --db or the same --fault-rate")


def run_soak(s: SoakSettings, db_path: Path, out: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) a soak into ``db_path``; return the report (also written to ``out``)."""
    s.check()
    from tensortune.database import Database
    from tensortune.measure import MeasureInput, MeasureOptions, Measurer
    from tensortune.target import cpu_count, machine_id
    from tensortune.task import Task
    from tensortune.tuners import get_tuner
    from tensortune.database.trials import ensure_task
    from tensortune.utils.atomic import check_output_path

    from . import faults

    db_path = Path(db_path)
    if out is not None:
        check_output_path(out, overwrite=True, protect=[db_path], what="--out")
    n_parallel = s.n_parallel or cpu_count()
    samples_path = Path(f"{db_path}.samples.jsonl")
    with worker_path():
        faults.install(s.fault_rate)
        task = Task.from_op("matmul", list(s.shape), template=faults.NAME)
        with Database(db_path) as db:
            ensure_task(db, task)
            check_plan(db, task)
            key = task.workload_key
            before = db.count(key)
            before_errors = Counter(t.error for t in db.trials(key) if t.error != "none")
            if before == 0:
                samples_path.unlink(missing_ok=True)
            prior = read_samples(samples_path)
            session = 1 + max((int(x.get("session", 0)) for x in prior), default=0)
            opts = MeasureOptions(number=1, repeat=s.repeat, min_repeat_ms=s.min_repeat_ms, check_correctness=True,
                                  build_timeout=s.build_timeout, run_timeout=s.run_timeout, n_parallel=n_parallel,
                                  imports=(faults.__name__,))
            if progress:
                print(f"[soak] {task.name} on {faults.NAME} (fault rate {s.fault_rate:g}), {s.trials} trials, "
                      f"{before} stored in {db_path}; session {session}; starting workers", flush=True)
            counting = CountingDatabase(db)
            t_start = time.perf_counter()
            preexisting = _child_pids()  # not the run's workers (e.g. multiprocessing's resource tracker)
            with Measurer(opts) as m:
                m.start()
                startup_s = time.perf_counter() - t_start
                sampler = Sampler(m, db_path, key, session, samples_path, s.sample_interval_s, counting, before,
                                  before_errors, s.trials, progress, preexisting)
                sampler.start()
                tuner = get_tuner(TUNER, task, seed=s.seed, batch_size=s.batch_size)
                tuner.confirm_top = 0  # every config once: the checks count commits and duplicates
                try:
                    res = tuner.tune(s.trials, m, database=counting)
                finally:
                    sampler.stop()
                verify = m.verify(MeasureInput(task, res.best_config)) if res.best_config is not None else None
            wall_s = time.perf_counter() - t_start
            trials = db.trials(key)
            best_db = db.best(key)
    done, _ = counting.snapshot()
    loads = [x["load"] for x in sampler.samples if x.get("load") is not None]
    run = {"session": session, "loadavg_median": _median(loads), "loadavg_max": max(loads, default=None), "stored_before": before, "measured": res.trials_measured, "completed": done,
           "stop_reason": res.stop_reason, "startup_s": round(startup_s, 2), "wall_s": round(wall_s, 2)}
    report = analyse(s, n_parallel, task, trials, best_db, res, verify, prior + sampler.samples, run)
    report.update({"benchmark": "soak", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine_id(),
                   "git_commit": _git()[0], "git_dirty": _git()[1], "settings": {**asdict(s), "n_parallel": n_parallel, "tuner": TUNER},
                   "tolerances": {"memory_mib": MEM_TOL_MIB, "memory_frac": MEM_TOL_FRAC, "fds": FD_TOL,
                                  "throughput_keep": THROUGHPUT_KEEP, "session_share": SESSION_SHARE},
                   "task": {"name": task.name, "workload_key": task.workload_key, "template": faults.NAME,
                            "space": len(task.space)},
                   "db": str(db_path), "samples_file": str(samples_path)})
    if out is not None:
        write_outputs(report, Path(out))
    return report


# ------------------------------------------------------------------------------------- analysis
def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def quarter_trend(points: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """First- and last-quarter medians (quarters of the trial range) and the least-squares slope per
    1,000 trials of ``(trials, value)`` points."""
    pts = sorted(points)
    if len(pts) < 4 or pts[-1][0] <= pts[0][0]:
        return {"samples": len(pts), "first": None, "last": None, "growth": None, "slope_per_1k": None}
    x0, x1 = pts[0][0], pts[-1][0]
    first = [y for x, y in pts if x <= x0 + (x1 - x0) / 4]
    last = [y for x, y in pts if x >= x0 + 3 * (x1 - x0) / 4]
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx * 1000 if sxx else 0.0
    f, la = _median(first), _median(last)
    return {"samples": len(pts), "first": f, "last": la, "growth": None if f is None or la is None else la - f,
            "slope_per_1k": round(slope, 4), "min": min(y for _, y in pts), "max": max(y for _, y in pts)}


def judged_sessions(samples: Sequence[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Sessions (by number) that ran at least :data:`SESSION_SHARE` of the trials (at least the longest)."""
    by: dict[int, list[dict[str, Any]]] = {}
    for x in samples:
        by.setdefault(int(x["session"]), []).append(x)
    span = {k: v[-1]["trials"] - v[0]["trials"] for k, v in by.items()}
    total = sum(span.values())
    if not by:
        return {}
    longest = max(span, key=lambda k: span[k])
    return {k: v for k, v in sorted(by.items()) if k == longest or (total and span[k] >= SESSION_SHARE * total)}


def resource_trends(samples: Sequence[dict[str, Any]], metric: str) -> dict[str, dict[str, Any]]:
    """``{"session N/role": trend}`` of ``metric`` (``rss_mib``, ``uss_mib``, ``fds``) per judged session."""
    out = {}
    for k, ss in judged_sessions(samples).items():
        role_names = sorted({r for x in ss for r in x["procs"]})
        for role in role_names:
            pts = [(x["trials"], x["procs"][role][metric]) for x in ss
                   if x["procs"].get(role) and x["procs"][role].get(metric) is not None]
            out[f"session {k}/{role}"] = quarter_trend(pts)
    return out


def throughput_windows(samples: Sequence[dict[str, Any]], window_s: float) -> list[dict[str, float]]:
    """Trials per minute in consecutive windows of at least ``window_s`` seconds, within sessions."""
    out = []
    by: dict[int, list[dict[str, Any]]] = {}
    for x in samples:
        by.setdefault(int(x["session"]), []).append(x)
    for ss in by.values():
        a = ss[0]
        for b in ss[1:]:
            dt = b["t"] - a["t"]
            if dt >= window_s:
                out.append({"trials": (a["trials"] + b["trials"]) / 2, "per_min": (b["trials"] - a["trials"]) / dt * 60,
                            "seconds": dt})
                a = b
    return out


def throughput(samples: Sequence[dict[str, Any]], window_s: float) -> dict[str, Any]:
    """Windows, and the first vs last quarter (by trials) median rates."""
    w = throughput_windows(samples, window_s)
    res: dict[str, Any] = {"window_s": window_s, "windows": w, "first_quarter": None, "last_quarter": None,
                           "ratio": None, "cv": None}
    if len(w) < 2:
        return res
    x0, x1 = min(v["trials"] for v in w), max(v["trials"] for v in w)
    first = [v["per_min"] for v in w if v["trials"] <= x0 + (x1 - x0) / 4]
    last = [v["per_min"] for v in w if v["trials"] >= x0 + 3 * (x1 - x0) / 4]
    rates = [v["per_min"] for v in w]
    mean = sum(rates) / len(rates)
    res["cv"] = statistics.pstdev(rates) / mean if mean else None
    res["first_windows"], res["last_windows"] = len(first), len(last)
    if len(first) >= 2 and len(last) >= 2:
        res["first_quarter"], res["last_quarter"] = _median(first), _median(last)
        res["ratio"] = res["last_quarter"] / res["first_quarter"] if res["first_quarter"] else None
    return res


def fault_costs(trials: Sequence[Any]) -> dict[str, Any]:
    """What faults cost: run time of each kind, and the runner restart a crash or hang leaves to the next
    candidate (median run time of a clean trial right after one, minus that of other clean trials)."""
    after_restart, plain = [], []
    for prev, t in zip([None, *trials[:-1]], trials):
        if t.config.get("inject") != "none" or t.error != "none":
            continue
        restarted = prev is not None and prev.config.get("inject") in ("segfault", "abort", "hang")
        (after_restart if restarted else plain).append(t.run_time)
    by_kind: dict[str, list[float]] = {}
    for t in trials:
        by_kind.setdefault(t.config.get("inject", "none"), []).append(t.run_time + t.build_time)
    clean_run = _median(plain)
    restart = _median(after_restart)
    return {"median_build_plus_run_s": {k: round(_median(v) or 0.0, 4) for k, v in sorted(by_kind.items())},
            "clean_run_s": clean_run, "runner_restart_s": None if restart is None or clean_run is None
            else max(0.0, restart - clean_run), "restarts_observed": len(after_restart)}


def projection(s: SoakSettings, samples: Sequence[dict[str, Any]], costs: dict[str, Any],
               trials: Sequence[Any], startup_s: float) -> dict[str, Any] | None:
    """Rough wall time of a soak from this run's figures: worker start-up, plus per trial the wall time
    of a clean trial (this run's time less its faults' restarts and timeouts) and the fault rate times
    the mean extra of a fault (a crash: a runner restart; a hang: the timeout and a restart; a wrong
    answer: nothing). Given for this run's settings and for the full default soak."""
    by: dict[int, list[dict[str, Any]]] = {}
    for x in samples:
        by.setdefault(int(x["session"]), []).append(x)
    span_s = sum(v[-1]["t"] - v[0]["t"] for v in by.values())
    span_n = sum(v[-1]["trials"] - v[0]["trials"] for v in by.values())
    restart = costs.get("runner_restart_s")
    if span_n <= 0 or restart is None:
        return None
    recent = trials[-span_n:]
    kinds = Counter(t.config.get("inject", "none") for t in recent)
    hang_s = _median([t.run_time for t in recent if t.config.get("inject") == "hang"]) or s.run_timeout
    extra = {"segfault": restart, "abort": restart, "hang": hang_s + restart, "wrong": 0.0}
    spent = sum(kinds[k] * v for k, v in extra.items())
    clean_s = max(0.0, (span_s - spent) / span_n)
    per_fault = (restart + (hang_s + restart) + 0.0) / 3  # thirds: crash, hang, wrong

    def total(n: int, rate: float) -> float:
        return round(startup_s + n * (clean_s + rate * per_fault), 1)

    full = SoakSettings()
    return {"clean_trial_s": round(clean_s, 4), "runner_restart_s": round(restart, 3), "hang_s": round(hang_s, 3),
            "fault_extra_s": round(per_fault, 3), "startup_s": round(startup_s, 1),
            "this_settings": {"trials": s.trials, "fault_rate": s.fault_rate, "seconds": total(s.trials, s.fault_rate)},
            "full_default": {"trials": full.trials, "fault_rate": full.fault_rate,
                             "seconds": total(full.trials, full.fault_rate)}}


def analyse(s: SoakSettings, n_parallel: int, task: Any, trials: Sequence[Any], best_db: Any, res: Any,
            verify: Any, samples: Sequence[dict[str, Any]], run: dict[str, Any]) -> dict[str, Any]:
    """Every check of the soak from the database, the tuner's result and the samples."""
    from .faults import EXPECTED_ERROR, FAULT_CLASS

    committed = len(trials)
    new = committed - run["stored_before"]
    indices = Counter(t.config_index for t in trials)
    dup = sum(n - 1 for n in indices.values() if n > 1)
    lost = max(0, s.trials - committed)
    trials_ok = (lost == 0 and dup == 0 and run["measured"] == run["completed"] == new)

    recorded: dict[str, Counter] = {}
    mismatched, faulty_ok, clean_errors = [], [], []
    for t in trials:
        inj = t.config.get("inject", "none")
        recorded.setdefault(inj, Counter())[t.error] += 1
        if inj == "none":
            if t.error != "none":
                clean_errors.append({"id": t.id, "config_index": t.config_index, "error": t.error,
                                     "message": t.error_msg[:200]})
            continue
        if t.error == "none" or t.verified:
            faulty_ok.append({"id": t.id, "config_index": t.config_index, "inject": inj})
        if t.error != EXPECTED_ERROR[inj]:
            mismatched.append({"id": t.id, "config_index": t.config_index, "inject": inj, "error": t.error,
                               "message": t.error_msg[:200]})
    classes = Counter()
    for inj, c in recorded.items():
        if inj != "none":
            classes[FAULT_CLASS[inj]] += sum(c.values())
    missing = [c for c in ("crash", "hang", "wrong") if not classes[c]]
    n_faulty = sum(classes.values())

    best_inj = best_db.config.get("inject") if best_db is not None else None
    tuner_inj = res.best_config["inject"] if res.best_config is not None else None
    best_is_clean = best_inj in (None, "none") and tuner_inj in (None, "none")
    same_best = best_db is None or res.best_config is None or best_db.config_index == res.best_config.index
    verified = bool(verify is not None and verify.ok and tuner_inj == "none")

    mem = resource_trends(samples, "rss_mib")
    uss = resource_trends(samples, "uss_mib")
    fds = resource_trends(samples, "fds")

    def flat(trends: dict[str, dict[str, Any]], tol: Any) -> tuple[bool | None, list[str]]:
        bad, judged = [], 0
        for name, tr in trends.items():
            if tr["growth"] is None:
                continue
            judged += 1
            if tr["growth"] > tol(tr["first"]):
                bad.append(f"{name} +{tr['growth']:.1f} ({tr['first']:.1f} -> {tr['last']:.1f})")
        return (None if not judged else not bad), bad

    mem_ok, mem_bad = flat(mem, lambda first: max(MEM_TOL_MIB, MEM_TOL_FRAC * first))
    fd_ok, fd_bad = flat(fds, lambda first: FD_TOL)
    max_children = max((x["children"] for x in samples), default=0)
    build_files = max((x["build_dir_files"] or 0 for x in samples), default=0)
    zombies_end = samples[-1]["zombies"] if samples else 0
    procs_ok = max_children <= n_parallel + 1 and zombies_end == 0
    tput = throughput(samples, s.window_s)
    tput_ok = None if tput["ratio"] is None else tput["ratio"] >= THROUGHPUT_KEEP
    costs = fault_costs(list(trials))

    def growth_text(trends: dict[str, dict[str, Any]], unit: str) -> str:
        several = len({n.split("/", 1)[0] for n in trends}) > 1
        parts = [f"{n.replace('session ', 's') if several else n.split('/', 1)[1]} {tr['first']:.0f}->{tr['last']:.0f}"
                 f"{unit}" for n, tr in trends.items() if tr["growth"] is not None]
        return ", ".join(parts) or "too few samples"

    targets = {
        "0 trials lost": (trials_ok, f"requested {s.trials}, committed {committed} ({run['stored_before']} before this "
                                     f"session), measured {run['measured']}, completed {run['completed']}, "
                                     f"lost {lost}, measured twice {dup}, stop: {run['stop_reason']}"),
        "faults recorded": (not mismatched and not missing,
                            f"{n_faulty} faulty ({', '.join(f'{k} {v}' for k, v in sorted(classes.items())) or 'none'}"
                            f"; {n_faulty / committed:.1%} of trials), {len(mismatched)} with the wrong error"
                            + (f", classes never met: {', '.join(missing)}" if missing else "")),
        "0 wrong kernels reported": (not faulty_ok and best_is_clean,
                                     f"faulty recorded ok {len(faulty_ok)}; best in database: {best_inj}, "
                                     f"tuner's best: {tuner_inj}"),
        "best verified": (verified and same_best and best_is_clean,
                          f"best #{res.best_config.index if res.best_config is not None else None} "
                          f"{res.best_cost * 1e3:.4f} ms, re-verified: "
                          f"{verify.ok if verify is not None else None}"
                          + ("" if same_best else f", database's best is #{best_db.config_index}")),
        "faults contained": (not clean_errors, f"{len(clean_errors)} clean candidates recorded with an error"),
        "memory flat": (mem_ok, f"RSS MiB {growth_text(mem, '')}"
                                + (f"; grew: {'; '.join(mem_bad)}" if mem_bad else "")),
        "open files flat": (fd_ok, f"fds {growth_text(fds, '')}" + (f"; grew: {'; '.join(fd_bad)}" if fd_bad else "")),
        "no leaked processes": (procs_ok, f"at most {max_children} worker processes (limit {n_parallel + 1}), "
                                          f"{zombies_end} zombies at the end"),
        "throughput steady": (tput_ok, "too short to judge" if tput["ratio"] is None else
                              f"{tput['first_quarter']:.1f} -> {tput['last_quarter']:.1f} trials/min "
                              f"({tput['ratio']:.0%} kept; windows {tput['first_windows']}/{tput['last_windows']})"),
    }
    verdicts = {k: {"pass": v[0], "detail": v[1]} for k, v in targets.items()}
    return {
        "pass": all(v["pass"] is not False for v in verdicts.values()),
        "targets": verdicts,
        "run": run,
        "trials": {"requested": s.trials, "committed": committed, "new": new, "lost": lost, "measured_twice": dup},
        "faults": {"planned_rate": s.fault_rate, "observed_rate": n_faulty / committed if committed else None,
                   "by_class": dict(classes), "recorded": {k: dict(v) for k, v in sorted(recorded.items())},
                   "mismatched": mismatched[:50], "faulty_recorded_ok": faulty_ok[:50],
                   "clean_errors": clean_errors[:50], "costs": costs},
        "best": {"config_index": res.best_config.index if res.best_config is not None else None,
                 "config": res.best_config.to_json()["knobs"] if res.best_config is not None else None,
                 "latency_ms": res.best_cost * 1e3 if math.isfinite(res.best_cost) else None,
                 "gflops": res.best_gflops, "db_config_index": best_db.config_index if best_db is not None else None,
                 "reverified": verify.ok if verify is not None else None,
                 "reverify_error": verify.error.value if verify is not None else None},
        "memory_rss_mib": mem, "memory_uss_mib": uss, "fds": fds,
        "processes": {"max_children": max_children, "limit": n_parallel + 1, "zombies_at_end": zombies_end,
                      "build_dir_files_max": build_files},
        "throughput": tput,
        "projection": projection(s, samples, costs, list(trials), run["startup_s"]),
        "samples": list(samples),
    }


# ------------------------------------------------------------------------------------- output
def print_report(r: dict[str, Any]) -> None:
    """The verdict per target, in a few lines."""
    width = max(len(k) for k in r["targets"])
    for name, v in r["targets"].items():
        mark = {True: "PASS", False: "FAIL", None: "N/A "}[v["pass"]]
        print(f"{mark}  {name:<{width}}  {v['detail']}")
    p = r.get("projection")
    if p:
        for what in ("this_settings", "full_default"):
            q = p[what]
            print(f"projection: {q['trials']} trials at fault rate {q['fault_rate']:g} take about "
                  f"{q['seconds'] / 60:.0f} min on this machine now ({p['clean_trial_s']:.2f} s per clean trial, "
                  f"+{p['fault_extra_s']:.1f} s per fault: runner restart {p['runner_restart_s']:.1f} s)")
    print(("PASS" if r["pass"] else "FAIL") + f": soak of {r['trials']['committed']} trials "
          f"({r['run']['wall_s'] / 60:.1f} min this session, load average {r['run']['loadavg_median']} "
          f"on {r['machine']['cores']} cores)")


def plot(r: dict[str, Any], path: Path) -> None:
    """Memory, descriptors and throughput over trials (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..common import save_figure

    samples = r["samples"]
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    role_names = sorted({k for x in samples for k in x["procs"]})
    sessions = sorted({x["session"] for x in samples})
    for k, role in enumerate(role_names):  # one line per role and session (a session has new processes)
        for ax, metric in ((axes[0], "rss_mib"), (axes[1], "fds")):
            for n, sess in enumerate(sessions):
                pts = [(x["trials"], x["procs"][role][metric]) for x in samples
                       if x["session"] == sess and x["procs"].get(role)]
                if pts:
                    ax.plot(*zip(*pts), ".-", ms=2, lw=0.8, color=f"C{k}", label=role if n == 0 else None)
    w = r["throughput"]["windows"]
    if w:
        axes[2].plot([v["trials"] for v in w], [v["per_min"] for v in w], "o", ms=3)
    starts = [x["trials"] for a, x in zip([None, *samples[:-1]], samples) if a is not None and a["session"] != x["session"]]
    for ax in axes:
        for x in starts:
            ax.axvline(x, color="grey", ls=":", lw=1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("RSS (MiB)")
    axes[1].set_ylabel("open fds")
    axes[2].set_ylabel(f"trials/min ({r['throughput']['window_s']:g} s windows)")
    axes[2].set_xlabel("trials committed")
    axes[0].legend(fontsize=7, ncol=4)
    s = r["settings"]
    fig.suptitle(f"soak: {r['task']['name']}, fault rate {s['fault_rate']:g}, {r['trials']['committed']} trials; "
                 f"{'PASS' if r['pass'] else 'FAIL'}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def write_outputs(r: dict[str, Any], out: Path) -> None:
    """The report as JSON (atomically) and the plot beside it."""
    from tensortune.utils.atomic import atomic_write

    out.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps({k: v for k, v in r.items() if k != "samples"}, indent=1, default=str)
    rows = ",\n".join("  " + json.dumps(x, separators=(",", ":"), default=str) for x in r.get("samples", []))
    atomic_write(out, head[:-2] + ',\n "samples": [\n' + rows + "\n ]\n}\n")  # one line per sample
    try:
        plot(r, out.with_suffix(".png"))
    except ImportError:  # matplotlib is a bench extra
        pass


# ------------------------------------------------------------------------------------- CLI
def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``soak`` on ``python -m bench``'s subcommands."""
    d = SoakSettings()
    p = sub.add_parser("soak", help="faults at scale: thousands of trials, 1 in 10 faulty (resumes from --db)")
    p.add_argument("--trials", type=int, default=d.trials, help=f"trials in all (default {d.trials})")
    p.add_argument("--fault-rate", type=float, default=d.fault_rate, help=f"faulty share (default {d.fault_rate:g})")
    p.add_argument("--run-timeout", type=float, default=d.run_timeout,
                   help=f"seconds before a hung kernel is stopped (default {d.run_timeout:g})")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--out", default=str(DEFAULT_OUT), help="report JSON (a PNG beside it)")
    p.add_argument("--db", default=str(DEFAULT_DB), help="tuning database (resumed when it holds trials)")
    p.add_argument("--sample-interval", type=float, default=d.sample_interval_s, help="seconds between samples")
    p.add_argument("--window", type=float, default=d.window_s, help="seconds per throughput window")
    p.add_argument("--no-progress", action="store_true")
    return p


def cmd_soak(a: argparse.Namespace) -> int:
    """``python -m bench soak``: 0 when every target passes, 1 when one fails, 2 on bad arguments."""
    s = SoakSettings(trials=a.trials, fault_rate=a.fault_rate, run_timeout=a.run_timeout, seed=a.seed,
                     sample_interval_s=a.sample_interval, window_s=a.window)
    from tensortune.database import DatabaseError
    from tensortune.utils.atomic import OutputError

    try:
        s.check()
        r = run_soak(s, Path(a.db), Path(a.out), progress=not a.no_progress)
    except (SoakError, OutputError, DatabaseError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted; every completed trial is in {a.db}: run the same command to resume", file=sys.stderr)
        return 130
    print_report(r)
    print(f"written: {a.out} and {Path(a.out).with_suffix('.png')}")
    return 0 if r["pass"] else 1
