"""bench.trimmer: the cold and failed candidates' share of a tuning database's time."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuners"))
from synthetic import FakeMeasurer, conv_landscape  # noqa: E402

from bench.trimmer import cold_shares  # noqa: E402


def test_cold_shares_count_failures_and_slow_trials(tmp_path) -> None:
    from tensortune.database import Database
    from tensortune.select.cold import cold_mask
    from tensortune.task import Task
    from tensortune.tuners import get_tuner

    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1),
                        target={"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2})

    class Timed(FakeMeasurer):
        def measure(self, inputs, on_result=None):
            def timed(inp, r):
                r.build_time, r.run_time = 0.5, 0.25
                r.build_cpu, r.run_cpu = 0.4, 0.2
                if on_result is not None:
                    on_result(inp, r)
            return super().measure(inputs, timed)

    fails = lambda c: c["auto_unroll_max_step"] == 0 and c["unroll_explicit"] == 1  # noqa: E731
    with Database(tmp_path / "d.db") as db:
        get_tuner("random", task, seed=0).tune(64, Timed(conv_landscape, fails), database=db)
        trials = sorted((t for t in db.trials(task.workload_key) if t.confirmation is None), key=lambda t: t.id)
    s = cold_shares(tmp_path / "d.db")
    cold = cold_mask([t.cost for t in trials])
    assert s["trials"] == 64 and s["failed"] == sum(not t.ok for t in trials) > 0
    assert s["cold"] + s["failed"] == int(cold.sum())
    assert abs(s["cold_share_wall"] - cold.mean()) < 1e-9 and abs(s["cold_share_cpu"] - cold.mean()) < 1e-9
