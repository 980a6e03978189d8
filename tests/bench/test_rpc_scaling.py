"""The RPC scaling study end to end at its smallest: a real tracker and two servers, the timing
simulated, two devices measuring about twice as fast as one."""
from __future__ import annotations

import json

import pytest

from bench import rpc_scaling


@pytest.mark.alone
@pytest.mark.slow  # a tracker and two servers
@pytest.mark.timeout(600)
def test_two_simulated_devices_measure_faster_than_one(tmp_path) -> None:
    out = tmp_path / "rs"
    assert rpc_scaling.main(["--devices", "1,2", "--device-s", "0.5", "--trials", "8", "--batch", "8",
                             "--rounds", "1", "--out", str(out)]) == 0
    doc = json.loads((out / "scaling.json").read_text())
    one, two = doc["summary"]
    assert [r["measured"] for r in doc["runs"]] == [8, 8] and one["errors"] == two["errors"] == 0
    assert two["speedup"] > 1.4, doc["summary"]  # at best 2: the rest is the driver's overhead
    assert one["overhead_per_trial_s"] > 0 and "| 2 |" in (out / "report.md").read_text()


def test_bad_arguments_are_one_line(capsys) -> None:
    assert rpc_scaling.main(["--devices", "0"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
