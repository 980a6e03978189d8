"""Blocked conv2d template for CPU: AutoTVM's x86 ``conv2d_NCHWc`` schedule, weights prepacked.

The function reads activations ``[1, IC/IB, H, W, IB]`` and a weight the model packed once at
compile time, ``[OC/OB, IC/IB, K, K, IB, OB]`` (:mod:`tensortune.models.layout`), so nothing is
repacked per inference. The register tile is ``tile_x`` output columns x ``tile_f`` output
channel blocks x the block ``OB`` (vectorised), accumulated over the whole reduction. The
column tile need not divide the output width: a tail tile is guarded, so prime and odd widths
(13, 17, 35) get full-width register tiles. Parallel over output channel blocks and rows. A
fused epilogue (bias, residual add, relu, clip) is written out per register tile while hot.

A float32 3x3 stride-1 convolution has one more knob, ``algorithm``: 0 for the direct convolution
above, m for Winograd F(m, 3) (:mod:`.winograd`), which reads a kernel transformed at compile time
(:meth:`Conv2dNCHWcTemplate.variant_inputs`). Its register tile reuses ``tile_x`` (tiles of a row)
and ``tile_f``; the knobs it has no use for are held at one value, so no config repeats another.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from .base import (Template, anchored_schedule, annotate_unroll, output_stage, pick_entity, target_lanes,
                   unroll_knobs, vectorize_own_loop)
from .conv2d import UNROLL_STEPS, schedule_padding
from .winograd import TILE_SIZES, schedule_winograd, tiles, transform_weight, weight_param

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


def vector_registers(target_json: dict[str, Any]) -> int:
    """The target's vector register file: 32 registers with AVX-512, 16 with AVX2."""
    return 32 if target_lanes(target_json) == 16 else 16


def max_accumulators(target_json: dict[str, Any]) -> int:
    """Vector registers a register tile may hold as accumulators, leaving 4 of the register file
    for the weight vectors and the broadcast input."""
    return vector_registers(target_json) - 4


def block_vectors(task: Task, block: int) -> int:
    """Vector registers one channel block of ``block`` floats takes on the task's target."""
    return -(-block // target_lanes(task.target_json))


def write_tile_and_parallelise(sch: Any, block: Any, pat: Any, tile_loop: Any, outer: list[Any]) -> Any:
    """The blocked templates' common tail: the output stage (fused epilogue, else a cache write)
    written per register tile under ``tile_loop`` and vectorised, the ``outer`` loops fused into
    one parallel loop (returned)."""
    acc = output_stage(sch, block, pat)
    sch.reverse_compute_at(acc, tile_loop)
    vectorize_own_loop(sch, acc, tile_loop)
    par = sch.fuse(*outer)
    sch.parallel(par)
    return par


def default_register_tile(width: int, f_blocks: int, vec: int, acc: int,
                          blocks: tuple[int, ...] = (1, 2)) -> tuple[int, int]:
    """``(columns, channel blocks)`` of an untuned register tile: at most 8 columns, ``blocks``
    channel blocks, at most ``acc`` accumulators (``columns x blocks x vec``), a tail wasting at
    most 10% of the row, the most accumulators, then the widest row (measured on ResNet-18's
    convolutions: tails beyond 8 columns and more than 12 accumulators lose on AVX2)."""
    best = (1, 1)
    for fm in blocks:
        if f_blocks % fm:
            continue
        for xi in range(1, min(width, 8) + 1):
            tiles = -(-width // xi)
            if xi * fm * vec > acc or (tiles * xi - width) * 10 > tiles * xi:
                continue
            if (xi * fm, xi) > (best[0] * best[1], best[0]):
                best = (xi, fm)
    return best


#: Widest register tile of a template whose column tiles divide the output width (columns).
MAX_EXACT_COLUMNS = 16


def exact_register_tile(width: int, xi: int, fm: int, vec: int, acc: int) -> tuple[int, int]:
    """``(columns, channel blocks)`` of a register tile whose columns divide ``width``: the widest
    divisor up to :func:`default_register_tile`'s ``xi`` columns; where that leaves fewer than 4
    (a width of 13), the widest divisor up to :data:`MAX_EXACT_COLUMNS` on one channel block."""
    exact = max(d for d in range(1, xi + 1) if width % d == 0)
    if exact < min(4, width):
        wide = [d for d in range(xi + 1, min(width, MAX_EXACT_COLUMNS) + 1) if width % d == 0 and d * vec <= acc]
        if wide:
            return max(wide), 1
    return exact, fm


def conv_out_hw(task: Task) -> tuple[int, int]:
    """The anchor convolution's output rows and columns, from the task's args (its function's own
    output can be narrower: a bf16 conv widened to a width its column tiles divide is cut after
    it, :func:`tensortune.models.layout.legalize_conv2d`)."""
    from ..task.ops import conv_out, general_conv_out

    a = task.args
    if "KH" in a:
        return general_conv_out(a)
    return conv_out(a["H"], a["K"], a["S"], a["P"]), conv_out(a["W"], a["K"], a["S"], a["P"])


def exact_columns_fit(width: int) -> bool:
    """Whether a register tile of exact columns serves ``width``: a width of at most 3, or one
    with a divisor from 4 to :data:`MAX_EXACT_COLUMNS` (a width of 109 has none: one column a
    tile)."""
    return width <= 3 or any(width % d == 0 for d in range(4, MAX_EXACT_COLUMNS + 1))


def default_winograd(ic: int, oc: int, width: int) -> int:
    """The untuned ``algorithm``: from 8 input channels, F(4, 3) on outputs at least 14 wide (below
    256 channels at 14), F(2, 3) from 128 channels on narrower ones, else direct (0). Measured on
    AVX2 (znver3, 2 threads, interleaved rounds, against the direct default): F(4, 3) with its input
    transformed per row of tiles 1.29x at 56x56 from 8 to 16 channels, 1.53x at 16, 1.9-2.2x from 32
    to 256 channels (56x56 to 14x14); F(2, 3) 1.46x at 7x7x512, where F(4, 3) pads 7 to 8 and ran
    0.81x. At 14x14x256 the tuners' first batches (which measure every algorithm) found F(2, 3)
    1.09-1.16x faster than F(4, 3) in three ResNet tasks. Not on an RGB stem (3 input channels:
    0.55x at 224x224x64, 0.74x at 112x112x32), whose few products cannot pay for the transforms."""
    if ic < 8:
        return 0
    if width > 14 or width == 14 and min(ic, oc) < 256:
        return 4
    if min(ic, oc) >= 128:
        return 2
    return 0


def winograd_knobs(space: ConfigSpace, m: int, row_tiles: int, f_blocks: int, vec: int, acc: int) -> dict[str, Any]:
    """Untuned register tile of F(m, 3): up to 8 tiles of a row (a divisor of the row's tiles), two
    channel blocks where at most 4 tiles fit; the reduction whole in one pass; the input transformed
    per row of tiles for F(4, 3) (1.5-2x over a pass of its own at 56x56x64, 28x28x128, 14x14x256),
    in a pass of its own for F(2, 3) on narrow outputs (even); no unroll pragma (it unrolled the
    tile's reduction and ran 1.15-1.45x slower)."""
    xi = max(d for d in range(1, min(row_tiles, 8) + 1) if row_tiles % d == 0)
    fm = 2 if xi <= 4 and f_blocks % 2 == 0 and xi * 2 * vec <= acc else 1
    return {"tile_x": next(e for e in space.knob("tile_x").entities if e[1] == xi),
            "tile_f": next(e for e in space.knob("tile_f").entities if e[1] == fm),
            "tile_rc": space.knob("tile_rc").entities[-1], "unroll_kw": 0,
            "tile_y": space.knob("tile_y").entities[0], "auto_unroll_max_step": 0, "wino_input": int(m == 4)}


class Conv2dNCHWcTemplate(Template):
    """conv2d ``NCHW{IB}c`` x ``OIHW{IB}i{OB}o`` -> ``NCHW{OB}c``, any stride and padding (batch 1)."""

    name = "conv2d_nchwc"
    parallel_splits = ("tile_f", "tile_y")
    #: column tiles that divide the output width only (a tensorized tile cannot be guarded)
    exact_columns = False
    #: whether a 3x3 stride-1 float32 task offers Winograd F(m, 3) (the ``algorithm`` knob)
    winograd = True

    def offers_winograd(self, task: Task) -> bool:
        """Whether the task's space has the ``algorithm`` knob."""
        a = task.args
        return (self.winograd and task.op == "conv2d_nchwc" and a["K"] == 3 and a["S"] == 1
                and task.precision == "f32")

    def key_version(self, task: Task) -> int:
        """2 where the space gained the ``algorithm`` knob; 1 (the records of before) elsewhere."""
        return 2 if self.offers_winograd(task) else 1

    @staticmethod
    def in_blocks(task: Task) -> int:
        """Input channel blocks each output block reads (the reduction's outer channel loop)."""
        return task.args["IC"] // task.args["IB"]

    def space(self, task: Task) -> ConfigSpace:
        a = task.args
        OCo, ICo, (OH, OW) = a["OC"] // a["OB"], self.in_blocks(task), conv_out_hw(task)
        vec = block_vectors(task, a["OB"])
        acc = max_accumulators(task.target_json)
        s = ConfigSpace()
        s.define_split("tile_f", OCo, 2, max_innermost=4)
        s.define_split("tile_y", OH, 2, max_innermost=4)
        s.define_split("tile_x", OW, 2, policy="factors" if self.exact_columns else "any", max_innermost=acc)
        s.define_split("tile_rc", ICo, 2)
        s.define_choice("unroll_kw", [0, 1])
        s.define_unroll(UNROLL_STEPS)
        s.add_constraint("registers", lambda c: c["tile_x"][1] * c["tile_f"][1] * vec <= acc)
        if self.offers_winograd(task):
            s.define_choice("algorithm", [0, *TILE_SIZES])
            s.define_choice("wino_input", [0, 1])
            y_one = s.knob("tile_y").entities[0]

            def winograd_tile(c: Config) -> bool:  # a row of tiles split evenly; knobs of the other held
                m = c["algorithm"]
                if not m:
                    return c["wino_input"] == 0
                return (tiles(OH, OW, m)[1] % c["tile_x"][1] == 0 and c["unroll_kw"] == 0
                        and tuple(c["tile_y"]) == tuple(y_one))
            s.add_constraint("winograd", winograd_tile)
        return s

    def register_budget(self, task: Task) -> tuple[int, tuple[int, ...]]:
        """The accumulators and the channel-block counts an untuned register tile may take."""
        return max_accumulators(task.target_json), (1, 2)

    def _direct_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        """The untuned direct convolution (without the ``algorithm`` knobs)."""
        a = task.args
        OW, OCo, ICo = conv_out_hw(task)[1], a["OC"] // a["OB"], self.in_blocks(task)
        vec = block_vectors(task, a["OB"])
        acc, blocks = self.register_budget(task)
        xi, fm = default_register_tile(OW, OCo, vec, acc, blocks)
        if self.exact_columns:
            xi, fm = exact_register_tile(OW, xi, fm, vec, acc)
        return {
            "tile_f": (OCo // fm, fm),
            "tile_y": pick_entity(space, "tile_y", lambda e: (e[1] == 1,)),
            "tile_x": (-(-OW // xi), xi),
            "tile_rc": (ICo, 1),
            "unroll_kw": int(fm == 1),
            **unroll_knobs(16),
        }

    @staticmethod
    def _with_algorithm(task: Task, space: ConfigSpace, direct: dict[str, Any], m: int) -> dict[str, Any]:
        """``direct`` as algorithm ``m`` (0: direct, else Winograd F(m, 3) with its untuned tile)."""
        if not m:
            return {**direct, "algorithm": 0, "wino_input": 0}
        a = task.args
        vec, acc = block_vectors(task, a["OB"]), max_accumulators(task.target_json)
        row_tiles = tiles(*conv_out_hw(task), m)[1]
        return {**direct, **winograd_knobs(space, m, row_tiles, a["OC"] // a["OB"], vec, acc), "algorithm": m}

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        direct = self._direct_knobs(task, space)
        if not self.offers_winograd(task):
            return direct
        a = task.args
        return self._with_algorithm(task, space, direct, default_winograd(a["IC"], a["OC"], conv_out_hw(task)[1]))

    def other_algorithm_knobs(self, task: Task, space: ConfigSpace) -> list[dict[str, Any]]:
        """The direct convolution and each Winograd F(m, 3), untuned: ``default_winograd``'s rule
        was measured on AVX2 at a few shapes; measurement decides on the others."""
        if not self.offers_winograd(task):
            return []
        direct = self._direct_knobs(task, space)
        return [self._with_algorithm(task, space, direct, m) for m in (0, *TILE_SIZES)]

    def input_variant(self, task: Task, config: Config) -> str:
        """``winograd{m}`` for a Winograd config (its kernel is transformed), else ``""``."""
        m = config.knobs.get("algorithm", 0)
        return f"winograd{m}" if m else ""

    def plain_config(self, task: Task, config: Config) -> Config:
        """The direct convolution with the same register tile."""
        if not config.knobs.get("algorithm", 0):
            return config
        knobs = {**config.knobs, "algorithm": 0, "wino_input": 0}
        return task.space.get(task.space.index_of(knobs))

    def variant_inputs(self, task: Task, variant: str, inputs: list[Any]) -> list[Any]:
        """``inputs`` with the kernel transformed for ``winograd{m}``."""
        m = int(variant.removeprefix("winograd"))
        wi = weight_param(task)
        if inputs[wi] is None:
            raise ValueError("Winograd transforms the kernel at compile time: it must be a constant")
        return [transform_weight(x, m) if i == wi else x for i, x in enumerate(inputs)]

    def schedule(self, task: Task, config: Config) -> Any:
        m = config.knobs.get("algorithm", 0)
        if m:
            return schedule_winograd(task, config, m)
        sch, block = anchored_schedule(task)
        tile_blocked_conv(sch, block, task.pattern, config, sch.get_loops(block))
        schedule_padding(sch, task.pattern.pad)
        return sch


def tile_blocked_conv(sch: Any, block: Any, pat: Any, config: Config, loops: list[Any],
                      rows_first: bool = False) -> Any:
    """The blocked conv's register tile (the module doc) over the anchor's ``loops``
    ``n, f, y, x, fi, rc, ry, rx, rci, *inner``: the ``inner`` reduction loops (a bf16 conv's
    pair) kept innermost; the output block loop ``fi`` (returned) vectorised, or, with ``inner``
    loops, left to be tensorized. The parallel loop runs over channel blocks then rows, or with
    ``rows_first`` over rows then channel blocks (each thread then reads its share of the input
    rows and every weight, rather than all the input and its share of the weights)."""
    n, f, y, x, fi, rc, ry, rx, rci, *inner = loops
    fo, fm = sch.split(f, list(config["tile_f"]))
    yo, yi = sch.split(y, list(config["tile_y"]))
    xo, xi = sch.split(x, [None, config["tile_x"][1]])
    rco, rcm = sch.split(rc, list(config["tile_rc"]))
    outer = [n, yo, fo] if rows_first else [n, fo, yo]
    if config["unroll_kw"]:
        sch.reorder(*outer, yi, xo, rco, ry, rcm, rci, rx, xi, fm, fi, *inner)
        sch.unroll(rx)
    else:
        sch.reorder(*outer, yi, xo, rco, ry, rx, rcm, rci, xi, fm, fi, *inner)
    par = write_tile_and_parallelise(sch, block, pat, xo, outer)
    sch.unroll(xi)
    sch.unroll(fm)
    if not inner:
        sch.vectorize(fi)
    annotate_unroll(sch, par, config)
    sch.decompose_reduction(block, rco)
    return fi



class Conv2dNCHWcGeneralTemplate(Conv2dNCHWcTemplate):
    """The same register tiles for a blocked conv2d of any geometry (``conv2d_nchwc_general``:
    1xk and kx1 kernels, asymmetric padding, strides, dilation, groups of channel blocks); the
    parallel loop over output channel blocks runs across the groups, each reading its own inputs."""

    name = "conv2d_nchwc_general"
    winograd = False

    @staticmethod
    def in_blocks(task: Task) -> int:
        """Input channel blocks of one group."""
        return task.args["IC"] // task.args["G"] // task.args["IB"]
