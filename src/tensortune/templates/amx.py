"""bf16 templates on AMX tiles (Intel Sapphire Rapids and later): the blocked convolutions, the
packed products and the fused attention's two products, each output block's whole reduction in
one tile-kernel call.

An AMX core multiplies a tile of ``rows x 2k`` bfloat16 activations by a tile of ``k`` pairs x 16
columns of weights into ``rows x 16`` float32 sums (``tdpbf16ps``), 16 times the work of one
``vdpbf16ps``. On a Xeon that has both, ``vdpbf16ps`` runs no faster than float32 FMAs (one port),
and OpenVINO as shipped computes on the tiles; so on such a target the bf16 tasks take these
templates (:func:`counterpart`).

The operands are the bf16 templates' (:mod:`.bf16`): activations rounded to bfloat16 bits by the
function's own ``data_bf16`` stage, weights packed ``[..., k/2, OB, 2]`` at compile time, which is
the pair-interleaved layout a weight tile loads with a row stride of ``4 OB`` bytes. A bf16 model
on AMX takes 32-channel blocks (:data:`AMX_BLOCK`): an input block fills a tile row, so that
every ``tdpbf16ps`` sums 32 channels, and an output block is two column tiles. One call of a tile
kernel (:func:`helper_ir`, LLVM IR imported into the module) configures the tiles, zeroes up to
2 x 2 tiles of sums, walks the reduction (input channel blocks x kernel rows x kernel columns for
a conv, chunks of ``k`` for a product), and stores them; the output stage (fused epilogue or copy)
then runs on the block while it is hot. A conv's two row tiles may lie in two output rows at the
same columns (``tiles_across``), each weight tile then loaded once for both. The first call in a process asks Linux for the tile
state (``arch_prctl(ARCH_REQ_XCOMP_PERM)``), so a library built here runs in any process.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, NamedTuple

from ..space import Config, ConfigSpace
from ..space.knobs import divisors
from ..precision import AMX_BLOCK, ATTENTION_LANES, SCORES_COLUMNS
from .attention import parallel_row_blocks, row_stages
from .attention_bf16 import AttentionBf16Template
from .base import Template, TemplateError, anchored_schedule, schedule_of
from .bf16 import schedule_convert, schedule_pack
from .generic import _below, _vectorize_spatial_inner
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
#: Tiles of sums a kernel may keep: row tiles x column tiles (two by two uses all eight tiles:
#: four of sums, two of activations, two of weights).
MAX_ROW_TILES = 2
MAX_COL_TILES = 2


#: What every tile kernel's IR declares: the flag of the tile permission, the instructions.
_DECLARATIONS = """
@tensortune_amx_granted = linkonce_odr global i32 0
declare i64 @syscall(i64, ...)
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tilezero(i8 immarg)
declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)
declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1 immarg)"""
#: A tile kernel's first blocks: its tile configuration's room (``%cfg``), and on the process's
#: first call Linux asked for the tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)``).
_GRANT = """entry:
  %cfg = alloca [64 x i8], align 64
  %granted = load atomic i32, ptr @tensortune_amx_granted monotonic, align 4
  %ok = icmp ne i32 %granted, 0
  br i1 %ok, label %config, label %ask
ask:
  %r = call i64 (i64, ...) @syscall(i64 158, i64 4131, i64 18)
  store atomic i32 1, ptr @tensortune_amx_granted monotonic, align 4
  br label %config
config:"""


def helper_name(mt: int, nt: int) -> str:
    """The tile kernel keeping ``mt`` row tiles x ``nt`` column tiles of sums."""
    return f"tensortune_amx_{mt}x{nt}"


def helper_ir(mt: int, nt: int) -> str:
    """LLVM IR of :func:`helper_name`: ``mt x nt`` tiles of ``rows x 16`` float32 sums stored at
    ``c + i*cm + j*cn`` (row stride ``ldc`` bytes), each the sum, over ``n0 x n1 x n2`` reduction
    steps, of the activation tiles at ``a + i*am + i0*s0 + i1*s1 + i2*s2`` (``rows x 2 kpairs`` bfloat16, row
    stride ``lda``) times the weight tiles at ``b + j*bn + step*bstep`` (``kpairs`` rows of 16
    pairs, row stride ``ldb``). The sums start from zeroed tiles, not from memory (a tile load right after the
    stores that zeroed its rows waited for them: ``dense_pack_amx`` 1.09x faster, Xeon with AMX).
    Each activation tile is loaded once a step for ``nt`` products, each weight tile once for
    ``mt``. The first call in a process asks Linux for the tile state."""
    name = helper_name(mt, nt)
    nc = mt * nt
    a_id = [nc + i for i in range(mt)]
    b_id = [nc + mt + j for j in range(nt)]
    cfg = ["  call void @llvm.memset.p0.i64(ptr %cfg, i8 0, i64 64, i1 false)", "  store i8 1, ptr %cfg"]

    def tile(t: int, rows: str, colsb: str) -> None:
        cfg.append(f"  %cb{t} = getelementptr i8, ptr %cfg, i64 {16 + 2 * t}")
        cfg.append(f"  store i16 {colsb}, ptr %cb{t}")
        cfg.append(f"  %rw{t} = getelementptr i8, ptr %cfg, i64 {48 + t}")
        cfg.append(f"  store i8 {rows}, ptr %rw{t}")

    for t in range(nc):
        tile(t, "%r8", "64")
    for t in a_id:
        tile(t, "%r8", "%kb16")
    for t in b_id:
        tile(t, "%k8", "64")
    cptr, zero_c, store_c = [], [], []
    for i in range(mt):
        for j in range(nt):
            t = i * nt + j
            cptr.append(f"  %co{t} = add i64 %ci{i}, %cj{j}\n  %cp{t} = getelementptr i8, ptr %c, i64 %co{t}")
            zero_c.append(f"  call void @llvm.x86.tilezero(i8 {t})")
            store_c.append(f"  call void @llvm.x86.tilestored64(i8 {t}, ptr %cp{t}, i64 %ldc)")
    offs = [f"  %ci{i} = mul i64 %cm, {i}" for i in range(mt)] + [f"  %cj{j} = mul i64 %cn, {j}" for j in range(nt)]
    step = []
    for i in range(mt):
        step.append(f"  %am{i} = mul i64 %am, {i}\n  %ao{i} = add i64 %o2, %am{i}\n"
                    f"  %ap{i} = getelementptr i8, ptr %a, i64 %ao{i}\n"
                    f"  call void @llvm.x86.tileloadd64(i8 {a_id[i]}, ptr %ap{i}, i64 %lda)")
    for j in range(nt):
        step.append(f"  %bo{j} = mul i64 %bn, {j}\n  %bq{j} = getelementptr i8, ptr %bp2, i64 %bo{j}\n"
                    f"  call void @llvm.x86.tileloadd64(i8 {b_id[j]}, ptr %bq{j}, i64 %ldb)")
    for i in range(mt):
        for j in range(nt):
            step.append(f"  call void @llvm.x86.tdpbf16ps(i8 {i * nt + j}, i8 {a_id[i]}, i8 {b_id[j]})")
    nl = "\n"
    return f"""{_DECLARATIONS}
define linkonce_odr void @{name}(ptr %c, i64 %ldc, i64 %cm, i64 %cn, ptr %a, i64 %lda, i64 %am, i64 %s0, i64 %n0, i64 %s1, i64 %n1, i64 %s2, i64 %n2, ptr %b, i64 %bstep, i64 %bn, i64 %ldb, i64 %rows, i64 %kpairs) noinline {{
{_GRANT}
  %r8 = trunc i64 %rows to i8
  %k8 = trunc i64 %kpairs to i8
  %kb = shl i64 %kpairs, 2
  %kb16 = trunc i64 %kb to i16
{nl.join(cfg)}
  call void @llvm.x86.ldtilecfg(ptr %cfg)
{nl.join(offs)}
{nl.join(cptr)}
{nl.join(zero_c)}
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
{nl.join(step)}
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
{nl.join(store_c)}
  ret void
}}
"""


PEAK_HELPER = "tensortune_amx_peak"


def peak_ir() -> str:
    """LLVM IR of the AMX peak kernel ``tensortune_amx_peak(ptr out, i64 iters)``: four tiles of
    sums updated ``iters`` times from two activation and two weight tiles loaded once (four
    ``tdpbf16ps`` of 16 x 16 x 32 a step, nothing else in the loop), the sums stored to ``out``
    (4 KiB) so that the loop is not dead."""
    return f"""{_DECLARATIONS}
define linkonce_odr void @{PEAK_HELPER}(ptr %out, i64 %iters) noinline {{
{_GRANT}
  call void @llvm.memset.p0.i64(ptr %cfg, i8 0, i64 64, i1 false)
  store i8 1, ptr %cfg
{chr(10).join(f"  %c{t} = getelementptr i8, ptr %cfg, i64 {16 + 2 * t}{chr(10)}  store i16 64, ptr %c{t}{chr(10)}"
              f"  %w{t} = getelementptr i8, ptr %cfg, i64 {48 + t}{chr(10)}  store i8 16, ptr %w{t}" for t in range(8))}
  call void @llvm.x86.ldtilecfg(ptr %cfg)
{chr(10).join(f"  call void @llvm.x86.tilezero(i8 {t})" for t in range(8))}
  br label %loop
loop:
  %i = phi i64 [ 0, %config ], [ %n, %loop ]
  call void @llvm.x86.tdpbf16ps(i8 0, i8 4, i8 6)
  call void @llvm.x86.tdpbf16ps(i8 1, i8 4, i8 7)
  call void @llvm.x86.tdpbf16ps(i8 2, i8 5, i8 6)
  call void @llvm.x86.tdpbf16ps(i8 3, i8 5, i8 7)
  %n = add i64 %i, 1
  %d = icmp eq i64 %n, %iters
  br i1 %d, label %done, label %loop
done:
{chr(10).join(f"  %o{t} = getelementptr i8, ptr %out, i64 {1024 * t}{chr(10)}  call void @llvm.x86.tilestored64(i8 {t}, ptr %o{t}, i64 64)" for t in range(4))}
  ret void
}}
"""


_LOCK = threading.Lock()
_REGISTERED: set[str] = set()


def target_has_amx(target_json: dict[str, Any]) -> bool:
    """Whether code built for ``target_json`` may use AMX-BF16 (its cpu or its ``mattr``)."""
    from ..precision import target_has

    return target_has(target_json, LLVM_FEATURES, AMX_CPUS)


def tile_rows(n: int, least: int = MIN_ROWS) -> list[int]:
    """Output-tile heights for ``n`` rows: its divisors up to :data:`TILE_ROWS` of at least
    ``least`` (a tile's rows must divide the rows: a guarded tail cannot be a tile call)."""
    return [d for d in divisors(n) if least <= d <= TILE_ROWS]


def is_amx_template(name: str) -> bool:
    """Whether the template called ``name`` computes on AMX tiles."""
    return name in {amx for amx, _ in COUNTERPARTS.values()}


def conv_fits(args: dict[str, int]) -> bool:
    """Whether a bf16 conv task has AMX's shapes: output blocks of one or two tiles' columns (16,
    :data:`AMX_BLOCK`), input blocks of whole pairs that fit a tile row, and an output width some
    tile height divides (any height with two tiles a block: no other template takes those)."""
    ib, ob = args["IB"], args["OB"]
    rows = tile_rows(conv_out_hw_args(args)[1], least_rows(args))
    return ob in (TILE_COLUMNS, AMX_BLOCK) and ib % 2 == 0 and ib // 2 <= MAX_PAIRS and bool(rows)


def least_rows(args: dict[str, int]) -> int:
    """The lowest tile a conv's output block may take: :data:`MIN_ROWS`, or 1 with 32-channel
    blocks (no other template takes those)."""
    return 1 if args["OB"] == AMX_BLOCK else MIN_ROWS


def dense_fits(args: dict[str, int]) -> bool:
    """Whether a packed bf16 product has AMX's shapes: 16-column blocks, an even reduction, rows
    some tile height divides."""
    return args["NB"] == TILE_COLUMNS and args["K"] % 2 == 0 and bool(tile_rows(args["M"]))


def conv_out_hw_args(args: dict[str, int]) -> tuple[int, int]:
    """A plain or general conv's output height and width from its arguments."""
    from ..task.ops import conv_out, general_conv_out

    if "KH" in args:
        return general_conv_out(args)
    return conv_out(args["H"], args["K"], args["S"], args["P"]), conv_out(args["W"], args["K"], args["S"], args["P"])


#: The AMX template that takes a bf16 template's tasks, and the test of a task's shape.
COUNTERPARTS = {"conv2d_nchwc_bf16": ("conv2d_nchwc_amx", conv_fits),
                "conv2d_nchwc_general_bf16": ("conv2d_nchwc_general_amx", conv_fits),
                "dense_pack_bf16": ("dense_pack_amx", dense_fits),
                "batch_matmul_bf16": ("batch_matmul_amx", dense_fits),
                # a fused attention's shape is its function's; its template falls back by itself
                "attention_bf16": ("attention_amx", lambda args: True)}


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


def _register_once(name: str, make: Any) -> str:
    from tvm.s_tir import TensorIntrin

    with _LOCK:
        if name not in _REGISTERED:
            desc, impl = make()
            TensorIntrin.register(name, desc, impl, override=True)
            _REGISTERED.add(name)
    return name


def _intrinsic_funcs(buffers: str, loops: dict[str, int], spatial: str, index: tuple[str, str, str], call: str,
                     tiles: tuple[int, int], binding: str = "", index_dtype: str = "int32") -> tuple[Any, Any]:
    """The description and implementation of a tile intrinsic, written as TVMScript from text: a
    schedule's block binds no iterator to a loop of one step, so neither may the description,
    whose loops are the block's (unit ones included). The description is the whole reduction,
    its init included (the kernel zeroes its tiles of sums: no pass zeroes them in memory first).
    ``index`` holds the indices of ``C``, ``A`` and ``B`` in the product, naming an iterator
    ``v{loop}``, or ``0`` for a unit loop, through ``{loop}`` fields; ``call`` the arguments of the
    tile kernel of ``tiles`` (row tiles, column tiles); ``binding`` the block's iterators where
    they are not one per loop (``spatial`` names the spatial loops of the default, one per loop)."""
    from tvm.script import from_source
    from tvm.script import tirx as T

    bound = [v for v, n in loops.items() if n > 1]
    remap = f'{", ".join("v" + v for v in bound)} = T.axis.remap("{"".join("S" if v in spatial else "R" for v in bound)}", [{", ".join(bound)}])'
    iv = {v: (f"v{v}" if loops[v] > 1 else "0") for v in loops}
    head = f"""
@T.prim_func(s_tir=True)
def func(a: T.handle, b: T.handle, c: T.handle) -> None:
{buffers}
"""
    c, a, b = (i.format(**iv) for i in index)
    desc = f"""        for {", ".join(loops)} in T.grid({", ".join(_int(n, index_dtype) for n in loops.values())}):
            with T.sblock("update"):
                {binding or remap}
                T.reads(C[{c}], A[{a}], B[{b}])
                T.writes(C[{c}])
                with T.init():
                    C[{c}] = T.float32(0)
                C[{c}] = C[{c}] + {_BF16.format("A[" + a + "]")} * {_BF16.format("B[" + b + "]")}
"""
    impl = f"""        with T.attr(0, "pragma_import_llvm", IR):
            T.evaluate(T.call_extern("void", {call}))
"""
    env = {"T": T, "IR": helper_ir(*tiles)}
    return tuple(from_source(head + body, extra_vars=env, s_tir=True) for body in (desc, impl))  # type: ignore[return-value]


#: The float32 value of a bfloat16 operand held as its bits.
_BF16 = 'T.reinterpret("float32", T.shift_left(T.Cast("uint32", {}), T.uint32(16)))'


class Window(NamedTuple):
    """What a conv's tile kernel walks: input blocks of a group, kernel rows and columns, strides,
    dilations, channels an input block."""

    icb: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    ib: int

    @classmethod
    def of(cls, args: dict[str, int]) -> "Window":
        """The window of a plain (``K``, ``S``) or general (``KH`` ... ``G``) bf16 conv's args."""
        if "KH" in args:
            return cls(args["IC"] // args["G"] // args["IB"], args["KH"], args["KW"], args["SH"], args["SW"],
                       args["DH"], args["DW"], args["IB"])
        return cls(args["IC"] // args["IB"], args["K"], args["K"], args["S"], args["S"], 1, 1, args["IB"])

    @property
    def folded(self) -> bool:
        """Whether a kernel row's columns fold into one step: its ``kw x ib`` values dense (no
        dilation) and within a tile row (a stem's 7 x 4)."""
        return self.dw == 1 and self.kw > 1 and self.kw * self.ib <= 2 * MAX_PAIRS

    @property
    def steps(self) -> int:
        """Reduction steps of the tile kernel."""
        return self.icb * self.kh * (1 if self.folded else self.kw)


def conv_intrinsic(mt: int, nt: int, rows: int, w: Window, ob: int = TILE_COLUMNS, across: bool = False) -> str:
    """The tensor intrinsic of one output block of a bf16 conv: ``mt`` tiles of ``rows`` output
    columns (side by side in one output row, or, ``across``, two at the same columns of two
    output rows) x ``nt`` tiles of 16 channels (in ``nt`` blocks of ``ob`` = 16 channels, or the
    two halves of one block of ``ob`` = :data:`AMX_BLOCK`), over the window ``w``."""
    wide = ob == AMX_BLOCK
    if wide and nt != 2:
        raise TemplateError(f"a block of {ob} channels is two tiles, not {nt}")
    if across and mt != 2:
        raise TemplateError("tiles across output rows come in twos")
    name = f"tensortune_amx_conv_{mt}x{nt}_r{rows}_o{ob}{'_a' if across else ''}_" + "_".join(str(v) for v in w)
    pairs = w.ib // 2
    R = rows if across else mt * rows  # output columns a tile row of the block spans
    hspan = (w.sh if across else 0) + (w.kh - 1) * w.dh + 1
    span = (R - 1) * w.sw + (w.kw - 1) * w.dw + 1
    loops = {"yy": 2} if across else {}
    loops.update({"t": nt} if nt > 1 else {})
    loops.update({"x": R, "f": 16, "rc": w.icb, "ry": w.kh, "rx": w.kw, "rp": pairs, "re": 2})
    blocks = 1 if wide else nt  # output channel blocks the block spans
    spatial = [f"vt = T.axis.spatial({nt}, t)"] if nt > 1 and not wide else []  # the conv's order
    if across:
        spatial.append("vy = T.axis.spatial(2, yy)")
    if R > 1:
        spatial.append(f"vx = T.axis.spatial({R}, x)")
    spatial.append(f"vf = T.axis.spatial({ob}, t * 16 + f)" if wide else "vf = T.axis.spatial(16, f)")
    reduce = [v for v in ("rc", "ry", "rx", "rp", "re") if loops[v] > 1]
    binding = "\n                ".join(
        spatial + [f'{", ".join("v" + v for v in reduce)} = T.axis.remap("{"R" * len(reduce)}", [{", ".join(reduce)}])'])
    t = "vt" if nt > 1 and not wide else "0"
    y, x = ("vy" if across else "0"), ("vx" if R > 1 else "0")
    a_row = f"vy * {w.sh} + {{ry}} * {w.dh}" if across else f"{{ry}} * {w.dh}"
    index = (f"{t}, {y}, {x}, vf", f"{{rc}}, {a_row}, {x} * {w.sw} + {{rx}} * {w.dw}, {{rp}} * 2 + {{re}}",
             f"{t}, {{rc}}, {{ry}}, {{rx}}, {{rp}}, vf, {{re}}")
    c_shape = f"{blocks}, {2 if across else 1}, {R}, {ob}"
    b_shape = f"{blocks}, {w.icb}, {w.kh}, {w.kw}, {pairs}, {ob}, 2"
    region = lambda shape: ", ".join("0:" + d.strip() for d in shape.split(","))  # noqa: E731
    buffers = f"""    s0, s1, s2, sf, sy, sc = T.int32(), T.int32(), T.int32(), T.int32(), T.int32(), T.int32()
    A = T.match_buffer(a, ({w.icb}, {hspan}, {span}, {w.ib}), "uint16", offset_factor=1, strides=[s0, s1, s2, 1])
    B = T.match_buffer(b, ({b_shape}), "uint16", offset_factor=1)
    C = T.match_buffer(c, ({c_shape}), "float32", offset_factor=1, strides=[sf, sy, sc, 1])
    with T.sblock("root"):
        T.reads(A[0:{w.icb}, 0:{hspan}, 0:{span}, 0:{w.ib}], B[{region(b_shape)}])
        T.writes(C[{region(c_shape)}])"""
    cols, step_pairs = (1, w.kw * pairs) if w.folded else (w.kw, pairs)
    ldb = 4 * ob  # bytes a row of pairs takes in the packed weight: ob columns x 2 bf16
    col_c = "T.int64(64)" if wide else 'T.Cast("int64", sf * 4)'  # the next tile's sums
    col_b = 64 if wide else w.icb * w.kh * w.kw * pairs * 64  # the next tile's weights
    row_c = 'T.Cast("int64", sy * 4)' if across else f'T.Cast("int64", sc * {4 * rows})'  # the next row tile's
    row_a = f'T.Cast("int64", s1 * {2 * w.sh})' if across else f'T.Cast("int64", s2 * {2 * w.sw * rows})'
    call = (f'"{helper_name(mt, nt)}", C.access_ptr("rw"), T.Cast("int64", sc * 4), {row_c}, '
            f'{col_c}, A.access_ptr("r"), T.Cast("int64", s2 * {2 * w.sw}), '
            f'{row_a}, T.Cast("int64", s0 * 2), T.int64({w.icb}), '
            f'T.Cast("int64", s1 * {2 * w.dh}), T.int64({w.kh}), T.Cast("int64", s2 * {2 * w.dw}), T.int64({cols}), '
            f'B.access_ptr("r"), T.int64({step_pairs * ldb}), T.int64({col_b}), T.int64({ldb}), '
            f'T.int64({rows}), T.int64({step_pairs})')

    return _register_once(name, lambda: _intrinsic_funcs(buffers, loops, "", index, call, (mt, nt), binding))


def dense_intrinsic(mt: int, nt: int, rows: int, pairs: int, index_dtype: str = "int32") -> str:
    """The tensor intrinsic of one output block of a packed bf16 product: ``mt`` tiles of ``rows``
    rows x ``nt`` blocks of 16 columns, over ``pairs`` reduction pairs walked :func:`pair_step`
    pairs a tile; its loops of ``index_dtype`` (a fused attention's are ``int64``)."""
    name = f"tensortune_amx_dense_{mt}x{nt}_r{rows}_k{pairs}_{index_dtype}"
    step, R = pair_step(pairs), mt * rows
    loops = {"i": R, "t": nt, "f": 16, "kp": pairs, "ke": 2} if nt > 1 else {"i": R, "f": 16, "kp": pairs, "ke": 2}
    binding = ""
    if nt > 1:  # the block binds one column iterator over the column tiles and their lanes
        binding = ("vi = T.axis.spatial({R}, i)\n                vj = T.axis.spatial({C}, t * {n16} + f)\n"
                   "                vkp, vke = T.axis.remap(\"RR\", [kp, ke])").format(
            R=_int(R, index_dtype), C=_int(16 * nt, index_dtype), n16=_int(16, index_dtype))
        index = ("vi, vj", f"vi, vkp * {_int(2, index_dtype)} + vke",
                 f"vj // {_int(16, index_dtype)}, vkp, vj % {_int(16, index_dtype)}, vke")
    else:
        index = ("{i}, {f}", f"{{i}}, {{kp}} * {_int(2, index_dtype)} + {{ke}}", "0, {kp}, {f}, {ke}")
    buffers = f"""    sa, sc = T.{index_dtype}(), T.{index_dtype}()
    A = T.match_buffer(a, ({R}, {2 * pairs}), "uint16", offset_factor=1, strides=[sa, 1])
    B = T.match_buffer(b, ({nt}, {pairs}, 16, 2), "uint16", offset_factor=1)
    C = T.match_buffer(c, ({R}, {16 * nt}), "float32", offset_factor=1, strides=[sc, 1])
    with T.sblock("root"):
        T.reads(A[0:{R}, 0:{2 * pairs}], B[0:{nt}, 0:{pairs}, 0:16, 0:2])
        T.writes(C[0:{R}, 0:{16 * nt}])"""
    # addresses of the first elements, not access_ptr: in a fused attention the rounded
    # probabilities may share storage with the float32 scores, which access_ptr refuses
    call = (f'"{helper_name(mt, nt)}", T.address_of(C[0, 0]), T.Cast("int64", sc * 4), T.Cast("int64", sc * {4 * rows}), '
            f'T.int64(64), T.address_of(A[0, 0]), T.Cast("int64", sa * 2), T.Cast("int64", sa * {2 * rows}), '
            f'T.int64({step * 4}), T.int64({pairs // step}), T.int64(0), T.int64(1), T.int64(0), T.int64(1), '
            f'T.address_of(B[0, 0, 0, 0]), T.int64({step * 64}), T.int64({pairs * 64}), T.int64(64), T.int64({rows}), '
            f'T.int64({step})')

    return _register_once(name, lambda: _intrinsic_funcs(buffers, loops, "itf", index, call, (mt, nt), binding,
                                                         index_dtype))


def _int(n: int, index_dtype: str) -> str:
    """The TVMScript of the index constant ``n`` in ``index_dtype``."""
    return str(n) if index_dtype == "int32" else f"T.{index_dtype}({n})"


def _tile_knobs(s: ConfigSpace, rows: int, col_blocks: int, least: int = MIN_ROWS, height: int = 0) -> None:
    """The knobs of an output block: ``tile_rows`` (a tile's rows), ``row_tiles`` and
    ``col_tiles`` (tiles of sums a kernel keeps, 1 or 2 each: :data:`MAX_ROW_TILES`), the block's
    rows dividing ``rows`` and its columns ``col_blocks``."""
    s.define_choice("tile_rows", tile_rows(rows, least))
    s.define_choice("row_tiles", list(range(1, MAX_ROW_TILES + 1)))
    s.define_choice("col_tiles", [d for d in range(1, MAX_COL_TILES + 1) if col_blocks % d == 0])
    if not height:
        s.add_constraint("block_divides_rows", lambda c: rows % (c["tile_rows"] * c["row_tiles"]) == 0)
        return
    # a conv's output rows (``height``): two row tiles side by side, or one in each of two rows
    s.define_choice("tiles_across", [0, 1])
    s.add_constraint("block_divides_rows", lambda c: rows % (c["tile_rows"] * (1 if c["tiles_across"] else c["row_tiles"])) == 0)
    s.add_constraint("two_tiles_two_rows", lambda c: not c["tiles_across"] or (c["row_tiles"] == 2 and height % 2 == 0))


#: A packed product reducing over more than this many elements walks its row blocks inside its
#: column blocks by default (:meth:`DensePackAmxTemplate.default_knobs`).
LONG_REDUCTION = 1024
#: A block's reduction of at most this many steps takes two row tiles where the rows hold them.
SHORT_STEPS = 8


def _default_tiles(rows: int, col_blocks: int, steps: int, least: int = MIN_ROWS) -> dict[str, int]:
    """The tallest tile; two column tiles where the column blocks pair up; two row tiles as well
    where the reduction has at most :data:`SHORT_STEPS` steps (``steps``) and the rows hold two.
    Measured alone (Xeon with AMX, 2 threads): ResNet-50's stem (7 steps, its window's columns
    folded) and its 1x1 of 64 -> 256 channels (4 steps) ran 2 x 2 tiles 1.09x and 1.03x faster
    than one row tile; its 3x3 of 64 channels at 56 x 56 (36 steps) 1.4x slower."""
    r = max(tile_rows(rows, least))
    if steps <= SHORT_STEPS:  # the most rows two tiles can take (28 of 112, not 16)
        r = max((d for d in tile_rows(rows, least) if rows % (2 * d) == 0), default=r)
    mt = 2 if steps <= SHORT_STEPS and rows % (2 * r) == 0 else 1
    return {"tile_rows": r, "row_tiles": mt, "col_tiles": 2 if col_blocks % 2 == 0 else 1}


class Conv2dNCHWcAmxTemplate(Template):
    """conv2d ``NCHW{IB}c`` x bf16 ``OIHW{IB/2}i{OB}o2i`` -> ``NCHW{OB}c`` float32 on AMX tiles:
    one kernel call per block of ``row_tiles x tile_rows`` output columns x ``col_tiles`` tiles
    of 16 channels (blocks of 16, or both halves of a block of 32; the module doc)."""

    name = "conv2d_nchwc_amx"

    def space(self, task: Task) -> ConfigSpace:
        """The output block's knobs (:func:`_tile_knobs`, rows along the output width);
        ``rows_first``: the parallel loop over output rows then channel blocks (1) or the other
        way (0); ``blocks_inside``: channel blocks walked inside a parallel chunk (1) or each a
        chunk (0)."""
        s = ConfigSpace()
        height, width = conv_out_hw(task)
        _tile_knobs(s, width, self.col_blocks(task), least_rows(task.args), height)
        if task.args["OB"] == AMX_BLOCK:
            s.add_constraint("two_tiles_a_block", lambda c: c["col_tiles"] == 2)
        s.define_choice("rows_first", [0, 1])
        s.define_choice("blocks_inside", [0, 1])
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        """:func:`_default_tiles`; rows first where the input outweighs the weights (as the
        ``vdpbf16ps`` template, :func:`.bf16.rows_first`), channel blocks each a chunk. Where the
        weights outweigh the input and the output rows pair up, the tallest tiles in two output
        rows (each weight tile loaded once for both): ResNet-50's 3x3 convs at 14 x 14 and 28 x 28
        and its 1x1 of 1024 -> 256 channels ran 1.18-1.22x faster so (alone, Xeon with AMX), its
        3x3 at 56 x 56 of 64 channels, whose input outweighs its weights, 1.2x slower."""
        from .bf16 import rows_first

        height, width = conv_out_hw(task)
        least = least_rows(task.args)
        first = rows_first(task)
        knobs = {**_default_tiles(width, self.col_blocks(task), Window.of(task.args).steps, least),
                 "rows_first": int(first), "blocks_inside": 0, "tiles_across": 0}
        if not first and height % 2 == 0:
            knobs.update(tile_rows=max(tile_rows(width, least)), row_tiles=2, tiles_across=1)
        return knobs

    def schedule(self, task: Task, config: Config) -> Any:
        a = task.args
        sch, block = anchored_schedule(task)
        n, f, y, x, fi, rc, ry, rx, rcp, rce = sch.get_loops(block)
        rows, mt, nt = int(config["tile_rows"]), int(config["row_tiles"]), int(config["col_tiles"])
        across = bool(config["tiles_across"])
        xo, xi = sch.split(x, [None, rows if across else rows * mt])
        yi = None
        if across:
            y, yi = sch.split(y, [None, 2])
        ft = None
        if a["OB"] == AMX_BLOCK:  # the block's two tiles
            ft, fi = sch.split(fi, [nt, TILE_COLUMNS])
        elif nt > 1:
            f, ft = sch.split(f, [None, nt])
        if config["blocks_inside"]:
            outer, inside = [n, y], [f]
        else:
            outer, inside = ([n, y, f] if config["rows_first"] else [n, f, y]), []
        inner = [i for i in (yi, ft, xi) if i is not None]
        sch.reorder(*outer, *inside, xo, *inner, fi, rc, ry, rx, rcp, rce)
        write_tile_and_parallelise(sch, block, task.pattern, xo, outer)
        schedule_convert(sch, task.pattern.pad, a["IB"])
        sch.tensorize(inner[0], conv_intrinsic(mt, nt, rows, Window.of(a), a["OB"], across))
        return sch

    @staticmethod
    def col_blocks(task: Task) -> int:
        """Output channel tiles a kernel call may pair up: two in a block of 32, else any two blocks
        of 16 (1 with groups: two blocks of one kernel call read the same input blocks)."""
        if task.args["OB"] == AMX_BLOCK:
            return 2
        return task.args["OC"] // TILE_COLUMNS if task.args.get("G", 1) == 1 else 1


class Conv2dNCHWcGeneralAmxTemplate(Conv2dNCHWcAmxTemplate):
    """The same for a blocked bf16 conv of any geometry (``conv2d_nchwc_general_bf16``: 1xk and
    kx1 kernels, asymmetric padding, strides, dilation, groups of channel blocks; with groups,
    one output block a kernel call)."""

    name = "conv2d_nchwc_general_amx"


class DensePackAmxTemplate(Template):
    """C[..., M, N] = A[..., M, K] x W in bf16, W packed ``[N/16, K/2, 16, 2]``, on AMX tiles: one
    kernel call per block of ``row_tiles x tile_rows`` rows x ``col_tiles`` blocks of 16 columns,
    over the whole reduction."""

    name = "dense_pack_amx"

    def space(self, task: Task) -> ConfigSpace:
        """The output block's knobs (:func:`_tile_knobs`); ``col_chunks``: the column blocks split
        into this many parallel chunks; ``rows_inside``: each chunk walks its column blocks, and
        every row block inside each (1: a weight tile read from memory once, the activations
        kept in cache), or each row block a chunk of its own, its column blocks inside (0)."""
        a = task.args
        s = ConfigSpace()
        blocks = a["N"] // TILE_COLUMNS
        _tile_knobs(s, a["M"], blocks)
        s.define_choice("col_chunks", divisors(blocks))
        s.add_constraint("chunks_of_whole_blocks", lambda c: blocks % (c["col_chunks"] * c["col_tiles"]) == 0)
        s.define_choice("rows_inside", [0, 1])
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        """Two by two tiles where rows and columns hold them (BERT's layers, 128 rows, ran them
        1.1-1.4x faster than 1 x 2, alone on a Xeon with AMX); row blocks inside the column
        blocks for a reduction longer than :data:`LONG_REDUCTION` (its 3072 -> 768 layer: the
        weights' column block stays in cache while the rows pass). Columns split only where the
        parallel chunks would be fewer than 8."""
        a = task.args
        blocks = a["N"] // TILE_COLUMNS
        knobs = _default_tiles(a["M"], blocks, 0)
        col = blocks // knobs["col_tiles"]
        inside = a["K"] > LONG_REDUCTION
        chunks = a.get("B", 1) * (1 if inside else a["M"] // (knobs["tile_rows"] * knobs["row_tiles"]))
        knobs["col_chunks"] = next((d for d in divisors(col) if chunks * d >= 8), col)
        knobs["rows_inside"] = int(inside)
        return knobs

    def tile(self, task: Task, config: Config) -> tuple[Any, Any]:
        """The schedule with the product tiled, its output stage per block; the block's row loop."""
        pat = task.pattern
        sch, block = anchored_schedule(task)
        *lead, i, j, kp, ke = sch.get_loops(block)
        rows, mt, nt = int(config["tile_rows"]), int(config["row_tiles"]), int(config["col_tiles"])
        io, ii = sch.split(i, [None, rows * mt])
        jo, *jt = sch.split(j, [None, nt, TILE_COLUMNS] if nt > 1 else [None, TILE_COLUMNS])
        jc, jb = sch.split(jo, [int(config["col_chunks"]), None])
        if config["rows_inside"]:
            sch.reorder(*lead, jc, jb, io, ii, *jt, kp, ke)
            tile, outer = io, [*lead, jc]
        else:
            sch.reorder(*lead, jc, io, jb, ii, *jt, kp, ke)
            tile, outer = jb, [*lead, jc, io]
        write_tile_and_parallelise(sch, block, pat, tile, outer)
        schedule_convert(sch, pat.pad, TILE_COLUMNS)
        return sch, ii

    def intrinsic(self, task: Task, config: Config) -> str:
        """The tile intrinsic of ``config``'s output block."""
        return dense_intrinsic(int(config["row_tiles"]), int(config["col_tiles"]), int(config["tile_rows"]),
                               task.args["K"] // 2)

    def schedule(self, task: Task, config: Config) -> Any:
        sch, ii = self.tile(task, config)
        sch.tensorize(ii, self.intrinsic(task, config))
        return sch


class BatchMatmulAmxTemplate(DensePackAmxTemplate):
    """C[b, M, N] = A[b, M, K] x B[b, K, N] in bf16, both operands computed at run time, on AMX
    tiles: ``B`` rounded and packed per call by its ``b_bf16`` stage, then the packed product's
    blocks over every batch."""

    name = "batch_matmul_amx"

    def schedule(self, task: Task, config: Config) -> Any:
        if task.pattern.pack is None:
            raise TemplateError("batch_matmul_amx without the stage that packs its right operand")
        sch, ii = self.tile(task, config)
        schedule_pack(sch, task.pattern.pack)
        sch.tensorize(ii, self.intrinsic(task, config))
        return sch


class AttentionAmxTemplate(AttentionBf16Template):
    """A fused attention in bf16 with its two products on AMX tiles: under the row block's
    parallel loop, ``S = Q K^T`` and ``O = P V`` each one tile-kernel call per block of rows x two
    16-key (16-column) tiles, the softmax between them as in the ``vdpbf16ps`` form. A row block
    no tile height of at least :data:`MIN_ROWS` divides takes the ``vdpbf16ps`` form's schedule."""

    name = "attention_amx"

    def space(self, task: Task) -> ConfigSpace:
        """The row block (``tile_rows``) and the tiles of sums a kernel keeps (``row_tiles``,
        :func:`_tile_knobs`'s meaning), with the ``vdpbf16ps`` form's knobs for a block no tile
        serves."""
        s = super().space(task)
        s.define_choice("row_tiles", list(range(1, MAX_ROW_TILES + 1)))
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        """The ``vdpbf16ps`` form's row block where a tile serves it (else the tallest block one
        serves), two row tiles where the block holds them."""
        knobs = {**super().default_knobs(task, space), "row_tiles": 1}
        served = [r for r in space.knob("tile_rows").entities if tile_rows(r)]
        if served and not tile_rows(knobs["tile_rows"]):
            knobs["tile_rows"] = max(served)
        r = max(tile_rows(knobs["tile_rows"]), default=0)
        if r and knobs["tile_rows"] % (2 * r) == 0:
            knobs["row_tiles"] = 2
        return knobs

    def _schedule(self, task: Task, config: Config, fuse: bool) -> Any:
        rows = int(config["tile_rows"])
        if not tile_rows(rows):
            return super()._schedule(task, config, fuse)
        pat = self._pattern(task)
        r = max(tile_rows(rows))
        mt = int(config["row_tiles"]) if rows % (r * int(config["row_tiles"])) == 0 else 1
        if pat.args["M"] % rows:
            raise TemplateError("the row block does not divide the rows")
        p_round = pat.rounds[2]
        sch = schedule_of(task)
        scores, out = sch.get_sblock(pat.scores), sch.get_sblock(pat.out)
        between = [sch.get_sblock(n) for n in pat.between]
        kept, partials = row_stages(sch, between[:-1], ATTENTION_LANES)
        sch.compute_inline(between[-1])  # the probabilities: rounded as they are computed
        after = [sch.get_sblock(n) for n in pat.after]
        for b in after[:-1]:
            sch.compute_inline(b)
        *batch, i, e, kp, ke = sch.get_loops(out)
        index_dtype = str(sch.get(i).loop_var.ty)
        par, ii = parallel_row_blocks(sch, batch, i, rows, fuse)
        p_block = sch.get_sblock(p_round)
        for b in [p_block, *reversed(kept), scores]:  # consumers first
            sch.compute_at(b, par)
        width = int(sch.get(e).extent)
        nt = 2 if width % (2 * TILE_COLUMNS) == 0 else 1
        io, ii = sch.split(ii, [None, r * mt])
        eo, *et = sch.split(e, [None, nt, TILE_COLUMNS] if nt > 1 else [None, TILE_COLUMNS])
        sch.reorder(io, eo, ii, *et, kp, ke)
        if after:
            sch.reverse_compute_at(after[-1], io)
            _vectorize_spatial_inner(sch, after[-1], io, ATTENTION_LANES)
        pairs_o = int(sch.get(kp).extent)
        self._amx_scores(sch, scores, par, r, mt, index_dtype)
        sch.tensorize(ii, dense_intrinsic(mt, nt, r, pairs_o, index_dtype))
        self.schedule_rest(sch, pat, config, par, kept, partials, p_block)
        return sch

    @staticmethod
    def _amx_scores(sch: Any, block: Any, par: Any, r: int, mt: int, index_dtype: str) -> None:
        """The block's rows of ``S``: blocks of ``mt x r`` rows by two tiles of 16 keys (the keys
        are padded to two vectors), each one tile-kernel call over the head width's pairs."""
        loops = _below(sch, block, par)
        if len(loops) != 4:
            raise TemplateError("the scores block's loops are not rows, keys, head-width pairs")
        ii, jj, kp, ke = loops
        pairs = int(sch.get(kp).extent)
        sio, sii = sch.split(ii, [None, r * mt])
        jo, jt, jl = sch.split(jj, [None, SCORES_COLUMNS // TILE_COLUMNS, TILE_COLUMNS])
        sch.reorder(sio, jo, sii, jt, jl, kp, ke)
        sch.tensorize(sii, dense_intrinsic(mt, SCORES_COLUMNS // TILE_COLUMNS, r, pairs, index_dtype))
