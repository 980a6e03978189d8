"""Fast approximations of the transcendental functions a model calls, chosen at legalization.

LLVM lowers ``exp``/``erf``/``tanh`` on vectors to one libm call per lane, so softmax and GELU
run scalar: in bert_base they took a fifth of the model's time. TOPI's ``fast_exp``,
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


#: Relax op -> legalization with the fast approximation (float32 only; other dtypes get TVM's own).
FAST_MATH: dict[str, Legalize] = {op: _float32_only(fn) for op, fn in {
    "relax.exp": _unary("fast_exp"),
    "relax.erf": _unary("fast_erf"),
    "relax.tanh": _unary("fast_tanh"),
    "relax.nn.softmax": _softmax,
    "relax.nn.gelu": _gelu,
    "relax.nn.gelu_tanh": _gelu_tanh,
}.items()}
