"""What every command group of the command line shares: the parser class, argument types, the
options shared by several commands, and the checks of paths named by flags (the app's checks,
with the flag's name in their messages)."""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..app import checks
from ..database import Database
from ..errors import UsageError
from ..limits import INT64_MAX, LimitError, check_seed


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (a UsageError), with no usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _positive(cast: type) -> Callable[[str], Any]:
    """An argparse type: ``cast(text)``, which must be > 0."""

    def parse(s: str) -> Any:
        try:
            v = cast(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r} is not a{'n integer' if cast is int else ' number'}") from None
        if not math.isfinite(v) or v <= 0:
            raise argparse.ArgumentTypeError(f"{s} must be a positive finite number")
        if cast is int and v > INT64_MAX:  # counts of trials, tasks, rounds are stored as SQLite INTEGERs
            raise argparse.ArgumentTypeError(f"{s} is too large (at most {INT64_MAX})")
        return v

    return parse


positive_int, positive_float = _positive(int), _positive(float)


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``lo`` to ``hi``."""

    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{s} is out of range ({lo} to {hi})")
        return v

    return parse


def seed(s: str) -> int:
    """An argparse type: a seed, 0 to :data:`~tensortune.limits.MAX_SEED`."""
    try:
        return check_seed(int(s))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e) if isinstance(e, LimitError) else f"{s!r} is not an integer") from None


def threads(s: str) -> int:
    """An argparse type: a thread count, 1 to this machine's cores (TVM's thread pool joins every
    thread at exit: a thousand of them made ``bench`` hang after printing its results)."""
    from ..target import cpu_count

    v = positive_int(s)
    if v > cpu_count():
        raise argparse.ArgumentTypeError(f"{v} threads: this machine has {cpu_count()} cores")
    return v


def speedup(s: str) -> float:
    """An argparse type: a speed-up (untuned / tuned latency), at least 1."""
    v = positive_float(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s}: a speed-up goal is untuned / tuned latency, at least 1")
    return v


def parse_shape(text: str) -> list[int]:
    """Comma-separated integers."""
    vals = []
    for part in text.split(","):
        part = part.strip()
        try:
            vals.append(int(part))
        except ValueError:
            raise UsageError(f"--shape: {part!r} is not an integer (expected comma-separated integers)") from None
    return vals


def check_db(path: str, must_exist: bool) -> None:
    """``--db`` checked (:func:`tensortune.app.checks.check_db_path`)."""
    checks.check_db_path(path, must_exist, what="--db")


def check_output(path: str, force: bool, db: str | None = None, option: str = "-o") -> None:
    """An output flag checked (:func:`tensortune.app.checks.check_output`)."""
    checks.check_output(path, force, db, what=option)


def open_db(path: str, readonly: bool = False) -> Database:
    """The database of ``--db``."""
    return checks.open_db(path, readonly)


def command_line(*subcommand: str) -> str:
    """This process's command line as ``tensortune ...`` when it runs ``subcommand`` (kept in a
    trained model's schema so it can be remade), else "" (called from code, not the CLI)."""
    return "tensortune " + " ".join(sys.argv[1:]) if sys.argv[1:1 + len(subcommand)] == list(subcommand) else ""


def tuner_option_arg(q: argparse.ArgumentParser) -> None:
    """``-O/--option KEY=VALUE`` (repeatable): a setting of the tuner."""
    q.add_argument("-O", "--option", action="append", default=[], metavar="KEY=VALUE", dest="tuner_options",
                   help="a setting of the tuner (repeatable), e.g. plan_size=32, epsilon=0.1, explorer=random, "
                        "explorer.n_chains=64; unknown keys are refused with the known ones listed")


def model_args(q: argparse.ArgumentParser) -> None:
    """The model argument and its shape options."""
    q.add_argument("model", help="a built-in model name, a path to an ONNX file, a Hugging Face "
                   "hf:MODEL_TYPE[:key=value,...] spec (random weights; needs the hf extra) or a "
                   "save_pretrained folder")
    q.add_argument("--batch", type=positive_int, default=1, help="batch size of a built-in model (default 1)")
    q.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="fix an ONNX input's shape (repeatable)")
    precision_arg(q)


def precision_arg(q: argparse.ArgumentParser) -> None:
    """``--precision f32|bf16``."""
    from ..precision import DEFAULT_PRECISION, PRECISIONS

    q.add_argument("--precision", choices=PRECISIONS, default=DEFAULT_PRECISION,
                   help=f"convolutions and matrix products in f32 or bf16 (bf16 operands, f32 sums; needs a CPU "
                        f"with avx512_bf16; default {DEFAULT_PRECISION})")


def input_shapes(specs: Sequence[str]) -> dict[str, list[int]]:
    """``--input-shape NAME=D0,D1,...`` items as a mapping."""
    shapes: dict[str, list[int]] = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"--input-shape {spec!r}: expected NAME=D0,D1,...")
        shapes[name] = parse_shape(dims)
    return shapes


def load_model(a: argparse.Namespace) -> Any:
    """The model named on the command line (UsageError on bad input)."""
    from ..app import load

    return load(a.model, batch=getattr(a, "batch", 1), input_shapes=input_shapes(getattr(a, "input_shape", []) or []),
                precision=getattr(a, "precision", None))


def target_arg(q: argparse.ArgumentParser, what: str = "the kernels are built for") -> None:
    """``--target``: the CPU or GPU to build for (:func:`tensortune.target.parse_target`)."""
    q.add_argument("--target", default=None, metavar="TARGET",
                   help=f"the device {what}: native (this CPU, the default), generic (x86-64), an x86-64 LLVM cpu "
                        "(znver4, skylake-avx512), aarch64[:CPU] (an Arm Linux device: neoverse-n1), cuda[:sm_XX] "
                        "(an NVIDIA GPU, default sm_90: built here, not timed here) or a JSON target; another CPU's "
                        "kernels are timed on --rpc's devices, or here when this CPU runs them, and its records are "
                        "its own")
