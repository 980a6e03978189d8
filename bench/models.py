"""Whole-model benchmark: tune a model with autotvm, then compare it with PyTorch and ONNX Runtime.

    python bench/models.py run [--models resnet18,mobilenet_v2,bert_base] [--budget 3600]
    python bench/models.py onnx [--budget 600]     # ShuffleNetV2 x1.0, defined here, through an ONNX file
    python bench/models.py report                  # models.md + models.png from the saved results

Each model runs in its own ``tensortune`` process, one after the other: ``tensortune tune MODEL
--tuner autotvm --time-budget S --db bench/results/models/MODEL.db --json`` then ``tensortune
bench MODEL --db ... --json`` (outputs checked against the reference first, then medians of
interleaved rounds of tuned, untuned, PyTorch eager and ONNX Runtime at one thread count). The
databases resume: running again tunes for another budget on top of the stored trials.

The ONNX model is ShuffleNetV2 x1.0 (Ma et al. 2018; 2,278,604 parameters), which the zoo does not
have: channel split, channel shuffle (reshape/transpose), concat and stride-2 depthwise branches. It
is exported with the same exporter the benchmark uses for ONNX Runtime and then handled only as a
file: ``tensortune tune/bench shufflenet_v2.onnx``, so its reference is ONNX Runtime.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine_info, save_figure, write_text  # noqa: E402

OUT = RESULTS / "models"
DEFAULT_MODELS = ("resnet18", "mobilenet_v2", "bert_base")
ONNX_NAME = "shufflenet_v2"
SYSTEMS = ("tensortune tuned", "tensortune untuned", "pytorch", "onnxruntime")
#: The timing label of a run whose tune JSON has no ``measure`` field (made before it was recorded).
NOT_RECORDED = "not recorded"


# ---------------------------------------------------------------- ShuffleNetV2 x1.0 (not in the zoo)
def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, relu: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class _ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(_conv_bn(cin, cin, 3, stride, groups=cin, relu=False), _conv_bn(cin, half, 1))
        self.branch2 = nn.Sequential(_conv_bn(cin if stride > 1 else half, half, 1),
                                     _conv_bn(half, half, 3, stride, groups=half, relu=False), _conv_bn(half, half, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        b, c, h, w = out.shape
        return out.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)  # channel shuffle


class ShuffleNetV2(nn.Module):
    """ShuffleNetV2 x1.0: stages of 4, 8, 4 units with 116, 232, 464 channels."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1))
        units: list[nn.Module] = []
        cin = 24
        for repeats, cout in zip((4, 8, 4), (116, 232, 464)):
            units += [_ShuffleUnit(cin, cout, 2)] + [_ShuffleUnit(cout, cout, 1) for _ in range(repeats - 1)]
            cin = cout
        self.stages = nn.Sequential(*units)
        self.conv5 = _conv_bn(cin, 1024, 1)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv5(self.stages(self.stem(x))).mean((2, 3)))


def shufflenet_v2(seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """The model with random weights and batch-norm statistics recalibrated on random images, and an input."""
    torch.manual_seed(seed)
    model = ShuffleNetV2()
    for m in model.modules():  # cumulative statistics of a few batches, as after training
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(4, 3, 224, 224))
    model.eval()
    return model, torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(seed + 1))


# ---------------------------------------------------------------- runs
def _tensortune(args: list[str], out: Path) -> dict[str, Any]:
    """Run ``tensortune ARGS --json``, keep its stderr in ``out.log``, return its JSON."""
    exe = Path(sys.executable).with_name("tensortune")
    t0 = time.monotonic()
    with open(out.with_suffix(".log"), "w") as err:
        proc = subprocess.run([str(exe), *args, "--json"], stdout=subprocess.PIPE, stderr=err, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"tensortune {' '.join(args)} failed (exit {proc.returncode}); see {out.with_suffix('.log')}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    data["process_wall_s"] = time.monotonic() - t0
    write_text(out, json.dumps(data, indent=1))
    return data


def tune_and_bench(model: str, name: str, budget: float, seed: int, extra: list[str] = ()) -> None:
    """Tune ``model`` with autotvm for ``budget`` seconds, then bench it; results under ``bench/results/models``."""
    OUT.mkdir(parents=True, exist_ok=True)
    db = OUT / f"{name}.db"
    print(f"{name}: tuning with autotvm for {budget:.0f} s (db {db})", flush=True)
    tune = _tensortune(["tune", model, *extra, "--tuner", "autotvm", "--time-budget", str(budget), "--db", str(db),
                        "--seed", str(seed), "--no-progress"], OUT / f"{name}_tune.json")
    print(f"{name}: {tune['tasks_measured']} tasks, estimated total {tune['estimated_total_ms']:.2f} ms, "
          f"{tune['wall_s']:.0f} s", flush=True)
    bench = _tensortune(["bench", model, *extra, "--db", str(db)], OUT / f"{name}_bench.json")
    for r in bench["rows"]:
        lat = r["latency"]
        print(f"  {r['name']:20} {lat['median_ms'] if lat else float('nan'):9.2f} ms  {r['check']}", flush=True)
    write_text(OUT / f"{name}_machine.json", json.dumps(machine_info(), indent=1))


def cmd_run(a: argparse.Namespace) -> None:
    for model in a.models.split(","):
        tune_and_bench(model, model, a.budget, a.seed)
    report()


def cmd_onnx(a: argparse.Namespace) -> None:
    from tensortune.models.reference import export_onnx

    model, x = shufflenet_v2(a.seed)
    path = OUT / f"{ONNX_NAME}.onnx"
    export_onnx(model, [x], str(path))
    print(f"exported {path} ({sum(p.numel() for p in model.parameters()):,} parameters)", flush=True)
    tune_and_bench(str(path), ONNX_NAME, a.budget, a.seed)
    report()


# ---------------------------------------------------------------- report
def _load(name: str, where: Path = OUT) -> tuple[dict[str, Any], dict[str, Any]] | None:
    t, b = where / f"{name}_tune.json", where / f"{name}_bench.json"
    if not (t.exists() and b.exists()):
        return None
    return json.loads(t.read_text()), json.loads(b.read_text())


def _default_latency(db_path: Path, workload_key: str) -> float | None:
    """Latency (ms) the task's template default config measured at in the run (the tuner measures it first);
    None without the run's database (databases are not committed)."""
    from tensortune.database import Database
    from tensortune.task import Task

    if not db_path.exists():
        return None
    db = Database(db_path, readonly=True)
    try:
        rec = db.get_task(workload_key)
        if rec is None:
            return None
        default = Task.from_json(json.loads(rec.task_json)).default_config().index
        trials = [t for t in db.trials(workload_key, ok_only=True) if t.config_index == default]
    finally:
        db.close()
    return trials[0].cost * 1e3 if trials else None


def timing(tune: dict[str, Any]) -> str:
    """How candidates were timed while tuning (``hot``/``cold``), or :data:`NOT_RECORDED` when the
    tune JSON predates the ``measure`` field: never a guess."""
    measure = tune.get("measure")
    return measure.split(" ")[0] if measure else NOT_RECORDED


def _machine_line(runs: list[tuple[str, Path]]) -> str:
    """The machine of each run as recorded beside it (``NAME_machine.json``), saying where it was not."""
    seen: dict[str, list[str]] = {}
    for n, where in runs:
        label = n if where == OUT else f"{n} ({where.name})"
        f = where / f"{n}_machine.json"
        m = json.loads(f.read_text()) if f.exists() else None
        mid = (m or {}).get("machine_id", {})
        key = ("not recorded" if m is None else
               f"{m.get('target', {}).get('mcpu', '?')}, {m.get('cpus', '?')} cores "
               f"({mid.get('cpu_model', 'CPU model not recorded')}), TVM {m.get('tvm', '?')}, "
               f"torch {m.get('torch', '?')}")
        seen.setdefault(key, []).append(label)
    return "Machine: " + "; ".join(f"{k} for {', '.join(v)}" for k, v in seen.items()) + \
        ". Ratios > 1 mean tensortune is faster."


def report() -> None:
    """``models.md`` (comparison table, per-model task summary) and ``models.png``."""
    # results/models holds the runs; results/models/<sub>/ earlier or variant runs of the same models
    runs = [(n, d) for d in (OUT, *sorted(p for p in OUT.iterdir() if p.is_dir())) for n in (*DEFAULT_MODELS, ONNX_NAME)
            if _load(n, d)] if OUT.exists() else []
    if not runs:
        raise SystemExit(f"no results under {OUT}")
    lines = ["# Whole models: tensortune (autotvm) vs PyTorch eager and ONNX Runtime", "",
             "Timing: how candidates were timed while tuning, as recorded by `tensortune tune --json` (`cold`: "
             "`MeasureOptions.cold()`, weights flushed before every run; `hot`: caches warm); `not recorded`: the "
             "run predates that record, so how it timed candidates is not known.", "",
             "Median latency (ms) of interleaved rounds at one thread count; every row's outputs were checked "
             "against the reference first (PyTorch for zoo models, ONNX Runtime for the ONNX file).", "",
             "| model | tuning | timing | tasks | tuned | untuned | PyTorch | ONNX Runtime | tuned vs PyTorch | "
             "tuned vs ORT | outputs |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    detail: list[str] = []
    for n, where in runs:
        tune, bench = _load(n, where)
        how = timing(tune)
        rows = {r["name"]: r for r in bench["rows"]}
        med = {s: (rows[s]["latency"] or {}).get("median_ms") if s in rows else None for s in SYSTEMS}
        cell = lambda v: f"{v:.2f}" if v else "-"  # noqa: E731
        ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "-"  # noqa: E731
        ok = all(r["outputs_match"] for r in bench["rows"])
        lines.append(f"| {n} | {tune['wall_s'] / 60:.0f} min | {how} | {tune['tasks_measured']}/{len(tune['tasks'])} | "
                     f"{cell(med['tensortune tuned'])} | {cell(med['tensortune untuned'])} | {cell(med['pytorch'])} | "
                     f"{cell(med['onnxruntime'])} | {ratio(med['pytorch'], med['tensortune tuned'])} | "
                     f"{ratio(med['onnxruntime'], med['tensortune tuned'])} | "
                     f"{'match (' + bench['reference'] + ')' if ok else 'MISMATCH'} |")
        detail += [f"## {n} (timing: {how}): heaviest tasks, as measured while tuning", "",
                   "| task | calls | trials | default ms | best ms | speed-up |",
                   "|---|---:|---:|---:|---:|---:|"]
        for t in sorted(tune["tasks"], key=lambda t: -(t["weighted_ms"] or 0))[:8]:
            d = _default_latency(where / f"{n}.db", t["workload_key"])
            b = t["best_latency_ms"]
            detail.append(f"| {t['task']} | {t['weight']} | {t['trials']} | {cell(d)} | {cell(b)} | {ratio(d, b)} |")
        detail.append("")
    lines += ["", _machine_line(runs), "", *detail]
    md = "\n".join(lines) + "\n"
    write_text(RESULTS / "models.md", md)
    print(md)
    _plot(runs)


def _plot(runs: list[tuple[str, Path]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(3.2 * len(runs), 3.4), squeeze=False)
    for ax, (n, where) in zip(axes[0], runs):
        tune, bench = _load(n, where)
        rows = {r["name"]: r for r in bench["rows"]}
        systems = [s for s in SYSTEMS if s in rows and rows[s]["latency"]]
        vals = [rows[s]["latency"]["median_ms"] for s in systems]
        errs = [[v - rows[s]["latency"]["p25_ms"] for s, v in zip(systems, vals)],
                [rows[s]["latency"]["p75_ms"] - v for s, v in zip(systems, vals)]]
        ax.bar(range(len(systems)), vals, yerr=errs, color=["C0", "C7", "C1", "C2"][:len(systems)])
        ax.set_xticks(range(len(systems)), [s.replace("tensortune ", "tt ") for s in systems], rotation=30, fontsize=8)
        ax.set_title(f"{n} (timing: {timing(tune)})", fontsize=9)
        ax.set_ylabel("ms (median)")
    fig.tight_layout()
    save_figure(fig, RESULTS / "models.png", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("run", "onnx", "report"))
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--budget", type=float, default=None, help="tuning seconds per model (default 3600; onnx: 600)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.budget is None:
        a.budget = 600.0 if a.command == "onnx" else 3600.0
    {"run": cmd_run, "onnx": cmd_onnx, "report": lambda _: report()}[a.command](a)


if __name__ == "__main__":
    main()
