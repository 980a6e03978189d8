"""Tuners of the benchmark suite as text: ``NAME[:KEY=VALUE...]``.

``autotvm`` is AutoTVM with its defaults; ``autotvm:objective=reg:cost_model=treegru`` one of its
cost-model variants; ``autotvm:transfer=true`` AutoTVM with a database that accumulates the
run's earlier workloads (its transfer-learning history); ``metaschedule`` is TVM's own tuner.
The whole spec is the tuner's label in every table and plot.
"""
from __future__ import annotations

from typing import Any

from .config import METASCHEDULE


def parse(spec: str) -> tuple[str, dict[str, str]]:
    """``"autotvm:plan_size=32"`` -> ``("autotvm", {"plan_size": "32"})``."""
    from tensortune.utils.options import parse_assignments

    name, *items = spec.split(":")
    return name.strip(), parse_assignments(items)


def check(spec: str) -> None:
    """SystemExit with one line for an unknown tuner or option."""
    from tensortune.tuners import TUNERS
    from tensortune.utils.options import OptionError

    try:
        name, options = parse(spec)
    except OptionError as e:
        raise SystemExit(f"tuner {spec!r}: {e}") from None
    if name == METASCHEDULE:
        if options:
            raise SystemExit(f"tuner {spec!r}: MetaSchedule takes no options here (its batch: --ms-batch)")
        return
    if name not in TUNERS:
        raise SystemExit(f"unknown tuner {name!r}; known: {', '.join(TUNERS)}, {METASCHEDULE}")
    try:
        TUNERS.get(name).check_options(options)
    except OptionError as e:
        raise SystemExit(f"tuner {spec!r}: {e}") from None


def keeps_history(spec: str) -> bool:
    """True when the tuner asks for transfer learning: it then tunes with a database of its own."""
    from tensortune.utils.options import convert

    _, options = parse(spec)
    return "transfer" in options and convert(options["transfer"], bool | None) is True


def slug(spec: str) -> str:
    """A file-name-safe form of the spec."""
    from tensortune.utils.names import file_stem

    return file_stem(spec)


def options_of(spec: str) -> dict[str, Any]:
    """The spec's options (text values)."""
    return parse(spec)[1]
