"""Register only the host CPU's tensor intrinsics with TVM, not every backend's.

MetaSchedule imports ``tvm.s_tir.tensor_intrin`` whenever it makes a ``TuneContext`` (and its
``LocalBuilder`` in every build worker). That package registers the intrinsics of every backend
(CUDA, ROCm, Hexagon, Metal, Arm, x86, RISC-V), which takes about 45 s of one core on a Zen 3
(30 s of it CUDA's) against 4 s for the x86 ones alone. A CPU target's schedule rules only name
the intrinsics of its own architecture, so :func:`register_host_intrinsics` binds the package
without running its ``__init__`` and imports the host's module; a later
``import tvm.s_tir.tensor_intrin`` then finds the package bound and costs nothing. GPU targets
need the full package: do not call this in a process that tunes for one (a GPU module imported
explicitly, ``import tvm.s_tir.tensor_intrin.cuda``, still works).
"""
from __future__ import annotations

import importlib
import importlib.util
import platform
import sys

PACKAGE = "tvm.s_tir.tensor_intrin"
#: The intrinsic module of each host architecture (``platform.machine()``).
HOST_MODULES = {"x86_64": "x86", "amd64": "x86", "i686": "x86", "aarch64": "arm_cpu", "arm64": "arm_cpu",
                "riscv64": "riscv_cpu"}


def register_host_intrinsics(machine: str | None = None) -> str | None:
    """Import the host architecture's tensor intrinsic module only; return its name (None: the
    architecture is not known here, and the whole package was imported as TVM would)."""
    module = HOST_MODULES.get((machine or platform.machine()).lower())
    if module is None:
        importlib.import_module(PACKAGE)
        return None
    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.submodule_search_locations is None:  # TVM moved it: TVM's own import
            importlib.import_module(PACKAGE)
            return None
        package = importlib.util.module_from_spec(spec)  # bound, its __init__ not run
        sys.modules[PACKAGE] = package
        parent, _, name = PACKAGE.rpartition(".")
        setattr(sys.modules[parent], name, package)
    importlib.import_module(f"{PACKAGE}.{module}")
    return module


__all__ = ["HOST_MODULES", "PACKAGE", "register_host_intrinsics"]
