"""The chameleon tuner: its composition, the ablation variants, adaptive batches and its 16 iterations."""
from __future__ import annotations

import pytest

from tensortune.task import Task
from tensortune.tuners import get_tuner
from tensortune.tuners.chameleon import VARIANTS, ChameleonTuner
from tensortune.utils.options import OptionError

from synthetic import FakeMeasurer, conv_landscape

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}
FAST = {"feature": "knob", "warmup": 8, "explorer_options": {"n_episodes": 16, "min_steps": 8, "max_steps": 30}}


@pytest.fixture(scope="module")
def task() -> Task:
    return Task.from_op("conv2d", (14, 14, 64, 64, 3, 1, 1), target=ZNVER4)


def test_defaults_are_the_papers_composition(task) -> None:
    t = get_tuner("chameleon", task)
    o = t.options
    assert (o.cost_model, o.objective, o.explorer, o.selector) == ("xgb", "reg", "ppo", "adaptive")
    assert (o.epsilon, o.n_random_pool, o.iterations) == (0.0, 0, 16)
    assert t.explorer.name == "ppo" and t.selector.adaptive


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_variant_is_one_option_away(task, variant) -> None:
    o = get_tuner("chameleon", task, options={"variant": variant}).options
    assert (o.explorer, o.selector, o.epsilon) == VARIANTS[variant]


def test_a_variant_with_its_own_parts_is_refused(task) -> None:
    with pytest.raises(OptionError, match="variant 'sa-greedy' sets the explorer"):
        ChameleonTuner.check_options({"variant": "sa-greedy", "selector": "diversity"})
    with pytest.raises(OptionError, match="variant must be one of"):
        ChameleonTuner.check_options({"variant": "rl"})


def test_batches_are_the_adaptive_plans_and_it_stops_after_its_iterations(task) -> None:
    m = FakeMeasurer(conv_landscape)
    tuner = get_tuner("chameleon", task, seed=0, batch_size=8, options={**FAST, "iterations": 3})
    res = tuner.tune(1000, m)
    assert res.stop_reason == "3 iterations"
    assert len(tuner.plan_sizes) == 3 and all(8 <= s <= 64 for s in tuner.plan_sizes)
    # one warm-up batch (the default and 7 random configs), then exactly the three plans: a
    # short plan is not filled with random configs
    assert res.trials_measured == len(m.measured) == 8 + sum(tuner.plan_sizes)
    assert len(set(m.measured)) == len(m.measured)
    assert tuner.explorer.stats["calls"] == 3 and tuner.explorer.updates == 3
    assert "iteration 3/3" in tuner.status


def test_greedy_variant_measures_whole_plans(task) -> None:
    m = FakeMeasurer(conv_landscape)
    tuner = get_tuner("chameleon", task, seed=0, batch_size=8, options={**FAST, "variant": "ppo-greedy",
                                                                        "iterations": 2, "plan_size": 24})
    res = tuner.tune(1000, m)
    assert tuner.plan_sizes == [24, 24] and res.trials_measured == 8 + 48


def test_finds_good_configs_of_the_landscape(task) -> None:
    """Within its iterations, chameleon gets close to the landscape's best (a random search of
    the same number of trials is the bar)."""
    m = FakeMeasurer(conv_landscape)
    res = get_tuner("chameleon", task, seed=0, options={**FAST, "iterations": 6}).tune(1000, m)
    r = FakeMeasurer(conv_landscape)
    rnd = get_tuner("random", task, seed=0).tune(res.trials_measured, r)
    assert res.best_cost <= rnd.best_cost


def test_adaptive_sampling_needs_no_rescoring_model(task) -> None:
    """Adaptive sampling clusters the explorer's candidates: only the explorer's knob-feature
    model is fitted; a ranking selector (the diversity variant) fits and asks the cost model."""
    m = FakeMeasurer(conv_landscape)
    adaptive = get_tuner("chameleon", task, seed=0, batch_size=8, options={**FAST, "feature": "itervar",
                                                                             "iterations": 2})
    adaptive.tune(1000, m)
    assert not adaptive.rescores and not adaptive.model.fitted and adaptive.explore_model.fitted
    ranking = get_tuner("chameleon", task, seed=0, batch_size=8,
                        options={**FAST, "feature": "itervar", "iterations": 1, "variant": "sa-diversity",
                                 "explorer_options": {"n_chains": 16, "max_steps": 20}})
    ranking.tune(1000, FakeMeasurer(conv_landscape))
    assert ranking.rescores and ranking.model.fitted
