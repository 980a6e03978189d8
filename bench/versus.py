"""One tuner against a baseline in an operator-suite run: ``python -m bench run --study versus RESULTS``.

    python -m bench run --study versus RESULTS --tuner oneshot --baseline autotvm [--within 0.02] [--less-wall 10]

Per workload of ``RESULTS/ops_summary.json``: each side's final GFLOP/s (the suite's re-measured,
checked median of its interleaved rounds), trials and tuning wall time, the GFLOP/s ratio tuner /
baseline (the median of the per-round ratios, both sides timed in the same rounds:
``bench/suite/remeasure.py``) and the wall-time ratio baseline / tuner; then their geometric means and the workloads
that meet both targets (the tuner's final GFLOP/s within ``--within`` of the baseline's, with
``--less-wall`` times less wall time). A side whose kernel failed its check has no final figure,
and its workload meets no target.

One-Shot Tuner's operator evidence is ``--tuner oneshot --baseline autotvm`` on a 1,000-trial run
of C1-C12 (its targets: within 2% at 10x less wall time; the paper reports 13.84x). Writes
``RESULTS/versus-TUNER-BASELINE.md`` and ``.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import fmt as _f, geomean, gflops, write_text
from .suite.provenance import ops_measured_on
from .suite.remeasure import paired_ratio
from .suite.specs import slug
from .suite.store import RunDir


def compare(summaries: dict[str, dict[str, Any]], tuner: str, baseline: str, within: float,
            less_wall: float) -> dict[str, Any]:
    """Per workload where both sides ran, and the totals (see the module)."""
    rows = {}
    for w, s in summaries.items():
        t, b = s["tuners"].get(tuner), s["tuners"].get(baseline)
        if t is None or b is None:
            continue
        tg, bg = gflops(s["flops"], t.get("median_ms")), gflops(s["flops"], b.get("median_ms"))
        lib = s.get("library") or {}
        paired = paired_ratio(s, baseline, tuner)  # the baseline's latency over the tuner's, round by round
        ratio = paired["ratio"] if paired else None
        wall = b["wall_s"] / t["wall_s"] if t.get("wall_s") else None
        rows[w] = {"tuner_gflops": tg, "baseline_gflops": bg, "gflops_ratio": ratio,
                   "tuner_trials": t.get("trials"), "baseline_trials": b.get("trials"),
                   "tuner_wall_s": t.get("wall_s"), "baseline_wall_s": b.get("wall_s"), "wall_ratio": wall,
                   "library": lib.get("name"), "library_gflops": gflops(s["flops"], lib.get("median_ms")),
                   "met": bool(ratio and wall and ratio >= 1 - within and wall >= less_wall)}
    ratios = [r["gflops_ratio"] for r in rows.values() if r["gflops_ratio"]]
    return {"tuner": tuner, "baseline": baseline, "within": within, "less_wall": less_wall, "workloads": rows,
            "geomean_gflops_ratio": geomean(ratios), "min_gflops_ratio": min(ratios) if ratios else None,
            "geomean_wall_ratio": geomean([r["wall_ratio"] for r in rows.values()]),
            "total_wall_ratio": (sum(r["baseline_wall_s"] for r in rows.values())
                                 / sum(r["tuner_wall_s"] for r in rows.values())) if rows else None,
            "within_target": sum(1 for r in ratios if r >= 1 - within),
            "met": sum(1 for r in rows.values() if r["met"])}


def markdown(cmp: dict[str, Any], provenance: str) -> str:
    t, b, rows = cmp["tuner"], cmp["baseline"], cmp["workloads"]
    lines = [f"# {t} against {b}", "", provenance, "",
             f"Final GFLOP/s: the suite's re-measured, checked medians. Targets: within {cmp['within']:.0%} of "
             f"{b}'s GFLOP/s with at least {cmp['less_wall']:g}x less tuning wall time.", "",
             f"| workload | {b} GFLOP/s | {t} GFLOP/s | {t} / {b} | library GFLOP/s | {b} trials | {t} trials | "
             f"{b} wall s | {t} wall s | less wall | both targets |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for w, r in rows.items():
        lib = f"{_f(r['library_gflops'])} ({r['library']})" if r["library"] else "-"
        lines.append(f"| {w} | {_f(r['baseline_gflops'])} | {_f(r['tuner_gflops'])} | {_f(r['gflops_ratio'], '.3f')} | "
                     f"{lib} | {_f(r['baseline_trials'], 'd')} | {_f(r['tuner_trials'], 'd')} | "
                     f"{_f(r['baseline_wall_s'])} | {_f(r['tuner_wall_s'])} | {_f(r['wall_ratio'], '.1f')}x | "
                     f"{'yes' if r['met'] else 'no'} |")
    n = len(rows)
    lines += ["", f"Over {n} workloads: GFLOP/s {t} / {b} geometric mean **{_f(cmp['geomean_gflops_ratio'], '.3f')}** "
                  f"(lowest {_f(cmp['min_gflops_ratio'], '.3f')}; {cmp['within_target']} of {n} within "
                  f"{cmp['within']:.0%}); wall time {b} / {t} geometric mean **{_f(cmp['geomean_wall_ratio'], '.1f')}x** "
                  f"(total {_f(cmp['total_wall_ratio'], '.1f')}x); both targets met on {cmp['met']} of {n}.", ""]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study versus", description=__doc__.splitlines()[0])
    p.add_argument("results", help="an operator-suite results folder")
    p.add_argument("--tuner", default="oneshot")
    p.add_argument("--baseline", default="autotvm")
    p.add_argument("--within", type=float, default=0.02, help="GFLOP/s target: at most this fraction below")
    p.add_argument("--less-wall", type=float, default=10.0, help="wall-time target: at least this many times less")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    run = RunDir(a.results)
    summary = run.ops_summary()
    cmp = compare(summary, a.tuner, a.baseline, a.within, a.less_wall)
    if not cmp["workloads"]:
        print(f"{a.results}: no workload where both {a.tuner} and {a.baseline} ran", file=sys.stderr)
        return 1
    provenance = ops_measured_on(run, [summary[w] for w in cmp["workloads"]])
    md = markdown(cmp, provenance)
    stem = f"versus-{slug(a.tuner)}-{slug(a.baseline)}"
    write_text(run.path / f"{stem}.md", md)
    write_text(run.path / f"{stem}.json", json.dumps(cmp, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
