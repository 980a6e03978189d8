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
