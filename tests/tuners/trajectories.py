"""The configs each of the five systems measures on the synthetic landscape, for a fixed seed.

A restructuring of a tuner (a tuner made a composition of parts, say) must leave them unchanged.
The floating point of the shipped predictors and of XGBoost differs in its last bits between CPU
kinds, which may reorder near-ties, so the record holds the CPU it was made on and the test
compares only there. Remake it (before a restructuring, on the machine that does it) with::

    .venv/bin/python tests/tuners/trajectories.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tensortune.target import cpu_model, host_target_json  # noqa: E402

#: The five published systems.
SYSTEMS = ("autotvm", "chameleon", "oneshot", "trimmer", "fasor")
#: The seed of the recorded runs.
SEED = 3
RECORD = Path(__file__).with_suffix(".json")


def trajectories() -> dict[str, list[int]]:
    """Config indices each system measures, in order (the contract test's task, options and budget)."""
    from tensortune.task import Task

    from test_tuner_contract import ZNVER4, run

    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    return {name: run(name, task, seed=SEED)[0] for name in SYSTEMS}


def machine() -> str:
    """The CPU as the record names it: its model and LLVM's name for its kind."""
    return f"{cpu_model()} ({host_target_json().get('mcpu', '?')})"


def main() -> None:
    rows = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in trajectories().items())
    RECORD.write_text(f'{{"cpu": {json.dumps(machine())}, "seed": {SEED}, "trajectories": {{\n{rows}\n}}}}\n')
    print(f"written: {RECORD}")


if __name__ == "__main__":
    main()
