"""``python -m bench.race``: a stopped race folder goes on only on the same kind of machine
with the same settings."""
from __future__ import annotations

import json

import pytest

import bench.race as race
import tensortune.target as target

HERE = {"cpu_model": "AMD EPYC", "llvm_cpu": "znver4", "cores": 2}
SETTINGS = {"models": ["mobilenet_v2"], "tuners": "trimmer,autotvm", "rounds": 8, "batch": 64}


@pytest.fixture
def machine(monkeypatch):
    here = dict(HERE)
    monkeypatch.setattr(target, "machine_id", lambda: dict(here))
    return here


def test_the_first_start_records_the_folder_and_the_same_start_goes_on(tmp_path, machine) -> None:
    assert race.check_folder(tmp_path, SETTINGS) is None
    kept = json.loads((tmp_path / "meta.json").read_text())
    assert kept == {"machine": HERE, "settings": SETTINGS}
    assert race.check_folder(tmp_path, dict(SETTINGS)) is None


def test_another_kind_of_machine_or_other_settings_are_refused(tmp_path, machine) -> None:
    race.check_folder(tmp_path, SETTINGS)
    why = race.check_folder(tmp_path, {**SETTINGS, "rounds": 4})
    assert why and "rounds=8" in why and "--out" in why
    machine["llvm_cpu"] = "znver5"
    why = race.check_folder(tmp_path, SETTINGS)
    assert why and "znver4" in why and "znver5" in why
    (tmp_path / "meta.json").write_text("[1, 2]")
    assert "not a race folder" in race.check_folder(tmp_path, SETTINGS)


def test_a_refused_folder_runs_nothing_and_exits_2(tmp_path, machine, monkeypatch, capsys) -> None:
    args = ["--models", "mobilenet_v2", "--tuners", "trimmer,autotvm", "--out", str(tmp_path)]
    race.check_folder(tmp_path, {**SETTINGS, "rounds": 3})
    monkeypatch.setattr(race, "run_json", lambda *a, **k: pytest.fail("a refused folder must not race"))
    assert race.main(args) == 2
    assert "rounds=3" in capsys.readouterr().err
