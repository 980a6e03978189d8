"""Attention template in bf16: the fused attention's two products on ``vdpbf16ps``.

The function is a fused attention whose products read bfloat16 operands
(:func:`tensortune.models.attention.fuse_attention` in bf16): ``Q`` rounded and ``K`` packed
(``[B, N'/16, K/2, 16, 2]``, its keys padded to two vectors, the padded scores cut off before the
softmax), ``P`` rounded and ``V`` packed in pairs of keys. The structure is the float32
template's (:mod:`.attention`): batch, heads and row blocks one parallel loop, and under it a
block's scores, softmax and output rows in cache. Here the scores' register tile is ``rows_s`` rows
by two vectors of keys and ``O``'s ``rows_o`` rows by the head width, each vector of sums one
``vdpbf16ps`` per pair of reduction steps; the probabilities are rounded to bfloat16 as they are
computed (the softmax's last stage inlined into the rounding), so ``P V`` reads half the bytes.
``Q``, ``K`` and ``V`` are rounded and packed once per call, before the row blocks, in parallel.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from ..precision import ATTENTION_LANES, SCORES_COLUMNS
from .attention import (BLOCK_BYTES, TILE_HEIGHTS, AttentionTemplate, parallel_row_blocks, row_stages,
                        schedule_row_stages)
from .base import TemplateError, annotate_unroll, schedule_of
from .bf16 import intrinsic, schedule_convert, schedule_pack
from .conv2d_nchwc import vector_registers
from .generic import _below, _vectorize_spatial_inner

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task
    from ..task.pattern import AttentionPattern

LANES = ATTENTION_LANES


class AttentionBf16Template(AttentionTemplate):
    """A fused attention in bf16, row block by row block."""

    name = "attention_bf16"
    version = 1
    precision = "bf16"

    def space(self, task: Task) -> ConfigSpace:
        s = super().space(task)
        s.add_constraint("register tiles divide the row block (a guarded tile cannot be tensorized)",
                         lambda c: c["tile_rows"] % c["rows_s"] == 0 and c["tile_rows"] % c["rows_o"] == 0)
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        pat = self._pattern(task)
        regs = vector_registers(task.target_json)
        M, N, D, B = pat.args["M"], pat.args["N"], pat.args["D"], pat.args["B"]
        cands = space.knob("tile_rows").entities
        tall = [r for r in cands if r >= 8 or r == M] or cands
        fits = [r for r in tall if 3 * r * N * 4 <= BLOCK_BYTES and B * (M // r) >= 8]
        rows = max(fits) if fits else min(tall)

        def tallest(fits_regs: Any) -> int:
            return max((h for h in TILE_HEIGHTS if rows % h == 0 and fits_regs(h)), default=1)

        return {"tile_rows": rows, "rows_s": tallest(lambda h: 2 * h + 3 <= regs),
                "rows_o": tallest(lambda h: (h + 1) * (D // LANES) + 1 <= regs),
                "auto_unroll_max_step": 16, "unroll_explicit": 1}

    def _schedule(self, task: Task, config: Config, fuse: bool) -> Any:
        pat = self._pattern(task)
        rows, rows_s, rows_o = config["tile_rows"], config["rows_s"], config["rows_o"]
        if pat.args["M"] % rows or rows % rows_s or rows % rows_o:
            raise TemplateError("the row block does not divide the rows, or a register tile the row block")
        p_round = pat.rounds[2]
        sch = schedule_of(task)
        scores, out = sch.get_sblock(pat.scores), sch.get_sblock(pat.out)
        between = [sch.get_sblock(n) for n in pat.between]
        kept, partials = row_stages(sch, between[:-1], LANES)  # the cut inlined with the scale
        sch.compute_inline(between[-1])  # the probabilities: rounded as they are computed
        after = [sch.get_sblock(n) for n in pat.after]
        for b in after[:-1]:
            sch.compute_inline(b)
        *batch, i, e, kp, _ke = sch.get_loops(out)
        par, ii = parallel_row_blocks(sch, batch, i, rows, fuse)
        p_block = sch.get_sblock(p_round)
        for b in [p_block, *reversed(kept), scores]:  # consumers first
            sch.compute_at(b, par)
        iio, iii = sch.split(ii, [None, rows_o])
        eo, ei = sch.split(e, [None, LANES])
        sch.reorder(iio, kp, iii, eo, ei)
        sch.unroll(iii)
        sch.unroll(eo)
        if after:
            sch.reverse_compute_at(after[-1], iio)
            _vectorize_spatial_inner(sch, after[-1], iio, LANES)
        self._bf16_scores(sch, scores, par, rows_s)
        init = sch.decompose_reduction(out, kp)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.tensorize(ei, intrinsic(LANES))
        self.schedule_rest(sch, pat, config, par, kept, partials, p_block)
        return sch

    @staticmethod
    def schedule_rest(sch: Any, pat: AttentionPattern, config: Config, par: Any, kept: list[Any], partials: set[str],
                      p_block: Any) -> None:
        """The stages around the two products: the softmax's rows, the probabilities' rounding
        (``p_block``), ``Q``'s rounding and ``K``'s and ``V``'s packing; the unroll knobs."""
        q_round, k_pack, _, v_pack = pat.rounds
        schedule_row_stages(sch, kept, partials, par, LANES)
        _vectorize_spatial_inner(sch, p_block, par, LANES)
        schedule_convert(sch, q_round, LANES)
        schedule_pack(sch, k_pack)
        schedule_pack(sch, v_pack)
        annotate_unroll(sch, par, config)

    @staticmethod
    def _bf16_scores(sch: Any, block: Any, par: Any, rows_s: int) -> None:
        """The block's rows of ``S``: ``rows_s`` rows by two vectors of keys in registers, the
        reduction over the head width's pairs outside them, each vector one ``vdpbf16ps``."""
        loops = _below(sch, block, par)
        if len(loops) not in (3, 4):
            raise TemplateError("the scores block's loops are not rows, keys, head-width pairs")
        *ii, jj, kp, _ke = loops  # no row loop when the block is one row
        sio, sii = sch.split(ii[0], [None, rows_s]) if ii else (None, None)
        jo, jv, jl = sch.split(jj, [None, SCORES_COLUMNS // LANES, LANES])
        sch.reorder(*[lp for lp in (sio, jo, kp, sii, jv, jl) if lp is not None])
        if sii is not None:
            sch.unroll(sii)
        sch.unroll(jv)
        init = sch.decompose_reduction(block, kp)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.tensorize(jl, intrinsic(LANES))
