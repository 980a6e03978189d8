"""The model commands: tasks, tune, compile, bench (on a tiny ONNX file)."""
from __future__ import annotations

import json
import os

import pytest

from tensortune.cli import main
from tensortune.models.reference import export_onnx

from tiny import dense_class, one_conv, tiny


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    m, x = tiny()
    return export_onnx(m, x, str(tmp_path_factory.mktemp("m") / "tiny.onnx"))


@pytest.mark.slow  # end to end: a model through the command line
def test_tasks_tune_compile_bench(onnx_path, tmp_path, capsys):
    assert main(["tasks", onnx_path, "--json"]) == 0
    tasks = json.loads(capsys.readouterr().out)
    assert {"conv2d_nchwc-add-relu", "depthwise_conv2d_nchwc-add-clip-add", dense_class()} <= {t["kernel_class"] for t in tasks}
    db = str(tmp_path / "m.db")
    assert main(["tune", onnx_path, "--tuner", "random", "--trials", "2", "--db", db, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tasks_measured"] == len(out["tasks"]) and all(t["trials"] == 2 for t in out["tasks"])
    assert out["estimated_total_ms"] > 0
    # the in-model check ran at the end, inside the reported wall time
    conf = out["in_model_check"]
    assert conf["variants"][0]["ok"] and conf["tasks"] and 0 < conf["wall_s"] <= out["wall_s"]
    assert out["cost"]["check_s"] == conf["wall_s"]
    # rerun: resumes, nothing measured again
    assert main(["tune", onnx_path, "--tuner", "random", "--trials", "2", "--db", db, "--json",
                 "--scheduler", "round-robin", "--no-check"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert sum(t["measured_this_run"] for t in again["tasks"]) == 0
    assert again["in_model_check"] == {"skipped": "--no-check"}
    assert main(["check", onnx_path, "--db", db, "--rounds", "1", "--runs", "1", "--json"]) == 0
    conf = json.loads(capsys.readouterr().out)
    assert conf["model"] == "tiny" and len(conf["tasks"]) == len(tasks) and conf["latency_ms"]["confirmed"] > 0
    lib = str(tmp_path / "tiny.so")
    assert main(["compile", onnx_path, "--db", db, "-o", lib, "--json"]) == 0
    comp = json.loads(capsys.readouterr().out)
    assert comp["counts"]["tuned"] == len(tasks) and os.path.exists(lib) and os.path.exists(lib + ".json")
    assert main(["bench", onnx_path, "--db", db, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in rep["rows"]}
    assert rep["reference"] == "onnxruntime"
    assert rows["tensortune tuned"]["outputs_match"] and rows["tensortune tuned"]["latency"]["median_ms"] > 0
    assert rows["tensortune untuned"]["outputs_match"]
    # profile: every fused function timed inside the model, next to its task's stored latency
    assert main(["profile", onnx_path, "--db", db, "--json", "--runs", "3", "--no-peak"]) == 0
    prof = json.loads(capsys.readouterr().out)
    kernels = [f for f in prof["funcs"] if f["task"]]
    assert {f["kernel_class"] for f in kernels} == {t["kernel_class"] for t in tasks}
    assert all(f["ms"] > 0 and f["calls"] >= 1 and f["source"] == "tuned" and f["stored_ms"] > 0 for f in kernels)
    assert all(f["bytes"] > 0 and f["gbs"] > 0 and f["bound"] in ("compute", "memory") for f in kernels)
    assert prof["total_ms"] > 0 and prof["sum_ms"] > 0
    # the ONNX file's Clip (TIR maximum/minimum calls) follows the block too: only the edges transform
    assert prof["layout"].startswith("layouts: NCHW8c for 2/2") and "2 layout transforms" in prof["layout"]
    assert main(["profile", onnx_path, "--runs", "2", "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "measured peak" in text and "copy" in text and "%roof" in text and "more functions" in text


@pytest.mark.slow  # end to end: a model through the command line
def test_survey_tuning_times_the_model_each_round(tmp_path, capsys):
    m, x = one_conv()  # a survey round tunes every task: the fewest tasks
    onnx_path = export_onnx(m, x, str(tmp_path / "one_conv.onnx"))
    db = str(tmp_path / "s.db")
    assert main(["tune", onnx_path, "--tuner", "random", "--scheduler", "survey", "--trials-per-round", "3",
                 "--trials", "9", "--speedup-goal", "50", "--db", db, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rep = out["survey"]
    assert rep["untuned_ms"] > 0 and rep["rounds"][0]["round"] == 0 and len(rep["rounds"]) >= 2
    assert all(r["latency_ms"] > 0 for r in rep["rounds"]) and rep["stop"] != "speed-up goal"
    # each round's speed-up over untuned (timed beside it) and its paired change
    assert rep["speedup_goal"] == 50 and all(r["speedup"] > 0 and r["roi"] is not None for r in rep["rounds"][1:])
    assert all(t["trials"] <= 9 for t in out["tasks"]) and all(t["trials"] % 3 == 0 for t in out["tasks"])


@pytest.mark.parametrize("argv, msg", [
    (["tune", "nosuchmodel", "--trials", "1", "--db", "x.db"], "no such file"),
    (["tune", "resnet18", "--db", "x.db"], "give --trials N"),
    (["tune", "resnet18", "--trials", "1", "--db", "x.db", "--scheduler", "lottery"], "unknown scheduler"),
    (["tune", "resnet18", "--trials", "1", "--db", "x.db", "--tuner", "magic"], "unknown tuner"),
    (["compile", "nosuchmodel", "-o", "x.so"], "no such file"),
    (["tune", "resnet18", "--db", "x.db", "--scheduler", "survey", "--speedup-goal", "0.9"], "at least 1"),
])
def test_bad_input_exits_2_in_one_line(argv, msg, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err
    assert not os.path.exists(tmp_path / "x.db")
