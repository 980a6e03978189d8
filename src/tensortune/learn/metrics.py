"""How well a predictor ranks candidates: R^2, Spearman, top-k recall of the measured best.

Labels are per-task normalised throughputs, so ranking quality is judged within each task:
Spearman is the mean over tasks of the rank correlation; top-k recall is the share of tasks
whose measured best candidate is among the k the model rates highest; ``top64_quality`` is the
mean over tasks of the best label among the model's top 64, what One-Shot Tuner's single
validation of 64 candidates would have found among these samples. R^2 is over all rows.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def r2(y: np.ndarray, pred: np.ndarray) -> float:
    """Coefficient of determination (1 is perfect, 0 is the mean's score)."""
    y, pred = np.asarray(y, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    ss = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else 0.0


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 with ties given their average rank."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x), dtype=np.float64)
    r[order] = np.arange(len(x), dtype=np.float64)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=r)
    return sums[inv] / counts[inv]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (0 when either side is constant)."""
    ra, rb = ranks(a), ranks(b)
    ra -= ra.mean()
    rb -= rb.mean()
    den = float(np.sqrt((ra ** 2).sum() * (rb ** 2).sum()))
    return float((ra * rb).sum() / den) if den > 0 else 0.0


def ranking_metrics(y: np.ndarray, pred: np.ndarray, task_index: np.ndarray, ks: tuple[int, ...] = (1, 5),
                    top_quality: int = 64) -> dict[str, Any]:
    """R^2, mean per-task Spearman, top-k recall of each task's measured best and the mean best
    label among each task's predicted top ``top_quality`` (see the module)."""
    y, pred, task_index = np.asarray(y), np.asarray(pred), np.asarray(task_index)
    rhos, hits, quality = [], {k: [] for k in ks}, []
    for t in np.unique(task_index):
        m = task_index == t
        yt, pt = y[m], pred[m]
        if len(yt) < 2:
            continue
        rhos.append(spearman(yt, pt))
        order = np.argsort(-pt, kind="mergesort")
        best = yt.max()
        for k in ks:
            hits[k].append(float((yt[order[:k]] >= best).any()))
        quality.append(float(yt[order[:top_quality]].max() / best) if best > 0 else 0.0)
    out: dict[str, Any] = {"rows": int(len(y)), "tasks": len(rhos), "r2": r2(y, pred),
                           "spearman": float(np.mean(rhos)) if rhos else 0.0}
    for k in ks:
        out[f"top{k}_recall"] = float(np.mean(hits[k])) if hits[k] else 0.0
    out[f"top{top_quality}_quality"] = float(np.mean(quality)) if quality else 0.0
    return out
