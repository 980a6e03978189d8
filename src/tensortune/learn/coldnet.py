"""Trimmer's latency network, whose middle layer indexes measured candidates for the cold filter.

(Borowiec et al., "Trimmer: Cost-Efficient Deep Learning Auto-tuning for Cloud Datacenters",
§IV-B.) Each categorical feature (every knob's value, the operator, the target CPU) goes
through an embedding of size 10; the other inputs are the task's theoretical FLOPs, the
operator's arguments and the target's core count (log-scaled). Three fully connected layers,
32-32-1 with ReLU, predict the log latency (standardised). Training: MSE, Adam 1e-3, batch 1024,
10 epochs, a 7:1:2 split of the records, and ``ReduceLROnPlateau`` on the validation loss
(patience 1, minimum 1e-9); the weights of the best validation epoch are kept.

The records are the database's successful, checked trials (any task, any op); where it has too
few, the One-Shot issue's datasets add theirs (:func:`records_from` for a database,
:func:`records_from_shards` for a shard folder such as the shipped ``tensortune/dataset/shipped/conv2d``). The vocabulary
(knob names and values, ops, CPUs) is read from the records; a value never seen maps to an
"unknown" row, a knob an op does not have to an "absent" row.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from ..space import Config
    from ..task import Task

#: §IV-B's settings.
EMBED, HIDDEN, LR, BATCH, EPOCHS, SPLIT = 10, 32, 1e-3, 1024, 10, (0.7, 0.1, 0.2)
#: Operator arguments kept (sorted by name), zero-padded.
N_ARGS = 12
ABSENT, UNKNOWN = 0, 1


@dataclass
class Sample:
    """One measured candidate: its op, arguments, FLOPs, target, knob values and latency."""

    op: str
    args: dict[str, int]
    flops: float
    mcpu: str
    cores: int
    knobs: dict[str, Any]
    cost: float = math.nan


def _value_key(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def sample_of(task: Task, config: Config, cost: float = math.nan) -> Sample:
    """A :class:`Sample` of a tensortune task and config."""
    target = task.target_json
    return Sample(task.op, dict(task.args), float(task.flops), str(target.get("mcpu", "")),
                  int(target.get("num-cores", 0) or 0), dict(config.to_json()["knobs"]), cost)


def _task_samples(task: Task, trials: Iterable[Any], out: list[Sample], limit: int | None) -> bool:
    """Append the samples of one task's successful, checked, non-confirmation trials to ``out``;
    True once ``out`` holds ``limit``."""
    try:
        spec = json.loads(task.task_json)
        target = json.loads(task.target)
    except (TypeError, ValueError):
        return False
    for tr in trials:
        if not tr.ok or not tr.verified or tr.confirmation is not None:
            continue
        out.append(Sample(task.op, dict(spec.get("args", {})), float(task.flops), str(target.get("mcpu", "")),
                          int(target.get("num-cores", 0) or 0), dict(tr.config), tr.cost))
        if limit is not None and len(out) >= limit:
            return True
    return False


def records_from(databases: Iterable[Any], limit: int | None = None) -> list[Sample]:
    """Samples of the successful, checked, non-confirmation trials of ``databases`` (at most
    ``limit``, the first databases first)."""
    out: list[Sample] = []
    for db in databases:
        for t in db.tasks():
            if _task_samples(t, db.trials(t.workload_key), out, limit):
                return out
    return out


def records_from_shards(folder: str | Path, limit: int | None = None) -> list[Sample]:
    """Samples of a dataset's shard folder (:mod:`tensortune.dataset.shards`, e.g. the shipped
    ``tensortune/dataset/shipped/conv2d``), read shard by shard in name order until ``limit``; every line is
    validated (:func:`tensortune.dataset.shards.read_shard`: a bad one raises
    :class:`~tensortune.database.DatabaseError` naming the shard and line)."""
    from ..dataset.shards import SUFFIX, read_shard

    out: list[Sample] = []
    for path in sorted(Path(folder).glob("*" + SUFFIX)):
        parsed = read_shard(path)
        by_task: dict[str, list[Any]] = {}
        for _, tr in parsed.trials:
            by_task.setdefault(tr.workload_key, []).append(tr)
        for _, task in parsed.tasks:
            if _task_samples(task, by_task.get(task.workload_key, ()), out, limit):
                return out
    return out


@dataclass
class Vocabulary:
    """Index of every categorical value: knob names and their values, ops, CPUs."""

    knobs: dict[str, dict[str, int]] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)
    cpus: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, samples: Sequence[Sample]) -> "Vocabulary":
        v = cls()
        for s in samples:
            v.ops.setdefault(s.op, len(v.ops) + 2)
            v.cpus.setdefault(s.mcpu, len(v.cpus) + 2)
            for name, value in s.knobs.items():
                table = v.knobs.setdefault(name, {})
                table.setdefault(_value_key(value), len(table) + 2)
        v.knobs = dict(sorted(v.knobs.items()))
        return v

    def encode(self, samples: Sequence[Sample]) -> tuple[np.ndarray, np.ndarray]:
        """(categorical ids [n, 2 + knobs], numeric [n, 2 + N_ARGS])."""
        names = list(self.knobs)
        cat = np.zeros((len(samples), 2 + len(names)), dtype=np.int64)
        num = np.zeros((len(samples), 2 + N_ARGS), dtype=np.float32)
        for i, s in enumerate(samples):
            cat[i, 0] = self.ops.get(s.op, UNKNOWN)
            cat[i, 1] = self.cpus.get(s.mcpu, UNKNOWN)
            for j, name in enumerate(names):
                cat[i, 2 + j] = self.knobs[name].get(_value_key(s.knobs[name]), UNKNOWN) if name in s.knobs else ABSENT
            num[i, 0] = math.log(max(s.flops, 1.0))
            num[i, 1] = math.log1p(max(s.cores, 0))
            args = [s.args[k] for k in sorted(s.args)][:N_ARGS]
            num[i, 2:2 + len(args)] = np.log1p(np.abs(np.asarray(args, dtype=np.float64)))
        return cat, num

    def sizes(self) -> list[int]:
        """Rows of each categorical column's embedding table."""
        return [len(self.ops) + 2, len(self.cpus) + 2] + [len(t) + 2 for t in self.knobs.values()]


def _net(sizes: list[int], n_num: int) -> Any:
    import torch
    from torch import nn

    class ColdNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embeds = nn.ModuleList(nn.Embedding(n, EMBED) for n in sizes)
            self.hidden = nn.Sequential(nn.Linear(EMBED * len(sizes) + n_num, HIDDEN), nn.ReLU(),
                                        nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
            self.head = nn.Linear(HIDDEN, 1)

        def embed(self, cat: torch.Tensor, num: torch.Tensor) -> torch.Tensor:
            """The middle layer: the candidate's embedding."""
            x = torch.cat([e(cat[:, j]) for j, e in enumerate(self.embeds)] + [num], dim=1)
            return self.hidden(x)

        def forward(self, cat: torch.Tensor, num: torch.Tensor) -> torch.Tensor:
            return self.head(self.embed(cat, num)).squeeze(-1)

    return ColdNet()


@dataclass
class ColdNetReport:
    """Training figures: records used, epochs, test RMSE of the standardised log latency, and
    the test Spearman correlation of predicted and measured latency."""

    records: int = 0
    epochs: int = 0
    test_rmse: float = math.nan
    test_spearman: float = math.nan
    seconds: float = 0.0


class ColdNet:
    """The trained network with its vocabulary and standardisation."""

    def __init__(self, vocab: Vocabulary, net: Any, num_mean: np.ndarray, num_std: np.ndarray, y_mean: float,
                 y_std: float, report: ColdNetReport) -> None:
        self.vocab, self.net = vocab, net
        self.num_mean, self.num_std, self.y_mean, self.y_std = num_mean, num_std, y_mean, y_std
        self.report = report

    def _tensors(self, samples: Sequence[Sample]) -> tuple[Any, Any]:
        import torch

        cat, num = self.vocab.encode(samples)
        return torch.from_numpy(cat), torch.from_numpy((num - self.num_mean) / self.num_std)

    def embed(self, samples: Sequence[Sample]) -> np.ndarray:
        """Middle-layer embeddings [n, 32]."""
        import torch

        from ..utils.threads import torch_threads

        if not samples:
            return np.zeros((0, HIDDEN), dtype=np.float32)
        with torch_threads(1), torch.inference_mode():
            return self.net.embed(*self._tensors(samples)).numpy()

    def predict(self, samples: Sequence[Sample]) -> np.ndarray:
        """Predicted latency in seconds."""
        import torch

        from ..utils.threads import torch_threads

        with torch_threads(1), torch.inference_mode():
            z = self.net(*self._tensors(samples)).numpy().astype(np.float64)
        return np.exp(z * self.y_std + self.y_mean)


def train_coldnet(samples: Sequence[Sample], seed: int = 0, epochs: int = EPOCHS) -> ColdNet:
    """Train on ``samples`` (see the module docstring); raises ValueError with fewer than 10."""
    import time

    import torch

    from ..utils.threads import torch_threads
    from .metrics import spearman

    samples = [s for s in samples if math.isfinite(s.cost) and s.cost > 0]
    if len(samples) < 10:
        raise ValueError(f"the cold filter's network needs at least 10 measured records, got {len(samples)}")
    t0 = time.perf_counter()
    vocab = Vocabulary.build(samples)
    cat, num = vocab.encode(samples)
    y = np.log(np.array([s.cost for s in samples], dtype=np.float64))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(samples))
    n_train = max(1, int(SPLIT[0] * len(order)))
    n_val = max(1, int(SPLIT[1] * len(order)))
    tr, va, te = order[:n_train], order[n_train:n_train + n_val], order[n_train + n_val:]
    if len(te) == 0:
        te = va
    num_mean, num_std = num[tr].mean(axis=0), num[tr].std(axis=0) + 1e-6
    y_mean, y_std = float(y[tr].mean()), float(y[tr].std() + 1e-9)
    x_cat = torch.from_numpy(cat)
    x_num = torch.from_numpy(((num - num_mean) / num_std).astype(np.float32))
    y_t = torch.from_numpy(((y - y_mean) / y_std).astype(np.float32))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = _net(vocab.sizes(), num.shape[1])
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, min_lr=1e-9)
    gen = torch.Generator().manual_seed(seed)
    best, best_state = math.inf, None
    report = ColdNetReport(records=len(samples))
    with torch_threads(1):
        for epoch in range(epochs):
            net.train()
            perm = torch.from_numpy(tr)[torch.randperm(len(tr), generator=gen)]
            for lo in range(0, len(perm), BATCH):
                idx = perm[lo:lo + BATCH]
                loss = torch.mean((net(x_cat[idx], x_num[idx]) - y_t[idx]) ** 2)
                opt.zero_grad()
                loss.backward()
                opt.step()
            net.eval()
            with torch.inference_mode():
                v = float(torch.mean((net(x_cat[va], x_num[va]) - y_t[va]) ** 2))
            plateau.step(v)
            report.epochs = epoch + 1
            if v < best:
                best, best_state = v, {k: t.clone() for k, t in net.state_dict().items()}
        if best_state is not None:
            net.load_state_dict(best_state)
        net.eval()
        with torch.inference_mode():
            pred = net(x_cat[te], x_num[te]).numpy()
    report.test_rmse = float(np.sqrt(np.mean((pred - y_t[te].numpy()) ** 2)))
    report.test_spearman = float(spearman(pred, y_t[te].numpy())) if len(te) > 2 else math.nan
    report.seconds = time.perf_counter() - t0
    return ColdNet(vocab, net, num_mean, num_std, y_mean, y_std, report)
