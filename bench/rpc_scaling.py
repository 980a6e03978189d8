"""Throughput of parallel RPC measurement against the number of devices: ``python -m bench run --study rpc-scaling``.

    python -m bench run --study rpc-scaling [--devices 1,2,4,8] [--device-s 1.0] [--trials 64]
                        [--rounds 2] [--out bench/results/rpc-scaling-CPU-DATE]

A TVM RPC tracker and ``max(--devices)`` servers on the loopback address; for each device count
N, a random-search tuning of one matmul task with ``--rpc-workers N`` and a database, as
``tensortune tune-op --rpc`` runs it: every candidate built here (in parallel, each timed as soon
as it is built), a real session requested from the tracker, the library uploaded and loaded on
the server. Only the timing itself is simulated: the device takes ``--device-s`` seconds and
returns a fixed latency, since this machine's 2 cores cannot host eight real devices (their
kernels would time each other). So N devices can at best give N times one device's
throughput, and what is lost is the driver's own cost: building, sessions, uploads, search and
the database. The device counts are interleaved over ``--rounds`` rounds; the figures are
medians. Writes ``scaling.json`` and ``report.md``: trials per minute, speed-up over one device,
its ratio to N (the target: at least 0.8 at N = 8) and the driver's overhead per trial, the
wall time per trial beyond the device's own share (``device_s / N``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import write_text
from .loopback import loopback_devices

KEY = "tt-sim"
TASK = ("matmul", [64, 64, 64])


def fixed_time_run(task_json: str, artifact: str, opts: dict[str, Any], device: tuple[str, int, str],
                   seconds: float) -> tuple[str, list[float], str, int, float]:
    """The simulated device's run of a candidate: a real session (this runner's, reused as
    ``rpc_run_candidate`` reuses it), upload and load, then a timing that takes ``seconds`` and
    reports a fixed latency (what ``rpc_run_candidate`` returns)."""
    from tensortune.measure.worker import rpc_done, rpc_session

    remote, _ = rpc_session(device, opts)
    name = os.path.basename(artifact)
    remote.upload(artifact)
    remote.load_module(name)
    remote.remove(name)
    time.sleep(seconds)
    rpc_done(device, healthy=True)
    return "none", [1e-4 * (1 + (sum(name.encode()) % 97) / 97)] * int(opts["repeat"]), "", 1, seconds


def _runner(options: Any, seconds: float) -> Any:
    from tensortune.measure.measure import RPCRunner

    class FixedTimeDevices(RPCRunner):
        """RPC devices whose timing takes ``seconds`` (the rest of the path is TVM's own)."""

        def _call(self, inp: Any, b: Any, opts: dict[str, Any]) -> tuple[Any, tuple]:
            return fixed_time_run, (inp.task.json_text, b.artifact, self.session_opts(opts), self.device, seconds)

    return FixedTimeDevices(options)


def one_run(port: int, devices: int, seconds: float, trials: int, batch: int,
            session_reuse: int | None = None) -> dict[str, Any]:
    """Tune the matmul on ``devices`` simulated devices; its wall time and what it measured."""
    from tensortune.database import Database
    from tensortune.measure import MeasureOptions, Measurer
    from tensortune.task import Task
    from tensortune.tuners import get_tuner

    reuse = {} if session_reuse is None else {"rpc_session_reuse": session_reuse}
    options = MeasureOptions(repeat=3, rpc=f"127.0.0.1:{port}:{KEY}", rpc_workers=devices, run_timeout=60.0, **reuse)
    task = Task.from_op(*TASK)
    with tempfile.TemporaryDirectory() as tmp, Measurer(options) as m, Database(Path(tmp) / "s.db") as db:
        m.runner.close()
        m.runner = _runner(options, seconds)
        m.start()
        tuner = get_tuner("random", task, seed=devices, batch_size=batch)
        tuner.confirm_top = 0  # throughput of the search trials alone
        t0 = time.perf_counter()
        res = tuner.tune(trials, m, database=db)
        wall = time.perf_counter() - t0
        stored = db.count(task.workload_key)
    return {"devices": devices, "wall_s": wall, "measured": res.trials_measured, "stored": stored,
            "errors": dict(res.errors), "build_s": m.build_s, "run_s": m.run_s}


def summarise(rows: list[dict[str, Any]], seconds: float) -> list[dict[str, Any]]:
    """Per device count: median wall time, trials per minute, speed-up, its ratio to N, overhead."""
    by: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["devices"], []).append(r)
    base = statistics.median(r["measured"] / r["wall_s"] for r in by[min(by)])
    out = []
    for n in sorted(by):
        rate = statistics.median(r["measured"] / r["wall_s"] for r in by[n])
        per = statistics.median(r["wall_s"] / r["measured"] for r in by[n])
        out.append({"devices": n, "runs": len(by[n]), "trials_per_min": rate * 60, "speedup": rate / base,
                    "speedup_over_n": rate / base / (n / min(by)), "wall_per_trial_s": per,
                    "overhead_per_trial_s": per - seconds / n,
                    "errors": sum(sum(r["errors"].values()) for r in by[n])})
    return out


def report(summary: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"# Parallel RPC measurement against the number of devices ({meta['machine']['cpu_model']}, "
             f"{meta['machine']['llvm_cpu']}, {meta['machine']['cores']} cores)", "",
             f"{meta['trials']} random-search trials of matmul {TASK[1]} per run, batches of {meta['batch']}; "
             f"each device's timing takes {meta['device_s']} s (simulated; the session, upload and load are TVM's); "
             f"a session serves up to {meta.get('session_reuse', 1)} candidates; "
             f"{meta['rounds']} interleaved rounds, medians.", "",
             "| devices | trials/min | speed-up | speed-up / N | wall per trial | driver overhead per trial | errors |",
             "|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['devices']} | {s['trials_per_min']:.1f} | {s['speedup']:.2f}x | {s['speedup_over_n']:.2f} | "
                     f"{s['wall_per_trial_s'] * 1e3:.0f} ms | {s['overhead_per_trial_s'] * 1e3:.0f} ms | {s['errors']} |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench run --study rpc-scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", default="1,2,4,8", help="device counts, comma-separated (1,2,4,8)")
    p.add_argument("--device-s", type=float, default=1.0, help="seconds a simulated device takes per candidate (1.0)")
    p.add_argument("--trials", type=int, default=64, help="trials per run (64)")
    p.add_argument("--batch", type=int, default=32, help="the tuner's batch (32)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds over the device counts (2)")
    p.add_argument("--session-reuse", type=int, default=None,
                   help="candidates a runner times in one device session (default: MeasureOptions'; 1: a session each)")
    p.add_argument("--out", default=None, help="results folder (default bench/results/rpc-scaling-MCPU-DATE)")
    return p


def main(argv: list[str] | None = None) -> int:
    import cloudpickle

    from tensortune.target import machine_id

    a = parser().parse_args(argv)
    counts = [int(x) for x in a.devices.split(",") if x.strip()]
    if not counts or min(counts) < 1 or a.device_s <= 0 or a.trials < 1 or a.rounds < 1 or (a.session_reuse or 1) < 1:
        print("rpc-scaling: --devices takes counts >= 1, --device-s, --trials, --rounds and --session-reuse positive",
              file=sys.stderr)
        return 2
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the runner's workers cannot import bench
    machine = machine_id()
    out = Path(a.out or f"bench/results/rpc-scaling-{machine['llvm_cpu']}-{time.strftime('%Y-%m-%d')}")
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with loopback_devices(max(counts), KEY, threads=1) as (port, _):
        for r in range(a.rounds):
            order = counts if r % 2 == 0 else counts[::-1]
            for n in order:
                row = {"round": r + 1, **one_run(port, n, a.device_s, a.trials, a.batch, a.session_reuse)}
                rows.append(row)
                print(f"round {r + 1}: {n} device(s): {row['measured']} trials in {row['wall_s']:.1f} s", flush=True)
    from tensortune.measure import MeasureOptions

    reuse = a.session_reuse if a.session_reuse is not None else MeasureOptions().rpc_session_reuse
    meta = {"machine": machine, "date": time.strftime("%Y-%m-%d %H:%M"), "device_s": a.device_s, "trials": a.trials,
            "batch": a.batch, "rounds": a.rounds, "session_reuse": reuse}
    summary = summarise(rows, a.device_s)
    (out / "scaling.json").write_text(json.dumps({**meta, "runs": rows, "summary": summary}, indent=1) + "\n")
    write_text(out / "report.md", report(summary, meta))
    print(report(summary, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
