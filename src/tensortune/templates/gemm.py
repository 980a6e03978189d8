"""GEMM template for matmul, dense and batch_matmul on CPU.

Structure (knob names as AutoTVM's x86 dense template): the output is tiled
``tile_y`` = [yo, ym, yi] over rows and ``tile_x`` = [xo, xm, xi] over columns; ``yi x xi`` is
the register tile (rows unrolled, columns vectorised), accumulated over the whole reduction
(split ``tile_k`` = [ko, ki]) in a cache-write buffer before it is stored once. With
``pack_b`` the block of B used by a column tile is copied into a contiguous
``[xm, K, xi]`` buffer inside the parallel loop (the task's inputs stay as given).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from .base import (Template, anchored_schedule, annotate_unroll, fuse_epilogue, largest_divisor_le,
                   largest_multiple_divisor, output_stage, pick_entity, row_split_policy, tail_row_tiles, unroll_knobs,
                   vector_lanes, vectorize_own_loop)

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: Register budget: yi * ceil(xi / lanes) accumulators at most.
MAX_ACCUMULATORS = 28
#: Rows of the default register tile; up to twice that where no divisor of the rows reaches it
#: (Swin's 49-row windows: 7 x 2 vectors, 27% faster than 1 x 2). 16 rows x 1 vector measured slower.
DEFAULT_ROWS = 4
#: Accumulators of the default register tile at most.
DEFAULT_ACCUMULATORS = 16


def _packed_b_layout(pat: Any, bx: int) -> Any:
    """Index map of B's packed copy: ``[..., K, N]`` or ``[..., N, K]`` to ``[..., N/bx, K, bx]``."""
    nk = pat.b_layout == "nk"
    lead = pat.b_ndim - 2

    def index_map(*idx: Any) -> tuple:
        kk, n = (idx[-1], idx[-2]) if nk else (idx[-2], idx[-1])
        return (*idx[:lead], n // bx, kk, n % bx)

    from tvm.tirx import IndexMap

    return IndexMap.from_func(index_map, ndim=pat.b_ndim, index_dtype=pat.index_dtype)


class GemmTemplate(Template):
    """C = A x B with an optional batch axis; B as [K, N] (matmul) or [N, K] (dense)."""

    name = "gemm"
    parallel_splits = ("tile_x", "tile_y")

    @staticmethod
    def column_policy(N: int, lanes: int) -> str:
        """Exact factors when the vector lanes divide the columns, else ``any``: the columns are
        padded to the tile (attention's 197 x 197 scores would get 1-column tiles, Whisper's
        1500 x 1500 ones 60-column tiles of 3.75 vectors)."""
        return "factors" if N % lanes == 0 else "any"

    def space(self, task: Task) -> ConfigSpace:
        M, N, K = task.args["M"], task.args["N"], task.args["K"]
        lanes = vector_lanes(task)
        s = ConfigSpace()
        s.define_split("tile_y", M, 3, policy=row_split_policy(M), max_innermost=16)
        s.define_split("tile_x", N, 3, policy=self.column_policy(N, lanes), max_innermost=8 * lanes)
        s.define_split("tile_k", K, 2, max_innermost=64)
        # columns no tile divides are padded in the packed copy: packing is then not a choice
        s.define_choice("pack_b", [1, 0] if self.column_policy(N, lanes) == "factors" else [1])
        s.define_unroll()

        def registers(c: Config) -> bool:
            return c["tile_y"][2] * -(-c["tile_x"][2] // lanes) <= MAX_ACCUMULATORS

        s.add_constraint("registers", registers)
        if N % lanes == 0:
            s.add_constraint("vector_lanes", lambda c: c["tile_x"][2] % lanes == 0)
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        M, N, K = task.args["M"], task.args["N"], task.args["K"]
        lanes = vector_lanes(task)
        if self.column_policy(N, lanes) == "factors":
            cols = largest_multiple_divisor(N, lanes, 4 * lanes)
        else:  # padded columns: two vectors (one broadcast of A feeds two FMAs) unless they pad more
            padded = [-(-N // c) * c for c in (lanes, 2 * lanes)]
            cols = 2 * lanes if padded[1] * 10 <= padded[0] * 11 else lanes
        cols = min(cols, N)  # fewer columns than a vector: one tile of all of them
        rows = max(h for h in tail_row_tiles(M) if h <= DEFAULT_ROWS)
        if rows < DEFAULT_ROWS and row_split_policy(M) == "factors":  # 49 rows: 7, not 1
            rows = max(h for h in tail_row_tiles(M) if h <= 2 * DEFAULT_ROWS and h * -(-cols // lanes) <= DEFAULT_ACCUMULATORS)
        return {
            "tile_y": pick_entity(space, "tile_y", lambda e: (e[2] == rows, e[1] == 1)),
            "tile_x": pick_entity(space, "tile_x", lambda e: (e[2] == cols, e[1] == 1)),
            "tile_k": pick_entity(space, "tile_k", lambda e: (e[1] == largest_divisor_le(K, 4),)),
            "pack_b": 1,
            **unroll_knobs(64),
        }

    def schedule(self, task: Task, config: Config) -> Any:
        pat = task.pattern
        sch, block = anchored_schedule(task)
        col_tile = config["tile_x"][1] * config["tile_x"][2]
        b_pad = _pad_columns(sch, block, col_tile) if task.args["N"] % col_tile else None
        loops = sch.get_loops(block)
        batch, (i, j, k) = loops[:-3], loops[-3:]
        yo, ym, yi = sch.split(i, [None, *config["tile_y"][1:]])  # a guarded tail when the rows do not divide
        xo, xm, xi = sch.split(j, [None, *config["tile_x"][1:]])
        ko, ki = sch.split(k, list(config["tile_k"]))
        sch.reorder(*batch, xo, yo, ym, xm, ko, ki, yi, xi)
        if b_pad is not None:  # the unpadding store is the output stage, or is inlined into the epilogue
            unpad = sch.get_consumers(block)[0]
            if pat.epilogue:
                sch.compute_inline(unpad)
            acc = fuse_epilogue(sch, pat) if pat.epilogue else unpad
        else:
            acc = output_stage(sch, block, pat)
        sch.reverse_compute_at(acc, xm)
        pack = config["pack_b"] or b_pad is not None
        if pack:
            packed = b_pad if b_pad is not None else sch.cache_read(block, pat.weight_read, "global")
            sch.transform_layout(packed, ("write", 0), _packed_b_layout(pat, config["tile_x"][2]))
            sch.compute_at(packed, xo)
            if pat.b_layout == "kn":
                vectorize_own_loop(sch, packed, xo)
            par = sch.fuse(*batch, xo) if batch else xo
        else:
            par = sch.fuse(*batch, xo, yo)
        sch.parallel(par)
        sch.unroll(yi)
        sch.vectorize(xi)
        vectorize_own_loop(sch, acc, xm)
        # on the compute nest only: unrolling the packing nest too makes builds explode
        annotate_unroll(sch, ym if pack else par, config)
        sch.decompose_reduction(block, ko)
        return sch


def _pad_columns(sch: Any, block: Any, multiple: int) -> Any:
    """Pad the anchor's columns to a ``multiple`` (``pad_einsum``): B gets a zero-padded copy (returned;
    it becomes the packed copy) and the output a padded buffer stored back by a new consumer block, so
    the register tile needs no guard (a guarded vector column is scalarised)."""
    before = {sch.get(b).name_hint for b in sch.get_producers(block)}
    n_iters = len(sch.get(block).iter_vars)
    sch.pad_einsum(block, [1] * (n_iters - 2) + [multiple, 1])
    return next(b for b in sch.get_producers(block) if sch.get(b).name_hint not in before)
