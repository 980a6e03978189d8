"""Ranking metrics against hand-computed values."""
from __future__ import annotations

import numpy as np

from tensortune.learn.metrics import r2, ranking_metrics, ranks, spearman


def test_r2_and_spearman() -> None:
    y = np.array([1.0, 2.0, 3.0, 4.0])
    assert r2(y, y) == 1.0 and np.isclose(r2(y, np.full(4, 2.5)), 0.0)
    assert np.isclose(spearman(y, y ** 3), 1.0) and np.isclose(spearman(y, -y), -1.0)
    assert list(ranks(np.array([3.0, 1.0, 3.0]))) == [1.5, 0.0, 1.5]  # ties share their average rank
    assert spearman(y, np.ones(4)) == 0.0


def test_ranking_metrics_per_task() -> None:
    y = np.array([1.0, 0.5, 0.2, 1.0, 0.3, 0.6])
    task = np.array([0, 0, 0, 1, 1, 1])
    good = ranking_metrics(y, y, task)
    assert good["tasks"] == 2 and good["top1_recall"] == 1.0 and np.isclose(good["spearman"], 1.0)
    bad = ranking_metrics(y, -y, task, ks=(1, 3), top_quality=1)
    assert bad["top1_recall"] == 0.0 and bad["top3_recall"] == 1.0
    assert np.isclose(bad["top1_quality"], np.mean([0.2, 0.3]))
