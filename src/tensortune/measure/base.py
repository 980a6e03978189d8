"""What a tuning session needs of a measurer: :class:`MeasurerBase`.

The real :class:`~tensortune.measure.Measurer` (isolated builds, one-at-a-time runs) and a fake
over a known landscape (tests, simulations) are both measurers; the hooks a session calls have
defaults here, so it never probes for them.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from ..errors import TensortuneError
from .options import MeasureOptions
from .result import MeasureInput, MeasureResult


class MeasurerLost(TensortuneError, RuntimeError):
    """The measurer can measure no more (its device or node is gone): the batch in flight is lost,
    nothing of it stored, and a scheduler with other measurers hands the task to them."""


class MeasurerBase(ABC):
    """Measures candidates under :attr:`options`; subclasses implement :meth:`measure`."""

    options: MeasureOptions
    #: seconds spent building and running candidates so far, where the measurer keeps them (None:
    #: it does not; a run's cost then has no build / run split)
    build_s: float | None = None
    run_s: float | None = None

    @abstractmethod
    def measure(self, inputs: Sequence[MeasureInput],
                on_result: Callable[[MeasureInput, MeasureResult], None] | None = None) -> list[MeasureResult]:
        """One result per input, in order; ``on_result(inp, res)`` as each completes."""

    def measure_rounds(self, inputs: Sequence[MeasureInput], rounds: int,
                       on_result: Callable[[int, MeasureInput, MeasureResult], None] | None = None
                       ) -> list[list[MeasureResult]]:
        """The inputs measured ``rounds`` times in turn (round 1: A B C, round 2: A B C, ...);
        ``on_result(round, inp, res)`` as each completes. By default each round is a :meth:`measure`."""
        out = []
        for r in range(1, rounds + 1):
            out.append(self.measure(inputs, None if on_result is None else
                                    (lambda inp, res, r=r: on_result(r, inp, res))))
        return out

    def wait_quiet(self, max_s: float | None = None) -> bool | None:
        """Wait (up to ``max_s``) for the machine to be quiet; whether it was, or None for a
        measurer that does not watch contention."""
        return None

    def close(self) -> None:
        """Release what the measurer holds (nothing by default)."""

    def __enter__(self) -> MeasurerBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
