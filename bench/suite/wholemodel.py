"""Whole models: tuned latency against tuning wall time, per tuner and for MetaSchedule.

Each tensortune tuner tunes the model in its own ``tensortune tune MODEL --time-budget S``
process (what a user runs; cold timing, the model's default), with its own database, so no
tuner sees another's trials. MetaSchedule gets the same wall time: ``tune_relax`` on the fused
module (its defaults; a measure callback terminates its tasks once the time is spent), then
``compile_relax`` on the module before fusion. Then one ``bench_model`` call checks every
system's outputs against the reference (PyTorch, or ONNX Runtime for ONNX files) on the same
inputs and times all of them (each tuner's model, untuned tensortune, MetaSchedule, PyTorch
eager, ONNX Runtime) in interleaved rounds at one thread count.

MetaSchedule's gradient task scheduler gives every task one search iteration (``--ms-batch``
candidates, 64 by default) in a first round-robin pass before it looks at which tasks are
terminated, so its wall time is at least that pass, whatever the budget (its C++
``GradientBasedNode::NextTaskId``); the report shows the wall time it actually took.

Progress is saved per system in ``models.json``: an interrupted run tunes only the systems not
done yet (a half-tuned tensortune or MetaSchedule database is discarded, so every system gets its
budget once; a finished MetaSchedule's database is read back from its folder and compiled).
Each system's entry and each model's (for its benchmark) carry ``"run"``, the invocation that
measured them. The databases stay in the results folder (committed with it: a later session on
the same kind of machine benchmarks from them); when a model is to be benchmarked again, a system
whose database is missing is dropped (and tuned again if the invocation lists it).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..common import remove_database, write_text
from . import metaschedule as msa
from .config import METASCHEDULE
from .deadline import Deadline
from .specs import parse, slug
from .store import RunDir

#: Upper bound of MetaSchedule's trials when it is stopped by time (it needs a trial count).
MS_MAX_TRIALS = 100_000
#: Seconds a model's final benchmark (compiling every system's model, interleaved rounds) may take.
BENCH_ESTIMATE_S = 1200.0
#: Seconds one system's in-model check (``tensortune check``: three compiles, timed rounds) may take.
CONFIRM_ESTIMATE_S = 600.0


def _tensortune_exe() -> str:
    exe = Path(sys.executable).with_name("tensortune")
    return str(exe) if exe.exists() else "tensortune"


def tune_tensortune(model: str, tuner: str, budget_s: float, seed: int, db: Path, log: Path) -> dict[str, Any]:
    """``tensortune tune MODEL --tuner T [--option K=V ...] --time-budget S --json`` in its own
    process; ``tuner`` is a suite spec (``fasor:mode=quality``). Its whole ``--json`` output is
    kept beside the database (``DB.tune.json``: per task trials, search reports, cost)."""
    remove_database(db)  # a half-done earlier attempt: start again so the budget is spent once
    tune_json_path(db).unlink(missing_ok=True)
    name, options = parse(tuner)
    cmd = [_tensortune_exe(), "tune", model, "--tuner", name, "--time-budget", str(budget_s), "--db", str(db),
           "--seed", str(seed), "--json"]
    for k, v in options.items():
        cmd += ["--option", f"{k}={v}"]
    t0 = time.perf_counter()
    with open(log, "a") as err:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"ok": False, "wall_s": wall, "note": f"tensortune tune exited {proc.returncode} (see {log.name})"}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    write_text(tune_json_path(db), json.dumps(out, indent=1))
    cost = out.get("cost", {})
    split = {k: cost[k] for k in ("build_s", "run_s", "search_s", "cpu_s") if k in cost}
    if "check_s" in cost:  # the in-model check's time (models.json keeps it as confirm_s, as before)
        split["confirm_s"] = cost["check_s"]
    conf = out.get("in_model_check") or {}
    checked = {"confirm": _confirm_summary(conf)} if "changed" in conf else {}
    return {"ok": True, "wall_s": wall, "tune_wall_s": out["wall_s"], "trials": sum(t["trials"] for t in out["tasks"]),
            "tasks": len(out["tasks"]), "tasks_measured": out["tasks_measured"], "measure": out.get("measure", ""),
            "db": db.name, **split, **checked}


def _confirm_summary(out: dict[str, Any]) -> dict[str, Any]:
    """What ``models.json`` keeps of an in-model check's ``--json`` output (``paired_ratio``, the
    verdict's median of confirmed / faster variant over paired rounds, where the check gave one)."""
    paired = {"paired_ratio": out["paired_ratio"]} if out.get("paired_ratio") is not None else {}
    return {"changed": out["changed"], "tasks": len(out["tasks"]), "latency_ms": out["latency_ms"], "kept": out["kept"],
            **paired}


def confirm_system(run: RunDir, out_dir: Path, model: str, source: str, tuner: str, v: dict[str, Any]) -> bool:
    """The in-model check (``tensortune check``, which ``tune`` runs at its end) on one system
    tuned before it existed, so that every system of a model is compared alike. Its ``--json``
    output is kept beside the database (``DB.confirm.json``); its time is added to the system's
    ``tune_wall_s`` (the time before it is kept in ``tune_wall_s_before_confirm``). Returns
    whether it ran (``v`` is updated; the caller saves it)."""
    db = _db_path(out_dir, model, tuner)
    print(f"{model}: tensortune check on {tuner}'s database", flush=True)
    cmd = [_tensortune_exe(), "check", source, "--db", str(db), "--json"]
    with open(out_dir / f"{model}.log", "a") as err:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    if proc.returncode != 0:
        print(f"{model}: {tuner}: tensortune check exited {proc.returncode} (see {model}.log)", flush=True)
        return False
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    write_text(db.with_name(db.name + ".confirm.json"), json.dumps(out, indent=1))
    v["tune_wall_s_before_confirm"] = v["tune_wall_s"]
    v["tune_wall_s"] = v["tune_wall_s"] + out["wall_s"]
    v["confirm_s"] = out["wall_s"]
    v["confirm"] = {**_confirm_summary(out), "run": run.invocation}
    print(f"{model}: {tuner}: {out['changed']} of {len(out['tasks'])} tasks switched; "
          + ", ".join(f"{k} {x:.2f} ms" for k, x in out["latency_ms"].items()) + f" ({out['wall_s']:.0f} s)",
          flush=True)
    return True


def tune_json_path(db: Path) -> Path:
    """Where a system's ``tensortune tune --json`` output is kept: beside its database."""
    return db.with_suffix(".tune.json")


def tune_metaschedule(model: Any, budget_s: float, seed: int, options: Any, work_dir: Path,
                      batch: int = msa.MS_BATCH) -> tuple[dict[str, Any], Any]:
    """MetaSchedule on the whole model for ``budget_s`` seconds; returns (summary, executable).

    MetaSchedule tunes the model as TVM's own flow fuses it (NCHW, TVM's legalization; not
    tensortune's layout plan), which is what a user of MetaSchedule gets."""
    from tensortune.target import host_target_json, make_target

    tj = host_target_json()
    target = make_target(tj)
    fused = msa.fuse_for_metaschedule(model.mod, target)
    stats = {"trials": 0, "errors": 0, "batches": 0}
    valid: dict[int, int] = {}  # task id -> candidates that built, ran and were timed

    def on_batch(task_id: int, costs: list[float], errors: int) -> None:
        stats["trials"] += len(costs) + errors
        stats["errors"] += errors
        stats["batches"] += 1
        valid[task_id] = valid.get(task_id, 0) + len(costs)

    t0 = time.perf_counter()
    session = msa.MSSession(options, on_batch, deadline=t0 + budget_s)
    db = msa.tune_relax_db(fused, target, MS_MAX_TRIALS, seed, session, str(work_dir), batch)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    ex = msa.compile_model(db, model.mod, target)
    n_tasks, n_applied = msa.tasks_applied(db, fused, target)
    return ({"ok": True, "tune_wall_s": wall, "wall_s": wall, "compile_s": time.perf_counter() - t1,
             "build_s": session.clock.build_s, "run_s": session.clock.run_s, "candidates_per_round": batch, **stats,
             "tasks_measured": len(valid), "tasks": n_tasks, "tasks_applied": n_applied,
             "tasks_without_valid": sorted(t for t, n in valid.items() if n == 0),
             "measure": "MetaSchedule LocalRunner, " + ("cold" if options.flush_cache else "hot")}, ex)


def system_estimate_s(saved: dict[str, Any], tuner: str, budget_s: float) -> float:
    """Seconds one system may take on the next model, for ``--stop-after``: its budget (1.02x and
    2 minutes: earlier runs went 13-37 s over; MetaSchedule's first pass and compilation: 1.15x
    and 10 minutes, for a first pass that went up to 670 s over), or 3x the longest wall time the
    same tuner took on an earlier model of ``saved`` (``models.json``) where that is less (a tuner
    that ends before its budget, like ``oneshot``)."""
    if tuner == METASCHEDULE:
        return 1.15 * budget_s + 600.0
    cap = 1.02 * budget_s + 120.0
    before = [e["systems"][tuner]["wall_s"] for e in saved.values() if e.get("systems", {}).get(tuner, {}).get("ok")]
    return min(cap, 3.0 * max(before)) if before else cap


def _db_path(out_dir: Path, key: str, tuner: str) -> Path:
    """The database of one tensortune system (``resnet18-fasor_mode_quality.db``)."""
    return out_dir / f"{key}-{slug(tuner)}.db"


def _stored(out_dir: Path, key: str, tuner: str) -> Path:
    """What a tuned system leaves for its model's benchmark: its database, or MetaSchedule's folder."""
    return out_dir / f"{key}-metaschedule" if tuner == METASCHEDULE else _db_path(out_dir, key, tuner)


def _metaschedule_last(tuners: Any) -> list[str]:
    """Systems in the order they are tuned and compiled: tensortune's first, MetaSchedule last."""
    return sorted(tuners, key=lambda t: t == METASCHEDULE)


def run_models(run: RunDir, models: list[str], tuners: list[str], budget_s: float, seed: int, rounds: int,
               progress: bool = True, ms_batch: int = msa.MS_BATCH,
               on_step: Callable[[], None] = lambda: None, deadline: Deadline | None = None,
               confirm_tuned: bool = False) -> None:
    """The whole-model suite (resumes per system); ``on_step`` is called after each stored result.
    With ``confirm_tuned``, systems tuned before ``tune`` ran the in-model check get it
    (:func:`confirm_system`) and their model is benchmarked again.

    A model's systems are the tuners any invocation tuned on it: one that lists a tuner the
    model lacks tunes it and benchmarks the model again with every system it has.

    With a ``deadline`` a system starts only when ``system_estimate_s`` is left, and a model's
    benchmark when ``BENCH_ESTIMATE_S`` is."""
    from tensortune.database import Database
    from tensortune.measure import MeasureOptions
    from tensortune.models.comparison import bench_model
    from tensortune.models.compile import CompiledModel, compile_model
    from tensortune.models.importer import load_model
    from tensortune.target import host_target_json, make_target

    out_dir = run.path / "models"
    out_dir.mkdir(exist_ok=True)
    saved = run.read_json("models", {}) or {}
    deadline = deadline or Deadline(None)
    from ..raw import restore_path
    from .netdefs import resolve

    for name in models:
        name = resolve(name, out_dir)  # bench:NAME -> its ONNX file, exported once
        key = Path(name).stem if name.endswith(".onnx") else name
        entry = saved.setdefault(key, {"systems": {}})
        def pending() -> list[str]:
            return _metaschedule_last(t for t in tuners if not entry["systems"].get(t, {}).get("ok"))

        for tuner, v in entry["systems"].items():
            if v.get("ok") and not _stored(out_dir, key, tuner).exists():
                restore_path(_stored(out_dir, key, tuner))  # a raw file kept in git's history (bench/raw.py)
        todo = pending()
        unchecked = [t for t, v in entry["systems"].items() if confirm_tuned and t != METASCHEDULE and v.get("ok")
                     and "confirm_s" not in v and _stored(out_dir, key, t).exists()]
        if "bench" in entry and not todo and not unchecked:
            print(f"{key}: done already, skipped", flush=True)
            continue
        for tuner in [t for t, v in entry["systems"].items() if v.get("ok") and not _stored(out_dir, key, t).exists()]:
            # the model is benchmarked again, and this system's tuned model cannot be compiled
            print(f"{key}: {tuner} was tuned, but {_stored(out_dir, key, tuner).name} is not in {out_dir}: "
                  f"dropped{' and tuned again' if tuner in tuners else ''}", flush=True)
            _drop(entry, out_dir, key, tuner, f"{_stored(out_dir, key, tuner).name} was missing from the results "
                                              "folder when the model was to be benchmarked again")
        for tuner in unchecked:
            if not deadline.allows(f"{key} {tuner}'s in-model check", CONFIRM_ESTIMATE_S):
                return
            if confirm_system(run, out_dir, key, name, tuner, entry["systems"][tuner]):
                if "bench" in entry:  # kept: it shows each system before its check
                    entry.setdefault("benches_before_confirm", []).append(entry.pop("bench"))
                run.write_json("models", saved)
                on_step()
        todo = pending()
        entry.update(budget_s=budget_s, seed=seed, source=name)
        model = load_model(name)
        ms_ex = None
        ms_dir = out_dir / f"{key}-metaschedule"
        for tuner in todo:  # MetaSchedule last
            if not deadline.allows(f"{key} {tuner}", system_estimate_s(saved, tuner, budget_s)):
                return
            if tuner == METASCHEDULE:
                print(f"{key}: MetaSchedule tune_relax for {budget_s:.0f} s", flush=True)
                try:
                    entry["systems"][tuner], ms_ex = tune_metaschedule(model, budget_s, seed, MeasureOptions(), ms_dir,
                                                                       ms_batch)
                except Exception as e:  # noqa: BLE001 - a failed peer is a recorded result
                    msg = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
                    entry["systems"][tuner] = {"ok": False, "note": f"MetaSchedule failed: {msg}"}
            else:
                print(f"{key}: tensortune {tuner} for {budget_s:.0f} s", flush=True)
                entry["systems"][tuner] = tune_tensortune(name, tuner, budget_s, seed, _db_path(out_dir, key, tuner),
                                                          out_dir / f"{key}.log")
            entry["systems"][tuner] = run.stamp(entry["systems"][tuner])
            print(f"{key}: {tuner}: {entry['systems'][tuner]}", flush=True)
            run.write_json("models", saved)
            on_step()
        if not deadline.allows(f"{key}'s benchmark", BENCH_ESTIMATE_S):
            return
        # every system of the model, this invocation's and earlier ones': tensortune's first
        tj = host_target_json()
        compiled = {}
        done = [t for t, v in entry["systems"].items() if v.get("ok")]
        for tuner in _metaschedule_last(done):
            if tuner != METASCHEDULE:
                with Database(str(_db_path(out_dir, key, tuner)), readonly=True) as db:
                    compiled[f"tensortune {tuner}"] = compile_model(model, db, tj)
                continue
            if ms_ex is None:
                ms_db = msa.load_relax_db(str(ms_dir))
                if ms_db is None:
                    print(f"{key}: MetaSchedule's database is not in {ms_dir.name}; its model is left out", flush=True)
                    continue
                print(f"{key}: MetaSchedule tuned before; its database in {ms_dir.name} is compiled", flush=True)
                ms_ex = msa.compile_model(ms_db, model.mod, make_target(tj))
            compiled[METASCHEDULE] = CompiledModel(model, ms_ex, [], tj)
        first = next(iter(compiled), None)
        tuned = compiled.pop(first) if first and first.startswith("tensortune") else None
        report = bench_model(model, None, rounds=rounds, tuned=tuned, extra=compiled)
        print(report.table(), flush=True)
        bench = report.to_json()
        if tuned is None:  # no tensortune tuner ran: bench_model's "tuned" row is the untuned model again
            bench["rows"] = [r for r in bench["rows"] if r["name"] != "tensortune tuned"]
        for r in bench["rows"]:  # the first tuner's model is bench_model's "tensortune tuned"
            if r["name"] == "tensortune tuned":
                r["name"] = first
        entry["bench"] = bench
        entry["run"] = run.invocation  # the invocation that timed every system (see provenance.py)
        run.write_json("models", saved)
        on_step()


def drop_system(run: RunDir, model: str, tuner: str, why: str) -> dict[str, Any]:
    """Discard one whole-model system of a results folder so that the next run tunes it again
    (after a fix in that tuner): its database (or MetaSchedule's folder) and kept ``tune --json``
    go, and the model is to be benchmarked again. Its summary, and the model's benchmark that
    timed it, are kept in the model's ``dropped`` list with ``why`` and the date. Returns the
    dropped summary."""
    saved = run.read_json("models", {}) or {}
    entry = saved.get(model)
    if entry is None or tuner not in entry.get("systems", {}):
        have = ", ".join(f"{m}:{t}" for m, e in saved.items() for t in e.get("systems", {})) or "none"
        raise SystemExit(f"{run.path}: no system {model}:{tuner} to drop (systems: {have})")
    old = _drop(entry, run.path / "models", model, tuner, why)
    run.write_json("models", saved)
    return old


def _drop(entry: dict[str, Any], out_dir: Path, model: str, tuner: str, why: str) -> dict[str, Any]:
    """``drop_system`` on one model's entry of ``models.json`` (the caller writes it)."""
    stored = _stored(out_dir, model, tuner)
    remove_database(stored)
    if tuner != METASCHEDULE:
        tune_json_path(stored).unlink(missing_ok=True)
    old = entry["systems"].pop(tuner)
    dropped = {"tuner": tuner, "why": why, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "result": old}
    if "bench" in entry:  # the benchmark that timed it is kept with it: the other rows were measured too
        dropped["bench"] = entry.pop("bench")
    entry.setdefault("dropped", []).append(dropped)
    return old

