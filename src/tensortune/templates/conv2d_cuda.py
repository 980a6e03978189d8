"""Direct conv2d and depthwise conv2d NCHW templates for CUDA (AutoTVM's ``conv2d_nchw.cuda`` and
``depthwise_conv2d_nchw.cuda`` spaces).

Output channels, rows and columns are each split ``[block, vthread, thread, inner]``
(:mod:`.gpu`); the reduction axes (input channels, kernel rows, kernel columns) are split
``[outer, inner]``. Each step of the outer reduction loops stages the padded input and the kernel
it needs in shared memory (padding computed in the copy), every thread accumulates its
``inner`` tile in registers, and the tile is written out through the fused epilogue.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from .base import Template, anchored_schedule, pick_entity, unroll_knobs
from .gpu import UNROLL_STEPS, define_launch_constraints, schedule_tiled, staged_bytes

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

SPATIAL = ("tile_f", "tile_y", "tile_x")


def _window(out_tile: int, stride: int, taps: int) -> int:
    """Input rows (or columns) ``out_tile`` outputs of a stride read with ``taps`` kernel taps."""
    return (out_tile - 1) * stride + taps


class Conv2dCudaTemplate(Template):
    """conv2d NCHW on an NVIDIA GPU, any stride and padding (batch 1)."""

    name = "conv2d_cuda"
    #: reduction split knobs: input channels, kernel rows, kernel columns
    reductions: tuple[str, ...] = ("tile_rc", "tile_ry", "tile_rx")

    def channels_in(self, task: Task) -> int:
        """Input channels one output channel reads (all of them; one for depthwise)."""
        return int(task.args["IC"])

    def channels_out(self, task: Task) -> int:
        """Output channels."""
        return int(task.args["OC"])

    def space(self, task: Task) -> ConfigSpace:
        a = task.args
        OH, OW = task.out_shape[2], task.out_shape[3]
        s = ConfigSpace()
        s.define_split("tile_f", self.channels_out(task), 4)
        s.define_split("tile_y", OH, 4)
        s.define_split("tile_x", OW, 4)
        extents = {"tile_rc": self.channels_in(task), "tile_ry": a["K"], "tile_rx": a["K"]}
        for knob in self.reductions:
            s.define_split(knob, extents[knob], 2)
        s.define_unroll(UNROLL_STEPS)
        define_launch_constraints(s, task, SPATIAL, lambda c: self.shared_bytes(task, c))
        return s

    def shared_bytes(self, task: Task, c: Config) -> int:
        """Shared memory of one block: the padded input window and the kernel of one outer
        reduction step."""
        S, K = task.args["S"], task.args["K"]
        f, y, x = (c[k][1] * c[k][2] * c[k][3] for k in SPATIAL)
        rc = c["tile_rc"][1] if "tile_rc" in self.reductions else 1
        ry = c["tile_ry"][1] if "tile_ry" in self.reductions else K
        rx = c["tile_rx"][1] if "tile_rx" in self.reductions else K
        data = self.data_channels(f, rc) * _window(y, S, ry) * _window(x, S, rx)
        return staged_bytes(data, f * rc * ry * rx)

    def data_channels(self, f: int, rc: int) -> int:
        """Input channels a block's ``f`` output channels read per reduction step of ``rc``."""
        return rc

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        """A common start of AutoTVM's CUDA conv2d: up to 8 x 8 threads over rows x columns and 8
        over output channels, 4 output channels per thread where they divide, 4 input channels per
        step and the whole kernel window."""
        OH, OW = task.out_shape[2], task.out_shape[3]
        ty, tx = min(8, OH), min(8, OW)
        knobs: dict[str, Any] = {
            "tile_f": pick_entity(space, "tile_f", lambda e: (e[1] == 1, e[3] == 4, e[2] <= 8, e[2])),
            "tile_y": pick_entity(space, "tile_y", lambda e: (e[1] == 1, e[3] == 1, e[2] <= ty, e[2])),
            "tile_x": pick_entity(space, "tile_x", lambda e: (e[1] == 1, e[3] == 1, e[2] <= tx, e[2])),
            **unroll_knobs(512),
        }
        for knob in self.reductions:
            inner = 4 if knob == "tile_rc" else 10 ** 6  # whole kernel rows / columns per step
            knobs[knob] = pick_entity(space, knob, lambda e, inner=inner: (e[1] <= inner, e[1]))
        return knobs

    def schedule(self, task: Task, config: Config) -> Any:
        sch, block = anchored_schedule(task)
        n, f, y, x, *red = sch.get_loops(block)
        tiles = [sch.split(lp, list(config[k])) for lp, k in zip((f, y, x), SPATIAL)]
        outer, inner = self.split_reductions(sch, red, config)
        return schedule_tiled(sch, block, task, config, [n], tiles, outer, inner)

    def split_reductions(self, sch: Any, red: list[Any], config: Config) -> tuple[list[Any], list[Any]]:
        """``(outer loops, inner loops)`` of the reduction axes split by their knobs."""
        pairs = [sch.split(lp, list(config[k])) for lp, k in zip(red, self.reductions)]
        return [p[0] for p in pairs], [p[1] for p in pairs]


class DepthwiseCudaTemplate(Conv2dCudaTemplate):
    """Depthwise conv2d NCHW on an NVIDIA GPU (multiplier 1): channels tiled like output channels,
    the kernel window split by rows and columns."""

    name = "depthwise_conv2d_cuda"
    reductions = ("tile_ry", "tile_rx")

    def channels_in(self, task: Task) -> int:
        return 1

    def channels_out(self, task: Task) -> int:
        return int(task.args["C"])

    def data_channels(self, f: int, rc: int) -> int:
        return f  # each output channel reads its own input channel

    def split_reductions(self, sch: Any, red: list[Any], config: Config) -> tuple[list[Any], list[Any]]:
        unit, red = red[:-2], red[-2:]  # a model's group conv keeps a unit input-channel loop
        outer, inner = super().split_reductions(sch, red, config)
        return [*unit, *outer], inner

