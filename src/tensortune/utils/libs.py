"""The same computation in the library a user would otherwise call (numpy, PyTorch), timed."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import numpy as np


def _median_time(fn: Callable[[], Any], min_time: float = 0.2, repeat: int = 7) -> float:
    fn()
    fn()
    n = 1
    while True:  # calibrate so one repeat lasts >= min_time / repeat
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time / repeat or n >= 1 << 16:
            break
        n *= 2
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


#: Ops with a library anchor: numpy's BLAS for the GEMMs, PyTorch for the convolutions.
GEMM_OPS = ("matmul", "dense", "batch_matmul")
CONV_OPS = ("conv2d", "depthwise_conv2d", "conv2d_nchwc", "depthwise_conv2d_nchwc")


def has_library(task: Any) -> bool:
    """True when :func:`library_latency` can time the task's op."""
    return task.op in GEMM_OPS + CONV_OPS


def library_latency(task: Any, threads: int) -> tuple[str, float]:
    """``(library name, median seconds)`` of the task's op in numpy (GEMMs) or PyTorch (convs)."""
    inputs = task.make_inputs(0)
    if task.op in GEMM_OPS:
        from threadpoolctl import threadpool_limits

        a, b = inputs
        fn = (lambda: a @ b.T) if task.op == "dense" else (lambda: np.matmul(a, b))  # BLAS reads B^T in place
        with threadpool_limits(threads):
            return "numpy", _median_time(fn)
    if task.op in CONV_OPS:
        import torch

        torch.set_num_threads(threads)
        a = task.args
        s, p = a["S"], a["P"]
        groups = a["C"] if task.op.startswith("depthwise") else 1
        if task.op.endswith("_nchwc"):  # the same convolution in PyTorch's own layout (NCHW, OIHW)
            ic, oc = (a["C"], a["C"]) if groups > 1 else (a["IC"], a["OC"])
            rng = np.random.default_rng(0)
            x = torch.from_numpy(rng.uniform(-1, 1, (1, ic, a["H"], a["W"])).astype(np.float32))
            w = torch.from_numpy(rng.uniform(-1, 1, (oc, ic // groups, a["K"], a["K"])).astype(np.float32))
        else:
            x, w = (torch.from_numpy(t) for t in inputs)
        with torch.no_grad():
            return "pytorch", _median_time(lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p, groups=groups))
    raise ValueError(f"no library reference for {task.op}")
