"""The Hugging Face corpus: models nobody here wrote, untuned tensortune against the CPU runtimes.

``python -m bench run --study corpus --out bench/results/corpus-CPU-DATE [--models hf:vit hf:gpt2:seq_len=64 ...] [--rounds 5]``
``python -m bench run --study corpus --out DIR --models patterns``: the pattern networks of
:mod:`tensortune.models.patterns` (``pattern:NAME`` specs), exported to ONNX into ``DIR/models``
and imported from there, as a team's ONNX file would be
``python -m bench run --study corpus --out DIR --tune fasor -O mode=efficiency --budget 300``: each model tuned first
(``tensortune tune --time-budget``, its database in ``DIR/dbs``, never committed; the whole command,
the in-model check included, within ``--budget`` seconds), then timed tuned and
untuned beside the runtimes into ``tuned-TUNER.json`` / ``tuned-TUNER.md``.

Each model is built from its default config with random weights (``hf:MODEL_TYPE``, nothing
downloaded), compiled untuned, its outputs checked against PyTorch, then timed in interleaved
rounds with ONNX Runtime, OpenVINO (f32) and PyTorch eager at the machine's thread count
(:func:`tensortune.models.comparison.bench_model`), on near cores where the host allows
(``--wait``, :mod:`bench.hoststate`: the entry keeps the round trips it was timed between).
``corpus.json`` holds one entry per model, written
as soon as the model is done, so a stopped run goes on from the next model; ``report.md`` is the
table: GFLOPs, each system's median, untuned tensortune over the faster runtime, and every
function that did not get its template's schedule (the fallbacks, with why).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .common import geomean, machine_info, machine_line, write_text
from .hoststate import TRIES, WAIT_S, HostWait, build_probe

#: The corpus: each family of the issue at its default config (EfficientNet at B0's width, depth
#: and resolution: its default config is B7 at 600x600).
CORPUS = (
    "hf:convnext", "hf:regnet", "hf:resnet", "hf:mobilenet_v2", "hf:mobilevit",
    "hf:efficientnet:image_size=224,width_coefficient=1.0,depth_coefficient=1.0,hidden_dim=1280", "hf:swin", "hf:levit",
    "hf:poolformer", "hf:vit", "hf:gpt2", "hf:distilbert", "hf:t5", "hf:whisper",
    # vision, at the sizes of published checkpoints (defaults where the default is one)
    "hf:deit:hidden_size=384,num_attention_heads=6,intermediate_size=1536", "hf:beit",
    "hf:dinov2:hidden_size=384,num_attention_heads=6", "hf:segformer", "hf:convnextv2", "hf:mobilenet_v1",
    "hf:focalnet", "hf:pvt_v2", "hf:swiftformer",
    # language: encoders, and decoders cut to a few layers of their published widths
    "hf:bert", "hf:roberta:num_hidden_layers=6", "hf:albert:hidden_size=768,num_attention_heads=12,intermediate_size=3072",
    "hf:electra", "hf:deberta-v2:hidden_size=768,num_hidden_layers=6,num_attention_heads=12,intermediate_size=3072",
    "hf:opt", "hf:llama:hidden_size=512,num_hidden_layers=8,num_attention_heads=8,num_key_value_heads=4,"
    "intermediate_size=1408", "hf:qwen2:hidden_size=896,num_hidden_layers=6,num_attention_heads=14,"
    "num_key_value_heads=2,intermediate_size=4864",
    # speech: one second of 16 kHz audio through a convolutional feature encoder, then a transformer
    "hf:wav2vec2", "hf:hubert", "hf:wavlm",
)
#: The pattern networks (ONNX exports of :mod:`tensortune.models.patterns`); ``--models patterns`` runs them all.
PATTERN_PREFIX = "pattern:"
SYSTEMS = ("tensortune untuned", "onnxruntime", "openvino", "pytorch", "openvino as shipped", "tensortune f32")
#: The kernel classes the issue's profile target is about (conv and matmul functions).
COMPUTE_KERNELS = ("conv2d", "depthwise_conv2d", "dense", "matmul", "batch_matmul")


def _medians(report: Any, names: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, float | None], Any]:
    """A bench report's rows by name, the median ms of ``names`` (None where a system failed or is
    missing) and the library it is compared with ``(name, ms)`` (None without one): the faster of
    ONNX Runtime and OpenVINO (f32), OpenVINO as shipped for a bf16 build."""
    rows = {r.name: r for r in report.rows}
    ms = {n: (rows[n].latency.median_ms if n in rows and rows[n].latency and rows[n].ok else None) for n in names}
    return rows, ms, report.anchor()


def _f32_untuned(model: Any) -> dict[str, Any]:
    """For a bf16 build: the same model's untuned f32 build, a row beside it (none for f32)."""
    from tensortune.models.compile import compile_model

    return {"tensortune f32": compile_model(model.with_precision("f32"))} if model.precision == "bf16" else {}


def _over(ms: float | None, fastest: Any) -> float | None:
    """``ms`` over the faster library's median (None when either is missing)."""
    return ms / fastest[1] if fastest and ms else None


def expand(specs: list[str]) -> list[str]:
    """``specs`` with the word ``patterns`` replaced by every pattern network's spec."""
    from tensortune.models.patterns import pattern_names

    return [x for s in specs for x in ([PATTERN_PREFIX + n for n in pattern_names()] if s == "patterns" else [s])]


def source(spec: str, out: Path) -> str:
    """What :func:`~tensortune.models.importer.load_model` takes for ``spec``: a pattern network's
    ONNX file (exported into ``out/models`` once), else ``spec`` itself."""
    if not spec.startswith(PATTERN_PREFIX):
        return spec
    from tensortune.models.patterns import export_pattern

    name = spec.removeprefix(PATTERN_PREFIX)
    path = out / "models" / f"{name}.onnx"
    return str(path) if path.is_file() else export_pattern(name, str(out / "models"))


def run_model(spec: str, rounds: int, peak: dict[str, Any], precision: str = "f32",
              host: HostWait | None = None) -> dict[str, Any]:
    """Compile ``spec`` untuned in ``precision``, check and time it against the runtimes on near
    cores (``host``), profile it against the machine's ``peak``
    (:func:`tensortune.measure.peak.measure_peak`); one JSON entry."""
    from tensortune.models.comparison import bench_model
    from tensortune.models.compile import compile_model
    from tensortune.models.importer import load_model
    from tensortune.models.profile import profile_compiled

    t0 = time.perf_counter()
    model = load_model(spec).with_precision(precision)
    t1 = time.perf_counter()
    cm = compile_model(model)
    t2 = time.perf_counter()
    copy, extra = compile_model(model), _f32_untuned(model)  # compiled once, whatever the timings tried
    report, state = (host or HostWait()).timed(
        lambda: bench_model(model, rounds=rounds, tuned=cm, untuned=copy, extra=extra))
    rows, ms, fastest = _medians(report, SYSTEMS)
    untuned = rows.get("tensortune untuned")
    prof = profile_compiled(cm, threads=peak.get("threads", 0), peak_gflops=peak.get("peak_gflops"),
                            bandwidth_gbs=peak.get("bandwidth_gbs"), bf16_peak_gflops=peak.get("bf16_peak_gflops"),
                            amx_peak_gflops=peak.get("amx_peak_gflops"))
    return {
        "model": spec, "gflops": sum(c.flops * c.weight for c in cm.choices) / 1e9,
        "import_s": t1 - t0, "compile_s": t2 - t1, "ms": ms,
        "below_half_peak": [{"task": f.task, "mflops": f.flops / 1e6, "gflops": f.gflops, "calls": f.calls,
                             "ms": f.ms, "peak": prof.peak_of(f)}
                            for f in prof.below(0.5) if f.kernel_class.startswith(COMPUTE_KERNELS)],
        "memory_below_half": [{"task": f.task, "gbs": f.gbs, "calls": f.calls, "ms": f.ms}
                              for f in prof.memory_below(0.5)],
        "bandwidth_gbs": prof.bandwidth_gbs,
        "transforms": cm.layout.transforms if cm.layout is not None else None,
        "untuned_copy_ms": rows["tensortune tuned"].latency.median_ms if rows["tensortune tuned"].latency else None,
        "checks": {n: r.check for n, r in rows.items()}, "outputs_match": bool(untuned and untuned.ok),
        "max_rel_err": rows["tensortune untuned"].max_rel_err if "tensortune untuned" in rows else None,
        "fastest": fastest[0] if fastest else None,
        "ratio": _over(ms["tensortune untuned"], fastest),
        "layout": cm.layout.summary() if cm.layout is not None else "",
        "fallbacks": [{"task": c.task, "source": c.source, "reason": c.reason}
                      for c in cm.choices if c.source not in ("tuned", "default")],
        "generic": [{"task": c.task, "flops": c.flops, "weight": c.weight} for c in cm.choices
                    if c.kernel_class == "generic" or c.task.startswith(("conv2d-", "depthwise_conv2d-"))],
        "notes": report.notes, **state,
    }


#: The share of a model's budget its tuning run is given (``tune`` stops between tasks: the last one runs over).
TUNE_SHARE = 0.8
#: Model compiles the in-model check after tuning makes (tuned, untuned, a runner-up), reserved out of the budget.
CHECK_COMPILES = 3


def tuning_seconds(budget: float, compile_s: float) -> float:
    """The ``--time-budget`` of a model whose whole ``tune`` command (the in-model check
    included) must end within ``budget`` seconds, its untuned compile taking ``compile_s``."""
    return max(0.25 * budget, TUNE_SHARE * budget - CHECK_COMPILES * compile_s)


def tune_model(spec: str, tuner: str, options: list[str], budget: float, out: Path, rounds: int,
               precision: str = "f32", host: HostWait | None = None) -> dict[str, Any]:
    """Tune ``spec`` with ``tuner`` within ``budget`` seconds of ``tune`` wall time, the in-model check
    included (:func:`tuning_seconds`; kept: a rerun reads the tuning run back), then check and
    time it tuned and untuned against the runtimes; one JSON entry."""
    from tensortune.database import Database
    from tensortune.models.comparison import bench_model
    from tensortune.models.compile import compile_model
    from tensortune.models.importer import load_model

    from .modelruns import run_json

    name = Path(spec).stem if spec.endswith(".onnx") else spec
    slug = name.replace(":", "_").replace("=", "-").replace(",", "_") + ("-bf16" if precision == "bf16" else "")
    db = out / "dbs" / f"{slug}-{tuner}.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    model = load_model(spec).with_precision(precision)
    kept = out / "runs" / f"{slug}-{tuner}.json"
    tune_s = untuned = None
    if not kept.exists():  # a resumed model reads its tuning run back: no budget to work out
        t0 = time.perf_counter()
        untuned = compile_model(model)
        tune_s = tuning_seconds(budget, time.perf_counter() - t0)
    cmd = ["tune", spec, "--tuner", tuner, "--time-budget", f"{tune_s or budget:.0f}", "--db", str(db), "--no-progress",
           "--precision", precision]
    for o in options:
        cmd += ["-O", o]
    run = run_json(cmd, kept, fresh=[db])
    with Database(str(db)) as database:
        cm = compile_model(model, database)
    untuned, extra = untuned or compile_model(model), _f32_untuned(model)
    report, state = (host or HostWait()).timed(
        lambda: bench_model(model, rounds=rounds, tuned=cm, untuned=untuned, extra=extra))
    rows, ms, fastest = _medians(report, ("tensortune tuned",) + SYSTEMS)
    return {
        "model": spec, "gflops": sum(c.flops * c.weight for c in cm.choices) / 1e9, "ms": ms,
        "tuning_wall_s": run.get("wall_s"), "time_budget_s": tune_s, "tasks_measured": run.get("tasks_measured"),
        "counts": cm.counts(), "checks": {n: r.check for n, r in rows.items()},
        "outputs_match": bool(rows.get("tensortune tuned") and rows["tensortune tuned"].ok),
        "max_rel_err": rows["tensortune tuned"].max_rel_err if "tensortune tuned" in rows else None,
        "fastest": fastest[0] if fastest else None,
        "ratio": _over(ms["tensortune tuned"], fastest), "untuned_ratio": _over(ms["tensortune untuned"], fastest),
        "notes": report.notes, **state,
    }


def _num(v: float | None, fmt: str = ".2f") -> str:
    return format(v, fmt) if v is not None else "-"


#: A table column: its header, its alignment row cell and how an entry fills it.
Column = tuple[str, str, Callable[[dict[str, Any]], str]]


def _table(data: dict[str, Any], columns: list[Column]) -> list[str]:
    """A Markdown table of the corpus entries (a failed model: its error in the second-last column)."""
    lines = ["| " + " | ".join(c[0] for c in columns) + " |", "|" + "|".join(c[1] for c in columns) + "|"]
    for e in data["models"].values():
        if "error" in e:
            cells = [e["model"]] + ["-"] * (len(columns) - 3) + [e["error"][:120], "-"]
        else:
            cells = [c[2](e) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _ms(name: str, header: str) -> Column:
    return (header, "---:", lambda e: _num(e["ms"][name]))


#: The runtimes' columns, in table order.
RUNTIMES = [_ms("onnxruntime", "ONNX Runtime"), _ms("openvino", "OpenVINO"), _ms("pytorch", "PyTorch")]
#: The columns a bf16 run adds: OpenVINO as shipped (its own precision), tensortune's untuned f32
#: build and the output error of the bf16 build.
BF16_COLUMNS = [_ms("openvino as shipped", "OpenVINO as shipped"), _ms("tensortune f32", "tensortune f32 untuned"),
                ("max error / max", "---:", lambda e: _num(e.get("max_rel_err"), ".1e"))]


def _runtimes(data: dict[str, Any]) -> list[Column]:
    return RUNTIMES + (BF16_COLUMNS if data.get("precision") == "bf16" else [])


def _anchor_words(data: dict[str, Any]) -> str:
    return "OpenVINO as shipped" if data.get("precision") == "bf16" else "the faster of ONNX Runtime and OpenVINO"


def _at_peak(data: dict[str, Any]) -> Column:
    """The best ratio physics allows: every FLOP of the model at the run's measured FMA peak, over
    the faster library's median (a tuned ratio under it is impossible)."""
    peak = data.get("peak", {}).get("peak_gflops")

    def cell(e: dict[str, Any]) -> str:
        libs = [e["ms"].get(n) for n in ("onnxruntime", "openvino") if e["ms"].get(n)]
        return f"{e['gflops'] / peak * 1e3 / min(libs):.2f}x" if peak and libs else "-"

    return ("all FLOPs at peak / fastest", "---:", cell)


def _geomean_line(data: dict[str, Any], key: str, what: str) -> str:
    """The geomean of ``key`` over the models, and over those timed on near cores where some were not."""
    rs = [e[key] for e in data["models"].values() if e.get(key)]
    near = [e[key] for e in data["models"].values() if e.get(key) and e.get("cores") == "near"]
    line = (f"Geomean of {what} tensortune ({data.get('precision', 'f32')}) over {_anchor_words(data)}: "
            f"{geomean(rs):.2f}x over {len(rs)} models" if rs else "")
    if rs and near and len(near) < len(rs):
        line += f"; {geomean(near):.2f}x over the {len(near)} timed on near cores"
    return line + "." if line else ""


def _cores(e: dict[str, Any]) -> str:
    """Where the host had the two threads while the model was timed (bench/hoststate.py)."""
    trips = [f"{t:.0f}" for t in e.get("round_trip_ns", []) if t is not None]
    return f"{e.get('cores', '-')} ({'/'.join(trips)} ns)" if trips else e.get("cores", "-")


#: The column of the host's cores, and the sentence under a table that has it.
CORES: Column = ("cores", "---", _cores)
CORES_LINE = ("Cores: where the host had the two threads while the model was timed, from a cross-core round trip "
              "before and after the timing (near: one L3, about 80 ns; far: about 330 ns, every runtime slower; "
              "bench/hoststate.py). A timing on far cores was tried again after a wait for near ones.")


#: The library rows a corpus ratio is taken against (the anchor of either precision).
ANCHORS = ("onnxruntime", "openvino", "openvino as shipped")


def _uncompared_line(data: dict[str, Any]) -> str:
    """The models left out of the geomean and why: an anchor row whose outputs failed their check
    (OpenVINO's own bf16 choice outside the bf16 tolerance) was not timed."""
    why = []
    for e in data["models"].values():
        if "error" in e or e.get("ratio") is not None:
            continue
        failed = [f"{name}: {msg}" for name, msg in e.get("checks", {}).items()
                  if name in ANCHORS and "outputs match" not in msg]
        why.append(f"{e['model']} ({'; '.join(failed) or 'no anchor row'})")
    return "Not compared: " + "; ".join(why) + "." if why else ""


def tuned_md(data: dict[str, Any]) -> str:
    """The tuned corpus table."""
    columns: list[Column] = [
        ("model", "---", lambda e: e["model"]), ("GFLOPs", "---:", lambda e: f"{e['gflops']:.2f}"),
        _ms("tensortune tuned", "tuned"), _ms("tensortune untuned", "untuned"), *_runtimes(data),
        ("tuned / fastest", "---:", lambda e: f"{_num(e['ratio'])}x"),
        ("untuned / fastest", "---:", lambda e: f"{_num(e['untuned_ratio'])}x"), _at_peak(data),
        ("outputs", "---", lambda e: "match" if e["outputs_match"] else "MISMATCH"),
        ("tuning s", "---:", lambda e: _num(e["tuning_wall_s"], ".0f")), CORES]
    over = [e["model"] for e in data["models"].values() if (e.get("tuning_wall_s") or 0) > data["budget"]]
    lines = [f"# Hugging Face corpus in {data.get('precision', 'f32')}, tuned by {data['tuner']} "
             f"{' '.join(data['options'])} within {data['budget']:.0f} s "
             f"a model ({machine_line(data['machine'])}, {data['machine'].get('cpus')} threads, {data['rounds']} "
             "interleaved rounds)", "", *_table(data, columns), "",
             _geomean_line(data, "ratio", "tuned"), "", _geomean_line(data, "untuned_ratio", "untuned"), "",
             _uncompared_line(data), "",
             "Tuning s: the whole `tune` command, the in-model check included; over the budget: "
             + (", ".join(over) if over else "none") + ".", "", CORES_LINE]
    return "\n".join(lines) + "\n"


def report_md(data: dict[str, Any]) -> str:
    """The corpus table and the fallbacks."""
    columns: list[Column] = [
        ("model", "---", lambda e: e["model"]), ("GFLOPs", "---:", lambda e: f"{e['gflops']:.2f}"),
        _ms("tensortune untuned", "tensortune"), *_runtimes(data),
        ("/ fastest runtime", "---:", lambda e: f"{_num(e['ratio'])}x ({e['fastest'] or '-'})"), _at_peak(data),
        ("outputs", "---", lambda e: "match" if e["outputs_match"] else "MISMATCH"),
        ("transforms", "---:", lambda e: "-" if e.get("transforms") is None else str(e["transforms"])),
        ("compile s", "---:", lambda e: f"{e['compile_s']:.0f}"), CORES]
    lines = [f"# Hugging Face corpus, untuned tensortune in {data.get('precision', 'f32')} ({machine_line(data['machine'])}, "
             f"{data['machine'].get('cpus')} threads, {data['rounds']} interleaved rounds)", "",
             *_table(data, columns), "", _geomean_line(data, "ratio", "untuned"), "", _uncompared_line(data), "",
             CORES_LINE]
    peak = data.get("peak", {}).get("peak_gflops")
    bf16_peak = data.get("peak", {}).get("bf16_peak_gflops")
    amx_peak = data.get("peak", {}).get("amx_peak_gflops")
    lines += ["", f"## Conv and matmul functions of more than 50 MFLOPs under half the measured peak "
                  f"({peak:.0f} GFLOP/s" + (f"; bf16 kernels: {bf16_peak:.0f}" if bf16_peak else "")
                  + (f"; AMX kernels: {amx_peak:.0f}" if amx_peak else "") + ")"
              if peak else "## Under half the peak", ""]
    for e in data["models"].values():
        for f in e.get("below_half_peak", []):
            roof = f.get("peak") or peak
            lines.append(f"- {e['model']}: {f['task']}: {f['gflops']:.0f} GFLOP/s ({f['gflops'] / roof:.0%} of "
                         f"{roof:.0f}), {f['calls']} calls, {f['ms']:.2f} ms" if roof else f"- {e['model']}: {f['task']}")
    bw = next((e["bandwidth_gbs"] for e in data["models"].values() if e.get("bandwidth_gbs")), None)
    lines += ["", "## Memory-bound functions of more than 0.2 ms an inference under half the copy bandwidth"
              + (f" ({bw:.1f} GB/s)" if bw else ""), ""]
    for e in data["models"].values():
        for f in e.get("memory_below_half", []):
            lines.append(f"- {e['model']}: {f['task']}: {f['gbs']:.1f} GB/s, {f['calls']} calls, {f['ms']:.2f} ms")
    lines += ["", "## Layouts and fallbacks", ""]
    for e in data["models"].values():
        if "error" in e:
            continue
        lines.append(f"- **{e['model']}**: {e['layout']}")
        for fb in e["fallbacks"]:
            lines.append(f"  - {fb['source']}: {fb['task']}: {fb['reason']}")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    ap = argparse.ArgumentParser(prog="python -m bench run --study corpus", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="results folder (resumed when it holds corpus.json)")
    ap.add_argument("--models", nargs="+", default=list(CORPUS), help="hf: specs, ONNX paths, pattern:NAME, or 'patterns' for all of them (space-separated)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--wait", type=float, default=WAIT_S, metavar="S",
                    help=f"seconds a model's timing waits for near cores, timed again while far (0: as they come; "
                         f"default {WAIT_S:.0f}; bench/hoststate.py)")
    ap.add_argument("--tune", metavar="TUNER", help="tune each model first with this tuner")
    ap.add_argument("-O", dest="options", action="append", default=[], metavar="KEY=VALUE",
                    help="a tuner option (repeatable)")
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                    help="tensortune's precision; bf16 is compared with OpenVINO as shipped (default f32)")
    ap.add_argument("--budget", type=float, default=300.0,
                    help="seconds of the whole tune command a model, the in-model check included (default 300)")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run (or resume) the corpus into ``--out``."""
    a = parser().parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (f"tuned-{a.tune}.json" if a.tune else "corpus.json")
    fresh = {"machine": machine_info(), "rounds": a.rounds, "precision": a.precision, "models": {}}
    if a.tune:
        fresh.update(tuner=a.tune, options=a.options, budget=a.budget)
    data = json.loads(path.read_text()) if path.is_file() else fresh
    if "peak" not in data:
        from tensortune.measure.peak import measure_peak
        from tensortune.target import cpu_count

        data["peak"] = {**measure_peak(cpu_count()), "threads": cpu_count()}
    with tempfile.TemporaryDirectory(prefix="corpus-probe-") as tmp:
        host = HostWait(build_probe(Path(tmp)), a.wait, TRIES if a.wait > 0 else 1)
        for spec in expand(a.models):
            if spec not in data["models"] or "error" in data["models"][spec]:
                run_one(spec, a, data, out, host)
                write_text(path, json.dumps(data, indent=1))
                write_text(path.with_suffix(".md") if a.tune else out / "report.md",
                           tuned_md(data) if a.tune else report_md(data))
    return 0


def run_one(spec: str, a: argparse.Namespace, data: dict[str, Any], out: Path, host: HostWait) -> None:
    """Run one model of the corpus into ``data`` (a failure is its entry)."""
    try:
        where = source(spec, out)
        data["models"][spec] = (tune_model(where, a.tune, a.options, a.budget, out, a.rounds, a.precision, host)
                                if a.tune else run_model(where, a.rounds, data["peak"], a.precision, host))
        data["models"][spec]["model"] = spec
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a model that fails (or its tuning run) is a result
        data["models"][spec] = {"model": spec, "error": (str(e).strip().splitlines() or [type(e).__name__])[0]}


if __name__ == "__main__":
    raise SystemExit(main())
