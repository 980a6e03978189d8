"""The soak benchmark's fault-injecting template: the real GEMM template, 1 candidate in N made faulty.

``soak_gemm`` is the ``gemm`` template's space with one more knob, ``inject``: ``none`` or the fault
the candidate carries (``segfault`` or ``abort``: the kernel crashes the runner; ``hang``: the kernel
sleeps for an hour; ``wrong``: the kernel computes C and then adds 1 to C[0, 0]). The schedule is
always the real GEMM schedule of the config's tiling knobs; a fault is injected into that scheduled
kernel, so faulty candidates build, load and run like any other.

Which candidates are faulty is a deterministic plan over the GEMM configs: a hash of the GEMM part
of the config index (the index without the ``inject`` knob) picks, for each GEMM config, the one
``inject`` value that is valid (a space constraint), so the valid space is exactly the GEMM space,
a fraction ``fault_rate`` of it faulty, in equal thirds crash (half segfault, half abort), hang and
wrong. A uniform tuner therefore meets a faulty candidate about once per ``1 / fault_rate``
candidates, and every record says in its own knobs which fault it carried.

The plan (the rate) matters only where configs are sampled: in the worker processes, which only
apply given configs, the module registers the template at the default rate. The soak registers
``SoakGemmTemplate(rate)`` in its own process before it makes the task.
"""
from __future__ import annotations

import hashlib
import struct
from typing import Any

from tensortune.space import Config, ConfigSpace
from tensortune.templates import Template, get_template, register_template

NAME = "soak_gemm"
#: The values of the ``inject`` knob; ``none`` first.
INJECT = ("none", "segfault", "abort", "hang", "wrong")
#: The error kind each injected fault must be recorded as.
EXPECTED_ERROR = {"segfault": "runtime", "abort": "runtime", "hang": "run_timeout", "wrong": "wrong_answer"}
#: The fault classes of the issue (crash, hang, wrong answer) by inject value.
FAULT_CLASS = {"segfault": "crash", "abort": "crash", "hang": "hang", "wrong": "wrong"}
DEFAULT_RATE = 0.1
#: Seconds a hanging kernel sleeps (the runner's timeout ends it long before).
HANG_S = 3600


def _unit(gemm_index: int, salt: bytes) -> float:
    """A uniform number in [0, 1) from a GEMM config index (stable across processes and runs)."""
    h = hashlib.blake2b(struct.pack("<q", gemm_index), digest_size=8, key=salt).digest()
    return int.from_bytes(h, "little") / 2.0**64


def planned_fault(gemm_index: int, rate: float) -> str:
    """The inject value of a GEMM config under a plan with ``rate`` faulty: ``none`` or a fault."""
    u = _unit(gemm_index, b"soak-plan")
    if u >= rate:
        return "none"
    third = min(2, int(3 * u / rate))  # equal thirds: crash, hang, wrong
    if third == 0:
        return "segfault" if _unit(gemm_index, b"soak-crash") < 0.5 else "abort"
    return ("hang", "wrong")[third - 1]


class SoakGemmTemplate(Template):
    """``gemm`` with faults injected into a deterministic ``rate`` of its configs."""

    name = NAME

    def __init__(self, rate: float = DEFAULT_RATE) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate {rate} is not within [0, 1]")
        self.rate = rate

    @property
    def gemm(self) -> Template:
        return get_template("gemm")

    def space(self, task: Any) -> ConfigSpace:
        s = self.gemm.space(task)
        gemm_size = len(s)
        s.define_choice("inject", INJECT)  # the last knob: index = gemm_index + gemm_size * inject
        rate = self.rate
        s.add_constraint("fault_plan", lambda c: c["inject"] == planned_fault(c.index % gemm_size, rate))
        return s

    def default_knobs(self, task: Any, space: ConfigSpace) -> dict[str, Any]:
        knobs = dict(self.gemm.default_knobs(task, space) or {})
        knobs["inject"] = "none"
        gemm_index = space.index_of(knobs) % (len(space) // len(INJECT))
        knobs["inject"] = planned_fault(gemm_index, self.rate)
        return knobs

    def apply(self, task: Any, config: Config) -> Any:
        import tvm
        from tvm import tirx

        from tensortune.task.task import param_buffers

        mod = self.gemm.apply(task, config)
        fault = config["inject"]
        if fault == "none":
            return mod
        f = mod["main"]
        if fault == "wrong":  # the real kernel, then one wrong element: C[0, 0] += 1
            out = param_buffers(f)[-1]
            zero = [0] * len(out.shape)
            bad = tirx.BufferStore(out, tirx.BufferLoad(out, zero) + tirx.const(1.0, out.dtype), zero)
            f = f.with_body(tirx.SeqStmt([f.body, bad]))
        else:  # a call into libc before the kernel: raise(SIGSEGV), abort() or sleep(HANG_S)
            call = {"segfault": ("raise", 11), "abort": ("abort",), "hang": ("sleep", HANG_S)}[fault]
            stmt = tirx.Evaluate(tirx.call_extern("int32", *call))
            f = f.with_body(tirx.SeqStmt([stmt, f.body]))
        return tvm.IRModule({"main": f})


def install(rate: float = DEFAULT_RATE) -> SoakGemmTemplate:
    """Register the template with this fault rate in this process (replacing the default one)."""
    t = SoakGemmTemplate(rate)
    register_template(t)
    return t


install()
