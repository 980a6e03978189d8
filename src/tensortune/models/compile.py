"""Compile a model with the best stored schedule of each task, a sane default for the rest.

Every fused PrimFunc of the model is scheduled before the Relax VM build, in this order
of preference, and the report says which one each function got and why:

1. ``tuned``: the best verified config of its task in the database: the config confirmed
   fastest inside this model (:mod:`.confirm`) where there is one, else the best measured alone;
2. ``default``: its template's default config (no record, or the best record failed to apply);
3. ``generic``: the generic template's default (parallel + vectorised), when the op
   template could not schedule it;
4. ``tvm``: TVM's own default CPU schedule (``s_tir.dlight.cpu`` rules), where one applies;
5. ``naive``: TVM's unscheduled loops, only if even that failed (reported loudly).

The build then runs TVM's own lowering passes (``dataflow_lower_passes`` and
``finalize_passes`` of the CPU pipeline) without fusing again, so no schedule is lost. A
schedule that applies but does not lower or build breaks the whole model's build; then each
function is built alone and those that fail move down the chain, so a model that imports
always builds; each choice's reason names the rungs that failed.
The result exports to a shared library that ``tvm.runtime.load_module`` plus
``relax.VirtualMachine`` run without tensortune (:func:`load_library`).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from ..target import host_target_json, is_cuda, make_target
from ..task import Task
from ..utils.quiet import TVM_UNROLL_HINT, drop_native_lines
from ..utils.placement import pinned_calls, tvm_pinned
from .extract import ModelTask, extract_tasks
from .importer import Model, ModelError, _first_line
from .variants import apply_variants, check_sites, site_arrays

if TYPE_CHECKING:  # pragma: no cover
    from ..database import Database, MeasureContext, TrialRecord

#: How each function was scheduled, best first (the fallback chain).
SOURCES = ("tuned", "default", "generic", "tvm", "naive")

log = logging.getLogger(__name__)


@dataclass
class FuncChoice:
    """What one task's functions were compiled with."""

    task: str
    kernel_class: str
    workload_key: str
    weight: int
    source: str  # one of SOURCES
    reason: str = ""
    trials: int = 0
    best_ms: float | None = None  # the stored best latency of the task (tuned only)
    funcs: list[str] = field(default_factory=list)
    flops: float = 0.0  # of one call
    bytes: float = 0.0  # of its buffers (inputs and output) per call: the least memory it moves
    variant: str = ""  # inputs its config takes transformed at compile time (winograd4), else ""
    template: str = ""  # the template that scheduled it (dense_pack_amx), "" where none did

    def to_json(self) -> dict[str, Any]:
        """JSON form for reports."""
        return dict(self.__dict__)


@dataclass
class CompiledModel:
    """A built model: the Relax VM executable and what each task was compiled with."""

    model: Model
    executable: Any
    choices: list[FuncChoice]
    target_json: dict[str, Any]
    layout: Any = None  # the model's LayoutPlan (tensortune.models.layout)

    @property
    def precision(self) -> str:
        """The precision of its convolutions and matrix products (the model's)."""
        return self.model.precision

    @property
    def vm(self) -> Any:
        """A ``relax.VirtualMachine`` on the CPU (created once); a CUDA library runs on a GPU only."""
        if is_cuda(self.target_json):
            raise ModelError(f"{self.model.name}: built for cuda:{self.target_json['arch']}, which runs on an NVIDIA GPU "
                             "only (none here)")
        if not hasattr(self, "_vm"):
            from tvm import relax
            import tvm

            self._vm = relax.VirtualMachine(self.executable, tvm.cpu())
        return self._vm

    def reset_vm(self) -> None:
        """Drop the cached VirtualMachine (one left with an instrument, say: a no-op hook still costs
        a Python call per function call); the next use makes a fresh one."""
        self.__dict__.pop("_vm", None)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Outputs (flattened to a list) for numpy ``inputs``."""
        with tvm_pinned():
            return _flatten(self.vm["main"](*_to_tvm(inputs)))

    def callable(self, inputs: Sequence[np.ndarray]) -> Callable[[], None]:
        """A zero-argument function that runs one inference on ``inputs`` (for timing)."""
        args = _to_tvm(inputs)
        f = self.vm["main"]

        def call() -> None:
            with tvm_pinned():
                f(*args)

        return call

    def counts(self) -> dict[str, int]:
        """Number of tasks per source."""
        out = {s: 0 for s in SOURCES}
        for c in self.choices:
            out[c.source] += 1
        return out

    def export(self, path: str) -> tuple[str, str]:
        """Write the shared library to ``path`` and its description to ``path + '.json'``.

        Both are written atomically (complete files renamed into place); whether ``path`` may be
        overwritten is the caller's check (:func:`tensortune.utils.atomic.check_output_path`).
        """
        import tvm

        from ..target import cross_linker, machine_id
        from ..utils.atomic import atomic_path, atomic_write

        os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
        load = "tvm.runtime.load_module(path); relax.VirtualMachine(lib, tvm.cpu())['main'](*inputs)"
        if is_cuda(self.target_json):  # the kernels compiled first: nvcc's failure writes nothing
            from ..measure.cuda import FATBIN_SUFFIX, write_fatbin

            try:
                write_fatbin(self.executable, path, self.target_json)
            except RuntimeError as e:
                raise ModelError(f"{self.model.name}: {_first_line(e)}") from None
            load = (f"tvm.runtime.load_module(path); relax.VirtualMachine(lib, tvm.cuda())['main'](*inputs) on a "
                    f"GPU of {self.target_json['arch']}; the library holds the kernels' CUDA source, which TVM's "
                    f"runtime compiles at load (tvm_callback_cuda_compile), path{FATBIN_SUFFIX} the same kernels "
                    "compiled by nvcc")
        with atomic_path(path, suffix=os.path.splitext(path)[1] or ".so") as tmp:
            self.executable.export_library(str(tmp), fcompile=cross_linker(self.target_json))
        meta = {
            "model": self.model.name, "source": self.model.source, "batch": self.model.batch,
            "inputs": [s.to_json() for s in self.model.inputs], "target": self.target_json,
            "machine": machine_id(), "tvm_version": tvm.__version__, "tasks": [c.to_json() for c in self.choices],
            "layout": self.layout.to_json() if self.layout is not None else None,
            "load": load,
        }
        atomic_write(path + ".json", json.dumps(meta, indent=1))
        return path, path + ".json"


def _buffer_bytes(task: Task) -> float:
    """Bytes of a task's parameter buffers (inputs and output)."""
    return float(sum(int(np.prod(shape)) * np.dtype(dt).itemsize for shape, dt in zip(task.arg_shapes, task.arg_dtypes)))


def _to_tvm(inputs: Sequence[np.ndarray]) -> list[Any]:
    import tvm

    return [tvm.runtime.tensor(np.asarray(x, order="C"), tvm.cpu()) for x in inputs]  # a 0-d input stays 0-d


def _flatten(out: Any) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    res: list[np.ndarray] = []
    for o in out:
        res.extend(_flatten(o))
    return res


class _Stored(NamedTuple):
    """What the database holds for one task on this machine: the config compile builds it with
    (None: no usable record), the task's trial count, that config's latency (ms), a note on the
    records used, the context they were read in and that context's best trial."""

    config: Any | None
    trials: int
    best_ms: float | None
    note: str
    context: MeasureContext | None = None
    best: TrialRecord | None = None


def _stored_choice(task: Task, database: Database | None, model: str = "") -> _Stored:
    """The task's best verified stored config on this machine, with its trial count, latency and a
    note on the records used (empty when they were timed as model tuning times them).

    With ``model``, the config confirmed fastest inside that model (:mod:`.in_model`) wins, with
    its latency there, as long as that check was made for the task's current best (its trials
    name it: ``extra["in_model"]["best"]``); a check older than the best is ignored (and the
    note says so)."""
    from ..measure import MeasureOptions
    from ..database.trials import measure_context, pick_context

    if database is None:
        return _Stored(None, 0, None, "")
    n = database.count(task.workload_key)
    preferred = measure_context(task, MeasureOptions.flushed())
    context, note = pick_context(database, task, preferred)
    best = database.best(task.workload_key, context) if context is not None else None
    if best is None:
        return _Stored(None, n, None, note, context)
    if model:
        inside = preferred._replace(timing=MeasureOptions.in_model_timing_key(model))
        pick = database.best(task.workload_key, inside)  # from the latest in-model group, if any
        if pick is not None and (pick.extra.get("in_model") or {}).get("best") == best.config_index:
            try:
                return _Stored(task.space.config_from_json({"knobs": pick.config}), n, pick.cost * 1e3,
                               "; ".join(x for x in (note, "confirmed inside the model") if x), context, best)
            except Exception:  # noqa: BLE001 - a record of another space version: the best alone
                pass
        elif pick is not None:
            note = "; ".join(x for x in (note, "the in-model check predates the best: run `tensortune check`") if x)
    try:
        return _Stored(task.space.config_from_json({"knobs": best.config}), n, best.cost * 1e3, note, context, best)
    except Exception:  # noqa: BLE001 - a record of another space version
        return _Stored(None, n, None, note, context, best)


@dataclass
class _Step:
    """One rung of a task's fallback chain: its source, why it is used, how to make the function,
    and the inputs its function takes where they are transformed (:mod:`.variants`)."""

    source: str  # one of SOURCES
    note: str
    make: Callable[[], Any]
    variant: str = ""


def _config_step(source: str, note: str, task: Task, config: Any,
                 sites: Callable[[], Sequence[list[np.ndarray | None]]] | None) -> list[_Step]:
    """The rung of ``config``; where it takes transformed inputs that a call site cannot give
    (``sites()``: each call site's constants, read only for such a config), first checked, and the
    same config on the task's own inputs as the next rung."""
    variant = task.template.input_variant(task, config)
    if not variant:
        return [_Step(source, note, lambda: task.instantiate(config)["main"])]

    def make() -> Any:
        check_sites(task, variant, sites() if sites is not None else [])
        return task.instantiate(config)["main"]

    plain = task.template.plain_config(task, config)
    return [_Step(source, f"{note} ({variant})", make, variant),
            _Step(source, f"{note}; {variant} needs constant inputs",
                  lambda: task.instantiate(plain)["main"])]


def _steps(task: Task, database: Database, model: str = "", override: Any = None,
           sites: Callable[[], Sequence[list[np.ndarray | None]]] | None = None
           ) -> tuple[list[_Step], int, float | None]:
    """The fallback chain of one task, best first (tuned, template default, generic, and on a CPU
    TVM's default and naive loops), with the task's trial count and stored best latency (ms); ``override``: the config
    to use instead of the database's (reported as ``tuned``); ``sites``: returns the inputs of each call of
    its functions (numpy for constants, else None), for configs that transform them."""
    steps: list[_Step] = []
    n, best_ms, why = 0, None, ""
    if override is not None:
        steps += _config_step("tuned", f"config {override.index} given", task, override, sites)
    else:
        config, n, best_ms, note = _stored_choice(task, database, model)[:4]
        if config is not None:
            steps += _config_step("tuned", f"best of {n} trials" + (f" ({note})" if note else ""), task, config, sites)
        elif database is None:
            why = "no database; "
        elif note:
            why = f"{note}; "  # the note says why no stored record applies
        else:
            why = f"no successful verified trial among {n}; " if n else "not tuned; "
    steps += _config_step("default", f"{why}{task.template_name} default", task, task.default_config(), sites)
    if task.template_name not in ("generic", "generic_cuda"):
        def generic() -> Any:  # the generic template of the target (dlight's GPU rules on CUDA)
            g = Task.from_primfunc(task.prim_func(), task.target_json, "generic", task.kernel_class)
            return g.instantiate(g.default_config())["main"]

        steps.append(_Step("generic", "generic default", generic))
    if is_cuda(task.target_json):  # a GPU cannot launch loops bound to no thread: no CPU fallbacks
        return steps, n, best_ms
    steps.append(_Step("tvm", "TVM's default CPU schedule", lambda: tvm_default_schedule(task.prim_func(), task.target_json)))
    steps.append(_Step("naive", "unscheduled loops", task.prim_func))
    return steps, n, best_ms


def tvm_default_schedule(func: Any, target_json: dict[str, Any]) -> Any:
    """``func`` scheduled by TVM's own CPU rules (``s_tir.dlight.cpu``: GEMV, reductions); raises
    :class:`ValueError` when no rule applies (the function would stay as naive loops)."""
    import tvm
    import tvm_ffi
    from tvm.s_tir import dlight

    target = make_target(target_json)
    mod = tvm.IRModule({"main": func})
    with target:
        out = dlight.ApplyDefaultSchedule(dlight.cpu.GEMV(), dlight.cpu.Reduction())(mod)
    if tvm_ffi.structural_equal(out["main"], func):
        raise ValueError("no rule of TVM's applies")
    return out["main"]


def builds(func: Any, target_json: dict[str, Any]) -> None:
    """Lower and build one scheduled PrimFunc alone (raises what TVM raises): the check a function
    passes before it stands in for one that broke the model's build."""
    import tvm

    with drop_native_lines(TVM_UNROLL_HINT):
        tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), make_target(target_json))


def _pick(steps: list[_Step], check: Callable[[Any], None] | None = None) -> tuple[Any, int, str]:
    """The first step whose function is made (and passes ``check``): (function, index in ``steps``,
    reason naming every step that failed before it)."""
    failed: list[str] = []
    for i, step in enumerate(steps):
        try:
            func = step.make()
            if check is not None:
                check(func)
        except Exception as e:  # noqa: BLE001 - a schedule that fails falls back to the next
            failed.append(f"{step.source} failed ({_first_line(e)[:120]})")
            continue
        return func, i, "; ".join(failed + [step.note])
    raise RuntimeError("; ".join(failed))  # naive loops that do not build: the model cannot


def schedule_module(fused: Any, target_json: dict[str, Any], database: Database | None = None, model: str = "",
                    overrides: Mapping[str, Any] | None = None, check: bool = False) -> tuple[Any, list[FuncChoice]]:
    """Replace every fused PrimFunc of ``fused`` (each task's functions) by its scheduled version
    (``model``: the model's name, for configs confirmed inside it; ``overrides``: configs by
    workload key that replace the database's choice; ``check``: build each function alone first and
    fall back down its chain while it does not build)."""
    mod = fused.clone()
    choices = []
    variants: dict[str, tuple[Task, str]] = {}
    for mt in extract_tasks(fused, target_json):
        task = mt.task
        steps, n, best_ms = _steps(task, database, model, (overrides or {}).get(task.workload_key),
                                   lambda funcs=mt.funcs: site_arrays(fused, funcs))
        try:
            sched, i, reason = _pick(steps, (lambda f: builds(f, target_json)) if check else None)
        except RuntimeError as e:  # every rung failed (on a GPU there are no CPU rungs to fall to)
            raise ModelError(f"{task.name}: no schedule of it builds: {e}") from None
        source = steps[i].source
        choices.append(FuncChoice(task.name, task.kernel_class, task.workload_key, mt.weight, source, reason,
                                  n, best_ms if source == "tuned" else None, list(mt.funcs), task.flops,
                                  _buffer_bytes(task), steps[i].variant, task.template_name))
        sched = sched.without_attr("global_symbol")  # the Relax function's own attributes, not the task's "main"
        for name in mt.funcs:
            attrs = fused[name].attrs
            mod.update_func(mod.get_global_var(name), sched.with_attrs(attrs) if attrs is not None else sched)
            if steps[i].variant:
                variants[name] = (task, steps[i].variant)
    return apply_variants(mod, variants), choices


def compile_model(model: Model, database: Database | None = None, target_json: dict[str, Any] | None = None,
                  layout: str | None = None, overrides: Mapping[str, Any] | None = None) -> CompiledModel:
    """Build ``model`` with the best stored schedules of ``database`` (None: defaults only), in
    the layouts of its plan (``layout``: a mode of :data:`tensortune.models.layout.MODES`);
    ``overrides`` (configs by workload key) replace the database's choice for their tasks."""
    import tvm

    tj = dict(target_json or host_target_json())
    target = make_target(tj)
    if is_cuda(tj):
        from tvm.relax.backend.cuda import pipeline
    else:
        from tvm.relax.backend.cpu_generic import pipeline
    fused = model.fused(tj, layout)
    mod, choices = schedule_module(fused, tj, database, model.name, overrides)
    lowering = tvm.transform.Sequential(pipeline.dataflow_lower_passes(target) + pipeline.finalize_passes(target))

    def build(mod: Any) -> Any:
        with target, drop_native_lines(TVM_UNROLL_HINT):
            return tvm.compile(mod, target, relax_pipeline=lowering)

    try:
        ex = build(mod)
    except Exception as e:  # noqa: BLE001 - some schedule does not lower: each function checked alone
        log.warning("%s: the model did not build (%s); building each function alone to find the schedules "
                    "that do not, which fall back", model.name, _first_line(e))
        try:
            mod, choices = schedule_module(fused, tj, database, model.name, overrides, check=True)
            ex = build(mod)
        except Exception as e2:  # noqa: BLE001 - not a schedule's fault: the model cannot be built
            raise ModelError(f"{model.name}: TVM cannot build it: {_first_line(e2)}") from None
    return CompiledModel(model, ex, choices, tj, model.layout_plan(tj, layout))


def model_tasks_of(model: Model, target_json: dict[str, Any] | None = None, layout: str | None = None
                   ) -> tuple[Any, list[ModelTask]]:
    """The model's fused module for ``target_json`` and the tasks extracted from it."""
    tj = dict(target_json or host_target_json())
    fused = model.fused(tj, layout)
    return fused, extract_tasks(fused, tj)


def chosen_trial(task: Task, database: Database, model: str = "") -> tuple[TrialRecord | None, str]:
    """The stored trial of the config :func:`compile_model` builds ``task`` with (``model``: the
    config confirmed inside that model), in the context compile reads, or (None, why not): the
    template default when nothing better is stored, if it was measured on this machine."""
    stored = _stored_choice(task, database, model)
    try:
        index = stored.config.index if stored.config is not None else task.default_config().index
    except Exception:  # noqa: BLE001 - a template without a usable default
        return None, "tasks without a usable config"
    if stored.context is None:
        return None, "tasks with no trial measured on this machine"
    if stored.best is not None and stored.best.config_index == index:
        return stored.best, ""
    runs = [t for t in database.trials(task.workload_key) if t.context == stored.context
            and t.config_index == index and t.ok and t.verified]
    if not runs:
        return None, "tasks whose chosen config was never measured (the untuned default)"
    return min(runs, key=lambda t: t.cost), ""


def model_tasks(model: Model, target_json: dict[str, Any] | None = None, layout: str | None = None) -> list[ModelTask]:
    """The tasks of ``model`` (layouts planned, legalized and fused for ``target_json``)."""
    return model_tasks_of(model, target_json, layout)[1]


def load_library(path: str) -> Callable[..., list[np.ndarray]]:
    """Load an exported model with TVM alone; returns ``f(*numpy_inputs) -> outputs``."""
    import tvm
    from tvm import relax

    lib = tvm.runtime.load_module(path)
    vm = relax.VirtualMachine(lib, tvm.cpu())
    return pinned_calls(lambda *inputs: _flatten(vm["main"](*_to_tvm(inputs))))
