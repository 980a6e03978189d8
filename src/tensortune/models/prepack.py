"""Weights packed at compile time for a model's matrix products (part of the layout plan).

A ``matmul(x, W)`` whose ``W[K, N]`` is a bound constant (after ``FoldConstant``, which also
folds the transpose of a ``Linear``/``Gemm`` weight, and its broadcast to a batch of one) becomes a ``dense_pack`` call
(:func:`tensortune.task.ops.dense_pack_te`) on ``W`` packed here, once, as ``[N/NB, K, NB]``:
the kernel reads a block of NB output columns contiguously along the reduction and no
inference repacks the weight. ``NB`` is the target's vector lanes (or half of them when that is
what divides N). A matmul whose weight is computed at run time, whose N no block divides, or
whose rows carry a batch keeps TVM's ``matmul`` (and the ``gemm`` template), with the reason
in its :class:`DensePlan`. In bf16, a matmul of two run-time operands (attention's ``Q K^T`` and
``P V``) becomes ``batch_matmul_bf16``, which rounds and packs its right operand per call, but
where its scores are as large as those the attention fusion takes (:mod:`.attention`): there the
fused attention keeps them in cache, with its own products in bf16 where their shapes allow
(Whisper's encoder: 78 ms with the fused attention in float32 against 108 ms with its products
in bf16 and the scores through memory; 57 ms fused in bf16).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..precision import DEFAULT_PRECISION


@dataclass
class DensePlan:
    """What the plan chose for one matmul of the model."""

    shape: str  # "128x768 @ 768x3072"
    flops: float
    block: int  # NB of the packed weight (0: not packed)
    reason: str = ""  # why the weight was not packed
    precision: str = DEFAULT_PRECISION  # of its product (bf16: dense_pack_bf16)
    at_run_time: bool = False  # both operands computed at run time, the right one packed per call (bf16)
    extra_cols: int = 0  # zero columns added to the packed weight (cut off after the product)

    def to_json(self) -> dict[str, Any]:
        """JSON form for reports."""
        return dict(self.__dict__)


def weight_block(n: int, target_json: dict[str, Any]) -> int:
    """NB for a weight with ``n`` columns: the target's lanes, or half of them, that divides ``n`` (0: none)."""
    from ..templates.base import target_lanes

    lanes = target_lanes(target_json)
    return next((b for b in (lanes, lanes // 2) if n % b == 0), 0)


#: The most columns a packed float32 weight may have over its own (zero columns that make its
#: column count a multiple of the vector block, cut off after the product): FocalNet's input
#: projections of 195, 387, 771 and 1539 columns ran unpacked at 27-64% of the peak.
MAX_PADDED_COLUMNS = 1.125


def padded_columns(n: int, target_json: dict[str, Any]) -> tuple[int, int]:
    """``(NB, extra columns)`` of a packed float32 weight with ``n`` columns: a block that divides
    ``n``, else the target's lanes with zero columns up to a multiple of them while that adds at
    most :data:`MAX_PADDED_COLUMNS` (``(0, 0)``: not packed)."""
    from ..templates.base import target_lanes

    nb = weight_block(n, target_json)
    if nb:
        return nb, 0
    lanes = target_lanes(target_json)
    extra = -n % lanes if lanes else 0
    return (lanes, extra) if lanes and n + extra <= MAX_PADDED_COLUMNS * n else (0, 0)


#: The most work a bf16 product of run-time operands may do on its padded rows, columns and
#: reduction, over the product's own: past it the float32 product is kept (a rough line: Swin's
#: 49-token windows, 1.31x padded, measured 1.05x slower in bf16; ViT's 197 tokens, 1.06x, 0.97x;
#: MobileViT's 36-column products, 1.33x, 0.95x, kept float32 by it).
MAX_PADDED_WORK = 1.25
#: The least work (FLOPs) of a product of run-time operands computed in bf16: below it its three
#: passes (rounding, packing, product) cost more than bf16 saves (sequences of 128: BERT's,
#: GPT-2's and T5's 25 MFLOP products measured 1.02-1.03x slower; ViT's 64 and MobileViT's 100
#: MFLOP ones 0.95-0.97x).
MIN_RUNTIME_FLOPS = 50e6
#: Register-tile heights of a bf16 product (its rows must divide: a guarded tile cannot be tensorized).
BF16_ROW_TILE = 8


def row_padding(rows: int, amx: bool = False) -> int:
    """Rows to add to a bf16 product's ``rows`` so that a register tile of 4 to 16 rows divides
    them (0 when one already does, or when there are fewer than 4). On AMX tiles (``amx``) rows
    up to a multiple of 16 where that fills the tiles better than the rows' own largest divisor
    by :data:`AMX_FILL_GAIN` (ViT's 197 tokens: 208, not 200 in tiles of 10; Swin's 49: 64, not
    tiles of 7; 196 stays in tiles of 14)."""
    from ..templates.base import largest_divisor_le

    if rows < 4:
        return 0
    own = largest_divisor_le(rows, 16)
    if amx:
        pad = -rows % 16
        return pad if rows / (rows + pad) > own / 16 + AMX_FILL_GAIN else 0
    return 0 if own >= 4 else -rows % BF16_ROW_TILE


#: How much fuller (a share of a tile's 16 rows) padded rows must fill AMX tiles than the rows'
#: own divisor to be padded (:func:`row_padding`).
AMX_FILL_GAIN = 0.15


def column_block(cols: int) -> tuple[int, int]:
    """``(NB, extra columns)`` of a bf16 product of run-time operands with ``cols`` columns: 16
    lanes (the fewest instructions, whatever the padding), 8 for at most 8 columns."""
    nb = 8 if cols <= 8 else 16
    return nb, -cols % nb


def static_shape(expr: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in expr.ty.shape)
    except Exception:  # noqa: BLE001 - symbolic, unknown, or not a tensor
        return None


def pack_dense_weights(mod: Any, target_json: dict[str, Any],
                       precision: str = DEFAULT_PRECISION) -> tuple[Any, list[DensePlan]]:
    """``mod`` with every constant-weight matmul as ``dense_pack`` on a packed weight (in bf16,
    ``dense_pack_bf16`` where K is even), and one :class:`DensePlan` per matmul of ``main``
    (``mod``'s constants folded already)."""
    from tvm import relax
    from tvm.ir.expr import Constant
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from ..task.ops import dense_pack_te, pack_weight
    from ..task.ops_bf16 import batch_matmul_bf16_te, dense_pack_bf16_te, pack_dense_weight
    from ..templates.amx import target_has_amx
    from . import bf16act
    from .attention import attention_products

    amx = target_has_amx(target_json)

    plans: list[DensePlan] = []
    attention = attention_products(mod)

    @mutator
    class _Pack(PyExprMutator):  # type: ignore[misc]
        def visit_call_(self, call: Any) -> Any:  # noqa: N802 - TVM's visitor name
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.matmul":
                return call
            x, w = call.args
            xs, ws = static_shape(x), static_shape(w)
            if xs is None or ws is None:
                return call
            const = w if isinstance(w, Constant) else None
            if const is None and isinstance(w, relax.Var):
                bound = self.lookup_binding(w)
                const = bound if isinstance(bound, Constant) else None
            if const is not None and len(ws) > 2 and len(xs) >= len(ws) and set(ws[:-2]) == {1}:
                ws = ws[-2:]  # a matrix broadcast to a batch of one (LeViT's exported linear layers)
            flops = 2.0 * float(np.prod(xs)) * ws[-1]
            plan = DensePlan(f"{'x'.join(map(str, xs))} @ {'x'.join(map(str, ws))}", flops, 0)
            plans.append(plan)
            out_dtype = str(call.ty.dtype)
            if const is None and precision == "bf16" and (xs, ws) in attention:
                plan.reason = "scores of an attention, fused"
                return call
            if const is None and precision == "bf16" and _runtime_bf16(xs, ws, (x, w), out_dtype):
                if flops < MIN_RUNTIME_FLOPS:
                    plan.reason = f"run-time operands, {flops / 1e6:.0f} MFLOP: too small to pay for packing in bf16"
                    return call
                nb, extra_cols = column_block(ws[-1])
                waste = _padded_work(xs, ws, extra_cols)
                if waste <= MAX_PADDED_WORK:
                    plan.precision, plan.at_run_time, plan.block = "bf16", True, nb
                    return self._runtime_product(x, w, xs, ws, nb, extra_cols)
                plan.reason = f"run-time operands padded to {waste:.2f}x the work in bf16"
                return call
            if const is None:
                plan.reason = "weight computed at run time"
            elif len(ws) != 2 or len(xs) < 2:
                plan.reason = "not a 2-D weight"
            elif int(np.prod(xs[:-2])) != 1:
                plan.reason = "rows carry a batch"
            elif str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32" or out_dtype != "float32":
                plan.reason = "not float32"
            else:
                plan.block, plan.extra_cols = padded_columns(ws[1], target_json)
                if not plan.block:
                    plan.reason = f"N={ws[1]} not a multiple of a vector block"
            if plan.reason:
                return call
            w_kn = np.pad(const.value.numpy().reshape(ws), ((0, 0), (0, plan.extra_cols)))
            if precision == "bf16" and ws[0] % 2 == 0 and plan.block in (8, 16):
                plan.precision = "bf16"
                return self._bf16_product(x, xs, ws[1], relax.const(pack_dense_weight(w_kn, plan.block)),
                                          plan.extra_cols)
            out = self.builder_.call_te(dense_pack_te, x, relax.const(pack_weight(w_kn, plan.block)), out_dtype,
                                        primfunc_name_hint="dense_pack")
            return self._cut(out, xs[-2], ws[1], 0, plan.extra_cols)

        def _bf16_product(self, x: Any, xs: tuple[int, ...], cols: int, packed: Any, extra_cols: int) -> Any:
            """``x`` times a packed bf16 weight. Rows no register tile divides (a ViT's 197 tokens)
            get zero rows (the pad fuses into the kernel's rounding stage); a weight padded with zero
            columns (FocalNet's 2C+4 outputs) gives extra columns; both are cut off after it."""
            extra_rows = row_padding(xs[-2], amx)
            if extra_rows:
                x = self.builder_.emit(relax.op.nn.pad(x, [0, 0] * (len(xs) - 2) + [0, extra_rows, 0, 0]))
            elif bf16act.STORE_BF16:
                x = bf16act.rounded(self.builder_, x)
            out = self.builder_.call_te(dense_pack_bf16_te, x, packed, primfunc_name_hint="dense_pack_bf16")
            return self._cut(out, xs[-2], cols, extra_rows, extra_cols)

        def _cut(self, out: Any, rows: int, cols: int, extra_rows: int, extra_cols: int) -> Any:
            """``out`` (a product's call) without its padded rows and columns: its first ``rows`` x
            ``cols`` (one slice, fused into the product's epilogue)."""
            cut = ([(-2, rows)] if extra_rows else []) + ([(-1, cols)] if extra_cols else [])
            if not cut:
                return out
            out = self.builder_.emit(out)
            ndim = len(out.ty.shape)
            return relax.op.strided_slice(out, axes=[ndim + a for a, _ in cut], begin=[0] * len(cut),
                                          end=[e for _, e in cut])

        def _runtime_product(self, x: Any, w: Any, xs: tuple[int, ...], ws: tuple[int, ...], nb: int,
                             extra_cols: int) -> Any:
            """``batch_matmul_bf16`` of ``x`` and ``w``, rows and columns padded to its tiles and an
            odd reduction read as pairs (``batch_matmul_bf16_te`` adds the zero step; the pads fuse
            into its rounding and packing stages), the extra rows and columns cut off after it."""
            extra_rows = row_padding(xs[-2])
            lead = [0, 0] * (len(xs) - 2)
            if extra_rows:
                x = self.builder_.emit(relax.op.nn.pad(x, lead + [0, extra_rows, 0, 0]))
            if extra_cols:
                w = self.builder_.emit(relax.op.nn.pad(w, lead + [0, 0, 0, extra_cols]))
            out = self.builder_.call_te(batch_matmul_bf16_te, x, w, nb, primfunc_name_hint="batch_matmul_bf16")
            return self._cut(out, xs[-2], ws[-1], extra_rows, extra_cols)

    out = mod.clone() if hasattr(mod, "clone") else mod
    packer = _Pack(out)
    for gv, f in list(out.functions.items()):
        if isinstance(f, relax.Function):
            packer.builder_.update_func(gv, packer.visit_expr(f))
    out = packer.builder_.get()
    return relax.transform.DeadCodeElimination()(out), plans


def _runtime_bf16(xs: tuple[int, ...], ws: tuple[int, ...], operands: tuple[Any, Any], out_dtype: str) -> bool:
    """A matmul of two run-time float32 operands that ``batch_matmul_bf16`` computes: the same
    leading dimensions (no broadcast)."""
    return (len(xs) == len(ws) >= 2 and xs[:-2] == ws[:-2] and xs[-1] == ws[-2]
            and out_dtype == "float32" and all(str(o.ty.dtype) == "float32" for o in operands))


def _padded_work(xs: tuple[int, ...], ws: tuple[int, ...], extra_cols: int) -> float:
    """The work of a bf16 product of run-time operands on its padded shape over its own."""
    M, K, N = xs[-2], xs[-1], ws[-1]
    return (M + row_padding(M)) * (K + K % 2) * (N + extra_cols) / (M * K * N)
