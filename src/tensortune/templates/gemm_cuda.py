"""GEMM template for matmul, dense and batch_matmul on CUDA (AutoTVM's ``dense`` / ``batch_matmul``
CUDA spaces).

Rows and columns are split ``[block, vthread, thread, inner]`` (:mod:`.gpu`), the batch axes go
to blocks, and the reduction is split ``[outer, inner]``: each outer step stages a ``rows x inner``
panel of A and an ``inner x columns`` panel of B in shared memory, and every thread accumulates
its ``inner`` tile of rows x columns in registers before the epilogue writes it out.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from .base import Template, anchored_schedule, pick_entity, unroll_knobs
from .gpu import UNROLL_STEPS, define_launch_constraints, schedule_tiled, staged_bytes

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

SPATIAL = ("tile_y", "tile_x")


class GemmCudaTemplate(Template):
    """C = A x B on an NVIDIA GPU, with optional batch axes; B as [K, N] or [N, K]."""

    name = "gemm_cuda"

    def space(self, task: Task) -> ConfigSpace:
        M, N, K = task.args["M"], task.args["N"], task.args["K"]
        s = ConfigSpace()
        s.define_split("tile_y", M, 4)
        s.define_split("tile_x", N, 4)
        s.define_split("tile_k", K, 2)
        s.define_unroll(UNROLL_STEPS)
        define_launch_constraints(s, task, SPATIAL, lambda c: self.shared_bytes(task, c))
        return s

    def shared_bytes(self, task: Task, c: Config) -> int:
        """Shared memory of one block: the A and B panels of one reduction step."""
        rows, cols = (c[k][1] * c[k][2] * c[k][3] for k in SPATIAL)
        return staged_bytes(c["tile_k"][1] * rows, c["tile_k"][1] * cols)

    def default_knobs(self, task: Task, space: ConfigSpace) -> dict[str, Any]:
        """16 x 16 threads with a 4 x 4 register tile where the shape allows it, 8 terms per step."""
        def axis(name: str) -> Any:
            return pick_entity(space, name, lambda e: (e[1] == 1, e[2] <= 16, e[3] <= 4, e[2] * e[3], e[2]))

        return {"tile_y": axis("tile_y"), "tile_x": axis("tile_x"),
                "tile_k": pick_entity(space, "tile_k", lambda e: (e[1] <= 8, e[1])),
                **unroll_knobs(512)}

    def schedule(self, task: Task, config: Config) -> Any:
        sch, block = anchored_schedule(task)
        loops = sch.get_loops(block)
        batch, (i, j, k) = loops[:-3], loops[-3:]
        tiles = [sch.split(i, list(config["tile_y"])), sch.split(j, list(config["tile_x"]))]
        ko, ki = sch.split(k, list(config["tile_k"]))
        return schedule_tiled(sch, block, task, config, batch, tiles, [ko], [ki])
