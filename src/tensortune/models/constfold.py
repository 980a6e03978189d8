"""Constant weights' layout transforms evaluated with numpy (part of the layout plan).

After ``ConvertLayout`` every convolution weight reaches its convolution through a
``layout_transform`` of a constant. TVM's ``FoldConstant`` evaluates each of them by building
and running a TIR function (one LLVM build per weight: 226 builds and 5 s of a MobileNetV2's
planning here). The transform is an index map of floordiv/floormod arithmetic, so numpy does the
same in one scatter per weight: every input element is written where the map sends it, the
rest of the output (where the layout pads) holds the pad value. What this cannot evaluate is
left to ``FoldConstant``.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .relaxrewrite import rewrite_calls

#: TIR expression kinds :func:`_numpy_expr` evaluates, by class name.
_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "FloorDiv": np.floor_divide, "FloorMod": np.mod,
}


def _numpy_expr(e: Any, env: dict[Any, np.ndarray]) -> Any:
    """The index expression ``e`` over numpy arrays of its variables' values (``env``: by handle)."""
    name = type(e).__name__
    if name in ("Var", "SizeVar"):
        return env[e.__chandle__()]
    if name == "IntImm":
        return int(e.value)
    if name == "Cast":
        return _numpy_expr(e.value, env)
    if name in _BINARY:
        return _BINARY[name](_numpy_expr(e.a, env), _numpy_expr(e.b, env))
    raise ValueError(f"index expression {name} not evaluated with numpy")


def transform_array(x: np.ndarray, index_map: Any, pad_value: float | None = None) -> np.ndarray:
    """``x`` laid out by ``index_map`` (a ``tvm.tirx.IndexMap``), as ``relax.layout_transform`` does."""
    out_shape = [int(d) for d in index_map.map_shape(list(x.shape))]
    grids = np.indices(x.shape, dtype=np.int64)
    env = {v.__chandle__(): g for v, g in zip(index_map.initial_indices, grids)}
    idx = [np.broadcast_to(_numpy_expr(e, env), x.shape) for e in index_map.final_indices]
    out = np.full(out_shape, 0 if pad_value is None else pad_value, dtype=x.dtype)
    out[tuple(idx)] = x
    return out


def _fold(call: Any, m: Any) -> Any:
    """One ``layout_transform`` of a tensor constant as the transformed constant (``call`` otherwise)."""
    from tvm import relax
    from tvm.ir.expr import Constant

    x = call.args[0]
    if isinstance(x, relax.Var):
        x = m.lookup_binding(x)
    if not isinstance(x, Constant) or not hasattr(x.value, "numpy"):  # a tensor constant only
        return call
    pad = call.attrs.pad_value
    try:
        value = transform_array(x.value.numpy(), call.attrs.index_map, None if pad is None else float(pad.value))
    except ValueError:  # an index map numpy cannot evaluate: FoldConstant's job
        return call
    return relax.const(value)


def fold_constant_transforms(mod: Any) -> Any:
    """``mod`` with every ``layout_transform`` of a constant replaced by the transformed constant."""
    return rewrite_calls(mod, "relax.layout_transform", _fold)
