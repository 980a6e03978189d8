"""XGBoost cost models: AutoTVM's ranking / regression model and a bootstrap ensemble.

Defaults are AutoTVM's (``XGBoostCostModel`` in ``tvm/autotvm/tuner/xgboost_cost_model.py``
of TVM <= 0.15): max_depth 3, eta 0.3, gamma 1e-4, min_child_weight 1, subsample 1, up to
8000 rounds with early stopping when the training set's average top-k recall stops rising.

Transfer learning: a model given a ``base`` model trains on top of the base's margin
(``f = f_base + f_local``: XGBoost's ``base_margin``), which is how AutoTVM adds a global
model from other tasks to the local one.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..features import get_extractor
from ..features.base import FeatureExtractor, pad_rows
from ..space import Config
from .base import CostModel, TaskData

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: AutoTVM's booster parameters.
XGB_PARAMS: dict[str, Any] = {
    "max_depth": 3, "eta": 0.3, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0,
    "lambda": 1.0, "alpha": 0.0,
}
OBJECTIVES = {"rank": "rank:pairwise", "reg": "reg:squarederror"}
MAX_ROUNDS = 8000
EARLY_STOPPING_ROUNDS = 25
#: k of the top-k recall that ends boosting (AutoTVM uses its plan size, 64).
RECALL_K = 64
#: Below this many samples (or with no successful sample) a model is not fitted.
MIN_FIT_SAMPLES = 2
#: Bootstrap ensemble defaults.
ENSEMBLE_SIZE = 5
UCB_KAPPA = 2.0
ACQUISITIONS = ("mean", "ei", "ucb")


def average_recall(pred: np.ndarray, labels: np.ndarray, groups: Sequence[int], k: int) -> float:
    """Mean over groups of the average of recall@1..k: the share of the true top-n found in
    the predicted top-n (AutoTVM's ``a-recall@k`` early-stopping score)."""
    total, n_groups, start = 0.0, 0, 0
    for size in groups:
        p, y = pred[start:start + size], labels[start:start + size]
        start += size
        kk = min(k, size)
        if kk == 0:
            continue
        true_rank = np.argsort(-y, kind="stable")
        pred_rank = np.argsort(-p, kind="stable")
        seen_true: set[int] = set()
        seen_pred: set[int] = set()
        curve = 0.0
        for n in range(kk):
            seen_true.add(int(true_rank[n]))
            seen_pred.add(int(pred_rank[n]))
            curve += len(seen_true & seen_pred) / (n + 1)
        total += curve / kk
        n_groups += 1
    return total / max(n_groups, 1)


@dataclass(frozen=True)
class XGBOptions:
    """``recall_k``: the validation metric's top-k; ``max_rounds``: boosting rounds at most (early
    stopping ends sooner); ``nthread``: XGBoost's threads (default: its own); ``params``: booster
    parameters over the defaults."""

    recall_k: int = RECALL_K
    max_rounds: int = MAX_ROUNDS
    nthread: int | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EnsembleOptions:
    """``n_models`` bootstrap members; ``kappa`` of the UCB acquisition; ``nthread`` per member."""

    n_models: int = ENSEMBLE_SIZE
    kappa: float = UCB_KAPPA
    nthread: int | None = None


class XGBoostCostModel(CostModel):
    """Gradient-boosted trees on one feature kind, ranking (default) or regression objective."""

    name = "xgb"
    Options = XGBOptions

    @classmethod
    def create(cls, options: XGBOptions, *, feature: str, objective: str, seed: int, acquisition: str | None,
               base: CostModel | None) -> XGBoostCostModel:
        return cls(feature, objective, seed, base=base, **asdict(options))

    def __init__(self, feature: str | FeatureExtractor = "itervar", objective: str = "rank", seed: int = 0,
                 base: CostModel | None = None, recall_k: int = RECALL_K, max_rounds: int = MAX_ROUNDS,
                 nthread: int | None = None, params: dict[str, Any] | None = None) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; known: {', '.join(OBJECTIVES)}")
        self.extractor = get_extractor(feature) if isinstance(feature, str) else feature
        self.objective = objective
        self.seed = seed
        self.base = base
        self.recall_k = recall_k
        self.max_rounds = max_rounds
        self.nthread = nthread
        self.params = {**XGB_PARAMS, **(params or {})}
        self.booster: Any = None
        self.width = 0
        self.rounds = 0
        self._tables: dict[Any, Any] = {}  # knob lookup tables of position_scorer, per task

    @property
    def feature(self) -> str:
        """Short name of the feature kind."""
        return self.extractor.name

    @property
    def fitted(self) -> bool:
        return self.booster is not None or (self.base is not None and self.base.fitted)

    # -------------------------------------------------------------- data
    def features(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        """Feature rows of ``configs``, padded to the width the model was trained on."""
        x = self.extractor.extract(task, configs)
        return pad_rows(list(x), self.width) if self.width and x.shape[1] != self.width else x

    def _base_margin(self, task: Task, configs: Sequence[Config]) -> np.ndarray | None:
        if self.base is None or not self.base.fitted:
            return None
        return np.asarray(self.base.predict(task, configs), dtype=np.float32)

    def _dmatrix(self, x: np.ndarray, margin: np.ndarray | None, labels: np.ndarray | None = None) -> Any:
        import xgboost as xgb

        d = xgb.DMatrix(x, label=labels, nthread=self.nthread or -1)
        if margin is not None:
            d.set_base_margin(margin)
        return d

    # -------------------------------------------------------------- training
    def fit(self, data: Sequence[TaskData]) -> None:
        import xgboost as xgb

        data = [d for d in data if len(d)]
        rows, labels, margins, groups = [], [], [], []
        for d in data:
            x = self.extractor.extract(d.task, d.configs)
            rows.extend(list(x))
            labels.append(d.labels())
            groups.append(len(d))
            m = self._base_margin(d.task, d.configs)
            margins.append(m if m is not None else np.zeros(len(d), dtype=np.float32))
        y = np.concatenate(labels) if labels else np.zeros(0, dtype=np.float32)
        if len(y) < MIN_FIT_SAMPLES or not np.any(y > 0) or max(len(r) for r in rows) == 0:
            self.booster = None  # nothing to learn yet (the base model, if any, still predicts)
            return
        self.width = max(len(r) for r in rows)
        x = pad_rows(rows, self.width)
        margin = np.concatenate(margins) if self.base is not None and self.base.fitted else None
        dtrain = self._dmatrix(x, margin, y)
        if self.objective == "rank":
            dtrain.set_group(groups)
        params = {**self.params, "objective": OBJECTIVES[self.objective], "seed": self.seed,
                  "verbosity": 0, "disable_default_eval_metric": 1}
        if self.nthread:
            params["nthread"] = self.nthread
        k = self.recall_k

        def recall_metric(pred: np.ndarray, dm: Any) -> tuple[str, float]:
            return f"a-recall@{k}", average_recall(pred, y, groups, k)

        booster = xgb.train(params, dtrain, num_boost_round=self.max_rounds, evals=[(dtrain, "tr")],
                            custom_metric=recall_metric, maximize=True,
                            early_stopping_rounds=EARLY_STOPPING_ROUNDS, verbose_eval=False)
        self.rounds = booster.best_iteration + 1
        self.booster = booster

    def predict_matrix(self, x: np.ndarray, margin: np.ndarray | None = None) -> np.ndarray:
        """Scores of ready-made feature rows (the annealer's fast path; no base model)."""
        if self.booster is None:
            return np.zeros(len(x)) if margin is None else margin.astype(np.float64)
        if x.shape[1] != self.width:
            x = pad_rows(list(x), self.width)
        d = self._dmatrix(x, margin)
        return np.asarray(self.booster.predict(d, iteration_range=(0, self.rounds)), dtype=np.float64)

    def position_scorer(self, task: Task, space: Any = None) -> Callable[[np.ndarray], np.ndarray] | None:
        """With knob features and no base model: positions of ``task.space`` -> scores through a
        per-task lookup table of knob encodings (:class:`~tensortune.features.knob.KnobTable`);
        None for a view of the space."""
        if self.feature != "knob" or self.base is not None or (space is not None and space is not task.space):
            return None
        key = getattr(task, "workload_key", id(task))
        table = self._tables.get(key)
        if table is None:
            from ..features.knob import KnobTable

            table = self._tables[key] = KnobTable(task.space)
        return lambda pos: self.predict_matrix(table.encode(pos))

    def predict(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        if not configs:
            return np.zeros(0)
        margin = self._base_margin(task, configs)
        if self.booster is None:
            return margin.astype(np.float64) if margin is not None else np.zeros(len(configs))
        d = self._dmatrix(self.features(task, configs), margin)
        return np.asarray(self.booster.predict(d, iteration_range=(0, self.rounds)), dtype=np.float64)

    # -------------------------------------------------------------- persistence
    def save(self, path: str | Path) -> None:
        """The booster as XGBoost JSON plus a ``.meta.json`` sidecar (the base model is not saved)."""
        if self.booster is None:
            raise ValueError("the model is not fitted")
        path = Path(path)
        self.booster.save_model(str(path))
        meta = {"feature": self.feature, "objective": self.objective, "width": self.width, "rounds": self.rounds,
                "seed": self.seed, "recall_k": self.recall_k}
        path.with_suffix(path.suffix + ".meta.json").write_text(json.dumps(meta))

    def load(self, path: str | Path) -> None:
        import xgboost as xgb

        path = Path(path)
        meta = json.loads(path.with_suffix(path.suffix + ".meta.json").read_text())
        booster = xgb.Booster()
        booster.load_model(str(path))
        self.extractor = get_extractor(meta["feature"])
        self.objective, self.width, self.rounds = meta["objective"], int(meta["width"]), int(meta["rounds"])
        self.booster = booster


class BootstrapEnsemble(CostModel):
    """``n_models`` XGBoost models, each fitted on a bootstrap resample of every task's data.

    ``predict`` returns the acquisition value: ``mean``, ``ucb`` (mean + kappa * std) or
    ``ei`` (expected improvement over the best label seen, 1.0 after normalisation).
    Regression is the default objective: its scores live on the label scale, which the
    improvement threshold needs.
    """

    name = "xgb-ensemble"
    Options = EnsembleOptions

    @classmethod
    def create(cls, options: EnsembleOptions, *, feature: str, objective: str, seed: int,
               acquisition: str | None, base: CostModel | None) -> BootstrapEnsemble:
        return cls(feature, objective, seed, acquisition=acquisition or "ei", base=base, **asdict(options))

    def __init__(self, feature: str | FeatureExtractor = "itervar", objective: str = "reg", seed: int = 0,
                 n_models: int = ENSEMBLE_SIZE, acquisition: str = "ei", kappa: float = UCB_KAPPA,
                 base: CostModel | None = None, nthread: int | None = None) -> None:
        if acquisition not in ACQUISITIONS:
            raise ValueError(f"unknown acquisition {acquisition!r}; known: {', '.join(ACQUISITIONS)}")
        extractor = get_extractor(feature) if isinstance(feature, str) else feature
        self.members = [XGBoostCostModel(extractor, objective, seed + i, base=base, nthread=nthread)
                        for i in range(n_models)]
        self.acquisition = acquisition
        self.kappa = kappa
        self.seed = seed
        self.best_label = 1.0

    @property
    def feature(self) -> str:
        """Short name of the feature kind."""
        return self.members[0].feature

    @property
    def fitted(self) -> bool:
        return any(m.fitted for m in self.members)

    def fit(self, data: Sequence[TaskData]) -> None:
        rng = np.random.default_rng(self.seed)
        for m in self.members:
            sample = []
            for d in data:
                if not len(d):
                    continue
                pick = rng.integers(0, len(d), size=len(d))
                sample.append(TaskData(d.task, [d.configs[i] for i in pick], [d.costs[i] for i in pick]))
            m.fit(sample)

    def save(self, path: str | Path) -> None:
        """Every member as ``path.<i>`` (XGBoost JSON + sidecar) and the ensemble's settings as
        ``path`` (JSON); the base model is not saved."""
        path = Path(path)
        for i, m in enumerate(self.members):
            m.save(path.with_name(f"{path.name}.{i}"))
        path.write_text(json.dumps({"kind": self.name, "n_models": len(self.members), "acquisition": self.acquisition,
                                    "kappa": self.kappa, "seed": self.seed, "best_label": self.best_label}))

    def load(self, path: str | Path) -> None:
        path = Path(path)
        meta = json.loads(path.read_text())
        if meta.get("kind") != self.name:
            raise ValueError(f"{path} is not a saved {self.name} model")
        members = []
        for i in range(int(meta["n_models"])):
            m = XGBoostCostModel(self.members[0].extractor, self.members[0].objective, self.seed + i)
            m.load(path.with_name(f"{path.name}.{i}"))
            members.append(m)
        self.members = members
        self.acquisition, self.kappa = str(meta["acquisition"]), float(meta["kappa"])
        self.seed, self.best_label = int(meta["seed"]), float(meta["best_label"])

    def predict_dist(self, task: Task, configs: Sequence[Config]) -> tuple[np.ndarray, np.ndarray]:
        preds = np.stack([m.predict(task, configs) for m in self.members])
        return preds.mean(axis=0), preds.std(axis=0)

    def predict(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        mean, std = self.predict_dist(task, configs)
        return acquisition_value(self.acquisition, mean, std, self.best_label, self.kappa)


def acquisition_value(kind: str, mean: np.ndarray, std: np.ndarray, best: float, kappa: float = UCB_KAPPA) -> np.ndarray:
    """Acquisition for maximisation: ``mean``, ``ucb`` or ``ei`` (closed form for a normal)."""
    if kind == "mean":
        return mean
    if kind == "ucb":
        return mean + kappa * std
    if kind == "ei":
        s = np.maximum(std, 1e-9)
        z = (mean - best) / s
        pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2)))
        return (mean - best) * cdf + s * pdf
    raise ValueError(f"unknown acquisition {kind!r}; known: {', '.join(ACQUISITIONS)}")
