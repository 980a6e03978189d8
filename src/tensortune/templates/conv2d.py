"""Direct conv2d NCHW template for CPU (AutoTVM's x86 NCHWc schedule, packed inside the op).

The register tile is ``xi`` output columns x ``fi`` output channels, channels vectorised,
accumulated over the whole reduction (``tile_rc`` x kernel rows x kernel columns). The
kernel block of each parallel channel tile is repacked to ``[rc, ry, rx, fi]`` (channels
innermost, so the inner loop loads whole vectors) inside the parallel loop, and input
values are broadcast, so strided convolutions need no data repacking. The padded input is
materialised once by a parallel loop. Inputs and outputs stay NCHW / OIHW. In a model's fused function (``conv2d-add-relu``)
the elementwise epilogue is written out at the register-tile level in place of the
cache-write stage.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from .base import (Template, anchored_schedule, annotate_unroll, largest_divisor_le, output_stage, pick_entity,
                   unroll_knobs, vector_lanes, vectorize_own_loop)

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

MAX_ACCUMULATORS = 28
#: auto_unroll_max_step choices: 512 unrolls whole reduction nests of big register tiles
#: into thousands of FMAs that take LLVM 10-60 s to compile, for no speed (unroll_kw covers it).
UNROLL_STEPS = (0, 16, 64)


def schedule_padding(sch: Any, name: str | None) -> None:
    """Parallelise the padding stage over channels and vectorise its rows (if present)."""
    if name is None:  # no padding stage (P = 0)
        return
    pad = sch.get_sblock(name)
    loops = sch.get_loops(pad)
    sch.parallel(sch.fuse(*loops[:2]))
    sch.vectorize(loops[-1])


class Conv2dTemplate(Template):
    """conv2d NCHW, any stride and padding (batch 1)."""

    name = "conv2d"
    parallel_splits = ("tile_f",)
    version = 2

    def space(self, task: Task) -> ConfigSpace:
        a = task.args
        OC, OH, OW, IC = a["OC"], task.out_shape[2], task.out_shape[3], a["IC"]
        lanes = vector_lanes(task)
        s = ConfigSpace()
        s.define_split("tile_f", OC, 3, max_innermost=4 * lanes)
        s.define_split("tile_y", OH, 2, max_innermost=8)
        s.define_split("tile_x", OW, 2, max_innermost=16)
        s.define_split("tile_rc", IC, 2, max_innermost=64)
        s.define_choice("unroll_kw", [1, 0])
        s.define_unroll(UNROLL_STEPS)
        s.add_constraint("registers", lambda c: c["tile_x"][1] * -(-c["tile_f"][2] // lanes) <= MAX_ACCUMULATORS)
        if OC % lanes == 0:
            s.add_constraint("vector_lanes", lambda c: c["tile_f"][2] % lanes == 0)
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        lanes = vector_lanes(task)
        OW, IC, OC = task.out_shape[3], task.args["IC"], task.args["OC"]
        rci = largest_divisor_le(IC, 16)
        if OC % lanes == 0:
            fi, xi = lanes, largest_divisor_le(OW, 8)
        else:  # channels no vector divides (ShuffleNet's 58, 116): a short vector, a wide row of them
            fi = min(OC & -OC, lanes)  # the largest power of two dividing OC
            xi = largest_divisor_le(OW, min(16, MAX_ACCUMULATORS))
        return {
            "tile_f": pick_entity(space, "tile_f", lambda e: (e[2] == fi, e[1] == 1)),
            "tile_y": pick_entity(space, "tile_y", lambda e: (e[1] == 1,)),
            "tile_x": pick_entity(space, "tile_x", lambda e: (e[1] == xi,)),
            "tile_rc": pick_entity(space, "tile_rc", lambda e: (e[1] == rci,)),
            "unroll_kw": 0,
            **unroll_knobs(16),
        }

    def schedule(self, task: Task, config: Config) -> Any:
        pat = task.pattern
        sch, block = anchored_schedule(task)
        n, f, y, x, rc, ry, rx = sch.get_loops(block)
        fo, fm, fi = sch.split(f, list(config["tile_f"]))
        yo, yi = sch.split(y, list(config["tile_y"]))
        xo, xi = sch.split(x, list(config["tile_x"]))
        rco, rci = sch.split(rc, list(config["tile_rc"]))
        sch.reorder(n, fo, yo, xo, fm, yi, rco, ry, rx, rci, xi, fi)
        acc = output_stage(sch, block, pat)
        sch.reverse_compute_at(acc, yi)
        bf = config["tile_f"][2]
        packed = sch.cache_read(block, pat.weight_read, "global")
        sch.transform_layout(packed, ("write", 0), lambda o, i, h, w: (o // bf, i, h, w, o % bf))
        sch.compute_at(packed, fo)
        vectorize_own_loop(sch, packed, fo)
        par = sch.fuse(n, fo)
        sch.parallel(par)
        if config["unroll_kw"]:
            sch.unroll(rx)
        sch.unroll(xi)
        sch.vectorize(fi)
        annotate_unroll(sch, yo, config)  # the compute nest, not the kernel packing
        sch.decompose_reduction(block, rco)
        schedule_padding(sch, pat.pad)
        return sch

