"""``tensortune demo``: tune a built-in model for a moment, compile it, compare it with PyTorch and
ONNX Runtime. Run once, through the console script, on the smallest built-in model with a tiny
time budget (the first batch of the heaviest task is always measured), then checked on what it
printed and what it stored."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tensortune.database import Database

pytestmark = pytest.mark.slow  # end to end: the README's main job, through the console script

SCRIPT = Path(sys.executable).parent / "tensortune"
#: The smallest built-in model (1.2 M parameters; 32 tasks, 224x224 like every zoo model).
MODEL = "squeezenet1_0"
TIME_BUDGET_S = "1"
SYSTEMS = ("tensortune tuned", "tensortune untuned", "pytorch", "onnxruntime")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The demo's whole run (its own process: it sets PyTorch's thread counts) and its database."""
    db = tmp_path_factory.mktemp("demo") / "demo.db"
    p = subprocess.run([str(SCRIPT), "demo", "--model", MODEL, "--time-budget", TIME_BUDGET_S, "--db", str(db)],
                       capture_output=True, text=True, timeout=600, cwd=db.parent)
    return p, db


def test_demo_exits_0_and_announces_the_run(demo) -> None:
    p, db = demo
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    first = p.stdout.splitlines()[0]
    assert first.startswith(f"tensortune demo: tune {MODEL} in f32 with autotvm for 1 s (database {db}, resumes)"), first


def tuning_rows(out: str) -> list[tuple[str, int, int, str]]:
    """(task, weight, trials, best) of the tuning table (between its header and the total)."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("task ") and ln.rstrip().endswith("x weight"))
    rows = []
    for ln in lines[start + 1:]:
        if ln.startswith("estimated total"):
            break
        m = re.match(r"^(.{58}) +(\d+) +(\d+) +(-|[\d.]+ ms) +(-|[\d.]+ ms)$", ln)
        assert m, f"unexpected tuning row: {ln!r}"
        rows.append((m[1].strip(), int(m[2]), int(m[3]), m[4]))
    return rows


def test_demo_tunes_into_the_database(demo) -> None:
    p, db = demo
    rows = tuning_rows(p.stdout)
    assert len(rows) >= 10 and all(w >= 1 for _, w, _, _ in rows)  # every task of the model, with its weight
    tuned = [r for r in rows if r[2] > 0]
    assert tuned, "no task was measured"
    assert all(best.endswith(" ms") for *_, best in tuned)
    total = re.search(r"^estimated total ([\d.]+) ms over (\d+)/(\d+) tasks", p.stdout, re.M)
    assert total and float(total[1]) > 0 and int(total[2]) == len(tuned) and int(total[3]) == len(rows)
    with Database(db, readonly=True) as d:
        assert d.count() == sum(r[2] for r in rows)  # every measured trial was committed
        assert d.count() >= 16  # at least the first batch
        ok = d.trials(ok_only=True)
        assert ok and all(t.verified and t.tuner in ("autotvm", "in-model") for t in ok)
        # the in-model check timed the tuned task's candidates inside the model, as a confirmation group
        inside = [t for t in ok if t.tuner == "in-model"]
        assert all(t.confirmation and t.context.in_model for t in inside)
        assert len(d.tasks()) >= len(tuned)
        assert all(d.best(t.workload_key) is not None for t in d.tasks() if d.count(t.workload_key))
    assert re.search(rf"^in-model check of {MODEL}: \d+ tuned tasks, \d+ switched", p.stdout, re.M), p.stdout[-2000:]


def test_demo_compares_every_system_and_outputs_match(demo) -> None:
    p, _ = demo
    lines = p.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith(f"{MODEL} (tensortune in f32): outputs checked against pytorch"))
    table = {ln[:28].strip(): ln for ln in lines[head + 2:] if ln.strip()}
    assert set(SYSTEMS) <= set(table), lines[head:]
    for name in SYSTEMS:
        row = table[name]
        assert "FAILED" not in row, row
        latency = re.match(r"^.{28} +([\d.]+) ms +[\d.]+-[\d.]+ *ms +[\d.]+x  (.*)$", row)
        assert latency, f"no latency in {row!r}"
        assert float(latency[1]) > 0
        check = latency[2]
        if name == "pytorch":
            assert check == "reference"
        else:
            assert check.startswith("outputs match (max abs err "), row
