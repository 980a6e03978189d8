"""Attention heads of prime size computed on padded rows and keys, so that they fuse.

The fused attention (:mod:`.attention`) computes a head a block of rows at a time, and the block
must divide the rows: the 197 tokens of a ViT at 224 px (DeiT, BEiT; DINOv2's 257) are prime, so
their heads ran as three functions, ``S`` and ``P`` written to memory and read back.
:func:`pad_attention_heads` rewrites such a chain, from ``Q K^T`` through its scale, mask and
softmax to ``P V``, on ``Q``'s rows padded with zero rows to a multiple of :data:`ROW_MULTIPLE`
(a row-wise operand with a row axis padded alike), and cuts the padded rows off the output. A
padded row is computed and dropped: no real row reads it, since the softmax reduces along the
keys. Keys that no vector piece divides (197 again) are padded too, to whole vectors, so that the
softmax's maximum and sum run as vectors of partials rather than a scalar chain a row (the fused
head of 197 keys took 1.23x the time of one of 200 on znver4): ``K`` and ``V`` get zero keys
and the scores of the padded keys a large negative mask before the softmax, so their
probabilities are zero. The chain is rebuilt on 3-D operands (its heads one batch axis):
its own reshapes between the two products dropped, which TVM could not narrow to a row block's
region once the keys are read in pairs. It runs on the Relax graph before the layout plan chooses
the matrix products, so that they see the padded heads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..precision import ATTENTION_LANES, ATTENTION_ROW_MULTIPLE as ROW_MULTIPLE
from ..templates.generic import _vector_piece
from .attention import _ROW_OPS, _static, _used_once, fused_scores

#: The score a padded key gets before the softmax (its probability underflows to zero).
MASKED_SCORE = -1e30


def padded_head(rows: int, keys: int) -> tuple[int, int]:
    """The rows and keys a head of ``rows`` x ``keys`` scores is computed on: its own when it
    would not fuse padded either (too small); else rows up to a multiple of :data:`ROW_MULTIPLE`
    where no row block divides them, and keys (two vectors or more) up to whole vectors where no
    vector piece does."""
    padded = rows if fused_scores(rows, keys) else -(-rows // ROW_MULTIPLE) * ROW_MULTIPLE
    if not fused_scores(padded, keys):
        return rows, keys
    if keys < 2 * ATTENTION_LANES or _vector_piece(keys, ATTENTION_LANES):  # too few for a piece, or one divides
        return padded, keys
    return padded, -(-keys // ATTENTION_LANES) * ATTENTION_LANES


def _name(call: Any) -> str:
    return str(getattr(getattr(call, "op", None), "name", ""))


#: Ops of a chain that only regroup its leading axes: dropped from the 3-D chain.
_VIEWS = frozenset({"relax.reshape", "relax.broadcast_to"})


@dataclass
class _Head:
    """An attention chain to pad: ``q`` and ``kt`` of the scores, the row-wise ops between the
    products (scores first), ``v``, and the head's batch (its leading axes flattened), rows, keys."""

    q: Any
    kt: Any
    mids: list[Any]
    v: Any
    inner: list[Any]
    batch: int
    rows: int
    keys: int


def _lead(shape: list[int]) -> int:
    """The product of a shape's leading axes (all but the last two)."""
    return int(np.prod(shape[:-2]))


def _head(bound: dict[Any, Any], once: set[Any], o: Any) -> _Head | None:
    """The chain that ends in ``o`` (a binding ``P V``) when :func:`padded_head` pads it and every
    op between the products is a softmax over the keys, an elementwise op whose other operands
    broadcast along the head, or a regrouping of leading axes (None otherwise)."""
    call = bound[o]
    if _name(call) != "relax.matmul":
        return None
    p_shape, v_shape = _static(call.args[0]), _static(call.args[1])
    if not p_shape or not v_shape or len(p_shape) < 2 or len(v_shape) < 2:
        return None
    rows, keys = p_shape[-2:]
    batch = _lead(p_shape)

    def in_head(a: Any) -> bool:
        shape = _static(a)
        return bool(shape) and shape[-2:] == [rows, keys] and _lead(shape) == batch

    mids: list[Any] = []
    inner: list[Any] = []
    softmaxes, x = 0, call.args[0]
    while True:
        value = bound.get(x)
        if value is None or x not in once or not in_head(x):
            return None
        inner.insert(0, x)
        name = _name(value)
        if name == "relax.matmul":
            q, kt = (_static(a) for a in value.args)
            if not q or not kt or _lead(q) != batch or _lead(kt) != batch or _lead(v_shape) != batch:
                return None
            if softmaxes != 1 or padded_head(rows, keys) == (rows, keys):
                return None
            return _Head(value.args[0], value.args[1], mids, call.args[1], inner, batch, rows, keys)
        if name == "relax.nn.softmax":
            if int(value.attrs.axis) not in (-1, len(_static(x)) - 1):
                return None
            softmaxes += 1
        elif name not in _ROW_OPS:
            return None
        chained = [a for a in value.args if a in bound and in_head(a)
                   and _name(bound[a]) in _ROW_OPS | {"relax.matmul", "relax.nn.softmax"}]
        if not chained:
            return None
        x = chained[0]
        if name not in _VIEWS:
            if not all(a.same_as(x) or _broadcasts(a, batch, rows, keys) for a in value.args):
                return None
            mids.insert(0, value)


def _broadcasts(a: Any, batch: int, rows: int, keys: int) -> bool:
    """Whether an elementwise operand ``a`` of a chain broadcasts along a 3-D head once its
    leading axes are flattened (a scalar, a row of keys, a mask per head or for all heads)."""
    shape = _static(a)
    if shape is None:
        return False
    if len(shape) < 2:
        return not shape or shape[-1] in (1, keys)
    if len(shape) > 2 and _lead(shape) not in (1, batch):
        return False
    return shape[-2] in (1, rows) and shape[-1] in (1, keys)


def pad_attention_heads(mod: Any) -> Any:
    """``mod`` with each attention chain of ``main`` that :func:`padded_head` pads computed on its
    padded rows and keys (see the module doc); ``mod`` itself when there is none."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    main = mod["main"]
    bound = {b.var: b.value for block in main.body.blocks if isinstance(block, relax.DataflowBlock)
             for b in block.bindings}
    once = _used_once(main)
    heads = {o: h for o in bound if (h := _head(bound, once, o)) is not None}
    if not heads:
        return mod
    inner = {v for h in heads.values() for v in h.inner}

    @mutator
    class _Pad(PyExprMutator):  # type: ignore[misc]
        def __init__(self, mod: Any) -> None:
            super().__init__(mod)
            self.operands: dict[Any, Any] = {}  # a mask every layer adds: padded once

        def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802 - TVM's visitor name
            if binding.var in inner:
                return  # emitted padded, with the chain's output
            if binding.var not in heads:
                super().visit_var_binding_(binding)
                return
            h = heads[binding.var]
            rows, keys = padded_head(h.rows, h.keys)
            emit = self.builder_.emit
            x = emit(relax.op.nn.pad(self._flat(h.q, h.batch), [0, 0, 0, rows - h.rows, 0, 0]))
            kt = self._flat(h.kt, h.batch)
            if keys > h.keys:
                kt = emit(relax.op.nn.pad(kt, [0, 0, 0, 0, 0, keys - h.keys]))
            x = emit(relax.op.matmul(x, kt, out_dtype="float32"))
            for call in h.mids:
                if _name(call) == "relax.nn.softmax":
                    if keys > h.keys:
                        mask = np.zeros((1, 1, keys), "float32")
                        mask[..., h.keys:] = MASKED_SCORE
                        x = emit(relax.op.add(x, relax.const(mask)))
                    x = emit(relax.op.nn.softmax(x, axis=-1))
                    continue
                args = [x if a in h.inner else self._operand(a, h, rows, keys) for a in call.args]
                x = emit(relax.Call(call.op, args, call.attrs))
            v = self._flat(h.v, h.batch)
            if keys > h.keys:
                v = emit(relax.op.nn.pad(v, [0, 0, 0, keys - h.keys, 0, 0]))
            x = emit(relax.op.matmul(x, v, out_dtype="float32"))
            if rows > h.rows:
                x = emit(relax.op.strided_slice(x, axes=[1], begin=[0], end=[h.rows]))
            if _static(binding.var) != _static(x):
                x = emit(relax.op.reshape(x, _static(binding.var)))
            self.set_var_remap(binding.var, x)

        def _flat(self, a: Any, batch: int) -> Any:
            """``a`` (a product's operand) with its leading axes flattened into one."""
            a = self.visit_expr(a)
            shape = _static(a)
            return a if len(shape) == 3 else self.builder_.emit(relax.op.reshape(a, [batch, *shape[-2:]]))

        def _operand(self, a: Any, h: _Head, rows: int, keys: int) -> Any:
            """An elementwise operand of the chain in 3-D, its rows and keys padded (with zeros)
            where it has them."""
            key = (a, h.rows, h.keys)
            if key in self.operands:
                return self.operands[key]
            x = self.visit_expr(a)
            shape = _static(x)
            if not shape:
                return x
            if len(shape) > 3:
                x = self.builder_.emit(relax.op.reshape(x, [_lead(shape), *shape[-2:]]))
            pad = [[0, 0] for _ in range(min(len(shape), 3))]
            if len(shape) >= 2 and shape[-2] == h.rows:
                pad[-2][1] = rows - h.rows
            if shape[-1] == h.keys:
                pad[-1][1] = keys - h.keys
            if any(after for _, after in pad):
                x = self.builder_.emit(relax.op.nn.pad(x, [w for p in pad for w in p]))
            self.operands[key] = x
            return x

    out = mod.clone() if hasattr(mod, "clone") else mod
    padder = _Pad(out)
    padder.builder_.update_func(out.get_global_var("main"), padder.visit_expr(main))
    return padder.builder_.get()
