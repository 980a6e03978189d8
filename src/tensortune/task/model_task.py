"""One task of a model: the task, how often an inference calls it, and the model's functions it covers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .task import Task


@dataclass
class ModelTask:
    """One task of a model: the task, its weight (calls per inference) and its functions."""

    task: Task
    weight: int
    funcs: list[str] = field(default_factory=list)  # Relax names of the functions it covers
    tunable: bool = True  # False: a fixed schedule only (multi-output function)
    note: str = ""  # why a function got the generic template or a fixed schedule

    @property
    def kernel_class(self) -> str:
        """The task's kernel class (``conv2d-add-relu``, ``layer-norm`` ...)."""
        return self.task.kernel_class

    def to_json(self) -> dict[str, Any]:
        """A row of ``tensortune tasks --json``."""
        return {"workload_key": self.task.workload_key, "name": self.task.name, "kernel_class": self.kernel_class,
                "template": self.task.template_name, "weight": self.weight, "flops": self.task.flops,
                "funcs": self.funcs, "tunable": self.tunable, "note": self.note}
