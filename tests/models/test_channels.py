"""Channel splits, slices and concats run inside the blocked layout (ONNX models, as a team exports them)."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tensortune.models.compile import compile_model
from tensortune.models.importer import load_model
from tensortune.models.reference import compare_outputs
from tensortune.target import host_target_json

AVX2 = dict(host_target_json(), mcpu="znver3")  # blocks of 8 (and 4)


class CrossStage(nn.Module):
    """Split in halves on block boundaries, one half through convs, a one-part split, concat, pool."""

    def __init__(self, unaligned: bool = False) -> None:
        super().__init__()
        self.unaligned = unaligned
        self.a = nn.Conv2d(3, 32, 3, padding=1)
        self.b = nn.Conv2d(16, 16, 3, padding=1)
        self.c = nn.Conv2d(12 if unaligned else 16, 16, 1)
        self.d = nn.Conv2d(32 if not unaligned else 36, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.silu(self.a(x))
        if self.unaligned:  # a Res2Net width: parts of 12 and 20 channels, off the 8-channel blocks
            p, q = y.split([12, 20], dim=1)
            q = q[:, :16]
            z = torch.cat([p, self.b(q), torch.relu(self.c(p)) - 1.0], dim=1)[:, :36]
        else:
            p, q = y.split(16, dim=1)
            (p,) = p.split([16], dim=1)  # one part: imported as the tensor itself
            z = torch.cat([torch.sigmoid(p) * 2.0, self.b(q) + self.c(p)], dim=1)
        return nn.functional.max_pool2d(self.d(nn.functional.avg_pool2d(z, 3, 1, 1)), 2)


def _onnx(module: nn.Module, path) -> tuple[str, np.ndarray, np.ndarray]:
    torch.manual_seed(0)
    module = module.eval()
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        want = module(x).numpy()
        torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=17, input_names=["x"])
    return str(path), x.numpy(), want


def test_channel_split_and_concat_on_block_boundaries_stay_blocked(tmp_path) -> None:
    path, x, want = _onnx(CrossStage(), tmp_path / "csp.onnx")
    model = load_model(path)
    plan = model.layout_plan(AVX2)
    assert plan.block == 8 and all(c.layout == "NCHW8c" or c.layout == "NCHW3c" for c in plan.convs), plan.summary()
    assert plan.transforms == 2, plan.summary()  # the input into the block, the output out of it
    cm = compile_model(model, target_json=AVX2)
    check = compare_outputs(cm.run([x]), [want])
    assert check.ok, check.message


def test_parts_off_the_block_boundaries_are_moved_onto_them_and_match(tmp_path) -> None:
    """Parts of 12 and 20 channels: the convolution making them puts each part on a block boundary,
    so the slices, the concat of 12 + 16 + 16 channels and the cut to 36 all stay in the block."""
    path, x, want = _onnx(CrossStage(unaligned=True), tmp_path / "res2.onnx")
    model = load_model(path)
    plan = model.layout_plan(AVX2)
    assert plan.block == 8 and plan.transforms == 2, plan.summary()
    assert "32->40" in plan.summary(), plan.summary()  # 12 + 20 laid out as 16 + 24
    cm = compile_model(model, target_json=AVX2)
    check = compare_outputs(cm.run([x]), [want])
    assert check.ok, check.message


class InputSplit(nn.Module):
    """Channels off the block boundaries that no convolution makes: the image repeated to 24
    channels, split in 10 and 14."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(10, 16, 3, padding=1)
        self.b = nn.Conv2d(14, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, q = torch.cat([x] * 8, dim=1).split([10, 14], dim=1)
        return self.a(p) + self.b(q)


def test_channels_off_the_block_boundaries_no_convolution_makes_keep_their_transforms_and_match(tmp_path) -> None:
    path, x, want = _onnx(InputSplit(), tmp_path / "split.onnx")
    model = load_model(path)
    plan = model.layout_plan(AVX2)
    assert plan.transforms > 2, plan.summary()  # the input into the block, out for the slices, the output
    cm = compile_model(model, target_json=AVX2)
    check = compare_outputs(cm.run([x]), [want])
    assert check.ok, check.message


class TokensAndImages(nn.Module):
    """A pyramid transformer's seams: a conv's image flattened to tokens, a norm over them, the tokens
    back to an image for the next conv; a ConvNeXt block's channels-last norm between permutes."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 16, 3, 2, 1)
        self.norm = nn.LayerNorm(16)
        self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
        self.norm2 = nn.LayerNorm(16)
        self.out = nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.embed(x)
        b, c, h, w = y.shape
        t = self.norm(y.flatten(2).transpose(1, 2))
        y = self.dw(t.transpose(1, 2).reshape(b, c, h, w))
        y = self.norm2(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.out(y)


def test_images_and_tokens_meet_the_block_in_one_transform(tmp_path) -> None:
    from tvm import relax

    path, x, want = _onnx(TokensAndImages(), tmp_path / "tokens.onnx")
    model = load_model(path)
    planned = model.fused(AVX2)
    names = []
    relax.analysis.post_order_visit(planned["main"].body, lambda e: names.append(e.args[0].name_hint)
                                    if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir" else None)
    assert not [n for n in names if "transpose" in n], names  # each seam is one layout transform, no transpose
    cm = compile_model(model, target_json=AVX2)
    check = compare_outputs(cm.run([x]), [want])
    assert check.ok, check.message


def test_a_transform_between_channels_last_and_the_block_moves_whole_vectors(tmp_path) -> None:
    """The generic template's default vector of a transform NHWC -> NCHW8c is the block (8 channels,
    AVX2's lanes): a vector of 16 would straddle two blocks (a scatter)."""
    from tensortune.models.compile import model_tasks

    path, _, _ = _onnx(TokensAndImages(), tmp_path / "tokens.onnx")
    tasks = [mt.task for mt in model_tasks(load_model(path), AVX2) if "layout-transform" in mt.task.kernel_class]
    from tensortune.templates.generic import _inner_block_width

    chunked = [t for t in tasks if _inner_block_width(*t.template._inlined(t)) == 8]
    assert chunked, [t.kernel_class for t in tasks]
    assert all(t.default_config()["tile_inner"][1] == 8 for t in chunked)


def test_pre_activation_batch_norms_follow_the_block(tmp_path) -> None:
    """A dense block's batch norms come before its convolutions (nothing to fold them into): each
    runs as a per-channel product and sum, fused with its concat and ReLU inside the block, with no
    layout transform around it; the statistics are random, far from (0, 1), and the outputs match."""
    from tensortune.models.patterns import DenseNet
    from tensortune.models.zoo import _finish

    torch.manual_seed(0)
    module = _finish(DenseNet(layers=(2, 2), growth=16))
    path, x, want = _onnx(module, tmp_path / "dense.onnx")
    model = load_model(path)
    plan = model.layout_plan(AVX2)
    assert plan.transforms == 2, plan.summary()  # the image into the block, the pooled features out
    cm = compile_model(model, target_json=AVX2)
    check = compare_outputs(cm.run([x]), [want])
    assert check.ok, check.message


class Branches(nn.Module):
    """Two resolutions of 12 and 20 channels (off the block: padded), each through a residual 3x3,
    the low one upsampled (nearest, and bilinear) into the high one's sum."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 12, 3, padding=1)
        self.down = nn.Conv2d(12, 20, 3, 2, 1)
        self.hi, self.lo = nn.Conv2d(12, 12, 3, padding=1), nn.Conv2d(20, 20, 3, padding=1)
        self.fuse = nn.Conv2d(20, 12, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        lo = torch.relu(self.down(h))
        h, lo = torch.relu(h + self.hi(h)), torch.relu(lo + self.lo(lo))
        f = self.fuse(lo)
        up = nn.functional.interpolate(f, scale_factor=2.0, mode="nearest")
        smooth = nn.functional.interpolate(f, scale_factor=2.0, mode="bilinear", align_corners=False)
        return torch.relu(h + up + smooth).mean((2, 3))


def test_resized_branches_stay_padded_and_blocked(tmp_path) -> None:
    """Padded channels flow through a resize (zeros stay zeros), and the resize runs in the block:
    only the edges of the model keep a layout transform, and the outputs match."""
    path, x, want = _onnx(Branches(), tmp_path / "branches.onnx")
    model = load_model(path)
    plan = model.layout_plan(AVX2)
    assert plan.block == 8 and plan.transforms == 2, plan.summary()  # into the block, out of it
    cm = compile_model(model, target_json=AVX2)
    check = compare_outputs(cm.run([x]), [want])
    assert check.ok, check.message
