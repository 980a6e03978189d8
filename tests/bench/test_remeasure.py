"""The final re-measurement's rounds and the paired comparisons read from them (bench/suite/remeasure.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.suite.remeasure import LIBRARY, ROUNDS, paired_ratio, remeasure, rounds_line, states  # noqa: E402


def _summary(a: list[float | None], b: list[float | None], gbs: list[float], stable: list[bool]) -> dict:
    """A workload's summary with two tuners ``a`` and ``b`` timed in the same rounds."""
    import statistics

    def entry(xs: list[float | None]) -> dict:
        return {"median_ms": statistics.median([x for x in xs if x]), "rounds_ms": xs, "verified": True}

    return {"tuners": {"a": entry(a), "b": entry(b)},
            "remeasure": {"rounds": [{"copy_gbs": [g, g], "stable": st} for g, st in zip(gbs, stable)]}}


@pytest.mark.slow  # end to end: the re-measure rounds
def test_rounds_record_the_probe_the_sentinel_and_the_library() -> None:
    from tensortune.measure import MeasureOptions
    from tensortune.task import Task

    task = Task.from_op("matmul", {"M": 32, "N": 32, "K": 32})
    options = MeasureOptions(threads=1, number=1, repeat=1, min_repeat_ms=0)
    kernels = [("one", task.default_config(), ""), ("two", task.space.get(1), ""), ("none", None, "no candidate built")]
    got = remeasure(task, kernels, 3, options, library=True)
    log = got[ROUNDS]["rounds"]
    assert len(log) == 3 and [e["order"][0] for e in log] == ["one", "two", LIBRARY]  # rotated
    for e in log:
        assert len(e["copy_gbs"]) == 2 and all(g > 0 for g in e["copy_gbs"])
        assert e["sentinel"] in ("one", "two") and all(ms > 0 for ms in e["sentinel_ms"])
        assert isinstance(e["stable"], bool)
    assert log[2]["sentinel"] == "one"  # the library never is the sentinel
    for t in ("one", "two"):
        assert len(got[t]["rounds_ms"]) == 3 and all(x > 0 for x in got[t]["rounds_ms"]) and got[t]["verified"]
        assert got[t]["median_of"] in ("stable", "all")
    assert got["none"]["check"] == "no candidate built" and got["none"]["median_ms"] is None
    assert got[LIBRARY]["name"] == "numpy" and len(got[LIBRARY]["rounds_ms"]) == 3
    assert got[ROUNDS]["stable"] == sum(e["stable"] for e in log)


def test_a_state_change_of_the_host_is_compared_within_each_state() -> None:
    """Rounds 0-2: both kernels 1.0 ms (copy 31 GB/s); rounds 3-5: ``a`` at 1.25 ms (copy 41 GB/s);
    round 6 changed state inside it. Medians alone would set a state against another; the paired
    ratio is 1.0 in one state and 1.25 in the other, and the unstable round counts in neither."""
    s = _summary([1.0, 1.0, 1.0, 1.25, 1.25, 1.25, 1.25], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.8],
                 [31, 30, 32, 41, 40, 42, 36], [True] * 6 + [False])
    assert states(s) == [0, 0, 0, 1, 1, 1, None]
    assert paired_ratio(s, "a", "b", 0)["ratio"] == pytest.approx(1.0)
    assert paired_ratio(s, "a", "b", 1)["ratio"] == pytest.approx(1.25)
    both = paired_ratio(s, "a", "b")
    assert both["rounds"] == 6 and both["paired"] and both["lo"] == pytest.approx(1.0) and both["hi"] == 1.25
    assert "two states: 3 rounds at the lower copy bandwidth, 3 at the higher" in rounds_line(s)
    assert "7 interleaved rounds, 6 stable" in rounds_line(s)


def test_one_state_and_the_fallbacks() -> None:
    one = _summary([1.0, 1.1, 1.2], [1.0, 1.0, 1.0], [31, 32, 33], [True, True, True])
    assert states(one) == [0, 0, 0] and "two states" not in rounds_line(one)
    assert paired_ratio(one, "a", "b")["ratio"] == pytest.approx(1.1)
    # fewer than half the rounds stable: every round is used
    shaky = _summary([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], [31, 32, 33], [True, False, False])
    assert paired_ratio(shaky, "a", "b")["rounds"] == 3
    # a summary written before rounds were recorded: its samples, one per round, paired by position
    old = {"tuners": {"a": {"median_ms": 1.1, "samples_ms": [1.0, 1.1, 1.5]},
                      "b": {"median_ms": 1.0, "samples_ms": [1.0, 1.0, 1.0]}}}
    assert paired_ratio(old, "a", "b") == {"ratio": 1.1, "rounds": 3, "lo": 1.0, "hi": 1.5, "paired": True}
    # ... unless a side missed a round: the ratio of the medians, not paired
    old["tuners"]["a"] = {"median_ms": 2.0, "samples_ms": [2.0, 2.0]}
    assert paired_ratio(old, "a", "b") == {"ratio": 2.0, "rounds": 0, "lo": None, "hi": None, "paired": False}
    assert states(old) == [] and rounds_line(old).startswith("Re-measured before rounds were recorded")
    # a side without a verified time has no ratio
    assert paired_ratio({"tuners": {"a": {"median_ms": None}, "b": {"median_ms": 1.0}}}, "a", "b") is None


@pytest.mark.slow  # end to end: the re-measure process
def test_the_run_re_measures_in_a_fresh_process_and_a_failed_one_is_a_result() -> None:
    from bench.suite.remeasure import remeasure_isolated
    from tensortune.measure import MeasureOptions
    from tensortune.task import Task

    task = Task.from_op("matmul", {"M": 32, "N": 32, "K": 32})
    options = MeasureOptions(threads=1, number=1, repeat=1, min_repeat_ms=0)
    got = remeasure_isolated(task, [("one", task.default_config(), "")], 2, options, library=True)
    assert got["one"]["verified"] and len(got["one"]["rounds_ms"]) == 2 and got[LIBRARY]["name"] == "numpy"
    assert len(got[ROUNDS]["rounds"]) == 2

    class Broken:  # a kernel the fresh process cannot rebuild: its knobs are not the space's
        def to_json(self) -> dict:
            return {"knobs": {"no_such_knob": 3}}

    bad = remeasure_isolated(task, [("bad", Broken(), "")], 1, options)
    assert bad["bad"]["check"].startswith("re-measurement process failed") and bad["bad"]["median_ms"] is None
    assert bad[ROUNDS]["rounds"] == [] and bad[ROUNDS]["stable"] == 0
