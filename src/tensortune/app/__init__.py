"""The application layer: the workflows a user runs, returning dataclasses.

:func:`tune_model` and :func:`tune_op` tune under one :class:`~tensortune.budget.Budget`;
:func:`compile`, :func:`bench`, :func:`profile` and :func:`check_in_model` deploy, time and check a model on
a database of records; :func:`write_report` draws a run's report. The command line and the benchmarks are clients of this layer.
"""
from __future__ import annotations

from ..budget import Budget
from .deploy import bench, check_in_model, compile, load, profile, use_threads  # noqa: A004 - the workflow's name
from .report import write_report
from .tuning import (DEFAULT_MODEL_BUDGET, DEFAULT_OP_BUDGET, DEFAULT_SCHEDULER, TunedModel, make_measurer,
                     model_measure_options, tune_model, tune_op)

__all__ = ["Budget", "DEFAULT_MODEL_BUDGET", "DEFAULT_OP_BUDGET", "DEFAULT_SCHEDULER", "TunedModel", "bench",
           "check_in_model", "compile", "load", "make_measurer", "model_measure_options", "profile", "tune_model",
           "tune_op", "use_threads", "write_report"]
