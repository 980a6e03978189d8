"""Small networks of our own, one per structural pattern that the corpus lacks, exported to ONNX.

Each network is written here from the published idea, not copied from a model zoo: what matters
is the graph pattern a user's model brings (channel splits and concats around blocks, depthwise
kernels of several sizes on channel groups, attention over spatially reduced keys, convolution
stages followed by attention on few tokens, layers that read the concat of all earlier ones,
branches at several resolutions summed across, recurrent layers). They are exported with PyTorch's TorchScript
exporter so that they reach tensortune the way a team's ONNX file does (``Split``, ``Slice``,
``Concat`` and ``Reshape`` nodes, shape arithmetic included), random weights, batch 1, 224x224
images (the recurrent one: 50 steps of 64 features).

``export_pattern(name, folder)`` writes ``folder/NAME.onnx`` and returns its path.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from .zoo import _conv_bn, _finish, _image_inputs

__all__ = ["PATTERNS", "Pattern", "build_pattern", "export_pattern", "pattern_names"]


class _PooledClassifier(nn.Module):
    """A CNN read out by global average pooling: ``stem``, ``blocks`` and ``head`` set by the subclass."""

    stem: nn.Module
    blocks: nn.Module
    head: nn.Module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class _Bottleneck(nn.Module):
    """1x1 then 3x3, residual (the block inside a cross-stage partial stage)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.a = _conv_bn(c, c, 1, act=nn.SiLU)
        self.b = _conv_bn(c, c, 3, act=nn.SiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b(self.a(x))


class _CrossStage(nn.Module):
    """Cross-stage partial stage: downsample, expand, split in halves, one half through the blocks,
    concat, transition (Wang et al. 2020)."""

    def __init__(self, cin: int, cout: int, depth: int) -> None:
        super().__init__()
        self.down = _conv_bn(cin, cout, 3, 2, act=nn.SiLU)
        self.expand = _conv_bn(cout, 2 * cout, 1, act=nn.SiLU)
        self.half = cout
        self.blocks = nn.Sequential(*[_Bottleneck(cout) for _ in range(depth)])
        self.transition = _conv_bn(2 * cout, cout, 1, act=nn.SiLU)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.expand(self.down(x))
        xs, xb = x.split(self.half, dim=1)
        return self.transition(torch.cat([xs, self.blocks(xb)], dim=1))


class CrossStageNet(_PooledClassifier):
    """A CSP network: stem, four cross-stage partial stages, pooled classifier."""

    def __init__(self, widths: tuple[int, ...] = (64, 128, 256, 512), depths: tuple[int, ...] = (1, 2, 3, 1)) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 32, 3, 2, act=nn.SiLU), _conv_bn(32, 32, 3, act=nn.SiLU))
        stages, cin = [], 32
        for w, d in zip(widths, depths):
            stages.append(_CrossStage(cin, w, d))
            cin = w
        self.blocks = nn.Sequential(*stages)
        self.head = nn.Linear(cin, 1000)


class _Res2Block(nn.Module):
    """Hierarchical splits (Gao et al. 2019): the 1x1 output split into ``scale`` groups, each group
    but the last through a 3x3 conv that also takes the previous group's output, then concat."""

    def __init__(self, cin: int, width: int, scale: int, cout: int, stride: int) -> None:
        super().__init__()
        self.width, self.scale, self.stride = width, scale, stride
        self.reduce = _conv_bn(cin, width * scale, 1)
        self.convs = nn.ModuleList(_conv_bn(width, width, 3, stride) for _ in range(scale - 1))
        self.pool = nn.AvgPool2d(3, stride, 1) if stride > 1 else nn.Identity()
        self.expand = _conv_bn(width * scale, cout, 1, act=None)
        self.short = _conv_bn(cin, cout, 1, stride, act=None) if stride > 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(self.reduce(x), self.width, dim=1)
        outs: list[torch.Tensor] = []
        sp = parts[0]
        for i, conv in enumerate(self.convs):
            sp = conv(parts[i] if i == 0 or self.stride > 1 else sp + parts[i])
            outs.append(sp)
        outs.append(self.pool(parts[-1]))
        return torch.relu(self.expand(torch.cat(outs, dim=1)) + self.short(x))


class HierarchicalSplitNet(_PooledClassifier):
    """A Res2Net-style network: 26-wide groups at scale 4, three blocks a stage."""

    def __init__(self, base: int = 26, scale: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for i, (mult, n) in enumerate(zip((1, 2, 4, 8), (2, 2, 2, 1))):
            cout = 256 * mult
            for j in range(n):
                blocks.append(_Res2Block(cin, base * mult, scale, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, 1000)


class _Ghost(nn.Module):
    """A ghost module (Han et al. 2020): half the channels from a 1x1 conv, the other half from a
    cheap depthwise 3x3 of them, concatenated and cut to ``cout``."""

    def __init__(self, cin: int, cout: int, relu: bool = True) -> None:
        super().__init__()
        self.cout = cout
        init = (cout + 1) // 2
        act = nn.ReLU if relu else None
        self.primary = _conv_bn(cin, init, 1, act=act)
        self.cheap = _conv_bn(init, init, 3, groups=init, act=act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.primary(x)
        return torch.cat([a, self.cheap(a)], dim=1)[:, :self.cout]


class _GhostBottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, cout: int, stride: int) -> None:
        super().__init__()
        self.g1 = _Ghost(cin, mid)
        self.dw = _conv_bn(mid, mid, 3, stride, groups=mid, act=None) if stride > 1 else nn.Identity()
        self.g2 = _Ghost(mid, cout, relu=False)
        self.short = (nn.Identity() if stride == 1 and cin == cout else
                      nn.Sequential(_conv_bn(cin, cin, 3, stride, groups=cin, act=None), _conv_bn(cin, cout, 1, act=None)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.g2(self.dw(self.g1(x))) + self.short(x)


class GhostNet(_PooledClassifier):
    """A GhostNet-style network (width 1.0 layer table, without squeeze-excitation)."""

    #: (mid, out, stride) per bottleneck: GhostNet's table.
    TABLE = ((16, 16, 1), (48, 24, 2), (72, 24, 1), (72, 40, 2), (120, 40, 1), (240, 80, 2), (200, 80, 1),
             (184, 80, 1), (480, 112, 1), (672, 112, 1), (672, 160, 2), (960, 160, 1), (960, 160, 1))

    def __init__(self) -> None:
        super().__init__()
        self.stem = _conv_bn(3, 16, 3, 2)
        blocks, cin = [], 16
        for mid, cout, stride in self.TABLE:
            blocks.append(_GhostBottleneck(cin, mid, cout, stride))
            cin = cout
        self.blocks = nn.Sequential(*blocks, _conv_bn(cin, 960, 1))
        self.head = nn.Sequential(nn.Linear(960, 1280), nn.ReLU(), nn.Linear(1280, 1000))


class _MixedDepthwise(nn.Module):
    """Depthwise kernels of several sizes on channel groups (Tan & Le 2019), concatenated."""

    def __init__(self, c: int, kernels: tuple[int, ...], stride: int) -> None:
        super().__init__()
        sizes = [c // len(kernels)] * len(kernels)
        sizes[0] += c - sum(sizes)
        self.sizes = sizes
        self.convs = nn.ModuleList(nn.Conv2d(s, s, k, stride, k // 2, groups=s, bias=False)
                                   for s, k in zip(sizes, kernels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(x, self.sizes, dim=1)
        return torch.cat([conv(p) for conv, p in zip(self.convs, parts)], dim=1)


class _MixBlock(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, kernels: tuple[int, ...], stride: int) -> None:
        super().__init__()
        mid = cin * expand
        self.residual = stride == 1 and cin == cout
        self.body = nn.Sequential(_conv_bn(cin, mid, 1, act=nn.SiLU), _MixedDepthwise(mid, kernels, stride),
                                  nn.BatchNorm2d(mid), nn.SiLU(), _conv_bn(mid, cout, 1, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class MixedKernelNet(_PooledClassifier):
    """A MixNet-style network: inverted residuals whose depthwise step mixes 3x3 to 9x9 kernels."""

    #: (out, expand, kernels, stride) per block.
    TABLE = ((24, 6, (3,), 2), (24, 3, (3,), 1), (40, 6, (3, 5, 7), 2), (40, 6, (3, 5), 1),
             (80, 6, (3, 5, 7), 2), (80, 6, (3, 5, 7, 9), 1), (120, 6, (3, 5, 7), 1), (120, 3, (3, 5, 7, 9), 1),
             (200, 6, (3, 5, 7, 9), 2), (200, 6, (3, 5, 7, 9), 1))

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 16, 3, 2), _conv_bn(16, 16, 3, groups=16), _conv_bn(16, 16, 1, act=None))
        blocks, cin = [], 16
        for cout, expand, kernels, stride in self.TABLE:
            blocks.append(_MixBlock(cin, cout, expand, kernels, stride))
            cin = cout
        self.blocks = nn.Sequential(*blocks, _conv_bn(cin, 1536, 1))
        self.head = nn.Linear(1536, 1000)


class _ReducedAttention(nn.Module):
    """Attention whose keys and values come from a strided conv of the token grid (Wang et al.
    2021's spatial reduction)."""

    def __init__(self, dim: int, heads: int, sr: int) -> None:
        super().__init__()
        self.heads, self.sr = heads, sr
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        if sr > 1:
            self.reduce = nn.Conv2d(dim, dim, sr, sr)
            self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        b, n, c = x.shape
        d = c // self.heads
        q = self.q(x).reshape(b, n, self.heads, d).permute(0, 2, 1, 3)
        if self.sr > 1:
            x = self.reduce(x.permute(0, 2, 1).reshape(b, c, h, w)).reshape(b, c, -1).permute(0, 2, 1)
            x = self.norm(x)
        kv = self.kv(x).reshape(b, -1, 2, self.heads, d).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]
        attn = (q @ k.transpose(-2, -1) * d ** -0.5).softmax(-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class _ConvMlp(nn.Module):
    """fc, a depthwise 3x3 over the token grid, GELU, fc."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.dw = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        x = self.fc1(x)
        b, n, c = x.shape
        x = self.dw(x.transpose(1, 2).reshape(b, c, h, w)).flatten(2).transpose(1, 2)
        return self.fc2(nn.functional.gelu(x))


class _ReducedBlock(nn.Module):
    def __init__(self, dim: int, heads: int, sr: int) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = _ReducedAttention(dim, heads, sr)
        self.mlp = _ConvMlp(dim, 4 * dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        x = x + self.attn(self.n1(x), h, w)
        return x + self.mlp(self.n2(x), h, w)


class ReducedAttentionNet(nn.Module):
    """A pyramid transformer (PVT v2 b0-like): overlapping patch embeddings, four stages of
    attention over spatially reduced keys with depthwise convs inside the MLP."""

    #: (dim, heads, sr, depth, patch, stride) per stage.
    STAGES = ((32, 1, 8, 2, 7, 4), (64, 2, 4, 2, 3, 2), (160, 5, 2, 2, 3, 2), (256, 8, 1, 2, 3, 2))

    def __init__(self) -> None:
        super().__init__()
        self.embeds, self.stages, self.norms = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        cin = 3
        for dim, heads, sr, depth, patch, stride in self.STAGES:
            self.embeds.append(nn.Sequential(nn.Conv2d(cin, dim, patch, stride, patch // 2)))
            self.stages.append(nn.ModuleList(_ReducedBlock(dim, heads, sr) for _ in range(depth)))
            self.norms.append(nn.LayerNorm(dim))
            cin = dim
        self.head = nn.Linear(cin, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for embed, blocks, norm in zip(self.embeds, self.stages, self.norms):
            x = embed(x)
            b, c, h, w = x.shape
            t = x.flatten(2).transpose(1, 2)
            for blk in blocks:
                t = blk(t, h, w)
            x = norm(t).transpose(1, 2).reshape(b, c, h, w)
        return self.head(x.mean((2, 3)))


class _PoolBlock(nn.Module):
    """A 4-D stage's block: pooling as the token mixer, a 1x1 conv MLP (EfficientFormer's Meta4D)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.mlp = nn.Sequential(_conv_bn(c, 4 * c, 1, act=nn.GELU), _conv_bn(4 * c, c, 1, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + (self.pool(x) - x)
        return x + self.mlp(x)


class _TokenBlock(nn.Module):
    """A 3-D stage's block: multi-head self-attention and an MLP over the tokens, pre-norm."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1) * (c // self.heads) ** -0.5).softmax(-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))
        return x + self.mlp(self.n2(x))


class FourThenThreeD(nn.Module):
    """A hybrid with 4-D and 3-D stages (EfficientFormer-like): conv stages with pooling mixers,
    then the last stage's image flattened to tokens for attention blocks."""

    def __init__(self, widths: tuple[int, ...] = (48, 96, 224, 448), depths: tuple[int, ...] = (3, 2, 6, 4),
                 token_blocks: int = 2) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, widths[0] // 2, 3, 2), _conv_bn(widths[0] // 2, widths[0], 3, 2))
        layers, cin = [], widths[0]
        for i, (w, d) in enumerate(zip(widths, depths)):
            if i:
                layers.append(_conv_bn(cin, w, 3, 2, act=None))
            n4 = d - token_blocks if i == len(widths) - 1 else d
            layers += [_PoolBlock(w) for _ in range(n4)]
            cin = w
        self.conv_stages = nn.Sequential(*layers)
        self.tokens = nn.Sequential(*[_TokenBlock(cin, 8) for _ in range(token_blocks)])
        self.norm = nn.LayerNorm(cin)
        self.head = nn.Linear(cin, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_stages(self.stem(x))
        t = self.tokens(x.flatten(2).transpose(1, 2))
        return self.head(self.norm(t).mean(1))


class RecurrentNet(nn.Module):
    """A sequence model: a projection, two LSTM layers, a GRU layer, a classifier on the last step."""

    def __init__(self, features: int = 64, hidden: int = 256) -> None:
        super().__init__()
        self.proj = nn.Linear(features, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True)
        self.gru = nn.GRU(hidden, hidden // 2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(torch.relu(self.proj(x)))
        y, _ = self.gru(y)
        return self.head(y[:, -1])


class _DenseLayer(nn.Module):
    """Pre-activation bottleneck of a dense block: BN-ReLU-1x1 to 4k, BN-ReLU-3x3 to k new channels."""

    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
                                  nn.BatchNorm2d(4 * growth), nn.ReLU(),
                                  nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False))

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        return self.body(torch.cat(features, 1))


class _DenseBlock(nn.Module):
    """Every layer reads the concatenation of the block's input and all earlier layers' outputs
    (Huang et al. 2017): a concat a layer, each one longer."""

    def __init__(self, cin: int, layers: int, growth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_DenseLayer(cin + i * growth, growth) for i in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet(_PooledClassifier):
    """A DenseNet-121-style network: four dense blocks (6, 12, 24, 16 layers, growth 32), each
    followed by a BN-ReLU-1x1 transition that halves the channels and a 2x2 average pool."""

    def __init__(self, layers: tuple[int, ...] = (6, 12, 24, 16), growth: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks: list[nn.Module] = []
        c = 64
        for i, n in enumerate(layers):
            blocks.append(_DenseBlock(c, n, growth))
            c += n * growth
            if i < len(layers) - 1:
                blocks += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2)]
                c //= 2
        blocks += [nn.BatchNorm2d(c), nn.ReLU()]
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(c, 1000)


class _Basic(nn.Module):
    """Two 3x3 conv-BN, residual, ReLU (a basic block at one resolution)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_conv_bn(c, c, 3), _conv_bn(c, c, 3, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


class _Exchange(nn.Module):
    """Multi-resolution fusion (Wang et al. 2019): each branch's output is the sum of every branch
    brought to its resolution: strided 3x3 convs down, a 1x1 conv then nearest upsampling up."""

    def __init__(self, widths: tuple[int, ...]) -> None:
        super().__init__()
        self.paths = nn.ModuleList()
        for i, wi in enumerate(widths):
            row = nn.ModuleList()
            for j, wj in enumerate(widths):
                if j == i:
                    row.append(nn.Identity())
                elif j > i:  # lower resolution: 1x1 to wi, upsample by 2^(j-i)
                    row.append(nn.Sequential(_conv_bn(wj, wi, 1, act=None), nn.Upsample(scale_factor=2 ** (j - i))))
                else:  # higher resolution: (i-j) strided 3x3 convs
                    steps = [_conv_bn(wj, wj, 3, 2) for _ in range(i - j - 1)]
                    row.append(nn.Sequential(*steps, _conv_bn(wj, wi, 3, 2, act=None)))
            self.paths.append(row)

    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        outs = []
        for row in self.paths:
            total = row[0](xs[0])
            for path, x in zip(row[1:], xs[1:]):
                total = total + path(x)
            outs.append(torch.relu(total))
        return outs


class MultiResolutionNet(nn.Module):
    """An HRNet-style network: a stride-4 stem, then stages that keep 1, 2, 3 and 4 parallel
    branches (widths 18, 36, 72, 144) of basic blocks, exchanged after each stage; a new branch is a
    strided 3x3 of the lowest one. The head concatenates every branch upsampled to the highest."""

    def __init__(self, widths: tuple[int, ...] = (18, 36, 72, 144), blocks: int = 2) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 64, 3, 2), _conv_bn(64, 64, 3, 2), _conv_bn(64, widths[0], 1))
        self.stages = nn.ModuleList()
        self.exchanges = nn.ModuleList()
        self.grow = nn.ModuleList()
        for n in range(1, len(widths) + 1):
            self.stages.append(nn.ModuleList(nn.Sequential(*[_Basic(w) for _ in range(blocks)]) for w in widths[:n]))
            self.exchanges.append(_Exchange(widths[:n]) if n > 1 else nn.Identity())
            if n < len(widths):
                self.grow.append(_conv_bn(widths[n - 1], widths[n], 3, 2))
        self.head = nn.Linear(sum(widths), 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xs = [self.stem(x)]
        for n, (stage, exchange) in enumerate(zip(self.stages, self.exchanges)):
            xs = [branch(t) for branch, t in zip(stage, xs)]
            if n > 0:
                xs = exchange(xs)
            if n < len(self.grow):
                xs.append(self.grow[n](xs[-1]))
        size = xs[0].shape[-2:]
        up = [xs[0], *(nn.functional.interpolate(t, size=size, mode="nearest") for t in xs[1:])]
        return self.head(torch.cat(up, 1).mean((2, 3)))


def _sequence_inputs(batch: int, seed: int) -> list[torch.Tensor]:
    """One ``(batch, 50, 64)`` float32 sequence of features."""
    g = torch.Generator().manual_seed(seed + 1)
    return [torch.randn(batch, 50, 64, generator=g)]


@dataclass(frozen=True)
class Pattern:
    """One pattern network: its name, what it stands for, its builder and its example inputs."""

    name: str
    description: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int, int], list[torch.Tensor]] = _image_inputs


PATTERNS: dict[str, Pattern] = {p.name: p for p in [
    Pattern("cross_stage", "cross-stage partial network: split, half through the blocks, concat", CrossStageNet),
    Pattern("hier_split", "hierarchical channel splits, each through a 3x3 conv, concatenated", HierarchicalSplitNet),
    Pattern("ghost", "ghost modules: cheap depthwise features concatenated, cut to width", GhostNet),
    Pattern("mixed_kernel", "mixed depthwise kernels (3x3 to 9x9) on channel splits, concatenated", MixedKernelNet),
    Pattern("reduced_attn", "attention over spatially reduced keys, depthwise conv inside the MLP",
            ReducedAttentionNet),
    Pattern("four_three_d", "a hybrid of 4-D conv stages then 3-D attention stages", FourThenThreeD),
    Pattern("dense", "dense blocks: each 3x3 layer reads the concat of all earlier outputs", DenseNet),
    Pattern("multi_res", "parallel branches at four resolutions of 3x3 basic blocks, summed across",
            MultiResolutionNet),
    Pattern("recurrent", "two LSTM layers and a bidirectional GRU over 50 steps", RecurrentNet, _sequence_inputs),
]}


def pattern_names() -> list[str]:
    """Names of the pattern networks, in registry order."""
    return list(PATTERNS)


def build_pattern(name: str, seed: int = 0) -> tuple[nn.Module, list[torch.Tensor]]:
    """Pattern network ``name`` with seeded random weights (batch norms calibrated) and one input."""
    if name not in PATTERNS:
        raise KeyError(f"unknown pattern {name!r}; known: {', '.join(PATTERNS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        images = PATTERNS[name].inputs is _image_inputs
        model = _finish(PATTERNS[name].build(), *(() if images else (None,)))  # batch norms calibrated on images
    return model, PATTERNS[name].inputs(1, seed)


def export_pattern(name: str, folder: str, seed: int = 0) -> str:
    """Write pattern network ``name`` as ``folder/NAME.onnx`` (opset 17) and return the path."""
    model, inputs = build_pattern(name, seed)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.onnx")
    with torch.no_grad():
        torch.onnx.export(model, tuple(inputs), path, dynamo=False, opset_version=17,
                          input_names=["image" if PATTERNS[name].inputs is _image_inputs else "features"],
                          output_names=["logits"])
    return path
