"""A tiny model that is not built in: conv+BN+ReLU, depthwise+BN+ReLU6, residual, pool, linear; and a
smaller one of one conv."""
from __future__ import annotations

import torch
from torch import nn


class Tiny(nn.Module):
    """Every fused pattern a CNN has, at a size that builds in seconds."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.c1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.b1 = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False)
        self.b2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)
        with torch.no_grad():
            for bn in (self.b1, self.b2):
                bn.running_mean.copy_(torch.randn(8, generator=g) * 0.1)
                bn.running_var.copy_(torch.rand(8, generator=g) + 0.5)
                bn.weight.copy_(torch.rand(8, generator=g) + 0.5)
                bn.bias.copy_(torch.randn(8, generator=g) * 0.1)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.clamp(self.b2(self.dw(y)), 0, 6) + y
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def tiny() -> tuple[nn.Module, list[torch.Tensor]]:
    """The model and one example input."""
    torch.manual_seed(0)
    return Tiny(), [torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))]


def one_conv() -> tuple[nn.Module, list[torch.Tensor]]:
    """One conv + ReLU and its input: a whole model at the fewest tasks, for tests that run every
    task through real measurements (each task's tuning ends with a confirmation of its top configs,
    MetaSchedule gives each task a search round of seconds) and need no other pattern."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()).eval()
    return module, [torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))]


def dense_class() -> str:
    """The kernel class of the tiny model's linear layer (4 outputs) on this host: a matmul on a
    packed weight where the host's lanes (or half of them) divide 4 (AVX2: 8 lanes, block 4),
    a plain matmul where they do not (AVX-512: 16 lanes)."""
    from tensortune.models.prepack import weight_block
    from tensortune.target import host_target_json

    return "dense_pack-add" if weight_block(4, host_target_json()) else "matmul-add"

