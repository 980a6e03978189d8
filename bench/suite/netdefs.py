"""Models the benchmark defines itself, outside tensortune's zoo, used only as ONNX files.

``bench:shufflenet_v2`` in ``--models`` is ShuffleNetV2 x1.0 (Ma et al. 2018; 2,278,604
parameters), which the zoo does not have: channel split, channel shuffle (reshape/transpose),
concat and stride-2 depthwise branches. The suite exports it once into the results folder
(``models/shufflenet_v2.onnx``, with the same exporter the benchmark uses for ONNX Runtime) and
from then on handles it only as a file, as a user's ONNX model: its reference is ONNX Runtime.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, relu: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class _ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(_conv_bn(cin, cin, 3, stride, groups=cin, relu=False), _conv_bn(cin, half, 1))
        self.branch2 = nn.Sequential(_conv_bn(cin if stride > 1 else half, half, 1),
                                     _conv_bn(half, half, 3, stride, groups=half, relu=False), _conv_bn(half, half, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        b, c, h, w = out.shape
        return out.view(b, 2, c // 2, h, w).transpose(1, 2).reshape(b, c, h, w)  # channel shuffle


class ShuffleNetV2(nn.Module):
    """ShuffleNetV2 x1.0: stages of 4, 8, 4 units with 116, 232, 464 channels."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1))
        units: list[nn.Module] = []
        cin = 24
        for repeats, cout in zip((4, 8, 4), (116, 232, 464)):
            units += [_ShuffleUnit(cin, cout, 2)] + [_ShuffleUnit(cout, cout, 1) for _ in range(repeats - 1)]
            cin = cout
        self.stages = nn.Sequential(*units)
        self.conv5 = _conv_bn(cin, 1024, 1)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv5(self.stages(self.stem(x))).mean((2, 3)))


def shufflenet_v2(seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """The model with random weights and batch-norm statistics recalibrated on random images, and an input."""
    torch.manual_seed(seed)
    model = ShuffleNetV2()
    for m in model.modules():  # cumulative statistics of a few batches, as after training
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(4, 3, 224, 224))
    model.eval()
    return model, torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(seed + 1))


#: ``bench:NAME`` -> a function returning (module, example input).
MODELS = {"shufflenet_v2": shufflenet_v2}


def resolve(name: str, folder: Path) -> str:
    """A model argument as ``tensortune`` takes it: ``bench:NAME`` becomes the path of its ONNX
    file in ``folder`` (exported there when missing); anything else is returned unchanged."""
    if not name.startswith("bench:"):
        return name
    key = name.split(":", 1)[1]
    if key not in MODELS:
        raise SystemExit(f"unknown bench model {name!r}; known: {', '.join('bench:' + k for k in MODELS)}")
    path = folder / f"{key}.onnx"
    if not path.exists():
        from tensortune.models.reference import export_onnx

        module, example = MODELS[key]()
        folder.mkdir(parents=True, exist_ok=True)
        export_onnx(module, [example], str(path))
    return str(path)
