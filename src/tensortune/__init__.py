"""tensortune: auto-tuning of tensor programs on Apache TVM (see README.md and docs/ARCHITECTURE.md).

The public API::

    import tensortune
    tuned = tensortune.tune_model(module, example_inputs=(x,), budget=tensortune.Budget(wall_s=60))
    tuned.export("model.so")

Importing the package loads nothing else: the names below come from :mod:`tensortune.app` on
first use, and each layer (``tensortune.tuners``, ``tensortune.models``, ...) imports its heavy
libraries only when used.
"""
from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from .utils.placement import unbind_tvm

unbind_tvm()  # tensortune places TVM's threads itself (utils.placement), before any pool starts

try:
    __version__ = version("tensortune")
except PackageNotFoundError:  # pragma: no cover - run from a source tree that is not installed
    __version__ = "0+unknown"

#: Public names and the module that defines each.
_PUBLIC = {
    "Budget": "tensortune.budget",
    "TensortuneError": "tensortune.errors",
    "UsageError": "tensortune.errors",
    "TunedModel": "tensortune.app.tuning",
    "tune_model": "tensortune.app.tuning",
    "tune_op": "tensortune.app.tuning",
    "load_model": "tensortune.app.deploy",
}

__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'tensortune' has no attribute {name!r}")
    attr = "load" if name == "load_model" else name
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
