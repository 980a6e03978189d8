"""Compute precision: ``f32`` (the default) or ``bf16`` (bfloat16 operands, float32 accumulation).

In ``bf16`` the convolutions and matrix products of a model take bfloat16 operands and accumulate
in float32 with AVX512-BF16's ``vdpbf16ps``; everything else stays float32. TVM 0.27 legalizes its
own ``bfloat16`` type to float32, so tensortune keeps bfloat16 values as their 16 bits in
``uint16`` buffers (:data:`BF16_STORAGE`): a ``uint16`` buffer of a task always holds bfloat16
values, which is how tasks, inputs and checks tell the precision apart.

The option needs the feature on both sides: the CPU that runs the code (read from
``/proc/cpuinfo``, :func:`host_flags`) and the target it is built for (its ``mcpu`` or
``mattr``). Without it the run stops in one line (no silent emulation).

Accuracy (:func:`agreement`): a bf16 output matches its float32 reference when
``max|out - ref| <= BF16_RTOL * max|ref|``; classifier logits also report top-5 agreement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from .errors import TensortuneError

#: float32 sums of a fused attention's bf16 products (``vdpbf16ps`` on zmm: every CPU with
#: AVX512-BF16 has it), and the keys of its scores padded to a multiple of two such vectors.
ATTENTION_LANES = 16
SCORES_COLUMNS = 2 * ATTENTION_LANES
#: A head whose rows no row block divides is computed on rows padded to a multiple of this, its
#: output's padded rows cut off after it (:mod:`tensortune.models.attention_pad`).
ATTENTION_ROW_MULTIPLE = 8

PRECISIONS = ("f32", "bf16")
DEFAULT_PRECISION = "f32"
#: The dtype of the buffers that hold bfloat16 values (their bits).
BF16_STORAGE = "uint16"
#: Tolerance of a bf16 output against its float32 reference: max abs error over max |reference|.
#: bf16 keeps 8 significant bits (rounding error at most 2^-8 = 0.4% of an operand); a sum of K
#: products with float32 accumulation stays well inside 2% of the output's range.
BF16_RTOL = 2e-2
#: The CPU flag (``/proc/cpuinfo``) and the LLVM feature the bf16 kernels need.
CPU_FLAG = "avx512_bf16"
LLVM_FEATURE = "+avx512bf16"
#: LLVM CPUs that have AVX512-BF16.
BF16_CPUS = ("cooperlake", "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5")


class PrecisionError(TensortuneError):
    """A precision this CPU or target cannot run (one line, exit status 2)."""


#: The channel block of a bf16 model on AMX tiles: two tiles' 16 columns of output channels, a
#: tile row's 32 input channels (every ``tdpbf16ps`` sums all of them).
AMX_BLOCK = 32

def check_name(precision: str) -> str:
    """``precision`` when it is one of :data:`PRECISIONS` (PrecisionError otherwise)."""
    if precision not in PRECISIONS:
        raise PrecisionError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    return precision


@lru_cache(maxsize=None)
def host_flags() -> frozenset[str]:
    """The CPU feature flags of this machine (``/proc/cpuinfo``; empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def target_has_bf16(target_json: dict[str, Any]) -> bool:
    """Whether code built for ``target_json`` may use AVX512-BF16 (its cpu or its attributes)."""
    return target_has(target_json, (LLVM_FEATURE.removeprefix("+"),), BF16_CPUS)


def target_has(target_json: dict[str, Any], features: tuple[str, ...], cpus: tuple[str, ...]) -> bool:
    """Whether code built for the x86-64 LLVM target ``target_json`` may use every one of the
    LLVM ``features``: none turned off in its ``mattr``, and all turned on there or its cpu one
    of ``cpus`` (a prefix)."""
    if target_json.get("kind") != "llvm" or not str(target_json.get("mtriple", "x86_64")).startswith("x86_64"):
        return False
    mattr = target_json.get("mattr") or []
    mattr = set(mattr.split(",") if isinstance(mattr, str) else mattr)
    if any(f"-{f}" in mattr for f in features):
        return False
    return all(f"+{f}" in mattr for f in features) or str(target_json.get("mcpu", "")).startswith(cpus)


def require(precision: str, target_json: dict[str, Any], runs_here: bool = True) -> str:
    """``precision`` checked against the target (and, when its code runs on this machine, the
    CPU): PrecisionError in one line when bf16 cannot run there."""
    check_name(precision)
    if precision == "f32":
        return precision
    if runs_here and CPU_FLAG not in host_flags():
        raise PrecisionError(f"--precision bf16 needs a CPU with {CPU_FLAG} (AVX512-BF16); this one has none "
                             "(AMD Zen 4 and later, Intel Cooper Lake and Sapphire Rapids and later have it)")
    if not target_has_bf16(target_json):
        cpu = target_json.get("mcpu") or target_json.get("kind")
        raise PrecisionError(f"--precision bf16 needs a target with AVX512-BF16; cpu {cpu!r} has none "
                             f"(use a cpu such as znver4 or sapphirerapids, or mattr {LLVM_FEATURE})")
    return precision


def precision_of_dtypes(dtypes: list[str]) -> str:
    """``bf16`` when any buffer holds bfloat16 bits (:data:`BF16_STORAGE`), else ``f32``."""
    return "bf16" if BF16_STORAGE in dtypes else "f32"


# ---------------------------------------------------------------- bfloat16 bits in numpy
def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bits (``uint16``), rounded to nearest even (NaN stays NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), rounded).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    """bfloat16 bits (``uint16``) as float32 values (exact)."""
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (still float32)."""
    return from_bf16_bits(to_bf16_bits(x))


# ---------------------------------------------------------------- accuracy
@dataclass(frozen=True)
class Agreement:
    """How a bf16 output compares with its float32 reference."""

    max_rel_err: float  # max |out - ref| / max |ref|
    top5: float | None  # share of rows whose top-5 classes agree (None: not a classifier output)
    rtol: float = BF16_RTOL

    @property
    def ok(self) -> bool:
        return math.isfinite(self.max_rel_err) and self.max_rel_err <= self.rtol

    def describe(self) -> str:
        top = f", top-5 agreement {self.top5:.0%}" if self.top5 is not None else ""
        return f"max error {self.max_rel_err:.1e} of max |ref| (tolerance {self.rtol:.0e}){top}"


def agreement(out: np.ndarray, ref: np.ndarray, rtol: float = BF16_RTOL) -> Agreement:
    """``out`` against ``ref``: the max error relative to max |ref|, and, for 2-D outputs of at
    least 5 columns (logits), the share of rows whose top-5 sets agree."""
    o, r = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if o.shape != r.shape or not np.all(np.isfinite(o[np.isfinite(r)])):
        return Agreement(math.inf, None, rtol)
    finite = np.isfinite(r)
    scale = float(np.max(np.abs(r[finite]))) if finite.any() else 0.0
    err = float(np.max(np.abs(o[finite] - r[finite]))) if finite.any() else 0.0
    rel = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
    top5 = None
    if o.ndim == 2 and o.shape[1] >= 5:
        a = np.argsort(-o, axis=1)[:, :5]
        b = np.argsort(-r, axis=1)[:, :5]
        top5 = float(np.mean([set(x) == set(y) for x, y in zip(a, b)]))
    return Agreement(rel, top5, rtol)


def outputs_close(got: np.ndarray, expected: np.ndarray, precision: str, rtol: float, atol: float) -> bool:
    """The correctness rule of one candidate: float32 ``allclose`` (``rtol``, ``atol``), or for
    bf16 the :func:`agreement` rule."""
    if got.shape != expected.shape:
        return False
    if precision == "bf16":
        return agreement(got, expected).ok
    return bool(np.allclose(got, expected, rtol=rtol, atol=atol))



__all__ = ["Agreement", "BF16_RTOL", "BF16_STORAGE", "DEFAULT_PRECISION", "PRECISIONS", "PrecisionError",
           "agreement", "check_name", "from_bf16_bits", "host_flags", "outputs_close", "precision_of_dtypes",
           "require", "round_bf16", "target_has_bf16", "to_bf16_bits"]
