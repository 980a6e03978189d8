"""The race with and without suspension: ``python -m bench run --study race``.

    python -m bench run --study race [--models mobilenet_v2] [--tuners trimmer,autotvm,chameleon,chameleon:variant=ppo-greedy]
                         [--rounds 8] [--trials-per-round 64] [--out bench/results/race] [--stop-after MINUTES]

``tensortune race`` on the same models and tuners twice, each into databases of its own: once
suspending the worst tuner of each model after every round (Trimmer's §V-C: ``OUT/suspend/``),
once with every tuner run to completion (``--rounds`` rounds each: ``OUT/all/``).

The race to completion has no suspension and no shared budget, so each tuner's run in it is
independent of the others': it runs one tuner at a time (``tensortune race MODELS --tuners ONE
--no-suspend``), and its cost is the sum of theirs. That splits the longest step into parts
of about 40 minutes (at the defaults), so that it can be spread over sittings of one kind of
machine. Each part's output is kept as it finishes (``OUT/race-suspend.json``,
``OUT/race-all/TUNER.json``), so a stopped run goes on with the first part it had not finished
(that part from the start); ``--stop-after`` stops before a part, or the final benchmark, that would
not finish in time.
The folder's ``meta.json`` holds the machine and settings of the first start, and a later
start on another kind of machine, or with other settings, is refused (its CPU-seconds would not
compare).

Once both races are complete, every raced pair's database gets the in-model check that
``tensortune tune`` runs at its end, and its final model is checked against the reference
and timed in one interleaved benchmark per model, beside the untuned model, PyTorch and ONNX
Runtime (``OUT/final.json``, kept): the final latencies compared are these, not the races' own
last-round timings, which were taken hours apart.

Reported: the total CPU-seconds (and energy where the machine counts it) of each race, the
saving, each model's best final latency, every (model, tuner) pair's figures and the final
benchmark. The paper's Table VII: 40.9% less energy for MobileNet, 21.8% for AlexNet. Writes
``OUT/race.json`` and ``OUT/race.md`` once both races are complete.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from .common import machine_info, machine_line, write_text
from .modelruns import run_json
from .suite.deadline import Deadline

#: Minutes a part takes at 8 rounds of 64 per task on one model (mobilenet_v2, 2 cores), for
#: ``--stop-after`` before any part of that race is kept: the race with suspension, one tuner
#: of the race to completion. The race with suspension took 72 and 102 min on rocketlake
#: (2026-11-27: its first two rounds, four actors, take about 57 min).
PART_MINUTES = {"suspend": 105.0, "all": 50.0}
#: Minutes of the final benchmark per model (the in-model check of eight pairs and one
#: interleaved benchmark of ten systems; about 10 min for mobilenet_v2 on 2 cores).
FINAL_MINUTES = 15.0


def check_folder(out: Path, settings: dict[str, Any]) -> str | None:
    """Why ``out`` cannot take this race (None when it can): its ``meta.json`` (written here on
    the first start) names another kind of machine or other settings."""
    from tensortune.target import machine_id, same_machine

    here = machine_id()
    meta = out / "meta.json"
    if not meta.exists():
        write_text(meta, json.dumps({"machine": here, "settings": settings}, indent=1))
        return None
    try:
        kept = json.loads(meta.read_text())
        machine, before = kept["machine"], kept["settings"]
    except (ValueError, KeyError, TypeError):
        return f"{meta} is not a race folder's record; use another --out"
    if not same_machine(machine, here):
        return (f"{out} was started on {machine_line({'machine_id': machine})}, this is "
                f"{machine_line({'machine_id': here})}: its costs would not compare; use another --out")
    changed = sorted(k for k in settings if before.get(k) != settings[k])
    if changed:
        return f"{out} was started with other settings ({', '.join(f'{k}={before.get(k)!r}' for k in changed)}); use another --out"
    return None


def part_json(out: Path, tuner: str) -> Path:
    """The kept output of ``tuner``'s part of the race to completion (``OUT/race-all/TUNER.json``)."""
    from tensortune.utils.names import file_stem

    return out / "race-all" / f"{file_stem(tuner)}.json"


def parts(out: Path, models: list[str], tuners: list[str]) -> list[tuple[str, str, Path, list[Path]]]:
    """The race's parts, in order: (race, tuner or "", kept output, databases to drop before a
    fresh start). The race with suspension is one part; the race to completion, one per tuner."""
    from tensortune.cluster.race import pair_db

    rows = [("suspend", "", out / "race-suspend.json", [out / "suspend"])]
    for t in tuners:
        rows.append(("all", t, part_json(out, t), [pair_db(out / "all", m, t) for m in models]))
    return rows


def estimate_s(race: str, kept: list[dict[str, Any]], models: int, rounds: int, batch: int) -> float:
    """Seconds a part of ``race`` takes: the longest kept part of that race, else
    :data:`PART_MINUTES` scaled by the models and the measurements per task."""
    if kept:
        return max(k["wall_s"] for k in kept)
    return 60.0 * PART_MINUTES[race] * models * rounds * batch / (8 * 64)


def combine(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The race to completion from its parts: entries together, costs and wall times summed
    (energy only where every part counted it)."""
    energy = [o["energy_j"] for o in outputs]
    return {"entries": [e for o in outputs for e in o["entries"]], "wall_s": sum(o["wall_s"] for o in outputs),
            "cpu_s": sum(o["cpu_s"] for o in outputs),
            "energy_j": sum(energy) if energy and all(x is not None for x in energy) else None,
            "suspend": False, "batch": outputs[0]["batch"] if outputs else None, "parts": len(outputs)}


def system_name(mode: str, tuner: str) -> str:
    """A raced (race, tuner) pair's row in the final benchmark."""
    return f"{mode} {tuner}"


def race_system(out: Path, model: str, tuner: str) -> tuple[dict[str, Any], Path, dict[str, Any], str]:
    """A tuner's run to completion in a finished race folder, in the shape of
    :func:`bench.modelruns.suite_system`: its cost (``{"wall_s", "cost": {"wall_s", "cpu_s"},
    "filtered"}``, the model's rounds summed; ``filtered`` None where the race did not record
    it), its database, its latencies from the final benchmark (``tuned_ms`` the pair's final
    model, after the in-model check; outputs checked against the reference) and its budget in
    words. Every tuner of the race to completion had the same budget: ``rounds`` rounds of
    ``batch`` measurements per task, in survey rounds."""
    from tensortune.cluster.race import pair_db

    part, final = part_json(out, tuner), out / "final.json"
    if not part.exists() or not final.exists():
        raise SystemExit(f"{out}: no finished race with {tuner} to completion there (no {part.name} or final.json "
                         f"yet); the race's own command goes on: python -m bench run --study race --out {out}")
    entry = next((e for e in json.loads(part.read_text())["entries"] if e["model"] == model), None)
    rows = json.loads(final.read_text()).get(model, {})
    db = pair_db(out / "all", model, tuner)
    if entry is None or not db.exists():
        raise SystemExit(f"{out}: the race to completion has no {model} with {tuner}")
    settings = json.loads((out / "meta.json").read_text())["settings"]
    wall = sum(r["wall_s"] for r in entry["rounds"])
    run = {"wall_s": wall, "cost": {"wall_s": wall, "cpu_s": entry["cpu_s"]}, "filtered": entry.get("filtered")}

    tuned, untuned = rows.get(system_name("all", tuner)) or {}, rows.get("tensortune untuned") or {}
    lat = {"tuned_ms": tuned.get("ms") if tuned.get("ok") else None, "tuned_ok": bool(tuned.get("ok")),
           "untuned_ms": untuned.get("ms") if untuned.get("ok") else None}
    return run, db, lat, f"{settings['rounds']} survey rounds of {settings['batch']} measurements per task"


def final_benchmark(runs: dict[str, dict[str, Any]], models: list[str], out: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Every raced pair's final model, checked against the reference and timed in one interleaved
    benchmark per model beside the untuned model, PyTorch and ONNX Runtime:
    ``{model: {system: {"ms", "ok", "check"}}}``, a pair's row with its ``in_model`` check. These
    are the final latencies the report compares. A race's own last-round timings were taken
    minutes to hours apart, and on 2 cores one and the same mobilenet_v2 was timed 2.90-3.23 ms
    by one actor over five such rounds (rocketlake, 2026-11-27): they do not compare across tuners.

    Each pair's database first gets the in-model check (:func:`tensortune.models.in_model.check_in_model`),
    as ``tensortune tune`` runs it at its end, so each final model is the one a user of that tuner
    gets: a round compiles every task's best measured alone, and those lose inside the model
    often enough to matter (in the race with suspension on rocketlake, 2026-11-27, six of
    autotvm's seven later rounds left mobilenet_v2 slower, by 0.2-2.8% each, timed in pairs). The
    check's records join the pair's database as a confirmation group; its own figures (tuned,
    untuned, confirmed) are kept in the row. A check that fails is reported in the row
    (``{"skipped": "failed: ..."}``) and the pair's model is benchmarked with its bests measured
    alone, as ``tune`` does."""
    from contextlib import ExitStack

    from tensortune.cluster.race import pair_db
    from tensortune.database import Database
    from tensortune.models.comparison import bench_model
    from tensortune.models.compile import compile_model
    from tensortune.models.in_model import check_in_model
    from tensortune.models.importer import _first_line, load_model

    result: dict[str, dict[str, dict[str, Any]]] = {}
    for m in models:
        model = load_model(m)
        pairs = {system_name(mode, e["tuner"]): path for mode, r in runs.items() for e in r["entries"]
                 if e["model"] == m and (path := pair_db(out / mode, m, e["tuner"])).exists()}  # wherever it ran
        checks = {}
        for name, path in pairs.items():
            try:
                with Database(path) as db:
                    report = check_in_model(model, db)
            except Exception as exc:  # noqa: BLE001 - a failed check is a result; the bests alone stand
                why = _first_line(exc)
                print(f"{name}: the in-model check failed ({why}); benchmarked with its bests measured alone", flush=True)
                checks[name] = {"skipped": f"failed: {why}"}
                continue
            print(f"{name}: {report.summary()}", flush=True)
            checks[name] = {k: v for k, v in report.to_json().items() if k != "tasks"}
        with ExitStack() as stack:
            extra = {name: compile_model(model, stack.enter_context(Database(path, readonly=True)))
                     for name, path in pairs.items()}
            bench = bench_model(model, None, extra=extra)
        result[m] = {r.name: {"ms": r.latency.median_ms if r.latency is not None else None, "ok": r.ok,
                              "check": r.check, **({"in_model": checks[r.name]} if r.name in checks else {})}
                     for r in bench.rows if r.name != "tensortune tuned"}  # without a database: the untuned model again
    return result


def report(runs: dict[str, dict[str, Any]], models: list[str], tuners: str, rounds: int, batch: int,
           final: dict[str, dict[str, dict[str, Any]]] | None = None) -> tuple[dict, str]:
    """``race.json``'s content and ``race.md``'s text for both races; with ``final``
    (:func:`final_benchmark`) the final latencies are its, else each pair's last-round timing."""
    def final_ms(mode: str, e: dict[str, Any]) -> float | None:
        if final is None:
            return e["final_latency_ms"]
        row = final.get(e["model"], {}).get(system_name(mode, e["tuner"]))
        return row["ms"] if row and row["ok"] else None

    best = {mode: {m: min((ms for e in r["entries"] if e["model"] == m and (ms := final_ms(mode, e))),
                          default=None) for m in models} for mode, r in runs.items()}
    saving = 1 - runs["suspend"]["cpu_s"] / runs["all"]["cpu_s"] if runs["all"]["cpu_s"] else None
    result = {"machine": machine_info(), "runs": runs, "best_ms": best, "cpu_saving": saving, "final": final}
    lines = ["# Tuners raced with and without suspension", "",
             f"{machine_line()}; tuners {tuners}; {rounds} rounds of {batch} "
             "measurements per task to completion. The race to completion ran one tuner at a time "
             f"({runs['all'].get('parts', 1)} parts); its wall time is their sum.", "",
             "| race | CPU-s | energy J | wall s | " + " | ".join(f"best {m} ms" for m in models) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(models)]
    for mode, r in runs.items():
        energy = f"{r['energy_j']:.0f}" if r["energy_j"] is not None else "not available"
        lines.append(f"| {mode} | {r['cpu_s']:.0f} | {energy} | {r['wall_s']:.0f} | "
                     + " | ".join(f"{best[mode][m]:.3f}" if best[mode][m] else "-" for m in models) + " |")
    if saving is not None:
        lines += ["", f"CPU-seconds saved by suspension: {saving:.1%}"]
    lines += ["", "Final latency: " + ("each pair's final model, its outputs checked against the reference, "
              "timed in one interleaved benchmark per model after both races (below)." if final is not None else
              "each pair's last-round timing (no final benchmark: these were timed apart and compare loosely)."),
              "", "| race | model | tuner | status | rounds | trials | final ms | CPU-s |",
              "|---|---|---|---|---:|---:|---:|---:|"]
    for mode, r in runs.items():
        for e in r["entries"]:
            ms = final_ms(mode, e)
            lat = f"{ms:.3f}" if ms else "-"
            lines.append(f"| {mode} | {Path(e['model']).stem} | {e['tuner']} | {e['status']} | {len(e['rounds'])} | "
                         f"{e['trials']} | {lat} | {e['cpu_s']:.0f} |")
    for m, rows in (final or {}).items():
        base = rows.get("tensortune untuned", {}).get("ms")
        lines += ["", f"Final benchmark of {Path(m).stem} (interleaved rounds; speed-up: the untuned model's latency / the row's):",
                  "", "| system | outputs | ms | speed-up |", "|---|---|---:|---:|"]
        for name, row in rows.items():
            ms = f"{row['ms']:.3f}" if row["ms"] else "-"
            up = f"{base / row['ms']:.2f}x" if base and row["ms"] else "-"
            lines.append(f"| {name} | {'match' if row['ok'] else row['check']} | {ms} | {up} |")
        checks = {name: row["in_model"] for name, row in rows.items() if row.get("in_model")}
        if checks:
            lines += ["", "The in-model check each pair's database had before that benchmark (its own interleaved "
                      "timing: the model with every task's best measured alone, untuned, and with the configs "
                      "confirmed inside the model, which the benchmark above compiled):", "",
                      "| system | best alone ms | untuned ms | confirmed ms | tasks switched | kept | s |",
                      "|---|---:|---:|---:|---:|---|---:|"]
            for name, c in checks.items():
                if c.get("skipped"):
                    lines.append(f"| {name} | {c['skipped']} | | | | | |")
                    continue
                lat = c.get("latency_ms", {})
                cells = " | ".join(f"{lat[k]:.3f}" if lat.get(k) else "-" for k in ("tuned", "untuned", "confirmed"))
                lines.append(f"| {name} | {cells} | {c.get('changed', 0)} | {c.get('kept', '-')} | {c.get('wall_s', 0):.0f} |")
    return result, "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study race", description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mobilenet_v2")
    p.add_argument("--tuners", default="trimmer,autotvm,chameleon,chameleon:variant=ppo-greedy")
    p.add_argument("--rounds", type=int, default=8, help="rounds of a tuner run to completion")
    p.add_argument("--trials-per-round", dest="batch", type=int, default=64,
                   help="measurements per task and round (Trimmer's 64)")
    p.add_argument("--out", default="bench/results/race")
    p.add_argument("--stop-after", type=float, metavar="MINUTES",
                   help="stop before a part (or the final benchmark) that would not finish within MINUTES; "
                        "the same command goes on")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.stop_after is not None and a.stop_after <= 0:
        raise SystemExit("--stop-after must be positive")
    from tensortune.cluster.race import pair_db

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    models = a.models.split(",")
    tuners = [t.strip() for t in a.tuners.split(",") if t.strip()]
    refusal = check_folder(out, {"models": models, "tuners": a.tuners, "rounds": a.rounds, "batch": a.batch})
    if refusal:
        print(f"python -m bench run --study race: {refusal}", file=sys.stderr)
        return 2
    deadline = Deadline(a.stop_after)
    t0 = time.perf_counter()
    done: dict[str, list[dict[str, Any]]] = {"suspend": [], "all": []}
    for race, tuner, keep, fresh in parts(out, models, tuners):
        dbs = [pair_db(out / race, m, t) for m in models for t in ([tuner] if tuner else tuners)]
        gone = [str(db) for db in dbs if not db.exists()]
        if keep.exists() and gone:  # the final benchmark compiles every pair's database
            keep.rename(keep.with_name(keep.name + ".lost"))
            print(f"{keep}: its databases are gone ({', '.join(gone)}); the part runs again", flush=True)
        if not keep.exists():
            step = f"the race {'with suspension' if race == 'suspend' else f'to completion: {tuner}'}"
            if not deadline.allows(step, estimate_s(race, done[race], len(models), a.rounds, a.batch)):
                print(f"stopped after {(time.perf_counter() - t0) / 60:.1f} min; parts so far in {out}; "
                      "the same command goes on", flush=True)
                return 0
        args = ["race", *models, "--tuners", tuner or a.tuners, "--rounds", str(a.rounds), "--trials-per-round", str(a.batch),
                "--db-dir", str(out / race)] + (["--no-suspend"] if race == "all" else [])
        done[race].append(run_json(args, keep, fresh=fresh))
    runs = {"suspend": done["suspend"][0], "all": combine(done["all"])}
    kept_final = out / "final.json"
    if kept_final.exists():
        final = json.loads(kept_final.read_text())
    else:
        if not deadline.allows("the final benchmark", 60.0 * FINAL_MINUTES * len(models)):
            print(f"stopped after {(time.perf_counter() - t0) / 60:.1f} min; both races are kept in {out}; "
                  "the same command goes on with the final benchmark", flush=True)
            return 0
        print("final benchmark: every raced pair's model, checked and timed together", flush=True)
        final = final_benchmark(runs, models, out)
        write_text(kept_final, json.dumps(final, indent=1))
    result, text = report(runs, models, a.tuners, a.rounds, a.batch, final)
    write_text(out / "race.json", json.dumps(result, indent=1))
    write_text(out / "race.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
