"""Contention: trials timed while another process takes the cores are flagged, stored as noisy, give
way to quiet ones, and the finalists are re-measured in a quiet spell (a planted competitor)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tensortune.database import Database, TrialRecord, confirmed_best, latest_confirmation, top_configs
from tensortune.measure import MeasureOptions
from tensortune.measure.noise import BusyWindow, NoiseLog, Sample, cpu_ticks

pytestmark = pytest.mark.skipif(cpu_ticks() is None, reason="needs /proc/stat")


class Competitor:
    """``n`` processes spinning on the cores until stopped (a planted noisy neighbour)."""

    def __init__(self, n: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-I", "-c", "while True: pass"]) for _ in range(n)]
        time.sleep(0.3)  # let them reach the cores

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


def test_verdicts_weigh_the_probe_against_its_quiet_value_and_others_against_idle_cores() -> None:
    log = NoiseLog(threads=2, cores=2)
    log.calibrate(1e-3)
    assert not log.judge(Sample(1.05e-3, 0.1))["noisy"]
    assert not log.judge(Sample(1e-3, 0.9, 0.8))["noisy"]  # within the counting error of a short window
    slow = log.judge(Sample(1.4e-3, 0.0))
    assert slow["noisy"] and slow["probe"] == pytest.approx(1.4)
    assert log.judge(Sample(1e-3, 0.9))["noisy"]  # a competitor on the kernel's cores
    assert log.judge(Sample(None, None)) == {"probe": None, "others": None, "noisy": False}
    assert (log.judged, log.noisy) == (5, 2) and "NOISY, 2 of 5" in log.describe()
    log.calibrate(0.5e-3)  # a faster probe is the new quiet value
    assert log.verdict(Sample(0.9e-3, None))["noisy"]
    # one thread on two cores: a process on the other core leaves the kernel's core alone
    assert not NoiseLog(threads=1, cores=2).verdict(Sample(None, 1.0))["noisy"]
    assert NoiseLog(threads=1, cores=2).verdict(Sample(None, 1.5))["noisy"]
    quiet = NoiseLog(threads=2, cores=2)
    quiet.judge(Sample(1e-3, 0.0))
    assert quiet.describe().startswith("measurements: quiet")


def test_busy_window_sees_the_cores_another_process_takes() -> None:
    comp = Competitor(1)
    try:
        w = BusyWindow()
        time.sleep(0.5)
        busy = w.stop()
    finally:
        comp.stop()
    assert busy is not None and busy[0] > 0.6 and busy[1] < 0.2  # about one core, counted within 0.2


KEY, TARGET = "ab" * 10, '{"kind":"llvm"}'


def _trial(index: int, cost: float, noisy: bool, rnd: int = 0) -> TrialRecord:
    extra = {"noise": {"probe": 1.0, "others": 1.0 if noisy else 0.0, "noisy": noisy}}
    if rnd:
        extra["confirm"] = {"group": "g", "round": rnd, "of": 3}
    return TrialRecord(KEY, index, {"i": index}, [cost], "none", timestamp=1.0, tuner="random", target=TARGET,
                       threads=2, verified=True, timing="", cpu_model="cpu", extra=extra)


def test_quiet_times_outrank_noisy_ones_of_the_same_config() -> None:
    # config 0: one noisy 5 ms and two quiet 2 ms; config 1: quiet 3 ms; config 2: only noisy 1 ms
    trials = [_trial(0, 5e-3, True), _trial(0, 2e-3, False), _trial(0, 2e-3, False), _trial(1, 3e-3, False),
              _trial(2, 1e-3, True)]
    assert trials[0].noisy and not trials[1].noisy
    assert top_configs(trials, 3) == [2, 0, 1]
    # a confirmation: config 0's noisy round is set aside, its quiet rounds decide
    group = [_trial(0, 9e-3, True, 1), _trial(1, 3e-3, False, 1), _trial(0, 2e-3, False, 2),
             _trial(1, 3e-3, False, 2), _trial(0, 2.1e-3, False, 3), _trial(1, 3e-3, False, 3)]
    assert confirmed_best(group).config_index == 0 and confirmed_best(group).cost == 2e-3


@pytest.mark.alone
@pytest.mark.slow  # waits for the quiet spell after the competitor leaves (15-20 s)
@pytest.mark.timeout(300)
def test_a_planted_competitor_flags_the_trials_and_the_finalists_wait_for_quiet(tmp_path) -> None:
    from tensortune.measure import Measurer
    from tensortune.task import Task
    from tensortune.tuners import get_tuner

    task = Task.from_op("matmul", [64, 64, 64])

    def run(attempt: int):
        tuner = get_tuner("random", task, seed=0, batch_size=4)
        tuner.confirm_top = 2
        comp = Competitor(os.cpu_count() or 2)
        # the competitor leaves after the search's only batch: the confirmation finds the quiet spell
        opts = MeasureOptions(repeat=3, min_repeat_ms=20, quiet_wait_s=30)
        try:
            with Measurer(opts) as m, Database(tmp_path / f"n{attempt}.db") as db:
                res = tuner.tune(4, m, database=db, callbacks=[lambda *_: comp.stop()])
                return res, db.trials(task.workload_key), m.noise
        finally:
            comp.stop()

    res, stored, log = run(0)
    if res.noise["confirm_noisy"]:  # the shared host's own noisy spell after the competitor left
        res, stored, log = run(1)  # (a CI run once read it): a second run settles which it was
    assert res.trials_measured == 4 and res.best_config is not None
    assert res.noise["noisy_trials"] >= 3, res.noise
    assert res.noise["quiet_spell"] is True and res.noise["confirm_noisy"] is False
    search = [t for t in stored if t.confirmation is None and t.ok]
    last = latest_confirmation(stored)  # every config of the last group has a quiet round
    assert sum(t.noisy for t in search) >= 3 and last
    assert all(any(not t.noisy for t in last if t.config_index == i) for i in {t.config_index for t in last})
    assert "re-measured in a quiet spell" in res.describe_noise()
    assert log.noisy >= 3 and log.waits and log.waits[0]["quiet"]
    assert "NOISY" in log.describe()


@pytest.mark.timeout(300)
def test_a_competitor_that_stays_makes_the_confirmation_say_so(tmp_path) -> None:
    from tensortune.measure import Measurer
    from tensortune.task import Task
    from tensortune.tuners import get_tuner

    task = Task.from_op("matmul", [32, 32, 32])
    tuner = get_tuner("random", task, seed=0, batch_size=2)
    tuner.confirm_top, tuner.confirm_rounds = 1, 1
    comp = Competitor(os.cpu_count() or 2)
    try:
        with Measurer(MeasureOptions(repeat=3, min_repeat_ms=10, quiet_wait_s=1.5)) as m, \
                Database(tmp_path / "n.db") as db:
            res = tuner.tune(2, m, database=db)
    finally:
        comp.stop()
    assert res.noise["quiet_spell"] is False and res.noise["confirm_noisy"] is True
    assert m.noise.waits and not m.noise.waits[-1]["quiet"]
    assert "best is uncertain" in res.describe_noise()


def test_the_quiet_wait_default_comes_from_the_environment_and_a_bad_value_is_said_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from tensortune.measure import options
    from tensortune.measure.noise import QUIET_WAIT_S

    monkeypatch.setenv(options.QUIET_WAIT_ENV, "0")
    assert MeasureOptions().quiet_wait_s == 0.0  # a machine that is never quiet: no wait
    assert MeasureOptions(quiet_wait_s=7).quiet_wait_s == 7  # an explicit value wins
    monkeypatch.delenv(options.QUIET_WAIT_ENV)
    assert MeasureOptions().quiet_wait_s == QUIET_WAIT_S
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv(options.QUIET_WAIT_ENV, bad)
        with caplog.at_level("WARNING", logger=options.__name__):
            assert MeasureOptions().quiet_wait_s == QUIET_WAIT_S
            assert MeasureOptions().quiet_wait_s == QUIET_WAIT_S
        assert caplog.text.count(f"{options.QUIET_WAIT_ENV}={bad!r}") == 1
        caplog.clear()
