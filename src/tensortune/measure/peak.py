"""The machine's ceiling: measured peak float32 FLOP/s and memory bandwidth, and the roofline.

On a CPU with avx512_bf16 the bf16 peak too: the same register-resident loop on ``vdpbf16ps``
(:func:`measure_bf16_peak`), the ceiling of the bf16 kernels; on one with AMX-BF16 the tiles' peak
(:func:`measure_amx_peak`), the ceiling of the AMX kernels.

- Peak FLOP/s: a register-resident kernel built with TVM. Each core (one parallel iteration)
  keeps ``acc`` independent vectors of ``lanes`` floats in registers and updates each
  ``acc = acc * a + b`` (one fused multiply-add, 2 FLOPs per lane) ``iters`` times; enough
  independent chains hide the FMA latency, so the loop runs at the FMA units' throughput.
  Several shapes are tried and the best median is the peak.
- Bandwidth: a parallel, vectorised copy of a buffer far larger than the caches (``COPY_MB``),
  counted as bytes read plus bytes written (the STREAM convention).
- Roofline: a kernel of arithmetic intensity I (FLOPs per byte of its buffers, each moved
  once) can reach at most ``min(peak, I x bandwidth)``; the report gives each best kernel's
  fraction of that.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from ..utils.placement import tvm_pinned

#: (accumulators, lanes) of the FMA kernels tried: 12 x 8 and 10 x 8 fit the 16 registers of AVX2
#: (16 x 8 spills three accumulators there and measures store-forwarding latency instead).
FMA_SHAPES = ((8, 16), (16, 16), (16, 8), (12, 8), (10, 8))
FMA_ITERS = 200_000
#: Size of each buffer of the copy kernel, in MiB (source and destination).
COPY_MB = 256
REPEAT = 7


def _fma_kernel(cores: int, acc: int, lanes: int, iters: int) -> Any:
    from tvm.script import tirx as T

    @T.prim_func
    def fma(a: T.Buffer((cores, acc, lanes), "float32"), out: T.Buffer((cores, acc, lanes), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(cores):
            reg = T.alloc_buffer((acc, lanes), "float32", scope="local")
            for j, v in T.grid(acc, lanes):
                reg[j, v] = a[p, j, v]
            for _k in T.serial(iters):
                for j in T.unroll(acc):
                    for v in T.vectorized(lanes):
                        reg[j, v] = reg[j, v] * T.float32(0.999999) + T.float32(1e-6)
            for j, v in T.grid(acc, lanes):
                out[p, j, v] = reg[j, v]

    return fma


def _dpbf16_kernel(cores: int, acc: int, iters: int) -> Any:
    """The bf16 counterpart of :func:`_fma_kernel`: ``acc`` chains of ``vdpbf16ps`` per core (16
    float32 sums of 2 bfloat16 products each: 64 FLOPs an instruction). The accumulators are a
    ``global``-scope buffer: LLVM keeps it in registers (a ``local`` one is stored back after every
    instruction, around the imported helper)."""
    from tvm.script import tirx as T

    from ..templates.bf16 import helper_ir

    helper, ir = helper_ir(16)

    @T.prim_func
    def dp(a: T.Buffer((cores, acc, 16), "float32"), w: T.Buffer((32,), "uint16"),
           out: T.Buffer((cores, acc, 16), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(cores):
            reg = T.alloc_buffer((acc, 16), "float32", scope="global")
            for j in T.unroll(acc):
                reg[j, T.ramp(0, 1, 16)] = a[p, j, T.ramp(0, 1, 16)]
            for _k in T.serial(iters):
                for j in T.unroll(acc):
                    with T.attr(0, "pragma_import_llvm", ir):
                        reg[j, T.ramp(0, 1, 16)] = T.call_pure_extern(
                            "float32x16", helper, reg[j, T.ramp(0, 1, 16)],
                            T.reinterpret(w[T.ramp(0, 1, 32)], dtype="int16x32"),
                            T.reinterpret(w[T.ramp(0, 1, 32)], dtype="int16x32"))
            for j in T.unroll(acc):
                out[p, j, T.ramp(0, 1, 16)] = reg[j, T.ramp(0, 1, 16)]

    return dp


#: Chains of the bf16 peak kernel tried (enough to hide the instruction's latency).
DPBF16_CHAINS = (8, 12, 16)


def measure_bf16_peak(threads: int) -> float:
    """Peak bf16 GFLOP/s (``vdpbf16ps`` on registers) with ``threads`` threads: the best median of
    :data:`DPBF16_CHAINS`. Needs a CPU with avx512_bf16."""
    from ..target import host_target_json, make_target

    target = make_target(host_target_json())
    best = 0.0
    for acc in DPBF16_CHAINS:
        secs = _time(_dpbf16_kernel(threads, acc, FMA_ITERS), target,
                     [np.random.rand(threads, acc, 16).astype("float32"), np.zeros(32, "uint16"),
                      np.zeros((threads, acc, 16), "float32")])
        best = max(best, 64.0 * threads * acc * FMA_ITERS / statistics.median(secs) / 1e9)
    return best


def _amx_kernel(cores: int, iters: int) -> Any:
    """The AMX counterpart: per core, four tiles of sums each updated ``iters`` times by
    ``tdpbf16ps`` (16 x 16 x 32 products: 16384 FLOPs an instruction), operands in tiles."""
    from tvm.script import tirx as T

    from ..templates.amx import PEAK_HELPER, peak_ir

    ir = peak_ir()

    @T.prim_func
    def amx(out: T.Buffer((cores, 1024), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(cores):
            with T.attr(0, "pragma_import_llvm", ir):
                T.evaluate(T.call_extern("void", PEAK_HELPER, T.address_of(out[p, 0]), T.int64(iters)))

    return amx


#: Steps of the AMX peak kernel (four instructions each).
AMX_ITERS = 200_000


def measure_amx_peak(threads: int) -> float:
    """Peak bf16 GFLOP/s on AMX tiles (``tdpbf16ps``, operands in tiles) with ``threads``
    threads. Needs a CPU with amx_bf16 and a target that has it."""
    from ..target import host_target_json, make_target

    secs = _time(_amx_kernel(threads, AMX_ITERS), make_target(host_target_json()),
                 [np.zeros((threads, 1024), "float32")])
    return 4 * 16384.0 * threads * AMX_ITERS / statistics.median(secs) / 1e9


def _copy_kernel(n: int, cores: int, lanes: int = 16) -> Any:
    from tvm.script import tirx as T

    chunk = n // cores

    @T.prim_func
    def copy(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(cores):
            for i in T.serial(chunk // lanes):
                for v in T.vectorized(lanes):
                    b[p * chunk + i * lanes + v] = a[p * chunk + i * lanes + v]

    return copy


def _time(func: Any, target: Any, args: list[np.ndarray], min_repeat_ms: int = 50) -> list[float]:
    import tvm

    ex = tvm.compile(tvm.IRModule({"main": func}), target=target)
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(x, dev) for x in args]
    timer = ex.mod.time_evaluator("main", dev, number=1, repeat=REPEAT, min_repeat_ms=min_repeat_ms)
    with tvm_pinned():  # placed as every model and candidate is (utils.placement)
        return list(timer(*tensors).results)


class CopyProbe:
    """The host's memory state between timed kernels: GB/s of copying ``mib`` MiB with numpy
    (bytes read plus written; each call is the median of ``repeat`` copies, about 0.1 s).

    On some hosts a state of the machine that lasts minutes changes the speed of some kernels
    and not of others, and the speed of a large copy with it. The re-measurement probes it around
    each round so that a report can tell the rounds of one state from those of another. The copy
    is numpy's, on one thread: a TVM-built parallel copy would leave a TVM thread pool spinning in
    the process that also times PyTorch, and stall PyTorch's kernels."""

    def __init__(self, mib: int = COPY_MB, repeat: int = 5) -> None:
        n = mib * 2**20 // 4
        self.src = np.random.default_rng(0).random(n, dtype=np.float32)
        self.dst = np.empty_like(self.src)
        self.repeat = repeat
        np.copyto(self.dst, self.src)  # first touch of the pages

    def __call__(self) -> float:
        """The copy's bandwidth now, GB/s."""
        secs = []
        for _ in range(self.repeat):
            t0 = time.perf_counter()
            np.copyto(self.dst, self.src)
            secs.append(time.perf_counter() - t0)
        return 2.0 * self.src.nbytes / statistics.median(secs) / 1e9


def measure_peak(threads: int) -> dict[str, Any]:
    """Peak GFLOP/s and bandwidth (GB/s) with ``threads`` threads (TVM_NUM_THREADS must match)."""
    from ..target import host_target_json, make_target

    target = make_target(host_target_json())
    fma = []
    for acc, lanes in FMA_SHAPES:
        secs = _time(_fma_kernel(threads, acc, lanes, FMA_ITERS), target,
                     [np.random.rand(threads, acc, lanes).astype("float32"), np.zeros((threads, acc, lanes), "float32")])
        flops = 2.0 * threads * acc * lanes * FMA_ITERS
        fma.append({"acc": acc, "lanes": lanes, "gflops_median": flops / statistics.median(secs) / 1e9,
                    "gflops_max": flops / min(secs) / 1e9})
    n = COPY_MB * 2**20 // 4
    n -= n % (threads * 16)
    secs = _time(_copy_kernel(n, threads), target, [np.full(n, 0.5, "float32"), np.zeros(n, "float32")],
                 min_repeat_ms=0)
    moved = 2.0 * n * 4
    from ..precision import CPU_FLAG, host_flags

    from ..templates.amx import CPU_FLAG as AMX_FLAG, target_has_amx

    bf16 = {"bf16_peak_gflops": measure_bf16_peak(threads)} if CPU_FLAG in host_flags() else {}
    if AMX_FLAG in host_flags() and target_has_amx(host_target_json()):
        bf16["amx_peak_gflops"] = measure_amx_peak(threads)
    return {"threads": threads, "peak_gflops": max(f["gflops_median"] for f in fma), "fma_kernels": fma, **bf16,
            "bandwidth_gbs": moved / statistics.median(secs) / 1e9, "bandwidth_gbs_max": moved / min(secs) / 1e9,
            "copy_mib": COPY_MB, "method": "TVM-built FMA kernel (registers only) and parallel vectorised copy; medians"}


def roofline(gflops: float, intensity: float, peak: dict[str, Any]) -> dict[str, float]:
    """The attainable GFLOP/s at ``intensity`` (FLOPs/byte) and the kernel's fraction of it."""
    bound = min(peak["peak_gflops"], intensity * peak["bandwidth_gbs"])
    return {"intensity": intensity, "attainable_gflops": bound, "fraction": gflops / bound if bound > 0 else 0.0}
