"""Helpers of the layout plan's graph rewrites: a Relax mutator over every function, a rewrite of one op's calls."""
from __future__ import annotations

from typing import Any, Callable


def rewrite_functions(mod: Any, make_mutator: Callable[[Any], Any]) -> Any:
    """A copy of ``mod`` with every Relax function rewritten by the mutator ``make_mutator(copy)``
    (a ``PyExprMutator`` class decorated with ``@mutator``, or anything called the same way)."""
    from tvm import relax

    out = mod.clone() if hasattr(mod, "clone") else mod
    rewriter = make_mutator(out)
    for gv, f in list(out.functions.items()):
        if isinstance(f, relax.Function):
            out[gv] = rewriter.visit_expr(f)
    return out


def rewrite_calls(mod: Any, op_name: str | tuple[str, ...], rewrite: Callable[[Any, Any], Any]) -> Any:
    """A copy of ``mod`` with every call of the Relax op ``op_name`` (or of any of several names; its
    arguments rewritten first) replaced by ``rewrite(call, mutator)``; returning ``call`` keeps it. The
    mutator gives the rewrite ``lookup_binding`` (what a variable is bound to) and ``builder_.emit``
    (new bindings)."""
    from tvm.relax.expr_functor import PyExprMutator, mutator

    names = (op_name,) if isinstance(op_name, str) else op_name

    @mutator
    class _Calls(PyExprMutator):  # type: ignore[misc]
        def visit_call_(self, call: Any) -> Any:  # noqa: N802 - TVM's visitor name
            call = super().visit_call_(call)
            return rewrite(call, self) if getattr(call.op, "name", "") in names else call

    return rewrite_functions(mod, _Calls)


def conv_out_dtype(attrs: Any) -> str | None:
    """An op's ``out_dtype`` attribute (a convolution's, a resize's), None when it is unset (the input's dtype)."""
    return None if str(attrs.out_dtype) in ("", "void", "None") else str(attrs.out_dtype)
