"""``python -m bench soak``'s code path on a small budget: the fault plan, and a short real soak.

The soak itself (5,000 trials) never runs here. The end-to-end test runs the real machinery (worker
processes, the database, the random tuner) for about 20 trials, with a seed chosen (by replaying
the tuner without measuring) so that every fault class comes up while few runner restarts are paid.
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.suite import faults, soak  # noqa: E402
from tensortune.measure import ErrorKind, MeasureOptions, MeasureResult, MeasurerBase  # noqa: E402
from tensortune.task import Task  # noqa: E402
from tensortune.tuners import get_tuner  # noqa: E402

RATE, TRIALS, BATCH = 0.25, 20, 8


def test_fault_plan_rate_and_classes() -> None:
    n = 20000
    plan = Counter(faults.planned_fault(g, 0.1) for g in range(n))
    assert abs(sum(v for k, v in plan.items() if k != "none") / n - 0.1) < 0.01
    third = n * 0.1 / 3
    assert abs(plan["segfault"] + plan["abort"] - third) < 0.15 * third
    assert abs(plan["hang"] - third) < 0.15 * third and abs(plan["wrong"] - third) < 0.15 * third
    assert all(faults.planned_fault(g, 0.0) == "none" for g in range(1000))
    assert all(faults.planned_fault(g, 1.0) != "none" for g in range(1000))


def test_space_keeps_one_inject_value_per_gemm_config() -> None:
    task = Task.from_op("matmul", [64, 64, 64], template=faults.install(RATE).name)
    gemm = Task.from_op("matmul", [64, 64, 64])
    assert len(task.space) == len(gemm.space) * len(faults.INJECT)
    valid = [c for c in (task.space.get(i) for i in range(0, len(task.space), 97)) if task.space.is_valid(c)]
    assert valid and all(c["inject"] == faults.planned_fault(c.index % len(gemm.space), RATE) for c in valid)
    assert task.space.is_valid(task.default_config())


class _Replay(MeasurerBase):
    """A measurer that measures nothing: every candidate ok at once (to replay the tuner's choices)."""

    options = MeasureOptions()

    def measure(self, inputs, on_result=None):
        return [MeasureResult([1e-3]) for _ in inputs]


def _seed_meeting_every_fault() -> tuple[int, Counter]:
    """The first seed whose first TRIALS candidates carry a crash, a hang and a wrong answer, with at
    most 3 runner restarts (crashes and hangs)."""
    task = Task.from_op("matmul", [64, 64, 64], template=faults.install(RATE).name)
    for seed in range(300):
        tuner = get_tuner(soak.TUNER, task, seed=seed, batch_size=BATCH)
        seen: list[str] = []
        tuner.tune(TRIALS, _Replay(), callbacks=[lambda t, inputs, r: seen.extend(i.config["inject"] for i in inputs)])
        kinds = Counter(faults.FAULT_CLASS[k] for k in seen if k != "none")
        if all(kinds[c] for c in ("crash", "hang", "wrong")) and kinds["crash"] + kinds["hang"] <= 3:
            return seed, kinds
    raise AssertionError("no seed meets every fault class")


@pytest.mark.timeout(600)
@pytest.mark.slow  # end to end: a soak run
@pytest.mark.alone  # a clean candidate must end inside the run timeout that ends a hang: a loaded host broke that (4 s)
def test_small_soak_records_every_fault_and_loses_nothing(tmp_path: Path) -> None:
    seed, planned = _seed_meeting_every_fault()
    # a runner restarted after a crash sets up the task and its reference inside the first call's
    # timeout: 1 s was too little for a clean candidate on a loaded 2-core machine
    s = soak.SoakSettings(trials=TRIALS, fault_rate=RATE, run_timeout=4.0, seed=seed, batch_size=BATCH,
                          sample_interval_s=1.0, window_s=5.0)
    db, out = tmp_path / "soak.db", tmp_path / "soak.json"
    r = soak.run_soak(s, db, out, progress=False)

    t = r["targets"]
    for name in ("0 trials lost", "faults recorded", "0 wrong kernels reported", "best verified", "faults contained",
                 "no leaked processes"):
        assert t[name]["pass"] is True, (name, t[name]["detail"], r["faults"]["clean_errors"])
    assert r["trials"] == {"requested": TRIALS, "committed": TRIALS, "new": TRIALS, "lost": 0, "measured_twice": 0}
    assert r["faults"]["by_class"] == dict(planned)
    rec = r["faults"]["recorded"]
    for inj, expected in faults.EXPECTED_ERROR.items():  # each fault as its own kind, never anything else
        assert set(rec.get(inj, {})) <= {expected}
    assert ErrorKind.RUN_TIMEOUT.value in rec["hang"] and rec["wrong"] == {"wrong_answer": planned["wrong"]}
    assert r["best"]["config"]["inject"] == "none" and r["best"]["reverified"] is True

    # samples: every role, over the run; the report and the plot are written
    assert len(r["samples"]) >= 3 and r["samples"][-1]["trials"] == TRIALS
    assert {"main", "builder0", "runner"} <= set(r["samples"][-1]["procs"])
    assert all(p["fds"] > 0 and p["rss_mib"] > 0 for p in r["samples"][-1]["procs"].values() if p)
    saved = json.loads(out.read_text())
    assert saved["targets"] == t and saved["machine"]["cores"] >= 1 and saved["settings"]["trials"] == TRIALS
    assert out.with_suffix(".png").stat().st_size > 0
    assert Path(f"{db}.samples.jsonl").read_text().count("\n") == len(r["samples"])

    # a database of one fault plan is never resumed under another
    with pytest.raises(soak.SoakError, match="another fault plan"):
        soak.run_soak(soak.SoakSettings(trials=TRIALS, fault_rate=0.5), db, None, progress=False)
