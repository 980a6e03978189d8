"""``tensortune race``: race tuners on models as Ray actors, suspending the worst (Trimmer)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..app.checks import check_energy
from ..errors import UsageError
from .args import positive_float, positive_int, seed


def add_parsers(sub: Any) -> None:
    """The sub-commands of this group."""
    rc = sub.add_parser("race", help="race tuners on models as Ray actors, suspending the worst (Trimmer)")
    rc.add_argument("models", nargs="+", help="built-in model names or ONNX files")
    rc.add_argument("--tuners", required=True, help="comma-separated tuner specs NAME[:KEY=VALUE...], "
                    "e.g. trimmer,autotvm,chameleon,chameleon:variant=ppo-greedy")
    rc.add_argument("--db-dir", required=True, help="one database per model and tuner goes here")
    rc.add_argument("--time-budget", type=positive_float, default=None, help="seconds for the whole race")
    rc.add_argument("--energy-budget", type=positive_float, default=None,
                    help="joules for the whole race (needs a readable RAPL counter; refused without one)")
    rc.add_argument("--rounds", type=positive_int, default=None, help="rounds per tuner at most")
    rc.add_argument("--trials-per-round", type=positive_int, default=64, help="measurements per task and round (64)")
    rc.add_argument("--no-suspend", action="store_true", help="run every tuner to the end (the comparison)")
    rc.add_argument("--ray-address", default=None, help="join this Ray cluster (default: start a local one)")
    rc.add_argument("--seed", type=seed, default=0, help="seed of the randomness (default 0)")
    rc.add_argument("--json", action="store_true", help="print JSON")


def _say_round(e: Any, row: dict[str, Any]) -> None:
    """One line on stderr per finished round of a race (``--json`` too: a race runs for hours)."""
    lat = f"{row['latency_s'] * 1e3:.3f} ms" if row.get("latency_s") else "no latency"
    if row.get("change") is not None:
        lat += f" ({row['change']:+.1%} against the round before, timed in pairs)"
    print(f"race: {os.path.basename(e.model)} {e.tuner} round {row['round']}: {lat}, {row['trials']} trials, "
          f"{row['cpu_s']:.0f} CPU-s, {row['wall_s']:.0f} s", file=sys.stderr, flush=True)


def _say_status(e: Any) -> None:
    """One line on stderr when a race's actor is suspended (with the change that ranked it), is done
    early (its tuners have stopped) or dies."""
    why = {"suspended": f"last round {e.improvement:+.1%}",
           "done": "its round measured nothing: every task's tuner has stopped"}.get(e.status, e.error)
    print(f"race: {os.path.basename(e.model)} {e.tuner} {e.status} ({why})", file=sys.stderr, flush=True)


def cmd_race(a: argparse.Namespace) -> int:
    """``tensortune race``."""
    from ..cluster.race import race
    from ..tuners import TUNERS
    from ..utils.options import OptionError, parse_assignments

    specs = [t.strip() for t in a.tuners.split(",") if t.strip()]
    for spec in specs:  # every tuner and option checked before Ray starts
        name, *items = spec.split(":")
        if name not in TUNERS:
            raise UsageError(f"unknown tuner {name!r}; known: {', '.join(TUNERS)}")
        try:
            TUNERS.get(name).check_options(parse_assignments(items))
        except OptionError as e:
            raise UsageError(f"tuner {spec!r}: {e}") from None
    if a.time_budget is None and a.energy_budget is None and a.rounds is None:
        raise UsageError("give --time-budget SECONDS, --energy-budget JOULES or --rounds N")
    check_energy(a.energy_budget)
    for m in a.models:
        from ..models.zoo import MODELS

        if m not in MODELS and not os.path.isfile(m):
            raise UsageError(f"{m}: no such file, and not a built-in model (built-ins: {', '.join(MODELS)})")
    out = race(a.models, specs, a.db_dir, a.time_budget, a.energy_budget, a.rounds, a.trials_per_round, not a.no_suspend,
               a.ray_address, a.seed, on_round=_say_round, on_status=_say_status)
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{'model':24} {'tuner':32} {'status':10} {'rounds':>6} {'trials':>7} {'final':>11} {'CPU-s':>8}")
    for e in out["entries"]:
        lat = f"{e['final_latency_ms']:8.3f} ms" if e["final_latency_ms"] is not None else "-"
        print(f"{os.path.basename(e['model'])[:24]:24} {e['tuner'][:32]:32} {e['status']:10} {len(e['rounds']):6d} "
              f"{e['trials']:7d} {lat:>11} {e['cpu_s']:8.0f}")
    energy = f"{out['energy_j']:.0f} J" if out["energy_j"] is not None else "energy not available"
    print(f"race: {out['wall_s']:.0f} s wall, {out['cpu_s']:.0f} CPU-s, {energy}; "
          f"{'the worst suspended each round' if out['suspend'] else 'no suspension'}")
    return 0


COMMANDS = {"race": cmd_race}
