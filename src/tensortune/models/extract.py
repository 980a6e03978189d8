"""A model's tasks: legalize and fuse its Relax module, one task per distinct fused PrimFunc.

The passes are TVM's own (the CPU pipeline's legalize stage): ``DecomposeOpsForInference,
LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR``, after the model's layout
plan (:mod:`.layout`). Each fused PrimFunc
becomes a :class:`~tensortune.task.Task` through :meth:`Task.from_fused` (op template for a
recognised anchor, generic otherwise). Functions that the VM turns into a free view
(pure reshapes) are not tasks, nor are functions with no blocks to schedule (:func:`is_opaque`).
Structurally equal functions are one task whose weight is
the number of calls in the model.
"""
from __future__ import annotations

from typing import Any

from ..precision import DEFAULT_PRECISION
from ..task import Task
from ..task.model_task import ModelTask  # noqa: F401 - re-exported: models.extract.ModelTask


def fuse_passes(precision: str = DEFAULT_PRECISION) -> list[Any]:
    """TVM's legalize-and-fuse passes, in order (blocked convolutions lowered by
    :func:`tensortune.models.layout.legalize_conv2d` in ``precision``, exp/erf/tanh/softmax/GELU by the fast
    forms of :mod:`tensortune.models.fastmath`, each attention's three groups merged into one
    by :func:`tensortune.models.attention.fuse_attention`; in bf16, the activations of bf16
    products stored as bits, :mod:`tensortune.models.bf16act`)."""
    from tvm import relax

    from .attention import fuse_attention_pass
    from . import bf16act
    from .fastmath import FAST_MATH
    from .layout import legalize_conv2d

    def conv2d(bb: Any, call: Any) -> Any:
        return legalize_conv2d(bb, call, precision)

    t = relax.transform
    store = ([bf16act.store_activations_pass(), t.AnnotateTIROpPattern()]  # annotates the functions it adds
             if precision == "bf16" and bf16act.STORE_BF16 else [])
    # sort, scan (cumsum: RoBERTa's position ids) and sampling ops have no legalization of their
    # own: TVM's dispatch passes give them the target's TOPI kernels, as its default pipeline does
    dispatch = [relax.backend.DispatchSampling(), relax.backend.DispatchSortScan()]
    return [*dispatch, t.DecomposeOpsForInference(), t.LegalizeOps({**FAST_MATH, "relax.nn.conv2d": conv2d}), t.AnnotateTIROpPattern(),
            *store, t.FoldConstant(), t.FuseOps(), fuse_attention_pass(precision), t.FuseTIR(), t.DeadCodeElimination()]


def lower_to_fused(mod: Any, target: Any, precision: str = DEFAULT_PRECISION) -> Any:
    """The module after legalization and fusion (under ``target``, convolutions in ``precision``)."""
    import tvm

    with target:
        return tvm.transform.Sequential(fuse_passes(precision))(mod)


def call_counts(mod: Any) -> dict[str, int]:
    """Relax name of each PrimFunc -> how many ``call_tir`` sites of ``main`` call it."""
    from tvm import relax

    counts: dict[str, int] = {}

    def visit(e: Any) -> None:
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir":
            gv = e.args[0]
            counts[gv.name_hint] = counts.get(gv.name_hint, 0) + 1

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return counts


def prim_funcs(mod: Any) -> dict[str, Any]:
    """Relax name -> PrimFunc of every TIR function in ``mod`` (sorted by name)."""
    import tvm

    out = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    return dict(sorted(out.items()))


def is_view(func: Any) -> bool:
    """True for functions the VM replaces by a free reshape view (no kernel runs)."""
    from tvm import relax

    try:
        return bool(relax.analysis.has_reshape_pattern(func))
    except Exception:  # noqa: BLE001
        return False


def is_opaque(func: Any) -> bool:
    """True for functions with nothing to schedule, which run as TVM wrote them and are not tasks:
    plain loops with no blocks (TOPI's CPU sort and scan kernels, made with its IR builder), or
    kernels TVM marks scheduled already (its GPU scan kernels)."""
    import tvm.s_tir as st

    if func.attrs is not None and "tirx.is_scheduled" in func.attrs:
        return True
    body = func.body
    return not (isinstance(body, st.SBlockRealize) and body.block.name_hint == "root")


def extract_tasks(fused: Any, target_json: dict[str, Any]) -> list[ModelTask]:
    """The tasks of a fused module, heaviest first (weight x FLOPs)."""
    counts = call_counts(fused)
    by_key: dict[str, ModelTask] = {}
    for name, func in prim_funcs(fused).items():
        n = counts.get(name, 0)
        if n == 0 or is_view(func) or is_opaque(func):
            continue
        task = Task.from_fused(func, target_json, name)
        pat = task.pattern
        key = task.workload_key
        if key in by_key:
            by_key[key].weight += n
            by_key[key].funcs.append(name)
            continue
        tunable = pat.n_outputs == 1
        note = "" if pat.op else f"generic template: {pat.reason}"
        if not tunable:
            note = f"fixed schedule: {pat.reason}"
        by_key[key] = ModelTask(task, n, [name], tunable, note)
    return sorted(by_key.values(), key=lambda t: (-t.weight * t.task.flops, t.task.name))
