"""Attention in one function: the scores matmul, its softmax and the matmul by the values are found in
a model and fused (heads whose scores outgrow the cache; small ones here, the threshold lowered), the
attention template schedules the fused function (its default and sampled configs match the
unscheduled function), and the whole model matches PyTorch; a prime number of tokens included."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from tensortune.measure import MeasureOptions, Measurer
from tensortune.precision import CPU_FLAG, host_flags
from tensortune.models.attention import attention_products, fused_head
from tensortune.models.compile import compile_model, model_tasks
from tensortune.models.importer import load_model
from tensortune.models.reference import TorchRunner, compare_outputs
from tensortune.task.pattern import attention_pattern

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "templates"))
from test_templates import check_configs  # noqa: E402 - the templates' own correctness check


class _Attention(nn.Module):
    """Multi-head self-attention as the Hugging Face models write it, with a residual and a norm."""

    def __init__(self, dim: int = 32, heads: int = 2, bias_tokens: int = 0) -> None:
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        # a relative-position bias per head (BEiT's): added to the scores, rows and keys
        self.bias = nn.Parameter(torch.randn(heads, bias_tokens, bias_tokens)) if bias_tokens else None
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-2, -1)) * d ** -0.5
        p = (s if self.bias is None else s + self.bias).softmax(dim=-1)
        o = (p @ v).transpose(1, 2).reshape(b, t, c)
        return self.norm(x + self.proj(o))


def _model(tokens: int, batch: int = 1, dim: int = 32, bias: bool = False):
    torch.manual_seed(0)
    x = torch.randn(batch, tokens, dim, generator=torch.Generator().manual_seed(1))
    return load_model(_Attention(dim, bias_tokens=tokens if bias else 0), [x])


@pytest.fixture(scope="module")
def measurer() -> Iterator[Measurer]:
    """The real builder and runner with the correctness check (nothing here is about speed)."""
    opts = MeasureOptions(number=1, repeat=1, min_repeat_ms=0, check_correctness=True,
                          build_timeout=300.0, run_timeout=300.0)
    with Measurer(opts) as m:
        yield m


@pytest.fixture
def fuse_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuse heads of any size (by default only scores past the cache are: Whisper's, not these)."""
    from tensortune.models import attention

    monkeypatch.setattr(attention, "MIN_SCORES_BYTES", 0)


def test_small_heads_stay_three_functions() -> None:
    kinds = [mt.task.template_name for mt in model_tasks(_model(24))]
    assert "attention" not in kinds and "gemm" in kinds


@pytest.mark.parametrize("tokens", [23, 24])
def test_attention_is_one_task_and_the_model_matches_pytorch(fuse_small: None, tokens: int) -> None:
    model = _model(tokens)
    attention = [mt for mt in model_tasks(model) if mt.task.template_name == "attention"]
    assert len(attention) == 1, [mt.kernel_class for mt in model_tasks(model)]
    task = attention[0].task
    assert task.kernel_class == "attention"
    pat = attention_pattern(task.prim_func())
    assert pat is not None and pat.args == {"B": 2, "M": tokens, "N": tokens, "K": 16, "D": 16}
    assert not any(mt.kernel_class.startswith("softmax") for mt in model_tasks(model))  # no softmax of its own
    ref = TorchRunner(model.torch_module).run(model.example_inputs)
    cm = compile_model(model)
    assert [c.source for c in cm.choices if c.kernel_class == "attention"] == ["default"]  # no fallback
    check = compare_outputs(cm.run(model.example_inputs), ref)
    assert check.ok, check.message


@pytest.mark.parametrize("tokens", [23, 24, 60])
def test_attention_configs_are_correct(fuse_small: None, measurer: Measurer, tokens: int) -> None:
    """The default and sampled configs (row blocks, register tiles that do and do not divide them)
    build, run and match the unscheduled function."""
    (task,) = [mt.task for mt in model_tasks(_model(tokens)) if mt.task.template_name == "attention"]
    check_configs(measurer, task, n_samples=6)


def test_which_heads_are_fused() -> None:
    """From 64 x 64 scores, with values in whole vectors; Swin's 49 x 49 windows and MobileViT's
    36-wide values stay three functions."""
    assert fused_head(64, 64, 48) and fused_head(1500, 1500, 64) and fused_head(256, 256, 36, padded=True)
    assert not fused_head(49, 49, 32) and not fused_head(256, 256, 36) and not fused_head(197, 197, 64)
    assert attention_products(_model(64, batch=2).mod) == {((4, 64, 16), (4, 16, 64)), ((4, 64, 64), (4, 64, 16))}
    assert attention_products(_model(24).mod) == set()


def test_heads_of_a_batch_fuse_without_the_reshapes_between(measurer: Measurer) -> None:
    """A batch of two (a 4-D matmul exported as the heads reshaped to ``[B*H, T, T]`` and back
    around the softmax, both operands broadcast to their own shapes) with 64 tokens fuses at the
    default threshold: no reshape or broadcast left between the products, the values' product a
    vector at a time over 48-wide heads, every sampled row block schedules and matches, and the
    model matches PyTorch."""
    model = _model(64, batch=2, dim=96)
    tasks = model_tasks(model)
    (task,) = [mt.task for mt in tasks if mt.task.template_name == "attention"]
    pat = attention_pattern(task.prim_func())
    assert pat is not None and pat.args == {"B": 4, "M": 64, "N": 64, "K": 48, "D": 48}
    assert not [n for n in pat.between if "reshape" in n or "broadcast" in n], pat.between
    assert not [mt for mt in tasks if "broadcast" in mt.kernel_class]
    script = task.instantiate(task.default_config()).script()
    assert "T.vectorized(48)" not in script.replace("T.int64(48)", "48") and "T.vectorized(16)" in script.replace("T.int64(16)", "16")
    check_configs(measurer, task, n_samples=6)
    cm = compile_model(model)
    assert [c.source for c in cm.choices if c.kernel_class == "attention"] == ["default"]  # no fallback
    check = compare_outputs(cm.run(model.example_inputs), TorchRunner(model.torch_module).run(model.example_inputs))
    assert check.ok, check.message


@pytest.mark.parametrize("bias", [False, True])
def test_a_head_of_prime_rows_and_keys_is_computed_padded_and_fused(bias: bool) -> None:
    """67 tokens (prime, as ViT's 197): no row block divides the rows and no vector piece the
    keys, so the rewrite computes the head on 72 rows and 80 keys (Q, K, V and a per-head bias
    padded with zeros, the padded keys masked before the softmax) and cuts the padded rows off
    its output; 64 tokens are left as they are. The layout plan applies it: the model fuses the
    head and matches PyTorch."""
    from tensortune.models.attention_pad import pad_attention_heads, padded_head

    assert padded_head(67, 67) == (72, 80) and padded_head(197, 197) == (200, 208)
    assert padded_head(64, 64) == (64, 64) and padded_head(200, 200) == (200, 200)  # a piece of 50 keys
    assert padded_head(23, 23) == (23, 23)  # too small to fuse, padded or not
    plain = _model(64)
    assert pad_attention_heads(plain.mod) is plain.mod
    model = _model(67, bias=bias)
    script = pad_attention_heads(model.mod)["main"].script()
    assert script.count("R.nn.pad(") == 3 + bias and "R.strided_slice(" in script  # Q, K, V (and the bias)
    (task,) = [mt.task for mt in model_tasks(model) if mt.task.template_name == "attention"]
    pat = attention_pattern(task.prim_func())
    assert pat is not None and pat.args == {"B": 2, "M": 72, "N": 80, "K": 16, "D": 16}
    assert len(pat.after) == 1  # the cut of the padded rows, fused as the epilogue
    cm = compile_model(model)
    assert [c.source for c in cm.choices if c.kernel_class == "attention"] == ["default"]  # no fallback
    check = compare_outputs(cm.run(model.example_inputs), TorchRunner(model.torch_module).run(model.example_inputs))
    assert check.ok, check.message


@pytest.mark.parametrize(("tokens", "split"), [(23, False), (60, True)])
def test_row_reductions_are_vector_partials_when_a_piece_divides_the_keys(fuse_small: None, tokens: int,
                                                                          split: bool) -> None:
    """The softmax's maximum and sum over 60 keys run as vectors of partials (pieces of 30), one
    vector a row; 23 keys have no exact piece and stay one scalar chain a row."""
    (task,) = [mt.task for mt in model_tasks(_model(tokens)) if mt.task.template_name == "attention"]
    script = task.instantiate(task.default_config()).script()
    partials = [n for n in ("T_softmax_maxelem_rf_update", "T_softmax_expsum_rf_update") if n in script]
    assert bool(partials) == split, partials
    if split:
        assert len(partials) == 2 and "T.vectorized(30)" in script.replace("T.int64(30)", "30")


# ---------------------------------------------------------------- bf16
ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}


def _kinds(model) -> list[str]:
    """Template names of the model's tasks; a bf16 model's for a Zen 4 target (extraction runs nothing)."""
    return [mt.task.template_name for mt in model_tasks(model, ZNVER4 if model.precision == "bf16" else None)]


def test_bf16_attention_is_one_task_with_its_rounding_stages(fuse_small: None) -> None:
    """In bf16, a head is one ``attention_bf16`` task (its products on bf16 operands, their
    rounding and packing stages in it), 23 keys too (a zero key makes the pairs of ``P V``)."""
    kinds = _kinds(_model(24).with_precision("bf16"))
    assert kinds.count("attention_bf16") == 1 and "attention" not in kinds
    (task,) = [mt.task for mt in model_tasks(_model(24).with_precision("bf16"), ZNVER4)
               if mt.task.template_name == "attention_bf16"]
    pat = task.attention
    assert task.precision == "bf16" and task.kernel_class == "attention_bf16"
    assert pat.args == {"B": 2, "M": 24, "N": 24, "K": 16, "D": 16} and len(pat.rounds) == 4
    assert pat.between[0] == "scores_cut"  # 24 keys padded to two vectors of 16 for the scores
    kinds = _kinds(_model(23).with_precision("bf16"))
    assert "attention_bf16" in kinds and "attention" not in kinds


def test_bf16_attention_codegen_has_the_dot_product(fuse_small: None) -> None:
    """The scores and ``P V`` compile to ``vdpbf16ps`` for a Zen 4 target (codegen only)."""
    import tvm

    from tensortune.target import make_target
    from tensortune.task import Task

    (task,) = [mt.task for mt in model_tasks(_model(60).with_precision("bf16"), ZNVER4)
               if mt.task.template_name == "attention_bf16"]
    task = Task.from_fused(task.prim_func(), ZNVER4, "fused_attention")
    asm = tvm.compile(task.instantiate(task.default_config()), target=make_target(ZNVER4)).mod.inspect_source("asm")
    assert asm.count("vdpbf16ps") >= 2


def test_bf16_attention_on_an_amx_cpu_takes_the_tiles(fuse_small: None) -> None:
    """For a Sapphire Rapids target the head is an ``attention_amx`` task whose two products
    compile to tile instructions (codegen only), 49 keys and heads 36 wide (values padded) too."""
    import tvm

    from tensortune.target import make_target

    spr = {**ZNVER4, "mcpu": "sapphirerapids"}
    for tokens, dim in ((60, 32), (49, 72)):
        (task,) = [mt.task for mt in model_tasks(_model(tokens, dim=dim).with_precision("bf16"), spr)
                   if mt.task.template_name.startswith("attention")]
        assert task.template_name == "attention_amx"
        asm = tvm.compile(task.instantiate(task.default_config()), target=make_target(spr)).mod.inspect_source("asm")
        assert asm.count("tdpbf16ps") >= 2 and "ldtilecfg" in asm, (tokens, dim)


def test_bf16_attention_takes_an_odd_number_of_keys(fuse_small: None) -> None:
    """49 keys (PVT's and SegFormer's spatially reduced attention): ``P V`` reduces over 50, the
    zero key making the pairs ``vdpbf16ps`` takes, and compiles to it (codegen only)."""
    import tvm

    from tensortune.target import make_target
    from tensortune.task import Task

    (task,) = [mt.task for mt in model_tasks(_model(49).with_precision("bf16"), ZNVER4)
               if mt.task.template_name == "attention_bf16"]
    assert task.attention.args["N"] == 49
    task = Task.from_fused(task.prim_func(), ZNVER4, "fused_attention")
    asm = tvm.compile(task.instantiate(task.default_config()), target=make_target(ZNVER4)).mod.inspect_source("asm")
    assert asm.count("vdpbf16ps") >= 2


def test_bf16_attention_pads_values_to_vectors(fuse_small: None) -> None:
    """Heads 36 wide (MobileViT's): in bf16 the values' columns are padded to three vectors and cut
    off after the product; in float32 the head stays three functions (values not in whole vectors)."""
    (task,) = [mt.task for mt in model_tasks(_model(24, dim=72).with_precision("bf16"), ZNVER4)
               if mt.task.template_name == "attention_bf16"]
    assert task.attention.args["D"] == 48 and task.attention.after == ("values_cut",)
    assert "attention" not in _kinds(_model(24, dim=72))


def test_bf16_head_of_prime_rows_is_padded_and_fused() -> None:
    """In bf16 too: 67 tokens make one ``attention_bf16`` task on 72 rows (codegen target)."""
    (task,) = [mt.task for mt in model_tasks(_model(67, bias=True).with_precision("bf16"), ZNVER4)
               if mt.task.template_name == "attention_bf16"]
    assert task.attention.args["M"] == 72 and task.attention.args["N"] == 80


@pytest.mark.skipif(CPU_FLAG not in host_flags(), reason="this CPU has no avx512_bf16: the bf16 kernels cannot run here")
@pytest.mark.parametrize(("tokens", "dim", "bias"), [(24, 32, False), (60, 32, False), (24, 72, False), (49, 32, False),
                                                     (67, 32, True)])
def test_bf16_attention_configs_and_model_match(fuse_small: None, measurer: Measurer, tokens: int, dim: int,
                                               bias: bool) -> None:
    """The bf16 attention's default and sampled configs match the unscheduled function (the bf16
    tolerance), and the model built in bf16 matches PyTorch's float32 within it (values 16 and 36
    wide, the latter padded; 49 keys, an odd number; 67 rows padded to 72, with a bias)."""
    model = _model(tokens, dim=dim, bias=bias).with_precision("bf16")
    (task,) = [mt.task for mt in model_tasks(model) if mt.task.template_name in ("attention_bf16", "attention_amx")]
    check_configs(measurer, task, n_samples=4)  # on a CPU with AMX, the tile form's
    cm = compile_model(model)
    assert [c.source for c in cm.choices if c.kernel_class == "attention_bf16"] == ["default"]  # no fallback
    check = compare_outputs(cm.run(model.example_inputs), TorchRunner(model.torch_module).run(model.example_inputs),
                            rtol=model.rtol)
    assert check.ok, check.message


def test_a_head_64_wide_has_a_default_on_avx2(fuse_small: None) -> None:
    """A head 64 wide is 8 AVX2 vectors: no tile of O fits the 16 registers with its operands, so the
    default takes one row (BERT's and most language models' heads failed to compile untuned)."""
    import tvm

    from tensortune.target import make_target

    znver3 = dict(ZNVER4, mcpu="znver3")
    (task,) = [mt.task for mt in model_tasks(_model(24, dim=128), znver3) if mt.task.template_name == "attention"]
    assert task.attention.args["D"] == 64
    config = task.default_config()
    assert config["rows_o"] == 1 and config["rows_s"] > 1 and task.space.is_valid(config)
    tvm.compile(task.instantiate(config), target=make_target(znver3))
