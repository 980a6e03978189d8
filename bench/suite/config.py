"""The benchmark suite's defaults, in one place: the full run and ``--quick``."""
from __future__ import annotations

from dataclasses import dataclass, replace

SUITES = ("ops", "models", "peak")
#: The name under which MetaSchedule runs beside tensortune's tuners.
METASCHEDULE = "metaschedule"


@dataclass(frozen=True)
class Settings:
    """What one ``python -m bench run`` measures."""

    suites: tuple[str, ...] = SUITES
    tuners: tuple[str, ...] = ("random", "genetic", "autotvm", "metaschedule")
    #: trials per tuner and workload. A tuner is a registered name with options, as
    #: ``NAME[:KEY=VALUE...]`` (``autotvm:objective=reg``, ``autotvm:transfer=true``); a tuner
    #: with ``transfer=true`` keeps a database across the run's workloads (its transfer history)
    budget: int = 200
    #: workload groups of workloads.json, or single workload names
    workloads: tuple[str, ...] = ("resnet18_conv2d",)
    models: tuple[str, ...] = ("resnet18",)
    #: tuners of the whole-model suite (each gets ``model_budget_s`` of tuning wall time)
    model_tuners: tuple[str, ...] = ("autotvm", "metaschedule")
    model_budget_s: float = 1800.0
    #: MetaSchedule candidates per search iteration (its default 64; a model's first iteration
    #: measures that many candidates of a task before a time budget can stop it)
    ms_batch: int = 64
    #: interleaved rounds of the final re-measurement (operators) and of the model benchmark
    rounds: int = 5
    seed: int = 0
    #: fraction of the best latency any tuner found, for time to quality
    quality: float = 0.95
    #: tensortune tuners measure their template's default config first (off: the curves show how
    #: fast each search finds good configs on its own; the default is within a few percent of the
    #: best on many layers)
    start_from_default: bool = True
    #: time the same computation in the library a user would call (numpy for GEMMs, PyTorch for
    #: convolutions) in the final interleaved rounds: the ceiling of the search spaces
    library: bool = True
    #: tune the blocked (NCHWc) form of convolution workloads, as they run inside a model
    blocked: bool = False
    #: a tuner stops after this many trials without improvement (None: the whole budget)
    early_stopping: int | None = None
    #: whole models: give the in-model check (``tensortune check``) to the tensortune systems
    #: tuned before ``tune`` ran it at its end, and benchmark their models again
    confirm_tuned: bool = False


FULL = Settings()
#: Rounds of ``python -m bench remeasure`` (a folder's kept kernels timed again): more than a run's
#: final rounds, so that each state of the host (``remeasure.py``) has rounds of its own.
REMEASURE_ROUNDS = 9
#: Smoke run: a few workloads, small budgets; under 10 minutes on a 2-core machine. MetaSchedule
#: is left out of its model part: its gradient scheduler gives each of resnet18's 20 tasks one
#: iteration before any budget applies (15 min here even at 16 candidates per iteration); the
#: tests run that path on a tiny model.
QUICK = replace(FULL, tuners=("random", "autotvm", "metaschedule"), budget=16, workloads=("C3", "QKV"),
                model_tuners=("autotvm",), model_budget_s=30.0, ms_batch=16, rounds=3)
