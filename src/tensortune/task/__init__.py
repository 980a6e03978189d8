"""Tasks and the ops they come from."""
from .ops import OPS, OpError, get_op
from .task import Task

__all__ = ["OPS", "OpError", "Task", "get_op"]
