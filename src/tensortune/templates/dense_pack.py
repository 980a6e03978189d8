"""Template for ``dense_pack``: a model's matmul whose weight was packed at compile time.

The weight arrives as ``[N/NB, K, NB]`` (:func:`tensortune.task.ops.pack_weight`, done once
by the layout plan), so the kernel reads each column block contiguously along the reduction
and never copies the weight (the ``gemm`` template's ``pack_b`` repacks it on every call).
Structure as AutoTVM's x86 ``dense_pack``: rows tiled ``tile_y`` = [yo, ym, yi], column blocks
``tile_x`` = [xo, xm, xb] over ``N/NB``; the register tile is ``yi`` rows x ``xb * NB`` columns
(rows and blocks unrolled, the block vectorised), accumulated over the whole reduction
(``tile_k`` = [ko, ki]) before the output stage (fused epilogue or a cache write) stores it once.
The row and column tiles run in parallel.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from ..space.knobs import divisors
from .base import (Template, anchored_schedule, annotate_unroll, largest_divisor_le, output_stage, row_split_policy,
                   tail_row_tiles, unroll_knobs, vector_lanes, vectorize_own_loop)
from .conv2d_nchwc import max_accumulators, vector_registers

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


#: Bytes between two addresses of one L1 set (32 KiB / 8 ways on Zen, 48 KiB / 12 ways on Intel: 4 KiB).
L1_SET_SPAN = 4096
#: The fewest ways of an x86 L1 data cache seen (Zen 3 / 4).
L1_WAYS = 8


def aliased_rows(rows: int, row_bytes: int) -> int:
    """How many of ``rows`` rows ``row_bytes`` apart share one L1 set at each step of the
    reduction: rows a multiple of 4 KiB apart (K = 1024, 2048, 3072 floats) all do."""
    positions = L1_SET_SPAN // math.gcd(row_bytes, L1_SET_SPAN)
    return -(-rows // positions)


def default_register_tile(M: int, blocks: int, vec: int, acc: int, regs: int, row_bytes: int = 0) -> tuple[int, int]:
    """``(yi, xb)``: the untuned register tile of ``yi`` rows x ``xb`` column blocks.

    It must fit the ``regs`` vector registers (16, 32 with AVX-512): the ``yi * xb * vec``
    accumulators (at most ``acc``), the tile's weight vectors and two more (the broadcast row value
    and one the compiler keeps spare). Among those it takes the most accumulators, then the fewest
    loads per step (``yi + xb * vec``), then more rows. Rows are at most 16 (the space's limit),
    column blocks at most 4, 8 when there are fewer than 4 rows (a matrix-vector product needs
    independent accumulators to hide the FMA latency). Measured on Zen 3 (AVX2), 34 dense tasks
    with 384 rows, 200 configs each: the 6 x 2 tile this picks ran at a median 0.87 of each task's
    best config, the 4 x 3 tile (as many accumulators, but all 16 registers taken) at 0.28.
    The tile's rows of A (``row_bytes`` apart) must not outnumber the L1's ways in one set
    (:func:`aliased_rows`): rows 12 KiB apart (K = 3072) all fall in one set and would evict each
    other at every step of the reduction."""
    xmax = 4 if M >= 4 else 8
    cands = [(yi, xb) for yi in tail_row_tiles(M) for xb in divisors(blocks)
             if xb <= xmax and yi * xb * vec <= acc and (yi + 1) * xb * vec + 2 <= regs
             and (not row_bytes or aliased_rows(yi, row_bytes) <= L1_WAYS)]
    return max(cands, key=lambda t: (t[0] * t[1], -(t[0] + t[1] * vec), t[0]))


class DensePackTemplate(Template):
    """C[..., M, N] = A[..., M, K] x W, W packed ``[N/NB, K, NB]``."""

    name = "dense_pack"
    parallel_splits = ("tile_x", "tile_y")

    def space(self, task: Task) -> ConfigSpace:
        a = task.args
        M, K, blocks = a["M"], a["K"], a["N"] // a["NB"]
        vec = -(-a["NB"] // vector_lanes(task))
        acc = max_accumulators(task.target_json)
        s = ConfigSpace()
        s.define_split("tile_y", M, 3, policy=row_split_policy(M), max_innermost=16)
        s.define_split("tile_x", blocks, 3, max_innermost=max(1, acc // vec))
        s.define_split("tile_k", K, 2, max_innermost=16)
        s.define_unroll()
        s.add_constraint("registers", lambda c: c["tile_y"][2] * c["tile_x"][2] * vec <= acc)
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        a = task.args
        M, K, blocks = a["M"], a["K"], a["N"] // a["NB"]
        vec = -(-a["NB"] // vector_lanes(task))
        tj = task.target_json
        yi, xb = default_register_tile(M, blocks, vec, max_accumulators(tj), vector_registers(tj), row_bytes=4 * K)
        ki = largest_divisor_le(K, 4)
        return {"tile_y": (-(-M // yi), 1, yi), "tile_x": (blocks // xb, 1, xb), "tile_k": (K // ki, ki),
                **unroll_knobs(64)}

    def schedule(self, task: Task, config: Config) -> Any:
        sch, block = anchored_schedule(task)
        loops = sch.get_loops(block)
        tile_packed_product(sch, block, task.pattern, config, task.args["NB"], loops[:-3], *loops[-3:])
        return sch


def tile_packed_product(sch: Any, block: Any, pat: Any, config: Config, NB: int, lead: list[Any], i: Any, j: Any,
                        k: Any, *inner: Any) -> Any:
    """The packed product's register tile (the module doc): rows ``i`` and columns ``j`` tiled,
    reduction ``k`` split, the epilogue written per tile, the outer tiles parallel; the block's
    lane loop (``NB``, returned) vectorised, or, with ``inner`` loops (a bf16 product's pair,
    kept innermost), left to be tensorized."""
    jo, jn = sch.split(j, [None, NB])
    yo, ym, yi = sch.split(i, [None, *config["tile_y"][1:]])
    xo, xm, xb = sch.split(jo, list(config["tile_x"]))
    ko, ki = sch.split(k, list(config["tile_k"]))
    sch.reorder(*lead, xo, yo, ym, xm, ko, ki, yi, xb, jn, *inner)
    out = output_stage(sch, block, pat)
    sch.reverse_compute_at(out, xm)
    par = sch.fuse(*lead, xo, yo)
    sch.parallel(par)
    sch.unroll(yi)
    sch.unroll(xb)
    if not inner:
        sch.vectorize(jn)
    vectorize_own_loop(sch, out, xm)
    annotate_unroll(sch, par, config)
    sch.decompose_reduction(block, ko)
    return jn
