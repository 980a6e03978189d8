"""The final re-measurement of an operator workload, and the paired comparisons read from it.

Every tuner's best kernel is built again and timed in interleaved rounds (the order rotated from
round to round) by tensortune's runner, its output checked against the reference in every round;
numpy or PyTorch may take a turn in each round too (the library anchor).

A host can change state for minutes at a time in a way that moves some kernels and not others
(2026-11-26, znver4: every template kernel 1.07 <-> 1.25 ms together, MetaSchedule's and PyTorch's
steady, while a large copy ran 31 <-> 41 GB/s at the same moments). A median over rounds then
depends on how many rounds fell in each state, and two kernels timed in different states cannot
be compared. So each round records:

* the **copy probe** (:class:`tensortune.measure.peak.CopyProbe`, GB/s) before and after it;
* the **sentinel**: the round's first kernel timed again at its end.

A round is *stable* when the sentinel's two times agree within :data:`SENTINEL_DRIFT` and the
probe within :data:`PROBE_DRIFT`: no state change happened inside it. Comparisons
(:func:`paired_ratio`) are medians of per-round ratios over the stable rounds, so each pair of
kernels is compared within one state, and :func:`states` splits the stable rounds by the probe when
they fall in two clearly apart groups, so a report can give the ratio in each.

``python -m bench remeasure RESULTS`` runs this again on a folder's kept best kernels.
"""
from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
from typing import Any

from tensortune.measure import BuildResult, MeasureInput, MeasureOptions, Measurer
from tensortune.task import Task

from . import metaschedule as msa
from .config import METASCHEDULE
from .specs import slug

#: The name of the library anchor among the re-measured systems.
LIBRARY = "library"
#: The key of the rounds' record in :func:`remeasure`'s result (and ``"remeasure"`` in a summary).
ROUNDS = "rounds"
#: A round is stable when its first kernel's time at its end is within this fraction of its first time ...
SENTINEL_DRIFT = 0.05
#: ... and the copy probe after it within this fraction of the probe before it.
PROBE_DRIFT = 0.10
#: Stable rounds whose probes span less than this factor are one state; beyond it they are split at
#: the widest gap between sorted probe values (two states).
STATE_SPREAD = 1.15


def _artifact(task: Task, best: Any, tuner: str, out_dir: str, name: str) -> str | None:
    """Build a best kernel once into ``out_dir/NAME.so`` (None: it does not build). ``name`` is a
    file name, not the tuner spec: a spec can hold a path (``fasor:cost_model.folder=DIR``)."""
    from tensortune.measure.worker import build_candidate
    from tensortune.target import make_target

    if best is None:
        return None
    path = os.path.join(out_dir, f"{name}.so")
    if tuner == METASCHEDULE:
        try:
            return msa.export_module(best, make_target(task.target_json), path)
        except Exception:  # noqa: BLE001 - a kernel that does not build is a result
            return None
    kind, built, _, _ = build_candidate(task.json_text, best.to_json()["knobs"], out_dir)
    if kind != "none" or built is None:
        return None
    shutil.move(built, path)
    return path


def _median(xs: list[float | None], use: list[bool]) -> tuple[float | None, str]:
    """Median of the values of the rounds in ``use`` when at least half the rounds are there,
    else of all rounds; and which (``"stable"`` or ``"all"``)."""
    chosen = [x for x, u in zip(xs, use) if u and x is not None]
    every = [x for x in xs if x is not None]
    if chosen and 2 * sum(use) >= len(use):
        return statistics.median(chosen), "stable"
    return (statistics.median(every) if every else None), "all"


def remeasure(task: Task, kernels: list[tuple[str, Any, str]], rounds: int, options: MeasureOptions,
              library: bool = False, probe: bool = True) -> dict[str, dict[str, Any]]:
    """Time each ``(tuner, best kernel, note)`` of ``kernels`` in ``rounds`` interleaved rounds (see
    the module); ``note`` says why there is no kernel when it is None.

    Returns tuner -> ``median_ms`` (over the stable rounds when they are at least half, see
    ``median_of``), ``samples_ms`` (every timing), ``rounds_ms`` (one entry per round, None where
    not timed), ``check`` (``ok`` or why not) and ``verified`` (True only when every round checked
    the output and it matched; a kernel not verified has no median); ``"library"`` -> the same
    for numpy / PyTorch with its ``name``; and ``"rounds"`` -> each round's ``order``,
    ``copy_gbs`` (before, after), ``sentinel``, ``sentinel_ms`` and ``stable``."""
    from tensortune.measure.peak import CopyProbe
    from tensortune.utils.libs import has_library, library_latency

    out: dict[str, dict[str, Any]] = {}
    tmp = tempfile.mkdtemp(prefix="tensortune-remeasure-")
    try:
        libs = {t: _artifact(task, k, t, tmp, f"{i}-{slug(t)}") for i, (t, k, _) in enumerate(kernels)}
        check = {t: "ok" if libs[t] else ("best kernel did not build" if k is not None else note or "no kernel")
                 for t, k, note in kernels}
        order = [t for t in libs if libs[t]]
        with_lib = library and has_library(task)
        turns = order + [LIBRARY] * with_lib
        per_round: dict[str, list[float | None]] = {t: [] for t in turns}
        verified = {t: True for t in order}
        lib_name = ""
        log: list[dict[str, Any]] = []
        gbs = CopyProbe() if probe and turns else None
        with Measurer(options) as m:
            dummy = MeasureInput(task, task.default_config())  # the runner needs only the task

            def time_one(tuner: str, r: int, tag: str = "") -> float | None:
                nonlocal lib_name
                if tuner == LIBRARY:
                    lib_name, sec = library_latency(task, options.threads)
                    return sec
                if check[tuner] != "ok":
                    return None
                copy = f"{os.path.splitext(libs[tuner])[0]}-{r}{tag}.so"  # the runner deletes what it ran
                shutil.copy(libs[tuner], copy)
                res = m.runner.run([dummy], [BuildResult(copy)], check_correctness=True)[0]
                if not res.ok:
                    check[tuner] = f"{res.error.value}: {res.error_msg.splitlines()[0][:160] if res.error_msg else ''}"
                    return None
                verified[tuner] = verified[tuner] and bool(res.extra.get("verified"))
                return res.cost

            for r in range(rounds if turns else 0):
                k = r % len(turns)
                seq = turns[k:] + turns[:k]
                before = gbs() if gbs else None
                for tuner in seq:
                    per_round[tuner].append(time_one(tuner, r))
                sentinel = next((t for t in seq if t != LIBRARY and per_round[t][-1] is not None), None)
                again = time_one(sentinel, r, "-sentinel") if sentinel else None
                after = gbs() if gbs else None
                first = per_round[sentinel][-1] if sentinel else None
                stable = ((first is None or again is None or abs(again / first - 1) <= SENTINEL_DRIFT)
                          and (before is None or after is None or abs(after / before - 1) <= PROBE_DRIFT))
                log.append({"order": seq, "copy_gbs": [before, after], "sentinel": sentinel,
                            "sentinel_ms": [x * 1e3 if x else None for x in (first, again)], "stable": stable})
        use = [e["stable"] for e in log]
        for t, _, _ in kernels:
            xs = per_round.get(t, [])
            ok = check[t] == "ok" and any(x is not None for x in xs) and verified[t]
            if check[t] == "ok" and not ok:
                check[t] = "output not checked"
            med, of = _median(xs, use) if ok else (None, "")
            out[t] = {"median_ms": med * 1e3 if med else None, "median_of": of,
                      "samples_ms": [x * 1e3 for x in xs if x is not None],
                      "rounds_ms": [x * 1e3 if x is not None else None for x in xs],
                      "check": check[t], "verified": ok}
        if with_lib and any(x is not None for x in per_round[LIBRARY]):
            xs = per_round[LIBRARY]
            med, of = _median(xs, use)
            out[LIBRARY] = {"name": lib_name, "median_ms": med * 1e3, "median_of": of,
                            "samples_ms": [x * 1e3 for x in xs if x is not None],
                            "rounds_ms": [x * 1e3 if x is not None else None for x in xs]}
        out[ROUNDS] = {"rounds": log, "stable": sum(use),
                       "rule": f"stable: the round's first kernel timed again at its end within {SENTINEL_DRIFT:.0%} "
                               f"and the copy probe within {PROBE_DRIFT:.0%}"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def kernel_to_json(best: Any) -> dict[str, Any] | None:
    """A best kernel as JSON (never pickled): a tensortune config as its knob values, a
    MetaSchedule module as TVM's JSON of the IRModule; None for no kernel."""
    import tvm

    if best is None:
        return None
    return {"irmodule": tvm.ir.save_json(best)} if isinstance(best, tvm.IRModule) else {"config": best.to_json()}


def kernel_from_json(d: dict[str, Any] | None, task: Task) -> Any:
    """The kernel :func:`kernel_to_json` wrote, rebuilt against ``task`` (None for none)."""
    import tvm

    d = d or {}
    return (tvm.ir.load_json(d["irmodule"]) if "irmodule" in d
            else task.space.config_from_json(d["config"]) if "config" in d else None)


def final_line(name: str, rounds: int, final: dict[str, dict[str, Any]], log: dict[str, Any],
               lib: dict[str, Any] | None) -> str:
    """One workload's re-measured figures in a line, for the console."""
    return (f"{name} re-measured ({rounds} interleaved rounds, {log['stable']} stable): " + ", ".join(
        f"{t} {v['median_ms']:.3f} ms" if v["median_ms"] else f"{t} {v['check']}" for t, v in final.items())
        + (f", {lib['name']} {lib['median_ms']:.3f} ms" if lib else ""))


def _remeasure_child(task: dict[str, Any], kernels: list[tuple[str, dict[str, Any] | None, str]], rounds: int,
                     options: dict[str, Any], library: bool) -> dict[str, dict[str, Any]]:
    """:func:`remeasure` from JSON, in the fresh process :func:`remeasure_isolated` starts."""
    t = Task.from_json(task)
    back = [(name, kernel_from_json(k, t), note) for name, k, note in kernels]
    return remeasure(t, back, rounds, MeasureOptions(**options), library)


def remeasure_isolated(task: Task, kernels: list[tuple[str, Any, str]], rounds: int, options: MeasureOptions,
                       library: bool = False) -> dict[str, dict[str, Any]]:
    """:func:`remeasure` in a fresh (spawned) process, as ``python -m bench remeasure`` does.

    The process that tuned holds thread pools (XGBoost's, PyTorch's, TVM's from MetaSchedule's
    search) and a large heap; timed from it, every kernel and PyTorch ran 15-25% slower than from
    a fresh process (2026-11-26, rocketlake, C2: 0.66-0.77 against 0.55-0.59 ms; PyTorch 0.91
    against 0.68 ms), the ratios between kernels much the same. A process that fails is a result:
    every kernel gets its error as ``check``."""
    import dataclasses
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    payload = (task.to_json(), [(t, kernel_to_json(k), note) for t, k, note in kernels], rounds,
               dataclasses.asdict(options), library)
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(_remeasure_child, *payload).result()
    except Exception as e:  # noqa: BLE001 - a crashed re-measurement is recorded, the run goes on
        why = f"re-measurement process failed: {type(e).__name__}: {str(e).strip()[:160]}"
        out: dict[str, dict[str, Any]] = {t: {"median_ms": None, "median_of": "", "samples_ms": [], "rounds_ms": [],
                                              "check": why, "verified": False} for t, _, _ in kernels}
        out[ROUNDS] = {"rounds": [], "stable": 0, "rule": why}
        return out


# ------------------------------------------------------------------ reading a workload's summary
def _entry(summary: dict[str, Any], name: str) -> dict[str, Any] | None:
    return summary.get("library") if name == LIBRARY else summary.get("tuners", {}).get(name)


def states(summary: dict[str, Any]) -> list[int | None]:
    """Per re-measurement round: its state (0: the lower copy bandwidth, 1: the higher) when the
    stable rounds' probes fall in two groups (module docstring), else 0; None for an unstable
    round or a summary written before rounds were recorded (then the list is empty)."""
    log = (summary.get("remeasure") or {}).get("rounds") or []
    level = [statistics.fmean(g) if e["stable"] and (g := [x for x in e.get("copy_gbs") or [] if x]) else None
             for e in log]
    known = sorted(x for x in level if x is not None)
    if len(known) < 2 or known[-1] / known[0] < STATE_SPREAD:
        return [0 if x is not None else None for x in level]
    gap = max(range(1, len(known)), key=lambda i: known[i] / known[i - 1])
    cut = math.sqrt(known[gap - 1] * known[gap])
    return [None if x is None else int(x > cut) for x in level]


def paired_ratio(summary: dict[str, Any], a: str, b: str, state: int | None = None) -> dict[str, Any] | None:
    """``a``'s re-measured latency over ``b``'s (``library`` names the anchor): the median of the
    per-round ratios over the stable rounds (of ``state`` when given, see :func:`states`), or
    over every round where fewer than half are stable. ``{"ratio", "rounds", "lo", "hi",
    "paired"}``. A summary written before rounds were recorded pairs its ``samples_ms`` by
    position when both sides have as many (then one per round, in round order) and gives the
    ratio of the medians otherwise (``paired`` False); None when either side has no verified time."""
    ea, eb = _entry(summary, a), _entry(summary, b)
    if not ea or not eb or not ea.get("median_ms") or not eb.get("median_ms"):
        return None
    ra, rb = ea.get("rounds_ms", ea.get("samples_ms")), eb.get("rounds_ms", eb.get("samples_ms"))
    if ra is None or rb is None or len(ra) != len(rb):
        return {"ratio": ea["median_ms"] / eb["median_ms"], "rounds": 0, "lo": None, "hi": None, "paired": False}
    st = states(summary) or [0] * len(ra)
    pick = [s is not None and (state is None or s == state) for s in st]
    if state is None and 2 * sum(pick) < len(pick):
        pick = [True] * len(ra)
    pairs = [x / y for x, y, p in zip(ra, rb, pick) if p and x and y]
    if not pairs:
        return None
    return {"ratio": statistics.median(pairs), "rounds": len(pairs), "lo": min(pairs), "hi": max(pairs),
            "paired": True}


def rounds_line(summary: dict[str, Any]) -> str:
    """The re-measurement's rounds in words, for a report: how many, how many stable, the copy
    probe's range and, in two states, how many rounds each."""
    log = (summary.get("remeasure") or {}).get("rounds")
    if not log:
        return "Re-measured before rounds were recorded: medians of the rounds, no state check."
    gbs = [x for e in log for x in e.get("copy_gbs") or [] if x]
    st = states(summary)
    text = (f"Re-measured in {len(log)} interleaved rounds, {sum(e['stable'] for e in log)} stable; copy probe "
            + (f"{min(gbs):.1f}-{max(gbs):.1f} GB/s" if gbs else "not taken"))
    if any(s == 1 for s in st):
        text += (f"; two states: {st.count(0)} rounds at the lower copy bandwidth, {st.count(1)} at the higher "
                 f"(ratios are given in each)")
    return text + "."


# ------------------------------------------------------------------ a folder's kept kernels again
def remeasure_folder(run: Any, names: list[str], rounds: int, options: MeasureOptions,
                     library: bool) -> list[str]:
    """Time the kept best kernels of the finished workloads ``names`` of ``run`` (a
    :class:`~.store.RunDir` whose ``invocation`` is set) again; returns the workloads done.

    Each workload's tuner entries and library anchor get the new figures, its ``remeasure`` the
    new rounds (with the invocation that measured them), and ``remeasures_before`` the earlier
    figures, oldest first. A workload stored before best kernels were kept is skipped, with a line."""
    every = run.ops_summary()
    done = []
    for name in names:
        s = every[name]
        if not any("best" in t for t in s["tuners"].values()):
            print(f"{name}: its best kernels were not kept (stored before they were), skipped", flush=True)
            continue
        task = Task.from_op(s["op"], s["shape"])
        kernels = [(t, kernel_from_json(e.get("best"), task), e.get("note") or "") for t, e in s["tuners"].items()]
        final = remeasure(task, kernels, rounds, options, library)
        log, lib = final.pop(ROUNDS), final.pop(LIBRARY, None)
        keys = ("median_ms", "median_of", "samples_ms", "rounds_ms", "check", "verified")
        before = {"remeasure": s.get("remeasure") or {"run": s.get("run")}, "library": s.get("library"),
                  "tuners": {t: {k: e[k] for k in keys if k in e} for t, e in s["tuners"].items()}}
        s.setdefault("remeasures_before", []).append(before)
        for t, e in s["tuners"].items():
            e.update(final[t])
        s["library"] = lib
        s["remeasure"] = {**log, "run": run.invocation}
        run.write_json("ops_summary", every)
        done.append(name)
        print(final_line(name, rounds, final, log, lib), flush=True)
    return done
