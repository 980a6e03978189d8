"""One speed per model in every process: ``python -m bench run --study placement``.

    python -m bench run --study placement [--processes 10] [--inferences 200] [--threads 2]
                        [--out bench/results/placement-CPU-DATE]

Two models are compiled once with the template defaults (a GhostNet-style network of many
small functions, built here from code, and ResNet-18) and exported. Then, in ``--processes``
rounds, fresh processes each load both libraries and time ``--inferences`` inferences of each
(after a warm-up), in three arms, interleaved within every round:

- ``tensortune``: ``--threads`` threads, loaded with ``load_library`` (threads placed by
  :mod:`tensortune.utils.placement`);
- ``tvm``: ``--threads`` threads, loaded with TVM alone and TVM's own thread binding (the
  calling thread left free: the two speeds of issue 75);
- ``one-thread``: one thread, ``load_library``.

Every round also times the host itself, without TVM: two threads pinned to two CPUs of the
process's mask pass a flag back and forth (``bench/probes/roundtrip.c``, built with the system C
compiler), so a slow round can be told apart as the host's (the cross-core round trip of that
process, timed just before it starts) or the pool's (the same round trip, one arm slower than
the others).

Writes ``placement.json`` (every process's median and quartiles, every round's round trip) and
``report.md``: per arm and model, the median of the processes' medians, the slowest process
against the fastest, and whether every two-thread process of ours beat the one-thread median;
then the rounds with their round trips. The targets: every process within 5% of the best one,
and two threads faster than one in every process.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import write_text
from .hoststate import build_probe, probe

ARMS = ("tensortune", "tvm", "one-thread")
MODELS = ("ghostnet", "resnet18")
#: Within this of the fastest process: one speed (the issue's target).
SPREAD_TARGET = 1.05
WARMUP = 20


def ghostnet() -> tuple[Any, tuple[Any, ...]]:
    """A GhostNet-style network (Han et al., CVPR 2020) at width 1.0, batch 1, 224x224: ghost
    modules (a 1x1 conv, then a cheap depthwise 3x3 on its output, concatenated), ghost
    bottlenecks with depthwise stride-2 stages and squeeze-excitation, random weights. Many small
    fused functions, so it shows where the pool's threads sit."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Ghost(nn.Module):
        def __init__(self, cin: int, cout: int, relu: bool) -> None:
            super().__init__()
            init = (cout + 1) // 2
            act = [nn.ReLU(inplace=True)] if relu else []
            self.primary = nn.Sequential(nn.Conv2d(cin, init, 1, bias=False), nn.BatchNorm2d(init), *act)
            self.cheap = nn.Sequential(nn.Conv2d(init, init, 3, 1, 1, groups=init, bias=False), nn.BatchNorm2d(init), *act)
            self.cout = cout

        def forward(self, x: Any) -> Any:
            a = self.primary(x)
            return torch.cat([a, self.cheap(a)], 1)[:, :self.cout]

    class SE(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            r = max(8, c // 4)
            self.fc = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, r, 1), nn.ReLU(inplace=True),
                                    nn.Conv2d(r, c, 1), nn.Hardsigmoid())

        def forward(self, x: Any) -> Any:
            return x * self.fc(x)

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, mid: int, cout: int, k: int, s: int, se: bool) -> None:
            super().__init__()
            layers: list[nn.Module] = [Ghost(cin, mid, True)]
            if s > 1:
                layers += [nn.Conv2d(mid, mid, k, s, k // 2, groups=mid, bias=False), nn.BatchNorm2d(mid)]
            if se:
                layers.append(SE(mid))
            layers.append(Ghost(mid, cout, False))
            self.body = nn.Sequential(*layers)
            self.short = (nn.Identity() if s == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cin, k, s, k // 2, groups=cin, bias=False), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout)))

        def forward(self, x: Any) -> Any:
            return self.body(x) + self.short(x)

    cfg = [(16, 16, 16, 3, 1, False), (16, 48, 24, 3, 2, False), (24, 72, 24, 3, 1, False),
           (24, 72, 40, 5, 2, True), (40, 120, 40, 5, 1, True), (40, 240, 80, 3, 2, False),
           (80, 200, 80, 3, 1, False), (80, 184, 80, 3, 1, False), (80, 184, 80, 3, 1, False),
           (80, 480, 112, 3, 1, True), (112, 672, 112, 3, 1, True), (112, 672, 160, 5, 2, True),
           (160, 960, 160, 5, 1, False), (160, 960, 160, 5, 1, True)]
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        *[Bottleneck(*c) for c in cfg],
        nn.Conv2d(160, 960, 1, bias=False), nn.BatchNorm2d(960), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Conv2d(960, 1280, 1), nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(1280, 1000))
    for m in net.modules():  # random running statistics, as the zoo's models have
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return net.eval(), (torch.randn(1, 3, 224, 224),)


def export_models(folder: Path) -> dict[str, dict[str, Any]]:
    """Compile each model with the template defaults and export it; its library, input and functions."""
    import numpy as np

    from tensortune.app.deploy import compile as compile_model
    from tensortune.app.deploy import load

    out = {}
    for name in MODELS:
        model = load(*ghostnet()) if name == "ghostnet" else load(name)
        cm = compile_model(model)
        lib = folder / f"{name}.so"
        cm.export(str(lib))
        x = folder / f"{name}.npy"
        np.save(x, np.asarray(model.example_inputs[0]))
        out[name] = {"library": str(lib), "input": str(x), "functions": len(cm.choices)}
    return out


def child(arm: str, libraries: list[str], inputs: list[str], inferences: int) -> dict[str, list[float]]:
    """In a fresh process: milliseconds of each timed inference of each library."""
    import numpy as np

    samples = {}
    for lib, x in zip(libraries, inputs):
        data = np.load(x)
        if arm == "tvm":  # TVM alone, as a user without tensortune runs the library
            import tvm
            from tvm import relax

            vm = relax.VirtualMachine(tvm.runtime.load_module(lib), tvm.cpu())
            arg = tvm.runtime.tensor(data)
            f = vm["main"]

            def run() -> None:
                f(arg)
        else:
            from tensortune.models.compile import load_library

            g = load_library(lib)

            def run() -> None:
                g(data)
        for _ in range(WARMUP):
            run()
        times = []
        for _ in range(inferences):
            t0 = time.perf_counter()
            run()
            times.append((time.perf_counter() - t0) * 1e3)
        samples[lib] = times
    return samples


def spawn(arm: str, threads: int, libs: dict[str, dict[str, Any]], inferences: int) -> dict[str, dict[str, float]]:
    """One fresh process of ``arm``: per model, the median and quartiles of its inferences (ms)."""
    env = {**os.environ, "TVM_NUM_THREADS": str(1 if arm == "one-thread" else threads)}
    if arm == "tvm":
        env["TVM_BIND_THREADS"] = "1"  # TVM's own binding: workers pinned, the calling thread free
    names = list(libs)
    cmd = [sys.executable, "-m", "bench.placement", "--child", arm, "--inferences", str(inferences),
           "--libraries", ",".join(libs[n]["library"] for n in names), "--inputs", ",".join(libs[n]["input"] for n in names)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
    raw = json.loads(proc.stdout.strip().splitlines()[-1])
    out = {}
    for n in names:
        q = statistics.quantiles(raw[libs[n]["library"]], n=4)
        out[n] = {"median_ms": statistics.median(raw[libs[n]["library"]]), "q1_ms": q[0], "q3_ms": q[2]}
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per arm and model: the processes' medians, their median, slowest over fastest."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for arm in ARMS:
        for model in MODELS:
            meds = [r["models"][model]["median_ms"] for r in runs if r["arm"] == arm]
            if meds:
                table.setdefault(arm, {})[model] = {"medians_ms": meds, "median_ms": statistics.median(meds),
                                                    "worst_over_best": max(meds) / min(meds)}
    for model in MODELS:
        ours, one = table.get("tensortune", {}).get(model), table.get("one-thread", {}).get(model)
        if ours and one:
            ours["faster_than_one_thread"] = all(m < one["median_ms"] for m in ours["medians_ms"])
    return table


def report(meta: dict[str, Any], table: dict[str, dict[str, dict[str, Any]]]) -> str:
    """``report.md``: one row per arm and model."""
    mid = meta["machine"]["machine_id"]
    lines = [f"# One speed per model in every process ({mid['cpu_model']}, LLVM cpu {mid['llvm_cpu']}, {mid['cores']} cores)", "",
             f"{meta['processes']} rounds of fresh processes, {meta['inferences']} inferences each after "
             f"{WARMUP} warm-up ones, arms interleaved in every round; {meta['threads']} threads but "
             f"`one-thread`. Date {meta['machine']['date']}.", "",
             "| arm | model | functions | median of process medians (ms) | slowest / fastest process | "
             "every process faster than one thread | process medians (ms) |", "|---|---|---:|---:|---:|---|---|"]
    for arm, models in table.items():
        for model, row in models.items():
            faster = row.get("faster_than_one_thread")
            lines.append(f"| {arm} | {model} | {meta['libraries'][model]['functions']} | {row['median_ms']:.2f} | "
                         f"{row['worst_over_best']:.3f} | {'' if faster is None else ('yes' if faster else 'no')} | "
                         f"{', '.join(f'{m:.2f}' for m in row['medians_ms'])} |")
    if any(r.get("round_trip_ns") is not None for r in meta["runs"]):
        lines += ["", "Each process with the host's cross-core round trip timed just before it (no TVM):", "",
                  "| round | arm | round trip (ns) | " + " | ".join(f"{m} (ms)" for m in MODELS) + " |",
                  "|---:|---|---:|" + "---:|" * len(MODELS)]
        for r in meta["runs"]:
            t = r.get("round_trip_ns")
            lines.append(f"| {r['round'] + 1} | {r['arm']} | {'' if t is None else f'{t:.0f}'} | "
                         + " | ".join(f"{r['models'][m]['median_ms']:.2f}" for m in MODELS) + " |")
    ok = all(r["worst_over_best"] <= SPREAD_TARGET for r in table.get("tensortune", {}).values())
    lines += ["", f"Target (every tensortune process within {SPREAD_TARGET - 1:.0%} of the best, two threads faster "
                  f"than one in every process): {'met' if ok and all(r.get('faster_than_one_thread') for r in table.get('tensortune', {}).values()) else 'NOT met'}."]
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench run --study placement", description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=10, help="rounds of fresh processes (one per arm each)")
    p.add_argument("--inferences", type=int, default=200, help="timed inferences per model and process")
    p.add_argument("--threads", type=int, default=2, help="TVM threads of the tensortune and tvm arms")
    p.add_argument("--out", help="results folder (default bench/results/placement-CPU-DATE)")
    p.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
    p.add_argument("--libraries", help=argparse.SUPPRESS)
    p.add_argument("--inputs", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.child:
        samples = child(args.child, args.libraries.split(","), args.inputs.split(","), args.inferences)
        print(json.dumps(samples))
        return 0
    from .common import machine_info

    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    info = machine_info()
    out = Path(args.out or f"bench/results/placement-{info['machine_id']['llvm_cpu']}-{time.strftime('%Y-%m-%d')}")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        libs = export_models(Path(tmp))
        exe = build_probe(Path(tmp))
        runs = []
        for i in range(args.processes):
            for arm in ARMS:
                trip = probe(exe)
                runs.append({"round": i, "arm": arm, "round_trip_ns": trip,
                             "models": spawn(arm, args.threads, libs, args.inferences)})
                print(f"round {i + 1}/{args.processes} {arm} (host round trip {trip} ns): "
                      + ", ".join(f"{m} {v['median_ms']:.2f} ms" for m, v in runs[-1]["models"].items()), flush=True)
    meta = {"machine": info, "processes": args.processes, "inferences": args.inferences, "threads": args.threads,
            "libraries": {n: {"functions": v["functions"]} for n, v in libs.items()}}
    table = summarize(runs)
    (out / "placement.json").write_text(json.dumps({"meta": meta, "runs": runs, "summary": table}, indent=1) + "\n")
    text = report({**meta, "runs": runs}, table)
    write_text(out / "report.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
