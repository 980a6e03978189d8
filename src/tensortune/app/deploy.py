"""The deploy workflows on a model and a database of tuning records: load, compile, bench,
profile and the in-model check. Each takes a :class:`~tensortune.models.importer.Model` (or anything
:func:`load` takes) and a database path, and returns the lower layers' report objects.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .checks import check_db_path, check_precision, open_db, readonly_db, target_of

if TYPE_CHECKING:  # pragma: no cover
    from ..models.comparison import BenchReport
    from ..models.compile import CompiledModel
    from ..models.in_model import InModelReport
    from ..models.importer import Model
    from ..models.profile import ModelProfile

log = logging.getLogger("tensortune.app")

#: Inferences profiled by :func:`profile` (medians over them).
PROFILE_RUNS = 10


def load(model: Any, example_inputs: Sequence[Any] | None = None, *, batch: int = 1,
         input_shapes: Mapping[str, Sequence[int]] | None = None, precision: str | None = None) -> Model:
    """``model`` imported: a :class:`Model` as is, a built-in name, an ONNX path, a Hugging Face
    ``hf:`` spec or ``save_pretrained`` folder, or a ``torch.nn.Module`` with ``example_inputs``;
    to be built in ``precision`` (None: the model's own, f32 for a new one). Whether the CPU and
    the target run it is checked when the model is first planned for a target."""
    from ..models.importer import Model, ModelError, load_model
    from ..precision import check_name

    if precision is not None:
        check_name(precision)
    if isinstance(model, Model):
        return model.with_precision(precision) if precision else model
    try:
        m = load_model(model, example_inputs, batch=batch, input_shapes=dict(input_shapes or {}) or None)
    except ModelError as e:
        raise UsageError(str(e)) from None
    return m.with_precision(precision) if precision else m


def use_threads(threads: int | None = None) -> int:
    """Run TVM (and PyTorch) on ``threads`` threads (default: every usable core); returns the number.
    TVM reads it when its thread pool starts, so call it before the first TVM run of the process."""
    from ..target import cpu_count

    n = threads or cpu_count()
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= cpu_count():
        raise UsageError(f"threads={n!r}: a whole number from 1 to {cpu_count()} (this machine's usable cores)")
    os.environ["TVM_NUM_THREADS"] = str(n)
    from ..models.reference import set_threads

    set_threads(n)
    return n


def compile(model: Any, database: str | None = None, layout: str | None = None,  # noqa: A001
            target: str | dict[str, Any] | None = None, precision: str | None = None) -> CompiledModel:
    """``model`` built with the best records of ``database`` (None: the template defaults) for
    ``target`` (default this CPU; another x86-64 CPU, :func:`tensortune.target.parse_target`,
    with the records measured for it, on its RPC devices or here), in ``precision`` (None: the
    model's own)."""
    from ..models.compile import compile_model
    from ..models.layout import MODES

    if layout is not None and layout not in MODES:
        raise UsageError(f"layout {layout!r}: one of {', '.join(MODES)}")
    tj = target_of(target)
    m = load(model, precision=precision)
    check_precision(m.precision, tj)
    with readonly_db(database) as db:
        return compile_model(m, db, tj, layout=layout)


def bench(model: Any, database: str | None = None, threads: int | None = None,
          with_onnxruntime: bool = True, precision: str | None = None,
          extra: Mapping[str, Any] | None = None) -> BenchReport:
    """``model`` compiled tuned (``database``) and untuned, checked against PyTorch / ONNX Runtime /
    OpenVINO (with the f32 hint, and as shipped where it picks another precision) and timed beside
    them; in ``precision`` (None: the model's own); ``extra``: more rows by name (a
    :class:`CompiledModel` of another precision, say)."""
    from ..models.comparison import bench_model

    m = load(model, precision=precision)
    check_precision(m.precision, target_of(None))
    n = use_threads(threads)
    with readonly_db(database) as db:
        return bench_model(m, db, n, with_ort=with_onnxruntime, extra=dict(extra or {}))


def profile(model: Any, database: str | None = None, threads: int | None = None, runs: int = PROFILE_RUNS,
            peak: bool = True, layout: str | None = None, precision: str | None = None) -> ModelProfile:
    """Every fused function of the compiled ``model`` timed (and, with ``peak``, set against the
    machine's peak compute and bandwidth measured now; a bf16 build also against the bf16 peak)."""
    from ..models.profile import profile_compiled

    n = use_threads(threads)
    cm = compile(model, database, layout, precision=precision)
    measured: dict[str, Any] = {}
    if peak:
        from ..measure.peak import measure_peak

        measured = measure_peak(n)
    return profile_compiled(cm, runs=runs, threads=n, peak_gflops=measured.get("peak_gflops"),
                            bandwidth_gbs=measured.get("bandwidth_gbs"), bf16_peak_gflops=measured.get("bf16_peak_gflops"),
                            amx_peak_gflops=measured.get("amx_peak_gflops"))


def check_in_model(model: Any, database: str, threads: int | None = None, rounds: int | None = None,
            runs: int | None = None, alternatives: int | None = None,
            say: Callable[[str], None] | None = None, precision: str | None = None) -> InModelReport:
    """The in-model check: each tuned task's best, default and runner-up timed inside ``model``,
    the fastest there kept (the verdict is written to ``database``); ``say`` gets progress lines."""
    from ..models.in_model import check_in_model

    check_db_path(database, must_exist=True)
    if alternatives is not None and alternatives < 0:
        raise UsageError("alternatives must be >= 0")
    n = use_threads(threads)
    m = load(model, precision=precision)
    check_precision(m.precision, target_of(None))
    db = open_db(database)
    try:
        options = {k: v for k, v in (("rounds", rounds), ("runs", runs), ("alternatives", alternatives))
                   if v is not None}
        return check_in_model(m, db, threads=n, log=say, **options)
    finally:
        db.close()


def check_after_tuning(model: Model, database: str, threads: int | None = None,
                       say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The in-model check at the end of a model's tuning, as JSON (with its one-line ``summary``);
    a failure is logged and returned as ``{"skipped": "failed: ...", "wall_s"}``: the tuning is
    stored, and its records stand as measured alone."""
    import time

    from ..models.importer import _first_line

    t0 = time.perf_counter()
    try:
        report = check_in_model(model, database, threads=threads, say=say)
    except Exception as e:  # noqa: BLE001 - the check failing is reported, not fatal
        log.warning("the in-model check failed (%s); the tuned records stand as measured alone", _first_line(e))
        return {"skipped": f"failed: {_first_line(e)}", "wall_s": time.perf_counter() - t0}
    return {**report.to_json(), "summary": report.summary()}
