"""A model against OpenVINO as shipped, split by where the host had the two threads:
``python -m bench run --study hostpair [--models hf:pvt_v2 ...]``.

The hosts these benchmarks run on move a VM's two virtual CPUs between near cores (one L3, a
cross-core round trip of about 80 ns) and far ones (about 330 ns), sometimes within seconds, so a
comparison of medians over rounds mixes the two states in proportions of chance. Here each
*pair* is short: the cross-core round trip (:mod:`bench.hoststate`), tensortune's untuned
build, OpenVINO as shipped, tensortune again, the round trip again. A pair whose two round trips
agree on near or far belongs to that state; the report gives, per state, the medians and the
median of the per-pair ratios (tensortune's mean of its two slices over OpenVINO's), and how many
pairs fell in each.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .common import write_text
from .hoststate import FAR_NS, build_probe, probe

#: Models of many small functions (the ones the far state slows most), and a plain CNN beside them.
DEFAULT_MODELS = ("hf:pvt_v2", "hf:mobilenet_v1", "hf:resnet")
#: Seconds each system is timed in a pair.
SLICE_S = 0.3
PAIRS = 12


def state(before: float | None, after: float | None) -> str:
    """``near`` or ``far`` when both round trips say so, ``mixed`` when they differ, ``unknown``
    without a probe."""
    if before is None or after is None:
        return "unknown"
    near = (before < FAR_NS, after < FAR_NS)
    return "near" if all(near) else "far" if not any(near) else "mixed"


def by_state(pairs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per state (in the order near, far, mixed, unknown; only those seen): pairs, the medians
    of tensortune's and OpenVINO's times and of the per-pair ratios."""
    out: dict[str, dict[str, Any]] = {}
    for name in ("near", "far", "mixed", "unknown"):
        mine = [p for p in pairs if p["state"] == name]
        if mine:
            out[name] = {"pairs": len(mine),
                         "tensortune_ms": statistics.median(sum(p["ours_ms"]) / 2 for p in mine),
                         "openvino_ms": statistics.median(p["openvino_ms"] for p in mine),
                         "ratio": statistics.median(_ratio(p) for p in mine)}
    return out


def _ratio(pair: dict[str, Any]) -> float:
    """tensortune's mean of its two slices over OpenVINO's."""
    return sum(pair["ours_ms"]) / 2 / pair["openvino_ms"]


def time_pairs(ours: Callable[[], None], theirs: Callable[[], None], exe: Path | None, pairs: int,
               slice_s: float) -> list[dict[str, Any]]:
    """``pairs`` pairs of ours, theirs, ours, each between two round-trip probes."""
    from tensortune.measure.timing import time_callable

    def ms(fn: Callable[[], None]) -> float:
        return statistics.median(time_callable(fn, slice_s)) * 1e3

    out = []
    for _ in range(pairs):
        before = probe(exe)
        a, b, c = ms(ours), ms(theirs), ms(ours)
        after = probe(exe)
        out.append({"round_trip_ns": [before, after], "state": state(before, after), "ours_ms": [a, c],
                    "openvino_ms": b})
    return out


def run_model(spec: str, precision: str, threads: int, exe: Path | None, pairs: int, slice_s: float,
              folder: Path) -> dict[str, Any]:
    """One model: compiled untuned in ``precision``, OpenVINO as shipped on its ONNX file, timed in pairs."""
    from tensortune.models.comparison import onnx_file
    from tensortune.models.compile import compile_model
    from tensortune.models.importer import load_model
    from tensortune.models.reference import OpenVinoRunner, set_threads

    model = load_model(spec).with_precision(precision)
    set_threads(threads)
    inputs = model.example_inputs
    ours = compile_model(model).callable(inputs)
    ov = OpenVinoRunner(onnx_file(model, str(folder)), threads, precision_hint=None)
    ov.run(inputs)
    timed = time_pairs(ours, ov.callable(inputs), exe, pairs, slice_s)
    return {"model": spec, "precision": precision, "openvino_precision": ov.precision, "pairs": timed,
            "states": by_state(timed)}


def report(meta: dict[str, Any], models: list[dict[str, Any]]) -> str:
    lines = [f"# tensortune untuned against OpenVINO as shipped, by host state ({meta['cpu']}, "
             f"{meta['threads']} threads)", "",
             f"{meta['pairs']} pairs a model, {meta['slice_s']} s a slice; a pair is near or far when the "
             f"cross-core round trip before and after it agree (near below {FAR_NS:.0f} ns). "
             f"Date {meta['date']}.", "",
             "| model | precision | state | pairs | tensortune (ms) | OpenVINO as shipped (ms) | ratio |",
             "|---|---|---|---:|---:|---:|---:|"]
    for m in models:
        for name, s in m["states"].items():
            lines.append(f"| {m['model']} | {m['precision']} | {name} | {s['pairs']} | {s['tensortune_ms']:.2f} | "
                         f"{s['openvino_ms']:.2f} | {s['ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench run --study hostpair", description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="model specs (hf:NAME, an ONNX file)")
    p.add_argument("--precision", choices=("f32", "bf16"), help="tensortune's (default: bf16 where the CPU has it)")
    p.add_argument("--pairs", type=int, default=PAIRS)
    p.add_argument("--slice-s", type=float, default=SLICE_S)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", help="results folder (default bench/results/hostpair-CPU-DATE)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.pairs < 1 or args.slice_s <= 0:
        raise SystemExit("hostpair: --pairs must be at least 1 and --slice-s above 0")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    from tensortune.precision import target_has_bf16
    from tensortune.target import host_target_json

    from .common import machine_info, machine_line

    info = machine_info()
    precision = args.precision or ("bf16" if target_has_bf16(host_target_json()) else "f32")
    out = Path(args.out or f"bench/results/hostpair-{info['machine_id']['llvm_cpu']}-{time.strftime('%Y-%m-%d')}")
    out.mkdir(parents=True, exist_ok=True)
    meta = {"cpu": machine_line(info), "threads": args.threads,
            "pairs": args.pairs, "slice_s": args.slice_s, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": info}
    models = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_probe(Path(tmp))
        for spec in args.models:
            models.append(run_model(spec, precision, args.threads, exe, args.pairs, args.slice_s, Path(tmp)))
            print(f"{spec}: " + ", ".join(f"{k} {v['pairs']} pairs {v['ratio']:.2f}x"
                                          for k, v in models[-1]["states"].items()), flush=True)
    (out / "hostpair.json").write_text(json.dumps({"meta": meta, "models": models}, indent=1) + "\n")
    write_text(out / "report.md", report(meta, models))
    print(f"wrote {out / 'report.md'}")
    return 0
