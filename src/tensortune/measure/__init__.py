"""Measurement: isolated parallel builds, one-at-a-time timed runs, errors as results.

The options and result types load with the package; the builder, runner and measurer (which
need TVM, and with it PyTorch) load on first use, so code that only handles results or options
(the command line's argument checks, the database) does not pay for TVM.
"""
from typing import Any

from .base import MeasurerBase
from .options import MeasureOptions
from .result import BuildResult, ErrorKind, MeasureInput, MeasureResult, WorkerStartError

_LAZY = {"LocalBuilder": ".measure", "LocalRunner": ".measure", "Measurer": ".measure", "RPCRunner": ".measure",
         "DeviceUnavailable": ".measure"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BuildResult", "DeviceUnavailable", "ErrorKind", "LocalBuilder", "LocalRunner", "MeasureInput",
           "MeasureOptions", "MeasureResult", "Measurer", "MeasurerBase", "RPCRunner", "WorkerStartError"]
