"""Hardware features of a machine as a tuning target sees it (inputs of the Fasor cost model).

A :class:`HardwareProfile` has two parts:

- :class:`HardwareSpec`, the machine's explicit specs: CPU vendor/family/model, LLVM cpu,
  clock, thread count, float32 SIMD width, memory and caches, read from ``/proc`` and
  ``/sys`` (:func:`read_spec`; any unreadable file gives a default, never an exception).
- a *signature*: the throughput of a small fixed set of programs (:data:`SIGNATURE_NAMES`),
  built with TVM for the profile's target and timed with its thread count. A learned model
  reads their log2, which tells machines apart where the specs do not (memory system,
  gather and transcendental speed, how well LLVM schedules for the cpu).

The roofline ceilings a Fasor compute / memory score divides by are the ``fma`` and
``copy_dram`` throughputs (:attr:`HardwareProfile.peak_gflops`, :attr:`~HardwareProfile.bandwidth_gbs`).

TVM's runtime thread pool reads ``TVM_NUM_THREADS`` once, so a profile is measured in a fresh
subprocess with that variable set (:func:`measure_profile`, running this module with
``--measure``); :func:`profile_for` caches profiles as JSON files.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import TensortuneError
from ..utils.cache import CACHE_ENV  # noqa: F401  (profiles go to the cache root's ``hardware``)
from ..utils.child import module_command

log = logging.getLogger(__name__)

#: Format of :meth:`HardwareProfile.to_json` (a cached profile of another format is re-measured).
FORMAT = "tensortune-hardware/1"
#: Root of the ``/proc`` and ``/sys`` trees :func:`read_spec` reads (tests point it elsewhere).
DEFAULT_ROOT = "/"
#: Defaults of unreadable specs.
DEFAULT_CACHE_LINE = 64
#: Vendors one-hot encoded by :meth:`HardwareSpec.vector` (anything else: "other").
VENDORS = ("AuthenticAMD", "GenuineIntel")
#: LLVM cpus (name prefixes) with 256-bit float32 SIMD (AVX or AVX2) and no AVX-512 that
#: :func:`~tensortune.templates.base.target_lanes` would use; see :func:`vector_bits_of`.
AVX_CPUS = ("sandybridge", "ivybridge", "haswell", "broadwell", "skylake", "cannonlake", "alderlake",
            "raptorlake", "meteorlake", "arrowlake", "lunarlake", "pantherlake", "gracemont", "sierraforest",
            "grandridge", "clearwaterforest", "knl", "knm", "core-avx", "corei7-avx", "znver1", "znver2",
            "znver3", "bdver", "btver2", "x86-64-v3", "x86-64-v4")

#: Explicit-spec features, in the order of :meth:`HardwareSpec.vector`.
SPEC_FEATURE_NAMES: tuple[str, ...] = (
    "spec_vendor_amd", "spec_vendor_intel", "spec_vendor_other", "spec_family", "spec_model",
    "spec_frequency_mhz", "spec_cores", "spec_vector_bits", "spec_memory_gb", "spec_cache_line",
    "spec_l1d_kb", "spec_l2_kb", "spec_l3_kb")

#: The signature programs, in order (units: ``fma`` and ``matmul`` GFLOP/s; ``copy_*`` GB/s read +
#: written; ``strided`` GB/s of gathered floats; ``scalar_reduce`` G adds/s; ``exp`` G elements/s).
SIGNATURE_NAMES: tuple[str, ...] = ("fma", "copy_l1", "copy_l2", "copy_l3", "copy_dram", "strided",
                                    "scalar_reduce", "matmul", "exp")
#: The signature's features (log2 of each throughput), in the order of :meth:`HardwareProfile.vector`.
SIGNATURE_FEATURE_NAMES: tuple[str, ...] = tuple(f"sig_{n}" for n in SIGNATURE_NAMES)
#: All hardware features, in the order of :meth:`HardwareProfile.vector`.
HW_FEATURE_NAMES: tuple[str, ...] = SPEC_FEATURE_NAMES + SIGNATURE_FEATURE_NAMES

#: FMA kernel shape (independent accumulators, lanes) per float32 SIMD width: enough chains to
#: hide the FMA latency, few enough to stay in registers (32 zmm; 16 ymm / xmm).
FMA_SHAPE = {512: (16, 16), 256: (12, 8), 128: (12, 4)}
FMA_ITERS = 100_000
#: Working sets of the copy programs, bytes (source + destination). ``copy_l1`` and ``copy_l2``
#: are per thread (private caches); ``copy_l3`` and ``copy_dram`` are shared by all threads.
COPY_WORKING_SETS = {"copy_l1": (16 * 2**10, True), "copy_l2": (256 * 2**10, True),
                     "copy_l3": (4 * 2**20, False), "copy_dram": (128 * 2**20, False)}
#: Bytes each thread copies per call of a cache-resident copy (the working set is swept again
#: and again), so that the call's overhead is negligible.
COPY_CALL_BYTES = 16 * 2**20
#: Gather: every STRIDE-th float of a SOURCE-byte buffer.
STRIDED_SOURCE_BYTES = 8 * 2**20
STRIDE = 16
#: Serial sum: each thread sums REDUCE_FLOATS floats (L1-resident) REDUCE_REPS times.
REDUCE_FLOATS, REDUCE_REPS = 4096, 64
#: Matmul size (n x n x n) and its register tile (rows x vectors).
MATMUL_N, MATMUL_TILE = 128, (4, 2)
EXP_FLOATS = 2**20
#: Each repeat lasts at least this long (``time_evaluator``'s ``min_repeat_ms``); medians of
#: ``peak.REPEAT`` repeats.
MIN_REPEAT_MS = 10
#: Seconds :func:`measure_profile` waits for its subprocess.
MEASURE_TIMEOUT = 120.0


class HardwareError(TensortuneError, RuntimeError):
    """A hardware profile that could not be measured (one-line message)."""


# ---------------------------------------------------------------------------------------------
# Explicit specs


def vector_bits_of(target_json: dict[str, Any]) -> int:
    """The float32 SIMD width (bits) a target's code may use, from its ``mcpu``.

    512 when :func:`~tensortune.templates.base.target_lanes` gives 16 lanes (the AVX-512 cpus
    the templates vectorise for); 256 for the other AVX/AVX2 cpus (:data:`AVX_CPUS`, including
    ``x86-64-v4``, whose AVX-512 the templates do not use); 128 (SSE) for ``x86-64``,
    ``x86-64-v2``, ``generic`` and anything unknown.
    """
    from ..templates.base import target_lanes

    if target_lanes(target_json) == 16:
        return 512
    mcpu = str(target_json.get("mcpu", ""))
    return 256 if any(mcpu.startswith(c) for c in AVX_CPUS) else 128


@dataclass(frozen=True)
class HardwareSpec:
    """The explicit specs of a machine as a tuning target sees it (see :func:`read_spec`)."""

    cpu_model: str
    vendor: str
    family: int
    model: int
    llvm_cpu: str
    frequency_mhz: float
    cores: int
    vector_bits: int
    memory_gb: float
    cache_line: int
    l1d_kb: int
    l2_kb: int
    l3_kb: int

    def vector(self) -> np.ndarray:
        """float32 features named by :data:`SPEC_FEATURE_NAMES`: the vendor one-hot over
        (AuthenticAMD, GenuineIntel, other), then log2(1 + x) of family, model, frequency,
        cores, vector bits, memory, cache line and cache sizes."""
        onehot = [float(self.vendor == v) for v in VENDORS]
        onehot.append(float(self.vendor not in VENDORS))
        nums = [self.family, self.model, self.frequency_mhz, self.cores, self.vector_bits, self.memory_gb,
                self.cache_line, self.l1d_kb, self.l2_kb, self.l3_kb]
        return np.array(onehot + [math.log2(1.0 + max(0.0, float(x))) for x in nums], dtype=np.float32)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "HardwareSpec":
        """Inverse of :meth:`to_json`; ValueError (one line) on a malformed dict."""
        if not isinstance(data, dict):
            raise ValueError(f"hardware spec: expected an object, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                raise ValueError(f"hardware spec: missing {f.name!r}")
            v = data[f.name]
            kind = {"str": str, "int": int, "float": float}[str(f.type)]
            if kind is str:
                ok = isinstance(v, str)
            else:
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                ok = ok and (kind is float or float(v).is_integer())
            if not ok:
                raise ValueError(f"hardware spec: {f.name!r} must be {kind.__name__}, got {v!r}")
            values[f.name] = kind(v)
        return cls(**values)


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except (OSError, ValueError):
        return None


def read_cpuinfo(root: str | Path = DEFAULT_ROOT) -> dict[str, Any]:
    """``model name``, ``vendor_id``, ``cpu family``, ``model`` (first processor) and the
    largest ``cpu MHz`` of ``<root>/proc/cpuinfo`` (an empty dict when unreadable)."""
    text = _read_text(os.path.join(root, "proc/cpuinfo"))
    out: dict[str, Any] = {}
    if text is None:
        return out
    mhz: list[float] = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep:
            continue
        if key == "cpu MHz":
            try:
                mhz.append(float(value))
            except ValueError:
                pass
        elif key in ("model name", "vendor_id", "cpu family", "model") and key not in out and value:
            out[key] = value
    if mhz:
        out["cpu MHz"] = max(mhz)
    return out


def read_frequency_mhz(root: str | Path = DEFAULT_ROOT, cpuinfo: dict[str, Any] | None = None) -> float:
    """The largest ``cpufreq/cpuinfo_max_freq`` of any cpu (kHz -> MHz), else the largest
    ``cpu MHz`` of /proc/cpuinfo, else 0."""
    best = 0.0
    pattern = os.path.join(glob.escape(str(root)), "sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq")
    for path in glob.glob(pattern):
        text = _read_text(path)
        try:
            best = max(best, float((text or "").strip()) / 1000.0)
        except ValueError:
            continue
    if best > 0:
        return best
    info = read_cpuinfo(root) if cpuinfo is None else cpuinfo
    return float(info.get("cpu MHz", 0.0))


def read_memory_gb(root: str | Path = DEFAULT_ROOT) -> float:
    """``MemTotal`` of ``<root>/proc/meminfo`` in GiB (0 when unreadable)."""
    for line in (_read_text(os.path.join(root, "proc/meminfo")) or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "MemTotal":
            parts = value.split()
            try:
                kb = float(parts[0])
            except (IndexError, ValueError):
                return 0.0
            unit = parts[1].lower() if len(parts) > 1 else "kb"
            scale = {"b": 1 / 1024, "kb": 1.0, "mb": 1024.0, "gb": 1024.0**2}.get(unit, 1.0)
            return round(kb * scale / 2**20, 3)
    return 0.0


def _size_kb(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1, "M": 1024, "G": 1024**2}
    if text and text[-1] in scale:
        return int(float(text[:-1]) * scale[text[-1]])
    return int(float(text) / 1024)  # plain bytes


def read_caches(root: str | Path = DEFAULT_ROOT) -> dict[str, int]:
    """``cache_line``, ``l1d_kb``, ``l2_kb``, ``l3_kb`` from cpu0's sysfs cache entries
    (``index*/level``, ``type``, ``size``, ``coherency_line_size``); 0 for an absent level,
    :data:`DEFAULT_CACHE_LINE` for an unknown line size."""
    out = {"cache_line": 0, "l1d_kb": 0, "l2_kb": 0, "l3_kb": 0}
    base = os.path.join(glob.escape(str(root)), "sys/devices/system/cpu/cpu0/cache/index*")
    for entry in sorted(glob.glob(base)):
        try:
            level = int((_read_text(os.path.join(entry, "level")) or "").strip())
            kind = (_read_text(os.path.join(entry, "type")) or "").strip()
            size = _size_kb(_read_text(os.path.join(entry, "size")) or "")
        except (ValueError, OverflowError):
            continue
        if kind == "Instruction" or level not in (1, 2, 3):
            continue
        name = {1: "l1d_kb", 2: "l2_kb", 3: "l3_kb"}[level]
        out[name] = max(out[name], size)
        try:
            line = int((_read_text(os.path.join(entry, "coherency_line_size")) or "").strip())
            out["cache_line"] = max(out["cache_line"], line)
        except ValueError:
            pass
    out["cache_line"] = out["cache_line"] or DEFAULT_CACHE_LINE
    return out


def _int(text: Any) -> int:
    """A decimal (or 0x hexadecimal) integer, 0 when it is not one."""
    text = str(text).strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return 0


def read_spec(target_json: dict[str, Any], threads: int, root: str | Path = DEFAULT_ROOT) -> HardwareSpec:
    """The :class:`HardwareSpec` of the machine under ``root`` for ``target_json`` with
    ``threads`` threads. Never raises on unreadable or odd files: each gives its default
    (empty strings, 0, a 64-byte cache line). ``cpu_model`` falls back to
    :func:`tensortune.target.cpu_model` on the real root."""
    info = read_cpuinfo(root)
    model_name = str(info.get("model name", ""))
    if not model_name and os.path.abspath(str(root)) == os.path.abspath(DEFAULT_ROOT):
        from ..target import cpu_model

        model_name = cpu_model()
    caches = read_caches(root)
    return HardwareSpec(cpu_model=model_name or "unknown", vendor=str(info.get("vendor_id", "")),
                        family=_int(info.get("cpu family", 0)), model=_int(info.get("model", 0)),
                        llvm_cpu=str(target_json.get("mcpu", "")),
                        frequency_mhz=float(read_frequency_mhz(root, info)), cores=int(threads),
                        vector_bits=vector_bits_of(target_json), memory_gb=read_memory_gb(root), **caches)


# ---------------------------------------------------------------------------------------------
# Signature programs


def _copy_reps_kernel(per_thread: int, threads: int, reps: int, lanes: int) -> Any:
    """Each thread copies its ``per_thread`` floats ``reps`` times (vectorised)."""
    from tvm.script import tirx as T

    n = per_thread * threads

    @T.prim_func
    def copy(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(threads):
            for _r in T.serial(reps):
                for i in T.serial(per_thread // lanes):
                    for v in T.vectorized(lanes):
                        b[p * per_thread + i * lanes + v] = a[p * per_thread + i * lanes + v]

    return copy


def _strided_kernel(per_thread: int, threads: int, stride: int, lanes: int) -> Any:
    """Each thread gathers ``per_thread`` floats, one every ``stride``, into a dense buffer."""
    from tvm.script import tirx as T

    m = per_thread * threads

    @T.prim_func
    def strided(a: T.Buffer((m * stride,), "float32"), b: T.Buffer((m,), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(threads):
            for i in T.serial(per_thread // lanes):
                for v in T.vectorized(lanes):
                    b[p * per_thread + i * lanes + v] = a[(p * per_thread + i * lanes + v) * stride]

    return strided


def _reduce_kernel(per_thread: int, threads: int, reps: int) -> Any:
    """Each thread sums its floats ``reps`` times into one scalar (a serial dependency chain)."""
    from tvm.script import tirx as T

    n = per_thread * threads

    @T.prim_func
    def reduce(a: T.Buffer((n,), "float32"), out: T.Buffer((threads,), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(threads):
            acc = T.alloc_buffer((1,), "float32", scope="local")
            acc[0] = T.float32(0)
            for _r in T.serial(reps):
                for i in T.serial(per_thread):
                    acc[0] = acc[0] + a[p * per_thread + i]
            out[p] = acc[0]

    return reduce


def _matmul_kernel(n: int, lanes: int, rows: int, vecs: int) -> Any:
    """C = A @ B: parallel over row blocks, a ``rows`` x ``vecs * lanes`` register tile of C,
    the j axis vectorised (B broadcast-multiplied by one element of A per row)."""
    from tvm.script import tirx as T

    cols = vecs * lanes

    @T.prim_func
    def matmul(a: T.Buffer((n, n), "float32"), b: T.Buffer((n, n), "float32"), c: T.Buffer((n, n), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for i0 in T.parallel(n // rows):
            for j0 in T.serial(n // cols):
                acc = T.alloc_buffer((rows, cols), "float32", scope="local")
                for ii in T.unroll(rows):
                    for jv in T.vectorized(cols):
                        acc[ii, jv] = T.float32(0)
                for k in T.serial(n):
                    for ii in T.unroll(rows):
                        for jj in T.unroll(vecs):
                            for v in T.vectorized(lanes):
                                acc[ii, jj * lanes + v] = acc[ii, jj * lanes + v] + \
                                    a[i0 * rows + ii, k] * b[k, j0 * cols + jj * lanes + v]
                for ii in T.unroll(rows):
                    for jv in T.vectorized(cols):
                        c[i0 * rows + ii, j0 * cols + jv] = acc[ii, jv]

    return matmul


def _exp_kernel(per_thread: int, threads: int, lanes: int) -> Any:
    """b = exp(a), parallel and vectorised."""
    from tvm.script import tirx as T

    n = per_thread * threads

    @T.prim_func
    def exp(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for p in T.parallel(threads):
            for i in T.serial(per_thread // lanes):
                for v in T.vectorized(lanes):
                    b[p * per_thread + i * lanes + v] = T.exp(a[p * per_thread + i * lanes + v])

    return exp


def _per_thread(total: int, threads: int, lanes: int) -> int:
    """Floats per thread: ``total / threads`` rounded down to whole vectors (at least one)."""
    return max(lanes, total // threads // lanes * lanes)


#: A signature program: (name, kernel factory, argument factory, work per call).
_Program = tuple[str, Callable[[], Any], Callable[[], list[np.ndarray]], float]


def _programs(threads: int, lanes: int, vector_bits: int) -> list[_Program]:
    """``(name, kernel factory, argument factory, work per call)`` of every signature program,
    in :data:`SIGNATURE_NAMES` order; work is in the unit of the throughput times 1e9."""
    from .peak import _copy_kernel, _fma_kernel

    progs: list[_Program] = []
    acc, fl = FMA_SHAPE[vector_bits]
    progs.append(("fma", lambda: _fma_kernel(threads, acc, fl, FMA_ITERS),
                  lambda: [np.random.rand(threads, acc, fl).astype("float32"), np.zeros((threads, acc, fl), "float32")],
                  2.0 * threads * acc * fl * FMA_ITERS))
    for name, (ws, private) in COPY_WORKING_SETS.items():
        floats = ws // 8 if private else ws // 8 // threads  # per buffer, per thread
        per = _per_thread(floats * threads, threads, lanes)
        reps = max(1, COPY_CALL_BYTES // (8 * per))
        if reps == 1:
            kernel = (lambda per=per: _copy_kernel(per * threads, threads, lanes))
        else:
            kernel = (lambda per=per, reps=reps: _copy_reps_kernel(per, threads, reps, lanes))
        progs.append((name, kernel,
                      lambda per=per: [np.ones(per * threads, "float32"), np.zeros(per * threads, "float32")],
                      8.0 * per * threads * reps))
    gather = _per_thread(STRIDED_SOURCE_BYTES // 4 // STRIDE, threads, lanes)
    progs.append(("strided", lambda: _strided_kernel(gather, threads, STRIDE, lanes),
                  lambda: [np.ones(gather * threads * STRIDE, "float32"), np.zeros(gather * threads, "float32")],
                  4.0 * gather * threads))
    progs.append(("scalar_reduce", lambda: _reduce_kernel(REDUCE_FLOATS, threads, REDUCE_REPS),
                  lambda: [np.full(REDUCE_FLOATS * threads, 1e-3, "float32"), np.zeros(threads, "float32")],
                  float(REDUCE_FLOATS * threads * REDUCE_REPS)))
    rows, vecs = MATMUL_TILE
    n = MATMUL_N
    progs.append(("matmul", lambda: _matmul_kernel(n, lanes, rows, vecs),
                  lambda: [np.random.rand(n, n).astype("float32"), np.random.rand(n, n).astype("float32"),
                           np.zeros((n, n), "float32")], 2.0 * n**3))
    per_exp = _per_thread(EXP_FLOATS, threads, lanes)
    progs.append(("exp", lambda: _exp_kernel(per_exp, threads, lanes),
                  lambda: [np.random.rand(per_exp * threads).astype("float32"), np.zeros(per_exp * threads, "float32")],
                  float(per_exp * threads)))
    return progs


def _check_threads(threads: int) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    return threads


def measure_signature(target_json: dict[str, Any], threads: int) -> dict[str, float]:
    """Time the signature programs in this process: ``{name: throughput}`` (see
    :data:`SIGNATURE_NAMES` for units; medians of ``time_evaluator`` repeats).

    The process's TVM thread pool must have ``threads`` threads: ``TVM_NUM_THREADS`` must say
    so (HardwareError otherwise); use :func:`measure_profile` from any other process.
    """
    from ..target import make_target
    from .peak import _time

    _check_threads(threads)
    if os.environ.get("TVM_NUM_THREADS") != str(threads):
        raise HardwareError(f"TVM_NUM_THREADS is {os.environ.get('TVM_NUM_THREADS')!r}, not {threads}: "
                            "measure in a fresh process (measure_profile)")
    target = make_target(target_json)
    bits = vector_bits_of(target_json)
    out: dict[str, float] = {}
    for name, kernel, args, work in _programs(threads, bits // 32, bits):
        secs = statistics.median(_time(kernel(), target, args(), min_repeat_ms=MIN_REPEAT_MS))
        if not secs > 0:
            raise HardwareError(f"signature program {name} timed {secs} s")
        out[name] = work / secs / 1e9
    return out


# ---------------------------------------------------------------------------------------------
# Profile


def profile_key(cpu_model: str, target_json: dict[str, Any], threads: int) -> str:
    """The stable string identifying a profile: (cpu model, canonical target, threads)."""
    from ..target import target_key

    return json.dumps([cpu_model, target_key(target_json), int(threads)], separators=(",", ":"))


@dataclass
class HardwareProfile:
    """A machine's specs and measured signature for one target and thread count."""

    spec: HardwareSpec
    signature: dict[str, float]
    peak_gflops: float
    bandwidth_gbs: float
    target: dict[str, Any]
    threads: int
    tvm_version: str = ""
    measured_at: float = 0.0
    #: Seconds the measurement took: the signature's builds and timing (:func:`measure_here`), or
    #: the whole subprocess, Python and TVM start-up included (:func:`measure_profile`).
    wall_s: float = 0.0
    #: Free-form notes kept with the profile (plain JSON).
    extra: dict[str, Any] = field(default_factory=dict)

    def key(self) -> str:
        """See :func:`profile_key`."""
        return profile_key(self.spec.cpu_model, self.target, self.threads)

    def vector(self) -> np.ndarray:
        """float32 features named by :data:`HW_FEATURE_NAMES`: the spec's, then log2 of each
        signature throughput."""
        sig = np.array([math.log2(self.signature[n]) for n in SIGNATURE_NAMES], dtype=np.float32)
        return np.concatenate([self.spec.vector(), sig]).astype(np.float32)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form (read back by :meth:`from_json`)."""
        return {"format": FORMAT, "spec": self.spec.to_json(),
                "signature": {n: float(self.signature[n]) for n in SIGNATURE_NAMES},
                "peak_gflops": float(self.peak_gflops), "bandwidth_gbs": float(self.bandwidth_gbs),
                "target": dict(self.target), "threads": int(self.threads), "tvm_version": self.tvm_version,
                "measured_at": float(self.measured_at), "wall_s": float(self.wall_s), "extra": dict(self.extra)}

    @classmethod
    def from_json(cls, data: Any) -> "HardwareProfile":
        """Inverse of :meth:`to_json`; ValueError with a one-line message on a malformed dict
        (another format, a missing or ill-typed field, a missing, non-positive or non-finite
        signature value)."""
        if not isinstance(data, dict):
            raise ValueError(f"hardware profile: expected an object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise ValueError(f"hardware profile: format {data.get('format')!r}, expected {FORMAT!r}")
        spec = HardwareSpec.from_json(data.get("spec"))
        sig = data.get("signature")
        if not isinstance(sig, dict):
            raise ValueError("hardware profile: 'signature' must be an object")
        signature: dict[str, float] = {}
        for n in SIGNATURE_NAMES:
            signature[n] = _positive(sig.get(n), f"signature {n!r}")
        target = data.get("target")
        if not isinstance(target, dict) or not target.get("kind"):
            raise ValueError("hardware profile: 'target' must be a target dict with a 'kind'")
        threads = data.get("threads")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"hardware profile: 'threads' must be a positive integer, got {threads!r}")
        extra = data.get("extra", {})
        if not isinstance(extra, dict):
            raise ValueError("hardware profile: 'extra' must be an object")
        tvm_version = data.get("tvm_version", "")
        if not isinstance(tvm_version, str):
            raise ValueError("hardware profile: 'tvm_version' must be a string")
        return cls(spec=spec, signature=signature, peak_gflops=_positive(data.get("peak_gflops"), "'peak_gflops'"),
                   bandwidth_gbs=_positive(data.get("bandwidth_gbs"), "'bandwidth_gbs'"), target=dict(target),
                   threads=threads, tvm_version=tvm_version,
                   measured_at=_number(data.get("measured_at", 0.0), "'measured_at'"),
                   wall_s=_number(data.get("wall_s", 0.0), "'wall_s'"), extra=dict(extra))


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"hardware profile: {what} must be a finite number, got {v!r}")
    return float(v)


def _positive(v: Any, what: str) -> float:
    x = _number(v, what)
    if x <= 0:
        raise ValueError(f"hardware profile: {what} must be positive, got {v!r}")
    return x


def measure_here(target_json: dict[str, Any], threads: int) -> HardwareProfile:
    """Read the spec and measure the signature in this process (TVM_NUM_THREADS must equal
    ``threads``; see :func:`measure_signature`)."""
    import tvm

    t0 = time.perf_counter()
    sig = measure_signature(target_json, threads)
    return HardwareProfile(spec=read_spec(target_json, threads), signature=sig, peak_gflops=sig["fma"],
                           bandwidth_gbs=sig["copy_dram"], target=dict(target_json), threads=threads,
                           tvm_version=str(tvm.__version__), measured_at=time.time(),
                           wall_s=round(time.perf_counter() - t0, 3))


def measure_profile(target_json: dict[str, Any], threads: int, timeout: float = MEASURE_TIMEOUT) -> HardwareProfile:
    """Measure a profile in a fresh subprocess with ``TVM_NUM_THREADS=threads`` (this module's
    ``--measure`` entry point); HardwareError (one line) on failure or after ``timeout`` s."""
    _check_threads(threads)
    cmd = module_command("tensortune.measure.hardware", "--measure", "--threads", str(threads),
                         "--target", json.dumps(target_json))
    env = dict(os.environ, TVM_NUM_THREADS=str(threads))
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([src] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    what = f"hardware profile ({target_json.get('mcpu', '?')}, {threads} threads)"
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HardwareError(f"{what}: measurement timed out after {timeout:g} s") from None
    except OSError as e:
        raise HardwareError(f"{what}: could not start the measuring process: {e}") from None
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise HardwareError(f"{what}: measuring process exited with {proc.returncode}: "
                            f"{lines[-1].strip() if lines else 'no message'}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    try:
        profile = HardwareProfile.from_json(json.loads(lines[-1]))
    except (IndexError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else "empty"
        raise HardwareError(f"{what}: unreadable output of the measuring process: {first}") from None
    profile.wall_s = round(time.perf_counter() - t0, 3)
    return profile


# ---------------------------------------------------------------------------------------------
# Cache


def cache_folder(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir``, else ``$TENSORTUNE_CACHE/hardware``, else ``~/.cache/tensortune/hardware``."""
    from ..utils.cache import cache_root

    return Path(cache_dir).expanduser() if cache_dir is not None else cache_root() / "hardware"


def cache_file(key: str, cache_dir: str | Path | None = None) -> Path:
    """The cache file of a profile key (a hash of it)."""
    return cache_folder(cache_dir) / f"{hashlib.sha256(key.encode('utf-8')).hexdigest()[:24]}.json"


def _warn(msg: str) -> None:
    log.warning("%s", msg)


def profile_for(target_json: dict[str, Any] | None = None, threads: int | None = None,
                cache_dir: str | Path | None = None, refresh: bool = False) -> HardwareProfile:
    """The profile for ``target_json`` (default: the host's, with ``num-cores`` = ``threads``) with
    ``threads`` threads (default: the usable CPUs), from the cache (:func:`cache_file`) or measured (:func:`measure_profile`)
    and cached. A corrupt or mismatched cache file is re-measured with a warning on stderr;
    ``refresh`` always re-measures. The file is written atomically; a failed write only warns."""
    from ..target import cpu_count, cpu_model, host_target_json
    from ..utils.atomic import atomic_write

    threads = _check_threads(int(threads) if threads is not None else cpu_count())
    target = dict(target_json if target_json is not None else host_target_json(threads))
    key = profile_key(cpu_model(), target, threads)
    path = cache_file(key, cache_dir)
    if not refresh and path.exists():
        try:
            cached = HardwareProfile.from_json(json.loads(path.read_text(encoding="utf-8")))
            if cached.key() == key:
                return cached
            _warn(f"hardware cache {path} is for another machine or target; measuring again")
        except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            _warn(f"hardware cache {path} is unreadable ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
                  "measuring again")
    profile = measure_profile(target, threads)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(profile.to_json(), indent=1, sort_keys=True) + "\n")
    except OSError as e:
        _warn(f"could not write hardware cache {path}: {e}")
    return profile


def main(argv: list[str] | None = None) -> int:
    """``--measure``: measure in this process and print the profile's JSON (the subprocess side of
    :func:`measure_profile`); otherwise print the (cached) :func:`profile_for`."""
    ap = argparse.ArgumentParser(prog="python -m tensortune.measure.hardware", description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="measure here (TVM_NUM_THREADS is set to --threads)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--target", default=None, help="target dict as JSON (default: the host)")
    ap.add_argument("--refresh", action="store_true")
    args = ap.parse_args(argv)
    try:
        target = json.loads(args.target) if args.target else None
        if target is not None and not isinstance(target, dict):
            raise ValueError("--target must be a JSON object")
        if args.measure:
            from ..target import cpu_count, host_target_json

            threads = _check_threads(args.threads if args.threads is not None else cpu_count())
            os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # read by TVM's pool at first use
            profile = measure_here(target if target is not None else dict(host_target_json(threads)), threads)
        else:
            profile = profile_for(target, args.threads, refresh=args.refresh)
    except Exception as e:  # one line for measure_profile's error message
        text = str(e).strip().splitlines()
        print(f"error: {type(e).__name__}: {text[-1] if text else ''}", file=sys.stderr)
        return 1
    print(json.dumps(profile.to_json(), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
