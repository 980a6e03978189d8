"""Functions whose chosen config takes its inputs transformed: the call sites get them at compile time.

A config can compute its task differently and read a constant in another form (Winograd reads
``G g G^T`` in place of the packed kernel, :meth:`~tensortune.templates.registry.Template.input_variant`).
The model is compiled with that form folded in: each ``call_tir`` of such a function in ``main``
gets its constants transformed once, here, by the template that asks for them. A call site whose
input is computed at run time cannot: the function keeps a config with the task's own inputs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


def _bindings(mod: Any) -> dict[Any, Any]:
    """Each variable of ``main`` bound to a constant -> that constant."""
    from tvm import relax
    from tvm.ir.expr import Constant

    out: dict[Any, Any] = {}
    body = mod["main"].body
    for block in getattr(body, "blocks", []):
        for b in block.bindings:
            if isinstance(b, relax.VarBinding) and isinstance(b.value, Constant):
                out[b.var] = b.value
    return out


def _arrays(fields: Any, consts: dict[Any, Any]) -> list[np.ndarray | None]:
    """A call's arguments as numpy arrays: constants (inline or bound), None for the others."""
    from tvm.ir.expr import Constant

    out = []
    for a in fields:
        c = a if isinstance(a, Constant) else consts.get(a)
        out.append(c.value.numpy() if c is not None else None)
    return out


def site_arrays(mod: Any, names: Any) -> list[list[np.ndarray | None]]:
    """Per ``call_tir`` site of ``main`` that calls one of the PrimFuncs ``names``, its inputs as
    numpy arrays (None for one computed at run time)."""
    from tvm import relax

    consts = _bindings(mod)
    wanted = set(names)
    out: list[list[np.ndarray | None]] = []

    def visit(e: Any) -> None:
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir" \
                and e.args[0].name_hint in wanted:
            out.append(_arrays(e.args[1].fields, consts))

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return out


def check_sites(task: Task, variant: str, sites: list[list[np.ndarray | None]]) -> None:
    """Raise (the template's reason) unless every call site can take ``variant``'s inputs."""
    for arrays in sites:
        task.template.variant_inputs(task, variant, arrays)


def apply_variants(mod: Any, variants: dict[str, tuple[Task, str]]) -> Any:
    """``mod`` whose ``call_tir`` sites of the functions in ``variants`` (Relax name -> task and
    variant) pass their inputs as the variant takes them (constants transformed once)."""
    if not variants:
        return mod
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    consts = _bindings(mod)
    # each under a fresh global (the old one's type still names the task's own inputs; unused, it goes)
    funcs = {name: mod[name] for name in variants}
    bb = relax.BlockBuilder(tvm.IRModule({gv: f for gv, f in mod.functions_items() if gv.name_hint not in variants},
                                         attrs=mod.attrs, global_infos=mod.global_infos))
    gvs = {name: bb.add_func(f, name) for name, f in funcs.items()}
    mod = bb.get()

    @mutator
    class _Variants(PyExprMutator):  # type: ignore[misc]
        def visit_call_(self, call: Any) -> Any:  # noqa: N802 - TVM's visitor name
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.call_tir" or call.args[0].name_hint not in variants:
                return call
            task, variant = variants[call.args[0].name_hint]
            fields = list(call.args[1].fields)
            arrays = _arrays(fields, consts)
            new = task.template.variant_inputs(task, variant, list(arrays))
            args = [relax.const(n) if n is not a else f for f, a, n in zip(fields, arrays, new)]
            return relax.Call(call.op, [gvs[call.args[0].name_hint], relax.Tuple(args), *call.args[2:]], call.attrs,
                              call.ty_args)

    mod["main"] = _Variants().visit_expr(mod["main"])
    return relax.transform.DeadCodeElimination()(relax.transform.Normalize()(mod))
