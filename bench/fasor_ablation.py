"""Fasor's ablations (the paper's Fig. 8) from an operator-suite run: ``python -m bench run --study fasor-ablation RESULTS``.

The run itself is the suite's (one run, every variant on every workload, the order rotated). Each
variant is the full system with one part switched off, in quality mode (efficiency mode stops
after one iteration, so there is no time to reach a latency to compare):

    python -m bench run --suite ops --workloads resnet18_conv2d --blocked --budget 200 --tuners \\
fasor:mode=quality,fasor:mode=quality:start=false,fasor:mode=quality:explorer=sa,\\
fasor:mode=quality:roofline=false,fasor:mode=quality:primitives=random,fasor:mode=quality:n_p=5,\\
fasor:mode=quality:n_p=6,fasor:mode=quality:n_p=8 --out RESULTS

On a machine the shipped model was not trained on, "no transfer" is the shipped model beside the
transferred one: ``tensortune fasor transfer`` first, then both ``fasor:mode=quality`` (the
transferred model, the default once there is one) and ``fasor:mode=quality:cost_model.folder=shipped`` (the shipped weights by name).

This script reads ``RESULTS/ops_batches.csv`` and ``ops_summary.json`` and writes
``RESULTS/fasor_ablation.md``, ``fasor_ablation.json`` and ``fasor_ablation.png``. Against the
full system (``--full``, default ``fasor:mode=quality``), per workload and variant:

* **time to the same latency**: the target is the worse of the two searches' bests, and each
  side's tuning wall time (and trials) until its best first reached it; the ratio is the
  variant's over the full system's (> 1: the variant takes longer; the paper's "no transfer"
  took 3.6x longer);
* **final latency**: both sides' best kernels re-measured and checked by the suite, the variant's
  latency over the full system's, round by round, median over the stable rounds
  (``bench/suite/remeasure.py``; > 1: the variant's code is slower);
* the trials and wall time each spent in all (quality mode stops after ``patience`` iterations
  without a better measurement).

The ratios are summarised as geometric means over the workloads where both sides have data.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .common import fmt as _f, geomean, gflops, save_figure, write_text
from .suite.provenance import ops_measured_on
from .suite.remeasure import paired_ratio
from .suite.report import curves, first_reaching, settled
from .suite.specs import parse
from .suite.store import RunDir

FULL = "fasor:mode=quality"


def versus(full: list[dict[str, Any]], variant: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Seconds and trials each side took to the worse of the two searches' bests (None when a
    side has no best)."""
    a, b = settled(full)["best_ms"], settled(variant)["best_ms"]
    if a is None or b is None:
        return None
    target = max(a, b)
    f, v = first_reaching(full, target), first_reaching(variant, target)
    if f is None or v is None:  # cannot happen: each side reached its own best
        return None
    return {"target_ms": target, "full_s": f["seconds"], "variant_s": v["seconds"],
            "full_trials": f["trials"], "variant_trials": v["trials"],
            "time_ratio": v["seconds"] / f["seconds"] if f["seconds"] else None,
            "trials_ratio": v["trials"] / f["trials"] if f["trials"] else None}


def compare(summary: dict[str, Any], cv: dict[str, Any], full: str = FULL) -> dict[str, Any]:
    """Per variant: per-workload rows and the geometric means (module docstring)."""
    variants = sorted({t for s in summary.values() for t in s["tuners"] if t != full})
    out: dict[str, Any] = {}
    for var in variants:
        per: dict[str, Any] = {}
        for w, s in summary.items():
            t = s["tuners"]
            if full not in t or var not in t:
                continue
            row: dict[str, Any] = {
                "final_gflops": gflops(s["flops"], t[var].get("median_ms")),
                "full_gflops": gflops(s["flops"], t[full].get("median_ms")),
                "latency_ratio": (paired_ratio(s, var, full) or {}).get("ratio"),
                "trials": t[var].get("trials"), "full_trials_all": t[full].get("trials"),
                "wall_s": t[var].get("wall_s"), "full_wall_s": t[full].get("wall_s"),
                "check": t[var].get("check")}
            row.update(versus(cv.get(w, {}).get(full, []), cv.get(w, {}).get(var, [])) or {})
            per[w] = row
        vals = list(per.values())
        out[var] = {"per_workload": per,
                    "time_ratio": geomean([r.get("time_ratio") for r in vals]),
                    "trials_ratio": geomean([r.get("trials_ratio") for r in vals]),
                    "latency_ratio": geomean([r.get("latency_ratio") for r in vals]),
                    "wall_ratio": geomean([(r["wall_s"] / r["full_wall_s"]) if r.get("wall_s") and r.get("full_wall_s")
                                           else None for r in vals]),
                    "workloads": len(per)}
    return out


def label(variant: str, full: str) -> str:
    """What ``variant`` changes of ``full``: its options that differ (``n_p=5``, ``cost_model.folder=shipped``),
    or the whole spec where the tuners differ."""
    (vn, vo), (fn, fo) = parse(variant), parse(full)
    if vn != fn:
        return variant
    diff = [f"{k}={v}" for k, v in vo.items() if fo.get(k) != v] + [f"{k} unset" for k in fo if k not in vo]
    return ", ".join(diff) or variant


def markdown(cmp: dict[str, Any], full: str, provenance: str) -> str:
    lines = ["# Fasor's ablations (Fig. 8)", "", provenance, "",
             f"Each variant against the full system `{full}`: wall time (and trials) until its best first reached "
             "the worse of the two searches' bests, over the full system's (> 1: the variant takes longer); the "
             "final, re-measured latency over the full system's (> 1: slower code); and the whole tuning wall time "
             "over the full system's. Geometric means over the workloads. A variant is named by what it changes.", "",
             "| variant | time to the same latency | trials to it | final latency | whole wall time | workloads |",
             "|---|---:|---:|---:|---:|---:|"]
    for var, v in cmp.items():
        lines.append(f"| {label(var, full)} | {_f(v['time_ratio'], '.2f')}x | {_f(v['trials_ratio'], '.2f')}x | "
                     f"{_f(v['latency_ratio'], '.3f')}x | {_f(v['wall_ratio'], '.2f')}x | {v['workloads']} |")
    for var, v in cmp.items():
        lines += ["", f"## {label(var, full)} (`{var}`)", "", "| workload | GFLOP/s (full) | GFLOP/s | target ms | s to it (full / variant) | "
                  "trials to it (full / variant) | trials in all (full / variant) | check |",
                  "|---|---:|---:|---:|---|---|---|---|"]
        for w, r in v["per_workload"].items():
            lines.append(f"| {w} | {_f(r['full_gflops'])} | {_f(r['final_gflops'])} | {_f(r.get('target_ms'), '.4f')} | "
                         f"{_f(r.get('full_s'))} / {_f(r.get('variant_s'))} | "
                         f"{_f(r.get('full_trials'), 'd')} / {_f(r.get('variant_trials'), 'd')} | "
                         f"{_f(r['full_trials_all'], 'd')} / {_f(r['trials'], 'd')} | {r.get('check') or '-'} |")
    return "\n".join(lines) + "\n"


def plot(cmp: dict[str, Any], out: Path, full: str = FULL) -> Path | None:
    """Time to the same latency and final latency per variant, over the full system's."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = list(cmp)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, title in zip(axes, ("time_ratio", "latency_ratio"),
                              ("time to the same latency / full Fasor", "final latency / full Fasor")):
        ax.bar(range(len(names)), [cmp[n][key] or 0 for n in names])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(range(len(names)), [label(n, full) for n in names], rotation=45,
                      ha="right")
        ax.set_title(title)
    fig.tight_layout()
    return save_figure(fig, out)


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study fasor-ablation", description=__doc__.splitlines()[0])
    p.add_argument("results", help="an operator-suite results folder")
    p.add_argument("--full", default=FULL, help=f"the full system's tuner name in the folder (default {FULL})")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    run = RunDir(a.results)
    summary = run.ops_summary()
    if not summary:
        print(f"{a.results}: no operator-suite results", file=sys.stderr)
        return 1
    if not any(a.full in s["tuners"] for s in summary.values()):
        have = sorted({t for s in summary.values() for t in s["tuners"]})
        print(f"{a.results}: no {a.full} to compare against (tuners: {', '.join(have)})", file=sys.stderr)
        return 1
    cmp = compare(summary, curves(run.ops_rows()), a.full)
    provenance = ops_measured_on(run, summary.values())
    md = markdown(cmp, a.full, provenance)
    write_text(run.path / "fasor_ablation.md", md)
    write_text(run.path / "fasor_ablation.json", json.dumps({"full": a.full, "variants": cmp}, indent=1))
    plot(cmp, run.path / "fasor_ablation.png", a.full)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
