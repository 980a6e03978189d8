"""Helpers the schedule templates share (the interface and registry: :mod:`.registry`), and
the ``none`` template (naive loops, a baseline)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..space import Config, ConfigSpace
from .registry import Template, TemplateError  # noqa: F401  (the templates import them from here)

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from ..task.task import Task


def schedule_of(task: "Task"):
    """A fresh ``tvm.s_tir.Schedule`` over the task's PrimFunc."""
    import tvm
    import tvm.s_tir as st

    return st.Schedule(tvm.IRModule({"main": task.prim_func()}))


def inline_prologue(sch: Any, pattern: Any) -> None:
    """Inline the stages a fused function computes before its anchor (other than padding)."""
    for name in pattern.prologue:
        sch.compute_inline(sch.get_sblock(name))


def anchored_schedule(task: "Task") -> tuple[Any, Any]:
    """``(schedule, anchor block)``: a fresh schedule of the task (:func:`schedule_of`) with its
    fused prologue inlined, and the block of the op the template schedules."""
    sch = schedule_of(task)
    inline_prologue(sch, task.pattern)
    return sch, sch.get_sblock(task.pattern.anchor)


def fuse_epilogue(sch: Any, pattern: Any) -> Any | None:
    """Inline a fused function's elementwise epilogue chain into its last block and return
    that block (None without an epilogue).

    The returned block reads the anchor's result once per output element (bias add,
    residual add, folded batch-norm scale/shift, activation): templates attach it at their
    register-tile loop in place of a cache-write stage, so the epilogue runs on the tile
    while it is still hot.
    """
    if not pattern.epilogue:
        return None
    blocks = [sch.get_sblock(n) for n in pattern.epilogue]
    for b in blocks[:-1]:
        sch.compute_inline(b)
    return blocks[-1]


def output_stage(sch: Any, block: Any, pattern: Any) -> Any:
    """The stage that writes the anchor's tile out: the fused epilogue, else a cache-write."""
    out = fuse_epilogue(sch, pattern)
    return out if out is not None else sch.cache_write(block, 0, "global")


def unroll_knobs(step: int) -> dict[str, int]:
    """Default values of the unroll knobs (:meth:`ConfigSpace.define_unroll`): explicit unrolling
    up to ``step`` statements."""
    return {"auto_unroll_max_step": step, "unroll_explicit": 1}


def annotate_unroll(sch: Any, loop: Any, config: Config, max_step: int | None = None) -> None:
    """Apply the ``auto_unroll_max_step`` / ``unroll_explicit`` knobs to ``loop`` (the steps capped
    at ``max_step`` where given)."""
    step = config.knobs.get("auto_unroll_max_step", 0)
    if max_step is not None:
        step = min(step, max_step)
    if step:
        sch.annotate(loop, "pragma_auto_unroll_max_step", int(step))
        sch.annotate(loop, "pragma_unroll_explicit", int(config.knobs.get("unroll_explicit", 1)))


def vector_lanes(task: "Task") -> int:
    """float32 lanes of the widest vector register of the task's target."""
    return target_lanes(task.target_json)


def target_lanes(target_json: dict[str, Any]) -> int:
    """float32 lanes of the widest vector register of a target (16 with AVX-512, 4 on aarch64's
    NEON, else 8)."""
    if str(target_json.get("mtriple", "")).startswith("aarch64"):
        return 4
    mcpu = str(target_json.get("mcpu", ""))
    wide = ("skylake-avx512", "cascadelake", "icelake", "sapphirerapids", "znver4", "znver5", "tigerlake",
            "cooperlake", "rocketlake", "emeraldrapids", "graniterapids")
    return 16 if any(mcpu.startswith(w) for w in wide) else 8


def largest_divisor_le(n: int, cap: int) -> int:
    """The largest divisor of ``n`` that is at most ``cap``."""
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def row_split_policy(rows: int, cap: int = 16) -> str:
    """The split policy of a GEMM's rows: exact factors when some divisor of 4 to ``cap`` rows makes
    a register tile, else ``any`` (a guarded tail: a ViT's 197 tokens would get 1-row tiles)."""
    return "factors" if largest_divisor_le(rows, cap) >= 4 else "any"


def tail_row_tiles(rows: int, cap: int = 16) -> list[int]:
    """Register-tile heights for ``rows`` split by :func:`row_split_policy`: its divisors up to ``cap``
    (``factors``), else every height whose guarded tail wastes at most a tenth of the rows."""
    if row_split_policy(rows, cap) == "factors":
        return [d for d in range(1, min(rows, cap) + 1) if rows % d == 0]
    return [h for h in range(1, min(rows, cap) + 1) if (-(-rows // h) * h - rows) * 10 <= rows]


def largest_multiple_divisor(n: int, step: int, cap: int) -> int:
    """The largest divisor of ``n`` that is a multiple of ``step`` and at most ``cap``
    (else the largest divisor at most ``cap``)."""
    cands = [d for d in range(step, min(n, cap) + 1, step) if n % d == 0]
    return max(cands) if cands else largest_divisor_le(n, cap)


def pick_entity(space: ConfigSpace, name: str, score: Callable[[Any], tuple]) -> Any:
    """The entity of knob ``name`` that maximises ``score`` (a tuple of booleans/numbers)."""
    return max(space.knob(name).entities, key=lambda e: tuple(score(e)))


#: The widest loop :func:`vectorize_own_loop` turns into one vector (wider ones stay loops).
MAX_VECTOR_EXTENT = 64


def vectorize_own_loop(sch: Any, block: Any, anchor: Any) -> None:
    """Vectorise the innermost loop of ``block`` that lies below ``anchor`` (its compute-at loop).

    After ``compute_at`` a unit-extent loop disappears, and the innermost loop of the block
    can then be the anchor itself or one of its ancestors, which holds other work: never
    vectorise those. Nor a loop wider than :data:`MAX_VECTOR_EXTENT`: a packed copy of one column
    per block has the reduction as its innermost loop, and LLVM takes minutes over a vector that
    wide.
    """
    loops = sch.get_loops(block)
    anchor_sref = sch.get_sref(anchor)
    for i, lp in enumerate(loops):
        if sch.get_sref(lp).same_as(anchor_sref):
            extent = sch.get(loops[-1]).extent
            if i + 1 < len(loops) and (not hasattr(extent, "value") or extent.value <= MAX_VECTOR_EXTENT):
                sch.vectorize(loops[-1])
            return


class NoScheduleTemplate(Template):
    """The PrimFunc as TVM lowers it with no schedule at all (naive loops): a baseline."""

    name = "none"

    def space(self, task: "Task") -> ConfigSpace:
        return ConfigSpace()

    def schedule(self, task: "Task", config: Config) -> Any:
        return schedule_of(task)  # no primitive applied: an empty trace

