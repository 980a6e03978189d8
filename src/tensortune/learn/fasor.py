"""Fasor's transferable cost model (Huang et al., ICS 2024, Sec. 4): its data, settings and transfer.

The model is the shared Transformer of :mod:`.nets` trained by the shared trainer
(:mod:`.trainer`) on the shared dataset (``tensortune dataset export``), with two additions:

- **Hardware features** (Sec. 4.1) as one more input token: the measuring machine's explicit
  specs and a signature from timing a small fixed set of programs on it
  (:mod:`tensortune.measure.hardware`); the net learns its own embedding of both.
- **Three outputs**: ``neg_log_latency`` (``-ln`` seconds; higher is faster, so it is also the
  ranking score every tuner reads), a compute-bound score and a memory-bound score. The paper
  measures the scores with PMU counters; this machine exposes none (``perf_event_paranoid`` =
  2), so they are derived from the schedule and the measured latency:

  * compute score = achieved FLOP/s / the machine's measured peak FLOP/s;
  * memory score = (bytes the candidate's loops touch, from its features / latency) / the
    machine's measured DRAM bandwidth. Data served from the caches can make it exceed 1.

Few-shot transfer (Sec. 4.2 and 7): the pre-training tasks are clustered by the Spearman
similarity of their task features, ``k`` representative tasks (one per cluster, the medoid) are
measured on the new machine, and the model is fine-tuned on them with the learning rate scaled
by alpha = K / (K + T) at transfer epoch T (K = 10). ``k`` counts tasks here (the paper also uses
k for records in Sec. 8.2; we implement the task reading of Sec. 4.2).
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from .data import TrainingData
from .trainer import TrainOptions

#: The model's outputs, in order (the first is the ranking score).
TARGET_NAMES = ("neg_log_latency", "compute_score", "memory_score")
#: Fasor's network: 4 encoder layers, 8 heads, hidden 128, dropout 0.1 (feed-forward 4 x hidden: ours).
FASOR_NET: dict[str, Any] = {"d_model": 128, "layers": 4, "heads": 8, "ff": 512, "dropout": 0.1}
#: Fasor's pre-training: Xavier initialisation, Adam 5e-4 with linear decay, weight decay 0.01,
#: batch 64, 20 epochs (the state with the best validation loss is kept).
FASOR_TRAIN = TrainOptions(kind="transformer", net_options=FASOR_NET, batch_size=64, lr=5e-4, weight_decay=0.01,
                           max_epochs=20, patience=20, oversample=False, lr_schedule="linear", init="xavier")
#: Few-shot fine-tuning: alpha = K / (K + T) scales the learning rate at epoch T, K = 10 (Sec. 7).
FEWSHOT_K = 10.0
FEWSHOT_TRAIN = replace(FASOR_TRAIN, lr_schedule="fewshot", fewshot_k=FEWSHOT_K, max_epochs=20, patience=20,
                        val_fraction=0.0)
#: Representative tasks measured on a new machine (the paper's k = 10).
FEWSHOT_TASKS = 10
#: Scores are clipped to this (a memory score of data in the caches can exceed 1 many times).
MAX_SCORE = 16.0


def work_of(curve: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(flops, bytes)`` of candidates from their curve features' globals (``log2(1 + x)`` there)."""
    from ..features.loop_ast import CURVE_BUFFERS, CURVE_GLOBAL_NAMES, CURVE_PAIRS, CURVE_THRESHOLDS

    g = CURVE_BUFFERS * len(CURVE_PAIRS) * CURVE_THRESHOLDS
    curve = np.asarray(curve, dtype=np.float64).reshape(len(curve), -1)
    flops = np.exp2(curve[:, g + CURVE_GLOBAL_NAMES.index("log_flops")]) - 1.0
    nbytes = np.exp2(curve[:, g + CURVE_GLOBAL_NAMES.index("log_bytes")]) - 1.0
    return flops, nbytes


def roofline_scores(curve: np.ndarray, latency_s: np.ndarray, peak_gflops: float,
                    bandwidth_gbs: float) -> tuple[np.ndarray, np.ndarray]:
    """``(compute score, memory score)`` of candidates that ran in ``latency_s`` (see the module);
    the ceilings may be per-row arrays (a score against a ceiling of 0 is 0)."""
    flops, nbytes = work_of(curve)
    lat = np.maximum(np.asarray(latency_s, dtype=np.float64), 1e-12)

    def score(work: np.ndarray, ceiling: Any) -> np.ndarray:
        ceiling = np.asarray(ceiling, dtype=np.float64) * 1e9
        return np.clip(np.divide(work / lat, ceiling, out=np.zeros_like(lat), where=ceiling > 0), 0.0, MAX_SCORE)

    return score(flops, peak_gflops), score(nbytes, bandwidth_gbs)


def latencies(data: TrainingData) -> np.ndarray:
    """Each row's measured seconds: its task's best on its machine / its label."""
    best = np.array([float(t.get("best_s", math.nan)) for t in data.summary.get("tasks", [])], dtype=np.float64)
    if len(best) <= int(data.task_index.max(initial=-1)) or np.isnan(best[data.task_index]).any():
        raise ValueError("the training data does not give each task's best seconds (re-export it with this version)")
    return best[data.task_index] / np.maximum(data.label.astype(np.float64), 1e-12)


def fasor_data(data: TrainingData, profiles: Sequence[Any]) -> TrainingData:
    """``data`` with hardware features and Fasor's three targets: ``profiles[i]`` is the
    :class:`~tensortune.measure.hardware.HardwareProfile` of the summary's machine ``i``."""
    from ..measure.hardware import HW_FEATURE_NAMES

    machines = data.summary.get("machines", [])
    if len(profiles) < max(len(machines), int(data.machine_index.max(initial=0)) + 1):
        raise ValueError(f"the data was measured on {len(machines)} machines; {len(profiles)} hardware profiles given")
    lat = latencies(data)
    vectors = np.stack([p.vector() for p in profiles]).astype(np.float32)
    peak = np.array([p.peak_gflops for p in profiles])[data.machine_index]
    bw = np.array([p.bandwidth_gbs for p in profiles])[data.machine_index]
    cs, ms = roofline_scores(data.curve, lat, peak, bw)
    targets = np.stack([-np.log(np.maximum(lat, 1e-12)), cs, ms], axis=1).astype(np.float32)
    summary = {**data.summary, "hw_features": list(HW_FEATURE_NAMES), "target_names": list(TARGET_NAMES),
               "hardware": [p.to_json() for p in profiles]}
    return TrainingData(data.curve, data.knob, data.task, data.label, data.task_index, summary,
                        vectors[data.machine_index], targets, data.machine_index)


def machine_profiles(data: TrainingData, extra: Sequence[Any] = (), measure: bool = True) -> list[Any]:
    """The hardware profile of each machine of ``data``'s summary: one of ``extra`` (profiles
    loaded from files) with the same CPU model, target and threads, else, for a machine of
    this host's CPU model, measured here (cached, :func:`~tensortune.measure.hardware.profile_for`);
    ValueError naming a machine that has none."""
    from ..measure.hardware import profile_for
    from ..target import cpu_model, target_key

    out = []
    for m in data.summary.get("machines", []) or []:
        target = json.loads(m["target"]) if isinstance(m.get("target"), str) else dict(m.get("target") or {})
        threads = int(m.get("threads") or target.get("num-cores") or 1)
        hit = [p for p in extra if p.spec.cpu_model == m.get("cpu_model") and target_key(p.target) == target_key(target)
               and p.threads == threads]
        if hit:
            out.append(hit[0])
        elif measure and m.get("cpu_model") == cpu_model():
            out.append(profile_for(target, threads))
        else:
            raise ValueError(f"no hardware profile of {m.get('cpu_model')} {target.get('mcpu', '?')} x{threads}: "
                             "measure one on that machine with `tensortune hardware --json` and pass it")
    return out


def task_matrix(data: TrainingData) -> tuple[np.ndarray, np.ndarray]:
    """``(task ids, task-feature rows)``: one row per task of ``data``."""
    ids, first = np.unique(data.task_index, return_index=True)
    return ids, data.task[first].astype(np.float64)


def task_similarity(features: np.ndarray) -> np.ndarray:
    """Spearman rank correlation between every two tasks' feature vectors (``[T, T]``; a
    constant vector correlates 0 with everything and 1 with itself)."""
    from .metrics import ranks

    f = np.asarray(features, dtype=np.float64)
    r = np.stack([ranks(row) for row in f]) if len(f) else np.zeros((0, 0))
    r = r - r.mean(axis=1, keepdims=True)
    norm = np.sqrt((r ** 2).sum(axis=1))
    den = np.outer(norm, norm)
    sim = np.divide(r @ r.T, den, out=np.zeros((len(f), len(f))), where=den > 0)
    np.fill_diagonal(sim, 1.0)
    return sim


def representative_tasks(features: np.ndarray, k: int = FEWSHOT_TASKS) -> list[int]:
    """Rows of ``k`` representative tasks: the tasks are clustered (average linkage over
    1 - Spearman similarity) into ``k`` clusters and each cluster's medoid (the task most similar
    on average to the rest of its cluster) is taken, largest cluster first. Deterministic."""
    n = len(features)
    if n == 0:
        return []
    k = min(k, n)
    sim = task_similarity(features)
    if k == n:
        return list(range(n))
    from sklearn.cluster import AgglomerativeClustering

    labels = AgglomerativeClustering(n_clusters=k, metric="precomputed", linkage="average").fit_predict(1.0 - sim)
    reps = []
    for c in range(k):
        members = np.flatnonzero(labels == c)
        medoid = members[int(np.argmax(sim[np.ix_(members, members)].mean(axis=1)))]
        reps.append((-len(members), int(medoid)))
    return [i for _, i in sorted(reps)]
