"""The layout plan: blocked convolutions across the graph, weights packed once at compile time."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tensortune.models.compile import compile_model, model_tasks
from tensortune.models.importer import load_model
from tensortune.models.layout import count_layout_transforms, plan_layouts
from tensortune.models.reference import TorchRunner, compare_outputs
from tensortune.target import host_target_json
from tensortune.templates.base import target_lanes

from tiny import tiny


def transforms_in_main(fused) -> list[tuple[str, str]]:
    """(function, argument kind) of every layout transform ``main`` of a fused module calls."""
    from tvm import relax

    out = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir" and "layout_transform" in e.args[0].name_hint:
            arg = e.args[1].fields[0] if isinstance(e.args[1], relax.Tuple) else e.args[1]
            out.append((e.args[0].name_hint, type(arg).__name__))

    relax.analysis.post_order_visit(fused["main"].body, visit)
    return out


@pytest.fixture(scope="module")
def model():
    m, x = tiny()
    return load_model(m, x)


def test_tiny_model_is_blocked_end_to_end(model) -> None:
    tj = host_target_json()
    plan = model.layout_plan(tj)
    b = plan.block
    assert b in (target_lanes(tj), target_lanes(tj) // 2) and b == 8  # 8 channels: the only block that divides
    assert [c.layout for c in plan.convs] == ["NCHW3c", "NCHW8c"]  # the RGB stem reads its 3 channels as one block
    assert plan.blocked_share == 1.0
    # only the model's edges transform: the input into NCHW3c, the pooled features back to NCHW;
    # ReLU6 (clip) no longer breaks the chain, and no weight is repacked per inference
    moves = transforms_in_main(model.fused(tj))
    assert len(moves) == 2 == plan.transforms == count_layout_transforms(model.fused(tj)), moves
    assert all(kind != "Constant" for _, kind in moves), moves
    classes = {t.kernel_class: t.task for t in model_tasks(model, tj)}
    conv = classes["conv2d_nchwc-add-relu"]
    assert conv.template_name == "conv2d_nchwc"
    assert conv.args == {"H": 16, "W": 16, "IC": 3, "OC": 8, "K": 3, "S": 1, "P": 1, "IB": 3, "OB": 8}
    assert "depthwise_conv2d_nchwc-add-clip-add" in classes, classes
    cm = compile_model(model)
    assert cm.counts()["naive"] == 0 and cm.counts()["generic"] == 0
    check = compare_outputs(cm.run(model.example_inputs), TorchRunner(model.torch_module).run(model.example_inputs))
    assert check.ok, check.message


class OddChannels(nn.Module):
    """A conv whose 5 output channels no block (8 or 4) divides, nor pads cheaply, sits between
    blocked ones (the next conv reads its 5 channels as one input block)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 16, 3, 1, 1)
        self.b = nn.Conv2d(16, 5, 3, 1, 1)
        self.c = nn.Conv2d(5, 16, 1)
        self.d = nn.Conv2d(16, 16, 3, 2, 1, groups=16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.d(torch.relu(self.c(torch.relu(self.b(torch.relu(self.a(x)))))))


def test_channels_the_block_does_not_divide_keep_nchw_and_say_why() -> None:
    torch.manual_seed(0)
    model = load_model(OddChannels().eval(), [torch.randn(1, 3, 15, 15)])
    tj = dict(host_target_json(), mcpu="znver3")  # AVX2: blocks 8 (and 4)
    plan = model.layout_plan(tj)
    assert plan.block == 8
    kept = [c for c in plan.convs if c.layout == "NCHW"]
    assert len(kept) == 1 and kept[0].reason == "5 output channels not a multiple of 8", plan.convs
    assert [c.layout for c in plan.convs] == ["NCHW3c", "NCHW", "NCHW5c", "NCHW8c"]
    assert "NCHW kept for 1" in plan.summary() and not any(c.padded for c in plan.convs)
    templates = {t.task.template_name for t in model_tasks(model, tj)}
    assert {"conv2d", "conv2d_nchwc", "depthwise_conv2d_nchwc"} <= templates
    cm = compile_model(model, target_json=tj)
    check = compare_outputs(cm.run(model.example_inputs), TorchRunner(model.torch_module).run(model.example_inputs))
    assert check.ok, check.message


def test_failed_planning_keeps_nchw_and_still_compiles(model, monkeypatch) -> None:
    from tvm import relax

    def broken(*a, **k):
        raise RuntimeError("Invalid layout axis 8b")

    monkeypatch.setattr(relax.transform, "ConvertLayout", broken)
    mod, plan = plan_layouts(model.mod, host_target_json())
    assert plan.block == 0 and "Invalid layout axis" in plan.note
    assert count_layout_transforms(mod) == 0  # the convolutions as imported (constants folded)
    assert all(c.layout == "NCHW" and c.reason for c in plan.convs)
    assert plan.summary().startswith("layouts: NCHW kept")


class FocalModulation(nn.Module):
    """FocalNet's modulation: a depthwise convolution's output multiplied by a gate sliced one channel
    wide from a linear layer's output (TVM cannot give that product a blocked layout), between
    convolutions that can be blocked."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.c = c
        self.pre = nn.Conv2d(c, c, 3, padding=1)
        self.proj_in = nn.Linear(c, 2 * c + 2)
        self.focal = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.ctx = nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        q, ctx, gates = torch.split(self.proj_in(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2), (self.c, self.c, 2), 1)
        ctx = nn.functional.gelu(self.focal(ctx))
        ctx_all = ctx * gates[:, 0:1] + ctx.mean((2, 3), keepdim=True) * gates[:, 1:]
        return x + q * self.ctx(ctx_all)


def test_a_convolution_whose_graph_cannot_be_blocked_keeps_nchw_alone(monkeypatch) -> None:
    from tensortune.models import canonical

    # without the explicit broadcast, TVM cannot block the product of the conv and the gate
    monkeypatch.setattr(canonical, "channel_broadcasts_explicit", lambda mod: mod)
    torch.manual_seed(0)
    model = load_model(FocalModulation().eval(), [torch.randn(1, 16, 12, 12)])
    tj = dict(host_target_json(), mcpu="znver3")
    plan = model.layout_plan(tj)
    assert plan.block == 8 and not plan.note, plan.summary()
    focal = [c for c in plan.convs if c.kind == "depthwise_conv2d"]
    assert len(focal) == 1 and focal[0].layout == "NCHW" and "cannot take a blocked layout" in focal[0].reason
    assert sorted(c.layout for c in plan.convs if c.kind == "conv2d") == ["NCHW8c", "NCHW8c"]
    assert "NCHW kept for 1" in plan.summary()
    cm = compile_model(model, target_json=tj)
    check = compare_outputs(cm.run(model.example_inputs), TorchRunner(model.torch_module).run(model.example_inputs))
    assert check.ok, check.message


def test_one_channel_gates_broadcast_across_a_blocked_convolution_and_match() -> None:
    torch.manual_seed(0)
    model = load_model(FocalModulation().eval(), [torch.randn(1, 16, 12, 12)])
    tj = dict(host_target_json(), mcpu="znver3")
    plan = model.layout_plan(tj)
    assert plan.block == 8 and plan.blocked_share == 1.0, plan.summary()
    assert all(c.layout == "NCHW8c" for c in plan.convs), plan.convs
    cm = compile_model(model, target_json=tj)
    check = compare_outputs(cm.run(model.example_inputs), TorchRunner(model.torch_module).run(model.example_inputs))
    assert check.ok, check.message


def test_nchw_mode_is_the_graph_as_imported(model) -> None:
    tj = host_target_json()
    fused = model.fused(tj, layout="nchw")
    assert count_layout_transforms(fused) == 0
    assert model.layout_plan(tj, "nchw").summary().startswith("layouts: NCHW as imported")
    with pytest.raises(ValueError, match="unknown layout mode"):
        plan_layouts(model.mod, tj, "nhwc")


class _Geometry(nn.Module):
    """Convolutions the plain blocked templates cannot run: narrow and wide groups, 1x7 and 7x1
    kernels, dilation, an explicit asymmetric pad before a stride-2 convolution and a depthwise one."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, 2, 1)
        self.g4 = nn.Conv2d(64, 64, 3, 1, 1, groups=16)  # groups of 4 channels: widened to the block
        self.g32 = nn.Conv2d(64, 64, 3, 2, 1, groups=2)  # groups of 32: blocks inside each group
        self.c17 = nn.Conv2d(64, 48, (1, 7), padding=(0, 3))
        self.c71 = nn.Conv2d(48, 64, (7, 1), padding=(3, 0))
        self.dil = nn.Conv2d(64, 64, 3, padding=2, dilation=2)
        self.asym = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(64, 64, 3, 2))
        self.dw = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(64, 64, 3, 2, groups=64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        x = torch.relu(self.g4(x)) + x
        x = self.c71(torch.relu(self.c17(self.g32(x))))
        x = torch.relu(self.dil(x))
        return self.asym(x) + self.dw(x)


def test_any_geometry_and_groups_run_blocked_and_match() -> None:
    torch.manual_seed(0)
    m, x = _Geometry().eval(), torch.randn(1, 3, 24, 24)
    model = load_model(m, [x])
    cm = compile_model(model)
    plan = cm.layout
    assert plan.block and all(c.layout != "NCHW" for c in plan.convs), plan.summary()
    general = [c for c in cm.choices if c.kernel_class.startswith("conv2d_nchwc_general")]
    assert len(general) == 6 and all(c.source == "default" for c in general)  # the zero pads folded in
    assert [c.kernel_class.split("-")[0] for c in cm.choices if c.kernel_class.startswith("depthwise")] == \
        ["depthwise_conv2d_nchwc_general"]
    assert not [c for c in cm.choices if c.task.startswith("pad")]
    widened = next(c for c in plan.convs if c.kind == "grouped" and c.padded_flops > c.flops)
    assert widened.padded_flops == pytest.approx(widened.flops * plan.block / 4)
    with torch.no_grad():
        want = [m(x).numpy()]
    assert compare_outputs(cm.run([x.numpy()]), want).ok


class _NormAndConv1d(nn.Module):
    """GroupNorm of one group (PoolFormer) and of four, an average pool minus its input, a conv1d."""

    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv2d(3, 32, 3, padding=1)
        self.g1, self.g4 = nn.GroupNorm(1, 32), nn.GroupNorm(4, 32)
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.c1 = nn.Conv1d(32, 32, 3, padding=1, stride=2)
        self.scale = nn.Parameter(torch.ones(32, 1, 1))  # PoolFormer's layer scale: a [C, 1, 1] constant
        self.c2 = nn.Conv2d(32, 32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.g1(self.c(x) + 3.0)  # a mean far from 0: x * s + t must not lose the variance
        y = self.c2(y + self.scale * (self.pool(y) - y))  # PoolFormer's token mixer, between two convolutions
        y = torch.relu(self.g4(y))
        return self.c1(y.flatten(2))


def test_group_norm_and_conv1d_run_blocked_and_match() -> None:
    torch.manual_seed(0)
    m = _NormAndConv1d()
    for p in m.parameters():
        p.data.normal_(0, 0.5)  # affine weights away from 1 and 0: the check sees them
    m.eval()
    x = torch.randn(1, 3, 16, 16)
    cm = compile_model(load_model(m, [x]))
    assert cm.layout.block and all(c.layout != "NCHW" for c in cm.layout.convs), cm.layout.summary()
    # the input's, the 4-group norm's reshape and the conv1d's: the layer scale follows the block
    assert cm.layout.transforms <= 4, cm.layout.summary()
    assert any(c.kernel_class.startswith("conv2d_nchwc_general") for c in cm.choices)  # the conv1d, as 1x3
    assert not any("group_norm" in c.task or "conv1d" in c.task for c in cm.choices)
    with torch.no_grad():
        want = [m(x).numpy()]
    assert compare_outputs(cm.run([x.numpy()]), want).ok


class _Conv1dStack(nn.Module):
    """wav2vec2's feature encoder in small: strided conv1d layers with a GELU between them."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(1, 16, 10, 5)] + [nn.Conv1d(16, 16, 3, 2) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = nn.functional.gelu(conv(x))
        return x


def test_a_conv1d_stack_stays_blocked_between_its_layers() -> None:
    """The reshapes back to 3-D that each conv1d-as-conv2d leaves cancel across the GELUs between
    layers (a GELU works on any shape): the stack runs blocked with each GELU fused into its
    convolution, transforms only at its two edges (there were two per layer)."""
    torch.manual_seed(0)
    m = _Conv1dStack().eval()
    x = torch.randn(1, 1, 400)
    cm = compile_model(load_model(m, [x]))
    assert all(c.layout != "NCHW" for c in cm.layout.convs) and cm.layout.transforms <= 2, cm.layout.summary()
    fused = [c.kernel_class for c in cm.choices if c.kernel_class.startswith("conv2d") and "erf" in c.kernel_class]
    assert len(fused) >= 3, [c.kernel_class for c in cm.choices]  # the GELU in the convolution's epilogue
    with torch.no_grad():
        want = [m(x).numpy()]
    assert compare_outputs(cm.run([x.numpy()]), want).ok


class _Conv1dSoftmax(nn.Module):
    """A softmax over the length between two conv1d layers: a row op whose axis must stay the last
    when the reshapes around it cancel (over the inserted unit axis every output would be 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv1d(4, 8, 3), nn.Conv1d(8, 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.softmax(self.a(x), dim=2) * 3.0)


def test_a_softmax_between_conv1d_layers_keeps_its_axis() -> None:
    torch.manual_seed(0)
    m = _Conv1dSoftmax().eval()
    x = torch.randn(1, 4, 40)
    cm = compile_model(load_model(m, [x]))
    with torch.no_grad():
        want = [m(x).numpy()]
    assert compare_outputs(cm.run([x.numpy()]), want).ok


class _LinearBn(nn.Module):
    """LeViT's ``MLPLayerWithBN`` on tokens: a linear layer without bias, then ``BatchNorm1d`` over
    its features (the tokens flattened around it), twice, the second with a bias."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.bn_a = nn.Linear(32, 48, bias=False), nn.BatchNorm1d(48)
        self.b, self.bn_b = nn.Linear(48, 32), nn.BatchNorm1d(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn_a(self.a(x).flatten(0, 1)).reshape(1, -1, 48)
        return self.bn_b(self.b(torch.relu(y)).flatten(0, 1)).reshape(1, -1, 32)


def test_batch_norm_after_a_linear_layer_folds_into_its_weights() -> None:
    """An inference batch norm after a linear layer runs as the packed dense with a bias in its
    epilogue: no pass of its own, no batch_norm left, outputs as PyTorch's."""
    torch.manual_seed(0)
    m = _LinearBn()
    for bn in (m.bn_a, m.bn_b):  # running statistics and affine weights away from 0 and 1
        bn.running_mean.normal_(0, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.normal_(1, 0.5)
        bn.bias.data.normal_(0, 0.5)
    m.eval()
    x = torch.randn(1, 20, 32)
    model = load_model(m, [x])
    cm = compile_model(model)
    classes = [c.kernel_class for c in cm.choices]
    assert all(d.block for d in cm.layout.denses), [d.reason for d in cm.layout.denses]  # both packed
    assert classes.count("dense_pack-add") == 2, classes  # the shift (and the bias) in the epilogue
    assert not any("divide" in k or "subtract" in k for k in classes), classes  # no norm pass of its own
    with torch.no_grad():
        want = [m(x).numpy()]
    assert compare_outputs(cm.run([x.numpy()]), want).ok


def test_a_constant_weight_broadcast_to_a_batch_of_one_is_packed() -> None:
    """``matmul(x[1, T, K], broadcast_to(W, [1, K, N]))`` (LeViT's exported linear layers) packs
    ``W`` as any 2-D weight: it was kept as a float32 batch_matmul, "not a 2-D weight"."""
    from tvm import relax

    w = np.random.default_rng(0).standard_normal((32, 48)).astype(np.float32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 20, 32), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            wb = bb.emit(relax.op.broadcast_to(relax.const(w), (1, 32, 48)))
            out = bb.emit_output(bb.emit(relax.op.matmul(x, wb)))
        bb.emit_func_output(out)
    _, plan = plan_layouts(bb.get(), host_target_json())
    assert [d.block for d in plan.denses] == [target_lanes(host_target_json())], [d.reason for d in plan.denses]
