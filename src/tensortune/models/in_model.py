"""Confirm each task's schedule inside the model: the in-model check after tuning.

Tuning times every candidate alone, with its weights flushed from the caches
(:meth:`~tensortune.measure.MeasureOptions.flushed`). Inside a model a kernel runs between its
neighbours, on data they left in the caches, and a config that won alone can lose there (a
model of tuned kernels, each faster than its default alone, can run slower than untuned). So
after tuning, each tuned task's candidates are timed where they will run:

1. **Candidates** per tuned task: its best config (what :func:`.compile.compile_model` picks),
   its template default, and its ``alternatives`` runners-up (the next configs by median cost
   in the same measure context).
2. **Variants**: the model compiled once per candidate slot. Variant 0 gives every task its
   best config (the tuned model), variant 1 its default (the untuned model), variant ``i + 1``
   its ``i``-th runner-up (the best where it has none). Every variant's outputs are checked
   against the model's reference (PyTorch, else ONNX Runtime); a variant that fails is not
   timed, and its configs that no passing variant has are recorded as failed.
3. **Timing**: ``rounds`` interleaved rounds (the order of the variants rotated each round), in
   each ``runs`` inferences of each variant, every fused function timed by the VM's instrument
   hook (:func:`.profile.function_times`); a task's cost in an inference is its functions'
   seconds divided by their calls.
4. **Records**: every candidate's round is stored as a trial in the model's own measure context
   (timing ``{"mode": "in-model", "model": NAME}``: costs inside one model compare only with
   each other), marked as one confirmation group (``extra["confirm"]``, with
   ``extra["in_model"]``). :meth:`~tensortune.database.Database.best` then gives, per task, the
   config with the lowest median over the rounds, and ``compile_model`` prefers it for this
   model. Nothing else changes: the records the tuners learn from and resume with stay as they
   were, and the group counts against no trial budget.
5. **The whole model**: the model compiled with the confirmed configs is timed against
   variants 0 and 1 in many short interleaved rounds (:func:`~tensortune.measure.timing.interleaved_rounds`).
   Per-task choices assume a function's time hardly depends on its neighbours' configs; where the
   confirmed model is still slower than the faster of the two (by more than ``tolerance``, zero
   by default), judged by the median of the per-round ratios (pairs timed moments apart, so a
   slow spell of the machine hits both), that variant's configs are recorded as a last group
   (one config per task), so they stand.

``tensortune tune MODEL`` runs this at the end (``--no-check`` skips it; its time is part of
the tuning wall time) and ``tensortune check MODEL --db DB`` runs it on any database.
"""
from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database
    from ..space import Config
    from ..task import Task

#: Interleaved rounds, and inferences of each variant per round.
DEFAULT_ROUNDS = 5
DEFAULT_RUNS = 5
#: Runners-up per task compiled beside its best config and its default (one variant each).
DEFAULT_ALTERNATIVES = 1
#: The confirmed model may be this much slower than the faster of tuned and untuned before that
#: variant's configs are kept instead. Zero: a tie within the noise gains nothing, and ConvNeXt
#: (bf16, Zen 4) kept a confirmed model 1.7% slower than untuned that then timed 5.9% slower.
DEFAULT_TOLERANCE = 0.0
#: Interleaved rounds and seconds per round of the whole-model comparison at the end. Many short
#: rounds: a shared machine has slow spells of seconds, and the decision is on per-round pairs.
MODEL_ROUNDS = 15
MODEL_MIN_TIME_S = 0.1
#: The ``tuner`` name stored with the in-model trials.
TUNER_NAME = "in-model"


@dataclass
class Candidate:
    """One config of a task to time inside the model."""

    label: str  # "best", "default" or "runner-up N"
    config: Config
    seconds: list[list[float]] = field(default_factory=list)  # per round: per-call seconds per inference
    failed: str = ""  # why the variants with this config failed (none passed)

    def median_ms(self) -> float | None:
        """Median per-call milliseconds over every timed inference."""
        flat = [x for r in self.seconds for x in r]
        return statistics.median(flat) * 1e3 if flat else None


@dataclass
class TaskCheck:
    """One tuned task's candidates and the verdict."""

    task: str
    workload_key: str
    weight: int
    candidates: list[Candidate]
    chosen: str = ""  # the label the database now gives this model

    def to_json(self) -> dict[str, Any]:
        """JSON row."""
        return {"task": self.task, "workload_key": self.workload_key, "weight": self.weight, "chosen": self.chosen,
                "candidates": [{"label": c.label, "config_index": c.config.index, "in_model_ms": c.median_ms(),
                                **({"failed": c.failed} if c.failed else {})} for c in self.candidates]}


@dataclass
class InModelReport:
    """What the in-model check timed and decided."""

    model: str
    threads: int
    rounds: int
    runs: int
    tasks: list[TaskCheck]
    variants: list[dict[str, Any]]  # per variant: label, ok, check message
    latency_ms: dict[str, float] = field(default_factory=dict)  # tuned, untuned, confirmed (medians)
    #: Median over rounds of confirmed / the faster whole variant, each round's pair timed moments apart.
    paired_ratio: float | None = None
    kept: str = "confirmed"  # "confirmed", or the variant whose configs were kept instead
    group: str = ""
    wall_s: float = 0.0

    @property
    def changed(self) -> list[TaskCheck]:
        """The tasks whose model config is no longer their best measured alone."""
        return [t for t in self.tasks if t.chosen and t.chosen != "best"]

    def to_json(self) -> dict[str, Any]:
        """JSON form (``tensortune check --json``, and ``confirm`` in ``tune --json``)."""
        return {"model": self.model, "threads": self.threads, "rounds": self.rounds, "runs": self.runs,
                "variants": self.variants, "latency_ms": self.latency_ms,
                "paired_ratio": self.paired_ratio, "kept": self.kept, "group": self.group,
                "wall_s": self.wall_s, "changed": len(self.changed), "tasks": [t.to_json() for t in self.tasks]}

    def summary(self) -> str:
        """One line for people."""
        lat = self.latency_ms
        parts = [f"{name} {lat[name]:.2f} ms" for name in ("untuned", "tuned", "confirmed") if name in lat]
        kept = "" if self.kept == "confirmed" else f"; kept the {self.kept} configs (confirmed model slower)"
        if self.paired_ratio is not None:
            kept += f"; confirmed/faster of the two {self.paired_ratio:.3f} over paired rounds"
        return (f"in-model check of {self.model}: {len(self.tasks)} tuned tasks, {len(self.changed)} switched "
                f"to another config; {', '.join(parts)}{kept} ({self.wall_s:.0f} s)")

    def table(self) -> str:
        """Per task: each candidate's time inside the model, the chosen one marked."""
        lines = [self.summary(), f"{'task':58} {'weight':>6}  candidates (ms per call inside the model; * chosen)"]
        for t in self.tasks:
            cells = []
            for c in t.candidates:
                ms = c.median_ms()
                val = f"{ms:.4f}" if ms is not None else ("failed" if c.failed else "-")
                cells.append(f"{'*' if c.label == t.chosen else ' '}{c.label} {val}")
            lines.append(f"{t.task[:58]:58} {t.weight:6d}  " + ", ".join(cells))
        for v in self.variants:
            if not v["ok"]:
                lines.append(f"variant {v['label']}: FAILED ({v['check']})")
        return "\n".join(lines)


def _candidates(task: Task, db: Database, alternatives: int) -> list[Candidate]:
    """The task's best config (as compiling picks it), default and runners-up; [] when not tuned."""
    from ..database import top_configs
    from ..measure import MeasureOptions
    from ..database.trials import measure_context, pick_context

    context, _ = pick_context(db, task, measure_context(task, MeasureOptions.flushed()))
    best = db.best(task.workload_key, context) if context is not None else None
    if best is None:
        return []
    try:
        out = [Candidate("best", task.space.config_from_json({"knobs": best.config}))]
    except Exception:  # noqa: BLE001 - a record of another space version: nothing to check
        return []
    seen = {out[0].config.index}
    try:
        default = task.default_config()
        if default.index not in seen:
            out.append(Candidate("default", default))
            seen.add(default.index)
    except Exception:  # noqa: BLE001 - no default: the best and runners-up only
        pass
    ranked = top_configs((t for t in db.trials(task.workload_key) if t.context == context), alternatives + len(seen))
    n = 0
    for index in ranked:
        if n >= alternatives:
            break
        if index not in seen and task.space.is_valid(task.space.get(index)):
            n += 1
            out.append(Candidate(f"runner-up {n}", task.space.get(index)))
            seen.add(index)
    return out


def _slot(cands: list[Candidate], variant: int) -> Candidate:
    """The candidate a variant gives a task: variant 1 its default (else its best), variant
    ``i + 1`` its ``i``-th runner-up (else its best)."""
    if variant == 0:
        return cands[0]
    want = "default" if variant == 1 else f"runner-up {variant - 1}"
    return next((c for c in cands if c.label == want), cands[0])


def _reference_outputs(model: Any, threads: int) -> tuple[str, list[Any]]:
    """The model's reference (PyTorch, else ONNX Runtime) and its outputs on the example inputs."""
    from .reference import OrtRunner, ReferenceRunError, TorchRunner

    inputs = model.example_inputs
    if model.torch_module is not None:
        return "pytorch", TorchRunner(model.torch_module, threads).run(inputs)
    if model.onnx_path is not None:
        return "onnxruntime", OrtRunner(model.onnx_path, threads).run(inputs)
    raise ReferenceRunError(f"{model.name}: no reference to check the in-model variants against")


def check_in_model(model: Any, db: Database, threads: int | None = None, rounds: int = DEFAULT_ROUNDS,
                     runs: int = DEFAULT_RUNS, alternatives: int = DEFAULT_ALTERNATIVES,
                     tolerance: float = DEFAULT_TOLERANCE,
                     log: Callable[[str], None] | None = None) -> InModelReport:
    """Time each tuned task's candidates inside ``model`` and record the verdict in ``db`` (a
    writable :class:`~tensortune.database.Database`). TVM_NUM_THREADS must already be ``threads``
    (default: every core) in this process. See the module for the procedure."""
    from ..database import TrialRecord
    from ..measure import MeasureOptions
    from ..target import cpu_count
    from ..database.trials import ensure_task, measure_context, tvm_version
    from .compile import compile_model, model_tasks
    from .profile import function_times
    from ..measure.timing import interleaved_rounds
    from .reference import compare_outputs, set_threads

    t0 = time.perf_counter()
    say = log or (lambda _msg: None)
    threads = threads or cpu_count()
    set_threads(threads)
    checks: list[TaskCheck] = []
    tasks: dict[str, Any] = {}
    funcs: dict[str, list[str]] = {}
    for mt in model_tasks(model):
        cands = _candidates(mt.task, db, alternatives)
        if cands:
            checks.append(TaskCheck(mt.task.name, mt.task.workload_key, mt.weight, cands))
            tasks[mt.task.workload_key] = mt.task
            funcs[mt.task.workload_key] = list(mt.funcs)
    report = InModelReport(model.name, threads, rounds, runs, checks, [])
    if not checks:
        report.wall_s = time.perf_counter() - t0
        return report
    n_variants = 2 + max(sum(c.label.startswith("runner-up") for c in t.candidates) for t in checks)
    ref_name, expected = _reference_outputs(model, threads)
    inputs = model.example_inputs
    compiled: dict[int, Any] = {}
    for v in range(n_variants):
        label = ("tuned", "untuned")[v] if v < 2 else f"runner-up {v - 1}"
        say(f"in-model check: compiling the {label} variant ({v + 1}/{n_variants})")
        try:
            cm = compile_model(model, None, overrides={t.workload_key: _slot(t.candidates, v).config for t in checks})
            check = compare_outputs(cm.run(inputs), expected, model.rtol)
            ok, msg = check.ok, check.message
        except Exception as e:  # noqa: BLE001 - a variant that fails to build or run is a result
            cm, ok, msg = None, False, f"error: {str(e).splitlines()[0][:160]}"
        report.variants.append({"label": label, "ok": ok, "check": f"{msg} (against {ref_name})"})
        if ok:
            compiled[v] = cm
    passing = sorted(compiled)
    for t in checks:  # configs that no passing variant carries failed in the model
        used = {id(_slot(t.candidates, v)) for v in passing}
        for c in t.candidates:
            if id(c) not in used:
                c.failed = "; ".join(report.variants[v]["check"] for v in range(n_variants)
                                     if _slot(t.candidates, v) is c)
    # Interleaved rounds: per round, per variant, per task, the per-call seconds of each inference.
    for r in range(rounds):
        for t in checks:
            for c in t.candidates:
                c.seconds.append([])
        shift = r % len(passing) if passing else 0
        for v in passing[shift:] + passing[:shift]:
            f = compiled[v].callable(inputs)
            f()  # warm-up
            for inference in function_times(compiled[v], f, runs):
                for t in checks:
                    calls = [s for name in funcs[t.workload_key] for s in inference.get(name, [])]
                    if calls:
                        _slot(t.candidates, v).seconds[-1].append(sum(calls) / len(calls))
        say(f"in-model check: round {r + 1}/{rounds} timed")
    # Record one confirmation group (tasks with more than one candidate: a lone best is left as it is).
    group = f"in-model-{uuid.uuid4().hex[:12]}"
    report.group = group
    timing = MeasureOptions.in_model_timing_key(model.name)
    now = time.time()

    def context(task: Task) -> Any:
        return measure_context(task, MeasureOptions.flushed(threads=threads))._replace(timing=timing)

    def chosen(t: TaskCheck) -> str:
        """The label of the config the database now gives ``t`` inside the model."""
        best = db.best(t.workload_key, context(tasks[t.workload_key])) if len(t.candidates) > 1 else None
        if best is None:
            return "best"
        return next((c.label for c in t.candidates if c.config.index == best.config_index), "best")

    def record(t: TaskCheck, c: Candidate, rnd: int, of: int, costs: list[float], error: str, msg: str,
               grp: str) -> None:
        task = tasks[t.workload_key]
        ctx = context(task)
        db.add_trial(TrialRecord(
            workload_key=task.workload_key, config_index=c.config.index, config=c.config.to_json()["knobs"],
            costs=costs if error == "none" else [], error=error, error_msg=msg[:500], timestamp=now,
            tuner=TUNER_NAME, tvm_version=tvm_version(), target=ctx.target, threads=threads,
            verified=error == "none", timing=ctx.timing, cpu_model=ctx.cpu_model,
            extra={"confirm": {"group": grp, "round": rnd, "of": of},
                   "in_model": {"model": model.name, "label": c.label, "best": t.candidates[0].config.index}}))

    for t in checks:
        if len(t.candidates) < 2:
            continue
        ensure_task(db, tasks[t.workload_key])
        for c in t.candidates:
            if c.failed:
                record(t, c, 1, rounds, [], "wrong_answer" if "error:" not in c.failed else "runtime",
                       c.failed, group)
                continue
            for r, costs in enumerate(c.seconds):
                if costs:
                    record(t, c, r + 1, rounds, costs, "none", "", group)
    for t in checks:
        t.chosen = chosen(t)
    # The whole model: confirmed against tuned and untuned.
    if passing:
        say("in-model check: timing the confirmed model against tuned and untuned")
        same = not report.changed and 0 in compiled  # every task kept its best: the tuned variant itself
        try:
            confirmed = None if same else compile_model(model, db)
            ok = same or compare_outputs(confirmed.run(inputs), expected, model.rtol).ok
        except Exception:  # noqa: BLE001 - the confirmed model failed: a variant is kept below
            confirmed, ok = None, False
        fns = {("tuned", "untuned")[v]: compiled[v].callable(inputs) for v in passing if v < 2}
        if confirmed is not None and ok:
            fns["confirmed"] = confirmed.callable(inputs)
        per_round = interleaved_rounds(fns, rounds=MODEL_ROUNDS, min_time_s=MODEL_MIN_TIME_S)
        if same:
            per_round["confirmed"] = per_round["tuned"]  # one model, timed once
        report.latency_ms = {k: statistics.median(v) * 1e3 for k, v in per_round.items()}
        whole = {k: v for k, v in report.latency_ms.items() if k != "confirmed"}
        fastest = min(whole, key=whole.get) if whole else None
        if fastest is not None and "confirmed" in per_round:
            report.paired_ratio = statistics.median(
                c / f for c, f in zip(per_round["confirmed"], per_round[fastest]))
        if fastest is not None and (report.paired_ratio is None or report.paired_ratio > 1 + tolerance):
            v = 0 if fastest == "tuned" else 1
            report.kept = fastest
            keep = f"in-model-keep-{uuid.uuid4().hex[:12]}"
            for t in checks:
                c = _slot(t.candidates, v)
                if len(t.candidates) < 2:
                    continue
                flat = [x for rr in c.seconds for x in rr]
                if flat:
                    record(t, c, 1, 1, flat, "none", "", keep)
            for t in checks:
                t.chosen = chosen(t)
    report.wall_s = time.perf_counter() - t0
    return report

