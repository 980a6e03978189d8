"""The race with and without suspension: ``python -m bench.race``.

    python -m bench.race [--models mobilenet_v2] [--tuners trimmer,autotvm,chameleon,chameleon:variant=ppo-greedy]
                         [--rounds 8] [--batch 64] [--out bench/results/race]

``tensortune race`` twice on the same models and tuners, each into databases of its own: once
suspending the worst tuner of each model after every round (Trimmer's §V-C), once with
``--no-suspend`` (every tuner to completion: ``--rounds`` rounds each). Each race's output is
kept (``OUT/race-MODE.json``), so a stopped run goes on with the race it had not finished; the
folder's ``meta.json`` holds the machine and settings of the first start, and a later start on
another kind of machine, or with other settings, is refused (its CPU-seconds would not compare).
Reported: the total CPU-seconds (and
energy where the machine counts it) of each, the saving, and each model's best final latency.
The paper's Table VII: 40.9% less energy for MobileNet, 21.8% for AlexNet. Writes
``OUT/race.json`` and ``OUT/race.md``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .common import machine_info, machine_line, write_text
from .modelruns import run_json


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.race", description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mobilenet_v2")
    p.add_argument("--tuners", default="trimmer,autotvm,chameleon,chameleon:variant=ppo-greedy")
    p.add_argument("--rounds", type=int, default=8, help="rounds of a tuner run to completion")
    p.add_argument("--batch", type=int, default=64, help="measurements per task and round (Trimmer's 64)")
    p.add_argument("--out", default="bench/results/race")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    models = a.models.split(",")
    refusal = check_folder(out, {"models": models, "tuners": a.tuners, "rounds": a.rounds, "batch": a.batch})
    if refusal:
        print(f"python -m bench.race: {refusal}", file=sys.stderr)
        return 2
    runs = {}
    for mode, flags in (("suspend", []), ("all", ["--no-suspend"])):
        runs[mode] = run_json(["race", *models, "--tuners", a.tuners, "--rounds", str(a.rounds),
                               "--batch", str(a.batch), "--db-dir", str(out / mode), *flags], out / f"race-{mode}.json",
                               fresh=[out / mode])
    best = {mode: {m: min((e["final_latency_ms"] for e in r["entries"] if e["model"] == m and e["final_latency_ms"]),
                          default=None) for m in models} for mode, r in runs.items()}
    saving = 1 - runs["suspend"]["cpu_s"] / runs["all"]["cpu_s"] if runs["all"]["cpu_s"] else None
    result = {"machine": machine_info(), "runs": runs, "best_ms": best, "cpu_saving": saving}
    (out / "race.json").write_text(json.dumps(result, indent=1))
    lines = ["# Tuners raced with and without suspension", "",
             f"{machine_line()}; tuners {a.tuners}; {a.rounds} rounds of {a.batch} "
             "measurements per task to completion.", "",
             "| race | CPU-s | energy J | wall s | " + " | ".join(f"best {m} ms" for m in models) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(models)]
    for mode, r in runs.items():
        energy = f"{r['energy_j']:.0f}" if r["energy_j"] is not None else "not available"
        lines.append(f"| {mode} | {r['cpu_s']:.0f} | {energy} | {r['wall_s']:.0f} | "
                     + " | ".join(f"{best[mode][m]:.3f}" if best[mode][m] else "-" for m in models) + " |")
    if saving is not None:
        lines += ["", f"CPU-seconds saved by suspension: {saving:.1%}"]
    write_text(out / "race.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
