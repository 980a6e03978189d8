"""Tests of the TreeGRU cost model on synthetic loop trees (no TVM needed, except the last test).

The learning tests use labels that are a known function of the tree *structure*, so a model
that ignored the tree (a bag of node features) could not pass them; the tests check that
baseline explicitly, and that an untrained network does not pass either.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from tensortune.costmodel import treegru
from tensortune.costmodel.base import TaskData
from tensortune.costmodel.treegru import TreeGRUCostModel, TreeGRUNet, build_batch, validate_tree
from tensortune.features.base import LoopTree

D = 12  # context width of the synthetic trees


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The test machines are small: keep torch on one thread, and restore it afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@dataclass(frozen=True)
class FakeTask:
    workload_key: str


@dataclass(frozen=True)
class FakeConfig:
    index: int


class Store:
    """A ``tree_fn`` over synthetic trees, keyed by (workload key, config index); counts calls."""

    def __init__(self) -> None:
        self.trees: dict[tuple[str, int], LoopTree] = {}
        self.calls = 0

    def add(self, task: FakeTask, trees: list[LoopTree], start: int = 0) -> list[FakeConfig]:
        for i, t in enumerate(trees):
            self.trees[(task.workload_key, start + i)] = t
        return [FakeConfig(start + i) for i in range(len(trees))]

    def __call__(self, task: FakeTask, config: FakeConfig) -> LoopTree:
        self.calls += 1
        return self.trees[(task.workload_key, config.index)]


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b (ties allowed); 0 when either side is constant."""
    da = np.sign(np.subtract.outer(a, a))
    db = np.sign(np.subtract.outer(b, b))
    den = np.sqrt(float((da != 0).sum()) * float((db != 0).sum()))
    return float((da * db).sum() / den) if den > 0 else 0.0


def depths(parent: np.ndarray) -> np.ndarray:
    d = np.zeros(len(parent), dtype=np.int64)
    for k, p in enumerate(parent):
        d[k] = 0 if p < 0 else d[p] + 1
    return d


def nest_forest(rng: np.random.Generator) -> tuple[LoopTree, float]:
    """1-2 perfect loop nests of 3-8 loops; column 0 is log2(extent), the rest noise.

    Value: mean log2 extent of the innermost loop of each nest (the leaves). Every loop has
    the same feature distribution, so only the structure says which loop is innermost.
    """
    ctx, parent, inner = [], [], []
    for _ in range(int(rng.integers(1, 3))):
        base, n = len(parent), int(rng.integers(3, 9))
        for k in range(n):
            parent.append(-1 if k == 0 else base + k - 1)
            v = rng.normal(size=D).astype(np.float32)
            v[0] = rng.integers(0, 7)
            ctx.append(v)
        inner.append(ctx[-1][0])
    return LoopTree(np.array(ctx, np.float32), np.array(parent, np.int64)), float(np.mean(inner))


def random_shape(rng: np.random.Generator, n: int = 10) -> tuple[LoopTree, float]:
    """A random forest of exactly ``n`` loops with pure-noise features; value: its nest depth."""
    p_chain, parent = rng.random(), [-1]
    for k in range(1, n):
        parent.append(k - 1 if rng.random() < p_chain else int(rng.integers(-1, k)))
    par = np.array(parent, np.int64)
    return LoopTree(rng.normal(size=(n, D)).astype(np.float32), par), float(depths(par).max())


def dataset(gen, n: int, seed: int) -> tuple[list[LoopTree], np.ndarray]:
    rng = np.random.default_rng(seed)
    pairs = [gen(rng) for _ in range(n)]
    return [p[0] for p in pairs], np.array([p[1] for p in pairs])


def setup_task(gen, key: str = "synthetic", n_train: int = 300, n_test: int = 200, seed: int = 1):
    """(store, task, training TaskData, held-out configs, held-out values); cost = 1/(value+1)."""
    train, y_train = dataset(gen, n_train, seed)
    test, y_test = dataset(gen, n_test, seed + 1000)
    store, task = Store(), FakeTask(key)
    cfg_train = store.add(task, train)
    cfg_test = store.add(task, test, start=n_train)
    data = TaskData(task, cfg_train, list(1.0 / (y_train + 1.0)))  # higher value = faster
    return store, task, data, cfg_test, y_test


@pytest.fixture(scope="module")
def nests():
    return setup_task(nest_forest)


@pytest.fixture(scope="module")
def trained(nests):
    """A rank model trained on the innermost-extent task (shared by several tests)."""
    store, task, data, _, _ = nests
    model = TreeGRUCostModel(tree_fn=store, seed=0)
    model.fit([data])
    return model


# ------------------------------------------------------------------------------- learning
def test_rank_loss_learns_innermost_extent(nests, trained):
    store, task, data, cfg_test, y_test = nests
    test_trees = [store(task, c) for c in cfg_test]
    # the structure-blind baseline (mean of a feature over all loops) is weak ...
    assert kendall(np.array([t.ctx[:, 0].mean() for t in test_trees]), y_test) < 0.4
    # ... an untrained network (same seed, same normalisation) ranks at random ...
    untrained = TreeGRUCostModel(tree_fn=store, seed=0, epochs=0)
    untrained.fit([data])
    assert untrained.fitted
    assert abs(kendall(untrained.predict(task, cfg_test), y_test)) < 0.2
    # ... and the trained one finds the innermost loops
    assert trained.fitted
    assert kendall(trained.predict(task, cfg_test), y_test) > 0.6
    assert trained.loss_history[-1] < 0.5 * trained.loss_history[0]


@pytest.mark.parametrize("loss", ["rank", "reg"])
def test_both_losses_learn_nest_depth(loss):
    """Same node count and noise features everywhere: only the tree shape carries the label."""
    store, task, data, cfg_test, y_test = setup_task(random_shape, key=f"shape-{loss}")
    untrained = TreeGRUCostModel(tree_fn=store, loss=loss, epochs=0)
    untrained.fit([data])
    # a random tree network already reacts to the shape (|tau| ~ 0.3 here), but not like this:
    assert abs(kendall(untrained.predict(task, cfg_test), y_test)) < 0.5
    model = TreeGRUCostModel(tree_fn=store, loss=loss)
    model.fit([data])
    assert kendall(model.predict(task, cfg_test), y_test) > 0.7


def test_rank_groups_are_per_task():
    """Two tasks fitted together (costs of very different scales): the ranking within each is
    learnt, and trees are cached per (workload key, config index), so equal indices do not collide."""
    store = Store()
    data, tests = [], []
    for key, seed, scale in (("a", 3, 1.0), ("b", 4, 1e3)):
        task = FakeTask(key)
        train, y_train = dataset(random_shape, 150, seed)
        test, y_test = dataset(random_shape, 100, seed + 1000)
        cfgs = store.add(task, train)
        data.append(TaskData(task, cfgs, list(scale / (y_train + 1.0))))
        tests.append((task, store.add(task, test, start=150), y_test))
    model = TreeGRUCostModel(tree_fn=store, seed=0)
    model.fit(data)
    for task, cfgs, y_test in tests:
        assert kendall(model.predict(task, cfgs), y_test) > 0.6


# ------------------------------------------------------------------------------- batching
def reference_scores(model: TreeGRUCostModel, trees: list[LoopTree]) -> np.ndarray:
    """Node-by-node recursion with torch.nn.GRUCell: what the batched pass must compute."""
    net = model.net
    out = []
    with torch.no_grad():
        for t in trees:
            if len(t) == 0:
                out.append(float(net.out.bias))
                continue
            x = np.clip((t.ctx - model.mean) / model.std, -treegru.INPUT_CLIP, treegru.INPUT_CLIP)
            emb = net.embed(torch.from_numpy(x.astype(np.float32)))
            h = [None] * len(t)
            for k in range(len(t) - 1, -1, -1):  # children come after their parent in pre-order
                kids = [h[c] for c in range(len(t)) if t.parent[c] == k]
                state = torch.stack(kids).sum(0) if kids else torch.zeros(1, net.hidden)
                h[k] = net.cell(emb[k:k + 1], state)
            hs = torch.cat(h)
            att = torch.softmax(net.attend(hs), dim=-1)
            out.append(float(net.out((att.T @ hs).reshape(1, -1))))
    return np.array(out)


def mixed_trees(rng: np.random.Generator, n: int) -> list[LoopTree]:
    """Forests of many shapes and sizes, including single loops and an empty tree."""
    trees = [nest_forest(rng)[0] if i % 2 else random_shape(rng, int(rng.integers(1, 20)))[0] for i in range(n)]
    trees.append(LoopTree(np.zeros((0, D), np.float32), np.zeros(0, np.int64)))
    trees.append(LoopTree(rng.normal(size=(1, D)).astype(np.float32), np.array([-1])))
    return trees


def test_batched_pass_matches_node_by_node_reference(trained):
    trees = mixed_trees(np.random.default_rng(5), 30)
    np.testing.assert_allclose(trained.predict_trees(trees), reference_scores(trained, trees), rtol=1e-4, atol=1e-5)


def test_batched_prediction_equals_one_by_one(nests, trained):
    store, task, _, cfg_test, _ = nests
    cfgs = cfg_test[:60]
    whole = trained.predict(task, cfgs)
    single = np.array([trained.predict(task, [c])[0] for c in cfgs])
    assert whole.dtype == np.float64 and whole.shape == (60,)
    assert np.ptp(whole) > 1e-3  # not a constant
    np.testing.assert_allclose(whole, single, rtol=1e-5, atol=1e-5)
    chunked = TreeGRUCostModel(tree_fn=store, predict_batch=7)
    chunked.net, chunked.mean, chunked.std = TreeGRUNet(D, trained.hidden, trained.slots), trained.mean, trained.std
    chunked.net.load_state_dict(trained.net.state_dict())
    np.testing.assert_allclose(chunked.predict(task, cfgs), whole, rtol=1e-5, atol=1e-5)


def test_gru_update_matches_torch_grucell():
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(8, 8)
    x, h = torch.randn(5, 8), torch.randn(5, 8)
    gi = torch.nn.functional.linear(x, cell.weight_ih, cell.bias_ih)
    gh = torch.nn.functional.linear(h, cell.weight_hh, cell.bias_hh)
    with torch.no_grad():
        torch.testing.assert_close(treegru._gru_update(gi, gh, h, 8), cell(x, h))


def test_build_batch_levels():
    # forest: 0 -> (1 -> 2, 3), 4 -> 5
    t = LoopTree(np.arange(12, dtype=np.float32).reshape(6, 2), np.array([-1, 0, 1, 0, -1, 4]))
    b = build_batch([t], np.zeros(2, np.float32), np.ones(2, np.float32))
    assert b.levels == [(0, 1), (1, 4), (4, 6)]  # depth 2: {2}; depth 1: {1, 3, 5}; depth 0: {0, 4}
    assert b.x[:, 0].tolist() == [4, 2, 6, 10, 0, 8]  # node ids 2 | 1 3 5 | 0 4
    assert b.child_to_parent[1].tolist() == [0]  # node 2 -> node 1 (first of its level)
    assert b.child_to_parent[2].tolist() == [0, 0, 1]  # 1, 3 -> 0; 5 -> 4
    assert b.pad_index.tolist() == [2, 1, 3, 5, 0, 4]


def test_validate_tree_rejects_malformed():
    with pytest.raises(ValueError):
        validate_tree(LoopTree(np.zeros((3, D), np.float32), np.array([-1, 2, 0])))  # not pre-order
    with pytest.raises(ValueError):
        validate_tree(LoopTree(np.zeros((3, D), np.float32), np.array([-1, 0])))  # shapes disagree
    t = validate_tree(LoopTree(np.array([[np.nan, 1.0]]), np.array([-1], dtype=np.int32)))
    assert t.ctx.dtype == np.float32 and t.parent.dtype == np.int64 and np.isfinite(t.ctx).all()


# ------------------------------------------------------------------------------- state
def test_unfitted_and_degenerate_fits(nests):
    store, task, data, cfg_test, _ = nests
    model = TreeGRUCostModel(tree_fn=store, epochs=3)
    assert not model.fitted
    assert np.array_equal(model.predict(task, cfg_test[:5]), np.zeros(5))
    model.fit([])
    assert not model.fitted
    model.fit([TaskData(task, data.configs[:1], data.costs[:1])])  # one sample
    assert not model.fitted
    model.fit([TaskData(task, data.configs[:20], [float("inf")] * 20)])  # every candidate failed
    assert not model.fitted and np.array_equal(model.predict(task, cfg_test[:5]), np.zeros(5))
    model.fit([TaskData(task, data.configs[:20], [1.0] * 20)])  # all tied: no rank pair to learn from
    assert not model.fitted
    model.fit([TaskData(task, data.configs[:40], data.costs[:40])])
    assert model.fitted and np.ptp(model.predict(task, cfg_test[:20])) > 0
    model.fit([TaskData(task, data.configs[:20], [float("inf")] * 20)])  # a new fit replaces the old
    assert not model.fitted and np.array_equal(model.predict(task, cfg_test[:5]), np.zeros(5))


def test_failed_tree_is_empty_and_cached(nests, trained):
    store, task, _, cfg_test, _ = nests

    def flaky(t, c):
        if c.index % 2:
            raise RuntimeError("cannot schedule")
        return store(t, c)

    model = TreeGRUCostModel(tree_fn=flaky)
    model.net, model.mean, model.std = trained.net, trained.mean, trained.std
    scores = model.predict(task, cfg_test[:10])
    odd = scores[1::2]
    assert np.all(odd == odd[0]) and odd[0] == pytest.approx(trained.net.out.bias.item())
    np.testing.assert_allclose(scores[::2], trained.predict(task, cfg_test[:10:2]), rtol=1e-5, atol=1e-5)
    before = store.calls
    model.predict(task, cfg_test[:10])
    assert store.calls == before  # cached, failures included


def test_inputs_are_normalised_with_stats_from_fit(nests):
    """Per-feature mean/std are taken from the training nodes, so an affine change of a feature's
    units (e.g. extents in elements vs thousands) changes nothing."""
    store, task, data, cfg_test, _ = nests
    small = TaskData(task, data.configs[:60], data.costs[:60])
    model = TreeGRUCostModel(tree_fn=store, epochs=3)
    model.fit([small])
    nodes = np.concatenate([store(task, c).ctx for c in small.configs])
    np.testing.assert_allclose(model.mean, nodes.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.std, nodes.std(0), rtol=1e-5, atol=1e-5)

    scale = np.ones(D, np.float32)
    scale[0], scale[3] = 1000.0, 0.01
    shift = np.linspace(-5, 5, D).astype(np.float32)  # (float32 keeps ~7 digits of ctx * scale + shift)

    def rescaled(t, c):
        tree = store(t, c)
        return LoopTree(tree.ctx * scale + shift, tree.parent)

    other = TreeGRUCostModel(tree_fn=rescaled, epochs=3)
    other.fit([small])
    np.testing.assert_allclose(other.predict(task, cfg_test[:50]), model.predict(task, cfg_test[:50]),
                               rtol=1e-4, atol=1e-5)


def test_context_width_mismatch_raises(trained):
    with pytest.raises(ValueError):
        trained.predict_trees([LoopTree(np.zeros((2, D + 1), np.float32), np.array([-1, 0]))])


def test_invalid_arguments():
    with pytest.raises(ValueError):
        TreeGRUCostModel(loss="huber")
    with pytest.raises(ValueError):
        TreeGRUCostModel(hidden=0)


def test_same_seed_same_predictions(nests):
    store, task, data, cfg_test, _ = nests
    small = TaskData(task, data.configs[:80], data.costs[:80])
    preds = []
    for seed in (7, 7, 8):
        m = TreeGRUCostModel(tree_fn=store, seed=seed, epochs=4)
        m.fit([small])
        preds.append(m.predict(task, cfg_test[:50]))
    assert np.array_equal(preds[0], preds[1])
    assert not np.allclose(preds[0], preds[2])
    # the seed drives the initial weights too, whatever the global torch RNG state
    init = []
    for seed, global_seed in ((7, 1), (7, 2), (8, 1)):
        torch.manual_seed(global_seed)
        m = TreeGRUCostModel(tree_fn=store, seed=seed, epochs=0)
        m.fit([small])
        init.append(m.predict(task, cfg_test[:50]))
    assert np.array_equal(init[0], init[1])
    assert not np.allclose(init[0], init[2])
    # the global torch RNG is left alone
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    TreeGRUCostModel(tree_fn=store, seed=1, epochs=1).fit([small])
    assert torch.equal(torch.rand(3), expected)


# ------------------------------------------------------------------------------- persistence
@pytest.mark.parametrize("backend", ["torch", "safetensors"])
def test_save_load_round_trip(tmp_path, monkeypatch, nests, trained, backend):
    store, task, _, cfg_test, _ = nests
    if backend == "safetensors":
        if treegru._safetensors() is None:
            pytest.skip("safetensors is not installed")
    else:
        monkeypatch.setattr(treegru, "_safetensors", lambda: None)
    path = tmp_path / "model.weights"
    trained.save(path)
    meta = json.loads((tmp_path / "model.weights.json").read_text())
    assert meta["model"] == "treegru" and meta["weights_format"] == backend and meta["fitted"]
    assert meta["ctx_dim"] == D and np.allclose(meta["mean"], trained.mean) and np.allclose(meta["std"], trained.std)
    assert meta["hyperparameters"]["hidden"] == trained.hidden
    if backend == "torch":  # plain tensors only: loadable without unpickling arbitrary objects
        state = torch.load(path, weights_only=True)
        assert all(isinstance(v, torch.Tensor) for v in state.values())

    other = TreeGRUCostModel(tree_fn=store, hidden=8, slots=2, loss="reg")  # overridden by load
    other.load(path)
    assert other.fitted and other.hidden == trained.hidden and other.slots == trained.slots
    assert other.loss == trained.loss
    assert np.array_equal(other.predict(task, cfg_test), trained.predict(task, cfg_test))


def test_save_load_unfitted(tmp_path, monkeypatch):
    monkeypatch.setattr(treegru, "_safetensors", lambda: None)
    model = TreeGRUCostModel(hidden=16)
    model.save(tmp_path / "m.pt")
    loaded = TreeGRUCostModel()
    loaded.load(tmp_path / "m.pt")
    assert not loaded.fitted and loaded.hidden == 16
    assert np.array_equal(loaded.predict(FakeTask("x"), [FakeConfig(0)]), np.zeros(1))


def test_load_rejects_other_models(tmp_path, trained, monkeypatch):
    monkeypatch.setattr(treegru, "_safetensors", lambda: None)
    trained.save(tmp_path / "m.pt")
    side = tmp_path / "m.pt.json"
    meta = json.loads(side.read_text())
    side.write_text(json.dumps({**meta, "model": "xgb"}))
    with pytest.raises(ValueError):
        TreeGRUCostModel().load(tmp_path / "m.pt")


# ------------------------------------------------------------------------------- integration
#: A fixed target: the space (vector lanes) must not depend on the machine running the tests.
ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}


def test_real_loop_trees_of_a_matmul():
    """The default tree source (features.loop_ast.loop_tree on the scheduled TIR): a cost that
    depends on the register tile (``tile_x[2]`` columns vectorised, ``tile_y[2]`` rows unrolled)
    is learnt from 48 schedules and ranks 48 others; the same network untrained does not."""
    from tensortune.features.loop_ast import loop_tree
    from tensortune.task import Task

    task = Task.from_op("matmul", (32, 48, 64), target=ZNVER4)

    def cost(c) -> float:  # fastest with 16 vectorised columns and 4 unrolled rows
        return 1e-3 * (1 + abs(math.log2(c["tile_x"][2]) - 4)) * (1 + 0.5 * abs(math.log2(c["tile_y"][2]) - 2))

    configs = task.space.sample(random.Random(0), 96)
    train, test = configs[:48], configs[48:]
    data = TaskData(task, train, [cost(c) for c in train])
    truth = -np.array([cost(c) for c in test])  # higher = faster, like the model's scores
    assert len(set(truth)) >= 4  # the held-out configs do spread over the landscape

    model = TreeGRUCostModel(seed=0)  # no tree_fn: the real loop trees
    model.fit([data])
    assert model.fitted
    tree = loop_tree(task, test[0])
    assert len(tree) >= 8 and tree.ctx.shape[1] == model.mean.shape[0]  # one node per loop of the schedule
    scores = model.predict(task, test)
    assert scores.shape == (48,) and np.all(np.isfinite(scores))
    assert kendall(scores, truth) > 0.6

    untrained = TreeGRUCostModel(seed=0, epochs=0)
    untrained.fit([data])
    assert abs(kendall(untrained.predict(task, test), truth)) < 0.35
