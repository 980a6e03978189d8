"""Task samplers over the shipped zoo statistics: pgs (prior-guided), random, modelzoo."""
from __future__ import annotations

from collections import Counter

import pytest

from tensortune.dataset.layers import load
from tensortune.dataset.tasks import TASK_SAMPLERS, layer_counts, overlap, sample_pgs, sample_tasks
from tensortune.task import Task

PRIOR, EVALUATED = load()


@pytest.mark.parametrize("sampler", sorted(TASK_SAMPLERS))
@pytest.mark.parametrize("op", ["conv2d", "depthwise_conv2d", "dense"])
def test_distinct_valid_reproducible(sampler: str, op: str) -> None:
    tasks = sample_tasks(sampler, PRIOR, op, 40, seed=0)
    assert 0 < len(tasks) <= 40 and len({t.key() for t in tasks}) == len(tasks)
    for t in tasks[:5]:
        assert Task.from_op(t.op, t.shape).flops > 0  # a real, valid task
    assert sample_tasks(sampler, PRIOR, op, 40, seed=0) == tasks


def test_pgs_follows_the_prior_and_still_reaches_unseen_layers() -> None:
    seen = set(layer_counts(PRIOR, "conv2d"))
    strict = sample_pgs(PRIOR, "conv2d", 100, seed=1, backoff=0.0)
    assert all(t.key()[1] in seen for t in strict)  # every value conditioned on all before it: real layers
    loose = sample_pgs(PRIOR, "conv2d", 150, seed=1)
    assert any(t.key()[1] not in seen for t in loose)  # backoff: combinations no model has
    # common layers come out often: the prior's most frequent kernel size is pgs's most frequent too,
    # while random draws kernel sizes uniformly
    prior_k = Counter()
    for args, n in layer_counts(PRIOR, "conv2d").items():
        prior_k[args[4]] += n
    pgs_k = Counter(t.shape["K"] for t in loose)
    rnd_k = Counter(t.shape["K"] for t in sample_tasks("random", PRIOR, "conv2d", 150, seed=1))
    assert pgs_k.most_common(1)[0][0] == prior_k.most_common(1)[0][0]
    assert pgs_k.most_common(1)[0][1] > 2 * rnd_k[prior_k.most_common(1)[0][0]]


def test_modelzoo_is_the_prior_layers_and_overlap_counts_the_evaluation() -> None:
    zoo = sample_tasks("modelzoo", PRIOR, "depthwise_conv2d", 1000, seed=0)
    assert {t.key()[1] for t in zoo} == set(layer_counts(PRIOR, "depthwise_conv2d"))
    hits, total = overlap(zoo, EVALUATED)
    assert total == len({a for s in EVALUATED for (o, a) in s.layers if o == "depthwise_conv2d"}) and 0 <= hits <= total


def test_bad_names() -> None:
    with pytest.raises(ValueError, match="unknown task sampler"):
        sample_tasks("nope", PRIOR, "conv2d", 1)
    with pytest.raises(ValueError, match="unknown op class"):
        sample_tasks("pgs", PRIOR, "conv3d", 1)
