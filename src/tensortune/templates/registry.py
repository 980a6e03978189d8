"""The template interface and its registry: a leaf module (it imports only the search space).

A template turns a task into a search space and applies one config of it to the task's
PrimFunc, giving the scheduled module to build. The built-in templates are listed below by
``"module:Class"`` and imported when first asked for; a plug-in adds its own with
:func:`register_template`. ``Task`` resolves its template here (or is handed one), so the
task and template packages do not import each other.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from ..errors import TensortuneError
from ..registry import Registry, RegistryError
from ..space import Config, ConfigSpace

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from ..task.task import Task


class TemplateError(TensortuneError, ValueError):
    """A template cannot schedule a task (unknown name, unsupported PrimFunc)."""


class Template(ABC):
    """Search space + schedule for a class of tasks."""

    name: str = ""
    #: Bumped whenever the space or the schedule changes: it is part of the workload key, so
    #: records of an older space (whose config indices mean other configs) are never reused.
    version: int = 1
    #: Split knobs whose outermost factors the schedule fuses into its parallel loop (the
    #: outer-loop parallelism Fasor's option pruning keeps at least as wide as the threads).
    parallel_splits: tuple[str, ...] = ()

    @abstractmethod
    def space(self, task: "Task") -> ConfigSpace:
        """The task's search space."""

    def schedule(self, task: "Task", config: Config) -> Any:
        """The ``tvm.s_tir.Schedule`` of ``config`` over the task's PrimFunc, its trace kept (the
        MetaSchedule export replays it); raises on an impossible config. A template overrides
        this or, keeping no trace, :meth:`apply`."""
        raise TemplateError(f"template {self.name!r} keeps no schedule trace (it defines apply only)")

    def apply(self, task: "Task", config: Config) -> "tvm.IRModule":
        """The scheduled module of ``config`` (its schedule's module); raises on an impossible config."""
        return self.schedule(task, config).mod

    def default_knobs(self, task: "Task", space: ConfigSpace) -> dict[str, Any] | None:
        """Knob values of a sane untuned schedule (None: the space's first valid config)."""
        return None

    def other_algorithm_knobs(self, task: "Task", space: ConfigSpace) -> list[dict[str, Any]]:
        """Knob values of untuned schedules that compute the task by another algorithm than the
        default's (Winograd beside the direct convolution). A tuner measures them beside the
        default in its first batch, so that measurement, not the default's rule, picks the
        algorithm for each task. None by default."""
        return []

    def key_version(self, task: "Task") -> int:
        """The :attr:`version` in ``task``'s workload key (a template whose space changed for some
        tasks only bumps theirs, and the others keep their records)."""
        return self.version

    def input_variant(self, task: "Task", config: Config) -> str:
        """A name for the inputs ``config``'s function takes when they differ from the task's own
        (a kernel transformed at compile time), else ``""``."""
        return ""

    def plain_config(self, task: "Task", config: Config) -> Config:
        """``config`` computing on the task's own inputs (for a call site that cannot transform them)."""
        return config

    def variant_inputs(self, task: "Task", variant: str, inputs: list[Any]) -> list[Any]:
        """The task's ``inputs`` (numpy arrays, None for one computed at run time) as the function of
        :meth:`input_variant` ``variant`` takes them (raises where it needs one that is None)."""
        return inputs


#: Built-in templates by name (classes, instantiated once on first use).
TEMPLATES: Registry[Any] = Registry("template", {
    "none": "tensortune.templates.base:NoScheduleTemplate",
    "generic": "tensortune.templates.generic:GenericTemplate",
    "attention": "tensortune.templates.attention:AttentionTemplate",
    "attention_bf16": "tensortune.templates.attention_bf16:AttentionBf16Template",
    "gemm": "tensortune.templates.gemm:GemmTemplate",
    "dense_pack": "tensortune.templates.dense_pack:DensePackTemplate",
    "conv2d": "tensortune.templates.conv2d:Conv2dTemplate",
    "conv2d_nchwc": "tensortune.templates.conv2d_nchwc:Conv2dNCHWcTemplate",
    "conv2d_nchwc_general": "tensortune.templates.conv2d_nchwc:Conv2dNCHWcGeneralTemplate",
    "conv2d_nchwc_bf16": "tensortune.templates.bf16:Conv2dNCHWcBf16Template",
    "conv2d_nchwc_general_bf16": "tensortune.templates.bf16:Conv2dNCHWcGeneralBf16Template",
    "dense_pack_bf16": "tensortune.templates.bf16:DensePackBf16Template",
    "batch_matmul_bf16": "tensortune.templates.bf16:BatchMatmulBf16Template",
    "conv2d_nchwc_amx": "tensortune.templates.amx:Conv2dNCHWcAmxTemplate",
    "conv2d_nchwc_general_amx": "tensortune.templates.amx:Conv2dNCHWcGeneralAmxTemplate",
    "attention_amx": "tensortune.templates.amx:AttentionAmxTemplate",
    "dense_pack_amx": "tensortune.templates.amx:DensePackAmxTemplate",
    "batch_matmul_amx": "tensortune.templates.amx:BatchMatmulAmxTemplate",
    "depthwise_conv2d": "tensortune.templates.depthwise:DepthwiseTemplate",
    "depthwise_conv2d_nchwc": "tensortune.templates.depthwise_nchwc:DepthwiseNCHWcTemplate",
    "depthwise_conv2d_nchwc_general": "tensortune.templates.depthwise_nchwc:DepthwiseNCHWcGeneralTemplate",
    "conv2d_cuda": "tensortune.templates.conv2d_cuda:Conv2dCudaTemplate",
    "depthwise_conv2d_cuda": "tensortune.templates.conv2d_cuda:DepthwiseCudaTemplate",
    "gemm_cuda": "tensortune.templates.gemm_cuda:GemmCudaTemplate",
    "generic_cuda": "tensortune.templates.generic_cuda:GenericCudaTemplate",
})

#: The built-in templates' names (plug-ins registered later are not among them).
BUILTIN_TEMPLATES = frozenset(TEMPLATES.names())

#: The CUDA template that takes an op's (CPU) default template's place on a ``cuda`` target. The
#: CPU-only layouts (packed dense, NCHWc) have none; a function without an op template gets dlight.
CUDA_TEMPLATES = {"gemm": "gemm_cuda", "conv2d": "conv2d_cuda", "depthwise_conv2d": "depthwise_conv2d_cuda",
                  "generic": "generic_cuda", "attention": "generic_cuda", "none": "none"}


def template_for(name: str, target_json: dict[str, Any]) -> str:
    """The template called ``name`` becomes on ``target_json``: itself on a CPU; on CUDA its
    :data:`CUDA_TEMPLATES` counterpart, itself when it is a CUDA template or a plug-in's, and a
    :class:`TemplateError` for a built-in CPU-only template."""
    if target_json.get("kind") != "cuda" or name.endswith("_cuda"):
        return name
    if name in CUDA_TEMPLATES:
        return CUDA_TEMPLATES[name]
    if name in BUILTIN_TEMPLATES:
        raise TemplateError(f"template {name!r} is for CPUs and has no CUDA counterpart")
    return name


#: The bf16 templates that have an AMX counterpart (:mod:`.amx` says which tasks take it).
AMX_TEMPLATES = ("conv2d_nchwc_bf16", "conv2d_nchwc_general_bf16", "dense_pack_bf16", "batch_matmul_bf16",
                 "attention_bf16")


def amx_counterpart(name: str, args: dict[str, int], target_json: dict[str, Any]) -> str:
    """The template a task of template ``name`` takes on ``target_json``: its AMX counterpart
    where the target has AMX-BF16 and the task's shape fits a tile (:func:`.amx.counterpart`),
    else ``name`` (the AMX module is imported only for the bf16 templates)."""
    if name not in AMX_TEMPLATES:
        return name
    from .amx import counterpart

    return counterpart(name, args, target_json)


def register_template(t: Template) -> Template:
    """Make the template instance ``t`` reachable by ``t.name`` (replacing an earlier one)."""
    TEMPLATES.register(t.name, t)
    return t


def get_template(name: str) -> Template:
    """The template called ``name`` (TemplateError naming the known ones)."""
    try:
        obj = TEMPLATES.get(name)
    except RegistryError as exc:
        raise TemplateError(str(exc)) from None
    if isinstance(obj, type):  # a built-in class: one instance from now on
        obj = register_template(obj())
    return obj
