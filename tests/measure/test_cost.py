"""Cost accounting: CPU-seconds and energy of a tuning run, budgets in them, and no invented energy."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tensortune.budget import Budget
from tensortune.database import Database
from tensortune.measure import energy
from tensortune.measure.cost import CostMeter
from tensortune.measure.energy import EnergyMeter, EnergyUnavailable
from tensortune.measure.result import ErrorKind, MeasureResult
from tensortune.task import Task
from tensortune.tuners import get_tuner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuners"))
from synthetic import FakeMeasurer, conv_landscape  # noqa: E402

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}


@pytest.fixture
def no_counter(monkeypatch, tmp_path):
    monkeypatch.setattr(energy, "POWERCAP", tmp_path / "no-powercap")


@pytest.fixture
def fake_rapl(monkeypatch, tmp_path):
    """A powercap tree with one package domain whose counter the test moves by hand."""
    dom = tmp_path / "powercap" / "intel-rapl:0"
    dom.mkdir(parents=True)
    (dom / "energy_uj").write_text("1000000")
    (dom / "max_energy_range_uj").write_text("5000000")
    monkeypatch.setattr(energy, "POWERCAP", tmp_path / "powercap")
    return dom / "energy_uj"


def task() -> Task:
    return Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)


def test_meter_counts_worker_cpu_and_unreadable_candidates(no_counter) -> None:
    m = CostMeter()
    m.add(MeasureResult([1e-3], build_cpu=0.5, run_cpu=0.25, run_time=0.3))
    m.add(MeasureResult([], ErrorKind.RUNTIME, build_cpu=0.5, run_cpu=None, run_time=1.0))  # runner died
    m.add(MeasureResult([], ErrorKind.COMPILE, build_cpu=0.2))  # never ran: nothing lost
    total = m.total()
    assert total.build_cpu_s == pytest.approx(1.2) and total.run_cpu_s == pytest.approx(0.25)
    assert total.unread == 1 and total.cpu_s >= 1.45
    assert total.energy_j is None and total.energy_note.startswith("not available:")
    assert json.loads(json.dumps(total.to_json()))["energy_j"] is None


def test_energy_is_read_where_a_counter_exists_and_wraps(fake_rapl) -> None:
    meter = EnergyMeter()
    meter.start()
    fake_rapl.write_text("3500000")
    assert meter.peek() == pytest.approx(2.5)
    fake_rapl.write_text("500000")  # wrapped at 5 J
    assert meter.stop() == pytest.approx(4.5)
    m = CostMeter()
    fake_rapl.write_text("900000")
    assert m.energy_j() == pytest.approx(0.4) and m.total().energy_note == ""


def test_session_reports_its_cost_and_stores_cpu_per_trial(no_counter, tmp_path) -> None:
    t = task()

    class CpuFake(FakeMeasurer):
        def measure(self, inputs, on_result=None):
            def with_cpu(inp, r):
                r.build_cpu, r.run_cpu = 0.1, 0.05
                if on_result is not None:
                    on_result(inp, r)
            return super().measure(inputs, with_cpu)

    with Database(tmp_path / "d.db") as db:
        res = get_tuner("random", t, seed=0).tune(12, CpuFake(conv_landscape), database=db)
        trials = [x for x in db.trials(t.workload_key) if x.confirmation is None]
    cost = res.to_json()["cost"]
    assert cost["cpu_split_s"]["build"] == pytest.approx(0.1 * (12 + res.confirm_measured))
    assert cost["cpu_s"] >= cost["cpu_split_s"]["build"] + cost["cpu_split_s"]["run"]
    assert cost["energy_j"] is None and "not available" in cost["energy"] and cost["wall_s"] > 0
    assert all(x.extra["cpu_s"] == {"build": 0.1, "run": 0.05} for x in trials) and len(trials) == 12


def test_cpu_budget_stops_the_run(no_counter) -> None:
    res = get_tuner("random", task(), seed=0).tune(Budget(trials=1000, cpu_s=1e-9), FakeMeasurer(conv_landscape))
    assert res.stop_reason == "cpu_budget" and res.trials_measured == 0


def test_energy_budget_is_refused_without_a_counter(no_counter) -> None:
    with pytest.raises(EnergyUnavailable, match="needs a readable energy counter.*does not exist"):
        get_tuner("random", task(), seed=0).tune(Budget(trials=10, energy_j=5.0), FakeMeasurer(conv_landscape))


def test_energy_budget_stops_the_run_where_counted(fake_rapl) -> None:
    class Burner(FakeMeasurer):
        def measure(self, inputs, on_result=None):
            fake_rapl.write_text(str(int(fake_rapl.read_text()) + 1_000_000))  # 1 J per batch
            return super().measure(inputs, on_result)

    res = get_tuner("random", task(), seed=0, batch_size=4).tune(Budget(trials=1000, energy_j=2.5), Burner(conv_landscape))
    assert res.stop_reason == "energy_budget" and res.trials_measured == 12
    assert res.cost.energy_j == pytest.approx(3.0)


def test_cli_refuses_an_energy_budget_in_one_line(no_counter, tmp_path, capsys) -> None:
    from tensortune.cli import main

    code = main(["tune-op", "matmul", "--shape", "16,16,16", "--trials", "4", "--db", str(tmp_path / "x.db"),
                 "--energy-budget", "10"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "energy budget needs a readable energy counter" in err[0]
    assert not (tmp_path / "x.db").exists()
