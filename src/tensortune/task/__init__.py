"""Tasks and the ops they come from."""
from .ops import OPS, OpError, get_op
from .task import Task
from .model_task import ModelTask

__all__ = ["ModelTask", "OPS", "OpError", "Task", "get_op"]
