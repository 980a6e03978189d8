"""Where a compiled model's time goes: every fused function timed inside the model.

``relax.VirtualMachine.set_instrument`` calls a hook before and after every function call of
an inference; the profile times each call, sums a function's calls per inference, and takes
the median over ``runs`` inferences. Each function is shown next to its task's stored
latency (what tuning measured alone; the tuner's estimate of it), its GFLOP/s and GB/s (its
buffers' bytes over its time) and its share of the roof that bounds it: the machine's measured
peak for a compute-bound function, its measured copy bandwidth for a memory-bound one
(:mod:`tensortune.measure.peak`), and the model's plain latency
(no hook) next to the sum of the functions, so a user sees both where time goes and where the
tuning estimates lie.
"""
from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from ..utils.placement import tvm_pinned

#: Inferences profiled (medians over them) and timed without the hook.
DEFAULT_RUNS = 10
WARMUP = 2
#: Name of the row that gathers the VM's own builtins (allocation, views, ...).
RUNTIME_ROW = "(vm runtime: allocation, views)"


@dataclass
class FuncProfile:
    """One fused function (or the runtime row) in the model."""

    name: str
    calls: int  # calls per inference
    ms: float  # median milliseconds per inference, all its calls
    task: str = ""
    kernel_class: str = ""
    source: str = ""  # one of tensortune.models.compile.SOURCES
    flops: float = 0.0  # per call (a Winograd function's: the direct convolution's, so GFLOP/s compare)
    stored_ms: float | None = None  # the task's best stored latency, per call (tuned only)
    bytes: float = 0.0  # of its buffers per call (the least memory it moves)
    variant: str = ""  # the inputs its config transforms at compile time (winograd4), else ""
    template: str = ""  # the template that scheduled it

    @property
    def ms_per_call(self) -> float:
        """Median milliseconds of one call."""
        return self.ms / max(self.calls, 1)

    @property
    def gflops(self) -> float:
        """Throughput inside the model."""
        return self.flops / (self.ms_per_call * 1e6) if self.ms_per_call > 0 and self.flops else 0.0

    @property
    def estimate_ratio(self) -> float | None:
        """In-model time over the stored (tuning) latency: > 1 when tuning's estimate was optimistic."""
        return self.ms_per_call / self.stored_ms if self.stored_ms else None

    @property
    def gbs(self) -> float:
        """Memory throughput inside the model: its buffers' bytes over its time (GB/s)."""
        return self.bytes / (self.ms_per_call * 1e6) if self.ms_per_call > 0 and self.bytes else 0.0

    @property
    def intensity(self) -> float:
        """FLOPs per byte of its buffers."""
        return self.flops / self.bytes if self.bytes else 0.0

    def bound(self, peak: float | None, bandwidth: float | None) -> str:
        """``compute`` or ``memory``: which roof limits it (its intensity against the machine's ridge)."""
        if not peak or not bandwidth:
            return "compute" if self.flops and self.intensity > 4.0 else "memory"
        return "compute" if self.intensity * bandwidth >= peak else "memory"

    def roof_share(self, peak: float | None, bandwidth: float | None) -> float | None:
        """Its share of the roof that limits it: GFLOP/s of the peak, or GB/s of the copy bandwidth."""
        if self.bound(peak, bandwidth) == "compute":
            return self.gflops / peak if peak and self.flops else None
        return self.gbs / bandwidth if bandwidth and self.bytes else None

    def to_json(self, peak: float | None, bandwidth: float | None = None) -> dict[str, Any]:
        """JSON row."""
        d = dict(self.__dict__)
        d.update(ms_per_call=self.ms_per_call, gflops=self.gflops, estimate_ratio=self.estimate_ratio,
                 peak_share=self.gflops / peak if peak else None, gbs=self.gbs,
                 bandwidth_share=self.gbs / bandwidth if bandwidth and self.bytes else None,
                 bound=self.bound(peak, bandwidth), roof_share=self.roof_share(peak, bandwidth))
        return d


@dataclass
class ModelProfile:
    """A model's profile: its functions, its plain latency and the machine's peak."""

    model: str
    threads: int
    total_ms: float  # median latency of a plain inference (no hook)
    funcs: list[FuncProfile] = field(default_factory=list)
    peak_gflops: float | None = None
    cpu_model: str = ""
    layout: str = ""
    runs: int = DEFAULT_RUNS
    bandwidth_gbs: float | None = None  # the machine's measured copy bandwidth
    bf16_peak_gflops: float | None = None  # the measured vdpbf16ps peak (CPUs with avx512_bf16)
    amx_peak_gflops: float | None = None  # the measured tdpbf16ps peak (CPUs with amx_bf16)

    def peak_of(self, f: FuncProfile) -> float | None:
        """The compute roof of ``f``: the AMX peak for a kernel on AMX tiles, the bf16 peak for
        one on the bf16 dot product (when measured), else the f32 one."""
        from ..task.ops_bf16 import on_dot_product
        from ..templates.amx import is_amx_template

        if is_amx_template(f.template) and self.amx_peak_gflops:
            return self.amx_peak_gflops
        if on_dot_product(f.kernel_class) and self.bf16_peak_gflops:
            return self.bf16_peak_gflops
        return self.peak_gflops

    @property
    def sum_ms(self) -> float:
        """Sum of the functions' medians (hooked inferences: a few microseconds per call more)."""
        return sum(f.ms for f in self.funcs)

    def below(self, share: float, min_mflops: float = 50.0) -> list[FuncProfile]:
        """Kernels of more than ``min_mflops`` per call that run under ``share`` of the peak."""
        if not self.peak_gflops:
            return []
        return [f for f in self.funcs if f.flops > min_mflops * 1e6 and f.gflops < share * (self.peak_of(f) or 0.0)]

    def memory_below(self, share: float, min_ms: float = 0.2) -> list[FuncProfile]:
        """Memory-bound functions of more than ``min_ms`` an inference that move their buffers at
        under ``share`` of the measured copy bandwidth."""
        bw = self.bandwidth_gbs
        if not bw:
            return []
        return [f for f in self.funcs if f.ms > min_ms and f.bytes and f.bound(self.peak_of(f), bw) == "memory"
                and f.gbs < share * bw]

    def to_json(self) -> dict[str, Any]:
        """JSON form (``tensortune profile --json``)."""
        return {"model": self.model, "threads": self.threads, "cpu_model": self.cpu_model, "runs": self.runs,
                "total_ms": self.total_ms, "sum_ms": self.sum_ms, "peak_gflops": self.peak_gflops, "layout": self.layout,
                "bf16_peak_gflops": self.bf16_peak_gflops, "amx_peak_gflops": self.amx_peak_gflops,
                "bandwidth_gbs": self.bandwidth_gbs,
                "funcs": [f.to_json(self.peak_of(f), self.bandwidth_gbs) for f in self.funcs]}

    def table(self, top: int | None = None) -> str:
        """The report as text, heaviest function first."""
        peak, bw = self.peak_gflops, self.bandwidth_gbs
        head = (f"{self.model}: medians of {self.runs} inferences, {self.threads} threads, {self.cpu_model or 'CPU ?'}"
                + (f", measured peak {peak:.1f} GFLOP/s" if peak else "")
                + (f" (bf16 {self.bf16_peak_gflops:.1f}" if self.bf16_peak_gflops else "")
                + (f", AMX {self.amx_peak_gflops:.1f}" if self.bf16_peak_gflops and self.amx_peak_gflops else "")
                + (")" if self.bf16_peak_gflops else "")
                + (f", copy {bw:.1f} GB/s" if bw else ""))
        lines = [head, self.layout] if self.layout else [head]
        lines.append(f"{'ms/inf':>8} {'share':>6} {'calls':>5} {'ms/call':>8} {'stored':>8} {'GFLOP/s':>8} {'GB/s':>6} "
                     f"{'%roof':>9}  {'source':8} function")
        rows = self.funcs if top is None else self.funcs[:top]
        for f in rows:
            stored = f"{f.stored_ms:8.3f}" if f.stored_ms else f"{'-':>8}"
            gf = f"{f.gflops:8.1f}" if f.flops else f"{'-':>8}"
            gb = f"{f.gbs:6.1f}" if f.bytes else f"{'-':>6}"
            roof = f.roof_share(self.peak_of(f), bw)
            pk = f"{roof:4.0%} {f.bound(self.peak_of(f), bw)[:3]}" if roof is not None else f"{'-':>9}"
            share = f.ms / self.sum_ms if self.sum_ms else 0.0
            lines.append(f"{f.ms:8.3f} {share:6.1%} {f.calls:5d} {f.ms_per_call:8.3f} {stored} {gf} {gb} {pk:>9}  "
                         f"{f.source:8} {f.name}" + (f"  [{f.task}]" if f.task else "")
                         + (f"  {f.variant}: direct-conv FLOPs" if f.variant else ""))
        if top is not None and len(self.funcs) > top:
            rest = self.funcs[top:]
            lines.append(f"{sum(f.ms for f in rest):8.3f} ms in {len(rest)} more functions")
        lines.append(f"model {self.total_ms:.3f} ms per inference; sum of functions {self.sum_ms:.3f} ms "
                     f"({self.sum_ms / self.total_ms:.2f}x: hook overhead and time between calls)" if self.total_ms else "")
        stored = [f for f in self.funcs if f.estimate_ratio]
        if stored:
            off = sorted(stored, key=lambda f: -abs((f.estimate_ratio or 1.0) - 1.0))[:3]
            lines.append("stored estimates furthest off (in model / tuned alone): "
                         + ", ".join(f"{f.name} {f.estimate_ratio:.2f}x" for f in off))
        return "\n".join(line for line in lines if line)


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3 if samples else 0.0


def function_times(compiled: Any, run: Callable[[], None], runs: int) -> list[dict[str, list[float]]]:
    """Per inference (``runs`` calls of ``run``, an inference of ``compiled``): the seconds of each
    call of every function the VM called, by name (the VM's instrument hook around each call)."""
    starts: dict[str, list[float]] = defaultdict(list)
    per_run: list[dict[str, list[float]]] = []

    def hook(func: Any, name: str, before_run: bool, ret: Any, *args: Any) -> None:
        now = time.perf_counter()
        if before_run:
            starts[name].append(now)
        elif starts[name]:
            per_run[-1][name].append(now - starts[name].pop())

    vm = compiled.vm
    vm.set_instrument(hook)
    try:
        for _ in range(runs):
            per_run.append(defaultdict(list))
            run()
    finally:
        vm.set_instrument(lambda *a: None)
        if hasattr(compiled, "reset_vm"):
            compiled.reset_vm()  # later inferences run on a VM with no instrument at all, not a no-op one
    return per_run


def profile_compiled(compiled: Any, inputs: list[Any] | None = None, runs: int = DEFAULT_RUNS, threads: int = 0,
                     peak_gflops: float | None = None, layout: str = "", bandwidth_gbs: float | None = None,
                     bf16_peak_gflops: float | None = None, amx_peak_gflops: float | None = None) -> ModelProfile:
    """Profile a :class:`~tensortune.models.compile.CompiledModel` on ``inputs`` (default: the
    model's example inputs). TVM_NUM_THREADS must already be set to ``threads``."""
    from ..target import cpu_model

    model = compiled.model
    f = compiled.callable(inputs if inputs is not None else model.example_inputs)
    with tvm_pinned():  # one placement for the whole profile (utils.placement), not one per call
        for _ in range(WARMUP):
            f()
        plain = []
        for _ in range(runs):
            t0 = time.perf_counter()
            f()
            plain.append(time.perf_counter() - t0)
        per_run = function_times(compiled, f, runs)
    names = {n for r in per_run for n in r}
    task_of = {fn: c for c in compiled.choices for fn in c.funcs}
    rows: dict[str, FuncProfile] = {}
    runtime = FuncProfile(RUNTIME_ROW, 0, 0.0)
    for n in names:
        totals = [sum(r.get(n, [])) for r in per_run]
        calls = statistics.median(len(r.get(n, [])) for r in per_run)
        c = task_of.get(n)
        if c is None:
            if n.startswith("vm.builtin") or n.startswith("vm."):
                runtime.calls += int(calls)
                runtime.ms += _median_ms(totals)
                continue
            rows[n] = FuncProfile(n, int(calls), _median_ms(totals))
            continue
        rows[n] = FuncProfile(n, int(calls), _median_ms(totals), c.task, c.kernel_class, c.source, c.flops,
                              c.best_ms, c.bytes, c.variant, c.template)
    funcs = sorted(rows.values(), key=lambda r: -r.ms)
    if runtime.calls:
        funcs.append(runtime)
    if not layout and compiled.layout is not None:
        layout = compiled.layout.summary()
    return ModelProfile(model.name, threads, _median_ms(plain), funcs, peak_gflops, cpu_model(), layout, runs,
                        bandwidth_gbs, bf16_peak_gflops, amx_peak_gflops)

