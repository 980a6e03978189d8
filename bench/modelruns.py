"""Whole-model runs the Trimmer benchmarks share: a ``tensortune`` command whose ``--json`` output
is kept (and read back instead of running again), a model's tuned and untuned latency, and a
system of a whole-model suite folder read back instead of tuned again."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from .common import remove_database, write_text


def run_json(cmd: list[str], keep: Path, fresh: Sequence[Path] = ()) -> dict[str, Any]:
    """``tensortune CMD --json``; its output is kept in ``keep`` and read back when it exists.

    ``fresh``: the run's databases (files, with their ``-wal``/``-shm``) and database folders.
    Without a kept output they are from an interrupted attempt and are removed first, so a
    budget is spent once, from the start (a tuning run would otherwise go on from them with
    its whole budget again)."""
    if keep.exists():
        return json.loads(keep.read_text())
    for path in fresh:
        remove_database(path)
    keep.parent.mkdir(parents=True, exist_ok=True)  # before the run: its output is written only at its end
    full = [sys.executable, "-m", "tensortune.cli", *cmd, "--json"]
    print("$", " ".join(full), flush=True)
    proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tail: deque[str] = deque(maxlen=1)
    echo = threading.Thread(target=_echo, args=(proc.stderr, tail), daemon=True)
    echo.start()
    stdout = proc.stdout.read() if proc.stdout else ""
    proc.wait()
    echo.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: failed: {list(tail)}")
    data = json.loads(stdout.strip().splitlines()[-1])
    write_text(keep, json.dumps(data, indent=1))
    return data


def _echo(stream: IO[str] | None, tail: deque[str]) -> None:
    """Pass a run's stderr (its per-round lines, its warnings) through as it comes, so an
    hour-long run shows where it is and leaves its rounds in the caller's log even if its
    output is lost; its last line is kept for the error message."""
    for line in stream or ():
        sys.stderr.write(line)
        sys.stderr.flush()
        if line.strip():
            tail.append(line.strip())


def latency(model: str, db_path: Path) -> dict[str, Any]:
    """Tuned and untuned latency of ``model`` with ``db_path``'s bests (outputs checked)."""
    ms = paired_latency(model, {"tuned": db_path})
    return {"tuned_ms": ms["tuned"], "tuned_ok": ms["tuned"] is not None, "untuned_ms": ms["untuned"]}


def paired_latency(model: str, dbs: dict[str, Path], rounds: int | None = None) -> dict[str, float | None]:
    """Median ms of ``model`` compiled with each database's bests, and untuned (``"untuned"``), all
    in one interleaved benchmark (outputs checked; None where they did not match): timings from
    two benchmarks minutes apart differ by several percent on a 2-core host, more than the 2% a
    comparison like survey against sequential asks about. ``rounds``: the benchmark's interleaved
    rounds (default ``bench_model``'s)."""
    from contextlib import ExitStack

    from tensortune.database import Database
    from tensortune.models.comparison import BENCH_ROUNDS, bench_model
    from tensortune.models.compile import compile_model
    from tensortune.models.importer import load_model

    m = load_model(model)
    names = list(dbs)
    with ExitStack() as stack:
        opened = {n: stack.enter_context(Database(p, readonly=True)) for n, p in dbs.items()}
        extra = {f"tensortune {n}": compile_model(m, opened[n]) for n in names[1:]}
        report = bench_model(m, opened[names[0]], with_ort=False, extra=extra, rounds=rounds or BENCH_ROUNDS)
    rows = {r.name: r for r in report.rows}

    def ms(name: str) -> float | None:
        r = rows[name]
        return r.latency.median_ms if r.ok and r.latency else None

    return {"untuned": ms("tensortune untuned"), names[0]: ms("tensortune tuned"),
            **{n: ms(f"tensortune {n}") for n in names[1:]}}


def suite_system(results: Path, model: str, tuner: str) -> tuple[dict[str, Any], Path, dict[str, Any], float]:
    """A (model, tuner) system of a whole-model suite folder: its ``tune --json`` output (kept
    beside its database; a system tuned before it was kept has only its wall time and, where
    recorded, CPU-seconds), its database, its latencies from the model's interleaved benchmark
    (outputs checked against the reference) and its tuning budget."""
    from .suite.wholemodel import _db_path, tune_json_path

    models = json.loads((results / "models.json").read_text()) if (results / "models.json").exists() else {}
    entry = models.get(model, {})
    system = entry.get("systems", {}).get(tuner, {})
    db = _db_path(results / "models", model, tuner)
    if not system.get("ok") or "bench" not in entry or not db.exists():
        raise SystemExit(f"{results}: no benchmarked {tuner} system of {model} there; add it with `python -m bench "
                         f"run --suite models --models {model} --model-tuners {tuner} --out {results}` "
                         f"(with the folder's budget)")
    keep = tune_json_path(db)
    run = json.loads(keep.read_text()) if keep.exists() else {
        "wall_s": system["tune_wall_s"], "tasks": [],
        "cost": {"wall_s": system["tune_wall_s"], **({"cpu_s": system["cpu_s"]} if "cpu_s" in system else {})}}
    rows = {r["name"]: r for r in entry["bench"]["rows"]}

    def median(name: str) -> float | None:
        r = rows.get(name)
        return r["latency"]["median_ms"] if r and r.get("latency") and r.get("outputs_match") else None

    lat = {"tuned_ms": median(f"tensortune {tuner}"), "tuned_ok": bool(rows.get(f"tensortune {tuner}", {}).get(
        "outputs_match")), "untuned_ms": median("tensortune untuned")}
    return run, db, lat, float(entry["budget_s"])
