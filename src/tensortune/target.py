"""Targets: the host CPU named explicitly (TVM 0.27 wants the dict form, and "native" loses AVX-512)."""
from __future__ import annotations

import importlib.util
import json
import os
from functools import lru_cache
from typing import Any, Callable


def cpu_count() -> int:
    """CPUs this process may run on (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


@lru_cache(maxsize=None)
def host_target_json(num_cores: int | None = None) -> dict[str, Any]:
    """The dict form of an LLVM target for this machine's CPU."""
    import tvm

    cpu = str(tvm.get_global_func("target.llvm_get_system_cpu")())
    d: dict[str, Any] = {"kind": "llvm", "mtriple": HOST_TRIPLE, "mcpu": cpu, "num-cores": int(num_cores or cpu_count())}
    extra = host_features_beyond(cpu)
    if extra:
        d["mattr"] = [f"+{f}" for f in extra]
    return d


#: The LLVM features whose absence from a cpu's model changes the code tensortune builds: vector
#: widths, fused multiply-add, and the dot-product and tile instructions of the bf16 kernels.
ISA_FEATURES = ("avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512vnni", "avx512bf16",
                "avx512fp16", "avxvnni", "amx-tile", "amx-bf16", "amx-int8")


@lru_cache(maxsize=None)
def host_features_beyond(cpu: str) -> tuple[str, ...]:
    """The :data:`ISA_FEATURES` this CPU has that LLVM's model of ``cpu`` lacks, sorted.

    A virtual machine may report a family and model that LLVM reads as an older cpu (an AVX-512
    BF16 and AMX Xeon seen as ``rocketlake``); the host target then names these features in
    ``mattr`` so that code built for it uses what the CPU has. Empty on a correctly named CPU."""
    import tvm

    host = {str(k) for k, v in dict(tvm.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")()).items() if v}
    model = {str(k) for k in tvm.get_global_func("target.llvm_get_cpu_features")(
        tvm.target.Target({"kind": "llvm", "mtriple": HOST_TRIPLE, "mcpu": cpu}))}
    return tuple(sorted(f for f in ISA_FEATURES if f in host and f not in model))


def generic_target_json(num_cores: int | None = None) -> dict[str, Any]:
    """The dict form of an LLVM target for a generic x86-64 CPU (``mcpu`` ``x86-64``: SSE2, no
    AVX or FMA), with the host's ``mtriple`` and ``num_cores`` (default: the usable CPUs).

    It is the weaker stand-in for "another machine" when only one CPU kind is at hand: code built
    for it runs here with 128-bit vectors, so profiles, measurements and models can be compared
    across two targets. It is not a different machine (same caches, memory and clock).
    """
    return {"kind": "llvm", "mtriple": HOST_TRIPLE, "mcpu": "x86-64", "num-cores": int(num_cores or cpu_count())}


#: The LLVM triples kernels are built for, and the architecture each names in messages.
TRIPLES = {"x86_64-linux-gnu": "x86-64", "aarch64-linux-gnu": "aarch64"}
HOST_TRIPLE = "x86_64-linux-gnu"


class TargetError(ValueError):
    """A target that cannot be tuned for (one line)."""


def aarch64_target_json(mcpu: str = "generic", num_cores: int | None = None) -> dict[str, Any]:
    """The dict form of an LLVM target for a 64-bit Arm Linux device (NEON; ``mcpu`` an LLVM
    aarch64 cpu such as ``cortex-a72`` or ``neoverse-v1``)."""
    return {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": mcpu, "num-cores": int(num_cores or cpu_count())}


#: The CUDA architecture ``--target cuda`` builds for (Hopper; nvcc 12 and 13 both know it).
DEFAULT_CUDA_ARCH = "sm_90"

#: The launch limits of every NVIDIA GPU since Volta: threads per block, static shared memory per
#: block (more needs an opt-in at launch), warp size, 32-bit registers per block. The templates'
#: spaces exclude what these cannot launch; a JSON target can state other limits.
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
               "registers_per_block": 65536}


def cuda_target_json(arch: str = DEFAULT_CUDA_ARCH) -> dict[str, Any]:
    """The dict form of a CUDA target for an NVIDIA GPU of ``arch`` (``sm_80``, ``sm_90``): its
    launch limits (:data:`CUDA_LIMITS`) as attributes, and a generic x86-64 host for the code that
    launches the kernels (no CPU model in it: a GPU kernel's records and keys do not depend on the
    machine that built it)."""
    return {"kind": "cuda", "arch": arch, **CUDA_LIMITS, "host": {"kind": "llvm", "mtriple": HOST_TRIPLE}}


def is_cuda(target_json: dict[str, Any]) -> bool:
    """Whether ``target_json`` is a CUDA target (kernels for an NVIDIA GPU)."""
    return target_json.get("kind") == "cuda"


def _parse_cuda(spec: str, d: dict[str, Any]) -> dict[str, Any]:
    """A CUDA target dict completed with the default limits and host, its ``arch``, limits and
    host checked (nvcc is needed only to build: :func:`tensortune.measure.cuda.compile_fatbin`)."""
    import re

    arch = str(d.get("arch", DEFAULT_CUDA_ARCH))
    if not re.fullmatch(r"sm_[1-9][0-9]{1,2}[af]?", arch):
        raise TargetError(f"--target {spec!r}: {arch!r} is not a CUDA architecture (sm_80, sm_89, sm_90, sm_100)")
    d = {**cuda_target_json(arch), **d, "arch": arch}
    for k in CUDA_LIMITS:
        if not isinstance(d[k], int) or isinstance(d[k], bool):
            raise TargetError(f"--target {spec!r}: {k} must be a whole number, not {d[k]!r}")
    if d["max_threads_per_block"] < 32 or d["max_shared_memory_per_block"] < 1024:
        raise TargetError(f"--target {spec!r}: the device limits are too small to launch a kernel")
    d["max_num_threads"] = d["max_threads_per_block"]  # what dlight's rules size their blocks by
    host = d["host"]
    if not isinstance(host, dict) or host.get("kind") != "llvm" or host.get("mtriple", HOST_TRIPLE) != HOST_TRIPLE:
        raise TargetError(f"--target {spec!r}: the host must be an LLVM target of {HOST_TRIPLE}")
    return d


def parse_target(spec: str | dict[str, Any] | None, num_cores: int | None = None) -> dict[str, Any]:
    """The target dict ``--target`` names: ``native`` (or None: this CPU), ``generic`` (x86-64,
    :func:`generic_target_json`), an LLVM cpu of x86-64 (``skylake-avx512``, ``znver4``: another
    machine's CPU, cross-compiled here), ``aarch64`` or ``aarch64:CPU`` (a 64-bit Arm Linux device,
    linked by a cross linker, :func:`cross_linker`), ``cuda`` or ``cuda:sm_XX`` (an NVIDIA GPU,
    :func:`cuda_target_json`), or a JSON object of an LLVM target of one of :data:`TRIPLES` or of a
    CUDA target. An LLVM cpu LLVM does not know, a target of another kind or triple, a CUDA target
    with a bad arch, limits or host, or an Arm target without a linker here is a :class:`TargetError`."""
    import tvm

    if spec is None or spec == "native":
        return dict(host_target_json(num_cores))
    if spec == "generic":
        return generic_target_json(num_cores)
    if isinstance(spec, dict):
        d = dict(spec)
    elif spec.lstrip().startswith("{"):
        try:
            d = json.loads(spec)
        except json.JSONDecodeError as e:
            raise TargetError(f"--target {spec!r}: not JSON ({e.msg})") from None
    elif spec == "aarch64" or spec.startswith("aarch64:"):
        d = aarch64_target_json(spec.partition(":")[2] or "generic", num_cores)
    elif spec == "cuda" or spec.startswith("cuda:"):
        d = {"kind": "cuda", "arch": spec.partition(":")[2] or DEFAULT_CUDA_ARCH}
    else:
        d = {k: v for k, v in host_target_json(num_cores).items() if k != "mattr"}  # the named cpu's own features
        d["mcpu"] = spec
    if isinstance(d, dict) and d.get("kind") == "cuda":
        return _parse_cuda(str(spec), d)
    if not isinstance(d, dict) or d.get("kind") != "llvm" or d.get("mtriple", HOST_TRIPLE) not in TRIPLES:
        raise TargetError(f"--target {spec!r}: only LLVM targets (kind llvm, mtriple {' or '.join(TRIPLES)}) "
                          "and CUDA targets (kind cuda) are built here")
    d.setdefault("mtriple", HOST_TRIPLE)
    d["num-cores"] = int(d.get("num-cores") or num_cores or cpu_count())
    arch = TRIPLES[d["mtriple"]]
    triple = make_target({"kind": "llvm", "mtriple": d["mtriple"]})  # not d: an unknown cpu makes LLVM log
    known = [str(c) for c in tvm.get_global_func("target.llvm_get_cpu_archlist")(triple)]
    if d.get("mcpu") and d["mcpu"] not in known and d["mcpu"] != "generic":
        examples = ("x86-64-v3", "skylake-avx512", "znver4", "cortex-a72", "neoverse-n1", "neoverse-v2")
        raise TargetError(f"--target {spec!r}: LLVM knows no {arch} cpu {d['mcpu']!r} "
                          f"(e.g. {', '.join(k for k in known if k in examples)})")
    if d["mtriple"] != HOST_TRIPLE:
        cross_linker(d)  # refused now, not at the first build
    return d


def runs_here(target_json: dict[str, Any]) -> bool:
    """Whether this machine can run code built for ``target_json`` at all (its triple is this
    machine's; an x86-64 cpu with instructions this one lacks still fails at run time). CUDA
    kernels never run here: tensortune times them on a GPU machine."""
    return not is_cuda(target_json) and target_json.get("mtriple", HOST_TRIPLE) == HOST_TRIPLE


#: How a kernel library for another triple is linked: that triple's GNU linker when on PATH, else
#: Zig's bundled clang (the ``cross`` extra, ``ziglang`` on PyPI), which links for every triple.
CROSS_GCC = {"aarch64-linux-gnu": "aarch64-linux-gnu-gcc"}


def cross_linker(target_json: dict[str, Any]) -> Callable[..., None] | None:
    """The ``fcompile`` that links kernels for ``target_json``'s triple (None: this machine's own
    compiler, TVM's default). A :class:`TargetError` when neither the triple's GNU linker nor the
    ``ziglang`` package is installed."""
    import shutil

    triple = target_json.get("mtriple", HOST_TRIPLE)  # a CUDA target's host is this triple (parse_target)
    if triple == HOST_TRIPLE:
        return None
    gcc = shutil.which(CROSS_GCC.get(triple, f"{triple}-gcc"))
    if gcc:
        from tvm.contrib import cc

        return cc.cross_compiler(gcc, options=["-shared", "-fPIC"])
    if importlib.util.find_spec("ziglang") is None:
        raise TargetError(f"--target {TRIPLES.get(triple, triple)}: no linker for {triple} here; install one "
                          f"with pip install 'tensortune[cross]' (Zig's clang) or {CROSS_GCC.get(triple, 'gcc')}")
    return _zig_linker(triple)


def _zig_linker(triple: str) -> Callable[..., None]:
    """An ``fcompile`` linking TVM's objects into a shared library for ``triple`` with Zig's clang.
    ``-nostdlib``: the symbols the kernels use (libm, the TVM runtime) are the loading process's."""
    import subprocess
    import sys

    def link(output: str, objects: list[str] | str, options: list[str] | None = None) -> None:
        objs = [objects] if isinstance(objects, str) else list(objects)
        cmd = [sys.executable, "-m", "ziglang", "cc", "-target", triple, "-shared", "-fPIC", "-nostdlib",
               "-o", output, *objs, *(options or [])]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"linking for {triple} failed: {(r.stderr or r.stdout).strip()[-1500:]}")

    link.output_format = "so"  # type: ignore[attr-defined]
    return link


def is_host(target_json: dict[str, Any]) -> bool:
    """Whether code built for ``target_json`` is this machine's own (its CPU, same triple)."""
    here = host_target_json()
    return target_json.get("mcpu") == here["mcpu"] and target_json.get("mtriple") == here["mtriple"]


def make_target(spec: dict[str, Any] | str | None = None) -> Any:
    """A ``tvm.target.Target`` from a dict, its JSON text, or None (the host CPU)."""
    import tvm

    if spec is None:
        spec = host_target_json()
    if isinstance(spec, str):
        spec = json.loads(spec)
    return tvm.target.Target(dict(spec))


def target_key(spec: dict[str, Any]) -> str:
    """Canonical JSON text of a target dict (stable across processes)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's marketing name (``model name`` of /proc/cpuinfo), recorded with every figure and trial.

    Two machines with the same LLVM cpu (e.g. ``znver4``) can still differ in clocks and caches,
    so the model name is kept beside the target. Falls back to ``platform.processor()``.
    """
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine_id() -> dict[str, Any]:
    """Where a figure or a trial was measured: CPU model, LLVM cpu and usable cores.

    Two results may be compared only when these agree (see :func:`same_machine`).
    """
    import tvm

    return {"cpu_model": cpu_model(), "llvm_cpu": str(tvm.get_global_func("target.llvm_get_system_cpu")()),
            "cores": cpu_count()}


def same_machine(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two :func:`machine_id` dicts name the same kind of machine."""
    return all(a.get(k) == b.get(k) for k in ("cpu_model", "llvm_cpu", "cores"))
