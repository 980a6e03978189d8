"""``python -m bench run`` and ``python -m bench report``.

    python -m bench run [--suite ops,models,peak] [--tuners random,genetic,autotvm,metaschedule]
                        [--budget 200] [--workloads resnet18_conv2d|C1,C6,...] [--models resnet18]
                        [--model-tuners autotvm,metaschedule] [--model-budget 1800] [--rounds 5]
                        [--no-default-start] [--no-library] [--blocked] [--early-stopping N]
                        [--seed 0] [--threads N] [--quick] [--out RESULTS] [--stop-after MINUTES]
                        [--confirm-tuned]
    python -m bench run --study NAME [ARGS]   (a registered study, e.g. chameleon, race, payback;
                                          its own arguments: --study NAME --help)
    python -m bench studies                   (the studies, a line each: bench/studies.py)
    python -m bench report RESULTS
    python -m bench drop RESULTS MODEL:TUNER --why "..."   (tune one whole-model system again)
    python -m bench restore [PATH ...|--all]   (raw databases and records back from git's history)
    python -m bench remeasure RESULTS [--workloads C1,...] [--rounds 9] [--no-library]
                                            (time the kept best kernels again; see remeasure.py)

A tuner is ``NAME[:KEY=VALUE...]``: ``autotvm:objective=reg``, ``autotvm:cost_model=treegru``,
``autotvm:transfer=true`` (a database that keeps the run's earlier workloads). What the older
scripts measured is a run of this harness:

    search-space ceiling    --suite ops --tuners genetic --workloads resnet18_conv2d,square_matmul
                            --budget 200 --early-stopping 100   (the library column: numpy / PyTorch)
    odd shapes              --suite ops --tuners autotvm --workloads odd_conv2d --blocked --budget 64
    tuning overhead         --suite ops --tuners random,metaschedule --workloads MM512 --budget 64
                            (the report's wall-time split: search / building / running / other)
    AutoTVM curves          --suite ops --tuners autotvm,random,genetic --workloads resnet18_conv2d
                            --budget 96 --no-default-start
    transfer learning       --suite ops --tuners autotvm:transfer=false,autotvm:transfer=true
                            --workloads C1,C2,C3,C4,C5,C6,C7,C8,C9 --no-default-start
    cost-model variants     --suite ops --tuners autotvm,autotvm:objective=reg,autotvm:cost_model=treegru
                            --workloads C7,C8,C9 --no-default-start
    whole models            --suite peak,models --models resnet18,mobilenet_v2,bench:shufflenet_v2
                            --model-tuners oneshot,fasor,fasor:mode=quality,autotvm,metaschedule

``run`` writes CSV and JSON into RESULTS (default ``bench/results/suite`` or, with ``--quick``,
``bench/results/quick``) and resumes what an interrupted run left there, if that was measured on
this kind of machine with the same settings (else it refuses: see ``provenance.py``); ``report``
turns a results folder into PNG plots and ``report.md``. Nothing else should run on the machine
while it measures.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from .config import FULL, METASCHEDULE, QUICK, REMEASURE_ROUNDS, SUITES, Settings
from .deadline import Deadline

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "bench" / "results" / "suite"
QUICK_OUT = ROOT / "bench" / "results" / "quick"


def _csv(s: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in s.split(",") if x.strip())


def parser() -> argparse.ArgumentParser:
    """The command line."""
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measure (resumes a results folder); --study NAME runs a registered study")
    r.add_argument("--study", metavar="NAME", help="run this study of bench/studies.py with the arguments that follow "
                                                   "(default: the suite itself)")
    r.add_argument("--quick", action="store_true", help="smoke run: a few workloads, small budgets (< 10 min)")
    r.add_argument("--suite", type=_csv, help=f"comma-separated parts: {','.join(SUITES)} (default: all)")
    r.add_argument("--tuners", type=_csv, help="operator suite tuners (tensortune names and 'metaschedule')")
    r.add_argument("--budget", type=int, help="trials per tuner and workload")
    r.add_argument("--workloads", type=_csv, help="workload groups of workloads.json and/or workload names")
    r.add_argument("--models", type=_csv, help="built-in model names or ONNX paths")
    r.add_argument("--model-tuners", type=_csv, help="whole-model suite tuners")
    r.add_argument("--model-budget", type=float, help="tuning seconds per model and tuner")
    r.add_argument("--ms-batch", type=int, help="MetaSchedule candidates per iteration (its default: 64)")
    r.add_argument("--rounds", type=int, help="interleaved rounds of the final measurements")
    r.add_argument("--seed", type=int)
    r.add_argument("--threads", type=int, help="threads of every kernel and framework (default: all cores)")
    r.add_argument("--no-default-start", dest="start_from_default", action="store_const", const=False, default=None,
                   help="tensortune tuners do not measure the template default first (operator suite)")
    r.add_argument("--no-library", dest="library", action="store_const", const=False, default=None,
                   help="leave numpy / PyTorch out of the final interleaved rounds")
    r.add_argument("--blocked", action="store_const", const=True, default=None,
                   help="tune convolutions in their blocked (NCHWc) form, as inside a model")
    r.add_argument("--early-stopping", type=int, help="a tuner stops after N trials without improvement")
    r.add_argument("--confirm-tuned", dest="confirm_tuned", action="store_const", const=True, default=None,
                   help="whole models: run the in-model check on systems tuned before `tune` ran it, "
                        "then benchmark their models again")
    r.add_argument("--out", help="results folder")
    r.add_argument("--stop-after", type=float, metavar="MINUTES",
                   help="end cleanly before a step (a tuner on a workload, a model's system or benchmark) that "
                        "would not finish within MINUTES; the same command resumes")
    r.add_argument("--no-progress", action="store_true")
    sub.add_parser("studies", help="list the registered studies")
    p = sub.add_parser("report", help="plots and report.md from a results folder")
    p.add_argument("results")
    d = sub.add_parser("drop", help="discard a whole-model system so that the next run tunes it again")
    d.add_argument("results")
    d.add_argument("system", help="MODEL:TUNER, e.g. resnet18:autotvm")
    d.add_argument("--why", required=True, help="the reason, kept in models.json (e.g. the fix it waits for)")
    m = sub.add_parser("remeasure", help="time a folder's kept best kernels again (interleaved rounds, each "
                                         "checked for a change of the host's state; bench/suite/remeasure.py)")
    m.add_argument("results")
    m.add_argument("--workloads", type=_csv, help="these workloads only (default: every finished one)")
    m.add_argument("--rounds", type=int, default=REMEASURE_ROUNDS, help=f"interleaved rounds (default {REMEASURE_ROUNDS})")
    m.add_argument("--no-library", dest="library", action="store_false",
                   help="leave numpy / PyTorch out of the rounds")
    from ..raw import add_parser as add_restore_parser  # raw results out of git's history (bench/raw.py)
    from .soak import add_parser as add_soak_parser  # faults at scale (bench/suite/soak.py)

    add_soak_parser(sub)
    add_restore_parser(sub)
    return ap


def settings(a: argparse.Namespace) -> Settings:
    """The defaults (full or quick) with the given options applied."""
    base = QUICK if a.quick else FULL
    over = {"suites": a.suite, "tuners": a.tuners, "budget": a.budget, "workloads": a.workloads, "models": a.models,
            "model_tuners": a.model_tuners, "model_budget_s": a.model_budget, "ms_batch": a.ms_batch, "rounds": a.rounds, "seed": a.seed,
            "start_from_default": a.start_from_default, "library": a.library, "blocked": a.blocked,
            "early_stopping": a.early_stopping, "confirm_tuned": a.confirm_tuned}
    return dataclasses.replace(base, **{k: v for k, v in over.items() if v is not None})


def check(s: Settings) -> None:
    """Refuse unknown parts, tuners and workloads before anything runs."""
    from . import specs

    for part in s.suites:
        if part not in SUITES:
            raise SystemExit(f"unknown suite {part!r}; known: {', '.join(SUITES)}")
    for t in s.tuners:
        specs.check(t)
    for t in s.model_tuners:
        specs.check(t)
    if s.early_stopping is not None and s.early_stopping < 1:
        raise SystemExit("--early-stopping must be positive")
    if s.budget < 1 or s.rounds < 1 or s.model_budget_s <= 0 or s.ms_batch < 1:
        raise SystemExit("--budget, --rounds, --model-budget and --ms-batch must be positive")


def select_workloads(names: tuple[str, ...]) -> list[tuple[str, str, str, dict[str, int]]]:
    """Workloads by group or by name, in workloads.json order."""
    import json

    from ..common import GROUP_OPS, load_workloads, workloads_path

    present = json.loads(workloads_path().read_text())
    every = load_workloads([g for g in GROUP_OPS if g in present])
    out = []
    for n in names:
        hit = [w for w in every if n in (w[0], w[1])]
        if not hit:
            raise SystemExit(f"unknown workload {n!r}; groups: {', '.join(GROUP_OPS)}; "
                             f"names: {', '.join(w[1] for w in every)}")
        out += [w for w in hit if w not in out]
    return out


def meta(s: Settings, threads: int, out: Path) -> dict[str, Any]:
    """Machine, libraries, seeds and settings of the run."""
    from ..common import machine_info
    from . import energy, provenance

    info = machine_info()
    for lib in ("xgboost", "onnxruntime"):
        try:
            info[lib] = __import__(lib).__version__
        except ImportError:
            pass
    info["git_commit"], info["git_dirty"] = provenance.git_state(ROOT)
    return {"machine": info, "threads": threads, "settings": dataclasses.asdict(s), "energy": energy.probe(),
            "results": str(out)}


def cmd_run(a: argparse.Namespace) -> int:
    s = settings(a)
    if a.stop_after is not None and a.stop_after <= 0:
        raise SystemExit("--stop-after must be positive")
    from tensortune.target import cpu_count

    threads = a.threads or cpu_count()
    os.environ["TVM_NUM_THREADS"] = str(threads)  # before TVM starts its thread pool
    check(s)
    work = select_workloads(s.workloads) if "ops" in s.suites else []
    from tensortune.measure import MeasureOptions

    from . import provenance
    from .store import RunDir

    out = Path(a.out) if a.out else (QUICK_OUT if a.quick else DEFAULT_OUT)
    run = RunDir(out)
    m = meta(s, threads, out)
    this = provenance.invocation(s, threads, m["machine"])
    earlier = run.runs()
    provenance.check_resume(out, earlier, run.has_results(), this)  # before anything is written
    run.create()
    run.invocation = len(earlier)  # stamped on every result this invocation stores
    m["runs"] = earlier + [this]
    m["started"] = m["runs"][0]["date"]
    t0 = time.perf_counter()
    progress = not a.no_progress
    deadline = Deadline(a.stop_after)

    def save_wall() -> None:
        """This invocation's measuring time so far, kept current so that a stopped run still shows it."""
        this["wall_s"] = time.perf_counter() - t0
        m["wall_s"] = sum(r["wall_s"] or 0.0 for r in m["runs"])
        run.write_json("meta", m)

    save_wall()
    if "peak" in s.suites:
        from tensortune.measure.peak import measure_peak

        pk = measure_peak(threads)
        run.write_json("peak", run.stamp(pk))
        save_wall()
        print(f"peak {pk['peak_gflops']:.1f} GFLOP/s, bandwidth {pk['bandwidth_gbs']:.1f} GB/s ({threads} threads)",
              flush=True)
    if "ops" in s.suites:
        from .ops import run_ops

        run_ops(run, work, list(s.tuners), s.budget, s.seed, MeasureOptions(threads=threads), s.rounds, progress,
                ms_batch=s.ms_batch, on_step=save_wall, start_from_default=s.start_from_default, library=s.library,
                blocked=s.blocked, early_stopping=s.early_stopping, deadline=deadline)
    if "models" in s.suites:
        from .wholemodel import run_models

        run_models(run, list(s.models), list(s.model_tuners), s.model_budget_s, s.seed, s.rounds, progress,
                   ms_batch=s.ms_batch, on_step=save_wall, deadline=deadline, confirm_tuned=s.confirm_tuned)
    save_wall()
    if deadline.stopped:
        print(f"stopped before {deadline.stopped} after {(time.perf_counter() - t0) / 60:.1f} min (--stop-after); "
              f"results so far in {out}; the same command goes on", flush=True)
        return 0
    print(f"done in {(time.perf_counter() - t0) / 60:.1f} min; results in {out}; "
          f"`python -m bench report {out}` makes the plots and report.md", flush=True)
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from .report import write_report

    path = write_report(Path(a.results))
    print(path.read_text())
    print(f"written: {path} and the PNG plots beside it")
    return 0


def cmd_remeasure(a: argparse.Namespace) -> int:
    """``python -m bench remeasure``: the folder's machine and thread count only; each workload's
    earlier figures are kept in its ``remeasures_before``."""
    from tensortune.measure import MeasureOptions

    from . import provenance
    from .remeasure import remeasure_folder
    from .store import RunDir

    if a.rounds < 1:
        raise SystemExit("--rounds must be positive")
    run = RunDir(a.results)
    summary = run.ops_summary()
    if not summary:
        raise SystemExit(f"{a.results}: no finished operator workload here (ops_summary.json)")
    names = list(a.workloads or summary)
    unknown = [w for w in names if w not in summary]
    if unknown:
        raise SystemExit(f"{a.results}: no finished workload {', '.join(unknown)}; finished: {', '.join(summary)}")
    earlier = run.runs()
    threads = next((r["threads"] for r in reversed(earlier) if "ops" in r.get("settings", {}).get("suites", [])
                    and r.get("threads")), None)
    if threads is None:
        raise SystemExit(f"{a.results}: its meta.json names no operator-suite invocation with its thread count")
    os.environ["TVM_NUM_THREADS"] = str(threads)  # before TVM starts its thread pool
    s = dataclasses.replace(FULL, suites=("remeasure",), rounds=a.rounds, library=a.library)
    m = meta(s, threads, Path(a.results))
    this = provenance.invocation(s, threads, m["machine"])
    provenance.check_resume(Path(a.results), earlier, run.has_results(), this)  # same machine, same libraries
    kept = run.read_json("meta", {})
    kept["runs"] = earlier + [this]
    run.invocation = len(earlier)
    t0 = time.perf_counter()
    run.write_json("meta", kept)
    done = remeasure_folder(run, names, a.rounds, MeasureOptions(threads=threads), a.library)
    this["wall_s"] = time.perf_counter() - t0
    kept["wall_s"] = sum(r.get("wall_s") or 0.0 for r in kept["runs"])
    run.write_json("meta", kept)
    print(f"re-measured {', '.join(done) or 'nothing'} in {this['wall_s'] / 60:.1f} min; `python -m bench report "
          f"{a.results}` and the per-system reports read the new figures", flush=True)
    return 0


def cmd_drop(a: argparse.Namespace) -> int:
    from .store import RunDir
    from .wholemodel import drop_system

    model, sep, tuner = a.system.partition(":")
    if not sep or not model or not tuner:
        raise SystemExit(f"drop takes MODEL:TUNER, got {a.system!r}")
    if not (Path(a.results) / "models.json").exists():
        raise SystemExit(f"{a.results}: no models.json here")
    old = drop_system(RunDir(a.results), model, tuner, a.why)
    print(f"dropped {a.system} (tuned by invocation {old.get('run')}; {old.get('trials', '?')} trials); "
          f"the next `python -m bench run` with the folder's settings tunes it again and benchmarks {model} anew")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bench``."""
    from tensortune.utils.quiet import quiet_third_party_warnings

    quiet_third_party_warnings()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"] and "--study" in argv:  # a study parses its own arguments
        from .. import studies

        at = argv.index("--study")
        if at + 1 >= len(argv):
            raise SystemExit("--study needs a NAME (python -m bench studies lists them)")
        return studies.run_study(argv[at + 1], argv[1:at] + argv[at + 2:])
    a = parser().parse_args(argv)
    if a.cmd == "studies":
        from .. import studies

        print(studies.listing())
        return 0
    if a.cmd == "soak":
        from .soak import cmd_soak

        return cmd_soak(a)
    if a.cmd == "restore":
        from ..raw import cmd_restore

        return cmd_restore(a)
    if a.cmd == "drop":
        return cmd_drop(a)
    if a.cmd == "remeasure":
        return cmd_remeasure(a)
    return cmd_run(a) if a.cmd == "run" else cmd_report(a)


if __name__ == "__main__":
    sys.exit(main())
