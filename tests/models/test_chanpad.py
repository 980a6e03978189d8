"""Channel counts padded to the layout block: exact outputs, blocked convolutions, stated padding."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tensortune.models.chanpad import MAX_WASTE, ChanMap, pad_channels, padded_count
from tensortune.models.compile import compile_model
from tensortune.models.importer import load_model
from tensortune.models.layout import rewrite_clip
from tensortune.models.reference import TorchRunner, compare_outputs
from tensortune.target import host_target_json


def test_padded_count_rounds_up_only_when_cheap() -> None:
    assert padded_count(24, 16) == 32 and padded_count(58, 16) == 64 and padded_count(232, 16) == 240
    assert padded_count(32, 16) == 32  # divisible: unchanged
    assert padded_count(10, 8) == 10  # 16 would be 1.6x the work
    assert padded_count(3, 16) == 3  # below one block: the stem reads its channels as one block
    assert padded_count(20, 0) == 20
    assert all(padded_count(c, 16) <= MAX_WASTE * c for c in range(1, 600))


class Odd(nn.Module):
    """20 channels (no AVX2 block divides them) through every op padding must follow or stop at:
    ReLU6, a depthwise conv, a residual add, a channel split and concat, pooling, a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.expand = nn.Conv2d(16, 20, 1)
        self.dw = nn.Conv2d(20, 20, 3, 1, 1, groups=20)
        self.project = nn.Conv2d(20, 20, 1)
        self.mix = nn.Conv2d(20, 16, 1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.clamp(self.expand(torch.relu(self.stem(x))), 0, 6)
        y = self.project(torch.sigmoid(self.dw(y))) + y
        a, b = torch.split(y, 10, dim=1)
        y = self.mix(torch.cat([b, a], dim=1))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(torch.relu(y), 1), 1))


@pytest.fixture(scope="module")
def odd():
    torch.manual_seed(0)
    return load_model(Odd().eval(), [torch.randn(1, 3, 12, 12)])


def test_odd_channels_are_padded_blocked_and_exact(odd) -> None:
    tj = dict(host_target_json(), mcpu="znver3")  # AVX2: block 8 on every machine
    plan = odd.layout_plan(tj)
    assert plan.block == 8 and plan.blocked_share == 1.0, plan.summary()
    assert all(c.layout != "NCHW" for c in plan.convs), plan.convs
    assert [c.padded for c in plan.convs] == ["", "20->24", "20->24", "20->24", "20->24"], plan.convs
    assert "channels padded to the block: 20->24 (4 convolutions" in plan.summary()
    padded = {c.shape: c for c in plan.convs if c.padded}
    assert all(c.padded_flops > c.flops for c in padded.values())
    cm = compile_model(odd, target_json=tj)
    check = compare_outputs(cm.run(odd.example_inputs), TorchRunner(odd.torch_module).run(odd.example_inputs))
    assert check.ok, check.message


def test_padding_keeps_every_output_exact_in_nchw(odd) -> None:
    """The padded graph alone (TVM's own lowering, no blocked layout) computes the same outputs."""
    import numpy as np
    import tvm
    from tvm import relax

    mod = rewrite_clip(relax.transform.FoldConstant()(odd.mod))
    padded, res = pad_channels(mod, 8)
    assert res.padded == {20: 24} and res.slices >= 1 and not res.note, res  # sliced before the split
    outs = []
    for m in (mod, padded):
        ex = tvm.compile(m, target="llvm")
        vm = relax.VirtualMachine(ex, tvm.cpu())
        r = vm["main"](*[tvm.runtime.tensor(x) for x in odd.example_inputs])
        outs.append((r if hasattr(r, "numpy") else r[0]).numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)


class EndsInConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(16, 20, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(x)


def test_a_padded_output_is_not_returned() -> None:
    from tvm import relax

    torch.manual_seed(0)
    m = load_model(EndsInConv().eval(), [torch.randn(1, 16, 4, 4)])
    mod = relax.transform.FoldConstant()(m.mod)
    out, res = pad_channels(mod, 8)
    assert out is mod and not res.padded and "output" in res.note
    tj = dict(host_target_json(), mcpu="znver3")
    plan = m.layout_plan(tj)
    assert "no channels padded (padding would change the model's output)" in plan.summary()
    cm = compile_model(m, target_json=tj)
    check = compare_outputs(cm.run(m.example_inputs), TorchRunner(m.torch_module).run(m.example_inputs))
    assert check.ok, check.message


def test_a_split_convolution_output_puts_each_part_on_a_block_boundary() -> None:
    m = ChanMap.segmented(104, {26, 52, 78}, 8)  # a Res2Net width: 4 parts of 26
    assert m.width == 128 and [m.at[i] for i in (0, 26, 52, 78)] == [0, 32, 64, 96] and m.real == 104
    assert m.runs() == [(0, 26), (32, 58), (64, 90), (96, 122)]
    assert ChanMap.segmented(160, {80}, 8) == ChanMap.plain(160)  # on the boundaries already


def _same_outputs(before, after, inputs) -> None:
    """The two modules, built by TVM as they are, give the same output on ``inputs``."""
    import numpy as np
    import tvm
    from tvm import relax

    outs = []
    for mm in (before, after):
        vm = relax.VirtualMachine(tvm.compile(mm, target="llvm"), tvm.cpu())
        r = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
        outs.append((r if hasattr(r, "numpy") else r[0]).numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)


class GhostLike(nn.Module):
    """Two ghost halves of 12 channels (each padded to 16) concatenated, cut to 24, and summed with
    a strided shortcut convolution whose output must take the halves' map."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.primary = nn.Conv2d(16, 12, 1)
        self.cheap = nn.Conv2d(12, 12, 3, 1, 1, groups=12)
        self.down = nn.Conv2d(24, 24, 3, 2, 1, groups=24)
        self.short = nn.Conv2d(16, 24, 1, 2)
        self.out = nn.Conv2d(24, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.relu(self.stem(x))
        a = self.primary(s)
        g = torch.cat([a, torch.relu(self.cheap(a))], dim=1)[:, :24]
        y = self.down(g) + self.short(s)
        return self.out(torch.relu(y))


def test_ghost_halves_stay_in_the_block_and_a_shortcut_takes_their_map() -> None:
    from tvm import relax

    torch.manual_seed(0)
    m = load_model(GhostLike().eval(), [torch.randn(1, 3, 12, 12)])
    mod = rewrite_clip(relax.transform.FoldConstant()(m.mod))
    padded, res = pad_channels(mod, 8)
    assert res.padded.get(12) == 16 and res.padded.get(24) == 32 and res.rounds == 2, res
    assert res.slices == 0, res  # no op needed the real channels back
    _same_outputs(mod, padded, m.example_inputs)
    tj = dict(host_target_json(), mcpu="znver3")
    plan = m.layout_plan(tj)
    assert plan.block == 8 and plan.transforms == 2, plan.summary()
    cm = compile_model(m, target_json=tj)
    check = compare_outputs(cm.run(m.example_inputs), TorchRunner(m.torch_module).run(m.example_inputs))
    assert check.ok, check.message


class Gated(nn.Module):
    """FocalNet's modulation: one convolution makes a query, a context and one-channel gates, split
    apart; each gate (a one-channel slice) multiplies the context across its channels."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.f = nn.Conv2d(16, 12 + 12 + 2, 1)
        self.h = nn.Conv2d(12, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, ctx, gates = torch.split(self.f(torch.relu(self.stem(x))), [12, 12, 2], dim=1)
        mixed = torch.relu(ctx) * gates[:, 0:1] + torch.sigmoid(ctx) * gates[:, 1:2]
        return self.h(q * mixed)


def test_one_channel_gates_of_a_padded_split_broadcast_exactly() -> None:
    torch.manual_seed(0)
    m = load_model(Gated().eval(), [torch.randn(1, 3, 10, 10)])
    tj = dict(host_target_json(), mcpu="znver3")
    cm = compile_model(m, target_json=tj)
    check = compare_outputs(cm.run(m.example_inputs), TorchRunner(m.torch_module).run(m.example_inputs))
    assert check.ok, check.message
    assert "26->32" in m.layout_plan(tj).summary()


class FocalGated(Gated):
    """FocalNet's focal levels: the context goes through a depthwise convolution before each gate."""

    def __init__(self) -> None:
        super().__init__()
        self.dw = nn.Conv2d(12, 12, 3, 1, 1, groups=12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, ctx, gates = torch.split(self.f(torch.relu(self.stem(x))), [12, 12, 2], dim=1)
        ctx = torch.relu(self.dw(ctx))
        mixed = ctx * gates[:, 0:1] + torch.relu(self.dw(ctx)) * gates[:, 1:2]
        return self.h(q * mixed)


def test_explicit_gate_broadcasts_keep_a_padded_context_padded() -> None:
    """A gate broadcast to a depthwise convolution's channels (as canonicalisation writes it for
    the blocked layout) is broadcast to the padded width instead: the 12-channel context stays 16
    wide through both gates (it was cut back to 12 before each), and the output is exact."""
    from tvm import relax

    from tensortune.models.canonical import canonicalize

    torch.manual_seed(0)
    m = load_model(FocalGated().eval(), [torch.randn(1, 3, 10, 10)])
    mod = canonicalize(rewrite_clip(relax.transform.FoldConstant()(m.mod)))
    assert "broadcast_to" in mod["main"].script()
    padded, res = pad_channels(mod, 8)
    assert res.padded.get(12) == 16, res
    gated = [b.value for b in padded["main"].body.blocks[0].bindings
             if getattr(b.value, "op", None) is not None and getattr(b.value.op, "name", "") == "relax.broadcast_to"]
    assert len(gated) == 2 and all(int(v.ty.shape[1]) == 16 for v in gated), gated  # at the context's padded width
    _same_outputs(mod, padded, m.example_inputs)
