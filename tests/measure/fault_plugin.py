"""A template that injects real faults, loaded into the worker processes as a plug-in.

Its only knob, ``fault``, picks what the candidate does: build and compute correctly,
or fail in one of the ways real candidates fail (the template raises, TVM refuses to
compile, the builder hangs or dies, the kernel segfaults, aborts, hangs or computes a
wrong answer).
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import tvm
from tvm import tirx

from tensortune.space import Config, ConfigSpace
from tensortune.task.ops import OPS
from tensortune.templates import Template, register_template

FAULTS = ["none", "raise", "compile_error", "build_hang", "build_crash", "segfault", "abort", "run_hang", "wrong"]


def _prepend(func: Any, stmt: Any) -> Any:
    return func.with_body(tirx.SeqStmt([stmt, func.body]))


class FaultTemplate(Template):
    """Unscheduled op with an injected fault."""

    name = "faulty"

    def space(self, task: Any) -> ConfigSpace:
        s = ConfigSpace()
        s.define_choice("fault", FAULTS)
        return s

    def apply(self, task: Any, config: Config) -> Any:
        fault = config["fault"]
        f = task.prim_func()
        if fault == "raise":
            raise ValueError("injected: the template rejects this config")
        if fault == "compile_error":  # a free variable: TVM's well-formedness check refuses it
            f = _prepend(f, tirx.Evaluate(tirx.call_extern("int32", "abs", tirx.Var("free_var", "int32"))))
        elif fault == "build_hang":
            time.sleep(3600)
        elif fault == "build_crash":
            os.abort()
        elif fault == "segfault":
            f = _prepend(f, tirx.Evaluate(tirx.call_extern("int32", "raise", 11)))
        elif fault == "abort":
            f = _prepend(f, tirx.Evaluate(tirx.call_extern("int32", "abort")))
        elif fault == "run_hang":
            f = _prepend(f, tirx.Evaluate(tirx.call_extern("int32", "sleep", 3600)))
        elif fault == "wrong":  # the result gets one extra term: C = A x B + A[0,0] * B[0,0]
            from tvm import te

            from tensortune.task.ops import get_op

            A, B, C = get_op(task.op).compute(task.args)
            W = te.compute(C.shape, lambda i, j: C[i, j] + A[0, 0] * B[0, 0], name="W")
            f = te.create_prim_func([A, B, W])
        return tvm.IRModule({"main": f})


register_template(FaultTemplate())

#: Seconds the ``slow_reference`` op takes to compute its reference output (a task whose setup in a
#: fresh runner process is slow, as an unscheduled build of a model's function can be).
SLOW_REFERENCE_S = 2.0


def _slow_reference(args: dict[str, int], inputs: Any) -> Any:
    time.sleep(SLOW_REFERENCE_S)
    return OPS["matmul"].reference(args, inputs)


OPS["slow_reference"] = dataclasses.replace(OPS["matmul"], name="slow_reference", reference=_slow_reference)
