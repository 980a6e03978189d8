"""bench.chameleon: the variants' tables and the paper's comparisons from an operator-suite folder."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tuners"))
from synthetic import FakeMeasurer, conv_landscape  # noqa: E402

from bench.chameleon import BASELINE, CHAMELEON, compare, first_reaching, main, settled  # noqa: E402
from bench.suite.ops import Curve  # noqa: E402
from bench.suite.specs import parse  # noqa: E402
from bench.suite.store import RunDir  # noqa: E402

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}
SMALL = {"feature": "knob", "warmup": 8, "iterations": 3}
EXPLORE = {"chameleon": {"n_episodes": 16, "min_steps": 8, "max_steps": 30},
           "sa": {"n_chains": 16, "max_steps": 40}}


def fake_curve(spec: str, task, seconds_per_trial: float) -> Curve:
    """One tuner through the fake measurer, recorded as the suite records it."""
    from tensortune.tuners import get_tuner

    name, opts = parse(spec)
    opts = {**opts, **SMALL}
    variant = opts.get("variant", "")
    opts["explorer_options"] = EXPLORE["sa"] if (name == "autotvm" or variant.startswith("sa")) else EXPLORE["chameleon"]
    if name == "autotvm":
        opts.pop("iterations")
    curve = Curve(spec)
    last = {"elapsed": 0.0, "build": 0.0, "run": 0.0}

    def on_batch(tuner, inputs, results) -> None:
        trials = (curve.rows[-1]["trials"] if curve.rows else 0) + len(results)
        t = trials * seconds_per_trial
        curve.add(trials, t, min(r.cost for r in results), len(results), 0, t * 0.5, t * 0.3, last)

    tuner = get_tuner(name, task, seed=0, batch_size=8, options=opts)
    res = tuner.tune(120, FakeMeasurer(conv_landscape), callbacks=[on_batch])
    curve.wall_s = curve.rows[-1]["elapsed_s"]
    curve.best_s = res.best_cost
    curve.search = {**tuner.search_report(), "stop_reason": res.stop_reason}
    return curve


def test_report_from_a_suite_folder(tmp_path) -> None:
    from tensortune.task import Task

    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    specs = [BASELINE, CHAMELEON, "chameleon:variant=sa-adaptive", "chameleon:variant=sa-diversity"]
    run = _folder(tmp_path / "r", "C6", specs, task)
    assert main([str(run.path)]) == 0
    out = json.loads((run.path / "chameleon.json").read_text())
    t = out["workloads"]["C6"]
    assert t[CHAMELEON]["k"] and all(8 <= k < 64 for k in t[CHAMELEON]["k"])
    assert t[CHAMELEON]["searches"] == 3 and t[CHAMELEON]["steps_per_search"] >= 8
    assert t[BASELINE]["k"] is None and t[BASELINE]["steps_per_search"] > 0
    assert t[CHAMELEON]["trials"] == 8 + sum(t[CHAMELEON]["plan_sizes"])
    steps = out["comparisons"]["steps"]["SA / PPO, adaptive sampling"]
    expect = t["chameleon:variant=sa-adaptive"]["steps_per_search"] / t[CHAMELEON]["steps_per_search"]
    assert abs(steps["geomean"] - expect) < 1e-9
    assert "C6" in out["comparisons"]["wall"]["per_workload"]
    md = (run.path / "chameleon.md").read_text()
    assert "search steps per search" in md and "| chameleon |" in md
    # the fake measurer is exact, so each kernel's re-measured latency is its search's best
    assert abs(t[CHAMELEON]["final_over_search"] - 1.0) < 1e-9
    assert "## A search's best against its kernel re-measured" in md and "| chameleon | 1.000 |" in md


def _folder(path, workload: str, specs: list[str], task) -> RunDir:
    run = RunDir(path).create()
    curves = [fake_curve(s, task, 0.5 if s == BASELINE else 0.4) for s in specs]
    rows = [{"workload": workload, "group": "g", "op": "conv2d", "seed": 0, "flops": task.flops, **r}
            for c in curves for r in c.rows]
    summary = {"group": "g", "op": "conv2d", "flops": task.flops,
               "tuners": {c.tuner: {"trials": c.rows[-1]["trials"], "wall_s": c.wall_s, "split": c.totals(),
                                    "search": c.search, "median_ms": c.best_s * 1e3, "check": "ok"} for c in curves}}
    run.add_ops(workload, rows, summary)
    return run


def test_report_over_several_folders(tmp_path, capsys) -> None:
    """Workloads measured on different kinds of machine, one folder each, reported together:
    each section names its folder, the comparisons average per-workload ratios, and a workload
    in two folders or several folders without --out are refused. Workloads are reported in
    natural order (C7 before C10), whichever folder holds each."""
    import pytest

    from tensortune.task import Task

    task = Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)
    a = _folder(tmp_path / "a", "C10", [BASELINE, CHAMELEON], task)
    b = _folder(tmp_path / "b", "C7", [BASELINE, CHAMELEON], task)
    out = tmp_path / "both"
    assert main([str(a.path), str(b.path), "--out", str(out)]) == 0
    rep = json.loads((out / "chameleon.json").read_text())
    assert list(rep["workloads"]) == ["C7", "C10"] and rep["folders"] == [str(a.path), str(b.path)]
    assert list(rep["comparisons"]["wall"]["per_workload"]) == ["C7", "C10"]
    md = (out / "chameleon.md").read_text()
    assert f"From `{a.path}`" in md and f"From `{b.path}`" in md and "Workloads from 2 folders" in md
    assert md.index("## C7") < md.index("## C10")
    assert not (a.path / "chameleon.md").exists()
    c = _folder(tmp_path / "c", "C10", [BASELINE], task)
    capsys.readouterr()
    assert main([str(a.path), str(c.path), "--out", str(tmp_path / "x")]) == 1
    assert "workload C10 is in" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([str(a.path), str(b.path)])
    assert e.value.code == 2


def test_settled_and_first_reaching() -> None:
    rows = [{"trials": 8, "elapsed_s": 1.0, "best_ms": 3.0}, {"trials": 16, "elapsed_s": 2.0, "best_ms": 2.0},
            {"trials": 24, "elapsed_s": 3.0, "best_ms": 2.0}, {"trials": 32, "elapsed_s": 4.0, "best_ms": 1.5}]
    assert settled(rows) == {"trials": 32, "seconds": 4.0, "best_ms": 1.5}
    assert first_reaching(rows, 2.0) == {"trials": 16, "seconds": 2.0}
    assert first_reaching(rows, 1.0) is None
    tables = {"w": {BASELINE: {"search_best_ms": 2.0, "final_ms": 2.0, "wall_s": 4.0, "baseline_over": 1.0},
                    CHAMELEON: {"search_best_ms": 1.5, "final_ms": 1.5, "wall_s": 4.0, "baseline_over": 1.3}}}
    cmp = compare(tables, {"w": {BASELINE: rows[:2], CHAMELEON: [rows[0], rows[3]]}})
    assert cmp["wall"]["per_workload"]["w"]["speedup"] == 2.0 / 4.0


def test_final_latency_is_compared_round_by_round_and_per_state() -> None:
    """The baseline's kernel and chameleon's timed in the same rounds: the host changed state
    after round 1 (copy 31 -> 41 GB/s) and slowed chameleon's kernel only. Over all rounds the
    state with more rounds decides (0.8); the report gives each state's ratio beside it."""
    from bench.chameleon import markdown, workload_table

    log = [{"copy_gbs": [g, g], "stable": True} for g in (31, 31, 41, 41, 41)]
    summary = {"flops": 1e9, "remeasure": {"rounds": log}, "tuners": {
        BASELINE: {"median_ms": 1.0, "rounds_ms": [1.0, 1.0, 1.0, 1.0, 1.0], "wall_s": 10.0},
        CHAMELEON: {"median_ms": 1.25, "rounds_ms": [0.98, 0.98, 1.25, 1.25, 1.25], "wall_s": 5.0}}}
    work = {BASELINE: [{"trials": 8, "elapsed_s": 4.0, "best_ms": 1.0}],
            CHAMELEON: [{"trials": 8, "elapsed_s": 2.0, "best_ms": 1.0}]}
    t = workload_table("C1", summary, work)
    assert t[CHAMELEON]["baseline_over"] == 1.0 / 1.25
    assert t[CHAMELEON]["baseline_over_by_state"] == [1.0 / 0.98, 1.0 / 1.25]
    assert t[BASELINE]["baseline_over"] == 1.0
    cmp = compare({"C1": t}, {"C1": work})
    assert cmp["wall"]["per_workload"]["C1"]["final_ratio"] == 1.0 / 1.25
    md = markdown({"C1": t}, cmp, "here", None, {"C1": "Re-measured in 5 interleaved rounds"})
    assert "| chameleon | 800.0 | 0.800 (1.020 / 0.800) |" in md and "Re-measured in 5 interleaved rounds" in md


def test_wall_time_where_the_re_measured_kernels_match() -> None:
    """The whole wall times count where chameleon's paired final is within 2% of the baseline's."""
    rows = [{"trials": 8, "elapsed_s": 1.0, "best_ms": 1.0}]
    tables = {w: {BASELINE: {"search_best_ms": 1.0, "wall_s": 400.0, "baseline_over": 1.0},
                  CHAMELEON: {"search_best_ms": 1.0, "wall_s": wall, "baseline_over": over}}
              for w, wall, over in (("near", 80.0, 0.99), ("far", 40.0, 0.9))}
    cmp = compare(tables, {w: {BASELINE: rows, CHAMELEON: rows} for w in tables})
    assert cmp["wall"]["matched"] == 1 and abs(cmp["wall"]["geomean_wall_ratio_matched"] - 5.0) < 1e-9


def _model_db(path: Path, trials: list[tuple[str, float | None]]) -> None:
    """A database of two tasks ``a``, ``b`` whose trials are ``(task, ms or None for a failure)``,
    plus a confirmation and an in-model timing, faster than any, that must not count."""
    from tensortune.database import Database, TaskRecord, TrialRecord

    with Database(path) as db:
        for key in ("a", "b"):
            db.add_task(TaskRecord(key, "conv2d", "conv2d", '{"kind": "llvm"}', 1e9, "{}"))
        for i, (key, ms) in enumerate(trials):
            db.add_trial(TrialRecord(key, i, {}, [ms / 1e3] if ms else [], "none" if ms else "runtime", tuner="x"))
        confirm = {"confirm": {"group": "g", "round": 1, "of": 1}}
        db.add_trial(TrialRecord("a", 98, {}, [1e-6], "none", tuner="x", extra=confirm))
        db.add_trial(TrialRecord("b", 99, {}, [1e-6], "none", tuner="in-model", extra=confirm))


def test_whole_model_section_from_a_suite_folder(tmp_path, capsys) -> None:
    """``--suite``: each system's cost, shares and steps from its kept tune output, its latency from
    the folder's benchmark, the baseline over chameleon, the weighted search bests and the tasks
    where chameleon's is within 2% of the baseline's."""
    import pytest

    from bench.chameleon import MODEL_BASELINE, search_bests

    suite = tmp_path / "suite"
    (suite / "models").mkdir(parents=True)
    _model_db(suite / "models" / "m-autotvm.db", [("a", 2.0), ("b", 3.0), ("a", 1.0), ("b", None)])
    _model_db(suite / "models" / "m-chameleon.db", [("a", 1.2), ("b", 3.05), ("a", 1.6)])
    weights = {"a": 2, "b": 1}
    assert search_bests(suite / "models" / "m-autotvm.db", {"a", "b"}) == {"a": pytest.approx(1.0),
                                                                          "b": pytest.approx(3.0)}
    assert search_bests(suite / "models" / "m-autotvm.db", {"b"}) == {"b": pytest.approx(3.0)}

    def tune_json(tuner: str, steps: int, calls: int, wall: float) -> dict:
        tasks = [{"workload_key": k, "weight": w, "trials": 2, "stop_reason": "time_budget" if tuner == MODEL_BASELINE
                  else "iterations", "search": {"explorer_stats": {"calls": calls, "steps": steps, "scored": 1}}}
                 for k, w in weights.items()]
        return {"tasks": tasks, "cost": {"wall_s": wall, "cpu_s": 2 * wall, "search_s": wall / 4, "build_s": wall / 2,
                                         "run_s": wall / 8}}

    (suite / "models" / "m-autotvm.tune.json").write_text(json.dumps(tune_json(MODEL_BASELINE, 300, 3, 3600.0)))
    (suite / "models" / "m-chameleon.tune.json").write_text(json.dumps(tune_json(CHAMELEON, 100, 2, 900.0)))
    (suite / "meta.json").write_text(json.dumps({
        "machine": {"machine_id": {"cpu_model": "AMD EPYC", "llvm_cpu": "znver4", "cores": 2}},
        "runs": [{"date": "2026-11-26"}, {"date": "2026-11-27"}]}))
    lat = lambda ms: {"median_ms": ms, "p25_ms": ms, "p75_ms": ms, "samples": 5}  # noqa: E731
    models = {"m": {"budget_s": 3600.0,
                    "systems": {MODEL_BASELINE: {"ok": True, "tune_wall_s": 3600.0, "run": 0},
                                CHAMELEON: {"ok": True, "tune_wall_s": 900.0, "run": 1}},
                    "bench": {"rows": [{"name": "tensortune autotvm", "outputs_match": True, "latency": lat(2.2)},
                                       {"name": "tensortune chameleon", "outputs_match": True, "latency": lat(2.0)},
                                       {"name": "tensortune untuned", "outputs_match": True, "latency": lat(2.5)}]}},
              "n": {"budget_s": 3600.0, "systems": {MODEL_BASELINE: {"ok": True}}, "bench": {"rows": []}}}
    (suite / "models.json").write_text(json.dumps(models))
    (suite / "paired-m-2026-11-27.json").write_text(json.dumps({"rounds": 15, "medians_ms": {
        "untuned": 2.6, "autotvm": 2.3, "chameleon": 2.5, "trimmer": 2.4}}))
    from tensortune.task import Task

    ops = _folder(tmp_path / "ops", "C6", [BASELINE, CHAMELEON],
                  Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4))
    out = tmp_path / "out"
    assert main([str(ops.path), "--suite", str(suite), "--out", str(out)]) == 0
    rep = json.loads((out / "chameleon.json").read_text())
    assert list(rep["models"]) == ["m"]  # n has no chameleon system
    base, cham = rep["models"]["m"]["systems"][MODEL_BASELINE], rep["models"]["m"]["systems"][CHAMELEON]
    assert (base["estimate_ms"], cham["estimate_ms"]) == (pytest.approx(2 * 1.0 + 3.0), pytest.approx(2 * 1.2 + 3.05))
    assert cham["tasks_within"] == 1  # b: 3.05 ms is within 2% of 3.0; a: 1.2 is not of 1.0
    assert cham["baseline_over"] == pytest.approx(1.1) and cham["baseline_wall_over"] == 4.0 and cham["estimated_tasks"] == 2
    assert base["steps_per_search"] == 100.0 and cham["steps_per_search"] == 50.0 and cham["trials"] == 4
    assert (cham["search_share"], cham["build_share"], cham["run_share"]) == (0.25, 0.5, 0.125)
    assert (base["tuned_on"], cham["tuned_on"], cham["stops"]) == ("2026-11-26", "2026-11-27", ["iterations"])
    md = (out / "chameleon.md").read_text()
    assert cham["baseline_over_paired"] == pytest.approx(2.3 / 2.5) and base["paired_ms"] == 2.3
    assert "## Whole models" in md and "### m" in md
    assert ("(`paired-m-2026-11-27.json`, 15 rounds, outputs checked): untuned 2.60 ms; autotvm 2.30 ms; "
            "chameleon 2.50 ms; baseline / chameleon 0.920.") in md
    assert "| chameleon | 2026-11-27 | 4 | 2 | iterations | 900 | 1800 | 25% / 50% / 12% | 50.0 | 5.45 | 1 of 2 |" in md
    capsys.readouterr()
    assert main([str(ops.path), "--suite", str(suite), "--models", "n", "--out", str(out)]) == 1
    assert "no --suite folder has benchmarked autotvm and chameleon systems of n" in capsys.readouterr().err
    assert main([str(ops.path), "--suite", str(suite), "--suite", str(suite), "--out", str(out)]) == 1
    assert "model m is in" in capsys.readouterr().err
