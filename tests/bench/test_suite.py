"""The benchmark suite (``python -m bench``): its bookkeeping, and ``--quick``'s code paths on a tiny budget.

The benchmark itself never runs here; the end-to-end test runs every part (peak, operators with a
tensortune tuner and MetaSchedule, a whole model with both, the report) on a 64^3 matmul and a
tiny ONNX model with budgets of a few trials and seconds, then checks the report's numbers against
the JSON and CSV files, its per-figure provenance, and that resuming under other settings or on
another machine is refused.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "models"))

from bench import common  # noqa: E402
from bench.suite import cli, provenance, report  # noqa: E402
from bench.suite.config import METASCHEDULE  # noqa: E402
from bench.suite.ops import Curve, remeasure  # noqa: E402
from bench.suite.remeasure import ROUNDS  # noqa: E402
from tensortune.measure.peak import roofline  # noqa: E402
from bench.suite.store import RunDir  # noqa: E402

#: The committed results folder, written before invocations recorded their machine.
OLD_SUITE = ROOT / "bench" / "results" / "suite"


def _row(tuner: str, batch: int, trials: int, t: float, best: float | None) -> dict:
    return {"workload": "W", "tuner": tuner, "batch": batch, "trials": trials, "elapsed_s": t, "best_ms": best,
            "flops": 1e9}


def test_time_to_quality_first_batch_within_target() -> None:
    work = {"a": [_row("a", 1, 8, 5.0, 2.0), _row("a", 2, 16, 9.0, 1.04), _row("a", 3, 24, 14.0, 1.0)],
            "b": [_row("b", 1, 8, 30.0, None), _row("b", 2, 16, 60.0, 1.5)]}
    best, per = report.time_to_quality(work, 0.95)
    assert best == 1.0
    assert per["a"] == {"seconds": 9.0, "trials": 16}  # 1.04 <= 1 / 0.95 = 1.0526
    assert per["b"] == {"seconds": None, "trials": None}


def test_curve_splits_wall_time_per_batch() -> None:
    c = Curve("random")
    last = {"elapsed": 0.0, "build": 0.0, "run": 0.0}
    c.add(4, 10.0, 0.002, 4, 0, 6.0, 3.0, last)  # 1 s of search
    c.add(8, 16.0, 0.003, 3, 1, 9.0, 5.0, last)  # 6 s: 3 build, 2 run, 1 search; the best stays 2 ms
    c.wall_s = 17.5
    assert [r["best_ms"] for r in c.rows] == [2.0, 2.0]
    assert [round(r["search_s"], 6) for r in c.rows] == [1.0, 1.0]
    assert c.errors == 1
    assert c.totals() == pytest.approx({"search_s": 2.0, "build_s": 9.0, "run_s": 5.0, "other_s": 1.5})


def test_rundir_replaces_a_workloads_rows(tmp_path: Path) -> None:
    run = RunDir(tmp_path).create()
    run.invocation = 2
    run.add_ops("C1", [{**_row("random", 1, 4, 1.5, 0.25), "best_ms": 0.25}], {"tuners": {}})
    run.add_ops("C2", [_row("random", 1, 4, 2.0, None)], {"tuners": {}})
    run.add_ops("C1", [_row("random", 1, 4, 1.0, 0.5), _row("random", 2, 8, 2.0, 0.4)], {"tuners": {"x": 1}})
    rows = run.ops_rows()
    assert [(r["workload"], r["batch"]) for r in rows] == [("C2", 1), ("C1", 1), ("C1", 2)]
    assert rows[0]["best_ms"] is None and rows[1]["best_ms"] == 0.5 and rows[1]["trials"] == 4
    assert run.ops_done() == {"C1", "C2"} and run.ops_summary()["C1"] == {"tuners": {"x": 1}, "run": 2}


def test_roofline_bounds() -> None:
    peak = {"peak_gflops": 200.0, "bandwidth_gbs": 20.0}
    assert roofline(50.0, 1.0, peak) == {"intensity": 1.0, "attainable_gflops": 20.0, "fraction": 2.5}
    assert roofline(100.0, 50.0, peak)["fraction"] == 0.5


def test_workloads_live_in_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENSORTUNE_WORKLOADS", raising=False)
    assert common.workloads_path() == ROOT / "bench" / "workloads.json"
    assert [w[1] for w in common.load_workloads(["resnet18_conv2d"])] == [f"C{i}" for i in range(1, 13)]
    monkeypatch.setenv("TENSORTUNE_WORKLOADS", str(ROOT / "missing.json"))
    with pytest.raises(SystemExit, match="missing.json not found"):
        common.workloads_path()


def _workloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A workloads.json of one tiny matmul (``TENSORTUNE_WORKLOADS`` overrides bench/workloads.json)."""
    wl = tmp_path / "workloads.json"
    wl.write_text(json.dumps({"square_matmul": {"MMT": {"M": 64, "N": 64, "K": 64}}}))
    monkeypatch.setenv("TENSORTUNE_WORKLOADS", str(wl))


def test_bad_arguments_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _workloads(tmp_path, monkeypatch)
    with pytest.raises(SystemExit, match="unknown tuner"):
        cli.main(["run", "--tuners", "nope", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"tuner 'autotvm:plan_sise=4': unknown option 'plan_sise'"):
        cli.main(["run", "--tuners", "autotvm:plan_sise=4", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="MetaSchedule takes no options"):
        cli.main(["run", "--tuners", "metaschedule:x=1", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="unknown workload"):
        cli.main(["run", "--workloads", "C99", "--suite", "ops", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="no such results folder"):
        cli.main(["report", str(tmp_path / "missing")])


MACHINE = {"cpu_model": "AMD EPYC 9R14", "llvm_cpu": "znver4", "cores": 2}


def _invocation(suites: list[str], **settings: Any) -> dict[str, Any]:
    st = {"suites": suites, "tuners": ["random", "metaschedule"], "budget": 2, "model_tuners": ["random"],
          "model_budget_s": 3.0, "ms_batch": 2, "rounds": 1, "seed": 0, "quality": 0.95, **settings}
    return {"date": "d", "machine": dict(MACHINE), "commit": "abc1234", "dirty": False, "threads": 2,
            "libraries": {"tvm": "0.27"}, "settings": st, "wall_s": 1.0}


def test_resume_rules() -> None:
    folder = Path("F")
    earlier = [_invocation(["peak", "ops"])]
    provenance.check_resume(folder, earlier, True, _invocation(["ops"], workloads=["C2"]))  # more workloads: fine
    provenance.check_resume(folder, earlier, True, _invocation(["models"], rounds=5))  # a part the folder lacks
    provenance.check_resume(folder, earlier, True, _invocation(["ops"], tuners=["metaschedule", "random"]))
    with pytest.raises(SystemExit, match=r"ops figures were measured with budget 2 \(asked: 3\).*--out NEW_FOLDER"):
        provenance.check_resume(folder, earlier, True, _invocation(["ops"], budget=3))
    for change in ({"tuners": ["random"]}, {"seed": 1}, {"rounds": 3}, {"ms_batch": 4}):
        with pytest.raises(SystemExit, match="resuming would mix them"):
            provenance.check_resume(folder, earlier, True, _invocation(["ops"], **change))
    threads = {**_invocation(["peak"]), "threads": 1}
    with pytest.raises(SystemExit, match="threads 2 \\(asked: 1\\)"):
        provenance.check_resume(folder, earlier, True, threads)
    models = [_invocation(["models"])]
    with pytest.raises(SystemExit, match="model_budget_s 3.0"):
        provenance.check_resume(folder, models, True, _invocation(["models"], model_budget_s=30.0))
    # another set of model tuners: a model's systems grow (MetaSchedule's batch is new, not other)
    more = _invocation(["models"], model_tuners=["random", "metaschedule"], ms_batch=4)
    provenance.check_resume(folder, models, True, more)
    with pytest.raises(SystemExit, match=r"ms_batch 4 \(asked: 8\)"):
        provenance.check_resume(folder, models + [more], True, _invocation(["models"], model_tuners=["metaschedule"],
                                                                          ms_batch=8))
    other = _invocation(["ops"])
    other["machine"]["cpu_model"] = "Intel Xeon"
    with pytest.raises(SystemExit, match="another machine .*AMD EPYC 9R14.*Intel Xeon.*--out NEW_FOLDER"):
        provenance.check_resume(folder, earlier, True, other)
    newer = {**_invocation(["ops"]), "libraries": {"tvm": "0.28"}}
    with pytest.raises(SystemExit, match="other libraries"):
        provenance.check_resume(folder, earlier, True, newer)
    with pytest.raises(SystemExit, match="no meta.json"):
        provenance.check_resume(folder, [], True, _invocation(["ops"]))
    provenance.check_resume(folder, [], False, _invocation(["ops"]))  # a new folder


def test_old_folder_is_refused_and_reported_honestly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _workloads(tmp_path, monkeypatch)
    old = tmp_path / "old"
    old.mkdir()
    for f in ("meta.json", "peak.json"):
        shutil.copy(OLD_SUITE / f, old / f)
    before = (old / "meta.json").read_bytes()
    with pytest.raises(SystemExit, match="did not record its machine.*--out NEW_FOLDER") as e:
        cli.main(["run", "--suite", "peak", "--out", str(old), "--no-progress"])
    assert isinstance(e.value.code, str) and "\n" not in e.value.code  # one line, non-zero exit
    assert (old / "meta.json").read_bytes() == before
    run = RunDir(old)
    runs, meta = run.runs(), run.read_json("meta")
    line = provenance.measured_on(runs, meta, [None], "ops")  # its results name no invocation
    assert line.startswith("Measured on a machine that invocations 1, 2 did not record (the folder's meta.json, "
                           "written by its last invocation on 2026-11-22 10:09:37, names znver4, 2 cores, CPU model "
                           "not recorded); from invocations 1 (2026-11-22 06:37:39, commit `0b6f769`, tree state not "
                           "recorded) and 2 (2026-11-22 09:44:13, commit `e543191`")
    assert line.endswith("these are the invocations that ran ops).")
    models = provenance.measured_on(runs, meta, [None], "models")  # the last invocation: meta.json's machine
    assert models.startswith("Measured on znver4, 2 cores (CPU model not recorded); from invocation 3 (")
    md = (OLD_SUITE / "report.md").read_text()  # the committed report says the same
    assert line in md and models in md


def _wrong_matmul(n: int) -> Any:
    """A 'MetaSchedule kernel' of the n^3 matmul that computes A x B^T instead of A x B."""
    import tvm
    from tvm import te

    a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[j, k], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")})


def test_remeasure_verifies_metaschedule_kernels() -> None:
    import tvm

    from tensortune.measure import MeasureOptions
    from tensortune.task import Task

    task = Task.from_op("matmul", {"M": 32, "N": 32, "K": 32})
    right = tvm.IRModule({"main": task.prim_func().with_attr("global_symbol", "main")})
    options = MeasureOptions(threads=1, number=1, repeat=1, min_repeat_ms=0)
    for mod, verified in ((right, True), (_wrong_matmul(32), False)):
        got = remeasure(task, [(METASCHEDULE, mod, "")], 1, options)[METASCHEDULE]
        assert got["verified"] is verified
        if verified:
            assert got["check"] == "ok" and got["median_ms"] > 0
        else:
            assert got["check"].startswith("wrong_answer") and got["median_ms"] is None


def test_remeasure_names_kernels_apart_from_their_tuner_specs() -> None:
    """A spec can hold a path (fasor:model=DIR): each kernel's file is named by its slot, so a
    slash is no folder and two specs with the same file-safe form stay apart."""
    from tensortune.measure import MeasureOptions
    from tensortune.task import Task

    task = Task.from_op("matmul", {"M": 32, "N": 32, "K": 32})
    options = MeasureOptions(threads=1, number=1, repeat=1, min_repeat_ms=0)
    specs = ["fasor:model=runs/a/b", "fasor:model=runs/a:b"]
    got = remeasure(task, [(t, task.default_config(), "") for t in specs], 1, options, probe=False)
    assert set(got) == {*specs, ROUNDS}
    assert all(got[t]["verified"] and got[t]["check"] == "ok" and got[t]["median_ms"] > 0 for t in specs)


def _tables(md: str) -> list[tuple[list[str], list[dict[str, str]]]]:
    """Every Markdown table of ``md``: (header, rows as header -> cell); escaped pipes kept in cells."""
    out: list[tuple[list[str], list[dict[str, str]]]] = []
    block: list[list[str]] = []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            block.append([c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
            continue
        if block:
            out.append((block[0], [dict(zip(block[0], r)) for r in block[2:]]))
            block = []
    return out


def _table(md: str, column: str) -> list[dict[str, str]]:
    hit = [rows for head, rows in _tables(md) if column in head]
    assert len(hit) == 1, column
    return hit[0]


def _num(cell: str) -> float | None:
    m = re.fullmatch(r"[<>]?(-?[\d.]+)(x|%)?", cell)
    return float(m.group(1)) if m else None


def _check_report_numbers(md: str, run: RunDir) -> None:
    """The numbers of report.md against ops_summary.json, ops_batches.csv, peak.json and models.json."""
    summary, peak, models = run.ops_summary(), run.read_json("peak"), run.read_json("models")
    m = re.search(r"peak \*\*([\d.]+) GFLOP/s\*\*.*bandwidth \*\*([\d.]+) GB/s\*\*", md)
    assert m and float(m.group(1)) == pytest.approx(peak["peak_gflops"], abs=0.051)
    assert float(m.group(2)) == pytest.approx(peak["bandwidth_gbs"], abs=0.051)
    ops = {r["workload"]: r for r in _table(md, "best / roofline")}
    assert set(ops) == set(summary)
    for wl, s in summary.items():
        best = 0.0
        for t, v in s["tuners"].items():
            cell = ops[wl][f"{t} GFLOP/s"]
            if v["median_ms"]:
                gf = s["flops"] / (v["median_ms"] * 1e-3) / 1e9
                assert _num(cell) == pytest.approx(gf, abs=0.051), (wl, t)
                best = max(best, gf)
            else:
                assert cell.startswith("(") and v["check"][:20] in cell
        bound = min(peak["peak_gflops"], s["flops"] / s["bytes"] * peak["bandwidth_gbs"])
        assert _num(ops[wl]["best / roofline"]) == pytest.approx(100 * best / bound, abs=0.51)
    ttq = {r["workload"]: r for r in _table(md, "MS / random")}
    rows = run.ops_rows()
    for wl, s in summary.items():
        mine = [r for r in rows if r["workload"] == wl]
        target = min(r["best_ms"] for r in mine if r["best_ms"]) / 0.95
        for t in s["tuners"]:
            hit = [r["elapsed_s"] for r in sorted(mine, key=lambda r: r["batch"]) if r["tuner"] == t and r["best_ms"]
                   and r["best_ms"] <= target * (1 + 1e-12)]
            assert _num(ttq[wl][t]) == (pytest.approx(hit[0], abs=0.051) if hit else None), (wl, t)
    wall = {r["tuner"]: r for r in _table(md, "s per trial")}
    for t in wall:
        trials = sum(s["tuners"][t]["trials"] for s in summary.values() if t in s["tuners"])
        secs = sum(sum(s["tuners"][t]["split"].values()) for s in summary.values() if t in s["tuners"])
        assert int(wall[t]["trials"]) == trials
        assert _num(wall[t]["wall (min)"]) == pytest.approx(secs / 60, abs=0.051)
        assert _num(wall[t]["s per trial"]) == pytest.approx(secs / max(1, trials), abs=0.0051)
    lat = _table(md, "latency (ms)")
    expected = [(m, r) for m, e in models.items() for r in e["bench"]["rows"]]
    assert [(r["model"], r["system"]) for r in lat] == [(m, r["name"]) for m, r in expected]
    for got, (m, r) in zip(lat, expected):
        want = r["latency"]["median_ms"] if r["latency"] else None
        assert _num(got["latency (ms)"]) == (pytest.approx(want, abs=0.0051) if want else None), got
        assert got["outputs"].startswith("match" if r["outputs_match"] else "FAILED")
        system = models[m]["systems"].get(r["name"].replace("tensortune ", ""))
        if system:
            assert _num(got["tuning wall (min)"]) == pytest.approx(system["tune_wall_s"] / 60, abs=0.051)
            assert got["trials"] == str(system["trials"])
            if "tasks_measured" in system:
                assert got["tasks tuned"] == f"{system['tasks_measured']}/{system['tasks']}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quick_code_paths_on_a_tiny_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tiny import one_conv  # the whole-model path of every system at the fewest tasks

    from tensortune.models.reference import export_onnx
    from tensortune.target import machine_id

    _workloads(tmp_path, monkeypatch)
    module, inputs = one_conv()
    onnx = export_onnx(module, inputs, str(tmp_path / "tiny.onnx"))
    out = tmp_path / "results"
    same = ["--quick", "--tuners", "random,metaschedule", "--budget", "2", "--workloads", "MMT", "--models", onnx,
            "--model-tuners", "random,metaschedule", "--model-budget", "3", "--ms-batch", "2", "--rounds", "1",
            "--out", str(out), "--no-progress"]
    assert cli.main(["run", *same]) == 0
    run = RunDir(out)
    rows = run.ops_rows()
    assert {r["tuner"] for r in rows} == {"random", "metaschedule"}
    assert all(r["workload"] == "MMT" and r["trials"] <= 2 for r in rows)
    s = run.ops_summary()["MMT"]
    assert s["tuners"]["random"]["check"] == "ok" and s["tuners"]["random"]["verified"] is True
    assert s["tuners"]["random"]["median_ms"] > 0 and s["tuners"]["metaschedule"]["trials"] == 2
    assert s["library"]["name"] == "numpy" and s["library"]["median_ms"] > 0  # the library anchor, same rounds
    peak = run.read_json("peak")
    assert peak["peak_gflops"] > 0
    models = run.read_json("models")["tiny"]
    ms = models["systems"]["metaschedule"]
    assert models["systems"]["random"]["ok"] and ms["candidates_per_round"] == 2
    rnd = models["systems"]["random"]  # where its time went: the measurer's building and running, the rest
    assert rnd["build_s"] > 0 and rnd["run_s"] > 0 and rnd["search_s"] >= 0
    assert 0 < rnd["confirm_s"] < rnd["tune_wall_s"]  # `tune` ran the in-model check, inside its wall time
    # the model MetaSchedule tuned is the one compile_relax builds: its tuned tasks are found again
    assert ms["tasks"] >= 1 and ms["tasks_applied"] == ms["tasks_measured"] >= 1
    names = {r["name"]: r for r in models["bench"]["rows"]}
    assert {"tensortune random", "tensortune untuned", "metaschedule", "onnxruntime"} <= set(names)
    assert names["tensortune random"]["outputs_match"] and names["metaschedule"]["outputs_match"]
    # every result names the invocation that measured it; the invocation its machine, commit and settings
    assert s["run"] == peak["run"] == models["run"] == models["systems"]["random"]["run"] == ms["run"] == 0
    first = run.read_json("meta")["runs"][0]
    assert first["machine"] == machine_id() and first["threads"] >= 1 and first["commit"]
    assert first["dirty"] in (True, False) and first["libraries"]["tvm"]
    # a second run with the same settings resumes: everything is done, nothing is measured again
    assert cli.main(["run", "--suite", "ops,models", *same]) == 0
    assert len(run.ops_rows()) == len(rows) and run.ops_summary()["MMT"]["run"] == 0
    meta = run.read_json("meta")  # both invocations listed with their own settings and times
    assert [sorted(r["settings"]["suites"]) for r in meta["runs"]] == [["models", "ops", "peak"], ["models", "ops"]]
    assert meta["runs"][0]["wall_s"] > 0 and meta["wall_s"] == pytest.approx(sum(r["wall_s"] for r in meta["runs"]))
    # other settings, or another machine, are refused before anything is written
    saved = (out / "meta.json").read_bytes()
    with pytest.raises(SystemExit, match=r"budget 2 \(asked: 3\).*--out NEW_FOLDER"):
        cli.main(["run", "--suite", "ops", *same, "--budget", "3"])
    assert (out / "meta.json").read_bytes() == saved
    elsewhere = json.loads(saved)
    elsewhere["runs"][0]["machine"]["cpu_model"] = "Some Other CPU"
    (out / "meta.json").write_text(json.dumps(elsewhere))
    with pytest.raises(SystemExit, match="another machine.*Some Other CPU.*--out NEW_FOLDER"):
        cli.main(["run", "--suite", "ops", *same])
    (out / "meta.json").write_bytes(saved)
    assert cli.main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "## Operators" in md and "| MMT |" in md and "## Whole models" in md and "Energy:" in md
    assert "best / library" in md and "measured their template's default config first" in md
    assert "### Where each system's tuning time went" in md and "| tiny | random | " in md
    _check_report_numbers(md, run)
    # each table and figure says where it was measured: this machine, this commit, invocation 1
    where = f"Measured on {provenance.machine_text(machine_id())}; from invocation 1 ({first['date']}, " \
            f"{provenance.commit_text(first)})."
    sections = md.split("\n## ")
    assert where in next(x for x in sections if "Ceiling:" in x)
    assert where in next(x for x in sections if x.startswith("Operators"))
    assert where in next(x for x in sections if x.startswith("Whole models"))
    for png in ("curves_time.png", "curves_trials.png", "ttq.png", "breakdown.png", "roofline.png", "models.png"):
        assert (out / png).stat().st_size > 1000, png
        caption = next(x for x in md.splitlines() if x.startswith(f"{png}: "))
        assert caption.count(where) == (2 if png == "roofline.png" else 1), caption
    assert not list(out.glob(".*.tmp*")), "temporary files of atomic writes left behind"
    # a run stopped after every system tuned but before the benchmark: MetaSchedule is not tuned
    # again (its database is read back from its folder), and its model is benchmarked with the rest
    saved_models = run.read_json("models")
    del saved_models["tiny"]["bench"]
    run.write_json("models", saved_models)
    assert cli.main(["run", "--suite", "models", *same]) == 0
    again = run.read_json("models")["tiny"]
    assert again["systems"] == models["systems"] and again["run"] == 2
    names = {r["name"]: r for r in again["bench"]["rows"]}
    assert names["metaschedule"]["outputs_match"] and names["tensortune random"]["outputs_match"]
    # a system tuned before `tune` ran the in-model check gets it with --confirm-tuned, and its
    # model is benchmarked again (the earlier benchmark kept beside)
    saved_models = run.read_json("models")
    del saved_models["tiny"]["systems"]["random"]["confirm_s"]
    run.write_json("models", saved_models)
    assert cli.main(["run", "--suite", "models", *same, "--confirm-tuned"]) == 0
    checked = run.read_json("models")["tiny"]
    rnd = checked["systems"]["random"]
    assert rnd["confirm_s"] > 0 and rnd["tune_wall_s"] == pytest.approx(rnd["tune_wall_s_before_confirm"] + rnd["confirm_s"])
    assert rnd["confirm"]["run"] == 3 and set(rnd["confirm"]["latency_ms"]) >= {"tuned", "untuned"}
    assert len(checked["benches_before_confirm"]) == 1 and checked["run"] == 3
    assert (out / "models" / "tiny-random.db.confirm.json").exists()
    assert cli.main(["report", str(out)]) == 0
    md = (out / "report.md").read_text()
    row = next(x for x in md.splitlines() if x.startswith("| tiny | random | ") and x.count("|") == 11)
    cells = [c.strip() for c in row.split("|")[1:-1]]  # check (s), switched, untuned, tuned, confirmed, kept, before, after
    assert "### In-model check" in md and cells[5] != "-" and cells[8] != "-" and cells[9] != "-", row
    # the kept best kernels are timed again: new rounds with the probe, the earlier figures kept
    assert cli.main(["remeasure", str(out), "--rounds", "2"]) == 0
    again = run.ops_summary()["MMT"]
    assert again["run"] == 0 and again["remeasure"]["run"] == 4 and len(again["remeasure"]["rounds"]) == 2
    assert all(len(e["rounds_ms"]) == 2 for e in again["tuners"].values()) and again["library"]["name"] == "numpy"
    assert again["remeasures_before"][0]["tuners"]["random"]["median_ms"] == s["tuners"]["random"]["median_ms"]
    assert run.read_json("meta")["runs"][4]["settings"]["suites"] == ["remeasure"]
    assert len(run.ops_rows()) == len(rows)
    with pytest.raises(SystemExit, match="no finished workload C9"):
        cli.main(["remeasure", str(out), "--workloads", "C9"])
    # last, so that everything above is checked whether or not it worked: MetaSchedule must have
    # produced a kernel that the suite verified (it never checks its own) and tuned part of the model
    ms_op = s["tuners"]["metaschedule"]
    assert ms_op["check"] == "ok" and ms_op["verified"] is True and ms_op["median_ms"] > 0, ms_op
    assert ms["ok"] and ms["tasks_measured"] >= 1, ms
    assert len(ms["tasks_without_valid"]) < ms["tasks_measured"], f"no MetaSchedule candidate built and ran: {ms}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tuner_specs_history_and_start_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuner with options is its own column; ``transfer=true`` tunes with a database kept in the
    results folder across workloads; ``--no-default-start`` is recorded and reported."""
    from tensortune.database import Database

    _workloads(tmp_path, monkeypatch)
    out = tmp_path / "specs"
    spec = "autotvm:transfer=true:plan_size=4:warmup=4:feature=knob"
    assert cli.main(["run", "--suite", "ops", "--tuners", f"random,{spec}", "--budget", "4", "--workloads", "MMT",
                     "--rounds", "1", "--no-default-start", "--no-library", "--out", str(out), "--no-progress"]) == 0
    run = RunDir(out)
    s = run.ops_summary()["MMT"]
    assert set(s["tuners"]) == {"random", spec} and s["library"] is None
    assert all(v["verified"] for v in s["tuners"].values())
    (db_path,) = (out / "history").glob("*.db")
    with Database(db_path, readonly=True) as db:
        (task,) = db.tasks()
        assert db.count(task.workload_key) == 4
    assert run.read_json("meta")["runs"][0]["settings"]["start_from_default"] is False
    assert cli.main(["report", str(out)]) == 0
    assert "started without their template's default config" in (out / "report.md").read_text()


def test_curve_round_trips_through_json_with_its_best_kernel() -> None:
    import tvm

    from tensortune.task import Task

    task = Task.from_op("matmul", {"M": 32, "N": 32, "K": 32})
    tuned = Curve("random", rows=[{"trials": 2, "best_ms": 0.5}], wall_s=3.0, best_s=5e-4,
                  best=task.space.get(7), errors=1, note="n", search={"steps": 3})
    back = Curve.from_json(json.loads(json.dumps(tuned.to_json())), task)
    assert back == tuned and back.best.index == 7
    ms = Curve(METASCHEDULE, best=tvm.IRModule({"main": task.prim_func().with_attr("global_symbol", "main")}))
    again = Curve.from_json(json.loads(json.dumps(ms.to_json())), task)
    tvm.ir.assert_structural_equal(again.best, ms.best)
    assert again.best_s == float("inf")
    assert Curve.from_json(Curve("none").to_json(), task).best is None


@pytest.mark.slow  # end to end: a suite run stopped and resumed
def test_a_run_stopped_within_a_workload_resumes_at_its_first_unfinished_tuner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.suite import ops

    _workloads(tmp_path, monkeypatch)
    out = tmp_path / "results"
    args = ["run", "--suite", "ops", "--tuners", "random,genetic", "--budget", "2", "--workloads", "MMT",
            "--rounds", "1", "--no-library", "--out", str(out), "--no-progress"]
    real, ran = ops.run_tensortune, []

    def stop_at_genetic(tuner: str, *a: Any, **k: Any) -> Any:
        if tuner == "genetic":
            raise RuntimeError("the session ended")
        ran.append(tuner)
        return real(tuner, *a, **k)

    monkeypatch.setattr(ops, "run_tensortune", stop_at_genetic)
    with pytest.raises(RuntimeError, match="session ended"):
        cli.main(args)
    run = RunDir(out)
    assert ran == ["random"] and not run.ops_summary() and run.tuner_done("MMT", "random")["run"] == 0

    def record(tuner: str, *a: Any, **k: Any) -> Any:
        ran.append(tuner)
        return real(tuner, *a, **k)

    monkeypatch.setattr(ops, "run_tensortune", record)
    assert cli.main(args) == 0
    assert ran == ["random", "genetic"]  # random was kept, not run again
    s = run.ops_summary()["MMT"]
    assert set(s["tuners"]) == {"random", "genetic"} and all(v["verified"] for v in s["tuners"].values())
    assert {r["tuner"] for r in run.ops_rows()} == {"random", "genetic"}
    assert not (out / "partial").exists() or not any((out / "partial").iterdir())


def test_against_metaschedule_gives_each_system_its_time_split_and_ratios() -> None:
    def row(name: str, ms: float) -> dict[str, Any]:
        return {"name": name, "latency": {"median_ms": ms}}

    models = {"m": {"systems": {
        METASCHEDULE: {"ok": True, "tune_wall_s": 1000.0, "build_s": 200.0, "run_s": 600.0, "search_s": 200.0},
        "fasor": {"ok": True, "tune_wall_s": 100.0, "build_s": 40.0, "run_s": 40.0, "search_s": 20.0},
        "autotvm": {"ok": False, "tune_wall_s": 50.0, "build_s": 1.0, "run_s": 1.0}},  # failed: no row
        "bench": {"rows": [row("metaschedule", 12.0), row("tensortune fasor", 10.0)]}},
        "other": {"systems": {"fasor": {"ok": True, "tune_wall_s": 9.0, "build_s": 1.0, "run_s": 1.0}}}}
    md = report.against_metaschedule(models)
    rows = [x for x in md if x.startswith("| m |") or x.startswith("| other |")]
    # measurement 80 s against 800 (-90%), search 20 against 200 (-90%), latency 12/10, wall 1000/100
    assert rows == ["| m | fasor | -90.0% | -90.0% | 1.20x | 10.00x |"]
    assert report.against_metaschedule({"other": models["other"]}) == []  # no MetaSchedule, no table
    del models["m"]["bench"]  # not benchmarked (yet): the time columns stay, the latency is "-"
    assert "| m | fasor | -90.0% | -90.0% | - | 10.00x |" in report.against_metaschedule(models)
