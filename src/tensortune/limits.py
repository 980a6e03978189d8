"""Bounds on sizes a user gives (shape values, input shapes, seeds, threads), checked before any work.

Without them a 20-digit shape value made divisor search run for ever, an input shape of a billion
images asked for terabytes, and a 23-digit seed overflowed SQLite after the measuring was done.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from .errors import TensortuneError

#: Largest shape value: TVM indexes with 32-bit integers unless told otherwise.
MAX_EXTENT = 2**31 - 1
#: Largest tensor a task or model input may have (float32 elements: 8 GiB).
MAX_TENSOR_ELEMENTS = 2**31
#: SQLite's INTEGER is a signed 64-bit number: the largest count, index or seed that can be stored.
INT64_MAX = 2**63 - 1
#: Seeds are stored in SQLite's INTEGER.
MAX_SEED = INT64_MAX


class LimitError(TensortuneError, ValueError):
    """A size outside its bounds."""


def check_extent(what: str, value: int) -> int:
    """``value`` when 1 <= value <= :data:`MAX_EXTENT`, else LimitError."""
    if not 1 <= value <= MAX_EXTENT:
        raise LimitError(f"{what}={value} is out of range (1 to {MAX_EXTENT})")
    return value


def check_shape(what: str, shape: Sequence[int]) -> tuple[int, ...]:
    """``shape`` when every value is an extent and the tensor holds at most
    :data:`MAX_TENSOR_ELEMENTS` elements, else LimitError."""
    dims = tuple(check_extent(f"{what}[{i}]", int(d)) for i, d in enumerate(shape))
    n = math.prod(dims)
    if n > MAX_TENSOR_ELEMENTS:
        raise LimitError(f"{what} {'x'.join(map(str, dims))} has {n:.3g} elements, "
                         f"over the {MAX_TENSOR_ELEMENTS:.3g} a tensor may have")
    return dims


def check_seed(value: int) -> int:
    """``value`` when 0 <= value <= :data:`MAX_SEED`, else LimitError."""
    if not 0 <= value <= MAX_SEED:
        raise LimitError(f"seed {value} is out of range (0 to {MAX_SEED})")
    return value
