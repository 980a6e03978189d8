"""Generic template for any PrimFunc: inline what can be inlined, then tile the output block.

The last block (the function's output) gets its spatial loops reordered outside its
reduction loops, the innermost spatial loop split ``tile_inner`` = [outer, inner] with the
inner part vectorised, the leading spatial loops fused and parallelised (``parallel_depth``
of them), and the unroll knobs on the parallel loop. Blocks that cannot be inlined (the
row reductions of softmax and layer norm, a pooling window's padding) are computed inside
the output's parallel loop where their region allows it without repeating work, else
parallelised on their own, so no stage of a model is left as naive serial loops. A row
reduction accumulates a vector of partial results (in exact pieces); a reduction over a blocked
layout's outer axes sums its contiguous lanes as vectors; a small per-channel value (a norm's
``rsqrt(var + eps) * gamma``) is computed per channel, not inlined into every point of the map
it scales; long rows are vectorised
in whole vectors, and where the vectors do not divide a row its guarded last piece is peeled
off (a guarded vector loop is scalarised into gathers and scatters). An output that reads an
input transposed (a permute, ``NCHW -> NCHW8c``) walks it in tiles of ``transpose_tile`` along
that input's contiguous axis, so each cache line loaded is used whole while it is in L1.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from .base import Template, TemplateError, annotate_unroll, schedule_of, vector_lanes, vectorize_own_loop

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


def _main_block(sch: Any) -> Any:
    blocks = sch.get_child_blocks(sch.get_sblock("root")) if _has_root(sch) else []
    if not blocks:
        raise TemplateError("the PrimFunc has no schedulable block")
    return blocks[-1]


def _has_root(sch: Any) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:
        return False


def _loop_kinds(sch: Any, block: Any) -> list[tuple[Any, int, bool]]:
    """(loop, extent, is_reduction) for each loop above ``block``."""
    br = sch.get(block)
    out = []
    loops = sch.get_loops(block)
    for lp, iv in zip(loops, br.iter_vars):
        out.append((lp, int(sch.get(lp).extent), int(iv.iter_type) == 2))
    return out


#: An elementwise block read by several consumers stays materialised when its expression is
#: longer than this (printed characters, buffer indices left out): inlining would compute e.g.
#: softmax's exponential once in the row sum (a scalar reduction loop) and again in the
#: normalisation.
SHARED_EXPR_CHARS = 400


def _is_reduction(sch: Any, block: Any) -> bool:
    return any(int(iv.iter_type) == 2 for iv in sch.get(block).iter_vars)


def _expr_chars(block: Any) -> int:
    """Printed length of a block's stored expression without the buffer indices (a reshape's index
    arithmetic is no work worth keeping a buffer for)."""
    from tvm import tirx

    body = block.body
    text = str(body.value if isinstance(body, tirx.BufferStore) else body)
    while True:
        stripped = _INDICES.sub("[]", text)
        if stripped == text:
            return len(text)
        text = stripped


_INDICES = re.compile(r"\[[^\[\]]+\]")


def _expensive_shared(sch: Any, block: Any) -> bool:
    return len(sch.get_consumers(block)) > 1 and not _is_reduction(sch, block) \
        and _expr_chars(sch.get(block)) > SHARED_EXPR_CHARS


#: A block with at most this share of the output's points is a per-channel (per-row) value
#: broadcast into the output: a norm's ``rsqrt(var + eps) * gamma``.
BROADCAST_SHARE = 1 / 8


def _broadcast_into_larger(sch: Any, block: Any, out_points: int) -> bool:
    """Whether ``block`` is a small elementwise stage (:data:`BROADCAST_SHARE` of the output's
    points at most) read by a larger one: inlined there, its expression (a square root, a division)
    would run once per point of the larger block instead of once per channel."""
    small = lambda b: _iterations(sch, sch.get_loops(b)) <= out_points * BROADCAST_SHARE  # noqa: E731
    return not _is_reduction(sch, block) and small(block) and any(not small(c) for c in sch.get_consumers(block))


def _inline_all(sch: Any) -> None:
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    out_points = _iterations(sch, sch.get_loops(blocks[-1]))
    for b in blocks[:-1]:
        if _expensive_shared(sch, b) or _broadcast_into_larger(sch, b, out_points):
            continue
        try:
            sch.compute_inline(b)
        except Exception:
            if not _sole_consumer(sch, b):
                continue
            try:
                sch.reverse_compute_inline(b)
            except Exception:
                pass


def _sole_consumer(sch: Any, block: Any) -> bool:
    """Whether ``block`` is the only consumer of each of its producers. TVM 0.27's
    ``reverse_compute_inline`` does not check it: inlining one of a split's outputs into the
    shared producer drops the buffer the other outputs still read, and lowering fails later
    (FlattenBuffer: "used before its definition")."""
    block_sref = sch.get(block)
    return all(len(cs) == 1 and sch.get(cs[0]).same_as(block_sref)
               for cs in (sch.get_consumers(p) for p in sch.get_producers(block)))


def _parallel_own(sch: Any, block: Any) -> None:
    """Fixed schedule of a stage that stays separate: its leading spatial loops fused and
    parallel, its innermost loop vectorised when it is spatial."""
    kinds = _loop_kinds(sch, block)
    lead = []
    for lp, _, red in kinds:
        if red:
            break
        lead.append(lp)
    if len(kinds) > len(lead) or len(lead) < 2:  # keep a spatial innermost loop to vectorise
        outer = lead[: min(len(lead), 3)]
    else:
        outer = lead[:-1][:3]
    if outer:
        try:
            sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
        except Exception:  # noqa: BLE001 - loops not in the block's iteration order (rfactor's partials): serial
            pass
    if _is_reduction(sch, block) and _lanes_inside(sch, block, sch.get_loops(block)[1 if outer else 0:]):
        return
    if not kinds[-1][2] and len(lead) > len(outer) and kinds[-1][1] <= 1024:
        try:
            sch.vectorize(sch.get_loops(block)[-1])
        except Exception:  # noqa: BLE001 - not vectorisable (a gather, a branch): leave it scalar
            pass


def _attach_producers(sch: Any, producers: list[Any], loop: Any | None, lanes: int) -> None:
    """Compute each remaining producer under ``loop`` (consumers first), else on its own; then
    vectorise the attached ones (``lanes`` wide): an elementwise block's innermost loop, a
    vector of partial results' (:func:`_split_reductions`) lane loop."""
    attached = []
    for b in reversed(producers):
        try:
            if loop is None:
                raise ValueError("no loop to attach to")
            if _recomputed_whole(sch, b, loop):
                raise ValueError("the region per iteration is the whole buffer")
            sch.compute_at(b, loop)
            attached.append(b)
        except Exception:  # noqa: BLE001 - region not computable per iteration
            _parallel_own(sch, b)
    for b in attached:
        if not _is_reduction(sch, b):
            _vectorize_spatial_inner(sch, b, loop, lanes)
        elif sch.get(b).name_hint.endswith("_rf"):
            _vectorize_partials(sch, b, loop)
        else:
            _lanes_inside(sch, b, _below(sch, b, loop))


#: The widest lane loop :func:`_lanes_inside` vectorises (four vectors of float32).
MAX_LANE_LOOP = 64


def _lanes_inside(sch: Any, block: Any, loops: list[Any]) -> bool:
    """A reduction over a blocked layout's outer axes (a per-channel mean over ``[C/16, H, W,
    16]``, a tiny 1x1 conv of a ``[1, C, 1, 1]`` vector): its last spatial loop among ``loops``
    (the contiguous lanes of its output and of every operand that reads it) moved inside the
    reduction loops and vectorised with its init, so the sums run as vectors over contiguous
    data instead of one strided scalar chain per lane. False where the form is another."""
    from tvm import tirx

    br = sch.get(block)
    realize = sch.get(loops[-1]).body if loops else None
    if type(realize).__name__ != "SBlockRealize" or not isinstance(br.body, tirx.BufferStore):
        return False
    bound = []  # (loop, extent, iteration variable it drives, is reduction)
    for lp in loops:
        var = sch.get(lp).loop_var
        drives = [(iv, val) for iv, val in zip(br.iter_vars, realize.iter_values) if _uses(val, var)]
        if len(drives) != 1:
            return False
        iv, val = drives[0]
        bound.append((lp, int(sch.get(lp).extent), iv.var if val.same_as(var) else None, int(iv.iter_type) == 2))
    reds = [lp for lp, _, _, r in bound if r]
    lanes = [(lp, e, v) for lp, e, v, r in bound if not r and e > 1]
    if not reds or not lanes or lanes[-1][2] is None or not 4 <= lanes[-1][1] <= MAX_LANE_LOOP:
        return False
    lane, _, lane_var = lanes[-1]
    store = br.body
    if not store.indices or not store.indices[-1].same_as(lane_var):
        return False
    for read in br.reads:
        dims = [r.min for r in read.region]
        uses = [i for i, e in enumerate(dims) if _uses(e, lane_var)]
        if uses and (uses != [len(dims) - 1] or not dims[-1].same_as(lane_var)):
            return False  # the lane is not the contiguous axis of this operand: gathers
    return _vector_lanes_last(sch, block, reds, lane)


def _uses(e: Any, var: Any) -> bool:
    from tvm import tirx

    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(e))


def _reads_along(sch: Any, block: Any, axis: int) -> bool:
    """Whether some input of ``block`` is read contiguously along its iteration variable ``axis``
    (the variable is in the input's last index)."""
    br = sch.get(block)
    var = br.iter_vars[axis].var
    return any(read.region and _uses(read.region[-1].min, var) for read in br.reads)


def _split_reductions(sch: Any, producers: list[Any], lanes: int) -> list[Any]:
    """Give each row reduction among ``producers`` (softmax's max and sum, a norm's mean: one
    reduction loop, innermost) a vector of partial results (``rfactor``, :func:`_vector_piece`
    wide) combined by a short final reduction, instead of one scalar chain; returns the
    producers with each split one replaced by its two blocks. Only exact pieces: ``compute_at``
    drops the guard of a partials block whose split runs past the row."""
    out = []
    for b in producers:
        kinds = _loop_kinds(sch, b)
        row = kinds[-1][1] if kinds and kinds[-1][2] and sum(r for *_, r in kinds) == 1 else 0
        if row and not _reads_along(sch, b, len(kinds) - 1):
            row = 0  # a sum across rows (a mean over tokens) reads whole rows already: partials would gather
        piece = _vector_piece(row, lanes, most=row // 2)  # two pieces at least: the partials add up
        if piece:
            try:
                _, ki = sch.split(kinds[-1][0], [None, piece])
                out.append(sch.rfactor(ki, len(sch.get(b).iter_vars) - 1))  # the partials contiguous
            except Exception:  # noqa: BLE001 - not a plain reduction (rfactor refuses it): stays scalar
                pass
        out.append(b)
    return out


def _vectorize_partials(sch: Any, rf: Any, anchor: Any) -> None:
    """The partial-result block of a split reduction: its init and update vectorised over the lanes."""
    loops = _below(sch, rf, anchor)
    if len(loops) < 2:
        return
    lane, ko = loops[-2:]  # compute_at leaves the partials' loop outside the reduction's
    _vector_lanes_last(sch, rf, [ko], lane)


def _vector_lanes_last(sch: Any, block: Any, reductions: list[Any], lane: Any) -> bool:
    """The reduction ``block``'s spatial loop ``lane`` moved inside its ``reductions`` loops and
    vectorised, its init too; False (the block left as it is: still correct, scalar) where TVM refuses."""
    try:
        sch.reorder(*reductions, lane)
        sch.vectorize(lane)  # before the init is split off: vectorize wants a whole reduction block
        init = sch.decompose_reduction(block, reductions[0])
        sch.vectorize(sch.get_loops(init)[-1])
    except Exception:  # noqa: BLE001 - left as it is: still correct, scalar
        return False
    return True


def _vector_piece(extent: int, lanes: int, most: int | None = None) -> int:
    """The width a loop of ``extent`` is vectorised in: the largest divisor from ``lanes`` to four
    vectors (and at most ``most``), else from 4 to ``lanes``; 0 when the loop is too short or no
    such divisor exists (a guarded vector loop is scalarised)."""
    if extent < 2 * lanes:
        return 0
    top = 4 * lanes if most is None else min(4 * lanes, most)
    for lo, hi in ((lanes, top), (4, min(lanes, top))):
        ds = [d for d in range(lo, hi + 1) if extent % d == 0]
        if ds:
            return max(ds)
    return 0


def _lane_piece(extent: int, lanes: int) -> int:
    """The width a long elementwise row is vectorised in: the largest multiple of ``lanes`` up to
    four vectors that divides ``extent``, else ``lanes`` (the guarded last piece peeled off): a
    piece of 60 with 16 lanes runs as three vectors and two part-vectors."""
    whole = [d for d in range(lanes, 4 * lanes + 1, lanes) if extent % d == 0]
    return max(whole) if whole else lanes


def _below(sch: Any, block: Any, anchor: Any) -> list[Any]:
    """The loops of ``block`` below its compute-at loop ``anchor``."""
    loops = sch.get_loops(block)
    ref = sch.get_sref(anchor)
    at = next(i for i, lp in enumerate(loops) if sch.get_sref(lp).same_as(ref))
    return loops[at + 1:]


def _recomputed_whole(sch: Any, block: Any, loop: Any) -> bool:
    """Whether ``compute_at(block, loop)`` would repeat work (tried on a copy of the schedule): an
    elementwise block computed whole in every iteration of ``loop`` (a region TVM cannot narrow,
    e.g. through a reshape's modulo), or a reduction computed more than
    :data:`MAX_REDUCTION_REPEAT` times over (a channel mean broadcast along the parallel channels)."""
    extent = int(sch.get(loop).extent)
    if extent <= 1:
        return False
    before = _iterations(sch, sch.get_loops(block))
    trial = sch.copy()
    trial.compute_at(block, loop)
    after = _iterations(trial, _below(trial, block, loop))
    if _is_reduction(sch, block):
        return after * extent > MAX_REDUCTION_REPEAT * before
    return after >= before


#: A reduction producer computed inside the output's loop may repeat at most this share of its work.
MAX_REDUCTION_REPEAT = 1.5
#: Iteration points (of the output block, reductions included) below which the untuned schedule
#: runs on one thread: waking the thread pool costs microseconds, more than such work (a recurrent
#: cell's gates over 256 values, a squeeze-excitation's few channels).
SERIAL_POINTS = 4096


def _iterations(sch: Any, loops: list[Any]) -> int:
    """The product of the extents of ``loops``."""
    n = 1
    for lp in loops:
        n *= int(sch.get(lp).extent)
    return n


def _vectorize_spatial_inner(sch: Any, block: Any, anchor: Any, lanes: int) -> None:
    """Vectorise an attached elementwise producer's own innermost loop, in pieces when it is long
    (a 1500-wide vector is legal but spills every register): exact pieces, else ``lanes`` wide
    with the guarded last piece peeled off."""
    loops = _below(sch, block, anchor)
    if not loops:
        return
    try:
        inner = loops[-1]
        extent = int(sch.get(inner).extent)
        piece = _lane_piece(extent, lanes) if extent > 4 * lanes else extent
        outer = None
        if piece < extent:
            outer, inner = sch.split(inner, [None, piece])
        sch.vectorize(inner)
        if outer is not None:
            _peel_guarded(sch, outer, piece, extent)  # no exact piece: lanes wide, the last one peeled
    except Exception:  # noqa: BLE001 - a gather or a branch: stays scalar
        pass


def _fresh_vars(mod: Any) -> Any:
    """``mod`` with every variable defined once, printed and parsed back when some block was
    peeled: TVM's ``loop_partition`` gives the copies of a block the same iteration variables,
    which its well-formedness check refuses."""
    import tvm

    text = mod.script(show_meta=True)  # the metadata: strings a block's attributes hold (LLVM IR)
    if "_partition" not in text:
        return mod
    return tvm.script.from_source(text)


def _peel_guarded(sch: Any, outer: Any, inner: int, extent: int) -> list[Any]:
    """Peel the last iteration of ``outer`` off when the split ``outer`` x ``inner`` runs past
    ``extent`` (a guarded block): the other iterations then vectorise without the guard (a
    guarded vector loop is scalarised), only the last piece runs guarded. Returns the two loops
    (``[outer]`` when nothing was peeled)."""
    n = int(sch.get(outer).extent)
    if n < 2 or n * inner <= extent:
        return [outer]
    try:
        return list(sch.loop_partition(outer, [n - 1]))  # pieces [0, n - 1) and the rest
    except Exception:  # noqa: BLE001 - an annotated loop: left guarded, still correct
        return [outer]


def _subexprs(e: Any) -> Any:
    """Every sub-expression of a TIR expression (operands, call arguments, buffer indices)."""
    yield e
    for name in ("a", "b", "value", "condition", "true_value", "false_value"):
        child = getattr(e, name, None)
        if child is not None and not isinstance(child, (int, float, str)):
            yield from _subexprs(child)
    for name in ("indices", "args"):
        for child in getattr(e, name, None) or []:
            yield from _subexprs(child)


def _inner_block_width(sch: Any, block: Any) -> int:
    """The width of the chunks the innermost loop's index is cut into (``i // 8``, ``i % 8``: a
    layout transform between NHWC and ``NCHW8c``): the gcd of every such divisor in the block's
    stores and loads, 0 where there is none. A vector that straddles two chunks is a gather or
    a scatter; one inside a chunk is a plain load and store."""
    import math

    from tvm import tirx

    br = sch.get(block)
    if not br.iter_vars or not isinstance(br.body, tirx.BufferStore):
        return 0
    inner = br.iter_vars[-1].var
    width = 0
    for e in [*br.body.indices, br.body.value]:
        for sub in _subexprs(e):
            if isinstance(sub, (tirx.FloorMod, tirx.FloorDiv)) and isinstance(sub.b, tirx.IntImm) \
                    and _uses(sub.a, inner):
                width = math.gcd(width, int(sub.b.value))
    return width


#: Tile widths along a transposed read's contiguous axis (:func:`_transposed_axis`), widest first:
#: 16 float32 are one 64-byte cache line, so a tile's loads use every line they touch while
#: the tile (16 lines read, its output written) stays in L1.
TRANSPOSE_TILES = (16, 8)


def _transposed_axis(sch: Any, block: Any) -> int | None:
    """The axis of ``block``'s loops along which some buffer it reads or writes is contiguous while
    the innermost loop walks that buffer with a stride: a transpose (``[HW, C] -> [C, H, W]``), a
    layout transform written as a scatter (``NCHW -> NCHW8c``). Its index among the block's
    iteration variables; None where every buffer is walked along its contiguous axis (an
    elementwise map, a layout change in contiguous chunks)."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    br = sch.get(block)
    ivs = br.iter_vars
    if len(ivs) < 2 or any(int(iv.iter_type) == 2 for iv in ivs) or not isinstance(br.body, tirx.BufferStore):
        return None
    last = ivs[-1].var
    accesses = [list(br.body.indices)]  # the store: a transform written as a scatter of its input's rows
    accesses += [list(e.indices) for e in _subexprs(br.body.value) if type(e).__name__ in ("BufferLoad", "TensorLoad")]
    bounds = Analyzer()  # a chain of reshapes leaves terms like ``c // 144`` that are 0 over c's range
    for iv in ivs:
        bounds.bind(iv.var, iv.dom)
    for dims in ([bounds.simplify(d) for d in a] for a in accesses):
        if len(dims) < 2 or _uses(dims[-1], last) or not any(_uses(d, last) for d in dims[:-1]):
            continue
        along = [i for i, iv in enumerate(ivs[:-1]) if _uses(dims[-1], iv.var)]  # the innermost is contiguous
        if along and int(sch.get(sch.get_loops(block)[along[-1]]).extent) > min(TRANSPOSE_TILES):
            return along[-1]
    return None


def _transpose_tiles(extent: int) -> list[int]:
    """The tile widths of :data:`TRANSPOSE_TILES` shorter than ``extent`` (0: untiled); a tile that
    does not divide it runs its last piece guarded (the guard is outside the vector loop)."""
    return [t for t in TRANSPOSE_TILES if extent > t] + [0]


def _default_tile(tiles: list[int], lanes: int) -> int:
    """One vector wide where that tile exists (znver3, 8 lanes: a 96 x 3136 transpose at 34 GB/s
    in tiles of 8 or 16, 15 GB/s untiled; an NCHW -> NCHW8c scatter 39 GB/s in 8, 33 in 16)."""
    return lanes if lanes in tiles else tiles[0]


#: The most loop steps the generic template unrolls with 16-lane (AVX-512) vectors (a config of
#: more unrolls this many): TVM 0.27's LLVM x86 back end ran for over two minutes on a 40 x 96
#: softmax unrolled 512 steps for znver4 or skylake-avx512 (under a second at 64; 5 s for AVX2).
MAX_WIDE_UNROLL = 64


class GenericTemplate(Template):
    """A space for PrimFuncs no op template knows."""

    name = "generic"
    version = 6

    @staticmethod
    def _inlined(task: Task) -> tuple[Any, Any]:
        """The task's schedule with its inlinable stages inlined, and its output block."""
        sch = schedule_of(task)
        _inline_all(sch)
        return sch, _main_block(sch)

    @staticmethod
    def _shape(sch: Any, block: Any) -> list[tuple[int, bool]]:
        if len(sch.get_loops(block)) != len(sch.get(block).iter_vars):
            raise TemplateError("the output block's loops do not match its iteration variables")
        return [(e, r) for _, e, r in _loop_kinds(sch, block)]

    def space(self, task: Task) -> ConfigSpace:
        sch, block = self._inlined(task)  # once: the loop shape and the transposed axis read it
        shape = self._shape(sch, block)
        spatial = [e for e, r in shape if not r]
        s = ConfigSpace()
        inner = spatial[-1] if spatial else 1
        # powers of two: a guarded last piece is peeled off (_peel_guarded), the others vectorise whole
        s.define_split("tile_inner", inner, 2, policy="power2", max_innermost=64)
        s.define_choice("parallel_depth", list(range(0, min(len(spatial) - 1, 3) + 1)) if spatial else [0])
        s.define_choice("transpose_tile", self._transpose_choices(sch, block))
        s.define_unroll()
        return s

    @staticmethod
    def _transpose_choices(sch: Any, block: Any) -> list[int]:
        """Tile widths along a transposed read's contiguous axis; ``[0]`` where nothing is transposed."""
        axis = _transposed_axis(sch, block)
        if axis is None:
            return [0]
        return _transpose_tiles(int(sch.get(sch.get_loops(block)[axis]).extent))

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        knob = space.knob("tile_inner")
        depths = space.knob("parallel_depth").entities
        inner = max(knob.entities, key=lambda e: (e[1] <= 16, e[1]))
        sch, block = self._inlined(task)
        width = _inner_block_width(sch, block)
        fits = [e for e in knob.entities if width and vector_lanes(task) <= e[1] <= width and width % e[1] == 0]
        if fits and inner[1] > width:  # whole vectors inside the chunks of a blocked layout
            inner = max(fits, key=lambda e: e[1])
        points = _iterations(sch, sch.get_loops(block))
        return {
            "tile_inner": inner,
            "parallel_depth": 0 if points < SERIAL_POINTS else max(depths),
            "transpose_tile": _default_tile(space.knob("transpose_tile").entities, vector_lanes(task)),
            "auto_unroll_max_step": 16,
            "unroll_explicit": 1,
        }

    def apply(self, task: Task, config: Config) -> Any:
        return _fresh_vars(self.schedule(task, config).mod)  # the copies a peeled loop made, renamed

    def schedule(self, task: Task, config: Config) -> Any:
        lanes = vector_lanes(task)
        sch = schedule_of(task)
        _inline_all(sch)
        block = _main_block(sch)
        producers = list(sch.get_child_blocks(sch.get_sblock("root")))[:-1]
        kinds = _loop_kinds(sch, block)
        spatial = [lp for lp, _, r in kinds if not r]
        reduce = [lp for lp, _, r in kinds if r]
        if spatial and config["parallel_depth"]:  # partial results only where they go under a parallel loop
            producers = _split_reductions(sch, producers, lanes)
        if not spatial:
            _attach_producers(sch, producers, None, lanes)
            return sch
        outer_sp, last = spatial[:-1], spatial[-1]
        tile, axis = config["transpose_tile"], _transposed_axis(sch, block)
        lo, li = sch.split(last, list(config["tile_inner"]))
        if tile and axis is not None:  # the transposed input read in tiles that stay in L1
            ko, ki = sch.split(outer_sp[axis], [None, tile])
            outer_sp = [ko if i == axis else lp for i, lp in enumerate(outer_sp)]
            sch.reorder(*outer_sp, lo, ki, li)
        else:
            sch.reorder(*outer_sp, lo, *reduce, li)
        depth = config["parallel_depth"]
        if reduce:
            acc = sch.cache_write(block, 0, "global")
            sch.reverse_compute_at(acc, lo)
            vectorize_own_loop(sch, acc, lo)
        sch.vectorize(li)
        outer = outer_sp + [lo]
        par_loops = outer[:depth] if depth else []
        big = _iterations(sch, sch.get_loops(block)) >= SERIAL_POINTS  # worth waking the pool for
        while big and par_loops and len(par_loops) < len(outer) and _iterations(sch, par_loops) == 1:
            par_loops = outer[:len(par_loops) + 1]  # unit loops only (a per-channel sum over H, W): one more
        top = sch.fuse(*par_loops) if len(par_loops) > 1 else (par_loops[0] if par_loops else sch.get_loops(block)[0])
        if par_loops and _iterations(sch, [top]) > 1:  # a parallel loop of one: only the pool's cost
            sch.parallel(top)
        annotate_unroll(sch, top, config, MAX_WIDE_UNROLL if lanes >= 16 else None)
        _attach_producers(sch, producers, top if par_loops else None, lanes)
        if reduce:  # last: vectorize/parallel need the block whole
            sch.decompose_reduction(block, reduce[0])
        elif lo not in par_loops:
            _peel_guarded(sch, lo, config["tile_inner"][1], kinds[-1][1])
        return sch

