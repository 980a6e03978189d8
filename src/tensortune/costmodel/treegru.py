"""TreeGRU cost model: a neural net over the loop AST of a candidate (AutoTVM, Section 4).

"Learning to Optimize Tensor Programs" (Chen et al., NeurIPS 2018, Fig. 3) summarises a
scheduled program by its loop tree:

1. each loop ``k`` is embedded from its context vector: ``e_k = MLP(normalise(ctx_k))``;
2. the tree is folded bottom-up with a child-sum GRU cell:
   ``h_k = GRUCell(e_k, sum_{c in children(k)} h_c)`` (leaves start from a zero state);
3. the node states are softly scattered into ``M`` memory slots:
   ``a_k = softmax(W_a h_k)`` over the slots, ``slot_m = sum_k a_km h_k``;
4. a linear layer on the concatenated slots gives the score (higher = faster).

Batches of trees are run level by level: all nodes of one depth, across the whole batch,
go through the GRU cell at once, deepest level first; the slot read-out pads the batch to
its largest tree and uses one batched matrix product. Predicting thousands of candidates
is therefore a few dozen tensor operations per chunk, not a Python loop over nodes.

Training uses a pairwise logistic rank loss within each task (``loss="rank"``, default) or
the mean squared error against the normalised throughput labels (``loss="reg"``), Adam,
a fixed number of epochs and an early stop once the training loss stops improving.

The tree of a candidate comes from ``tensortune.features.loop_ast.loop_tree`` (imported
lazily) unless another ``tree_fn`` is given; trees are cached per
``(task.workload_key, config.index)``. A candidate whose tree cannot be built (the
``tree_fn`` raises) is an empty tree: its score is the output bias alone (with the rank
loss, which cannot move the bias, that is an arbitrary constant of the initialisation).

Determinism: the seed fixes the initial weights (under ``torch.random.fork_rng``, so the
global torch RNG is untouched) and the mini-batch order (a numpy ``Generator``); on CPU the
same seed gives the same predictions. ``torch.use_deterministic_algorithms`` is not set (it
is global state).

Persistence: weights through ``safetensors`` when it is installed, otherwise
``torch.save`` of the state dict (read back with ``weights_only=True``); hyperparameters
and the input normalisation in a JSON sidecar ``<path>.json``. Nothing else is pickled.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from ..features.base import CandidateCache, LoopTree
from ..space import Config
from .base import CostModel, TaskData

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: Width of the node embeddings and of the GRU state.
DEFAULT_HIDDEN = 64
#: Number of soft memory slots of the read-out.
DEFAULT_SLOTS = 4
#: Maximum number of passes over the training data.
DEFAULT_EPOCHS = 60
#: Adam learning rate.
DEFAULT_LR = 5e-3
#: Adam weight decay (L2).
DEFAULT_WEIGHT_DECAY = 0.0
#: Candidates per training mini-batch (rank pairs are all pairs inside a mini-batch of one task).
DEFAULT_BATCH_SIZE = 128
#: Epochs without relative improvement of the training loss before training stops.
DEFAULT_PATIENCE = 6
#: Relative improvement of the epoch loss that counts as progress for the early stop.
DEFAULT_MIN_REL_IMPROVEMENT = 1e-3
#: Gradient-norm clip of each step.
DEFAULT_GRAD_CLIP = 5.0
#: Default loss: ``"rank"`` (pairwise logistic within a task) or ``"reg"`` (MSE on labels).
DEFAULT_LOSS = "rank"
#: Default seed of weights initialisation and mini-batch shuffling.
DEFAULT_SEED = 0
#: Candidates per forward pass when predicting.
DEFAULT_PREDICT_BATCH = 1024
#: Trees kept in the per-model cache.
DEFAULT_TREE_CACHE = 200_000
#: Normalised inputs are clipped to +-this many standard deviations.
INPUT_CLIP = 10.0
#: Standard deviations below this are treated as 1 (constant features).
MIN_STD = 1e-6
#: Version of the JSON sidecar written by :meth:`TreeGRUCostModel.save`.
FORMAT_VERSION = 1

LOSSES = ("rank", "reg")

TreeFn = Callable[[Any, Config], LoopTree]


def _safetensors() -> Any:
    """The ``safetensors.torch`` module, or None when it is not installed."""
    try:
        import safetensors.torch as st
    except ImportError:
        return None
    return st


# ---------------------------------------------------------------------------- batching
@dataclass
class TreeBatch:
    """A batch of trees laid out for the level-by-level pass.

    Nodes are stored flat, sorted by depth (deepest level first, then by tree, then by
    pre-order index), so each level is a contiguous slice of the node tensor.
    """

    x: torch.Tensor  # float32 [n_nodes, D]: normalised context vectors, depth-sorted
    levels: list[tuple[int, int]]  # (start, end) slices of x, deepest level first
    # for every level but the deepest: local index (inside this level) of the parent of each
    # node of the level below, i.e. where to add each child state; None for the deepest level
    child_to_parent: list[torch.Tensor | None]
    pad_index: torch.Tensor  # int64 [n_nodes]: tree * max_nodes + pre-order index
    n_trees: int
    max_nodes: int


def validate_tree(tree: LoopTree, dim: int | None = None) -> LoopTree:
    """Check a tree's shapes and pre-order; returns it with float32 ctx / int64 parent."""
    parent = np.asarray(tree.parent, dtype=np.int64).reshape(-1)
    n = len(parent)
    ctx = np.asarray(tree.ctx, dtype=np.float32)
    if ctx.size == 0 and n == 0:
        ctx = ctx.reshape(0, dim if dim is not None else (ctx.shape[-1] if ctx.ndim == 2 else 0))
    if ctx.ndim != 2 or ctx.shape[0] != n:
        raise ValueError(f"loop tree ctx has shape {ctx.shape}, expected ({n}, D)")
    if dim is not None and ctx.shape[1] != dim:
        raise ValueError(f"loop tree context width {ctx.shape[1]} differs from the model's {dim}")
    if n and (np.any(parent < -1) or np.any(parent >= np.arange(n))):
        raise ValueError("loop tree parents must be -1 or the index of an earlier node (pre-order)")
    if not np.all(np.isfinite(ctx)):
        ctx = np.nan_to_num(ctx, nan=0.0, posinf=0.0, neginf=0.0)
    return LoopTree(ctx=ctx, parent=parent)


def build_batch(trees: Sequence[LoopTree], mean: np.ndarray, std: np.ndarray) -> TreeBatch:
    """Lay out validated ``trees`` for :meth:`TreeGRUNet.forward` (inputs normalised here)."""
    sizes = np.array([len(t) for t in trees], dtype=np.int64)
    n_trees = len(trees)
    max_nodes = int(sizes.max()) if n_trees else 0
    total = int(sizes.sum())
    dim = len(mean)
    if total == 0:
        empty = torch.zeros(0, dtype=torch.int64)
        return TreeBatch(torch.zeros(0, dim), [], [], empty, n_trees, max(max_nodes, 1))
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    ctx = np.concatenate([t.ctx for t in trees if len(t)], axis=0)
    tree_id = np.repeat(np.arange(n_trees), sizes)
    local = np.arange(total) - offsets[tree_id]
    par_local = np.concatenate([t.parent for t in trees if len(t)])
    gpar = np.where(par_local >= 0, par_local + offsets[tree_id], -1)
    # depth by pointer jumping over the whole batch (max-depth iterations)
    depth = np.zeros(total, dtype=np.int64)
    anc = gpar.copy()
    while True:
        up = anc >= 0
        if not up.any():
            break
        depth += up
        anc = np.where(up, gpar[np.maximum(anc, 0)], -1)
    # deepest first; the flat (tree, pre-order) position breaks ties, so lexsort is stable
    order = np.lexsort((np.arange(total), -depth))
    pos = np.empty(total, dtype=np.int64)
    pos[order] = np.arange(total)
    sdepth = depth[order]
    max_depth = int(sdepth[0])
    # level d occupies [starts[d], ends[d]) of the sorted array
    bounds = np.searchsorted(-sdepth, -np.arange(max_depth, -1, -1), side="left")
    ends = np.append(bounds[1:], total)
    levels = [(int(s), int(e)) for s, e in zip(bounds, ends)]  # deepest first
    child_to_parent: list[torch.Tensor | None] = [None]
    for li in range(1, len(levels)):
        cs, ce = levels[li - 1]  # the level below (children)
        ps, _ = levels[li]
        parents_sorted = pos[gpar[order[cs:ce]]]
        child_to_parent.append(torch.from_numpy(parents_sorted - ps))
    x = (ctx[order] - mean) / std
    np.clip(x, -INPUT_CLIP, INPUT_CLIP, out=x)
    pad_index = torch.from_numpy(tree_id[order] * max_nodes + local[order])
    return TreeBatch(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), levels,
                     child_to_parent, pad_index, n_trees, max_nodes)


# ---------------------------------------------------------------------------- network
def _gru_update(gi: torch.Tensor, gh: torch.Tensor, h: torch.Tensor, hidden: int) -> torch.Tensor:
    """``torch.nn.GRUCell``'s update from precomputed input (``gi``) and state (``gh``) gates."""
    i_r, i_z, i_n = gi.split(hidden, dim=1)
    h_r, h_z, h_n = gh.split(hidden, dim=1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return n + z * (h - n)


class TreeGRUNet(nn.Module):
    """Embedding MLP, child-sum GRU over the tree, soft-slot read-out, linear score."""

    def __init__(self, in_dim: int, hidden: int = DEFAULT_HIDDEN, slots: int = DEFAULT_SLOTS) -> None:
        super().__init__()
        self.hidden = hidden
        self.slots = slots
        self.embed = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.cell = nn.GRUCell(hidden, hidden)
        self.attend = nn.Linear(hidden, slots)
        self.out = nn.Linear(hidden * slots, 1)

    def forward(self, batch: TreeBatch) -> torch.Tensor:
        """Scores ``[n_trees]`` of a :class:`TreeBatch`."""
        hidden = self.hidden
        if batch.x.shape[0] == 0:
            return self.out.bias.expand(batch.n_trees)
        emb = self.embed(batch.x)
        cell = self.cell
        # the input half of the GRU for every node at once; only the state half is per level
        gates_in = nn.functional.linear(emb, cell.weight_ih, cell.bias_ih)
        states: list[torch.Tensor] = []
        below: torch.Tensor | None = None
        for (start, end), c2p in zip(batch.levels, batch.child_to_parent):
            gi = gates_in[start:end]
            if below is None or c2p is None:  # deepest level: all leaves, zero state
                child_sum = gi.new_zeros(end - start, hidden)
                gh = cell.bias_hh.expand(end - start, 3 * hidden)
            else:
                child_sum = gi.new_zeros(end - start, hidden).index_add(0, c2p, below)
                gh = nn.functional.linear(child_sum, cell.weight_hh, cell.bias_hh)
            below = _gru_update(gi, gh, child_sum, hidden)
            states.append(below)
        h = torch.cat(states, dim=0)  # depth-sorted, like batch.x
        att = torch.softmax(self.attend(h), dim=-1)  # [n_nodes, M]
        n_pad = batch.n_trees * batch.max_nodes
        h_pad = h.new_zeros(n_pad, hidden).index_copy(0, batch.pad_index, h)
        a_pad = h.new_zeros(n_pad, self.slots).index_copy(0, batch.pad_index, att)
        h_pad = h_pad.view(batch.n_trees, batch.max_nodes, hidden)
        a_pad = a_pad.view(batch.n_trees, batch.max_nodes, self.slots)
        mem = torch.bmm(a_pad.transpose(1, 2), h_pad)  # [B, M, H]; padded nodes add zero
        return self.out(mem.reshape(batch.n_trees, self.slots * hidden)).squeeze(-1)


# ---------------------------------------------------------------------------- model
@dataclass(frozen=True)
class TreeGRUOptions:
    """The settings of :class:`TreeGRUCostModel` a tuner may give (its ``Args``)."""

    hidden: int = DEFAULT_HIDDEN
    slots: int = DEFAULT_SLOTS
    epochs: int = DEFAULT_EPOCHS
    lr: float = DEFAULT_LR
    weight_decay: float = DEFAULT_WEIGHT_DECAY
    batch_size: int = DEFAULT_BATCH_SIZE
    patience: int = DEFAULT_PATIENCE
    predict_batch: int = DEFAULT_PREDICT_BATCH
    cache_size: int = DEFAULT_TREE_CACHE


class TreeGRUCostModel(CostModel):
    """AutoTVM's TreeGRU cost model over the loop AST (see the module docstring).

    Args:
        hidden: width of the embeddings and GRU state.
        slots: number of soft memory slots of the read-out.
        epochs: maximum passes over the training data (0: initialise only, untrained).
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        batch_size: candidates per mini-batch (mini-batches never mix tasks).
        loss: ``"rank"`` (pairwise logistic rank loss within a task) or ``"reg"`` (MSE).
        patience: epochs without progress of the training loss before stopping early.
        seed: seed of the initial weights and of the mini-batch shuffling.
        tree_fn: ``(task, config) -> LoopTree``; default ``features.loop_ast.loop_tree``.
        predict_batch: candidates per forward pass in :meth:`predict`.
        cache_size: trees kept in the ``(workload_key, config index)`` cache.
    """

    name = "treegru"
    Options = TreeGRUOptions

    @classmethod
    def create(cls, options: TreeGRUOptions, *, feature: str, objective: str, seed: int,
               acquisition: str | None, base: CostModel | None) -> TreeGRUCostModel:
        """``objective`` is the loss; the model reads the loop AST itself (``feature`` is not used)."""
        if base is not None:
            raise ValueError("the treegru model cannot learn on top of a global model; use xgb for transfer")
        return cls(loss=objective, seed=seed, **asdict(options))

    def __init__(self, hidden: int = DEFAULT_HIDDEN, slots: int = DEFAULT_SLOTS, epochs: int = DEFAULT_EPOCHS,
                 lr: float = DEFAULT_LR, weight_decay: float = DEFAULT_WEIGHT_DECAY,
                 batch_size: int = DEFAULT_BATCH_SIZE, loss: str = DEFAULT_LOSS, patience: int = DEFAULT_PATIENCE,
                 seed: int = DEFAULT_SEED, tree_fn: TreeFn | None = None,
                 predict_batch: int = DEFAULT_PREDICT_BATCH, cache_size: int = DEFAULT_TREE_CACHE) -> None:
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, not {loss!r}")
        if hidden < 1 or slots < 1 or batch_size < 2 or epochs < 0 or predict_batch < 1:
            raise ValueError("hidden, slots, predict_batch must be >= 1, batch_size >= 2, epochs >= 0")
        self.hidden = int(hidden)
        self.slots = int(slots)
        self.epochs = int(epochs)
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.batch_size = int(batch_size)
        self.loss = loss
        self.patience = int(patience)
        self.seed = int(seed)
        self.predict_batch = int(predict_batch)
        self.cache_size = int(cache_size)
        self._tree_fn = tree_fn
        self._cache = CandidateCache(self.cache_size)
        self.net: TreeGRUNet | None = None
        self.mean: np.ndarray | None = None
        self.std: np.ndarray | None = None
        #: Per-epoch mean training loss of the last :meth:`fit` (for diagnostics).
        self.loss_history: list[float] = []

    # ------------------------------------------------------------------ trees
    def _resolve_tree_fn(self) -> TreeFn:
        if self._tree_fn is None:
            from ..features.loop_ast import loop_tree  # lazy: TVM-heavy, and optional

            self._tree_fn = loop_tree
        return self._tree_fn

    def trees(self, task: Task, configs: Sequence[Config]) -> list[LoopTree]:
        """Validated loop trees of ``configs`` (cached; a config whose tree fails is empty)."""
        fn = self._resolve_tree_fn()
        dim = len(self.mean) if self.mean is not None else None
        out = []

        def make(c: Config) -> LoopTree:
            try:
                raw = fn(task, c)
            except Exception:  # noqa: BLE001 - an unschedulable candidate is an empty tree
                raw = None
            return validate_tree(raw) if raw is not None else LoopTree(np.zeros((0, 0), np.float32),
                                                                        np.zeros(0, np.int64))

        for c in configs:
            tree = self._cache.get(task, c, lambda c=c: make(c))
            if dim is not None and len(tree) and tree.ctx.shape[1] != dim:
                raise ValueError(f"loop tree context width {tree.ctx.shape[1]} differs from the model's {dim}")
            out.append(tree)
        return out

    def clear_cache(self) -> None:
        """Forget cached trees (e.g. after changing ``tree_fn``)."""
        self._cache.clear()

    # ------------------------------------------------------------------ state
    @property
    def fitted(self) -> bool:
        """True once :meth:`fit` (or :meth:`load`) has produced a network."""
        return self.net is not None

    def _reset(self) -> None:
        self.net = None
        self.mean = None
        self.std = None

    def _batch(self, trees: Sequence[LoopTree]) -> TreeBatch:
        assert self.mean is not None and self.std is not None
        dim = len(self.mean)
        trees = [t if len(t) else LoopTree(np.zeros((0, dim), np.float32), t.parent) for t in trees]
        return build_batch(trees, self.mean, self.std)

    # ------------------------------------------------------------------ training
    def fit(self, data: Sequence[TaskData]) -> None:
        """Train from scratch on ``data`` (each task is its own rank group).

        Fewer than two candidates, labels that are all zero (every candidate failed), or
        (with ``epochs > 0``) no mini-batch to learn from (every rank pair tied) leave the
        model unfitted: :attr:`fitted` is False and :meth:`predict` gives zeros. With
        ``epochs=0`` the model is initialised and normalised but untrained (a baseline).
        """
        self._reset()
        self.loss_history = []
        groups: list[tuple[list[LoopTree], np.ndarray]] = []
        for td in data:
            if len(td) == 0:
                continue
            labels = td.labels()
            groups.append((self.trees(td.task, td.configs), labels))
        n = sum(len(g[1]) for g in groups)
        if n < 2 or not any(np.any(g[1] > 0) for g in groups):
            return
        all_nodes = [t.ctx for g in groups for t in g[0] if len(t)]
        if not all_nodes:
            return
        ctx = np.concatenate(all_nodes, axis=0).astype(np.float64)
        dims = {a.shape[1] for a in all_nodes}
        if len(dims) != 1:
            raise ValueError(f"loop trees of different context widths: {sorted(dims)}")
        mean = ctx.mean(axis=0)
        std = ctx.std(axis=0)
        std = np.where(std < MIN_STD, 1.0, std)
        self.mean, self.std = mean.astype(np.float32), std.astype(np.float32)

        rng = np.random.default_rng(self.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = TreeGRUNet(len(self.mean), self.hidden, self.slots)
        if self.epochs > 0 and self._train(net, groups, rng) == 0:
            return  # no informative mini-batch (e.g. every label of every task tied)
        net.eval()
        self.net = net

    def _train(self, net: TreeGRUNet, groups: list[tuple[list[LoopTree], np.ndarray]],
               rng: np.random.Generator) -> int:
        """Train ``net`` in place; returns the number of optimiser steps taken."""
        params = list(net.parameters())
        if self.loss == "rank":
            # score differences do not depend on the output bias: its gradient is rounding
            # noise, which Adam would turn into full-size steps
            params = [p for p in params if p is not net.out.bias]
        opt = torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay)
        labels = [torch.from_numpy(np.asarray(g[1], dtype=np.float32)) for g in groups]
        dim = len(self.mean)  # type: ignore[arg-type]
        trees = [[t if len(t) else LoopTree(np.zeros((0, dim), np.float32), t.parent) for t in g[0]]
                 for g in groups]
        best, stale, steps = math.inf, 0, 0
        net.train()
        for _ in range(self.epochs):
            chunks: list[tuple[int, np.ndarray]] = []
            for gi, (_, y) in enumerate(groups):
                perm = rng.permutation(len(y))
                n_chunks = max(1, math.ceil(len(y) / self.batch_size))
                chunks.extend((gi, part) for part in np.array_split(perm, n_chunks))
            chunks = [chunks[i] for i in rng.permutation(len(chunks))]
            total, weight = 0.0, 0
            for gi, idx in chunks:
                y = labels[gi][torch.from_numpy(idx)]
                loss, count = self._loss(net, [trees[gi][i] for i in idx], y)
                if loss is None:
                    continue
                opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(params, DEFAULT_GRAD_CLIP)
                opt.step()
                steps += 1
                total += float(loss.detach()) * count
                weight += count
            if weight == 0:
                break  # nothing to learn from (e.g. rank loss with one candidate per task)
            epoch_loss = total / weight
            self.loss_history.append(epoch_loss)
            if epoch_loss < best * (1.0 - DEFAULT_MIN_REL_IMPROVEMENT):
                best, stale = epoch_loss, 0
            else:
                stale += 1
                if stale >= self.patience:
                    break
        return steps

    def _loss(self, net: TreeGRUNet, trees: list[LoopTree], y: torch.Tensor) -> tuple[torch.Tensor | None, int]:
        """Loss of one mini-batch (one task) and its weight in the epoch average."""
        if self.loss == "reg":
            score = net(self._batch(trees))
            return torch.mean((score - y) ** 2), len(trees)
        diff_y = y[:, None] - y[None, :]
        mask = diff_y > 0  # ordered pairs (i faster than j)
        count = int(mask.sum())
        if count == 0:
            return None, 0
        score = net(self._batch(trees))
        margin = (score[:, None] - score[None, :])[mask]
        return nn.functional.softplus(-margin).mean(), count

    # ------------------------------------------------------------------ inference
    def predict(self, task: Task, configs: Sequence[Config]) -> np.ndarray:
        """Scores of ``configs`` (float64, higher = faster); zeros while unfitted."""
        if self.net is None or not len(configs):
            return np.zeros(len(configs), dtype=np.float64)
        return self._predict_valid(self.trees(task, configs))

    def predict_trees(self, trees: Sequence[LoopTree]) -> np.ndarray:
        """Scores of already-built loop trees (float64); zeros while unfitted."""
        if self.net is None or not len(trees):
            return np.zeros(len(trees), dtype=np.float64)
        return self._predict_valid([validate_tree(t, len(self.mean) if len(t) else None) for t in trees])

    def _predict_valid(self, trees: Sequence[LoopTree]) -> np.ndarray:
        assert self.net is not None
        out = np.empty(len(trees), dtype=np.float64)
        self.net.eval()
        with torch.inference_mode():
            for s in range(0, len(trees), self.predict_batch):
                chunk = trees[s:s + self.predict_batch]
                out[s:s + len(chunk)] = self.net(self._batch(chunk)).double().numpy()
        return out

    # ------------------------------------------------------------------ persistence
    def hyperparameters(self) -> dict[str, Any]:
        """The constructor arguments that shape the network and its training."""
        return {"hidden": self.hidden, "slots": self.slots, "epochs": self.epochs, "lr": self.lr,
                "weight_decay": self.weight_decay, "batch_size": self.batch_size, "loss": self.loss,
                "patience": self.patience, "seed": self.seed, "predict_batch": self.predict_batch}

    @staticmethod
    def sidecar_path(path: str | Path) -> Path:
        """Where the JSON sidecar of weights file ``path`` lives: ``<path>.json``."""
        path = Path(path)
        return path.with_name(path.name + ".json")

    def save(self, path: str | Path) -> None:
        """Write weights to ``path`` and hyperparameters + normalisation to ``<path>.json``.

        Weights use ``safetensors`` when installed, else ``torch.save`` of the state dict.
        An unfitted model writes an empty state dict and ``"fitted": false``.
        """
        path = Path(path)
        st = _safetensors()
        state = {k: v.detach().clone().contiguous() for k, v in self.net.state_dict().items()} if self.net else {}
        fmt = "safetensors" if st is not None else "torch"
        meta = {"model": self.name, "format_version": FORMAT_VERSION, "weights_format": fmt,
                "fitted": self.net is not None, "hyperparameters": self.hyperparameters(),
                "ctx_dim": None if self.mean is None else len(self.mean),
                "mean": None if self.mean is None else [float(v) for v in self.mean],
                "std": None if self.std is None else [float(v) for v in self.std]}
        tmp = path.with_name(path.name + ".tmp")
        if st is not None:
            st.save_file(state, str(tmp))
        else:
            torch.save(state, tmp)
        os.replace(tmp, path)
        side = self.sidecar_path(path)
        side_tmp = side.with_name(side.name + ".tmp")
        side_tmp.write_text(json.dumps(meta, indent=1))
        os.replace(side_tmp, side)

    def load(self, path: str | Path) -> None:
        """Read a model written by :meth:`save` (its hyperparameters replace this one's)."""
        path = Path(path)
        meta = json.loads(self.sidecar_path(path).read_text())
        if meta.get("model") != self.name:
            raise ValueError(f"{path} holds a {meta.get('model')!r} model, not {self.name!r}")
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"unsupported treegru format version {meta.get('format_version')}")
        hp = meta["hyperparameters"]
        if hp["loss"] not in LOSSES:
            raise ValueError(f"unknown loss {hp['loss']!r} in {path}")
        for k in ("hidden", "slots", "epochs", "batch_size", "patience", "seed", "predict_batch"):
            setattr(self, k, int(hp[k]))
        self.lr, self.weight_decay, self.loss = float(hp["lr"]), float(hp["weight_decay"]), hp["loss"]
        self._reset()
        self._cache.clear()
        if not meta["fitted"]:
            return
        if meta["weights_format"] == "safetensors":
            st = _safetensors()
            if st is None:
                raise RuntimeError(f"{path} was written with safetensors, which is not installed")
            state = st.load_file(str(path))
        elif meta["weights_format"] == "torch":
            state = torch.load(path, map_location="cpu", weights_only=True)
        else:
            raise ValueError(f"unknown weights format {meta['weights_format']!r}")
        mean = np.asarray(meta["mean"], dtype=np.float32)
        std = np.asarray(meta["std"], dtype=np.float32)
        if mean.shape != (int(meta["ctx_dim"]),) or std.shape != mean.shape:
            raise ValueError(f"normalisation statistics in {path} do not match ctx_dim")
        net = TreeGRUNet(len(mean), self.hidden, self.slots)
        net.load_state_dict(state, strict=True)
        net.eval()
        self.net, self.mean, self.std = net, mean, std
