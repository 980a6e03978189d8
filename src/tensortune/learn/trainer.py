"""The one trainer of every pre-trained cost model (One-Shot Tuner; Fasor and Trimmer reuse it).

:func:`train_predictor` fits a predictor of normalised throughput on a :class:`~.data.TrainingData`:

- the neural kinds (``transformer``, ``mlp``, ``lstm``: :mod:`.nets`) with MSE, Adam and
  mini-batches drawn by a ``WeightedRandomSampler`` that oversamples the rare fast candidates by
  inverse label frequency; inputs standardised with training-set statistics; a share of the
  training tasks held out for early stopping (the state with the lowest validation loss is kept);
- ``xgb``: XGBoost regression on the same rows, weighted the same way, early-stopped on the
  same validation tasks.

Defaults are One-Shot Tuner's Table 2 (batch 512, learning rate 1e-4, weight decay 5e-5) and
declared once, in :class:`TrainOptions` (Fasor's settings are :data:`tensortune.learn.fasor.FASOR_TRAIN`).
Data with ``targets`` (several outputs, Fasor) is regressed on all of them, each standardised
with training-set statistics (kept in the schema). ``init_from`` fine-tunes a trained neural
predictor instead of starting afresh (Fasor's few-shot transfer): its net, input and target
standardisation are kept, and the learning rate follows ``lr_schedule``. Training is seeded: the same data, options and seed
give the same predictor (PyTorch's CPU kernels are deterministic for these layers).
"""
from __future__ import annotations

import copy
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from .data import Standardizer, TrainingData, oversampling_weights
from .metrics import ranking_metrics
from .predictor import FORMAT, NeuralPredictor, Predictor, XGBPredictor

#: Predictor kinds the trainer makes.
KINDS = ("transformer", "mlp", "lstm", "xgb")
#: Learning-rate schedules: ``constant``; ``linear`` decay to 0 over the ``max_epochs`` (Fasor's
#: pre-training); ``fewshot``: epoch T (from 0) runs at ``lr x K / (K + T)``, K = ``fewshot_k``
#: (Fasor's alpha = K / (K + T), our reading of its Sec. 7: the step size of fine-tuning shrinks
#: as transfer epochs pass, so a few target-machine records adjust the model without erasing it).
LR_SCHEDULES = ("constant", "linear", "fewshot")


@dataclass(frozen=True)
class TrainOptions:
    """How a predictor is trained (see the module). ``net_options``: the net's hyper-parameters
    (:mod:`.nets`; defaults there; ``net.d_model=64`` as text); ``max_epochs`` passes over the training rows at most,
    stopped after ``patience`` epochs without a better validation loss, or after
    ``time_budget`` seconds; ``val_fraction`` of the training tasks validate."""

    kind: str = "transformer"
    net_options: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 512
    lr: float = 1e-4
    weight_decay: float = 5e-5
    max_epochs: int = 200
    patience: int = 15
    val_fraction: float = 0.1
    oversample: bool = True
    bins: int = 10
    seed: int = 0
    time_budget: float | None = None
    threads: int | None = None
    xgb_rounds: int = 2000
    lr_schedule: str = "constant"
    fewshot_k: float = 10.0
    init: str = "default"
    trainable: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"unknown lr_schedule {self.lr_schedule!r}; known: {', '.join(LR_SCHEDULES)}")
        if self.init not in ("default", "xavier"):
            raise ValueError("init must be default or xavier")
        if self.fewshot_k <= 0:
            raise ValueError("fewshot_k must be positive")
        if self.kind not in KINDS:
            raise ValueError(f"unknown predictor kind {self.kind!r}; known: {', '.join(KINDS)}")
        if self.batch_size < 1 or self.max_epochs < 1 or self.patience < 1 or self.bins < 1:
            raise ValueError("batch_size, max_epochs, patience and bins must be at least 1")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError("val_fraction must lie in [0, 1)")
        if self.lr <= 0 or self.weight_decay < 0:
            raise ValueError("lr must be positive and weight_decay at least 0")


@dataclass
class TrainReport:
    """What a training run did: epochs, seconds, losses per epoch and validation metrics."""

    epochs: int = 0
    best_epoch: int = 0
    seconds: float = 0.0
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_metrics: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON form (kept in the predictor's schema)."""
        return asdict(self)


def _schema(data: TrainingData, options: TrainOptions) -> dict[str, Any]:
    from ..features.loop_ast import CURVE_BUFFERS, N_CURVE_GLOBALS

    s = data.summary
    return {"format": FORMAT, "kind": options.kind, "op": data.op,
            "label": "normalised throughput on the measuring machine: best cost / cost" if data.targets is None
                     else f"the targets {', '.join(s.get('target_names', []))}; r2 scores the first",
            "inputs": {"curve_dim": int(data.curve.shape[1]), "knob_dim": int(data.knob.shape[1]),
                       "task_features": data.task_features, "curve_buffers": CURVE_BUFFERS,
                       "curve_globals": N_CURVE_GLOBALS, "hw_features": list(s.get("hw_features", []))},
            "targets": list(s.get("target_names", [])) if data.targets is not None else ["normalised_throughput"],
            "dataset": {"samples": len(data), "tasks": int(len(data.tasks())), "machines": s.get("machines", []),
                        "dropped": s.get("dropped"), "max_slowdown": s.get("max_slowdown"),
                        "task_names": [t.get("name") for t in s.get("tasks", [])], "spec": s.get("spec")}}


def train_predictor(data: TrainingData, options: TrainOptions = TrainOptions(),
                    on_epoch: Callable[[int, float, float], None] = lambda e, t, v: None,
                    init_from: Predictor | None = None) -> tuple[Predictor, TrainReport]:
    """A predictor of ``data``'s labels (see the module) and the report of its training.
    ``on_epoch(epoch, train_loss, val_loss)`` is called after every epoch (neural kinds);
    ``init_from``: a neural predictor to fine-tune (same inputs and outputs as ``data``)."""
    if len(data) == 0:
        raise ValueError("no training rows")
    if init_from is not None:
        if not isinstance(init_from, NeuralPredictor) or options.kind == "xgb":
            raise ValueError("only a neural predictor can be fine-tuned")
        want = init_from.schema["inputs"]
        if (int(want["curve_dim"]), int(want["knob_dim"]), list(want["task_features"]), init_from.hw_features) != (
                data.curve.shape[1], data.knob.shape[1], data.task_features, list(data.summary.get("hw_features", []))):
            raise ValueError("the data's inputs differ from the predictor's (curve/knob width, task or hardware features)")
        if len(init_from.targets) != data.regression_targets.shape[1]:
            raise ValueError(f"the predictor has {len(init_from.targets)} outputs, the data {data.regression_targets.shape[1]}")
    train, val = data.split(options.val_fraction, seed=options.seed)
    if len(val) == 0:
        val = train  # a single task: validate on what is trained (stated in the report)
    schema = _schema(data, options)
    schema["training"] = {"options": asdict(options), "train_tasks": int(len(train.tasks())),
                          "val_tasks": int(len(val.tasks()))}
    if options.kind == "xgb":
        predictor, report = _train_xgb(train, val, schema, options)
    else:
        predictor, report = _train_net(train, val, schema, options, on_epoch, init_from)
    report.val_metrics = evaluate(predictor, val)
    schema["training"]["report"] = report.to_json()
    return predictor, report


def lr_factor(o: TrainOptions, t: int, total_steps: int) -> float:
    """The learning-rate multiplier of ``o.lr_schedule`` at ``t``: batches done (``linear``,
    falling to 0 at ``total_steps``) or epochs done (``fewshot``: alpha = K / (K + T))."""
    if o.lr_schedule == "linear":
        return max(0.0, 1.0 - t / max(total_steps, 1))
    if o.lr_schedule == "fewshot":
        return o.fewshot_k / (o.fewshot_k + t)
    return 1.0


def evaluate(predictor: Predictor, data: TrainingData) -> dict[str, Any]:
    """Ranking metrics of the predictor's score against the labels (:func:`.metrics.ranking_metrics`)
    and, for data with ``targets``, the R^2 of each output the predictor has
    (``r2_<target name>``; the first is the regression quality Fasor's Table 8 reports).

    ``r2`` is the R^2 of what the first output predicts: the label for a one-output predictor,
    the first target for one with ``targets`` (its first output is, say, -ln latency, on another
    scale than the normalised-throughput label, so an R^2 against the label means nothing)."""
    from .metrics import r2

    x = data.inputs()
    out = predictor.predict_outputs(x)
    m = ranking_metrics(data.label, out[:, 0], data.task_index)
    if data.targets is not None:
        for j, name in enumerate(predictor.targets[: out.shape[1]]):
            m[f"r2_{name}"] = r2(data.targets[:, j], out[:, j])
        m["r2"] = m[f"r2_{predictor.targets[0]}"]
    return m


def _train_net(train: TrainingData, val: TrainingData, schema: dict[str, Any], o: TrainOptions,
               on_epoch: Callable[[int, float, float], None],
               init_from: NeuralPredictor | None = None) -> tuple[Predictor, TrainReport]:
    import torch
    from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

    from ..utils.threads import torch_threads
    from .nets import make_net, xavier_init
    from .predictor import layout_of

    torch.manual_seed(o.seed)
    with torch_threads(o.threads or os.cpu_count() or 1):
        x_train = train.inputs()
        multi = train.targets is not None
        if init_from is not None:
            std, tstd = init_from.standardizer, init_from.target_standardizer
            net, schema["net"] = copy.deepcopy(init_from.net), dict(init_from.schema["net"])
            schema["targets"] = init_from.targets
        else:
            std = Standardizer.fit(x_train)
            tstd = Standardizer.fit(train.regression_targets) if multi else None
            net, schema["net"] = make_net(o.kind, layout_of(schema), o.net_options, train.regression_targets.shape[1])
            if o.init == "xavier":
                xavier_init(net)
        schema["standardizer"] = std.to_json()
        if tstd is not None:
            schema["target_standardizer"] = tstd.to_json()

        def labels(d: TrainingData) -> Any:
            y = d.regression_targets
            return torch.from_numpy(tstd(y) if tstd is not None else y[:, 0].astype(np.float32))

        xt, yt = torch.from_numpy(std(x_train)), labels(train)
        xv, yv = torch.from_numpy(std(val.inputs())), labels(val)
        gen = torch.Generator().manual_seed(o.seed)
        if o.oversample:
            weights = torch.from_numpy(oversampling_weights(train.label, o.bins))
            sampler = WeightedRandomSampler(weights, num_samples=len(train), replacement=True, generator=gen)
            loader = DataLoader(TensorDataset(xt, yt), batch_size=o.batch_size, sampler=sampler)
        else:
            loader = DataLoader(TensorDataset(xt, yt), batch_size=o.batch_size, shuffle=True, generator=gen)
        if o.trainable:  # only the parameters named by these prefixes learn (the rest are frozen)
            for name, prm in net.named_parameters():
                prm.requires_grad_(any(name.startswith(t) for t in o.trainable))
        opt = torch.optim.Adam([q for q in net.parameters() if q.requires_grad], lr=o.lr, weight_decay=o.weight_decay)
        steps = max(1, o.max_epochs * len(loader))
        # linear: stepped per batch; fewshot: per epoch
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: lr_factor(o, t, steps)) \
            if o.lr_schedule != "constant" else None
        loss_fn = torch.nn.MSELoss()
        report = TrainReport()
        best, best_state, since = math.inf, copy.deepcopy(net.state_dict()), 0
        start = time.perf_counter()
        for epoch in range(1, o.max_epochs + 1):
            net.train()
            total, n = 0.0, 0
            for xb, yb in loader:
                opt.zero_grad()
                loss = loss_fn(net(xb), yb)
                loss.backward()
                opt.step()
                if o.lr_schedule == "linear":
                    sched.step()
                total += float(loss.detach()) * len(yb)
                n += len(yb)
            if o.lr_schedule == "fewshot":
                sched.step()
            net.eval()
            with torch.inference_mode():
                sse = sum(float(((net(xv[i:i + 8192]) - yv[i:i + 8192]) ** 2).sum()) for i in range(0, len(yv), 8192))
            vloss = sse / max(yv.numel(), 1)
            report.train_loss.append(total / max(n, 1))
            report.val_loss.append(vloss)
            report.epochs = epoch
            on_epoch(epoch, report.train_loss[-1], vloss)
            if vloss < best - 1e-7:
                best, best_state, since, report.best_epoch = vloss, copy.deepcopy(net.state_dict()), 0, epoch
            else:
                since += 1
            if since >= o.patience:
                report.stop_reason = f"no better validation loss for {o.patience} epochs"
                break
            if o.time_budget is not None and time.perf_counter() - start >= o.time_budget:
                report.stop_reason = f"time budget of {o.time_budget:g} s spent"
                break
        else:
            report.stop_reason = f"{o.max_epochs} epochs"
        report.seconds = time.perf_counter() - start
        net.load_state_dict(best_state)
        return NeuralPredictor(schema, net, std), report


def _train_xgb(train: TrainingData, val: TrainingData, schema: dict[str, Any],
               o: TrainOptions) -> tuple[Predictor, TrainReport]:
    import xgboost as xgb

    start = time.perf_counter()
    weights = oversampling_weights(train.label, o.bins) * len(train) if o.oversample else None
    dtrain = xgb.DMatrix(train.inputs(), label=train.regression_targets[:, 0], weight=weights)
    dval = xgb.DMatrix(val.inputs(), label=val.regression_targets[:, 0])
    schema["targets"] = schema["targets"][:1]  # XGBoost regresses the first (ranking) target only
    params = {"objective": "reg:squarederror", "max_depth": 8, "eta": 0.05, "subsample": 0.9,
              "colsample_bytree": 0.8, "min_child_weight": 1.0, "seed": o.seed, "nthread": o.threads or os.cpu_count() or 1}
    evals: dict[str, Any] = {}
    booster = xgb.train(params, dtrain, num_boost_round=o.xgb_rounds, evals=[(dtrain, "train"), (dval, "val")],
                        early_stopping_rounds=50, evals_result=evals, verbose_eval=False)
    booster = booster[: booster.best_iteration + 1]
    schema["net"] = {"params": {k: v for k, v in params.items() if k != "nthread"}, "rounds": booster.num_boosted_rounds()}
    report = TrainReport(epochs=booster.num_boosted_rounds(), best_epoch=booster.num_boosted_rounds(),
                         seconds=time.perf_counter() - start,
                         train_loss=[float(v) ** 2 for v in evals["train"]["rmse"]],
                         val_loss=[float(v) ** 2 for v in evals["val"]["rmse"]],
                         stop_reason="early stopping on the validation tasks (50 rounds)")
    return XGBPredictor(schema, booster), report
