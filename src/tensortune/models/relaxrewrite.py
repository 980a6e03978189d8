"""One helper of the layout plan's graph rewrites: a Relax expression mutator over every function."""
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
