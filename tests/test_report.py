"""``tensortune report``: the figures of a run read from its database (curves, errors by kind,
time split, the model's estimate over time, compile choices) and one HTML page with its PNGs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensortune.app.report import build_report, estimate_timeline, task_report
from tensortune.app.report_html import write_html
from tensortune.cli import main
from tensortune.database import Database, TaskRecord, TrialRecord

PNG = b"\x89PNG\r\n\x1a\n"
TARGET = '{"kind": "llvm"}'
TIMING = '{"mode": "hot", "number": 1, "repeat": 3}'


def _trial(key: str, k: int, cost: float | None, error: str = "none", confirm: dict | None = None,
           t0: float = 1000.0) -> TrialRecord:
    return TrialRecord(key, k, {"x": k}, [cost] * 3 if cost else [], error, "" if cost else f"{error}: boom {k}",
                       build_time=0.5, run_time=0.25, timestamp=t0 + 2.0 * k, tuner="random", target=TARGET,
                       threads=2, verified=cost is not None, timing=TIMING, cpu_model="Test CPU",
                       extra={"confirm": confirm} if confirm else {})


def _db(path: Path) -> Database:
    db = Database(path)
    for key, base, t0 in (("a", 1e-3, 1000.0), ("b", 4e-3, 1030.0)):
        db.add_task(TaskRecord(key, "matmul", f"matmul-{key}", TARGET, 2e9, json.dumps({"op": "nope"})))
        for k, cost in enumerate([base * 3, base * 2, None, base * 2.5, base]):
            db.add_trial(_trial(key, k, cost, "none" if cost else "compile", t0=t0))
    db.add_trial(_trial("a", 9, None, "runtime", t0=1000.0))
    for r in range(3):  # a confirmation group of config 4: its median is the task's best
        db.add_trial(_trial("a", 4, 1e-3 * (1.1 + 0.1 * r), confirm={"group": "g", "round": r + 1, "of": 3}))
    return db


def test_a_task_report_reads_curve_errors_time_and_the_confirmed_best(tmp_path: Path) -> None:
    with _db(tmp_path / "r.db") as db:
        rep = task_report(db, db.get_task("a"))
    assert rep is not None and rep.trials == 6 and rep.confirmations == 3  # confirmations are not trials
    assert [p.n for p in rep.points] == [1, 2, 3, 4, 5, 6]
    assert [p.cost_s is None for p in rep.points] == [False, False, True, False, False, True]
    assert rep.errors == {"compile": 1, "runtime": 1}
    assert rep.error_examples["runtime"] == "runtime: boom 9"
    assert rep.best_confirmed and rep.best_ms == pytest.approx(1.2)  # the median of the three rounds
    assert rep.build_s == pytest.approx(0.5 * 9) and rep.run_s == pytest.approx(0.25 * 9)
    assert rep.span_s == pytest.approx(18.0) and rep.context.endswith("Test CPU")
    assert rep.name == "matmul[a]"  # a task this version cannot rebuild is still reported


def test_the_estimate_sums_weight_times_best_so_far_over_measured_tasks(tmp_path: Path) -> None:
    with _db(tmp_path / "r.db") as db:
        a, b = task_report(db, db.get_task("a")), task_report(db, db.get_task("b"))
    assert a is not None and b is not None
    a.weight, b.weight = 2, 1
    line = estimate_timeline([a, b])
    assert line[0] == (0.0, pytest.approx(2 * 3.0), 1)  # a's first trial alone
    assert line[-2][2] == 2 and line[-2][1] == pytest.approx(2 * 1.0 + 1 * 4.0)  # both at their fastest trial
    assert all(x[1] >= y[1] or x[2] < y[2] for x, y in zip(line[:-1], line[1:-1]))  # falls, or a task joins
    assert line[-1] == (pytest.approx(38.0), pytest.approx(2 * 1.2 + 1 * 4.0), 2)  # a's confirmed median, at the end
    assert estimate_timeline([]) == []


def test_the_page_and_its_pngs(tmp_path: Path) -> None:
    with _db(tmp_path / "r.db") as db:
        rep = build_report(db, "r.db")
    out = write_html(rep, tmp_path / "run.html")
    page = out.read_text()
    pngs = sorted((tmp_path / "run_files").glob("*.png"))
    assert [p.name for p in pngs] == ["task-000.png", "task-001.png", "time.png"]
    assert all(p.read_bytes()[:8] == PNG and p.stat().st_size > 2000 for p in pngs)
    for src in ("run_files/time.png", "run_files/task-000.png", "run_files/task-001.png"):
        assert f"src='{src}'" in page
    assert "<h2>Errors by kind</h2>" in page and "runtime: boom 9" in page and "compile" in page
    assert "confirmed median" in page and "Test CPU" in page and "<script" not in page


def test_the_command_line_writes_the_page_and_refuses_a_missing_database(tmp_path: Path, capsys) -> None:
    _db(tmp_path / "r.db").close()
    out = tmp_path / "page.html"
    assert main(["report", "--db", str(tmp_path / "r.db"), "-o", str(out)]) == 0
    assert "2 tasks, 11 trials, 3 errors" in capsys.readouterr().out and out.is_file()
    assert main(["report", "--db", str(tmp_path / "r.db"), "-o", str(out)]) == 2  # no overwrite without --force
    assert main(["report", "--db", str(tmp_path / "missing.db"), "-o", str(tmp_path / "x.html")]) == 2


@pytest.mark.slow  # a model tuned for real, then its report with the compile choices
def test_a_tuned_models_report_has_its_estimate_and_compile_choices(tmp_path: Path) -> None:
    from tensortune import app
    from tensortune.app.report import write_report

    from models.tiny import tiny

    m, x = tiny()
    model = app.load(m, example_inputs=x)
    db = str(tmp_path / "m.db")
    app.tune_model(model, tuner="random", budget=app.Budget(trials=3), database=db, check=False, progress=False)
    rep = write_report(db, model, str(tmp_path / "m.html"))
    assert rep.model and rep.model_tasks == len([t for t in rep.tasks if t.weight])
    assert rep.timeline and rep.timeline[-1][2] == rep.model_tasks
    assert {c.source for c in rep.choices} <= {"tuned", "default", "generic", "tvm", "naive"}
    assert sum(c.source == "tuned" for c in rep.choices) >= 1
    page = (tmp_path / "m.html").read_text()
    assert "What compile chose" in page and (tmp_path / "m_files" / "timeline.png").is_file()
