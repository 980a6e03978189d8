"""Fast approximations of the transcendental functions a model calls, chosen at legalization.

LLVM lowers ``exp``/``erf``/``tanh`` (and ``sigmoid``, through ``exp``) on vectors to one libm
call per lane, so softmax, GELU and SiLU run scalar: in bert_base softmax and GELU took a fifth of
the model's time, and in efficientnet_b0 the convolutions with a SiLU ran at 8-35% of the peak
where the same convolutions without one reach 67-85%. TOPI's ``fast_exp``,
``fast_erf`` and ``fast_tanh`` are polynomial forms that vectorise (TVM's Relay ran them at
``opt_level`` 4; ONNX Runtime uses such approximations too); their error is at the float32
rounding level (checked against numpy in the tests), and every model's outputs are still
compared with its reference (PyTorch or ONNX Runtime) before a figure counts.

:data:`FAST_MATH` maps Relax op names to legalization functions for ``LegalizeOps``.
"""
from __future__ import annotations

import math
from typing import Any, Callable


def _default(bb: Any, call: Any) -> Any:
    """TVM's own legalization of ``call`` (for dtypes the fast forms do not cover)."""
    return call.op.get_attr("FLegalize")(bb, call)


Legalize = Callable[[Any, Any], Any]


def _float32_only(fast: Legalize) -> Legalize:
    """``fast`` for float32 inputs, TVM's own legalization otherwise."""
    def legalize(bb: Any, call: Any) -> Any:
        if str(call.args[0].ty.dtype) != "float32":
            return _default(bb, call)
        return fast(bb, call)

    return legalize


def _unary(fast: str) -> Legalize:
    def legalize(bb: Any, call: Any) -> Any:
        from tvm import topi

        return bb.call_te(getattr(topi, fast), call.args[0], primfunc_name_hint=fast)

    return legalize


def _softmax(bb: Any, call: Any) -> Any:
    from tvm import topi

    return bb.call_te(topi.nn.fast_softmax, call.args[0], int(call.attrs.axis), primfunc_name_hint="softmax")


def _gelu(bb: Any, call: Any) -> Any:
    from tvm import tirx, topi

    def te_gelu(x: Any) -> Any:
        erf = topi.fast_erf(x * tirx.const(0.5 ** 0.5, "float32"))
        return x * (tirx.const(0.5, "float32") + erf * tirx.const(0.5, "float32"))

    return bb.call_te(te_gelu, call.args[0], primfunc_name_hint="gelu")


def _gelu_tanh(bb: Any, call: Any) -> Any:
    from tvm import tirx, topi

    def te_gelu_tanh(x: Any) -> Any:
        c = tirx.const(math.sqrt(2.0 / math.pi), "float32")
        inner = topi.fast_tanh(c * x * (tirx.const(1.0, "float32") + tirx.const(0.044715, "float32") * x * x))
        return tirx.const(0.5, "float32") * x * (tirx.const(1.0, "float32") + inner)

    return bb.call_te(te_gelu_tanh, call.args[0], primfunc_name_hint="gelu_tanh")


def _one_block(te_fn: Callable[[Any], Any], name: str) -> Legalize:
    """Legalize a unary elementwise op to ``te_fn``'s computation as ONE block (its TE stages
    inlined into the last) in a PrimFunc called ``name``: a fused function then names the op
    as TVM's own legalization did (``conv2d_nchwc-add-sigmoid-multiply``), and the templates
    see one epilogue block. Symbolic shapes get TVM's own legalization."""
    def legalize(bb: Any, call: Any) -> Any:
        import tvm
        import tvm.s_tir as st
        from tvm import relax, te

        shape = call.args[0].ty.shape
        if shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
            return _default(bb, call)
        x = te.placeholder(list(shape), "float32", "x")  # the relax shape's own (int64) extents
        sch = st.Schedule(tvm.IRModule({"main": te.create_prim_func([x, te_fn(x)])}))
        for block in sch.get_child_blocks(sch.get_sblock("root"))[:-1]:  # all but the output
            sch.compute_inline(block)
        gv = bb.add_func(sch.mod["main"].without_attr("global_symbol"), name)
        return relax.call_tir(gv, [call.args[0]], call.ty)

    return legalize


def _sigmoid_te(x: Any) -> Any:
    """sigmoid(x) = 1 / (1 + fast_exp(-x)): TOPI's ``fast_exp`` vectorises, where TVM's
    ``tir.sigmoid`` lowers to one libm ``expf`` call per element."""
    from tvm import te, tirx, topi

    e = topi.fast_exp(topi.negative(x))
    one = tirx.const(1.0, "float32")
    return te.compute(x.shape, lambda *i: one / (one + e(*i)), name="T_sigmoid", tag=topi.tag.ELEMWISE)


def _silu_te(x: Any) -> Any:
    """silu(x) = x * sigmoid(x), with :func:`_sigmoid_te`."""
    from tvm import te, topi

    sig = _sigmoid_te(x)
    return te.compute(x.shape, lambda *i: x(*i) * sig(*i), name="T_silu", tag=topi.tag.ELEMWISE)


def _constant_exponent(call: Any) -> float | None:
    """The exponent of ``power(x, c)`` when ``c`` is a one-element float constant, else None."""
    from tvm.ir.expr import Constant

    c = call.args[1]
    if not isinstance(c, Constant) or not hasattr(c.value, "numpy"):
        return None
    v = c.value.numpy()
    return float(v.reshape(-1)[0]) if v.size == 1 else None


def _power(bb: Any, call: Any) -> Any:
    """``x ** n`` for a small whole ``n`` as ``n - 1`` multiplies, ``x ** 0.5`` as ``sqrt``: TVM
    lowers ``pow`` to one libm ``powf`` call per element (GPT-2's GELU, ``x ** 3``, ran at 6% of
    the copy bandwidth). Other exponents get TVM's own legalization."""
    from tvm import te, topi

    n = _constant_exponent(call)
    if n is None or call.args[0].ty.dtype != call.ty.dtype or not (n == 0.5 or (n == int(n) and 1 <= n <= 4)):
        return _default(bb, call)

    def te_power(x: Any) -> Any:
        if n == 0.5:
            return topi.sqrt(x)
        return te.compute(x.shape, lambda *i: _times(x(*i), int(n)), name="T_power", tag=topi.tag.ELEMWISE)

    return bb.call_te(te_power, call.args[0], primfunc_name_hint="power")


def _times(v: Any, n: int) -> Any:
    """``v * v * ... * v`` (``n`` factors)."""
    out = v
    for _ in range(n - 1):
        out = out * v
    return out


#: Relax op -> legalization with the fast approximation (float32 only; other dtypes get TVM's own).
FAST_MATH: dict[str, Legalize] = {op: _float32_only(fn) for op, fn in {
    "relax.exp": _unary("fast_exp"),
    "relax.erf": _unary("fast_erf"),
    "relax.tanh": _unary("fast_tanh"),
    "relax.nn.softmax": _softmax,
    "relax.nn.gelu": _gelu,
    "relax.nn.gelu_tanh": _gelu_tanh,
    "relax.sigmoid": _one_block(_sigmoid_te, "tir_sigmoid"),
    "relax.nn.silu": _one_block(_silu_te, "silu"),
    "relax.power": _power,
}.items()}
