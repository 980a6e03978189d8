"""Depthwise conv2d NCHW template for CPU: channels tiled, output rows vectorised."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from .base import (Template, anchored_schedule, annotate_unroll, output_stage, pick_entity, unroll_knobs,
                   vectorize_own_loop)
from .conv2d import schedule_padding

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


class DepthwiseTemplate(Template):
    """Depthwise conv2d (one filter per channel, multiplier 1), any stride and padding."""

    name = "depthwise_conv2d"
    parallel_splits = ("tile_c", "tile_y")

    def space(self, task: Task) -> ConfigSpace:
        C, OH, OW = task.args["C"], task.out_shape[2], task.out_shape[3]
        s = ConfigSpace()
        s.define_split("tile_c", C, 2, max_innermost=16)
        s.define_split("tile_y", OH, 2, max_innermost=8)
        s.define_split("tile_x", OW, 2, policy="power2", max_innermost=64)
        s.define_choice("unroll_kw", [1, 0])
        s.define_unroll()
        return s

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        return {
            "tile_c": pick_entity(space, "tile_c", lambda e: (e[1] == 1,)),
            "tile_y": pick_entity(space, "tile_y", lambda e: (e[1] == 1,)),
            "tile_x": pick_entity(space, "tile_x", lambda e: (e[1] == 16, e[1])),
            "unroll_kw": 1,
            **unroll_knobs(16),
        }

    def schedule(self, task: Task, config: Config) -> Any:
        pat = task.pattern
        sch, block = anchored_schedule(task)
        n, c, y, x, *red = sch.get_loops(block)  # a model's group conv has a unit rc loop too
        co, ci = sch.split(c, list(config["tile_c"]))
        yo, yi = sch.split(y, list(config["tile_y"]))
        xo, xi = sch.split(x, list(config["tile_x"]))
        sch.reorder(n, co, yo, xo, ci, yi, *red, xi)
        acc = output_stage(sch, block, pat)
        sch.reverse_compute_at(acc, yi)
        par = sch.fuse(n, co, yo)
        sch.parallel(par)
        if config["unroll_kw"]:
            sch.unroll(red[-1])
        sch.vectorize(xi)
        vectorize_own_loop(sch, acc, yi)
        annotate_unroll(sch, par, config)
        sch.decompose_reduction(block, red[0])
        schedule_padding(sch, pat.pad)
        return sch

