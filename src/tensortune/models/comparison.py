"""Benchmark a compiled model against its framework: outputs checked first, then latency.

Rows: tuned tensortune (best records of the database), untuned tensortune (template
defaults), PyTorch eager (zoo and torch models), ONNX Runtime (the ONNX file, or the
PyTorch model exported to ONNX) and OpenVINO (the same ONNX file and threads; optional extra
``tensortune[openvino]``, its row is left out with a note when it is not installed). Every
row's outputs are compared with the reference (PyTorch, else ONNX Runtime) on the same inputs
before it is timed; a row whose outputs do not match is reported as a failure and gets no latency.
Latencies are medians over interleaved rounds at one fixed thread count
(:func:`~tensortune.measure.timing.interleaved_latency`).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..measure.timing import interleaved_latency
from ..precision import BF16_RTOL
from .compile import CompiledModel, compile_model
from .importer import Model
from .reference import (DEFAULT_RTOL, OpenVinoRunner, OrtRunner, ReferenceRunError, TorchRunner, compare_outputs,
                        export_onnx, set_threads)

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database

#: Interleaved timing rounds of ``tensortune bench``.
BENCH_ROUNDS = 5
#: Seconds of timed runs per system per round.
BENCH_MIN_TIME_S = 0.3
#: Rows of the CPU inference libraries that tensortune is compared with (:meth:`BenchReport.fastest_library`).
LIBRARY_ROWS = ("onnxruntime", "openvino")
#: The row of OpenVINO as shipped (no precision hint: bf16 on a CPU with AVX512-BF16), the
#: anchor of a bf16 build.
SHIPPED_ROW = "openvino as shipped"


@dataclass
class BenchRow:
    """One system of the comparison."""

    name: str
    check: str  # one-line output check message (or why the system is unavailable)
    ok: bool
    latency: Any = None  # measure.timing.Latency when timed
    max_rel_err: float | None = None  # of its outputs: max |got - ref| / max |ref| (None: not compared)

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"name": self.name, "outputs_match": self.ok, "check": self.check,
                "latency": self.latency.to_json() if self.latency is not None else None}


@dataclass
class BenchReport:
    """The comparison table of one model."""

    model: str
    reference: str
    threads: int
    rtol: float
    rows: list[BenchRow] = field(default_factory=list)
    tuned_counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # one line each: why an optional system has no row
    precision: str = "f32"  # of tensortune's rows

    def fastest_library(self) -> tuple[str, float] | None:
        """``(name, median ms)`` of the faster of the library rows (:data:`LIBRARY_ROWS`) whose outputs
        matched and that were timed; None when neither was."""
        timed = [(r.name, r.latency.median_ms) for r in self.rows
                 if r.name in LIBRARY_ROWS and r.ok and r.latency is not None]
        return min(timed, key=lambda t: t[1]) if timed else None

    def anchor(self) -> tuple[str, float] | None:
        """``(name, median ms)`` of the library a user compares this build with: OpenVINO as shipped
        for a bf16 build, else :meth:`fastest_library`."""
        if self.precision == "bf16":
            r = self.row(SHIPPED_ROW)
            return (r.name, r.latency.median_ms) if r is not None and r.ok and r.latency is not None else None
        return self.fastest_library()

    def row(self, name: str) -> BenchRow | None:
        """The row called ``name``."""
        return next((r for r in self.rows if r.name == name), None)

    def ratio(self, name: str, base: str = "pytorch") -> float | None:
        """``base`` median / ``name`` median (> 1: ``name`` is faster), when both were timed."""
        a, b = self.row(name), self.row(base)
        if a is None or b is None or a.latency is None or b.latency is None:
            return None
        return b.latency.median_ms / a.latency.median_ms

    def to_json(self) -> dict[str, Any]:
        """JSON form (``tensortune bench --json``)."""
        return {"model": self.model, "reference": self.reference, "threads": self.threads, "rtol": self.rtol,
                "precision": self.precision,
                "anchor": ({"name": anchor[0], "median_ms": anchor[1]} if (anchor := self.anchor()) else None),
                "tasks": self.tuned_counts, "rows": [r.to_json() for r in self.rows],
                "speedup_vs_pytorch": {r.name: self.ratio(r.name) for r in self.rows if self.ratio(r.name)},
                "fastest_library": ({"name": fastest[0], "median_ms": fastest[1]}
                                    if (fastest := self.fastest_library()) else None),
                "notes": list(self.notes)}

    def table(self) -> str:
        """The printed comparison."""
        base = self.row("pytorch") or self.row("onnxruntime")
        lines = [f"{self.model} (tensortune in {self.precision}): outputs checked against {self.reference} "
                 f"(max|got-ref| <= {self.rtol:g} x max|ref|); medians of {BENCH_ROUNDS} interleaved rounds, "
                 f"{self.threads} threads",
                 f"{'':28} {'latency':>11} {'p25-p75':>17} {'vs ' + (base.name if base else '-'):>14}  outputs"]
        for r in self.rows:
            if r.latency is None:
                lines.append(f"{r.name:28} {'-':>11} {'':>17} {'':>14}  {'FAILED: ' if not r.ok else ''}{r.check}")
                continue
            lat = r.latency
            vs = f"{base.latency.median_ms / lat.median_ms:13.2f}x" if base is not None and base.latency else ""
            lines.append(f"{r.name:28} {lat.median_ms:8.2f} ms {lat.p25_ms:7.2f}-{lat.p75_ms:<7.2f}ms {vs:>14}  {r.check}")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def bench_model(model: Model, database: Database | None = None, threads: int | None = None, rounds: int = BENCH_ROUNDS,
                min_time_s: float = BENCH_MIN_TIME_S, with_ort: bool = True,
                tuned: CompiledModel | None = None, extra: dict[str, Any] | None = None,
                with_openvino: bool = True, untuned: CompiledModel | None = None) -> BenchReport:
    """Compile ``model`` tuned (``database``) and untuned, check every system's outputs, time them.

    ``with_ort`` adds the ONNX Runtime row and, unless ``with_openvino`` is False, the OpenVINO row
    beside it, both on the same ONNX file (the model's, else the PyTorch module exported once) and
    ``threads``; ``with_ort=False`` leaves out both. OpenVINO is an optional extra: when it is not
    installed (or cannot load the file) its row is left out and :attr:`BenchReport.notes` says why.
    ``extra`` adds systems by name (anything with ``run(inputs)`` and ``callable(inputs)``, e.g. a
    :class:`CompiledModel` built by another tuner); they are checked and timed like the others.
    ``tuned`` and ``untuned``, when given, are used instead of compiling the model again."""
    from ..target import cpu_count

    threads = threads or cpu_count()
    set_threads(threads)
    inputs = model.example_inputs
    tuned = tuned or compile_model(model, database)
    untuned = untuned or compile_model(model, None)
    systems: dict[str, Any] = {}
    runners: dict[str, Any] = {"tensortune tuned": tuned, "tensortune untuned": untuned, **(extra or {})}
    if model.torch_module is not None:
        runners["pytorch"] = TorchRunner(model.torch_module, threads)
    with contextlib.ExitStack() as stack:  # the exported ONNX file goes when the runners are done
        ort_note = ov_note = ""
        path: str | None = None
        if with_ort:
            try:
                path = model.onnx_path or onnx_file(
                    model, stack.enter_context(tempfile.TemporaryDirectory(prefix="tensortune-onnx-")))
            except Exception as e:  # noqa: BLE001 - the ONNX rows are optional for the comparison
                ort_note = ov_note = _first_line(e)
        if path is not None:
            try:
                runners["onnxruntime"] = OrtRunner(path, threads)
            except Exception as e:  # noqa: BLE001 - ORT is optional for the comparison
                ort_note = _first_line(e)
        # the library rows come together: callers timing tensortune alone (with_ort=False) get neither
        with_openvino = with_ort and with_openvino
        shipped_note = ""
        if with_openvino and path is not None:
            try:
                runners["openvino"] = OpenVinoRunner(path, threads)
                shipped = OpenVinoRunner(path, threads, precision_hint=None)
                if shipped.precision != "f32":  # the same as the f32 row on a CPU without bf16
                    runners[SHIPPED_ROW] = shipped
            except Exception as e:  # noqa: BLE001 - OpenVINO is an optional extra
                if "openvino" in runners:
                    shipped_note = _first_line(e)
                else:
                    ov_note = _first_line(e)
        ref_name = "pytorch" if "pytorch" in runners else "onnxruntime"
        report = BenchReport(model.name, ref_name, threads, model.rtol, tuned_counts=tuned.counts(),
                             precision=model.precision)
        if ref_name not in runners:
            raise ReferenceRunError(f"{model.name}: no reference to check against ({ort_note or 'no ONNX Runtime'})")
        expected = runners[ref_name].run(inputs)
        for name, runner in runners.items():
            try:
                got = runner.run(inputs)
                low = getattr(runner, "precision", "f32") != "f32"  # a bf16 build, or OpenVINO's bf16 choice
                check = compare_outputs(got, expected, BF16_RTOL if low else DEFAULT_RTOL)
                ok, msg, err = check.ok, ("reference" if name == ref_name else check.message), check.max_rel_err
                if name == SHIPPED_ROW:
                    msg = f"computes in {runner.precision}; {msg}"
            except Exception as e:  # noqa: BLE001 - a crash is a failed row
                ok, msg, err = False, f"error: {str(e).splitlines()[0][:160]}", None
            report.rows.append(BenchRow(name, msg, ok, max_rel_err=err))
            if ok:
                systems[name] = runner.callable(inputs)
        if with_ort and "onnxruntime" not in runners:
            report.rows.append(BenchRow("onnxruntime", f"unavailable: {ort_note}", True))
        if with_openvino and "openvino" not in runners:
            report.notes.append(f"openvino: no row: {ov_note}")
        if shipped_note:  # the f32-hint row stands; the one a user would compare with is missing
            report.notes.append(f"{SHIPPED_ROW}: no row: {shipped_note}")
        lat = interleaved_latency(systems, rounds=rounds, min_time_s=min_time_s)
        for r in report.rows:
            r.latency = lat.get(r.name)
        return report


def _first_line(e: BaseException) -> str:
    """The first line of ``e``'s message (at most 200 characters), else its type's name."""
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def onnx_file(model: Model, folder: str) -> str:
    """The ONNX file the library rows run: the model's own, else its PyTorch module exported
    once into ``folder``."""
    if model.onnx_path is not None:
        return model.onnx_path
    return export_onnx(model.torch_module, _torch_inputs(model.example_inputs), os.path.join(folder, f"{model.name}.onnx"))


def _torch_inputs(inputs: Any) -> list[Any]:
    import torch

    return [torch.from_numpy(x.copy()) for x in inputs]
