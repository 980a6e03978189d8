"""Targets: the host CPU named explicitly (TVM 0.27 wants the dict form, and "native" loses AVX-512)."""
from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any


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

    cpu = tvm.get_global_func("target.llvm_get_system_cpu")()
    return {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": str(cpu), "num-cores": int(num_cores or cpu_count())}


def generic_target_json(num_cores: int | None = None) -> dict[str, Any]:
    """The dict form of an LLVM target for a generic x86-64 CPU (``mcpu`` ``x86-64``: SSE2, no
    AVX or FMA), with the host's ``mtriple`` and ``num_cores`` (default: the usable CPUs).

    It is the weaker stand-in for "another machine" when only one CPU kind is at hand: code built
    for it runs here with 128-bit vectors, so profiles, measurements and models can be compared
    across two targets. It is not a different machine (same caches, memory and clock).
    """
    return {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "x86-64", "num-cores": int(num_cores or cpu_count())}


#: The ``--target`` words that name a target (anything else is an x86-64 LLVM cpu or a JSON object).
TARGET_WORDS = ("native", "generic")


class TargetError(ValueError):
    """A target that cannot be tuned for (one line)."""


def parse_target(spec: str | dict[str, Any] | None, num_cores: int | None = None) -> dict[str, Any]:
    """The target dict ``--target`` names: ``native`` (or None: this CPU), ``generic`` (x86-64,
    :func:`generic_target_json`), an LLVM cpu of x86-64 (``skylake-avx512``, ``znver4``: another
    machine's CPU, cross-compiled here), or a JSON object of an LLVM target for x86-64. An LLVM
    cpu LLVM does not know, or a target of another kind or triple, is a :class:`TargetError`:
    kernels are linked by this machine's x86-64 compiler."""
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
    else:
        d = {**host_target_json(num_cores), "mcpu": spec}
    if d.get("kind") != "llvm" or d.get("mtriple", "x86_64-linux-gnu") != "x86_64-linux-gnu":
        raise TargetError(f"--target {spec!r}: only LLVM targets of x86_64-linux-gnu are built here "
                          "(kind llvm, mtriple x86_64-linux-gnu)")
    d.setdefault("mtriple", "x86_64-linux-gnu")
    d["num-cores"] = int(d.get("num-cores") or num_cores or cpu_count())
    triple = make_target({"kind": "llvm", "mtriple": d["mtriple"]})  # not d: an unknown cpu makes LLVM log
    known = [str(c) for c in tvm.get_global_func("target.llvm_get_cpu_archlist")(triple)]
    if d.get("mcpu") and d["mcpu"] not in known:
        raise TargetError(f"--target {spec!r}: LLVM knows no x86-64 cpu {d['mcpu']!r} "
                          f"(e.g. {', '.join(k for k in known if k in ('x86-64-v3', 'skylake-avx512', 'znver4'))})")
    return d


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
