"""The host-state split of ``--study hostpair``: pairs sorted into near, far and mixed by their
two round trips, per-state medians, the report's rows, and bad arguments refused."""
from __future__ import annotations

import pytest

from bench import hostpair


def _pair(before, after, ours, ov):
    return {"round_trip_ns": [before, after], "state": hostpair.state(before, after), "ours_ms": ours,
            "openvino_ms": ov, "ratio": sum(ours) / 2 / ov}


def test_state_needs_both_round_trips_to_agree() -> None:
    assert hostpair.state(70.0, 80.0) == "near"
    assert hostpair.state(330.0, 310.0) == "far"
    assert hostpair.state(70.0, 330.0) == "mixed"
    assert hostpair.state(None, 70.0) == "unknown"


def test_pairs_are_compared_within_their_state() -> None:
    pairs = [_pair(70, 75, [7.0, 7.2], 6.8), _pair(80, 60, [6.8, 7.0], 6.5), _pair(70, 80, [7.4, 7.0], 7.0),
             _pair(330, 320, [13.0, 13.4], 8.8), _pair(320, 335, [12.0, 14.0], 8.0), _pair(75, 330, [10.0, 13.0], 8.0)]
    s = hostpair.by_state(pairs)
    assert list(s) == ["near", "far", "mixed"]
    assert s["near"]["pairs"] == 3 and s["far"]["pairs"] == 2 and s["mixed"]["pairs"] == 1
    assert s["near"]["tensortune_ms"] == pytest.approx(7.1) and s["near"]["openvino_ms"] == pytest.approx(6.8)
    assert s["near"]["ratio"] == pytest.approx(7.1 / 6.8)
    assert s["far"]["ratio"] == pytest.approx((13.2 / 8.8 + 13.0 / 8.0) / 2)
    md = hostpair.report({"cpu": "AMD EPYC (znver4, 2 cores)", "threads": 2, "pairs": 6, "slice_s": 0.3,
                          "date": "2026-12-07"}, [{"model": "hf:pvt_v2", "precision": "bf16", "states": s}])
    rows = [ln for ln in md.splitlines() if ln.startswith("| hf:pvt_v2 ")]
    assert [r.split("|")[3].strip() for r in rows] == ["near", "far", "mixed"]
    assert f"{7.1 / 6.8:.2f}x" in rows[0]


def test_bad_arguments_are_one_line() -> None:
    with pytest.raises(SystemExit, match="--pairs must be at least 1"):
        hostpair.main(["--pairs", "0"])
