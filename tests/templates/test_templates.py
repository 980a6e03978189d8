"""Every template builds correct kernels: default and sampled configs through the real
builder and runner (the correctness check against the reference), plus in-process builds of
whole small spaces.

A template may legitimately reject a config it cannot apply (``Template.apply`` raises; the
builder records that as :attr:`ErrorKind.INSTANTIATION`). Any other outcome of a sampled
config - a compile error, a crash, a timeout, a wrong answer - is a template bug and fails
the test, and rejections must stay a small minority of the space (the spaces' constraints
are there to keep impossible configs out; none is known to be rejected today).
"""
from __future__ import annotations

import random
import re
from collections.abc import Iterator

import numpy as np
import pytest
import tvm
from tvm import te

import tensortune.target
from tensortune.measure import ErrorKind, MeasureInput, MeasureOptions, MeasureResult, Measurer
from tensortune.space import Config
from tensortune.task import Task
from tensortune.templates import Template, TemplateError, get_template

#: Sampled configs per task (besides the template default).
N_SAMPLES = 8
#: Sampled configs per task the template may reject (ErrorKind.INSTANTIATION): 1 in 8. None is
#: today: 200 sampled configs of each case below instantiated on znver3 and on znver4 targets.
MAX_REJECTED = 1

OP_CASES = {
    "matmul": ("matmul", (32, 48, 64)),
    "dense": ("dense", (32, 48, 64)),
    "batch_matmul": ("batch_matmul", (2, 16, 24, 32)),
    "conv2d": ("conv2d", (10, 10, 8, 16, 3, 1, 1)),
    "conv2d-stride2": ("conv2d", (11, 11, 4, 8, 3, 2, 1)),
    "conv2d-1x1": ("conv2d", (8, 8, 8, 16, 1, 1, 0)),
    "conv2d-odd-channels": ("conv2d", (9, 9, 3, 12, 3, 1, 1)),
    "depthwise": ("depthwise_conv2d", (12, 12, 8, 3, 1, 1)),
    "depthwise-stride2": ("depthwise_conv2d", (13, 13, 6, 3, 2, 1)),
    # the blocked forms of a model's layout plan; 13 and 11 (prime) output widths: tail tiles
    "conv2d-nchwc": ("conv2d_nchwc", (13, 13, 16, 16, 3, 1, 1, 8, 8)),
    "conv2d-nchwc-stem": ("conv2d_nchwc", (21, 21, 3, 8, 3, 2, 1, 3, 8)),
    "conv2d-nchwc-1x1": ("conv2d_nchwc", (9, 9, 8, 16, 1, 1, 0, 4, 8)),
    # any geometry (H, W, IC, OC, KH, KW, SH, SW, PT, PL, PB, PR, DH, DW, G, IB, OB): a 1x7 kernel with
    # asymmetric padding, a dilated 3x3, groups of two channel blocks, a group per output block
    "conv2d-nchwc-1x7": ("conv2d_nchwc_general", (11, 11, 16, 8, 1, 7, 1, 1, 0, 3, 0, 2, 1, 1, 1, 8, 8)),
    "conv2d-nchwc-dilated-stride2": ("conv2d_nchwc_general", (13, 13, 8, 16, 3, 3, 2, 1, 2, 2, 1, 2, 2, 2, 1, 8, 8)),
    "conv2d-nchwc-grouped": ("conv2d_nchwc_general", (9, 9, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8)),
    "conv2d-nchwc-grouped-per-block": ("conv2d_nchwc_general", (10, 10, 32, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 4, 8, 8)),
    "depthwise-nchwc": ("depthwise_conv2d_nchwc", (13, 13, 16, 3, 1, 1, 8)),
    # H, W, C, KH, KW, SH, SW, PT, PL, PB, PR, DH, DW, B: TensorFlow's "same" at stride 2 (pad bottom
    # and right only), a dilated 1x5
    "depthwise-nchwc-same-stride2": ("depthwise_conv2d_nchwc_general", (14, 14, 16, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, 8)),
    "depthwise-nchwc-dilated-1x5": ("depthwise_conv2d_nchwc_general", (9, 11, 8, 1, 5, 1, 1, 0, 4, 0, 4, 1, 2, 8)),
    "depthwise-nchwc-stride2": ("depthwise_conv2d_nchwc", (17, 17, 8, 5, 2, 2, 8)),
    # a model's matmul with its weight packed at compile time; one row: the classifier's GEMV
    "dense-pack": ("dense_pack", (12, 48, 40, 8)),
    "dense-pack-gemv": ("dense_pack", (1, 40, 24, 8)),
    # rows no register tile divides (a ViT's 197 tokens): guarded tail tiles
    "dense-pack-prime-rows": ("dense_pack", (37, 32, 24, 8)),
    "batch-matmul-prime-rows": ("batch_matmul", (2, 37, 24, 16)),
    "batch-matmul-prime-columns": ("batch_matmul", (2, 37, 37, 16)),
}


def add_relu_primfunc():
    a = te.placeholder((6, 20), name="A")
    b = te.placeholder((6, 20), name="B")
    s = te.compute((6, 20), lambda i, j: a[i, j] + b[i, j], name="S")
    r = te.compute((6, 20), lambda i, j: te.max(s[i, j], 0.0), name="R")
    return te.create_prim_func([a, b, r])


def matmul_primfunc():
    a = te.placeholder((10, 12), name="A")
    b = te.placeholder((12, 7), name="B")
    k = te.reduce_axis((0, 12), name="k")
    c = te.compute((10, 7), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.create_prim_func([a, b, c])


@pytest.fixture(scope="module")
def measurer() -> Iterator[Measurer]:
    """The real builder and runner, correctness check on; one timed run per candidate (nothing
    here is about speed). The timeouts are ones only a hanging build or kernel reaches."""
    opts = MeasureOptions(number=1, repeat=1, min_repeat_ms=0, check_correctness=True,
                          build_timeout=300.0, run_timeout=300.0)
    with Measurer(opts) as m:
        yield m


def run_config(task: Task, config, inputs: list[np.ndarray]) -> np.ndarray:
    """Schedule, compile and run one config in-process; return its output."""
    ex = tvm.compile(task.instantiate(config), target=tensortune.target.make_target(task.target_json))
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.tensor(task.output_buffer(), dev)
    ex.mod["main"](*args, out)
    return out.numpy()


def describe(config: Config, r: MeasureResult) -> str:
    return f"config {config.index} {config.knobs}: {r.error.value}: {r.error_msg.strip()[:500]}"


def check_configs(measurer: Measurer, task: Task, n_samples: int = N_SAMPLES, seed: int = 0,
                  max_rejected: int = MAX_REJECTED) -> list[str]:
    """Measure the default and ``n_samples`` sampled configs; return the rejected ones.

    The default config must build, run and match the reference. Each sampled config must
    too, or be rejected by the template (``ErrorKind.INSTANTIATION``), at most
    ``max_rejected`` of them.
    """
    default = task.default_config()
    assert task.space.is_valid(default)
    samples = task.space.sample(random.Random(seed), n_samples, exclude={default.index})
    assert len(samples) == n_samples and all(task.space.is_valid(c) for c in samples)
    configs = [default] + samples
    results = measurer.measure([MeasureInput(task, c) for c in configs])
    assert len(results) == len(configs)
    d = results[0]
    assert d.ok and d.extra.get("verified") is True, "default " + describe(default, d)
    rejected = []
    for c, r in zip(samples, results[1:]):
        if r.ok:
            assert r.extra.get("verified") is True, describe(c, r)  # checked against the reference
            assert r.costs and all(x > 0 for x in r.costs)
            continue
        # only the template may refuse a config; compile errors, crashes and wrong answers are bugs
        assert r.error is ErrorKind.INSTANTIATION, describe(c, r)
        assert r.error_msg, describe(c, r)
        rejected.append(describe(c, r))
    assert len(rejected) <= max_rejected, rejected
    return rejected


@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_op_templates_default_and_samples_correct(measurer: Measurer, case: str) -> None:
    op, shape = OP_CASES[case]
    task = Task.from_op(op, shape)
    check_configs(measurer, task)


def test_generic_template_elementwise_primfunc(measurer: Measurer) -> None:
    task = Task.from_primfunc(add_relu_primfunc())
    assert task.template_name == "generic"
    check_configs(measurer, task, max_rejected=0)  # the elementwise space has no impossible config


def test_generic_template_reduction_primfunc(measurer: Measurer) -> None:
    task = Task.from_primfunc(matmul_primfunc())
    assert task.template_name == "generic"
    check_configs(measurer, task)


def test_generic_template_small_space_correct() -> None:
    """Every config of a small space (a seeded sample of 16 where it is larger) computes the same."""
    import random

    a = te.placeholder((3, 5), name="A")
    out = te.compute((3, 5), lambda i, j: a[i, j] * 2.0 + 1.0, name="O")
    task = Task.from_primfunc(te.create_prim_func([a, out]))
    inputs = task.make_inputs(1)
    expected = inputs[0] * 2.0 + 1.0
    configs = list(task.space)
    assert len(configs) == len(task.space) > 1
    if len(configs) > 16:
        configs = random.Random(0).sample(configs, 16)
    for c in configs:
        np.testing.assert_allclose(run_config(task, c, inputs), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,shape", [("matmul", (7, 13, 5)), ("conv2d", (9, 9, 3, 5, 3, 2, 1)),
                                      ("depthwise_conv2d", (7, 7, 3, 3, 1, 1))])
def test_none_template_is_correct(op: str, shape) -> None:
    task = Task.from_op(op, shape, template="none")
    assert len(task.space) == 1
    inputs = task.make_inputs(0)
    np.testing.assert_allclose(run_config(task, task.default_config(), inputs), task.reference(inputs),
                               rtol=1e-3, atol=1e-3)


def test_knob_names_follow_autotvm() -> None:
    names = lambda t: [k.name for k in t.space.knobs]  # noqa: E731
    gemm = names(Task.from_op("matmul", (32, 48, 64)))
    conv = names(Task.from_op("conv2d", (10, 10, 8, 16, 3, 1, 1)))
    for n in ("tile_y", "tile_x", "tile_k", "auto_unroll_max_step", "unroll_explicit"):
        assert n in gemm
    for n in ("tile_f", "tile_y", "tile_x", "tile_rc", "auto_unroll_max_step", "unroll_explicit"):
        assert n in conv


def test_template_splits_cover_the_task_axes() -> None:
    t = Task.from_op("matmul", (32, 48, 64))
    c = t.space.get(t.space.index_of(t.default_config().knobs))
    assert np.prod(c["tile_y"]) == 32 and np.prod(c["tile_x"]) == 48 and np.prod(c["tile_k"]) == 64


@pytest.mark.parametrize("op,shape", [("conv2d_nchwc", (17, 17, 16, 16, 3, 1, 1, 8, 8)),
                                      ("depthwise_conv2d_nchwc", (35, 35, 8, 3, 1, 1, 8))])
def test_blocked_register_tiles_are_not_limited_to_divisors(op: str, shape) -> None:
    """Prime and odd widths get full-width register tiles (a guarded tail), every one correct."""
    task = Task.from_op(op, shape)
    OW = task.out_shape[3]
    widths = sorted({e[1] for e in task.space.knob("tile_x").entities})
    assert any(OW % w for w in widths) and max(widths) >= 7
    inputs = task.make_inputs(1)
    ref = task.reference(inputs)
    for w in (5, 7):
        knobs = dict(task.default_config().knobs, tile_x=(-(-OW // w), w))
        if "algorithm" in knobs:  # the direct convolution's tiles (its default here is Winograd's)
            knobs.update(algorithm=0, wino_input=0)
        got = run_config(task, task.space.get(task.space.index_of(knobs)), inputs)
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)


def test_get_template() -> None:
    for name in ("gemm", "conv2d", "conv2d_nchwc", "depthwise_conv2d", "depthwise_conv2d_nchwc", "generic", "none"):
        t = get_template(name)
        assert isinstance(t, Template) and t.name == name
    with pytest.raises(TemplateError):
        get_template("nope")
    with pytest.raises(TemplateError):
        Task.from_op("matmul", (4, 4, 4), template="nope").space


def test_conv2d_default_for_channels_no_vector_divides() -> None:
    """ShuffleNet's 116 channels: the default vectorises 4 channels over a wide row of outputs
    (the configuration tuning found; a 1-wide channel vector ran at 7% of peak)."""
    task = Task.from_op("conv2d", (14, 14, 116, 116, 1, 1, 0))
    cfg = task.default_config()
    assert cfg["tile_f"][2] == 4 and cfg["tile_x"][1] == 14
    lanes = tensortune.templates.base.vector_lanes(task)
    assert Task.from_op("conv2d", (14, 14, 64, 64, 1, 1, 0)).default_config()["tile_f"][2] == lanes


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_padding_per_tile_is_correct(stride: int) -> None:
    """``pad_at=tile`` pads, inside each parallel tile, only the rows that tile reads (overlapping
    rows twice); every row tiling gives the reference's output, and no whole-input pass is left."""
    task = Task.from_op("depthwise_conv2d_nchwc", (15, 15, 16, 3, stride, 1, 8))
    assert task.space.knob("pad_at").entities == ["stage", "tile"]
    # the default pads per tile when a tile can hold 4-8 rows; 13 rows (prime) cannot
    assert task.default_config()["pad_at"] == "tile" and task.default_config()["tile_y"][1] in (5, 8)
    assert Task.from_op("depthwise_conv2d_nchwc", (13, 13, 16, 3, 1, 1, 8)).default_config()["pad_at"] == "stage"
    inputs = task.make_inputs(2)
    ref = task.reference(inputs)
    OH = task.out_shape[2]
    for ty in sorted({e[1] for e in task.space.knob("tile_y").entities}):
        knobs = dict(task.default_config().knobs, pad_at="tile", tile_y=(OH // ty, ty))
        config = task.space.get(task.space.index_of(knobs))
        np.testing.assert_allclose(run_config(task, config, inputs), ref, rtol=1e-4, atol=1e-4)
    text = task.template.apply(task, config).script()
    assert text.count("T.parallel(") == 1, text  # the padding is no parallel pass of its own
    assert "pad_at" not in [k.name for k in Task.from_op("depthwise_conv2d_nchwc", (15, 15, 16, 3, 1, 0, 8)).space.knobs]


def test_dense_default_register_tile_leaves_room_for_weights() -> None:
    """The untuned dense tile: 6 rows x 2 column blocks on AVX2 for 384 rows (the 4 x 3 tile has
    as many accumulators but fills all 16 registers, and ran at a quarter of the best), a
    register-file fit on AVX-512, and every tile inside the space's row and column limits."""
    from tensortune.templates.dense_pack import default_register_tile
    assert default_register_tile(384, 384, 1, 12, 16) == (6, 2)
    assert default_register_tile(384, 125, 1, 12, 16) == (12, 1)  # N = 1000: 125 blocks
    assert default_register_tile(128, 96, 1, 12, 16) == (4, 2)
    assert default_register_tile(197, 96, 1, 12, 16) == (6, 2)  # a prime row count: 33 tiles, a guarded tail of 5 rows
    for M, blocks, wide in [(384, 384, True), (128, 96, True), (1, 512, True), (1, 512, False)]:
        yi, xb = default_register_tile(M, blocks, 1, 28 if wide else 12, 32 if wide else 16)
        assert (yi + 1) * xb + 2 <= (32 if wide else 16) and yi <= 16 and xb <= (4 if M >= 4 else 8)


def test_dense_default_tile_rows_do_not_outnumber_the_l1_ways() -> None:
    """ViT's 197 x 3072 x 768 on AVX-512: rows of A 12 KiB apart all fall in one L1 set, so the
    tile takes at most 8 of them (14 ran at half the peak); 3 KiB rows spread over four sets."""
    from tensortune.templates.dense_pack import aliased_rows, default_register_tile
    assert aliased_rows(14, 4 * 3072) == 14 and aliased_rows(14, 4 * 1536) == 7 and aliased_rows(14, 4 * 768) == 4
    assert default_register_tile(197, 48, 1, 28, 32) == (14, 2)
    yi, xb = default_register_tile(197, 48, 1, 28, 32, row_bytes=4 * 3072)
    assert yi <= 8 and yi * xb >= 20, (yi, xb)
    assert default_register_tile(197, 48, 1, 28, 32, row_bytes=4 * 768) == (14, 2)


def test_gemm_default_register_tile() -> None:
    """Swin's 49-row windows take 7-row tiles (no divisor of 49 is 4; 1 x 2 vectors ran 27% slower
    than 7 x 2); padded columns take two vectors unless that pads far more than one (ViT's 197 x 197
    scores: 4 rows x 2 vectors, 15% faster than 6 x 1); a guarded row tail keeps 4 rows."""
    from tensortune.templates.base import vector_lanes
    lanes = vector_lanes(Task.from_op("batch_matmul", (1, 8, 8, 8)))

    def tile(B: int, M: int, N: int, K: int) -> tuple[int, int]:
        cfg = Task.from_op("batch_matmul", (B, M, N, K)).default_config()
        return cfg["tile_y"][2], cfg["tile_x"][2]

    assert tile(48, 49, 2 * lanes, 49) == (7, 2 * lanes)
    assert tile(12, 197, 197, 64) == (4, 2 * lanes)
    assert tile(16, 256, 2 * lanes + 4, 256) == (4, lanes)  # two vectors would pad 44% more
    assert tile(12, 128, 4 * lanes, 64) == (4, 4 * lanes)


def _block_executions(mod) -> int:
    """How many times the blocks of ``mod``'s scheduled PrimFunc execute in all (loop extents
    multiplied over each block's loops): repeated work shows as a larger count."""
    import tvm.s_tir as st

    sch = st.Schedule(mod)
    total = 0
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        n = 1
        for lp in sch.get_loops(b):
            n *= int(sch.get(lp).extent)
        total += n
    return total


def _gelu_between_reshapes():
    """A convolution's bias and GELU between two reshapes (Whisper's stem): the reshape's index
    is ``(w // W + c) % C``, a region TVM cannot narrow per channel."""
    from tvm import topi

    x = te.placeholder((1, 24, 1, 40), name="x")
    bias = te.placeholder((1, 24, 1), name="bias")
    r = topi.reshape(x, (1, 24, 40))
    a = topi.add(r, bias)
    g = topi.multiply(a, topi.add(topi.multiply(topi.erf(topi.multiply(a, 0.7071)), 0.5), 0.5))
    return te.create_prim_func([x, bias, topi.reshape(g, (1, 24, 1, 40))])


def test_a_function_of_few_points_runs_on_one_thread_by_default() -> None:
    """Waking the thread pool costs more than a recurrent cell's gates over 256 values: the untuned
    schedule of a function under SERIAL_POINTS has no parallel loop; a larger one keeps it, and no
    config makes a parallel loop of one iteration."""
    from tvm import topi

    from tensortune.templates.generic import SERIAL_POINTS

    def gates(rows: int) -> Task:
        x = te.placeholder((rows, 256), name="x")
        return Task.from_primfunc(te.create_prim_func([x, topi.sigmoid(x)]))

    small, large = gates(1), gates(2 * SERIAL_POINTS // 256)
    assert small.default_config()["parallel_depth"] == 0
    assert "T.parallel" not in small.template.apply(small, small.default_config()).script()
    assert "T.parallel" in large.template.apply(large, large.default_config()).script()
    one = small.space.get(small.space.index_of({**small.default_config().knobs, "parallel_depth": 1}))
    assert "T.parallel" not in small.template.apply(small, one).script()


def _softmax(rows: int, cols: int, fast: bool = False):
    from tvm import topi

    x = te.placeholder((2, rows, cols), name="x")
    return te.create_prim_func([x, (topi.nn.fast_softmax if fast else topi.nn.softmax)(x, axis=-1)])


@pytest.mark.parametrize("name,make", [("gelu-between-reshapes", _gelu_between_reshapes),
                                       ("softmax-60", lambda: _softmax(40, 60)),  # above SERIAL_POINTS: parallel
                                       ("softmax-96", lambda: _softmax(40, 96)),
                                       ("fast-softmax-67", lambda: _softmax(40, 67, fast=True))])
def test_generic_template_repeats_no_work_and_vectorises_rows(measurer: Measurer, name: str, make) -> None:
    """The generic default computes no stage whole per parallel iteration (the reshape's producer is
    kept on its own or inlined: it once ran 384 times over in Whisper) and gives a row reduction a
    vector of partial results; default and samples match the reference."""
    task = Task.from_primfunc(make())
    unscheduled = _block_executions(tvm.IRModule({"main": task.prim_func()}))
    scheduled = task.template.apply(task, task.default_config())
    assert _block_executions(scheduled) <= 2 * unscheduled
    text = scheduled.script()
    if name in ("softmax-60", "softmax-96"):  # the partials accumulate in vector lanes
        assert "_rf" in text, text
        above = text.split('with T.sblock("T_softmax_maxelem_rf_update")')[0].rstrip().splitlines()[-1]
        assert "T.vectorized" in above, text
    if name == "fast-softmax-67":  # a prime row: lanes-wide pieces, the guarded last one peeled off
        for stage in ("T_fast_exp", "T_softmax_norm"):
            assert f'T.sblock("{stage}_' in text and f"{stage}_" in text.split("_partition")[0] + text, text
            assert text.count(f'with T.sblock("{stage}_') >= 2, text  # the whole pieces and the peeled one
        assert "T.vectorized" in text, text
    check_configs(measurer, task)


def test_gemm_columns_no_vector_divides_are_padded_not_guarded() -> None:
    """Whisper's 1500 x 1500 attention scores: columns are padded to the tile in the packed copy of
    B and the register tile carries no guard (a guarded vector column became gathers and ran at
    11% of peak); the default tile is two vectors wide; a fused bias epilogue stays correct."""
    from tensortune.templates.base import vector_lanes
    lanes = vector_lanes(Task.from_op("batch_matmul", (1, 8, 8, 8)))
    M, N, K = 30, 12 * lanes - 3, 16
    a, b = te.placeholder((2, M, K), name="A"), te.placeholder((2, K, N), name="B")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((2, M, N), lambda n, i, j: te.sum(a[n, i, k] * b[n, k, j], axis=k), name="C")
    d = te.compute((2, M, N), lambda n, i, j: c[n, i, j] + bias[j], name="D")
    for task in (Task.from_op("batch_matmul", (2, M, N, K)), Task.from_fused(te.create_prim_func([a, b, bias, d]))):
        assert task.template_name == "gemm"
        cfg = task.default_config()
        assert cfg["tile_x"][2] == 2 * lanes and task.space.knob("pack_b").entities == [1]
        text = task.template.apply(task, cfg).script()
        update = text.split('T.sblock("C_update")')[1].split("T.sblock(")[0]
        assert "T.where" not in update, text
        inputs = task.make_inputs(0)
        np.testing.assert_allclose(run_config(task, cfg, inputs), task.reference(inputs), rtol=1e-4, atol=1e-4)


def test_gemm_with_fewer_columns_than_a_vector_builds_in_seconds() -> None:
    # a classifier head (4096 features -> 10 classes): the default tile took the 10 columns one
    # by one, and the packed copy of one column vectorised its 4096-long reduction loop, which kept
    # LLVM busy for minutes (the model never compiled)
    import time

    task = Task.from_op("matmul", [1, 10, 4096])
    default = task.default_config()
    assert default["tile_x"][2] == 10  # all of them in one tile
    one_column = dict(default.to_json()["knobs"], tile_x=[10, 1, 1])
    target = tensortune.target.make_target(tensortune.target.host_target_json())
    for config in (default, task.space.get(task.space.index_of(one_column))):
        t0 = time.perf_counter()
        with target:
            tvm.compile(task.template.apply(task, config), target)
        assert time.perf_counter() - t0 < 30


def _blocked_norm():
    """A GroupNorm(1) step over ``[1, C/16, H, W, 16]`` as a bf16 or f32 PoolFormer runs it: the
    per-channel sums over the blocked layout, a tiny 1x1 conv of them (the channel mean), and
    ``x * rsqrt(var^2 + eps) * gamma`` broadcast (squared: random data stays real) over the map."""
    from tvm import topi

    x = te.placeholder((1, 4, 14, 14, 16), name="x")
    w = te.placeholder((4, 4, 16, 16), name="w")
    gamma = te.placeholder((1, 4, 1, 1, 16), name="gamma")
    s = topi.sum(x, axis=[2, 3], keepdims=True)
    rco = te.reduce_axis((0, 4), name="rco")
    rci = te.reduce_axis((0, 16), name="rci")
    var = te.compute((1, 4, 1, 1, 16), lambda n, f, y, z, fi: te.sum(s[n, rco, y, z, rci] * w[f, rco, rci, fi],
                                                                     axis=[rco, rci]), name="var")
    scale = te.compute(var.shape, lambda *i: te.rsqrt(var[i] * var[i] + 1e-5) * gamma[i], name="scale")
    out = te.compute(x.shape, lambda n, c, h, ww, l: x[n, c, h, ww, l] * scale[n, c, 0, 0, l], name="out")
    return te.create_prim_func([x, w, gamma, out])


def test_generic_template_sums_lanes_as_vectors_and_keeps_per_channel_values(measurer: Measurer) -> None:
    """A reduction over a blocked layout's outer axes runs its contiguous lanes as vectors inside
    the reduction loops (it once read every cache line 16 times, scalar: a PoolFormer's norms at
    11-15 GB/s), and a per-channel value is computed per channel, not per point of the map."""
    task = Task.from_primfunc(_blocked_norm())
    text = task.template.apply(task, task.default_config()).script()
    for red in ("x_red", "var"):
        update = text.split(f'with T.sblock("{red}_update")')[0].rstrip().splitlines()[-1]
        assert "T.vectorized" in update, text
    out = text.split('with T.sblock("out")')[1]
    assert "rsqrt" not in out, text  # the map reads the per-channel scale
    check_configs(measurer, task)


def _tokens_to_nchw() -> tvm.tirx.PrimFunc:
    """A transformer's tokens ``[H*W, C]`` scaled per channel, back to ``NCHW`` and added to a
    residual (ConvNeXt's block end): the output's rows read the tokens with a stride of ``C``."""
    h, w, c = 4, 16, 48
    x, g = te.placeholder((h * w, c), name="x"), te.placeholder((c,), name="g")
    res = te.placeholder((1, c, h, w), name="res")
    out = te.compute((1, c, h, w), lambda n, k, i, j: x[i * w + j, k] * g[k] + res[n, k, i, j], name="out")
    return te.create_prim_func([x, g, res, out])


def _scatter_to_blocked() -> tvm.tirx.PrimFunc:
    """TVM's ``layout_transform`` from ``NCHW`` to ``NCHW8c``: a loop nest over the input that
    scatters each row into the blocked output."""
    c, h, w = 32, 5, 16
    text = f'''
@T.prim_func(s_tir=True)
def main(x: T.Buffer((1, {c}, {h}, {w}), "float32"), y: T.Buffer((1, {c // 8}, {h}, {w}, 8), "float32")):
    for n, k, i, j in T.grid(1, {c}, {h}, {w}):
        with T.sblock("t"):
            vn, vk, vi, vj = T.axis.remap("SSSS", [n, k, i, j])
            y[vn, vk // 8, vi, vj, vk % 8] = x[vn, vk, vi, vj]
'''
    return tvm.script.from_source(text)


@pytest.mark.parametrize("make,axis,tiles", [(_tokens_to_nchw, 1, [16, 8, 0]), (_scatter_to_blocked, 1, [16, 8, 0])])
def test_generic_template_walks_a_transposed_buffer_in_tiles(measurer: Measurer, make, axis: int, tiles: list[int]) -> None:
    """A transpose (tokens back to NCHW) and a layout transform that scatters its input's rows run
    in tiles along the strided buffer's contiguous axis (ConvNeXt's block end read its tokens a
    column at a time: 5.9 GB/s); a map that walks every buffer in order gets no tile."""
    from tensortune.templates.base import vector_lanes
    from tensortune.templates.generic import _transposed_axis

    task = Task.from_primfunc(make())
    sch, block = task.template._inlined(task)
    assert _transposed_axis(sch, block) == axis
    assert task.space.knob("transpose_tile").entities == tiles
    cfg = task.default_config()
    assert cfg["transpose_tile"] == (vector_lanes(task) if vector_lanes(task) in tiles else tiles[0])
    sch = task.template.schedule(task, cfg)
    loops = sch.get_loops(sch.get_child_blocks(sch.get_sblock("root"))[-1])
    extents = [int(sch.get(lp).extent) for lp in loops]
    kinds = [sch.get(lp).kind for lp in loops]
    tile = cfg["transpose_tile"]
    assert extents[axis] == (48 if make is _tokens_to_nchw else 32) // tile, extents
    assert extents[-2] == tile and kinds[-1] == tvm.tirx.ForKind.VECTORIZED, (extents, kinds)
    check_configs(measurer, task)
    a = te.placeholder((4, 6, 40), name="a")
    bias = te.placeholder((40,), name="bias")
    in_order = te.compute((4, 6, 40), lambda i, j, k: a[i, j, k] + bias[k], name="b")  # every buffer in order
    plain = Task.from_primfunc(te.create_prim_func([a, bias, in_order]))
    assert plain.space.knob("transpose_tile").entities == [0]


def test_generic_template_parallelises_past_unit_loops(measurer: Measurer) -> None:
    """A per-channel sum over H and W of a channels-last map (ConvNeXtV2's response norm): its
    leading output loops are all of extent 1, so the parallel loop takes the channels' outer loop
    (it ran on one thread, at 17-25 GB/s)."""
    h, w, c = 28, 28, 96
    x = te.placeholder((1, h, w, c), name="x")
    i, j = te.reduce_axis((0, h), name="i"), te.reduce_axis((0, w), name="j")
    y = te.compute((1, 1, 1, c), lambda n, a, b, k: te.sum(x[n, i, j, k] * x[n, i, j, k], axis=[i, j]), name="y")
    task = Task.from_primfunc(te.create_prim_func([x, y]))
    cfg = task.default_config()
    assert cfg["parallel_depth"] > 0
    assert "T.parallel" in task.template.apply(task, cfg).script()
    check_configs(measurer, task)


def test_generic_unrolls_at_most_64_steps_of_16_lane_vectors() -> None:
    """A config of 512 unrolled steps unrolls 64 for an AVX-512 target (LLVM's x86 back end ran for
    minutes on such a softmax) and 512 for an AVX2 one; the space is the same for both."""
    base = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "num-cores": 2}
    steps = {}
    for cpu in ("znver4", "znver3"):
        task = Task.from_primfunc(_softmax(40, 96), target={**base, "mcpu": cpu})
        knobs = {**task.default_config().knobs, "auto_unroll_max_step": 512, "parallel_depth": 1}
        text = task.template.apply(task, task.space.get(task.space.index_of(knobs))).script()
        steps[cpu] = re.findall(r'"pragma_auto_unroll_max_step": (\d+)', text)
    assert steps == {"znver4": ["64"], "znver3": ["512"]}
