"""Generic template for any PrimFunc: inline what can be inlined, then tile the output block.

The last block (the function's output) gets its spatial loops reordered outside its
reduction loops, the innermost spatial loop split ``tile_inner`` = [outer, inner] with the
inner part vectorised, the leading spatial loops fused and parallelised (``parallel_depth``
of them), and the unroll knobs on the parallel loop. Blocks that cannot be inlined (the
row reductions of softmax and layer norm, a pooling window's padding) are computed inside
the output's parallel loop where their region allows it, else parallelised on their own,
so no stage of a model is left as naive serial loops.
"""
from __future__ import annotations

from typing import Any

from ..space import Config, ConfigSpace
from .base import Template, TemplateError, annotate_unroll, schedule_of, vectorize_own_loop


def _main_block(sch: Any) -> Any:
    blocks = sch.get_child_blocks(sch.get_sblock("root")) if _has_root(sch) else []
    if not blocks:
        raise TemplateError("the PrimFunc has no schedulable block")
    return blocks[-1]


def _has_root(sch: Any) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:
        return False


def _loop_kinds(sch: Any, block: Any) -> list[tuple[Any, int, bool]]:
    """(loop, extent, is_reduction) for each loop above ``block``."""
    br = sch.get(block)
    out = []
    loops = sch.get_loops(block)
    for lp, iv in zip(loops, br.iter_vars):
        out.append((lp, int(sch.get(lp).extent), int(iv.iter_type) == 2))
    return out


#: An elementwise block read by several consumers stays materialised when its expression is
#: longer than this (printed characters): inlining would compute e.g. softmax's exponential once
#: in the row sum (a scalar reduction loop) and again in the normalisation.
SHARED_EXPR_CHARS = 400


def _is_reduction(sch: Any, block: Any) -> bool:
    return any(int(iv.iter_type) == 2 for iv in sch.get(block).iter_vars)


def _expensive_shared(sch: Any, block: Any) -> bool:
    return len(sch.get_consumers(block)) > 1 and not _is_reduction(sch, block) \
        and len(str(sch.get(block).body)) > SHARED_EXPR_CHARS


def _inline_all(sch: Any) -> None:
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    for b in blocks[:-1]:
        if _expensive_shared(sch, b):
            continue
        try:
            sch.compute_inline(b)
        except Exception:
            if not _sole_consumer(sch, b):
                continue
            try:
                sch.reverse_compute_inline(b)
            except Exception:
                pass


def _sole_consumer(sch: Any, block: Any) -> bool:
    """Whether ``block`` is the only consumer of each of its producers. TVM 0.27's
    ``reverse_compute_inline`` does not check it: inlining one of a split's outputs into the
    shared producer drops the buffer the other outputs still read, and lowering fails later
    (FlattenBuffer: "used before its definition")."""
    block_sref = sch.get(block)
    return all(len(cs) == 1 and sch.get(cs[0]).same_as(block_sref)
               for cs in (sch.get_consumers(p) for p in sch.get_producers(block)))


def _parallel_own(sch: Any, block: Any) -> None:
    """Fixed schedule of a stage that stays separate: its leading spatial loops fused and
    parallel, its innermost loop vectorised when it is spatial."""
    kinds = _loop_kinds(sch, block)
    lead = []
    for lp, _, red in kinds:
        if red:
            break
        lead.append(lp)
    if len(kinds) > len(lead) or len(lead) < 2:  # keep a spatial innermost loop to vectorise
        outer = lead[: min(len(lead), 3)]
    else:
        outer = lead[:-1][:3]
    if outer:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    if not kinds[-1][2] and len(lead) > len(outer) and kinds[-1][1] <= 1024:
        try:
            sch.vectorize(sch.get_loops(block)[-1])
        except Exception:  # noqa: BLE001 - not vectorisable (a gather, a branch): leave it scalar
            pass


def _attach_producers(sch: Any, producers: list[Any], loop: Any | None) -> None:
    """Compute each remaining producer under ``loop`` (consumers first), else on its own."""
    for b in reversed(producers):
        try:
            if loop is None:
                raise ValueError("no loop to attach to")
            sch.compute_at(b, loop)
            _vectorize_spatial_inner(sch, b, loop)
        except Exception:  # noqa: BLE001 - region not computable per iteration
            _parallel_own(sch, b)


def _vectorize_spatial_inner(sch: Any, block: Any, anchor: Any) -> None:
    """Vectorise an attached elementwise producer's own innermost loop (not a reduction's)."""
    if _is_reduction(sch, block):
        return
    try:
        vectorize_own_loop(sch, block, anchor)
    except Exception:  # noqa: BLE001 - a gather or a branch: stays scalar
        pass


class GenericTemplate(Template):
    """A space for PrimFuncs no op template knows."""

    name = "generic"
    version = 2

    def _shape(self, task: Any) -> list[tuple[int, bool]]:
        sch = schedule_of(task)
        _inline_all(sch)
        block = _main_block(sch)
        if len(sch.get_loops(block)) != len(sch.get(block).iter_vars):
            raise TemplateError("the output block's loops do not match its iteration variables")
        return [(e, r) for _, e, r in _loop_kinds(sch, block)]

    def space(self, task: Any) -> ConfigSpace:
        shape = self._shape(task)
        spatial = [e for e, r in shape if not r]
        s = ConfigSpace()
        inner = spatial[-1] if spatial else 1
        s.define_split("tile_inner", inner, 2, policy="power2", max_innermost=64)
        s.define_choice("parallel_depth", list(range(0, min(len(spatial) - 1, 3) + 1)) if spatial else [0])
        s.define_unroll()
        return s

    def default_knobs(self, task: Any, space: ConfigSpace) -> dict[str, Any]:
        ents = space.knob("tile_inner").entities
        depths = space.knob("parallel_depth").entities
        return {
            "tile_inner": max(ents, key=lambda e: (e[1] <= 16, e[1])),
            "parallel_depth": max(depths),
            "auto_unroll_max_step": 16,
            "unroll_explicit": 1,
        }

    def apply(self, task: Any, config: Config) -> Any:
        sch = schedule_of(task)
        _inline_all(sch)
        block = _main_block(sch)
        producers = list(sch.get_child_blocks(sch.get_sblock("root")))[:-1]
        kinds = _loop_kinds(sch, block)
        spatial = [lp for lp, _, r in kinds if not r]
        reduce = [lp for lp, _, r in kinds if r]
        if not spatial:
            _attach_producers(sch, producers, None)
            return sch.mod
        outer_sp, last = spatial[:-1], spatial[-1]
        lo, li = sch.split(last, list(config["tile_inner"]))
        sch.reorder(*outer_sp, lo, *reduce, li)
        depth = config["parallel_depth"]
        if reduce:
            acc = sch.cache_write(block, 0, "global")
            sch.reverse_compute_at(acc, lo)
            vectorize_own_loop(sch, acc, lo)
        sch.vectorize(li)
        par_loops = (outer_sp + [lo])[:depth] if depth else []
        top = sch.fuse(*par_loops) if len(par_loops) > 1 else (par_loops[0] if par_loops else sch.get_loops(block)[0])
        if par_loops:
            sch.parallel(top)
        annotate_unroll(sch, top, config)
        _attach_producers(sch, producers, top if par_loops else None)
        if reduce:  # last: vectorize/parallel need the block whole
            sch.decompose_reduction(block, reduce[0])
        return sch.mod

