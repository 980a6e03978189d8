"""Attention template: ``O = softmax(Q K^T) V`` a block of rows at a time, in cache.

The function is a fused attention (:mod:`tensortune.models.attention`). Its output rows are
split in blocks of ``tile_rows``; batch, heads and row blocks are one parallel loop, and under
it each block computes its rows of the scores ``S`` (a register tile of ``rows_s`` rows by two
vectors of keys, the keys' guarded last tile peeled off), the softmax stages (the row maxima
and sums as a vector of partials a row over an exact piece of the keys, else independent
scalar chains, one per row; the exponential and the probabilities vectorised along the keys)
and its rows of ``O`` (a register tile of ``rows_o`` rows by the head width, a vector at a time
where the width is whole vectors: one 48-wide vector op a row ran at a tenth of the speed). ``S`` and the probabilities of a block stay in the core's cache instead of going
to memory and back, which is what the unfused functions spend their time on.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..space import Config, ConfigSpace
from .base import Template, TemplateError, annotate_unroll, schedule_of, vector_lanes
from .conv2d_nchwc import vector_registers
from .generic import (_below, _expensive_shared, _fresh_vars, _is_reduction, _peel_guarded, _split_reductions,
                      _vectorize_spatial_inner)

if TYPE_CHECKING:  # pragma: no cover
    from ..task.pattern import AttentionPattern
    from ..task import Task

#: Bytes of scores, exponentials and probabilities a row block may hold (a share of a core's L2).
BLOCK_BYTES = 384 * 1024
#: Register-tile heights the two matmuls choose from.
TILE_HEIGHTS = (1, 2, 3, 4, 5, 6, 7, 8)
#: The tallest row block but a head's whole rows (a ViT's 197 tokens have no other divisor).
MAX_ROW_BLOCK = 64
#: Row chains of a reduction unrolled at most (a whole head of 197 rows unrolled spills).
MAX_UNROLLED_ROWS = 16


def _row_blocks(rows: int) -> list[int]:
    """Row-block heights: the divisors of ``rows`` up to :data:`MAX_ROW_BLOCK`, and ``rows`` itself
    up to 256 (a head's whole rows). A guarded block would stop TVM
    from narrowing the region the stages before it compute per block (the reshapes' index
    arithmetic), so that every block computed all of ``S``."""
    exact = [d for d in range(1, min(rows, MAX_ROW_BLOCK) + 1) if rows % d == 0]
    return exact + ([rows] if MAX_ROW_BLOCK < rows <= 256 else [])


class AttentionTemplate(Template):
    """A fused attention, computed row block by row block."""

    name = "attention"
    version = 3
    precision = "f32"

    def _pattern(self, task: Task) -> "AttentionPattern":
        pat = task.attention
        if pat is None:
            raise TemplateError("not a fused attention")
        if pat.precision != self.precision:
            raise TemplateError(f"a fused attention in {pat.precision}, not {self.precision}")
        return pat

    def space(self, task: Task) -> ConfigSpace:
        pat = self._pattern(task)
        s = ConfigSpace()
        s.define_choice("tile_rows", _row_blocks(pat.args["M"]))
        s.define_choice("rows_s", list(TILE_HEIGHTS))
        s.define_choice("rows_o", list(TILE_HEIGHTS))
        s.add_constraint("register tiles no taller than the row block",
                         lambda c: c["rows_s"] <= c["tile_rows"] and c["rows_o"] <= c["tile_rows"])
        s.define_unroll()
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        pat = self._pattern(task)
        lanes = vector_lanes(task)
        regs = vector_registers(task.target_json)
        M, N, D, B = pat.args["M"], pat.args["N"], pat.args["D"], pat.args["B"]
        width = -(-D // lanes)

        def tallest(rows: int, fits: Any) -> int:
            """The tallest register tile that fits the registers, one dividing ``rows`` first; one row
            where none fits (a head 64 wide is 8 AVX2 vectors: one row of O and its operands
            take 17 of the 16 registers)."""
            ok = [h for h in TILE_HEIGHTS if h <= rows and fits(h)]
            whole = [h for h in ok if rows % h == 0 and h >= 4]
            return max(whole or ok or [1])

        def heights(rows: int) -> tuple[int, int]:
            """Register-tile heights of S (two vectors wide) and of O (the head width)."""
            return (tallest(rows, lambda h: 2 * h + 3 <= regs), tallest(rows, lambda h: (h + 1) * width + 1 <= regs))

        cands = space.knob("tile_rows").entities
        tall = [r for r in cands if r >= 8 or r == M] or cands
        fits = [r for r in tall if 3 * r * N * 4 <= BLOCK_BYTES and B * (M // r) >= 8]
        rows = max(fits) if fits else min(tall)
        rows_s, rows_o = heights(rows)
        return {"tile_rows": rows, "rows_s": rows_s, "rows_o": rows_o,
                "auto_unroll_max_step": 16, "unroll_explicit": 1}

    def apply(self, task: Task, config: Config) -> Any:
        return _fresh_vars(self.schedule(task, config).mod)  # the copies a peeled loop made, renamed

    def schedule(self, task: Task, config: Config) -> Any:
        return schedule_either(lambda fuse: self._schedule(task, config, fuse))

    def _schedule(self, task: Task, config: Config, fuse: bool) -> Any:
        pat = self._pattern(task)
        lanes = vector_lanes(task)
        rows, rows_o = config["tile_rows"], config["rows_o"]
        if pat.args["M"] % rows:
            raise TemplateError("the row block does not divide the rows")
        sch = schedule_of(task)
        scores, out = sch.get_sblock(pat.scores), sch.get_sblock(pat.out)
        between = [sch.get_sblock(n) for n in pat.between]
        kept, partials = row_stages(sch, between[:-1], lanes)
        probs = between[-1]
        after = [sch.get_sblock(n) for n in pat.after]
        for b in after[:-1]:
            sch.compute_inline(b)
        *batch, i, e, j = sch.get_loops(out)
        par, ii = parallel_row_blocks(sch, batch, i, rows, fuse)
        for b in [probs, *reversed(kept), scores]:  # consumers first, while O's rows split exactly
            sch.compute_at(b, par)
        iio, iii = sch.split(ii, [None, rows_o])  # a guarded last tile: after compute_at, harmless
        if pat.args["D"] % lanes == 0:
            eo, ev = sch.split(e, [None, lanes])  # the head width a vector at a time, unrolled
            sch.reorder(iio, j, iii, eo, ev)
            sch.unroll(eo)
            e_inner = ev
        else:
            e_loops = [e]
            if pat.args["D"] > 4 * lanes:
                e_loops = list(sch.split(e, [None, 4 * lanes]))
            sch.reorder(iio, *e_loops[:-1], j, iii, e_loops[-1])
            e_inner = e_loops[-1]
        sch.unroll(iii)
        sch.vectorize(e_inner)
        if after:
            sch.reverse_compute_at(after[-1], iio)
            _vectorize_spatial_inner(sch, after[-1], iio, lanes)
        self._scores(sch, scores, par, config, lanes, pat.args["N"])
        schedule_row_stages(sch, kept, partials, par, lanes)
        _vectorize_spatial_inner(sch, probs, par, lanes)
        sch.decompose_reduction(out, j)
        annotate_unroll(sch, par, config)
        return sch

    @staticmethod
    def _scores(sch: Any, block: Any, par: Any, config: Config, lanes: int, keys: int) -> None:
        """The block's rows of ``S``: ``rows_s`` rows by two vectors of keys in registers, the reduction
        over the head width outside them, the keys' guarded last tile peeled off."""
        loops = _below(sch, block, par)
        if len(loops) not in (2, 3):
            raise TemplateError("the scores block's loops are not rows, keys, head width")
        *ii, jj, k = loops  # no row loop when the block is one row
        width = 2 * lanes
        sio, sii = sch.split(ii[0], [None, config["rows_s"]]) if ii else (None, None)
        jo, ji = sch.split(jj, [None, width])
        sch.reorder(*[lp for lp in (sio, jo, k, sii, ji) if lp is not None])
        sch.vectorize(ji)
        if sii is not None:
            sch.unroll(sii)
        for part in _peel_guarded(sch, jo, width, keys):  # each copy's accumulators zeroed before its k loop
            (copy,) = sch.get_child_blocks(part)
            sch.decompose_reduction(copy, sch.get_loops(copy)[-3 if sii is not None else -2])


def parallel_row_blocks(sch: Any, batch: list[Any], rows_loop: Any, rows: int, fuse: bool = True) -> tuple[Any, Any]:
    """``O``'s rows split in blocks of ``rows``, the blocks and the batch one parallel loop (only
    the batch with ``fuse`` False, the blocks inside it); returns the blocks' loop and the rows'
    loop inside a block."""
    io, ii = sch.split(rows_loop, [None, rows])
    if batch and not fuse:
        sch.parallel(sch.fuse(*batch) if len(batch) > 1 else batch[0])
        return io, ii
    par = sch.fuse(*batch, io) if batch else io
    sch.parallel(par)
    return par, ii


def schedule_either(schedule: Callable[[bool], Any]) -> Any:
    """``schedule(True)`` (batch and row blocks one parallel loop), else ``schedule(False)`` (the
    batch alone): a block's stages that index the scores through a reshape of the batch (``[B*H,
    M, N]`` as ``[B, H, M, N]``) take divisions of the fused loop, and TVM refuses to vectorise
    them (MobileViT's heads fell back to a generic schedule)."""
    try:
        return schedule(True)
    except TemplateError:
        raise
    except Exception:  # noqa: BLE001 - TVM refused a primitive: the other form
        return schedule(False)


def row_stages(sch: Any, between: list[Any], lanes: int) -> tuple[list[Any], set[str]]:
    """The stages between the scores and the probabilities that keep a buffer of their own (the
    row reductions, an expensive value read twice), the others (scale, mask, the maximum
    subtracted) inlined into their readers; the maximum and the sum split into vectors of partials
    over exact pieces. Returns the kept stages and the names of the partials blocks."""
    kept = []
    for b in between:
        if not _is_reduction(sch, b) and not _expensive_shared(sch, b):
            try:
                sch.compute_inline(b)
                continue
            except Exception:  # noqa: BLE001 - kept as a stage of its own
                pass
        kept.append(b)
    named = {sch.get(b).name_hint for b in kept}
    kept = _split_reductions(sch, kept, lanes)
    return kept, {sch.get(b).name_hint for b in kept} - named


def schedule_row_stages(sch: Any, kept: list[Any], partials: set[str], par: Any, lanes: int) -> None:
    """The kept stages of a row block (computed at ``par``): partials as contiguous vectors, other
    reductions as one independent chain a row, elementwise stages vectorised."""
    for b in kept:
        if sch.get(b).name_hint in partials:
            _vectorize_row_partials(sch, b, par)
        elif _is_reduction(sch, b):
            _interleave_rows(sch, b, par)
        else:
            _vectorize_spatial_inner(sch, b, par, lanes)


def _vectorize_row_partials(sch: Any, rf: Any, par: Any) -> None:
    """The partials block of a split row reduction (rfactor puts the piece's loop first: piece,
    rows, pieces): rows, then pieces, then the piece innermost and vectorised, so each row's
    partials are one contiguous vector."""
    loops = _below(sch, rf, par)
    if len(loops) == 3:
        piece, rows, ko = loops
        sch.reorder(rows, ko, piece)
    elif len(loops) == 2:
        piece, ko = loops
        sch.reorder(ko, piece)
    else:
        raise TemplateError("a row reduction's partials are not piece, rows, pieces")
    sch.vectorize(piece)
    init = sch.decompose_reduction(rf, ko)
    sch.vectorize(sch.get_loops(init)[-1])


def _interleave_rows(sch: Any, block: Any, par: Any) -> None:
    """A row reduction of the block (the softmax's maximum or sum) with its rows innermost: one
    scalar chain per row, independent, so they pipeline instead of waiting on each other."""
    loops = _below(sch, block, par)
    if len(loops) >= 2:
        sch.reorder(loops[-1], loops[-2])
        if int(sch.get(loops[-2]).extent) <= MAX_UNROLLED_ROWS:
            sch.unroll(loops[-2])
