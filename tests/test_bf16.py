"""bf16 (``--precision bf16``): bits and tolerance, the hardware check, codegen, kernels against their
float32 references, records kept apart from f32, a model built in bf16."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tensortune import precision as prec
from tensortune.cli import main
from tensortune.database import Database
from tensortune.task import Task

HAS_BF16 = prec.CPU_FLAG in prec.host_flags()
needs_bf16 = pytest.mark.skipif(not HAS_BF16, reason="this CPU has no avx512_bf16: the bf16 kernels cannot run here")
FAST = ["--repeat", "3", "--min-repeat-ms", "5"]
ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}


def cli(capfd, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capfd.readouterr()
    return rc, out, err


def test_bits_round_to_nearest_even_and_back_exactly() -> None:
    x = np.array([1.0, -2.5, 1 + 2 ** -8, 1 + 3 * 2 ** -9, 3.0e38, 0.0, np.nan], dtype=np.float32)
    bits = prec.to_bf16_bits(x)
    assert bits.dtype == np.uint16
    back = prec.from_bf16_bits(bits)
    assert list(back[[0, 1, 3, 5]]) == [1.0, -2.5, 1 + 2 ** -7, 0.0]
    assert back[2] == 1.0  # a tie rounds to the even mantissa
    assert np.isnan(back[6])
    assert abs(back[4] - 3.0e38) / 3.0e38 < 2 ** -8
    y = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    assert np.max(np.abs(prec.round_bf16(y) - y) / np.abs(y)) <= 2 ** -8  # half a unit of 8 significant bits


def test_agreement_states_the_error_and_the_top5() -> None:
    ref = np.random.default_rng(1).standard_normal((2, 10)).astype(np.float32)
    close = ref + 0.001 * np.abs(ref).max()
    a = prec.agreement(close, ref)
    assert a.ok and a.top5 == 1.0 and "top-5 agreement 100%" in a.describe()
    far = ref.copy()
    far[0, 0] += 0.5 * np.abs(ref).max()
    assert not prec.agreement(far, ref).ok
    assert not prec.agreement(np.full_like(ref, np.nan), ref).ok


def test_a_cpu_without_the_feature_is_one_line_and_exit_2(tmp_path, capfd, monkeypatch) -> None:
    monkeypatch.setattr(prec, "host_flags", lambda: frozenset({"avx2", "avx512f"}))
    db = tmp_path / "x.db"
    rc, out, err = cli(capfd, "tune-op", "conv2d", "--shape", "8,8,16,16,3,1,1", "--precision", "bf16",
                       "--trials", "2", "--db", str(db))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "avx512_bf16" in err and "Traceback" not in err
    assert not db.exists()


def test_a_target_without_the_feature_is_refused() -> None:
    with pytest.raises(prec.PrecisionError, match="znver3"):
        prec.require("bf16", {**ZNVER4, "mcpu": "znver3"}, runs_here=False)
    assert prec.require("bf16", {**ZNVER4, "mcpu": "x86-64", "mattr": ["+avx512bf16"]}, runs_here=False) == "bf16"
    assert not prec.target_has_bf16({**ZNVER4, "mattr": ["-avx512bf16"]})
    with pytest.raises(prec.PrecisionError, match="unknown precision"):
        prec.check_name("fp8")


@pytest.mark.parametrize("op,shape", [("conv2d_nchwc_bf16", [6, 6, 16, 16, 3, 1, 1, 16, 16]),
                                      ("dense_pack_bf16", [8, 32, 16, 16]),
                                      ("batch_matmul_bf16", [2, 8, 32, 16, 16])])
def test_codegen_for_a_bf16_cpu_holds_the_instruction(op: str, shape: list[int]) -> None:
    """Built for znver4 (no execution: any x86 machine checks it)."""
    import tvm

    from tensortune.target import make_target

    task = Task.from_op(op, shape, target=ZNVER4)
    assert task.precision == "bf16" and task.pattern.op == op
    lib = tvm.compile(task.instantiate(task.default_config()), target=make_target(ZNVER4))
    assert "vdpbf16ps" in lib.mod.inspect_source("asm")


def test_bf16_conv_default_takes_seven_columns_where_seven_and_eight_divide() -> None:
    """56 wide: 7 columns (8 x 2 vectors measured up to 1.7x slower on ``vdpbf16ps``); 64 wide keeps
    the float32 template's 8, and the float32 template keeps 8 at 56."""
    for width, cols in ((56, 7), (64, 8)):
        task = Task.from_op("conv2d_nchwc_bf16", [width, width, 64, 64, 3, 1, 1, 16, 16], target=ZNVER4)
        assert task.default_config()["tile_x"] == (width // cols, cols)
    f32 = Task.from_op("conv2d_nchwc", [56, 56, 64, 64, 1, 1, 0, 16, 16], target=ZNVER4)  # 1x1: direct
    assert f32.default_config()["tile_x"][1] == 8


def test_bf16_convs_run_rows_first_where_the_input_outweighs_the_weights() -> None:
    """``rows_first`` is a knob of the bf16 conv spaces (their key's version is 2, so records of the
    space before it keep their own key); untuned, rows first where the input has at least half the
    weights' bytes, channel blocks first elsewhere. The float32 space has no such knob."""
    big_input = Task.from_op("conv2d_nchwc_bf16", [56, 56, 256, 64, 1, 1, 0, 16, 16], target=ZNVER4)
    big_weights = Task.from_op("conv2d_nchwc_bf16", [7, 7, 512, 512, 3, 1, 1, 16, 16], target=ZNVER4)
    assert big_input.default_config()["rows_first"] == 1 and big_weights.default_config()["rows_first"] == 0
    assert big_input.space.knob("rows_first").entities == [0, 1]
    assert big_input.template.key_version(big_input) == 2
    grouped = Task.from_op("conv2d_nchwc_general_bf16", [28, 28, 128, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8, 16, 16],
                           target=ZNVER4)  # 8 groups: weights 1/8 of a dense conv's
    assert grouped.default_config()["rows_first"] == 1
    f32 = Task.from_op("conv2d_nchwc", [56, 56, 256, 64, 1, 1, 0, 16, 16], target=ZNVER4)
    assert "rows_first" not in f32.default_config().knobs


@needs_bf16
def test_both_parallel_orders_of_a_bf16_conv_match() -> None:
    import tvm

    from tensortune.target import make_target

    task = Task.from_op("conv2d_nchwc_bf16", [8, 8, 32, 32, 1, 1, 0, 16, 16])
    inputs = task.make_inputs(seed=1)
    ref = task.reference(inputs)
    for order in (0, 1):
        config = task.space.get(task.space.index_of({**task.default_config().knobs, "rows_first": order}))
        lib = tvm.compile(task.instantiate(config), target=make_target(task.target_json))
        out = tvm.runtime.tensor(task.output_buffer())
        lib.mod["main"](*[tvm.runtime.tensor(x) for x in inputs], out)
        assert task.outputs_match(out.numpy(), ref), order


def test_bf16_products_write_whole_rows_by_default() -> None:
    """The default packed bf16 product walks every column tile inside its row tile (each parallel
    chunk writes whole rows); columns are split only where whole rows give too few chunks."""
    from tensortune.templates.bf16 import MIN_PARALLEL_CHUNKS

    for op, shape in (("dense_pack_bf16", [3136, 256, 32, 16]), ("batch_matmul_bf16", [12, 200, 208, 64, 16])):
        config = Task.from_op(op, shape, target=ZNVER4).default_config()
        assert config["tile_x"][0] == 1, (op, config)
    few = Task.from_op("dense_pack_bf16", [49, 256, 256, 16], target=ZNVER4).default_config()
    rows = 49 // few["tile_y"][2]
    assert rows < MIN_PARALLEL_CHUNKS <= rows * few["tile_x"][0]
    f32 = Task.from_op("dense_pack", [3136, 256, 32, 16], target=ZNVER4).default_config()
    assert f32["tile_x"][0] > 1  # float32 keeps its order


def test_short_bf16_products_take_a_smaller_tile_in_grouped_rows() -> None:
    """A packed bf16 product of a short reduction (``K`` up to ``SHORT_REDUCTION``) defaults to at
    most ``SHORT_ACCUMULATORS`` accumulators and row tiles grouped into about ``SHORT_CHUNKS``
    parallel chunks; a long one keeps the float32 register tile, one row tile a chunk."""
    from tensortune.templates.bf16 import SHORT_ACCUMULATORS, SHORT_CHUNKS, SHORT_REDUCTION

    for op, shape in (("dense_pack_bf16", [3136, 256, 32, 16]), ("batch_matmul_bf16", [12, 128, 128, 64, 16]),
                      ("dense_pack_bf16", [3136, 32, SHORT_REDUCTION, 16])):
        c = Task.from_op(op, shape, target=ZNVER4).default_config()
        chunks = (shape[0] if op == "batch_matmul_bf16" else 1) * c["tile_y"][0] * c["tile_x"][0]
        assert c["tile_y"][2] * c["tile_x"][2] <= SHORT_ACCUMULATORS and c["tile_y"][1] > 1, (op, shape, c)
        assert SHORT_CHUNKS <= chunks < 2 * SHORT_CHUNKS, (op, shape, c)
    for shape in ([200, 768, 768, 16], [1024, 288, 144, 16]):  # ViT's, MobileViT's (K = 144)
        long = Task.from_op("dense_pack_bf16", shape, target=ZNVER4).default_config()
        assert long["tile_y"][1] == 1 and long["tile_y"][2] * long["tile_x"][2] > SHORT_ACCUMULATORS, (shape, long)


def test_short_bf16_convs_take_up_to_three_channel_blocks_in_a_smaller_tile() -> None:
    """A bf16 conv whose reduction (input channels x window) is short takes at most
    ``SHORT_ACCUMULATORS`` accumulators over up to three channel blocks: MobileNetV2's 32 -> 144
    channels at 56 x 56 (nine blocks) 4 columns x 3 blocks, not 7 x 1; 144 -> 144 keeps 7 x 1."""
    from tensortune.templates.bf16 import SHORT_ACCUMULATORS

    short = Task.from_op("conv2d_nchwc_bf16", [56, 56, 32, 144, 1, 1, 0, 16, 16], target=ZNVER4).default_config()
    assert short["tile_f"] == (3, 3) and short["tile_x"] == (14, 4), short
    assert short["tile_f"][1] * short["tile_x"][1] <= SHORT_ACCUMULATORS
    long = Task.from_op("conv2d_nchwc_bf16", [56, 56, 144, 144, 1, 1, 0, 16, 16], target=ZNVER4).default_config()
    assert long["tile_f"] == (9, 1) and long["tile_x"] == (8, 7), long


@needs_bf16
@pytest.mark.parametrize("op,shape", [("conv2d_nchwc_bf16", [7, 7, 32, 16, 3, 2, 1, 16, 16]),
                                      ("conv2d_nchwc_bf16", [8, 8, 32, 48, 1, 1, 0, 16, 16]),  # 3 blocks a tile
                                      ("conv2d_nchwc_bf16", [5, 5, 16, 8, 1, 1, 0, 8, 8]),
                                      # 1x5 kernel, stride (1, 2), padding (0, 2, 1, 1), two groups of
                                      # two 8-channel blocks
                                      ("conv2d_nchwc_general_bf16",
                                       [10, 12, 32, 32, 1, 5, 1, 2, 0, 2, 1, 1, 1, 1, 2, 8, 8]),
                                      ("dense_pack_bf16", [6, 48, 64, 16]),
                                      ("dense_pack_bf16", [1, 24, 40, 8]),
                                      ("batch_matmul_bf16", [3, 12, 32, 20, 16]),
                                      ("batch_matmul_bf16", [2, 5, 8, 64, 8])])
def test_bf16_kernels_match_their_f32_references(op: str, shape: list[int]) -> None:
    """A few configs of each space (the default among them) against the float32 op on the same
    values; the tolerance is the bf16 one, and the error is the data's rounding, not more."""
    import tvm

    from tensortune.target import make_target

    task = Task.from_op(op, shape)
    inputs = task.make_inputs(seed=3)
    ref = task.reference(inputs)
    configs = [task.default_config()] + [c for c in (task.space.get(i) for i in range(0, len(task.space), 97))
                                         if task.space.is_valid(c)][:2]
    for config in configs:
        lib = tvm.compile(task.instantiate(config), target=make_target(task.target_json))
        out = tvm.runtime.tensor(task.output_buffer())
        lib.mod["main"](*[tvm.runtime.tensor(x) for x in inputs], out)
        got = out.numpy()
        assert task.outputs_match(got, ref), config
        assert 0 < prec.agreement(got, ref).max_rel_err < 1e-2  # rounded data, not exact, not wrong
    wrong = ref.copy()
    wrong.flat[0] += 0.1 * np.abs(ref).max()
    assert not task.outputs_match(wrong, ref)


@needs_bf16
def test_f32_and_bf16_records_of_one_workload_stay_apart(tmp_path, capfd) -> None:
    db = str(tmp_path / "x.db")
    base = ["tune-op", "dense", "--shape", "8,32,64", "--tuner", "random", "--trials", "3", *FAST, "--db", db, "--json"]
    rc32, out32, _ = cli(capfd, *base)
    rc16, out16, _ = cli(capfd, *base, "--precision", "bf16")
    assert rc32 == rc16 == 0
    a, b = json.loads(out32), json.loads(out16)
    assert a["task"].startswith("dense(") and b["task"].startswith("dense_pack_bf16(")
    with Database(db) as d:
        keys = {t.workload_key for t in d.tasks()}
    assert len(keys) == 2
    bf16_key = Task.from_op("dense_pack_bf16", [8, 32, 64, 16]).workload_key
    assert bf16_key in keys and Task.from_op("dense_pack", [8, 32, 64, 16]).workload_key != bf16_key


@needs_bf16
def test_a_weight_padded_with_zero_columns_runs_in_bf16() -> None:
    """FocalNet's projections to 2C+4 columns (196 for C=96, 208 packed), on ViT's 197 tokens
    (rows padded to the register tile): one bf16 product, both paddings cut off after it."""
    import torch

    from tensortune import app
    from tensortune.target import host_target_json

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 196), torch.nn.GELU()).eval()
    x = torch.randn(1, 197, 32)
    model = app.load(net, (x,), precision="bf16")
    plan = model.layout_plan(host_target_json())
    assert [(d.precision, d.block, d.extra_cols) for d in plan.denses] == [("bf16", 16, 12)], plan.denses
    cm = app.compile(model)
    assert [c.task for c in cm.choices if "dense_pack_bf16" in c.kernel_class], cm.choices
    got = cm.run([x.numpy()])[0]
    assert got.shape == (1, 197, 196)
    a = prec.agreement(got, net(x).detach().numpy())
    assert a.ok, a


@needs_bf16
def test_a_model_built_in_bf16_matches_its_f32_reference() -> None:
    """Convolutions and the classifier in bf16 (the RGB stem's 3 channels read as 4: pairs),
    within the tolerance of the float32 build, top-5 agreeing."""
    import torch

    from tensortune import app

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 32, 1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                              torch.nn.Linear(32, 16)).eval()
    x = torch.randn(1, 3, 16, 16)
    model = app.load(net, (x,), precision="bf16")
    cm = app.compile(model)
    classes = [c.kernel_class for c in cm.choices]
    assert sum("conv2d_nchwc_bf16" in k for k in classes) == 3 and any("dense_pack_bf16" in k for k in classes)
    stem = next(c for c in cm.choices if "IB=4" in c.task)  # 3 input channels and a zero one
    assert stem.kernel_class.startswith("conv2d_nchwc_bf16")
    got = cm.run([x.numpy()])[0]
    a = prec.agreement(got, net(x).detach().numpy())
    assert a.ok and a.top5 == 1.0 and a.max_rel_err > 0
    assert app.compile(model.with_precision("f32")).precision == "f32"


def test_register_tiles_of_exact_columns_serve_awkward_widths() -> None:
    """A tensorized tile cannot be guarded, so its columns divide the output width: 13 columns
    take one tile of 13 (not 13 tiles of one); a width with no divisor from 4 to 16 (109, the
    SqueezeNet stem's) has no exact tile (the conv is widened, or keeps the f32 kernel)."""
    from tensortune.templates.conv2d_nchwc import exact_columns_fit, exact_register_tile

    assert exact_register_tile(13, 7, 2, 1, 24) == (13, 1)
    assert exact_register_tile(56, 8, 2, 1, 24) == (8, 2)  # a divisor within the default: as it was
    assert exact_register_tile(27, 7, 2, 1, 24) == (9, 1)
    assert [exact_columns_fit(w) for w in (3, 7, 13, 56, 109, 17)] == [True, True, True, True, False, False]


@needs_bf16
def test_a_convolution_no_exact_tile_serves_is_widened_and_cut(monkeypatch) -> None:
    """An output width no exact column tile divides (17) is widened by zero input columns to one
    that a tile divides (18) and the extra column cut off in the conv's epilogue; with no widening
    allowed such a conv keeps the float32 kernel. Both match the f32 reference."""
    import torch

    from tensortune import app
    from tensortune.models import layout

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(16, 16, 3, padding=1)).eval()
    for width, extra, bf16, cut in ((17, layout.MAX_EXTRA_COLUMNS, 2, 2), (16, layout.MAX_EXTRA_COLUMNS, 2, 0),
                                    (17, 0, 0, 0)):
        monkeypatch.setattr(layout, "MAX_EXTRA_COLUMNS", extra)
        x = torch.randn(1, 16, 8, width)
        cm = app.compile(app.load(net, (x,), precision="bf16"))
        convs = [c.kernel_class for c in cm.choices if c.kernel_class.startswith("conv2d")]
        assert len(convs) == 2 and sum("_bf16" in k for k in convs) == bf16, convs
        assert sum("strided_slice" in k for k in convs) == cut, convs
        assert prec.agreement(cm.run([x.numpy()])[0], net(x).detach().numpy()).ok


def test_an_averaging_weight_is_told_apart() -> None:
    from tensortune.models.layout import is_average

    w = np.zeros((2, 2, 1, 1, 16, 16), np.float32)
    w[:, :, :, :, :10, :10] = 1 / 20  # 20 channels blocked in 32: the padded ones zero
    assert is_average(w) and not is_average(np.zeros_like(w))
    w[0, 0, 0, 0, 0, 0] = 0.5
    assert not is_average(w)


@needs_bf16
def test_a_group_norm_keeps_its_statistics_in_f32() -> None:
    """A GroupNorm of one group writes its channel mean as a 1x1 convolution of weights 1/C: in
    bf16 that convolution stays float32 (norms compute in float32), the model's real ones do not."""
    import torch

    from tensortune import app
    from tensortune.models.compile import model_tasks

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.GroupNorm(1, 32),
                              torch.nn.Conv2d(32, 32, 1)).eval()
    x = torch.randn(1, 16, 8, 8)
    tasks = [mt.task for mt in model_tasks(app.load(net, (x,), precision="bf16"))]
    scripts = [t.prim_func().script() for t in tasks]
    norm = [s for s in scripts if "rsqrt" in s]
    assert norm and all('"conv_nchwc"' in s and "conv_nchwc_bf16" not in s for s in norm)  # its mean: f32
    assert sum("conv_nchwc_bf16" in s for s in scripts) == 2


@needs_bf16
def test_activations_of_bf16_products_cross_memory_as_bits(monkeypatch) -> None:
    """Each activation a bf16 convolution reads is rounded in its producer's epilogue and every
    other reader widens the bits itself (the residual add, the pool): no float32 copy of it and
    no rounding pass of its own; the outputs within the tolerance, and those of the build that
    rounds inside each product."""
    import torch

    from tensortune import app
    from tensortune.models import bf16act

    class Residual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.a = torch.nn.Conv2d(16, 16, 3, padding=1)
            self.b = torch.nn.Conv2d(16, 16, 1)
            self.head = torch.nn.Linear(16, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.stem(x))
            z = torch.relu(self.b(torch.relu(self.a(y))) + y)  # y: read by conv a and by the add
            return self.head(torch.nn.functional.adaptive_avg_pool2d(z, 1).flatten(1))

    torch.manual_seed(0)
    net = Residual().eval()
    x = torch.randn(1, 3, 16, 16)
    ref = net(x).detach().numpy()
    cm = app.compile(app.load(net, (x,), precision="bf16"))
    classes = [c.kernel_class for c in cm.choices]
    convs = [k for k in classes if k.startswith("conv2d_nchwc_bf16")]
    assert len(convs) == 3, classes
    # the stem's and conv a's outputs leave them as bits; conv b's epilogue widens y for the add
    assert sum(k.endswith("round_bf16") for k in convs) == 2, convs
    assert any("widen_bf16" in k and "add" in k for k in convs), convs
    # no pass of their own: only the model's input (no producer) is rounded by a function apart
    assert sum("round_bf16" in k and not k.startswith("conv") for k in classes) <= 1, classes
    assert not any("widen_bf16" in k and not k.startswith("conv") for k in classes), classes
    got = cm.run([x.numpy()])[0]
    a = prec.agreement(got, ref)
    assert a.ok and a.max_rel_err > 0
    monkeypatch.setattr(bf16act, "STORE_BF16", False)
    inside = app.compile(app.load(net, (x,), precision="bf16"))
    assert not any("round_bf16" in c.kernel_class for c in inside.choices)
    assert prec.agreement(inside.run([x.numpy()])[0], ref).ok


@needs_bf16
def test_attention_products_of_run_time_operands_run_in_bf16(monkeypatch) -> None:
    """``Q K^T`` and ``P V`` (both operands computed at run time) as ``batch_matmul_bf16``: rows
    (13 tokens), columns (13 keys) and the odd reduction padded to the tiles and cut off after,
    within the tolerance of the float32 build; products this small stay float32 by default."""
    import torch

    from tensortune import app
    from tensortune.models import prepack

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(32, 96)
            self.out = torch.nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).reshape(1, 13, 3, 2, 16).permute(2, 0, 3, 1, 4)
            p = torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
            return self.out((p @ v).transpose(1, 2).reshape(1, 13, 32))

    torch.manual_seed(0)
    net = Attention().eval()
    x = torch.randn(1, 13, 32)
    small = app.compile(app.load(net, (x,), precision="bf16"))
    assert not any(c.kernel_class.startswith("batch_matmul_bf16") for c in small.choices)
    assert "too small to pay for packing in bf16" in small.layout.summary()
    monkeypatch.setattr(prepack, "MIN_RUNTIME_FLOPS", 0)  # the mechanism on a shape that tests run fast
    cm = app.compile(app.load(net, (x,), precision="bf16"))
    products = [c for c in cm.choices if c.kernel_class.startswith("batch_matmul_bf16")]
    assert len(products) == 2, [c.kernel_class for c in cm.choices]
    assert "2 products of run-time operands in bf16" in cm.layout.summary()
    got = cm.run([x.numpy()])[0]
    a = prec.agreement(got, net(x).detach().numpy())
    assert a.ok and a.max_rel_err > 0


def test_run_time_products_take_bf16_where_it_measured_faster() -> None:
    """The lines of the layout pass (shapes of the corpus): ViT's products in bf16; Swin's windows
    (too much padding), seq-128 products (too small) and Whisper's scores (fused f32 attention) not."""
    from tensortune.models import prepack
    from tensortune.models.attention import fused_scores

    assert prepack.column_block(1500) == (16, 4) and prepack.column_block(13) == (16, 3)
    assert prepack.column_block(8) == (8, 0)
    vit_q, vit_k = (12, 197, 64), (12, 64, 197)
    swin = prepack._padded_work((192, 49, 32), (192, 32, 49), 15)
    assert prepack._padded_work(vit_q, vit_k, 11) <= prepack.MAX_PADDED_WORK < swin
    assert 2 * 12 * 197 * 64 * 197 >= prepack.MIN_RUNTIME_FLOPS > 2 * 12 * 128 * 64 * 128
    assert fused_scores(1500, 1500) and not fused_scores(197, 197)  # ViT's 197 rows: no row block


def test_the_bf16_peak_kernel_keeps_its_sums_in_registers() -> None:
    """The peak loop is the instruction and nothing else: no store between two ``vdpbf16ps``
    (a stored accumulator would measure the store port, not the dot products). Codegen only."""
    import re

    import tvm

    from tensortune.measure.peak import _dpbf16_kernel
    from tensortune.target import make_target

    asm = tvm.compile(tvm.IRModule({"main": _dpbf16_kernel(1, 8, 1000)}), target=make_target(ZNVER4)).mod.inspect_source("asm")
    first, last = asm.find("vdpbf16ps"), asm.rfind("vdpbf16ps")
    loop = asm[first:last]
    assert loop.count("vdpbf16ps") >= 7 and not re.search(r"vmov\w*\s+%zmm\d+, -?\d*\(", loop)


def test_the_bf16_roof_is_for_functions_on_the_dot_product() -> None:
    """``profile`` holds bf16 products to the vdpbf16ps peak, and a float32 function whose
    epilogue rounds its output to bf16 bits (a depthwise conv feeding a bf16 product) to the f32 one."""
    from tensortune.task.ops_bf16 import on_dot_product

    assert all(on_dot_product(k) for k in ("conv2d_nchwc_bf16-add-relu-round_bf16", "dense_pack_bf16",
                                           "conv2d_nchwc_general_bf16-add", "batch_matmul_bf16", "attention_bf16"))
    assert not any(on_dot_product(k) for k in ("depthwise_conv2d_nchwc-add-clip-round_bf16", "layer-norm-round_bf16",
                                               "conv2d_nchwc-add", "round-bf"))
