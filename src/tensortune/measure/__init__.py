"""Measurement: isolated parallel builds, one-at-a-time timed runs, errors as results."""
from .measure import LocalBuilder, LocalRunner, MeasureInput, Measurer
from .options import MeasureOptions
from .pool import WorkerStartError
from .result import BuildResult, ErrorKind, MeasureResult

__all__ = ["BuildResult", "ErrorKind", "LocalBuilder", "LocalRunner", "MeasureInput", "MeasureOptions", "MeasureResult", "Measurer", "WorkerStartError"]
