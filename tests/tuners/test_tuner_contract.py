"""The tuner contract, run over every registered tuner with a fake measurer (no building).

Every tuner must: be reachable by name with frozen options whose unknown keys are refused in
one line; measure the template default first; never measure a config twice; report the best
of what it measured; give the same trials for the same seed; and behave the same through the
step API (``ask`` / ``tell``) as through ``tune``. Model-based tuners run with small plans so
that their models fit and their plans are used within the budget.
"""
from __future__ import annotations

import dataclasses

import pytest

from tensortune.task import Task
from tensortune.tuners import TUNERS, Tuner, get_tuner
from tensortune.tuners.model_based import ModelBasedOptions
from tensortune.utils.options import OptionError

from synthetic import FakeMeasurer, conv_landscape

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}
BUDGET = 48


@pytest.fixture(scope="module")
def task() -> Task:
    return Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)


def small(name: str) -> dict:
    """Options that make a model-based tuner plan (and refit) within :data:`BUDGET` trials."""
    if name == "oneshot":  # a short search (its predictor, or its fallback's model, as shipped)
        return {"explorer_options": {"n_chains": 16, "max_steps": 20}, "cost_model_options": {"workers": 1},
                "distill": 96, "n_finalists": 64}  # plan_size 64 > the budget: the budget ends the run
    if name == "fasor":  # quality mode runs to the budget (efficiency mode ends after one validation)
        return {"mode": "quality", "cost_model_options": {"workers": 1},
                "explorer_options": {"n_walkers": 16, "max_steps": 12}}
    if not issubclass(TUNERS.get(name).Options, ModelBasedOptions):
        return {}
    if not TUNERS.get(name).Options().cost_model in ("xgb", "treegru"):
        raise AssertionError(f"{name}: a frozen-model composition needs its own small options here")
    opts = {"feature": "knob", "plan_size": 16, "warmup": 8, "n_finalists": 32, "n_random_pool": 16}
    explorer = TUNERS.get(name).Options().explorer
    if explorer == "sa":
        opts["explorer_options"] = {"n_chains": 16, "max_steps": 30}
    elif explorer == "ppo":
        opts["explorer_options"] = {"n_episodes": 16, "max_steps": 30, "min_steps": 8}
    return opts


@pytest.fixture(params=TUNERS.names())
def name(request) -> str:
    return request.param


def run(name: str, task: Task, seed: int) -> tuple[list[int], object]:
    m = FakeMeasurer(conv_landscape)
    res = get_tuner(name, task, seed=seed, batch_size=8, options=small(name)).tune(BUDGET, m)
    return m.measured, res


def test_options_and_registration(name, task) -> None:
    cls = TUNERS.get(name)
    assert issubclass(cls, Tuner) and cls.name == name
    assert dataclasses.is_dataclass(cls.Options) and cls.Options.__dataclass_params__.frozen
    tuner = get_tuner(name, task, options=small(name))
    with pytest.raises(dataclasses.FrozenInstanceError):
        tuner.options.__setattr__("x", 1)
    with pytest.raises(OptionError, match=r"unknown option 'no_such_key' for tuner .*; known:"):
        cls.check_options({"no_such_key": "1"})


def test_measures_default_first_never_twice_and_reports_its_best(name, task) -> None:
    measured, res = run(name, task, seed=0)
    assert measured[0] == task.default_config().index
    assert len(measured) == BUDGET == res.trials_measured and len(set(measured)) == BUDGET
    best = min(conv_landscape(task.space.get(i)) for i in measured)
    assert res.best_cost == pytest.approx(best) and conv_landscape(res.best_config) == pytest.approx(best)


def test_same_seed_same_trials(name, task) -> None:
    assert run(name, task, seed=1)[0] == run(name, task, seed=1)[0]


def test_step_api_matches_tune(name, task) -> None:
    """``ask`` / ``tell`` by hand proposes exactly the trials ``tune`` measures."""
    measured, _ = run(name, task, seed=2)
    tuner = get_tuner(name, task, seed=2, batch_size=8, options=small(name))
    m = FakeMeasurer(conv_landscape)
    from tensortune.measure import MeasureInput

    while len(m.measured) < BUDGET:
        configs = tuner.ask(min(8, BUDGET - len(m.measured)))
        tuner.tell(configs, m.measure([MeasureInput(task, c) for c in configs]))
    assert m.measured == measured
