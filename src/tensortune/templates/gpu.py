"""What the CUDA templates share: the device's launch limits, the block / virtual-thread / thread
binding of a tiled nest, cooperative fetches into shared memory, and TVM's GPU code check.

The tiling is AutoTVM's for CUDA: every spatial axis is split four ways, ``[block, vthread,
thread, inner]``; the block parts are fused into ``blockIdx.x``, the virtual-thread parts are
bound to ``vthread`` (strided register tiles that avoid shared-memory bank conflicts), the thread
parts are fused into ``threadIdx.x`` and the inner parts stay a thread's register tile. Each
reduction axis is split in two, and the operands a step of the outer reduction loops needs are
copied into shared memory by all the block's threads together.
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING, Any, Sequence

from ..space import ConfigSpace
from ..target import CUDA_LIMITS
from .base import annotate_unroll, fuse_epilogue
from .registry import TemplateError

if TYPE_CHECKING:  # pragma: no cover
    from ..task.task import Task

#: Virtual threads of a block at most (TVM's GPU check allows 8).
MAX_VTHREADS = 8
#: Accumulators one thread keeps in registers at most (a thread has 255 registers; more spill).
MAX_ACCUMULATORS = 64
#: ``auto_unroll_max_step`` choices of AutoTVM's CUDA templates.
UNROLL_STEPS = (0, 512, 1500)
#: Bytes of one float32 element in shared memory.
FLOAT_BYTES = 4


def limits(task: "Task") -> dict[str, int]:
    """The launch limits of the task's device (:data:`tensortune.target.CUDA_LIMITS` unless its
    target states others)."""
    return {k: int(task.target_json.get(k, v)) for k, v in CUDA_LIMITS.items()}


def staged_bytes(*elements: int) -> int:
    """Shared memory of a block staging operands of ``elements`` float32 elements per step (an
    operand of one element is read from global memory: :func:`cooperative_fetch`)."""
    return FLOAT_BYTES * sum(n for n in elements if n > 1)


def define_launch_constraints(s: ConfigSpace, task: "Task", spatial: Sequence[str],
                              shared_bytes: Any) -> None:
    """Constraints that keep ``s`` within what the device launches: threads per block (the
    product of the spatial splits' third parts), virtual threads, accumulators per thread and the
    shared memory ``shared_bytes(config)`` a block stages."""
    lim = limits(task)

    s.add_constraint("threads", lambda c: prod(c[k][2] for k in spatial) <= lim["max_threads_per_block"])
    s.add_constraint("vthreads", lambda c: prod(c[k][1] for k in spatial) <= MAX_VTHREADS)
    s.add_constraint("accumulators",
                     lambda c: prod(c[k][1] * c[k][3] for k in spatial) <= MAX_ACCUMULATORS)
    s.add_constraint("shared_memory", lambda c: shared_bytes(c) <= lim["max_shared_memory_per_block"])


def bind_tiles(sch: Any, outer: Sequence[Any], tiles: Sequence[Sequence[Any]]) -> tuple[Any, Any, int]:
    """Bind a nest split four ways per spatial axis (``tiles``: at most three axes' four loops each,
    already ordered ``outer, blocks, vthreads, threads, ...``) plus ``outer`` loops (batch) to
    blocks, virtual threads and threads. Returns ``(block loop, thread loop, threads)``."""
    if len(tiles) > 3:
        raise TemplateError("at most three tiled spatial axes (three vthread tags)")
    bx = sch.fuse(*outer, *(t[0] for t in tiles))
    sch.bind(bx, "blockIdx.x")
    for t, tag in zip(tiles, ("vthread.x", "vthread.y", "vthread.z")):
        sch.bind(t[1], tag)
    tx = sch.fuse(*(t[2] for t in tiles))
    sch.bind(tx, "threadIdx.x")
    return bx, tx, int(sch.get(tx).extent)


def cooperative_fetch(sch: Any, block: Any, read_index: int, loop: Any, threads: int) -> Any | None:
    """Copy what ``block`` reads of its ``read_index``-th operand under ``loop`` into shared
    memory, the copy's elements spread over the block's ``threads`` threads; returns the copy
    (None where a step reads one element, which stays a global read)."""
    cache = sch.cache_read(block, read_index, "shared")
    sch.compute_at(cache, loop)
    loops = sch.get_loops(cache)
    anchor = sch.get_sref(loop)
    depth = next(i for i, lp in enumerate(loops) if sch.get_sref(lp).same_as(anchor)) + 1
    if not loops[depth:]:  # one element per step (a GEMV's row): read from global memory, not staged
        sch.compute_inline(cache)
        return None
    fused = sch.fuse(*loops[depth:])
    _, tx = sch.split(fused, [None, threads])
    sch.bind(tx, "threadIdx.x")
    return cache


def accumulate_locally(sch: Any, block: Any, pattern: Any, thread_loop: Any) -> None:
    """Keep ``block``'s output tile in registers and write it out once per thread at
    ``thread_loop``: through the fused epilogue (bias, residual, activation) when there is one, else
    a plain copy."""
    out = fuse_epilogue(sch, pattern)
    if out is None:
        out = sch.cache_write(block, 0, "local")
    else:
        sch.set_scope(block, 0, "local")
    sch.reverse_compute_at(out, thread_loop)


def schedule_tiled(sch: Any, block: Any, task: "Task", config: Any, outer: Sequence[Any],
                   tiles: Sequence[Sequence[Any]], reduce_outer: Sequence[Any], reduce_inner: Sequence[Any]) -> Any:
    """The schedule both CUDA templates share, once their loops are split: ``outer`` (batch) and
    ``tiles`` (each spatial axis's four parts) bound by :func:`bind_tiles`, the reduction's outer
    then inner loops, each thread's register tile innermost, the output accumulated locally, every
    operand staged per outer reduction step (a padding stage computed in the copy), the unroll
    knobs on the kernel, then :func:`check_launch`."""
    sch.reorder(*outer, *(t[0] for t in tiles), *(t[1] for t in tiles), *(t[2] for t in tiles),
                *reduce_outer, *reduce_inner, *(t[3] for t in tiles))
    bx, tx, threads = bind_tiles(sch, outer, tiles)
    accumulate_locally(sch, block, task.pattern, tx)
    for i in range(len(sch.get(block).reads)):  # the operands (a fused prologue's inputs too)
        cooperative_fetch(sch, block, i, reduce_outer[-1], threads)
    if task.pattern.pad is not None:
        sch.compute_inline(sch.get_sblock(task.pattern.pad))
    annotate_unroll(sch, bx, config)
    sch.decompose_reduction(block, reduce_outer[0])
    check_launch(sch, task)
    return sch


def _lower_for_check(mod: Any) -> Any:
    """The scheduled module lowered as far as TVM's GPU code check needs (MetaSchedule's
    ``VerifyGPUCode`` pass list: buffers placed and flattened, virtual threads injected)."""
    import tvm
    from tvm.s_tir import transform as st
    from tvm.tirx import transform as tt

    passes = [st.LowerCrossThreadReduction(), st.LowerInitBlock(), st.PlanAndUpdateBufferAllocationLocation(),
              st.ConvertBlocksToOpaque(), st.LiftThreadBinding(), st.ManifestSharedMemoryLocalStage(),
              st.CompactBufferAllocation(), tt.StmtSimplify(), st.LowerAutoCopy(), st.UnifyThreadBinding(),
              st.LowerMatchBuffer(), st.InjectSoftwarePipeline(), st.LowerOpaqueBlock(), tt.FlattenBuffer(),
              tt.NarrowDataType(32), tt.StmtSimplify(), tt.VectorizeLoop(True), st.InjectVirtualThread(),
              st.InjectDoubleBuffer(), tt.StorageRewrite(), st.MergeSharedMemoryAllocations()]
    return tvm.transform.Sequential(passes)(mod)


def check_launch(sch: Any, task: "Task") -> None:
    """TVM's GPU code verification of the scheduled function against the device's limits: threads
    per block and shared memory per block (virtual threads are gone once lowered: the space's
    constraint bounds them), and 16-byte vectors; a :class:`TemplateError` when the device could
    not launch it."""
    from tvm.s_tir import analysis

    lim = limits(task)
    constraints = {"max_shared_memory_per_block": lim["max_shared_memory_per_block"],
                   "max_threads_per_block": lim["max_threads_per_block"], "max_vector_bytes": 16}
    if not analysis.verify_gpu_code(_lower_for_check(sch.mod)["main"], constraints):
        raise TemplateError(f"{task.name}: the schedule exceeds the device's launch limits "
                            f"({', '.join(f'{k} {v}' for k, v in constraints.items())})")
