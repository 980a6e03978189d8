"""Activations stored in bf16 between the functions of a bf16 model (``--precision bf16``).

A bf16 product (``conv2d_nchwc_bf16``, ``dense_pack_bf16``) reads its activation as bfloat16
bits: legalization puts an elementwise ``round_bf16`` call (:func:`~tensortune.task.ops_bf16.round_bits_te`)
before it. Where that activation is computed by a function of the model, this pass (after
``LegalizeOps``, before ``FuseOps``) gives every other reader the same bits through an elementwise
``widen_bf16`` call of its own, so that ``FuseOps`` puts the rounding into the producer's epilogue
and each widening into its reader: the activation crosses memory once, in half the bytes, as
OpenVINO's bf16 inference keeps it. An activation that a reader could not fuse a widening into
(another convolution or product in float32, an opaque call, a model output) stays float32, and
its rounding stays before the bf16 product.
"""
from __future__ import annotations

from typing import Any

from ..task.ops_bf16 import ROUND_FUNC, WIDEN_FUNC

#: In bf16, the activations of bf16 products stored as bfloat16 bits, rounded in their producers'
#: epilogues; off: each product rounds its float32 activation itself.
STORE_BF16 = True

#: Highest ``op_pattern`` (TVM's ``OpPatternKind``) of a reader that ``FuseOps`` fuses an
#: elementwise producer into: elementwise, broadcast, injective and reductions (3); not a
#: convolution or product (4, "out-elementwise fusable") or an opaque call (8).
FUSABLE_READER = 3


def rounded(bb: Any, x: Any) -> Any:
    """``x`` float32 as bfloat16 bits: an elementwise ``round_bf16`` call emitted with ``bb``
    (legalization puts one before each bf16 product; ``FuseOps`` moves it into ``x``'s producer)."""
    from ..task.ops_bf16 import round_bits_te

    return bb.emit(bb.call_te(round_bits_te, x, primfunc_name_hint=ROUND_FUNC))


def _call_tir_args(call: Any) -> list[Any] | None:
    """The tensor arguments of a ``call_tir`` (None for any other call)."""
    if getattr(call.op, "name", "") != "relax.call_tir":
        return None
    return list(call.args[1].fields)


def _is_round(call: Any) -> bool:
    return _call_tir_args(call) is not None and call.args[0].name_hint.startswith(ROUND_FUNC)


def _key(v: Any) -> int:
    return v.__chandle__()


def _readers(mod: Any) -> tuple[set[int], set[int]]:
    """(activations some bf16 product reads rounded, activations with a reader that cannot take
    them as bits), by handle, over ``main``'s bindings: only a variable bound in ``main`` counts
    (a parameter has no producer to fuse the rounding into)."""
    from tvm import relax, tirx

    main = mod["main"]
    rounded: set[int] = set()
    blocked: set[int] = set()
    bound: set[int] = set()

    def pattern(call: Any) -> int:
        func = mod[call.args[0]]
        attr = func.attrs.get("op_pattern") if isinstance(func, tirx.PrimFunc) and func.attrs is not None else None
        return int(attr) if attr is not None else 8

    def block_vars(e: Any) -> None:
        relax.analysis.post_order_visit(e, lambda x: blocked.add(_key(x)) if isinstance(x, relax.Var) else None)

    for block in main.body.blocks:
        for binding in block.bindings:
            bound.add(_key(binding.var))
            value = binding.value
            args = _call_tir_args(value) if isinstance(value, relax.Call) else None
            if args is None:
                block_vars(value)
                continue
            if _is_round(value):
                rounded.update(_key(a) for a in args if isinstance(a, relax.Var))
                continue
            if pattern(value) > FUSABLE_READER:
                for a in args:
                    block_vars(a)
            for extra in value.args[2:]:  # a call_tir's symbolic shape arguments
                block_vars(extra)
    block_vars(main.body.body)  # the outputs
    return {k for k in rounded if k in bound}, blocked


def store_activations_bf16(mod: Any) -> Any:
    """``mod`` (legalized, op patterns annotated) with each activation that a bf16 product reads
    rounded once, right where it is computed, and read as bits by all its readers (each float32
    reader through a ``widen_bf16`` of its own), where every reader can fuse that widening."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from ..task.ops_bf16 import widen_bits_te

    read_rounded, blocked = _readers(mod)
    shared = read_rounded - blocked
    if not shared:
        return mod

    @mutator
    class _Share(PyExprMutator):  # type: ignore[misc]
        def __init__(self, m: Any) -> None:
            super().__init__(m)
            self.bits: dict[int, Any] = {}  # activation (old handle) -> its bits in the new function

        def _bits_of(self, old: Any, new: Any) -> Any:
            if _key(old) not in self.bits:
                self.bits[_key(old)] = rounded(self.builder_, new)
            return self.bits[_key(old)]

        def visit_call_(self, call: Any) -> Any:  # noqa: N802 - TVM's visitor name
            olds = _call_tir_args(call)
            new = super().visit_call_(call)
            if olds is None:
                return new
            news = _call_tir_args(new)
            if _is_round(call):
                (old,) = olds
                return self._bits_of(old, news[0]) if _key(old) in shared else new
            hits = [i for i, a in enumerate(olds) if isinstance(a, relax.Var) and _key(a) in shared]
            if not hits:
                return new
            for i in hits:
                bits = self._bits_of(olds[i], news[i])
                news[i] = self.builder_.emit(self.builder_.call_te(widen_bits_te, bits, primfunc_name_hint=WIDEN_FUNC))
            return relax.Call(new.op, [new.args[0], relax.Tuple(news), *new.args[2:]], new.attrs, new.ty_args)

    out = mod.clone() if hasattr(mod, "clone") else mod
    share = _Share(out)
    main = out.get_global_var("main")
    share.builder_.update_func(main, share.visit_expr(out["main"]))
    return relax.transform.DeadCodeElimination()(share.builder_.get())


def store_activations_pass() -> Any:
    """:func:`store_activations_bf16` as a module pass (for ``fuse_passes`` in bf16)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="StoreActivationsBf16")
    def _pass(mod: Any, _ctx: Any) -> Any:
        return store_activations_bf16(mod)

    return _pass
