"""The CUDA schedule of every function no op template owns (elementwise chains, softmax,
normalisations, pooling, layout changes of a fused model): TVM's ``dlight`` GPU rules.

The rules are tried in order and the first that matches schedules the function (a matmul's
tensor-core-free tiling, GEMV, row reductions, general reductions, and the fallback that binds any
function's spatial loops to blocks and threads). The space has one config: the rules choose.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..space import Config, ConfigSpace
from ..target import make_target
from .base import Template
from .gpu import check_launch
from .registry import TemplateError

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task


def dlight_rules() -> list[Any]:
    """dlight's GPU rules, most specific first (:class:`Fallback` matches every function)."""
    from tvm.s_tir.dlight import gpu

    return [gpu.Matmul(), gpu.GEMV(), gpu.Reduction(), gpu.GeneralReduction(), gpu.Fallback()]


class GenericCudaTemplate(Template):
    """Any PrimFunc on an NVIDIA GPU, scheduled by the first dlight rule that applies."""

    name = "generic_cuda"

    def space(self, task: Task) -> ConfigSpace:
        return ConfigSpace()

    def schedule(self, task: Task, config: Config) -> Any:
        func = task.prim_func()
        target = make_target(task.target_json)
        for rule in dlight_rules():
            with target:
                found = rule.apply(func, target, False)
            if found is None:
                continue
            sch = found[0] if isinstance(found, list) else found
            check_launch(sch, task)
            return sch
        raise TemplateError(f"{task.name}: no dlight GPU rule schedules this function")
