"""Matmul weights packed once at compile time (``dense_pack``), and the fast math of softmax/GELU."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tensortune.models.compile import compile_model, model_tasks
from tensortune.models.importer import load_model
from tensortune.models.prepack import weight_block
from tensortune.models.reference import TorchRunner, compare_outputs
from tensortune.target import host_target_json
from tensortune.templates.base import target_lanes


class Mlp(nn.Module):
    """Linear + GELU + Linear + softmax, and a product of two activations (no constant weight)."""

    def __init__(self, n_out: int = 16) -> None:
        super().__init__()
        self.a = nn.Linear(24, 32)
        self.b = nn.Linear(32, n_out)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.gelu(self.a(x))
        y = torch.softmax(self.b(h), dim=-1)
        return y @ y.transpose(-1, -2)


def _mlp(rows_shape: tuple[int, ...], n_out: int = 16):
    torch.manual_seed(0)
    return load_model(Mlp(n_out), [torch.randn(*rows_shape, 24, generator=torch.Generator().manual_seed(1))])


def test_weight_block_follows_the_target() -> None:
    tj = host_target_json()
    lanes = target_lanes(tj)
    assert weight_block(3 * lanes, tj) == lanes
    assert weight_block(lanes // 2 * 3, tj) == (lanes // 2 if (lanes // 2 * 3) % lanes else lanes)
    assert weight_block(lanes // 2 + 1, tj) == 0


def test_constant_weights_are_packed_and_the_model_is_correct() -> None:
    model = _mlp((1, 5))
    tj = host_target_json()
    plan = model.layout_plan(tj)
    packed = [d for d in plan.denses if d.block]
    kept = [d for d in plan.denses if not d.block]
    assert len(packed) == 2 and all(d.block in (target_lanes(tj), target_lanes(tj) // 2) for d in packed)
    assert [d.reason for d in kept] == ["weight computed at run time"]  # y @ y^T
    assert "2/3 matmul weights packed at compile time" in plan.summary()
    tasks = [t.task for t in model_tasks(model, tj)]
    dense = [t for t in tasks if t.kernel_class.startswith("dense_pack")]
    assert len(dense) == 2 and all(t.template_name == "dense_pack" for t in dense), tasks
    assert {t.args["K"] for t in dense} == {24, 32}
    # no function of the compiled model repacks a weight: the packed constants are its inputs
    assert _constants_moved(model.fused(tj)) == []
    cm = compile_model(model)
    assert cm.counts()["naive"] == 0
    check = compare_outputs(cm.run(model.example_inputs), TorchRunner(model.torch_module).run(model.example_inputs))
    assert check.ok, check.message


def _constants_moved(fused) -> list[str]:
    """Functions of ``main`` that transpose, permute or re-layout a constant (a weight repacked per inference)."""
    from tvm import relax
    from tvm.ir.expr import Constant

    out = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir":
            name = e.args[0].name_hint
            args = e.args[1].fields if isinstance(e.args[1], relax.Tuple) else [e.args[1]]
            if any(w in name for w in ("transpose", "permute", "layout_transform")) and any(isinstance(a, Constant) for a in args):
                out.append(name)

    relax.analysis.post_order_visit(fused["main"].body, visit)
    return out


def test_batched_rows_and_odd_widths_keep_matmul_with_a_reason() -> None:
    from tvm import relax

    from tensortune.models.prepack import pack_dense_weights

    tj = host_target_json()
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 5, 24), "float32"))
    with bb.function("main", [x]):
        w = relax.const(np.ones((24, 16), "float32"))
        y = bb.emit(relax.op.matmul(x, w))
        bb.emit_func_output(y)
    _, plans = pack_dense_weights(bb.get(), tj)
    assert [(p.block, p.reason) for p in plans] == [(0, "rows carry a batch")]
    assert _mlp((2, 5)).layout_plan(tj).summary().endswith("2/3 matmul weights packed at compile time (kept: weight computed at run time)")
    odd = _mlp((1, 5), n_out=7)
    plan = odd.layout_plan(tj)
    assert [d.block > 0 for d in plan.denses] == [True, False, False]
    assert "N=7 not a multiple of a vector block" in {d.reason for d in plan.denses}
    cm = compile_model(odd)
    check = compare_outputs(cm.run(odd.example_inputs), TorchRunner(odd.torch_module).run(odd.example_inputs))
    assert check.ok, check.message


def test_a_few_columns_short_of_the_block_are_packed_with_zero_columns_and_cut_off() -> None:
    from tensortune.models.prepack import MAX_PADDED_COLUMNS, padded_columns

    tj = dict(host_target_json(), mcpu="znver3")  # 8 lanes
    assert padded_columns(195, tj) == (8, 5) and padded_columns(96, tj) == (8, 0)
    assert padded_columns(7, tj) == (0, 0)  # 8 columns for 7: more than MAX_PADDED_COLUMNS
    assert all(n + extra <= MAX_PADDED_COLUMNS * n for n in range(1, 300) for _, extra in [padded_columns(n, tj)])
    model = _mlp((1, 5), n_out=37)  # FocalNet's projections: 195, 387, 771, 1539 columns
    plan = model.layout_plan(tj)
    assert [(d.block, d.extra_cols) for d in plan.denses][:2] == [(8, 0), (8, 3)], plan.denses
    assert "2/3 matmul weights packed at compile time, 1 with zero columns up to the block" in plan.summary()
    assert any(t.task.op == "dense_pack" and t.task.args["N"] == 40 for t in model_tasks(model, tj))
    cm = compile_model(model, target_json=tj)
    check = compare_outputs(cm.run(model.example_inputs), TorchRunner(model.torch_module).run(model.example_inputs))
    assert check.ok, check.message


def test_nchw_mode_packs_nothing() -> None:
    model = _mlp((1, 5))
    plan = model.layout_plan(host_target_json(), "nchw")
    assert plan.denses == []
    assert not any(t.task.op == "dense_pack" for t in model_tasks(model, host_target_json(), layout="nchw"))


@pytest.mark.parametrize("op", ["exp", "erf", "tanh", "softmax", "gelu", "gelu_tanh", "sigmoid", "silu"])
def test_fast_math_matches_numpy(op: str) -> None:
    import math

    import tvm
    from tvm import relax

    from tensortune.models.fastmath import FAST_MATH
    from tensortune.target import make_target

    x = np.random.default_rng(0).uniform(-9, 9, size=(4, 257)).astype("float32")
    bb = relax.BlockBuilder()
    v = relax.Var("x", relax.TensorType(x.shape, "float32"))
    with bb.function("main", [v]):
        fn = {"exp": relax.op.exp, "erf": relax.op.erf, "tanh": relax.op.tanh,
              "softmax": lambda t: relax.op.nn.softmax(t, axis=-1), "gelu": relax.op.nn.gelu,
              "gelu_tanh": relax.op.nn.gelu_tanh, "sigmoid": relax.op.sigmoid, "silu": relax.op.nn.silu}[op]
        out = bb.emit(fn(v))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps(FAST_MATH)(bb.get())
    names = [gv.name_hint for gv in mod.functions]
    assert any(n.startswith(("fast_", "softmax", "gelu", "tir_sigmoid", "silu")) for n in names), names
    if op in ("sigmoid", "silu"):  # one block, named as TVM's own legalization names it
        from tensortune.task.pattern import _blocks

        func = next(f for gv, f in mod.functions.items() if gv.name_hint != "main")
        assert [b.name for b in _blocks(func)] == ["T_" + op]
        assert "fast" in str(func) or "reinterpret" in str(func)  # the polynomial, not tir.sigmoid
        assert "sigmoid(" not in str(func).replace("T_sigmoid", "")
    target = make_target(host_target_json())
    ex = tvm.compile(mod, target=target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    erf = np.vectorize(math.erf)(x.astype(np.float64))
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(-1, keepdims=True))
    want = {"exp": np.exp(xd), "erf": erf, "tanh": np.tanh(xd), "softmax": e / e.sum(-1, keepdims=True),
            "gelu": 0.5 * xd * (1 + np.vectorize(math.erf)(xd / math.sqrt(2))),
            "gelu_tanh": 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3))),
            "sigmoid": 1 / (1 + np.exp(-xd)), "silu": xd / (1 + np.exp(-xd))}[op]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, 2.5])
def test_power_by_a_small_constant_is_multiplies(exponent: float) -> None:
    """``x ** 3`` (GPT-2's GELU) and ``x ** 2`` become multiplies, ``x ** 0.5`` a square root, with
    no libm ``powf`` call per element; another exponent keeps TVM's own ``pow``. All match numpy."""
    import tvm
    from tvm import relax

    from tensortune.models.fastmath import FAST_MATH
    from tensortune.target import make_target

    x = np.random.default_rng(0).uniform(0.1, 3, size=(4, 33)).astype("float32")
    bb = relax.BlockBuilder()
    v = relax.Var("x", relax.TensorType(x.shape, "float32"))
    with bb.function("main", [v]):
        out = bb.emit(relax.op.power(v, relax.const(exponent, "float32")))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps(FAST_MATH)(bb.get())
    tir = "\n".join(str(f) for gv, f in mod.functions.items() if gv.name_hint != "main")
    assert ("T.pow(" in tir) == (exponent == 2.5), tir
    ex = tvm.compile(mod, target=make_target(host_target_json()))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64) ** exponent, rtol=2e-6)
