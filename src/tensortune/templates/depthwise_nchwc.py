"""Blocked depthwise conv2d template for CPU: ``NCHW{B}c`` x ``OIHW1i{B}o`` -> ``NCHW{B}c``.

The register tile is ``tile_x`` output columns x the channel block (vectorised), accumulated
over the kernel window; the column tile need not divide the output width (a guarded tail).
Parallel over channel blocks and row tiles; the fused epilogue (bias, clip) is written per tile.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from .base import Template, anchored_schedule, annotate_unroll, pick_entity, unroll_knobs
from .conv2d import UNROLL_STEPS, schedule_padding
from .conv2d_nchwc import block_vectors, max_accumulators, write_tile_and_parallelise

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


#: Where the zero-padded input is written: ``stage``, once for the whole input before the
#: convolution (a parallel pass of its own); ``tile``, per parallel tile, just the rows and
#: channel blocks that tile reads (the copy stays in cache; overlapping rows are padded twice).
PAD_AT = ("stage", "tile")


def pad_per_tile(sch: Any, name: str, loop: Any) -> None:
    """Compute the padding stage ``name`` under ``loop`` (a parallel tile), rows vectorised."""
    pad = sch.get_sblock(name)
    sch.compute_at(pad, loop)
    sch.vectorize(sch.get_loops(pad)[-1])


class DepthwiseNCHWcTemplate(Template):
    """Depthwise conv2d in the blocked layout (multiplier 1), any stride and padding."""

    name = "depthwise_conv2d_nchwc"
    parallel_splits = ("tile_c", "tile_y")
    version = 2  # knob pad_at

    @staticmethod
    def padded(task: Task) -> bool:
        """Whether the task has a padding stage."""
        return task.args["P"] > 0

    def space(self, task: Task) -> ConfigSpace:
        a = task.args
        Co, OH, OW = a["C"] // a["B"], task.out_shape[2], task.out_shape[3]
        vec = block_vectors(task, a["B"])
        acc = max_accumulators(task.target_json)
        s = ConfigSpace()
        s.define_split("tile_c", Co, 2, max_innermost=4)
        s.define_split("tile_y", OH, 2, max_innermost=8)
        s.define_split("tile_x", OW, 2, policy="any", max_innermost=acc)
        s.define_choice("unroll_kw", [1, 0])
        if self.padded(task):  # a padding stage to place
            s.define_choice("pad_at", list(PAD_AT))
        s.define_unroll(UNROLL_STEPS)
        s.add_constraint("registers", lambda c: c["tile_x"][1] * vec <= acc)
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        OW = task.out_shape[3]
        vec = block_vectors(task, task.args["B"])
        xi = min(OW, max_accumulators(task.target_json) // vec, 8)
        # padding per tile of rows pays once a tile holds several rows (the overlap of K - 1 rows
        # is padded twice): measured 1.1-2.9x faster on MobileNetV2's layers with 7-8 rows
        ty = max(e[1] for e in space.knob("tile_y").entities)
        pad_at = "tile" if ty >= 4 else "stage"
        return {
            "tile_c": pick_entity(space, "tile_c", lambda e: (e[1] == 1,)),
            "tile_y": pick_entity(space, "tile_y", lambda e: (e[1] == (ty if pad_at == "tile" else 1),)),
            "tile_x": pick_entity(space, "tile_x", lambda e: (e[1] == xi,)),
            "unroll_kw": 1,
            **({"pad_at": pad_at} if self.padded(task) else {}),
            **unroll_knobs(16),
        }

    def schedule(self, task: Task, config: Config) -> Any:
        pat = task.pattern
        sch, block = anchored_schedule(task)
        n, c, y, x, ci, ry, rx = sch.get_loops(block)
        co, cm = sch.split(c, list(config["tile_c"]))
        yo, yi = sch.split(y, list(config["tile_y"]))
        xo, xi = sch.split(x, [None, config["tile_x"][1]])
        sch.reorder(n, co, yo, cm, yi, xo, ry, rx, xi, ci)
        par = write_tile_and_parallelise(sch, block, pat, xo, [n, co, yo])
        if config["unroll_kw"]:
            sch.unroll(rx)
        sch.unroll(xi)
        sch.vectorize(ci)
        annotate_unroll(sch, par, config)
        sch.decompose_reduction(block, ry)
        if pat.pad is not None and config.knobs.get("pad_at") == "tile":
            pad_per_tile(sch, pat.pad, par)
        else:
            schedule_padding(sch, pat.pad)
        return sch



class DepthwiseNCHWcGeneralTemplate(DepthwiseNCHWcTemplate):
    """The same tiles for a blocked depthwise conv2d of any geometry (``depthwise_conv2d_nchwc_general``:
    1xk and kx1 kernels, asymmetric padding such as TensorFlow's "same" at stride 2, dilation)."""

    name = "depthwise_conv2d_nchwc_general"
    version = 1

    @staticmethod
    def padded(task: Task) -> bool:
        """Whether the task has a padding stage (any side)."""
        a = task.args
        return max(a["PT"], a["PL"], a["PB"], a["PR"]) > 0
