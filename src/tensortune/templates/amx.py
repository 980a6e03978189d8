"""bf16 templates on AMX tiles (Intel Sapphire Rapids and later): the blocked conv2d and the
packed dense, their whole reduction in one tile kernel per output tile.

An AMX core multiplies a tile of ``rows x 2k`` bfloat16 activations by a tile of ``k`` pairs x 16
columns of weights into ``rows x 16`` float32 sums (``tdpbf16ps``), 16 times the work of one
``vdpbf16ps``. On a Xeon that has both, ``vdpbf16ps`` runs no faster than float32 FMAs (one port),
and OpenVINO as shipped computes on the tiles; so on such a target the bf16 conv and dense tasks
take these templates (:func:`counterpart`).

The operands are the bf16 templates' (:mod:`.bf16`): activations rounded to bfloat16 bits by the
function's own ``data_bf16`` stage, weights packed ``[..., k/2, 16, 2]`` at compile time, which is
the pair-interleaved layout a weight tile loads with a 64-byte row stride. One call of the tile
kernel (:data:`HELPER`, LLVM IR imported into the module) configures the tiles, loads the output
tile, walks the reduction (input channel blocks x kernel rows x kernel columns for a conv, chunks
of ``k`` for a dense), and stores the tile; the output stage (fused epilogue or copy) then runs on
it while it is hot. The first call in a process asks Linux for the tile state
(``arch_prctl(ARCH_REQ_XCOMP_PERM)``), so a library built here runs in any process.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from ..space.knobs import divisors
from .base import Template, TemplateError, anchored_schedule, vectorize_own_loop
from .bf16 import schedule_convert, schedule_pack
from .conv2d_nchwc import conv_out_hw, write_tile_and_parallelise

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: The LLVM features the tile kernels need, and the CPU flag that says Linux may grant them.
LLVM_FEATURES = ("amx-tile", "amx-bf16")
CPU_FLAG = "amx_bf16"
#: LLVM cpus whose model has AMX-BF16.
AMX_CPUS = ("sapphirerapids", "emeraldrapids", "graniterapids", "diamondrapids")
#: A tile holds 16 rows of 64 bytes: 16 float32 sums, 32 bfloat16 values, 16 pairs of reduction.
TILE_ROWS = 16
TILE_COLUMNS = 16
MAX_PAIRS = 16
#: The fewest rows an output tile may have for a task to take the AMX template (a tile of fewer
#: rows than this leaves most of each multiply idle; the ``vdpbf16ps`` template keeps the task).
MIN_ROWS = 4
HELPER = "tensortune_amx_tile"
#: The tile kernel: ``c`` (``rows x 16`` float32, row stride ``ldc`` bytes) plus the sum over
#: ``n0 x n1 x n2`` steps of an activation tile at ``a + i0*s0 + i1*s1 + i2*s2`` (``rows x 2
#: kpairs`` bfloat16, row stride ``lda``) times the weight tile at ``b + step*bstep`` (``kpairs``
#: rows of 16 pairs). Tiles 0, 1, 2 hold the sums, the activations and the weights.
_IR = """
@tensortune_amx_granted = linkonce_odr global i32 0
declare i64 @syscall(i64, ...)
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)
declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1 immarg)
define linkonce_odr void @tensortune_amx_tile(ptr %c, i64 %ldc, ptr %a, i64 %lda, i64 %s0, i64 %n0, i64 %s1, i64 %n1, i64 %s2, i64 %n2, ptr %b, i64 %bstep, i64 %rows, i64 %kpairs) noinline {
entry:
  %cfg = alloca [64 x i8], align 64
  %granted = load atomic i32, ptr @tensortune_amx_granted monotonic, align 4
  %ok = icmp ne i32 %granted, 0
  br i1 %ok, label %config, label %ask
ask:
  %r = call i64 (i64, ...) @syscall(i64 158, i64 4131, i64 18)
  store atomic i32 1, ptr @tensortune_amx_granted monotonic, align 4
  br label %config
config:
  call void @llvm.memset.p0.i64(ptr %cfg, i8 0, i64 64, i1 false)
  store i8 1, ptr %cfg
  %r8 = trunc i64 %rows to i8
  %k8 = trunc i64 %kpairs to i8
  %kb = shl i64 %kpairs, 2
  %kb16 = trunc i64 %kb to i16
  %c0 = getelementptr i8, ptr %cfg, i64 16
  store i16 64, ptr %c0
  %c1 = getelementptr i8, ptr %cfg, i64 18
  store i16 %kb16, ptr %c1
  %c2 = getelementptr i8, ptr %cfg, i64 20
  store i16 64, ptr %c2
  %w0 = getelementptr i8, ptr %cfg, i64 48
  store i8 %r8, ptr %w0
  %w1 = getelementptr i8, ptr %cfg, i64 49
  store i8 %r8, ptr %w1
  %w2 = getelementptr i8, ptr %cfg, i64 50
  store i8 %k8, ptr %w2
  call void @llvm.x86.ldtilecfg(ptr %cfg)
  call void @llvm.x86.tileloadd64(i8 0, ptr %c, i64 %ldc)
  br label %l0
l0:
  %i0 = phi i64 [ 0, %config ], [ %i0n, %l0end ]
  %bp0 = phi ptr [ %b, %config ], [ %bp1out, %l0end ]
  %o0 = mul i64 %i0, %s0
  br label %l1
l1:
  %i1 = phi i64 [ 0, %l0 ], [ %i1n, %l1end ]
  %bp1 = phi ptr [ %bp0, %l0 ], [ %bp2out, %l1end ]
  %o1m = mul i64 %i1, %s1
  %o1 = add i64 %o0, %o1m
  br label %l2
l2:
  %i2 = phi i64 [ 0, %l1 ], [ %i2n, %l2 ]
  %bp2 = phi ptr [ %bp1, %l1 ], [ %bpn, %l2 ]
  %o2m = mul i64 %i2, %s2
  %o2 = add i64 %o1, %o2m
  %ap = getelementptr i8, ptr %a, i64 %o2
  call void @llvm.x86.tileloadd64(i8 1, ptr %ap, i64 %lda)
  call void @llvm.x86.tileloadd64(i8 2, ptr %bp2, i64 64)
  call void @llvm.x86.tdpbf16ps(i8 0, i8 1, i8 2)
  %bpn = getelementptr i8, ptr %bp2, i64 %bstep
  %i2n = add i64 %i2, 1
  %d2 = icmp eq i64 %i2n, %n2
  br i1 %d2, label %l1end, label %l2
l1end:
  %bp2out = phi ptr [ %bpn, %l2 ]
  %i1n = add i64 %i1, 1
  %d1 = icmp eq i64 %i1n, %n1
  br i1 %d1, label %l0end, label %l1
l0end:
  %bp1out = phi ptr [ %bp2out, %l1end ]
  %i0n = add i64 %i0, 1
  %d0 = icmp eq i64 %i0n, %n0
  br i1 %d0, label %done, label %l0
done:
  call void @llvm.x86.tilestored64(i8 0, ptr %c, i64 %ldc)
  ret void
}
"""
_LOCK = threading.Lock()
_REGISTERED: set[str] = set()


def target_has_amx(target_json: dict[str, Any]) -> bool:
    """Whether code built for ``target_json`` may use AMX-BF16 (its cpu or its ``mattr``)."""
    if target_json.get("kind") != "llvm" or not str(target_json.get("mtriple", "x86_64")).startswith("x86_64"):
        return False
    mattr = target_json.get("mattr") or []
    mattr = set(mattr.split(",") if isinstance(mattr, str) else mattr)
    if any(f"-{f}" in mattr for f in LLVM_FEATURES):
        return False
    return all(f"+{f}" in mattr for f in LLVM_FEATURES) or str(target_json.get("mcpu", "")).startswith(AMX_CPUS)


def tile_rows(n: int) -> list[int]:
    """Output-tile heights for ``n`` rows: its divisors up to :data:`TILE_ROWS` of at least
    :data:`MIN_ROWS` (a tile's rows must divide the rows: a guarded tail cannot be a tile call)."""
    return [d for d in divisors(n) if MIN_ROWS <= d <= TILE_ROWS]


def conv_fits(args: dict[str, int]) -> bool:
    """Whether a ``conv2d_nchwc_bf16`` task has AMX's shapes: 16-channel output blocks, input
    blocks of whole pairs that fit a tile row, and an output width some tile height divides."""
    ib = args["IB"]
    return args["OB"] == TILE_COLUMNS and ib % 2 == 0 and ib // 2 <= MAX_PAIRS and bool(
        tile_rows(conv_out_hw_args(args)[1]))


def dense_fits(args: dict[str, int]) -> bool:
    """Whether a packed bf16 product has AMX's shapes: 16-column blocks, an even reduction, rows
    some tile height divides."""
    return args["NB"] == TILE_COLUMNS and args["K"] % 2 == 0 and bool(tile_rows(args["M"]))


def conv_out_hw_args(args: dict[str, int]) -> tuple[int, int]:
    """A plain conv's output height and width from its arguments."""
    h = (args["H"] + 2 * args["P"] - args["K"]) // args["S"] + 1
    w = (args["W"] + 2 * args["P"] - args["K"]) // args["S"] + 1
    return h, w


#: The AMX template that takes a bf16 template's tasks, and the test of a task's shape.
COUNTERPARTS = {"conv2d_nchwc_bf16": ("conv2d_nchwc_amx", conv_fits),
                "dense_pack_bf16": ("dense_pack_amx", dense_fits),
                "batch_matmul_bf16": ("batch_matmul_amx", dense_fits)}


def counterpart(name: str, args: dict[str, int], target_json: dict[str, Any]) -> str:
    """The template a task of template ``name`` takes on ``target_json``: its AMX counterpart
    where the target has AMX-BF16 and the task's shape fits a tile, else ``name`` itself."""
    if name not in COUNTERPARTS or not target_has_amx(target_json):
        return name
    amx, fits = COUNTERPARTS[name]
    return amx if fits(args) else name


def pair_step(pairs: int) -> int:
    """Reduction pairs one weight tile holds for a product of ``pairs`` pairs: the largest divisor
    of ``pairs`` up to :data:`MAX_PAIRS`."""
    return max(d for d in divisors(pairs) if d <= MAX_PAIRS)


def _tile_call(C: Any, ldc: Any, A: Any, lda: Any, steps: list[tuple[Any, int]], B: Any, bstep: int, rows: int,
               pairs: int) -> Any:
    """The tile kernel's call: three loops of ``(byte stride, count)`` (padded with unit loops)."""
    from tvm.script import tirx as T

    steps = steps + [(0, 1)] * (3 - len(steps))
    flat = [v for s, n in steps for v in (T.Cast("int64", s), T.int64(n))]
    return T.call_extern("void", HELPER, C.access_ptr("rw"), T.Cast("int64", ldc), A.access_ptr("r"),
                         T.Cast("int64", lda), *flat, B.access_ptr("r"), T.int64(bstep), T.int64(rows),
                         T.int64(pairs))


def _register_once(name: str, make: Any) -> str:
    from tvm.s_tir import TensorIntrin

    with _LOCK:
        if name not in _REGISTERED:
            desc, impl = make()
            TensorIntrin.register(name, desc, impl, override=True)
            _REGISTERED.add(name)
    return name


def conv_intrinsic(rows: int, icb: int, k: int, stride: int, ib: int) -> str:
    """The tensor intrinsic of one output tile of a plain bf16 conv: ``rows`` output columns x 16
    channels over ``icb`` input blocks of ``ib`` channels and a ``k x k`` window at ``stride``."""
    name = f"tensortune_amx_conv_r{rows}_c{icb}_k{k}_s{stride}_b{ib}"
    return _register_once(name, lambda: (_conv_func(rows, icb, k, stride, ib, False),
                                         _conv_func(rows, icb, k, stride, ib, True)))


def _conv_func(rows: int, icb: int, k: int, stride: int, ib: int, impl: bool) -> Any:
    """The description (or, ``impl``, the implementation) of :func:`conv_intrinsic`'s tile, written
    as TVMScript: a schedule's block binds no iterator to a loop of one step, so neither may the
    description, whose loops are the block's (unit ones included)."""
    from tvm.script import from_source
    from tvm.script import tirx as T

    pairs, span = ib // 2, (rows - 1) * stride + k
    loops = {"x": rows, "f": 16, "rc": icb, "ry": k, "rx": k, "rp": pairs, "re": 2}
    kinds = {"x": "S", "f": "S"}
    bound = [v for v, n in loops.items() if n > 1]
    iv = {v: (f"v{v}" if loops[v] > 1 else "0") for v in loops}
    a_index = f"{iv['rc']}, {iv['ry']}, {iv['x']} * {stride} + {iv['rx']}, {iv['rp']} * 2 + {iv['re']}"
    b_index = f"{iv['rc']}, {iv['ry']}, {iv['rx']}, {iv['rp']}, {iv['f']}, {iv['re']}"
    head = f"""
@T.prim_func(s_tir=True)
def func(a: T.handle, b: T.handle, c: T.handle) -> None:
    s0, s1, s2, sc = T.int32(), T.int32(), T.int32(), T.int32()
    A = T.match_buffer(a, ({icb}, {k}, {span}, {ib}), "uint16", offset_factor=1, strides=[s0, s1, s2, 1])
    B = T.match_buffer(b, ({icb}, {k}, {k}, {pairs}, 16, 2), "uint16", offset_factor=1)
    C = T.match_buffer(c, ({rows}, 16), "float32", offset_factor=1, strides=[sc, 1])
    with T.sblock("root"):
        T.reads(C[0:{rows}, 0:16], A[0:{icb}, 0:{k}, 0:{span}, 0:{ib}], B[0:{icb}, 0:{k}, 0:{k}, 0:{pairs}, 0:16, 0:2])
        T.writes(C[0:{rows}, 0:16])
"""
    if impl:
        body = f"""        with T.attr(0, "pragma_import_llvm", IR):
            T.evaluate(T.call_extern("void", "{HELPER}", C.access_ptr("rw"), T.Cast("int64", sc * 4),
                A.access_ptr("r"), T.Cast("int64", s2 * {2 * stride}), T.Cast("int64", s0 * 2), T.int64({icb}),
                T.Cast("int64", s1 * 2), T.int64({k}), T.Cast("int64", s2 * 2), T.int64({k}), B.access_ptr("r"),
                T.int64({pairs * 64}), T.int64({rows}), T.int64({pairs})))
"""
    else:
        body = f"""        for {", ".join(loops)} in T.grid({", ".join(str(n) for n in loops.values())}):
            with T.sblock("update"):
                {", ".join("v" + v for v in bound)} = T.axis.remap("{"".join(kinds.get(v, "R") for v in bound)}", [{", ".join(bound)}])
                C[{iv['x']}, {iv['f']}] = C[{iv['x']}, {iv['f']}] + T.reinterpret("float32", T.shift_left(T.Cast("uint32", A[{a_index}]), T.uint32(16))) * T.reinterpret("float32", T.shift_left(T.Cast("uint32", B[{b_index}]), T.uint32(16)))
"""
    return from_source(head + body, extra_vars={"T": T, "IR": _IR},
                       s_tir=True)


def dense_intrinsic(rows: int, pairs: int) -> str:
    """The tensor intrinsic of one output tile of a packed bf16 product: ``rows`` x 16 columns
    over ``pairs`` reduction pairs, walked :func:`pair_step` pairs a tile."""
    name = f"tensortune_amx_dense_r{rows}_k{pairs}"

    def make() -> tuple[Any, Any]:
        from tvm.script import tirx as T

        step = pair_step(pairs)

        @T.prim_func(s_tir=True)
        def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
            sa, sc = T.int32(), T.int32()
            A = T.match_buffer(a, (rows, 2 * pairs), "uint16", offset_factor=1, strides=[sa, 1])
            B = T.match_buffer(b, (pairs, 16, 2), "uint16", offset_factor=1)
            C = T.match_buffer(c, (rows, 16), "float32", offset_factor=1, strides=[sc, 1])
            with T.sblock("root"):
                T.reads(C[0:rows, 0:16], A[0:rows, 0:2 * pairs], B[0:pairs, 0:16, 0:2])
                T.writes(C[0:rows, 0:16])
                for i, j, kp, ke in T.grid(rows, 16, pairs, 2):
                    with T.sblock("update"):
                        vi, vj, vkp, vke = T.axis.remap("SSRR", [i, j, kp, ke])
                        C[vi, vj] = C[vi, vj] + T.reinterpret("float32", T.shift_left(T.Cast(
                            "uint32", A[vi, vkp * 2 + vke]), T.uint32(16))) * T.reinterpret(
                            "float32", T.shift_left(T.Cast("uint32", B[vkp, vj, vke]), T.uint32(16)))

        @T.prim_func(s_tir=True)
        def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
            sa, sc = T.int32(), T.int32()
            A = T.match_buffer(a, (rows, 2 * pairs), "uint16", offset_factor=1, strides=[sa, 1])
            B = T.match_buffer(b, (pairs, 16, 2), "uint16", offset_factor=1)
            C = T.match_buffer(c, (rows, 16), "float32", offset_factor=1, strides=[sc, 1])
            with T.sblock("root"):
                T.reads(C[0:rows, 0:16], A[0:rows, 0:2 * pairs], B[0:pairs, 0:16, 0:2])
                T.writes(C[0:rows, 0:16])
                with T.attr(0, "pragma_import_llvm", _IR):
                    T.evaluate(_tile_call(C, sc * 4, A, sa * 2, [(step * 4, pairs // step)], B, step * 64, rows,
                                          step))

        return desc, impl

    return _register_once(name, make)


class Conv2dNCHWcAmxTemplate(Template):
    """conv2d ``NCHW{IB}c`` x bf16 ``OIHW{IB/2}i16o2i`` -> ``NCHW16c`` float32 on AMX tiles: one
    tile call per ``rows`` output columns x 16 channels (the module doc)."""

    name = "conv2d_nchwc_amx"

    def space(self, task: Task) -> ConfigSpace:
        """``tile_x``: the tile's rows (output columns, a divisor of the width); ``rows_first``:
        the parallel loop over output rows then channel blocks (1) or the other way (0);
        ``blocks_inside``: channel blocks walked inside a parallel chunk (1) or each a chunk (0)."""
        s = ConfigSpace()
        s.define_choice("tile_x", tile_rows(conv_out_hw(task)[1]))
        s.define_choice("rows_first", [0, 1])
        s.define_choice("blocks_inside", [0, 1])
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        """The tallest tile; rows first where the input outweighs the weights (as the
        ``vdpbf16ps`` template, :func:`.bf16.rows_first`), channel blocks each a chunk."""
        from .bf16 import rows_first

        return {"tile_x": max(tile_rows(conv_out_hw(task)[1])), "rows_first": int(rows_first(task)),
                "blocks_inside": 0}

    def schedule(self, task: Task, config: Config) -> Any:
        a = task.args
        sch, block = anchored_schedule(task)
        n, f, y, x, fi, rc, ry, rx, rcp, rce = sch.get_loops(block)
        rows = int(config["tile_x"])
        xo, xi = sch.split(x, [None, rows])
        if config["blocks_inside"]:
            outer, inside = [n, y], [f]
        else:
            outer, inside = ([n, y, f] if config["rows_first"] else [n, f, y]), []
        sch.reorder(*outer, *inside, xo, xi, fi, rc, ry, rx, rcp, rce)
        write_tile_and_parallelise(sch, block, task.pattern, xo, outer)
        init = sch.decompose_reduction(block, xi)
        vectorize_own_loop(sch, init, xo)
        schedule_convert(sch, task.pattern.pad, a["IB"])
        sch.tensorize(xi, conv_intrinsic(rows, a["IC"] // a["IB"], a["K"], a["S"], a["IB"]))
        return sch


class DensePackAmxTemplate(Template):
    """C[..., M, N] = A[..., M, K] x W in bf16, W packed ``[N/16, K/2, 16, 2]``, on AMX tiles: one
    tile call per ``rows`` x 16 outputs over the whole reduction."""

    name = "dense_pack_amx"

    def space(self, task: Task) -> ConfigSpace:
        """``tile_y``: the tile's rows; ``col_chunks``: column blocks split into this many parallel
        chunks (each chunk walks its row tiles, then its column blocks inside them)."""
        a = task.args
        s = ConfigSpace()
        s.define_choice("tile_y", tile_rows(a["M"]))
        s.define_choice("col_chunks", divisors(a["N"] // TILE_COLUMNS))
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        """The tallest tile; columns split only where row tiles leave fewer than 8 parallel chunks."""
        a = task.args
        rows = max(tile_rows(a["M"]))
        chunks = a.get("B", 1) * a["M"] // rows
        cols = next((d for d in divisors(a["N"] // TILE_COLUMNS) if chunks * d >= 8), a["N"] // TILE_COLUMNS)
        return {"tile_y": rows, "col_chunks": cols}

    def tile(self, task: Task, config: Config) -> tuple[Any, Any]:
        """The schedule with the product tiled, its output stage per tile; the tile's row loop."""
        pat = task.pattern
        sch, block = anchored_schedule(task)
        *lead, i, j, kp, ke = sch.get_loops(block)
        rows = int(config["tile_y"])
        io, ii = sch.split(i, [None, rows])
        jo, ji = sch.split(j, [None, TILE_COLUMNS])
        jc, jb = sch.split(jo, [int(config["col_chunks"]), None])
        sch.reorder(*lead, jc, io, jb, ii, ji, kp, ke)
        write_tile_and_parallelise(sch, block, pat, jb, [*lead, jc, io])
        init = sch.decompose_reduction(block, ii)
        vectorize_own_loop(sch, init, jb)
        schedule_convert(sch, pat.pad, TILE_COLUMNS)
        return sch, ii

    def schedule(self, task: Task, config: Config) -> Any:
        sch, ii = self.tile(task, config)
        sch.tensorize(ii, dense_intrinsic(int(config["tile_y"]), task.args["K"] // 2))
        return sch


class BatchMatmulAmxTemplate(DensePackAmxTemplate):
    """C[b, M, N] = A[b, M, K] x B[b, K, N] in bf16, both operands computed at run time, on AMX
    tiles: ``B`` rounded and packed per call by its ``b_bf16`` stage, then the packed product's
    tiles over every batch."""

    name = "batch_matmul_amx"

    def schedule(self, task: Task, config: Config) -> Any:
        if task.pattern.pack is None:
            raise TemplateError("batch_matmul_amx without the stage that packs its right operand")
        sch, ii = self.tile(task, config)
        schedule_pack(sch, task.pattern.pack)
        sch.tensorize(ii, dense_intrinsic(int(config["tile_y"]), task.args["K"] // 2))
        return sch
