"""Generic template for any PrimFunc: inline what can be inlined, then tile the output block.

The last block (the function's output) gets its spatial loops reordered outside its
reduction loops, the innermost spatial loop split ``tile_inner`` = [outer, inner] with the
inner part vectorised, the leading spatial loops fused and parallelised (``parallel_depth``
of them), and the unroll knobs on the parallel loop.
"""
from __future__ import annotations

from typing import Any

from ..space import Config, ConfigSpace
from .base import Template, TemplateError, annotate_unroll, register_template, schedule_of, vectorize_own_loop


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


def _inline_all(sch: Any) -> None:
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    for b in blocks[:-1]:
        try:
            sch.compute_inline(b)
        except Exception:
            try:
                sch.reverse_compute_inline(b)
            except Exception:
                pass


class GenericTemplate(Template):
    """A space for PrimFuncs no op template knows."""

    name = "generic"

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
        kinds = _loop_kinds(sch, block)
        spatial = [lp for lp, _, r in kinds if not r]
        reduce = [lp for lp, _, r in kinds if r]
        if not spatial:
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
        if reduce:  # last: vectorize/parallel need the block whole
            sch.decompose_reduction(block, reduce[0])
        return sch.mod


register_template(GenericTemplate())
