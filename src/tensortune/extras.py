"""The optional parts of the package and the extra that installs each.

The core (TVM, XGBoost, NumPy, scikit-learn, SciPy) tunes operators with AutoTVM and the
search baselines. PyTorch, ONNX, Ray and the rest are extras: a step that needs one that is
missing fails in one line naming the ``pip install`` that brings it (:class:`MissingExtra`).

This module is a leaf: it imports nothing of tensortune but its errors.
"""
from __future__ import annotations

from .errors import TensortuneError

# top-level module -> (the extra that installs it, what it is called)
EXTRAS: dict[str, tuple[str, str]] = {
    "torch": ("torch", "PyTorch"),
    "onnx": ("onnx", "ONNX"),
    "onnxruntime": ("onnx", "ONNX Runtime"),
    "statsmodels": ("trimmer", "statsmodels"),
    "ray": ("ray", "Ray"),
    "transformers": ("hf", "Hugging Face transformers"),
    "openvino": ("openvino", "OpenVINO"),
    "matplotlib": ("report", "matplotlib"),
}


class MissingExtra(TensortuneError):
    """A step needs an optional library that is not installed (exit status 3)."""

    exit_code = 3


def missing_module(exc: BaseException) -> str | None:
    """The optional module whose absence raised ``exc`` (or caused it), else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ImportError) and seen.name:
            top = seen.name.partition(".")[0]
            if top in EXTRAS:
                return top
        seen = seen.__cause__ or seen.__context__
    return None


def missing_extra(exc: BaseException, needed_by: str) -> MissingExtra | None:
    """A :class:`MissingExtra` saying what ``needed_by`` needs, when ``exc`` is the import of an
    optional library failing; None for any other fault (it is not ours to explain)."""
    module = missing_module(exc)
    if module is None:
        return None
    extra, what = EXTRAS[module]
    return MissingExtra(f"{needed_by} needs {what}, which is not installed: pip install 'tensortune[{extra}]'")
