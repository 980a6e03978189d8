"""bench.survey's report: ratios only where the survey reached the goal, and each survey's rounds."""
from __future__ import annotations

from bench.survey import goal_cell, ratios, render


def row(**kw) -> dict:
    base = {"model": "mobilenet_v2", "tuner": "autotvm", "untuned_ms": 3.15, "sequential_ms": 2.99,
            "sequential_wall_s": 3598.0, "sequential_cpu_s": 5459.0, "goal_ms": 3.05, "survey_ms": 3.04,
            "survey_wall_s": 1200.0, "survey_cpu_s": 1800.0, "survey_stop": "latency goal",
            "survey_rounds": [3.36, 3.06, 3.03], "survey_changes": [-0.09, -0.01],
            "survey_over_sequential": 1.017, "reached": True}
    return {**base, **kw}


def test_ratios_only_where_the_goal_was_reached() -> None:
    assert ratios(row()) == "3.00x | 3.03x"
    # the first survey of mobilenet_v2 stopped short at 3.17 ms: 4.76x less wall time than the
    # sequential run, but for a model no faster than untuned; no ratio is given for it
    assert ratios(row(survey_ms=3.17, reached=False, survey_stop="rate of improvement")) == "- | -"
    assert ratios(row(sequential_cpu_s=None)) == "3.00x | -x"


def test_the_goal_is_a_speedup_over_untuned_or_an_older_runs_latency() -> None:
    assert goal_cell(row(goal_ms=None, goal_speedup=1.053)) == "1.053x untuned"
    assert goal_cell(row()) == "3.05 ms"


def test_render_gives_the_table_and_each_rounds_changes() -> None:
    text = render([row(), row(model="resnet18", reached=False, survey_ms=9.0, survey_stop="rate of improvement",
                              survey_rounds=[10.0, 9.5], survey_changes=[-0.05])], "autotvm", 3600)
    lines = text.splitlines()
    assert lines[0] == "# Survey tuning against sequential tuning"
    table = [ln for ln in lines if ln.startswith("| mobilenet_v2") or ln.startswith("| resnet18")]
    assert table[0].endswith("| latency goal | 1.017 | yes | 3.00x | 3.03x |")
    assert table[1].endswith("| rate of improvement | 1.017 | no | - | - |")
    assert "- mobilenet_v2: 3.36 ms → 3.06 ms (-9.0%) → 3.03 ms (-1.0%)" in lines
    assert "- resnet18: 10.00 ms → 9.50 ms (-5.0%)" in lines
    # an older survey.json without paired changes still renders
    old = row()
    del old["survey_changes"], old["survey_over_sequential"]
    assert "- mobilenet_v2: 3.36 ms → 3.06 ms → 3.03 ms" in render([old], "autotvm", 3600)
