"""Loop-AST features: hand-checked facts on a hand-made schedule, fixed lengths, caching."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from tvm import te
from tvm.s_tir import Schedule

from tensortune.features import (
    CTX_DIM,
    CURVE_DIM,
    FEATURES,
    ITERVAR_DIM,
    MAX_LOOPS,
    CurveFeatures,
    ItervarFeatures,
    KnobFeatures,
    LoopTree,
    PerStoreFeatures,
    analyze,
    curve_features,
    extract_loop_tree,
    get_extractor,
    itervar_features,
    loop_tree,
)
from tensortune.features import loop_ast as la
from tensortune.task import Task

M, N, K = 64, 32, 16


def lg(x: float) -> float:
    return math.log2(1 + x)


def matmul_schedule(layout: bool = False):
    """C[64,32] = A[64,16] B[16,32]: i0 (8, parallel) > i1 (8) > { j_init (32, vec); k (16) > j (32, vec) }."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    i0, i1 = sch.split(i, [8, 8])
    sch.reorder(i0, i1, kk, j)
    sch.parallel(i0)
    sch.vectorize(j)
    sch.decompose_reduction(blk, kk)
    if layout:  # B[k, j] -> B[j // 8, k, j % 8]
        sch.transform_layout(sch.get_sblock("C_update"), ("read", 2), lambda k, j: (j // 8, k, j % 8))
    return sch.mod


# loop indices in pre-order
I0, I1, JINIT, KLOOP, JLOOP = range(5)


def buf_slot(ctx_row: np.ndarray, stats: dict, name: str) -> np.ndarray:
    """The 4 context values (bytes, reuse, stride, count) of buffer ``name`` in a context row."""
    order = sorted(stats, key=lambda b: (-stats[b][3], b))
    s = order.index(name)
    o = la.F_BUFFERS + s * la.BUFFER_FEATS
    return ctx_row[o:o + la.BUFFER_FEATS]


@pytest.fixture(scope="module")
def mm():
    mod = matmul_schedule()
    return mod, analyze(mod), extract_loop_tree(mod)


def test_structure_extents_parents(mm):
    _, an, tree = mm
    assert isinstance(tree, LoopTree)
    assert tree.ctx.shape == (5, CTX_DIM) and tree.ctx.dtype == np.float32
    assert an.extent == [8, 8, 32, 16, 32]
    assert tree.parent.tolist() == [-1, 0, 1, 1, 3]
    assert tree.parent.dtype == np.int64
    assert all(p < k for k, p in enumerate(tree.parent))
    assert np.allclose(tree.ctx[:, la.F_EXTENT], [lg(8), lg(8), lg(32), lg(16), lg(32)])
    assert tree.ctx[:, la.F_DEPTH].tolist() == [0, 1, 2, 2, 3]
    assert tree.ctx[:, la.F_INNERMOST].tolist() == [0, 0, 1, 0, 1]
    assert tree.ctx[:, la.F_REDUCTION].tolist() == [0, 0, 0, 1, 0]
    assert np.isclose(tree.ctx[JLOOP, la.F_TOPDOWN], lg(8 * 8 * 16 * 32))


def test_annotations(mm):
    _, _, tree = mm
    ann = tree.ctx[:, la.F_PARALLEL:la.F_NO_ANNOT + 1]
    assert ann[I0].tolist() == [1, 0, 0, 0]  # parallel
    assert ann[I1].tolist() == [0, 0, 0, 1]  # none
    assert ann[JINIT].tolist() == [0, 1, 0, 0]  # vectorized
    assert ann[KLOOP].tolist() == [0, 0, 0, 1]
    assert ann[JLOOP].tolist() == [0, 1, 0, 0]


def test_unroll_pragma_sets_unroll_flag():
    mod = matmul_schedule()
    sch = Schedule(mod)
    loop = sch.get_loops(sch.get_sblock("C_update"))[1]  # i1
    sch.annotate(loop, "pragma_auto_unroll_max_step", 64)
    tree = extract_loop_tree(sch.mod)
    assert tree.ctx[I1, la.F_UNROLL] == 1 and tree.ctx[I1, la.F_NO_ANNOT] == 0
    assert np.isclose(tree.ctx[I1, la.F_UNROLL_STEP], lg(64))
    assert tree.ctx[I0, la.F_UNROLL_STEP] == 0


def test_bytes_counts_reuse(mm):
    _, an, tree = mm
    # the outermost loop touches every buffer whole
    st = an.stats[I0]
    assert st["A"][0] == M * K * 4
    assert st["B"][0] == K * N * 4
    assert st["C"][0] == M * N * 4
    assert an.root_stats["A"][0] == M * K * 4
    # A and B are each read once per multiply-add
    assert st["A"][3] == M * N * K and st["B"][3] == M * N * K
    # C: init write (M*N) + update read and write (2*M*N*K)
    assert st["C"][3] == M * N + 2 * M * N * K
    assert st["B"][1] == pytest.approx(M * N * K / (K * N))  # reuse of B = 64
    # inside one k iteration's j loop: a row of B (32 floats), one element of A
    sj = an.stats[JLOOP]
    assert sj["B"][0] == N * 4 and sj["A"][0] == 4 and sj["A"][1] == N
    # the k loop touches a 16-element row of A and all of B
    sk = an.stats[KLOOP]
    assert sk["A"][0] == K * 4 and sk["B"][0] == K * N * 4
    # context values are the log of those
    row = tree.ctx[I0]
    assert np.allclose(buf_slot(row, st, "B"), [lg(K * N * 4), lg(M), lg(0), lg(M * N * K)])


def test_strides(mm):
    _, an, tree = mm
    sj, sk, s1 = an.stats[JLOOP], an.stats[KLOOP], an.stats[I1]
    # innermost vectorised j: unit stride on C and B, none on A
    assert sj["C"][2] == 1 and sj["B"][2] == 1 and sj["A"][2] == 0
    # k: unit stride on A (row-major [64,16]), a row of B (32), none on C
    assert sk["A"][2] == 1 and sk["B"][2] == N and sk["C"][2] == 0
    # i1: a row of A and of C
    assert s1["A"][2] == K and s1["C"][2] == N and s1["B"][2] == 0
    # i0 = 8 rows
    assert an.stats[I0]["C"][2] == 8 * N
    assert np.isclose(buf_slot(tree.ctx[JLOOP], sj, "B")[2], lg(1))
    assert np.isclose(buf_slot(tree.ctx[KLOOP], sk, "B")[2], lg(N))


def test_top_buffer_order(mm):
    _, an, tree = mm
    # at i0: C has most accesses, then A and B tie (name order)
    assert an.top_buffers(an.stats[I0], 4) == ["C", "A", "B"]
    row = tree.ctx[I0]
    o = la.F_BUFFERS
    assert np.isclose(row[o + 3], lg(M * N + 2 * M * N * K))  # C count first
    assert np.isclose(row[o + 4], lg(M * K * 4))  # then A's bytes
    assert np.all(row[o + 3 * la.BUFFER_FEATS:o + 4 * la.BUFFER_FEATS] == 0)  # 4th slot empty


def test_arith_counts(mm):
    _, an, tree = mm
    assert an.arith[I0].tolist() == [M * N * K, M * N * K, 0]
    assert an.arith[JLOOP].tolist() == [N, N, 0]
    assert an.arith[JINIT].tolist() == [0, 0, 0]
    assert np.isclose(tree.ctx[I0, la.F_ARITH], lg(M * N * K))
    assert an.root_arith.sum() == 2 * M * N * K


def test_floordiv_floormod_layout():
    an = analyze(matmul_schedule(layout=True))
    # B is now [4, 16, 8]: B[j // 8, k, j % 8]
    assert an.stats[I0]["B"][0] == K * N * 4  # still the whole buffer
    assert an.stats[JLOOP]["B"][2] == 1  # j % 8 moves by one element
    assert an.stats[KLOOP]["B"][2] == 8  # k is the middle dimension of [4, 16, 8]
    assert an.stats[JLOOP]["B"][0] == N * 4  # 32 elements across 4 blocks of 8


def test_itervar_features_layout(mm):
    mod, _, tree = mm
    v = itervar_features(tree)
    assert v.shape == (ITERVAR_DIM,) == (MAX_LOOPS * CTX_DIM,)
    assert np.array_equal(v[:5 * CTX_DIM], tree.ctx.reshape(-1))
    assert np.all(v[5 * CTX_DIM:] == 0)
    assert itervar_features(tree, max_loops=2).shape == (2 * CTX_DIM,)
    assert np.array_equal(itervar_features(mod), v)


def test_curve_features_values(mm):
    _, an, _ = mm
    v = curve_features(an)
    assert v.shape == (CURVE_DIM,)
    T = la.CURVE_THRESHOLDS
    # buffer slot 0 is C; pair 0 is (reuse, bytes): the largest reuse among loops touching
    # fewer than 2**t bytes of C
    raw, z = la.relation_matrix(an, "C")
    r = v[:T]
    for t in range(T):
        sel = raw[:, la.Z_BYTES] < 2.0 ** t
        expect = z[sel, la.Z_REUSE].max() if sel.any() else 0.0
        assert r[t] == pytest.approx(expect, abs=1e-5)
    assert np.all(np.diff(r) >= 0)  # a max over a growing set
    g = v[-la.N_CURVE_GLOBALS:]
    assert g[0] == pytest.approx(lg(2 * M * N * K))  # flops
    assert g[1] == pytest.approx(lg(4 * (M * K + K * N + M * N)))  # bytes
    assert g[3] == pytest.approx(lg(8))  # parallel extent
    assert g[4] == pytest.approx(lg(32))  # vector width


TASKS = [
    Task.from_op("conv2d", (10, 10, 8, 16, 3, 1, 1)),
    Task.from_op("matmul", (32, 48, 64)),
    Task.from_op("depthwise_conv2d", (12, 12, 8, 3, 1, 1)),
    Task.from_op("batch_matmul", (2, 16, 24, 32)),
]


def test_curve_length_is_task_independent():
    lengths = set()
    for t in TASKS:
        cs = t.space.sample(random.Random(0), 3)
        x = CurveFeatures().extract(t, cs)
        assert np.all(np.isfinite(x)) and np.abs(x).sum(axis=1).min() > 0
        lengths.add(x.shape[1])
        assert ItervarFeatures().extract(t, cs).shape[1] == ITERVAR_DIM
    assert lengths == {CURVE_DIM}


@pytest.mark.parametrize("name", ["itervar", "curve"])
def test_configs_differ_and_deterministic(name):
    t = Task.from_op("conv2d", (10, 10, 8, 16, 3, 1, 1))
    cs = t.space.sample(random.Random(1), 8)
    x = get_extractor(name).extract(t, cs)
    assert len({row.tobytes() for row in x}) >= 6  # distinct schedules, distinct rows
    t2 = Task.from_op("conv2d", (10, 10, 8, 16, 3, 1, 1))
    la._ANALYSES.clear()
    y = get_extractor(name).extract(t2, [t2.space.get(c.index) for c in cs])
    assert np.array_equal(x, y)


def test_conv2d_kernel_layout_and_flops():
    t = Task.from_op("conv2d", (10, 10, 8, 16, 3, 1, 1))
    c = t.space.sample(random.Random(2), 1)[0]
    an = analyze(t.instantiate(c))
    assert an.root_arith[0] == an.root_arith[1] == t.flops / 2
    # every buffer of a full run is at most the buffer itself
    sizes = {"data": 8 * 100 * 4, "kernel": 16 * 8 * 9 * 4, "conv": 16 * 100 * 4, "pad": 8 * 144 * 4}
    for b, s in sizes.items():
        assert an.root_stats[b][0] == s


def test_primfunc_task():
    a = te.placeholder((6, 20), name="A")
    b = te.placeholder((6, 20), name="B")
    s = te.compute((6, 20), lambda i, j: a[i, j] + b[i, j], name="S")
    r = te.compute((6, 20), lambda i, j: te.max(s[i, j], 0.0), name="R")
    t = Task.from_primfunc(te.create_prim_func([a, b, r]))
    cs = t.space.sample(random.Random(0), 3)
    x = get_extractor("curve").extract(t, cs)
    assert x.shape == (3, CURVE_DIM) and np.abs(x).sum() > 0
    tree = loop_tree(t, cs[0])
    assert tree.ctx.shape[1] == CTX_DIM and len(tree) >= 1
    an = analyze(t.instantiate(cs[0]))
    assert an.root_arith.tolist() == [120, 0, 120]  # 120 adds, 120 max


def test_symbolic_extent_does_not_crash():
    n = te.var("n")
    a = te.placeholder((n, 8), name="A")
    b = te.compute((n, 8), lambda i, j: a[i, j] * 2.0, name="B")
    an = analyze(te.create_prim_func([a, b]))
    assert an.extent == [1, 8]  # the non-constant extent counts as 1
    assert curve_features(an).shape == (CURVE_DIM,)


def test_cache_hits_do_not_reinstantiate(monkeypatch):
    t = Task.from_op("matmul", (32, 48, 64))
    cs = t.space.sample(random.Random(3), 4)
    ex = ItervarFeatures()
    x = ex.extract(t, cs)
    calls = []
    monkeypatch.setattr(Task, "instantiate", lambda self, c: calls.append(c) or (_ for _ in ()).throw(RuntimeError))
    y = ex.extract(t, cs)
    assert not calls and np.array_equal(x, y)


def test_registry():
    assert set(FEATURES) == {"knob", "itervar", "curve", "perstore"}
    assert isinstance(get_extractor("knob"), KnobFeatures)
    assert isinstance(get_extractor("curve"), CurveFeatures)
    with pytest.raises(ValueError, match="itervar"):
        get_extractor("nope")


def test_perstore_features():
    t = Task.from_op("matmul", (32, 48, 64))
    cs = t.space.sample(random.Random(0), 2)
    x = PerStoreFeatures().extract(t, cs)
    assert x.shape[0] == 2 and x.shape[1] > 100
    assert np.all(np.isfinite(x)) and np.abs(x).sum(axis=1).min() > 0


def test_reduction_init_runs_once_per_output():
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    an = analyze(te.create_prim_func([A, B, C]))  # one block with T.init(), loops i, j, k
    assert an.extent == [M, N, K] and an.reduction == [False, False, True]
    assert an.root_stats["C"][3] == M * N + 2 * M * N * K
    assert an.stats[2]["C"][3] == 2 * K  # the k loop runs no init
