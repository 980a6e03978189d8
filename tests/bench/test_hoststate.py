"""Timings on near cores: the wait, the retry of a timing the host moved under, and the record."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench import hoststate
from bench.corpus import report_md
from bench.hoststate import FAR_NS, HostWait, cores

NEAR, FAR = 80.0, 330.0


def _scripted(monkeypatch: pytest.MonkeyPatch, trips: list[float]) -> list[float]:
    """Make ``probe`` return ``trips`` in order (the list left shows what was not read)."""
    left = list(trips)
    monkeypatch.setattr(hoststate, "probe", lambda exe: left.pop(0))
    monkeypatch.setattr(hoststate, "POLL_S", 0.0)
    return left


def test_two_round_trips_read_as_near_far_or_unknown() -> None:
    assert cores([NEAR, NEAR]) == "near" and cores([NEAR, FAR]) == "far" and cores([None, None]) == "unknown"


def test_the_wait_polls_until_near_then_times_once(monkeypatch: pytest.MonkeyPatch) -> None:
    left = _scripted(monkeypatch, [FAR, FAR, NEAR, NEAR])
    calls = []
    result, state = HostWait(Path("probe"), wait_s=60).timed(lambda: calls.append(1) or len(calls))
    assert result == 1 and calls == [1] and left == []
    assert state == {"round_trip_ns": [NEAR, NEAR], "cores": "near", "timings": 1}


def test_a_timing_the_host_moved_under_is_tried_again_up_to_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # near before, far after: again; then far before (the wait runs out at once) and after: kept
    _scripted(monkeypatch, [NEAR, FAR, NEAR, FAR, FAR, FAR])
    calls = []
    result, state = HostWait(Path("probe"), wait_s=0.0, tries=3).timed(lambda: calls.append(1) or len(calls))
    assert result == 3 and state == {"round_trip_ns": [FAR, FAR], "cores": "far", "timings": 3}


def test_without_a_probe_the_timing_runs_once() -> None:
    result, state = HostWait(None).timed(lambda: 7)
    assert result == 7 and state == {"round_trip_ns": [None, None], "cores": "unknown", "timings": 1}


@pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None and shutil.which("gcc") is None,
                    reason="no C compiler")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: no round trip")
def test_the_probe_builds_and_times_a_round_trip(tmp_path: Path) -> None:
    exe = hoststate.build_probe(tmp_path)
    trip = hoststate.probe(exe)
    assert trip is not None and 1.0 < trip < 1e6, trip


def test_the_report_says_where_each_model_was_timed_and_the_near_geomean() -> None:
    from tests.bench.test_corpus_report import MACHINE, _entry

    a, b = _entry("hf:a", 1.0, "outputs match"), _entry("hf:b", 1.44, "outputs match")
    a.update(round_trip_ns=[NEAR, 90.0], cores="near", timings=1)
    b.update(round_trip_ns=[FAR, FAR], cores="far", timings=3)
    text = report_md({"machine": MACHINE, "rounds": 5, "peak": {}, "models": {"a": a, "b": b}})
    assert "| near (80/90 ns) |" in text and "| far (330/330 ns) |" in text, text
    assert "1.20x over 2 models; 1.00x over the 1 timed on near cores." in text, text
    assert FAR_NS < FAR
