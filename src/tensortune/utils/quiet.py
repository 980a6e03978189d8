"""Silence third-party warnings that tell a tensortune user nothing.

PyTorch's pytree registration, for one, prints ``FutureWarning: isinstance(treespec, LeafSpec)
is deprecated`` from ``copyreg`` on every command that builds a model, before any output of
ours. Deprecation and future warnings raised inside the libraries we drive (PyTorch, ONNX,
ONNX Runtime, XGBoost, scikit-learn, TVM) are about their internals, not about anything a user
can change, so the command line drops them. Every other warning, tensortune's own included,
is kept.
"""
from __future__ import annotations

import warnings

#: Modules whose deprecation / future warnings are dropped (a warning's module is where it was raised).
THIRD_PARTY = ("copyreg", "torch", "onnx", "onnxscript", "onnxruntime", "xgboost", "sklearn", "tvm", "tvm_ffi")


def quiet_third_party_warnings() -> None:
    """Install the filters (idempotent)."""
    pattern = r"(%s)(\..*)?$" % "|".join(THIRD_PARTY)
    for category in (DeprecationWarning, FutureWarning, PendingDeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=pattern)
