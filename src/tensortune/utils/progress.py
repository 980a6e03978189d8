"""A tqdm progress bar as a tuning callback: trials, current and best GFLOPS, errors, elapsed."""
from __future__ import annotations

from typing import Any, Sequence


class ProgressBar:
    """Tuner callback showing trials done out of ``total`` with current/best GFLOPS and errors."""

    def __init__(self, total: int, desc: str = "", disable: bool = False) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="trial", disable=disable, dynamic_ncols=True)
        self.errors = 0

    def __call__(self, tuner: Any, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        flops = tuner.task.flops
        ok = [r.cost for r in results if r.ok]
        cur = flops / min(ok) / 1e9 if ok else 0.0
        best = flops / tuner.best_cost / 1e9 if tuner.best_cost < float("inf") else 0.0
        self.step(len(results), cur, best, sum(not r.ok for r in results), getattr(tuner, "status", ""))

    def step(self, n: int, cur_gflops: float, best_gflops: float, errors: int = 0, note: str = "") -> None:
        """Advance by ``n`` trials (for searches that are not a :class:`~tensortune.tuners.Tuner`)."""
        self.errors += errors
        note = f", {note}" if note else ""
        self.bar.set_postfix_str(f"cur {cur_gflops:.1f} GFLOPS, best {best_gflops:.1f} GFLOPS, errors {self.errors}{note}")
        self.bar.update(n)

    def settle(self, best_gflops: float) -> None:
        """Show the best the run reports after its confirmation rounds (the median of its rounds,
        not the fastest single trial the bar last showed), so that the bar and the result agree."""
        self.bar.set_postfix_str(f"best {best_gflops:.1f} GFLOPS (confirmed), errors {self.errors}")
        self.bar.refresh()

    def close(self) -> None:
        """Finish the bar."""
        self.bar.close()
