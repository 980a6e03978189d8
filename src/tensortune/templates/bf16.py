"""bf16 templates: the blocked conv2d and the packed dense on AVX512-BF16's ``vdpbf16ps``.

The innermost two loops of the anchor, ``OB`` (or ``NB``) output lanes x a pair of reduction
steps, become one ``vdpbf16ps`` (:func:`register_intrinsics`): the pair of bfloat16 activations
broadcast to every lane, the weight's ``lanes x 2`` values loaded as one vector, ``lanes`` float32
sums updated. TVM 0.27 legalizes its own ``bfloat16`` type to float32, so the operands travel
as ``int16`` vectors and a small LLVM IR helper (imported into the module with
``pragma_import_llvm``) bit-casts them to ``<32 x bfloat>`` for the intrinsic.

Around that instruction the register tiles are the float32 templates' (:mod:`.conv2d_nchwc`,
:mod:`.dense_pack`): columns x channel blocks (rows x column blocks) of accumulators, unrolled,
accumulated over the whole reduction, the epilogue written per tile. The columns of a conv's
tile divide the output width (a guarded tail tile cannot be tensorized). The activations' rounding
to bfloat16 (the ``data_bf16`` stage, padding included) runs first, in parallel over channel
blocks (rows), so the reduction reads half the bytes.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from ..space.knobs import divisors
from .base import Template, TemplateError, anchored_schedule, largest_divisor_le, target_lanes, unroll_knobs
from .conv2d_nchwc import (Conv2dNCHWcGeneralTemplate, Conv2dNCHWcTemplate, conv_out_hw, max_accumulators,
                           tile_blocked_conv, vector_registers)
from .dense_pack import default_register_tile as dense_register_tile, tile_packed_product

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: The tensor intrinsic of each vector width (float32 lanes): ``vdpbf16ps`` on zmm and ymm.
INTRINSICS = {16: "tensortune_dpbf16_16x2", 8: "tensortune_dpbf16_8x2"}
_HELPER = "tensortune_dpbf16_{lanes}"
_IR = """
define linkonce_odr <{lanes} x float> @tensortune_dpbf16_{lanes}(<{lanes} x float> %acc, <{pairs} x i16> %a, <{pairs} x i16> %b) alwaysinline {{
  %x = bitcast <{pairs} x i16> %a to <{pairs} x bfloat>
  %y = bitcast <{pairs} x i16> %b to <{pairs} x bfloat>
  %r = call <{lanes} x float> @llvm.x86.avx512bf16.dpbf16ps.{bits}(<{lanes} x float> %acc, <{pairs} x bfloat> %x, <{pairs} x bfloat> %y)
  ret <{lanes} x float> %r
}}
declare <{lanes} x float> @llvm.x86.avx512bf16.dpbf16ps.{bits}(<{lanes} x float>, <{pairs} x bfloat>, <{pairs} x bfloat>)
"""
#: The fewest parallel chunks a packed bf16 product's default splits its work into (whole rows
#: where they give as many; two threads, and room to balance them).
MIN_PARALLEL_CHUNKS = 8
#: A packed bf16 product reducing over at most this many elements (``K``) is "short": its untuned
#: register tile holds at most :data:`SHORT_ACCUMULATORS` accumulators, and its row tiles are
#: grouped into :data:`SHORT_CHUNKS` parallel chunks (see ``DensePackBf16Template.default_knobs``).
SHORT_REDUCTION = 128
SHORT_ACCUMULATORS = 14
SHORT_CHUNKS = 16
#: Channel blocks a register tile of a short-reduction convolution may hold.
SHORT_CONV_BLOCKS = (1, 2, 3)
_LOCK = threading.Lock()
_REGISTERED: set[int] = set()


def register_intrinsics() -> None:
    """Register the ``vdpbf16ps`` tensor intrinsics with TVM (once per process)."""
    with _LOCK:
        for lanes in INTRINSICS:
            if lanes not in _REGISTERED:
                _register(lanes)
                _REGISTERED.add(lanes)


def helper_ir(lanes: int) -> tuple[str, str]:
    """``(name, LLVM IR)`` of the helper that runs ``vdpbf16ps`` on ``lanes`` float32 sums and
    ``2 * lanes`` bfloat16 values given as ``int16`` vectors."""
    return _HELPER.format(lanes=lanes), _IR.format(lanes=lanes, pairs=2 * lanes, bits=32 * lanes)


def _register(lanes: int) -> None:
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    pairs = 2 * lanes
    helper, ir = helper_ir(lanes)

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((2,), "uint16", offset_factor=1), B: T.Buffer((lanes, 2), "uint16", offset_factor=1),
             C: T.Buffer((lanes,), "float32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:2], B[0:lanes, 0:2])
            T.writes(C[0:lanes])
            for i, k in T.grid(lanes, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.reinterpret("float32", T.shift_left(T.Cast("uint32", A[vk]), T.uint32(16))) \
                        * T.reinterpret("float32", T.shift_left(T.Cast("uint32", B[vi, vk]), T.uint32(16)))

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((2,), "uint16", offset_factor=1), B: T.Buffer((lanes, 2), "uint16", offset_factor=1),
             C: T.Buffer((lanes,), "float32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:2], B[0:lanes, 0:2])
            T.writes(C[0:lanes])
            a = T.reinterpret(T.broadcast(T.reinterpret(A.vload([0], "uint16x2"), dtype="int32"), lanes),
                              dtype=f"int16x{pairs}")
            b = T.reinterpret(B.vload([0, 0], f"uint16x{pairs}"), dtype=f"int16x{pairs}")
            with T.attr(0, "pragma_import_llvm", ir):
                C[T.ramp(T.int32(0), 1, lanes)] = T.call_pure_extern(
                    f"float32x{lanes}", helper, C[T.ramp(T.int32(0), 1, lanes)], a, b)

    TensorIntrin.register(INTRINSICS[lanes], desc, impl, override=True)


def intrinsic(lanes: int) -> str:
    """The registered intrinsic for ``lanes`` float32 sums (TemplateError for another width)."""
    if lanes not in INTRINSICS:
        raise TemplateError(f"no vdpbf16ps form for {lanes} lanes (8 or 16)")
    register_intrinsics()
    return INTRINSICS[lanes]


def _plain_copy(sch: Any, block: Any) -> bool:
    """Whether a stage only copies its input (bfloat16 bits already, nothing to pad)."""
    body = sch.get(block).body
    return type(body).__name__ == "BufferStore" and type(body.value).__name__ == "BufferLoad"


def schedule_convert(sch: Any, name: str, lanes: int) -> None:
    """The activations' rounding stage: its leading loops fused and parallel, its innermost
    loop vectorised (split to ``lanes`` when longer); inlined where it only copies bits (an
    activation its producer rounded, nothing to pad): the product reads them in place."""
    block = sch.get_sblock(name)
    if _plain_copy(sch, block):
        sch.compute_inline(block)
        return
    loops = sch.get_loops(block)
    inner = loops[-1]
    extent = int(sch.get(inner).extent)
    if extent > 64 and extent % lanes == 0:
        outer, inner = sch.split(inner, [None, lanes])
        loops = [*loops[:-1], outer]
    else:
        loops = loops[:-1]
    lead = loops[:2] if len(loops) >= 2 else loops
    if lead:
        sch.parallel(sch.fuse(*lead) if len(lead) > 1 else lead[0])
    sch.vectorize(inner)


def rows_first(task: Task) -> bool:
    """Whether an untuned bf16 conv runs its parallel loop over rows first: where its input (bf16
    bytes) is at least half its weights'. Each thread then reads half the larger operand and
    all of the smaller, and the rows its producer's thread wrote. Channel blocks first, each
    thread read the whole input, half of it written by the other core: ResNet-50's 1x1 convs
    on 56x56 and 28x28 inputs ran 1.2-1.4x faster rows first, its 3x3s on 14x14 and 7x7
    (weights 12-100x the input) 1.04-1.13x slower (znver4, in the model)."""
    a = task.args
    weights = a["OC"] * a["IC"] // a.get("G", 1) * _window(a)
    return 2 * a["IC"] * a["H"] * a["W"] >= weights


def short_conv(task: Task) -> bool:
    """Whether a bf16 conv's reduction (input channels of a group x kernel window) is at most
    :data:`SHORT_REDUCTION`, the limit of a short packed product."""
    a = task.args
    return a["IC"] // a.get("G", 1) * _window(a) <= SHORT_REDUCTION


def _window(args: dict[str, int]) -> int:
    """A conv task's kernel window: conv2d_nchwc_general_bf16's ``KH x KW``, or the square ``K``."""
    return args["KH"] * args["KW"] if "KH" in args else args["K"] ** 2


class Conv2dNCHWcBf16Template(Conv2dNCHWcTemplate):
    """conv2d ``NCHW{IB}c`` x bf16 ``OIHW{IB/2}i{OB}o2i`` -> ``NCHW{OB}c`` float32 on ``vdpbf16ps``:
    the f32 template's space (column tiles that divide the width) and register tile, the lane
    loop and the pair tensorized."""

    name = "conv2d_nchwc_bf16"
    exact_columns = True
    winograd = False

    def key_version(self, task: Task) -> int:
        """2: the space gained the ``rows_first`` knob (bf16 records of before keep their own key)."""
        return 2

    def space(self, task: Task) -> ConfigSpace:
        """The float32 template's, and ``rows_first``: the parallel loop over rows then channel
        blocks (1) or channel blocks then rows (0)."""
        s = super().space(task)
        s.define_choice("rows_first", [0, 1])
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        """The float32 template's, but a tile of 7 columns rather than 8 where both divide the
        width: on ``vdpbf16ps`` 8 x 2 vectors ran 1.02-1.7x slower than 7 x 2 on every 56- and
        112-wide convolution of ResNet-50 and MobileNetV2 (znver5; a 3x3 of 64 channels 1.7x).
        A short reduction takes a smaller tile (:meth:`register_budget`).
        Rows first where the input is at least half the weights' bytes (:func:`rows_first`)."""
        knobs = super().default_knobs(task, space)
        width = conv_out_hw(task)[1]
        if knobs["tile_x"][1] == 8 and width % 7 == 0:
            knobs["tile_x"] = (width // 7, 7)
        knobs["rows_first"] = int(rows_first(task))
        return knobs

    def register_budget(self, task: Task) -> tuple[int, tuple[int, ...]]:
        """The float32 template's, but a short reduction (:func:`short_conv`) takes at most
        :data:`SHORT_ACCUMULATORS` over up to three channel blocks: MobileNetV2's 32 -> 144
        channels at 56 x 56 ran 4 x 3 vectors 1.4x faster than the 7 x 1 that its nine blocks
        left (znver4)."""
        if short_conv(task):
            return SHORT_ACCUMULATORS, SHORT_CONV_BLOCKS
        return super().register_budget(task)

    def schedule(self, task: Task, config: Config) -> Any:
        sch, block = anchored_schedule(task)
        fi = tile_blocked_conv(sch, block, task.pattern, config, sch.get_loops(block),
                               rows_first=bool(config["rows_first"]))
        schedule_convert(sch, task.pattern.pad, task.args["IB"])
        sch.tensorize(fi, intrinsic(task.args["OB"]))
        return sch


class Conv2dNCHWcGeneralBf16Template(Conv2dNCHWcBf16Template):
    """The same for a blocked conv2d of any geometry (``conv2d_nchwc_general_bf16``: 1xk and kx1
    kernels, asymmetric padding, strides, dilation, groups of channel blocks)."""

    name = "conv2d_nchwc_general_bf16"
    in_blocks = staticmethod(Conv2dNCHWcGeneralTemplate.in_blocks)


class DensePackBf16Template(Template):
    """C[..., M, N] = A[..., M, K] x W in bf16, W packed ``[N/NB, K/2, NB, 2]``, on ``vdpbf16ps``."""

    name = "dense_pack_bf16"
    parallel_splits = ("tile_x", "tile_y")

    def space(self, task: Task) -> ConfigSpace:
        a = task.args
        M, K2, blocks = a["M"], a["K"] // 2, a["N"] // a["NB"]
        acc = max_accumulators(task.target_json)
        s = ConfigSpace()
        s.define_split("tile_y", M, 3, max_innermost=16)  # exact factors: a guarded tile cannot be tensorized
        s.define_split("tile_x", blocks, 3, max_innermost=acc)
        s.define_split("tile_k", K2, 2, max_innermost=16)
        s.define_unroll()
        s.add_constraint("registers", lambda c: c["tile_y"][2] * c["tile_x"][2] <= acc)
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        """The float32 register tile, with the column tiles inside the row tiles: each parallel
        chunk computes whole rows and writes them contiguously. With the columns outermost (the
        float32 order) each chunk wrote a strip a few vectors wide down every row, and the bf16
        products, twice as fast at their sums, waited on those stores: 1.1-3x slower on every
        product measured (znver4: ConvNeXt's and PVT's MLP layers, ViT's ``Q K^T``, BERT's
        layers). Columns are split only where whole rows leave fewer than
        :data:`MIN_PARALLEL_CHUNKS` chunks to share among the threads.

        A short reduction (``K`` at most :data:`SHORT_REDUCTION`) takes a smaller register tile and
        row tiles grouped into about :data:`SHORT_CHUNKS` chunks: its few steps per tile do not
        pay for filling and storing 24-28 accumulators. Against the tile above (znver4, alone):
        0.70x PVT's ``K = 32`` MLP layer, 0.81-0.97x attention products with ``K = 64``, 0.85x
        at ``K = 128``; at ``K`` 384-640 within 4%, and the smaller tile ran 3.7x slower at
        ``K = 768``. In the model, MobileViT's products of ``K`` 144-240 (a 4 x 3 tile instead of
        8 x 3) made it 1.47x slower, so the rule stops at 128 (PVTv2 0.94x, SegFormer 0.96x)."""
        a = task.args
        M, K2, blocks = a["M"], a["K"] // 2, a["N"] // a["NB"]
        tj = task.target_json
        short = a["K"] <= SHORT_REDUCTION
        acc = max_accumulators(tj)
        if short:
            acc = min(acc, SHORT_ACCUMULATORS)
        yi, xb = dense_register_tile(M, blocks, 1, acc, vector_registers(tj), row_bytes=2 * a["K"])
        yi = max(d for d in range(1, yi + 1) if M % d == 0)
        ki = largest_divisor_le(K2, 4)
        row_chunks, col_tiles = a.get("B", 1) * (M // yi), blocks // xb
        xo = next((d for d in divisors(col_tiles) if row_chunks * d >= MIN_PARALLEL_CHUNKS), col_tiles)
        ym = 1  # row tiles a parallel chunk
        if short and row_chunks * xo >= SHORT_CHUNKS:
            ym = max(d for d in divisors(M // yi) if row_chunks // d * xo >= SHORT_CHUNKS)
        return {"tile_y": (M // yi // ym, ym, yi), "tile_x": (xo, col_tiles // xo, xb), "tile_k": (K2 // ki, ki),
                **unroll_knobs(64)}

    def schedule(self, task: Task, config: Config) -> Any:
        pat = task.pattern
        NB = task.args["NB"]
        sch, block = anchored_schedule(task)
        loops = sch.get_loops(block)
        jn = tile_packed_product(sch, block, pat, config, NB, loops[:-4], *loops[-4:])
        schedule_convert(sch, pat.pad, target_lanes(task.target_json))
        sch.tensorize(jn, intrinsic(NB))
        return sch


def schedule_pack(sch: Any, name: str) -> None:
    """A run-time operand's rounding and packing stage (``[..., N/NB, K/2, NB, 2]``): its leading
    loops fused and parallel, the block of ``NB`` pairs vectorised."""
    block = sch.get_sblock(name)
    loops = sch.get_loops(block)
    sch.vectorize(sch.fuse(*loops[-2:]))
    sch.parallel(sch.fuse(*loops[:-3]))


class BatchMatmulBf16Template(DensePackBf16Template):
    """C[b, M, N] = A[b, M, K] x B[b, K, N] in bf16, both operands computed at run time (an
    attention's two products), on ``vdpbf16ps``: the packed dense's space and register tile over
    every batch, ``B`` rounded and packed per call by its ``b_bf16`` stage (reshapes,
    transposes and padding before the two rounding stages read in place)."""

    name = "batch_matmul_bf16"

    def schedule(self, task: Task, config: Config) -> Any:
        pat = task.pattern
        if pat.pack is None:
            raise TemplateError("batch_matmul_bf16 without the stage that packs its right operand")
        sch, block = anchored_schedule(task)
        loops = sch.get_loops(block)
        jn = tile_packed_product(sch, block, pat, config, task.args["NB"], loops[:-4], *loops[-4:])
        schedule_convert(sch, pat.pad, target_lanes(task.target_json))
        schedule_pack(sch, pat.pack)
        sch.tensorize(jn, intrinsic(task.args["NB"]))
        return sch
