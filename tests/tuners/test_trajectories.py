"""Same seed, same trials: each of the five systems measures the recorded configs (see
``trajectories.py``, which remakes the record)."""
from __future__ import annotations

import json

import pytest

from trajectories import RECORD, SYSTEMS, machine, trajectories


def test_each_system_measures_the_recorded_configs() -> None:
    record = json.loads(RECORD.read_text())
    assert sorted(record["trajectories"]) == sorted(SYSTEMS)
    if record["cpu"] != machine():
        pytest.skip(f"recorded on {record['cpu']}; this is {machine()} (remake it: tests/tuners/trajectories.py)")
    now = trajectories()
    for name in SYSTEMS:
        assert now[name] == record["trajectories"][name], name
