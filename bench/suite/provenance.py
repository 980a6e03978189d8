"""Where a results folder's numbers came from, and when a run may add to a folder.

Every ``python -m bench run`` appends one *invocation* to ``meta.json``'s ``runs``: its date,
the machine (:func:`tensortune.target.machine_id`: CPU model, LLVM cpu, cores), the git
commit and whether the tree was dirty, the library versions, the thread count and the
settings. Every stored result names the invocation that measured it by its index in ``runs``
(``"run"`` in each workload of ``ops_summary.json``, in each model of ``models.json`` and each
of its systems, and in ``peak.json``); the report states machine and commit per figure.

Resuming (:func:`check_resume`) is allowed only where the folder's figures stay comparable:

- every earlier invocation was on the same kind of machine (:func:`tensortune.target.same_machine`)
  with the same library versions; a folder whose invocations did not record their machine
  (written before this check) is refused, its machine being unknown;
- for each part the new run measures (``peak``, ``ops``, ``models``), the settings that shape
  that part's figures (:func:`part_settings`: threads; for ``ops`` the tuners, trial budget,
  seed, rounds, quality, start-from-default, library anchor, blocked layouts, early stopping
  and, with MetaSchedule, its batch; for ``models`` the tuning seconds, seed, rounds and, where
  both ran MetaSchedule, its batch) equal those of every earlier invocation that measured that
  part.

So a run may add workloads, models, parts, or a model's systems (a model tuner it lacks: the
model is then benchmarked again with all its systems) that the folder lacks (their numbers
come from the same machine and settings as the rest), and may resume after a code change: the commit is
recorded per result, not compared, and the report names it. Anything else must go to a new
folder (``--out NEW_FOLDER``).
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .config import METASCHEDULE, Settings

ROOT = Path(__file__).resolve().parents[2]
#: Libraries whose versions must agree between the invocations of one folder.
LIBRARIES = ("python", "tvm", "numpy", "torch", "xgboost", "onnxruntime")
NEW_FOLDER = "start a new folder with --out NEW_FOLDER"


def git_state(root: Path = ROOT) -> tuple[str | None, bool | None]:
    """(short commit, dirty) of the checkout; ``None`` where git cannot tell.

    Dirty: files differ from the commit, results under ``bench/results`` not counted (a run
    writes them itself).
    """
    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD") or None
    status = git("status", "--porcelain", "--", ".", ":(exclude)bench/results") if commit else None
    return commit, (None if status is None else bool(status))


def invocation(s: Settings, threads: int, info: dict[str, Any]) -> dict[str, Any]:
    """This invocation's record for ``meta.json``'s ``runs`` (``wall_s`` kept current by the run).

    ``info``: the run's ``meta.json`` machine (``common.machine_info()`` with ``git_commit``,
    ``git_dirty`` and the versions of the libraries in :data:`LIBRARIES`).
    """
    from tensortune.target import machine_id

    return {"date": info.get("date") or time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": info.get("machine_id") or machine_id(), "commit": info.get("git_commit"),
            "dirty": info.get("git_dirty"), "libraries": {k: info.get(k) for k in LIBRARIES}, "threads": threads,
            "settings": asdict(s), "wall_s": 0.0}


def part_settings(run: dict[str, Any], part: str) -> dict[str, Any]:
    """The settings of invocation ``run`` that shape the figures of ``part``."""
    st = run.get("settings", {})
    out: dict[str, Any] = {"threads": run.get("threads")}
    if part == "ops":
        tuners = sorted(st.get("tuners", []))
        out.update(tuners=tuners, budget=st.get("budget"), seed=st.get("seed"), rounds=st.get("rounds"),
                   quality=st.get("quality"), start_from_default=st.get("start_from_default", True),
                   library=st.get("library", True), blocked=st.get("blocked", False),
                   early_stopping=st.get("early_stopping"))
        if METASCHEDULE in tuners:
            out["ms_batch"] = st.get("ms_batch")
    elif part == "models":  # which tuners is not compared: a model's systems are all those tuned on it
        out.update(model_budget_s=st.get("model_budget_s"), seed=st.get("seed"), rounds=st.get("rounds"))
        if METASCHEDULE in st.get("model_tuners", []):
            out["ms_batch"] = st.get("ms_batch")
    return out


def machine_text(m: dict[str, Any]) -> str:
    """A :func:`~tensortune.target.machine_id` dict in words: ``CPU model (LLVM cpu, N cores)``."""
    return f"{m.get('cpu_model')} ({m.get('llvm_cpu')}, {m.get('cores')} cores)"


def check_resume(folder: Path, runs: list[dict[str, Any]], has_results: bool, new: dict[str, Any]) -> None:
    """Refuse (``SystemExit`` with one line) to add invocation ``new`` to a folder whose earlier
    invocations ``runs`` measured on another machine or with other settings (see the module)."""
    from tensortune.target import same_machine

    if not runs:
        if has_results:
            raise SystemExit(f"{folder} holds results but no meta.json: where they were measured is unknown; "
                             f"{NEW_FOLDER}")
        return
    for i, r in enumerate(runs):
        date = r.get("date") or "?"
        if "machine" not in r:
            raise SystemExit(f"{folder}: invocation {i + 1} ({date}) did not record its machine (folder written before "
                             f"machines were recorded per run), so its numbers cannot be checked against this "
                             f"machine; {NEW_FOLDER}")
        if not same_machine(r["machine"], new["machine"]):
            raise SystemExit(f"{folder} was measured on another machine ({machine_text(r['machine'])}; this one: "
                             f"{machine_text(new['machine'])}); {NEW_FOLDER}")
        diff = [f"{k} {r.get('libraries', {}).get(k)} vs {v}" for k, v in new["libraries"].items()
                if r.get("libraries", {}).get(k) != v]
        if diff:
            raise SystemExit(f"{folder} was measured with other libraries ({'; '.join(diff)} here); {NEW_FOLDER}")
        for part in new["settings"]["suites"]:
            if part not in r.get("settings", {}).get("suites", []):
                continue
            old, now = part_settings(r, part), part_settings(new, part)
            diff = [f"{k} {old.get(k)} (asked: {now.get(k)})" for k in now if old.get(k) != now.get(k)
                    and (k != "ms_batch" or k in old)]  # MetaSchedule's batch, where both ran it
            if diff:
                raise SystemExit(f"{folder}: its {part} figures were measured with {', '.join(diff)}; resuming would "
                                 f"mix them: run with the folder's settings or {NEW_FOLDER}")


# ------------------------------------------------------------------ the report's provenance lines
def commit_text(r: dict[str, Any]) -> str:
    """An invocation's commit, and whether its tree was dirty, as far as it was recorded."""
    c = r.get("commit")
    if not c:
        return "commit not recorded"
    tree = {True: " with uncommitted changes", False: ""}.get(r.get("dirty"), ", tree state not recorded")
    return f"commit `{c}`{tree}"


def _runs_text(runs: list[dict[str, Any]], idx: list[int]) -> str:
    items = [f"{i + 1} ({runs[i].get('date') or 'date not recorded'}, {commit_text(runs[i])})" for i in idx]
    head = "invocation " if len(items) == 1 else "invocations "
    return head + (items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1])


def machine_of(run: dict[str, Any], meta: dict[str, Any]) -> str | None:
    """The machine of one invocation in words, or ``None`` when it was not recorded.

    An invocation written before machines were recorded per run has none, except the last one
    of its folder: the folder-level ``meta.json`` machine (LLVM cpu and cores, no CPU model) is
    that invocation's own (same date).
    """
    if run.get("machine"):
        return machine_text(run["machine"])
    mach = meta.get("machine", {})
    if mach and run.get("date") and mach.get("date") == run.get("date"):
        return f"{mach.get('target', {}).get('mcpu', '?')}, {mach.get('cpus', '?')} cores (CPU model not recorded)"
    return None


def measured_on(runs: list[dict[str, Any]], meta: dict[str, Any], stamps: list[int | None], part: str) -> str:
    """One line for a figure or table: the machine and commit(s) of the invocations in ``stamps``
    (the ``run`` indices its results carry; ``None`` for a result that does not carry one).

    A result without a stamp (a folder written before results named their invocation) is
    attributed to the invocations that ran ``part``, and the line says so; where an invocation
    did not record its machine, the line says that and what the folder's ``meta.json`` names.
    """
    idx = sorted({i for i in stamps if i is not None and 0 <= i < len(runs)})
    guessed = any(i is None for i in stamps) or not idx
    if guessed:
        idx = sorted(set(idx) | {i for i, r in enumerate(runs) if part in r.get("settings", {}).get("suites", [])})
    if not idx:
        return f"Measured on: not recorded (no invocation in meta.json ran {part})."
    texts = {i: machine_of(runs[i], meta) for i in idx}
    where = [t for t in dict.fromkeys(texts.values()) if t]
    missing = [str(i + 1) for i in idx if not texts[i]]
    if missing:
        mach = meta.get("machine", {})
        hint = (f" (the folder's meta.json, written by its last invocation on {mach.get('date', '?')}, names "
                f"{mach.get('target', {}).get('mcpu', '?')}, {mach.get('cpus', '?')} cores, CPU model not recorded)"
                if mach else "")
        where.append(f"a machine that invocation{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                     f"did not record{hint}")
    note = (f" (which result came from which invocation was not recorded: these are the invocations that ran "
            f"{part})" if guessed and len(idx) > 1 else
            f" (not recorded with the result: the only invocation that ran {part})" if guessed else "")
    return f"Measured on {' and '.join(where)}; from {_runs_text(runs, idx)}{note}."


def ops_measured_on(run: Any, summaries: Any) -> str:
    """:func:`measured_on` for operator-suite results: the invocations that measured
    ``summaries`` (``ops_summary.json`` entries) in the results folder ``run`` (a ``RunDir``)."""
    return measured_on(run.runs(), run.read_json("meta", {}) or {}, [s.get("run") for s in summaries], "ops")
