"""Built-in deep-learning models in plain PyTorch: published layer configurations, random weights.

Nothing is downloaded: every model is written out here (no torchvision, no HuggingFace) with the
layer layout of its reference implementation, so parameter counts match the published figures.
Weights are random but reproducible: ``build_model(name, batch, seed)`` seeds torch inside
``torch.random.fork_rng`` (the caller's global RNG state is left untouched), keeps PyTorch's
default initialisation for convolutions and linear layers (except VGG-16 and SqueezeNet, which use
torchvision's own init: with the default one and no batch norm their logits barely depend on the
input), and gives every BatchNorm random affine parameters and random running statistics
(calibrated on random images, then perturbed; see ``_randomize_batchnorm``) so that passes such
as batch-norm folding see non-trivial values while activations stay O(1). All models are float32, in eval mode, free of in-place activations and
data-dependent control flow, so they go through ``torch.export.export``.

Vision models take one ``(batch, 3, 224, 224)`` float32 image tensor and return ``(batch, 1000)``
logits. ``bert_base`` takes one ``(batch, 128)`` int64 ``input_ids`` tensor and returns the tuple
``(last_hidden_state, pooled_output)`` of shapes ``(batch, 128, 768)`` and ``(batch, 768)``, like
HuggingFace ``BertModel`` without an attention mask.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..errors import TensortuneError

__all__ = ["BERT_SEQ_LEN", "BERT_VOCAB", "MODELS", "UnknownModelError", "ZooModel", "build_model", "model_names"]

IMAGE_SHAPE = (3, 224, 224)
BERT_VOCAB = 30522
BERT_SEQ_LEN = 128
#: DistilBERT's sequence length: SQuAD question answering's usual 384 tokens.
DISTILBERT_SEQ_LEN = 384


# --------------------------------------------------------------------------------------------------
# Shared pieces
# --------------------------------------------------------------------------------------------------

def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
             act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    """Conv (no bias, "same" padding) + BatchNorm (+ activation)."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


@torch.no_grad()
def _randomize_batchnorm(model: nn.Module, example: Callable[[], list[torch.Tensor]] | None = None) -> None:
    """Random affine parameters and running statistics for every BatchNorm, from the global RNG.

    Affine parameters: weight ~ U(0.5, 1.5), bias ~ N(0, 0.1). Running statistics are *calibrated*
    and then perturbed: one eval-mode pass on ``example()`` (random images) sets each BatchNorm's
    statistics, just before it runs, from the per-channel mean ``m`` and variance ``v`` of its real
    input: running_mean = m + N(0, 0.1) * sqrt(v), running_var = v * U(0.5, 1.5). With PyTorch's
    default conv init and uncalibrated statistics the signal fades through deep nets (outputs end
    up nearly independent of the input); calibration keeps every layer's activations O(1) while
    the statistics stay random and far from the (0, 1) defaults, so batch-norm folding is exercised.
    Without ``example`` the statistics are drawn as mean ~ N(0, 0.1), var ~ U(0.5, 1.5).
    """
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        n = m.num_features
        if m.affine:
            m.weight.copy_(torch.rand(n) + 0.5)
            m.bias.copy_(torch.randn(n) * 0.1)
        m.running_mean.copy_(torch.randn(n) * 0.1)
        m.running_var.copy_(torch.rand(n) + 0.5)
    if example is None:
        return

    def calibrate(m: nn.modules.batchnorm._BatchNorm, args: tuple[torch.Tensor, ...]) -> None:
        x = args[0].detach().float()
        dims = [d for d in range(x.dim()) if d != 1]
        mean = x.mean(dims)
        var = x.var(dims, unbiased=False)
        var = var.clamp_min(0.01 * float(var.mean()) + 1e-6)  # dead channels: no huge 1/sqrt(eps) gains
        n = m.num_features
        m.running_mean.copy_(mean + torch.randn(n) * 0.1 * var.sqrt())
        m.running_var.copy_(var * (torch.rand(n) + 0.5))

    was_training = model.training
    model.eval()
    handles = [m.register_forward_pre_hook(calibrate) for m in bns]
    try:
        model(*example())
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)


def _calibration_images() -> list[torch.Tensor]:
    """Two standard-normal 224x224 images from the global RNG (batch-norm calibration input)."""
    return [torch.randn(2, *IMAGE_SHAPE)]


def _finish(model: nn.Module, example: Callable[[], list[torch.Tensor]] | None = _calibration_images) -> nn.Module:
    """Make float32, randomise (and calibrate) batch norms, switch to eval mode."""
    model = model.float()
    _randomize_batchnorm(model, example)
    return model.eval()


def _image_inputs(batch: int, seed: int) -> list[torch.Tensor]:
    """One standard-normal ``(batch, 3, 224, 224)`` float32 image tensor."""
    g = torch.Generator().manual_seed(_input_seed(seed))
    return [torch.randn((batch, *IMAGE_SHAPE), generator=g, dtype=torch.float32)]


def _bert_inputs(batch: int, seed: int, seq_len: int = BERT_SEQ_LEN) -> list[torch.Tensor]:
    """One int64 ``input_ids`` tensor of shape ``(batch, seq_len)`` with ids in ``[0, BERT_VOCAB)``."""
    g = torch.Generator().manual_seed(_input_seed(seed))
    return [torch.randint(0, BERT_VOCAB, (batch, seq_len), generator=g, dtype=torch.int64)]


def _input_seed(seed: int) -> int:
    """Seed of the input generator: a stream apart from the weights' one, still a function of ``seed``."""
    return (2 * int(seed) + 1) % (2 ** 63)


# --------------------------------------------------------------------------------------------------
# ResNet (He et al. 2016), torchvision layout
# --------------------------------------------------------------------------------------------------

class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _downsample(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)  # stride on the 3x3 (ResNet v1.5)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU()
        self.downsample = _downsample(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _downsample(inplanes: int, outplanes: int, stride: int) -> nn.Module | None:
    if stride == 1 and inplanes == outplanes:
        return None
    return nn.Sequential(nn.Conv2d(inplanes, outplanes, 1, stride, bias=False), nn.BatchNorm2d(outplanes))


class ResNet(nn.Module):
    """ResNet with torchvision's layout: 7x7 stem + maxpool, four stages, global average pool, fc."""

    def __init__(self, block: type[_BasicBlock] | type[_Bottleneck], layers: list[int],
                 num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        inplanes = 64
        stages = []
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), layers)):
            blocks = []
            for j in range(n):
                blocks.append(block(inplanes, planes, 2 if (i > 0 and j == 0) else 1))
                inplanes = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(batch: int = 1) -> nn.Module:
    """ResNet-18: BasicBlock x [2, 2, 2, 2]. ``batch`` is unused (the module takes any batch)."""
    return _finish(ResNet(_BasicBlock, [2, 2, 2, 2]))


def resnet50(batch: int = 1) -> nn.Module:
    """ResNet-50 (v1.5): Bottleneck x [3, 4, 6, 3]. ``batch`` is unused."""
    return _finish(ResNet(_Bottleneck, [3, 4, 6, 3]))


# --------------------------------------------------------------------------------------------------
# VGG-16 (Simonyan & Zisserman 2015), config D without batch norm
# --------------------------------------------------------------------------------------------------

_VGG16_CFG: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                               512, 512, 512, "M"]


class VGG(nn.Module):
    """VGG with torchvision's layout: 3x3 conv/ReLU features, 7x7 adaptive pool, 3-layer classifier."""

    def __init__(self, cfg: list[int | str], num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        from torch.nn.utils import skip_init

        layers: list[nn.Module] = []
        cin = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [skip_init(nn.Conv2d, cin, int(v), 3, padding=1), nn.ReLU()]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            skip_init(nn.Linear, 512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(dropout),
            skip_init(nn.Linear, 4096, 4096), nn.ReLU(), nn.Dropout(dropout),
            skip_init(nn.Linear, 4096, num_classes))
        # torchvision's VGG init (PyTorch's default one skipped: it would be drawn, then replaced):
        # with the default init and no batch norm, the signal fades through 13 convolutions and the
        # logits end up (almost) independent of the input.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def vgg16(batch: int = 1) -> nn.Module:
    """VGG-16 (configuration D, no batch norm). ``batch`` is unused."""
    return _finish(VGG(_VGG16_CFG))


# --------------------------------------------------------------------------------------------------
# AlexNet (Krizhevsky et al. 2012), torchvision's single-tower variant
# --------------------------------------------------------------------------------------------------

class AlexNet(nn.Module):
    """AlexNet with torchvision's layout (64/192/384/256/256 filters, 6x6 adaptive pool)."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(),
            nn.Dropout(dropout), nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def alexnet(batch: int = 1) -> nn.Module:
    """AlexNet. ``batch`` is unused."""
    return _finish(AlexNet())


# --------------------------------------------------------------------------------------------------
# SqueezeNet 1.0 (Iandola et al. 2016)
# --------------------------------------------------------------------------------------------------

class _Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand1x1: int, expand3x3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.squeeze_activation = nn.ReLU()
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, 1)
        self.expand1x1_activation = nn.ReLU()
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.0 with torchvision's layout (Fire modules, conv classifier, global average pool)."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(96, 16, 64, 64), _Fire(128, 16, 64, 64), _Fire(128, 32, 128, 128),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(256, 32, 128, 128), _Fire(256, 48, 192, 192), _Fire(384, 48, 192, 192), _Fire(384, 64, 256, 256),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(512, 64, 256, 256))
        final_conv = nn.Conv2d(512, num_classes, 1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), final_conv, nn.ReLU(), nn.AdaptiveAvgPool2d((1, 1)))
        # torchvision's SqueezeNet init (PyTorch's default init lets the signal fade, see VGG).
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is final_conv:
                    nn.init.normal_(m.weight, 0.0, 0.01)
                else:
                    nn.init.kaiming_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


def squeezenet1_0(batch: int = 1) -> nn.Module:
    """SqueezeNet 1.0. ``batch`` is unused."""
    return _finish(SqueezeNet())


# --------------------------------------------------------------------------------------------------
# DenseNet-121 (Huang et al. 2017)
# --------------------------------------------------------------------------------------------------

class _DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        x = self.conv1(self.relu1(self.norm1(x)))
        return self.conv2(self.relu2(self.norm2(x)))


class _DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers: int, cin: int, growth: int, bn_size: int) -> None:
        super().__init__()
        for i in range(num_layers):
            self[f"denselayer{i + 1}"] = _DenseLayer(cin + i * growth, growth, bn_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(cin)
        self.relu = nn.ReLU()
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.pool = nn.AvgPool2d(2, 2)


class DenseNet(nn.Module):
    """DenseNet-BC with torchvision's layout (7x7 stem + maxpool, dense blocks, 0.5 compression)."""

    def __init__(self, growth: int = 32, blocks: tuple[int, ...] = (6, 12, 24, 16), init_features: int = 64,
                 bn_size: int = 4, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential()
        self.features.add_module("conv0", nn.Conv2d(3, init_features, 7, 2, 3, bias=False))
        self.features.add_module("norm0", nn.BatchNorm2d(init_features))
        self.features.add_module("relu0", nn.ReLU())
        self.features.add_module("pool0", nn.MaxPool2d(3, 2, 1))
        n = init_features
        for i, num_layers in enumerate(blocks):
            self.features.add_module(f"denseblock{i + 1}", _DenseBlock(num_layers, n, growth, bn_size))
            n += num_layers * growth
            if i != len(blocks) - 1:
                self.features.add_module(f"transition{i + 1}", _Transition(n, n // 2))
                n //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(n))
        self.relu = nn.ReLU()
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Linear(n, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.relu(self.features(x)))
        return self.classifier(torch.flatten(x, 1))


def densenet121(batch: int = 1) -> nn.Module:
    """DenseNet-121: growth 32, blocks (6, 12, 24, 16). ``batch`` is unused."""
    return _finish(DenseNet())


# --------------------------------------------------------------------------------------------------
# MobileNetV2 (Sandler et al. 2018)
# --------------------------------------------------------------------------------------------------

class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1, act=nn.ReLU6))
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


_MOBILENET_V2_CFG = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                     (6, 320, 1, 1)]


class MobileNetV2(nn.Module):
    """MobileNetV2, width 1.0, with torchvision's layout (ReLU6, last conv to 1280, dropout + fc)."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2, act=nn.ReLU6)]
        cin = 32
        for t, c, n, s in _MOBILENET_V2_CFG:
            for i in range(n):
                layers.append(_InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn(cin, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v2(batch: int = 1) -> nn.Module:
    """MobileNetV2 (width 1.0). ``batch`` is unused."""
    return _finish(MobileNetV2())


# --------------------------------------------------------------------------------------------------
# EfficientNet-B0 (Tan & Le 2019)
# --------------------------------------------------------------------------------------------------

class _SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.SiLU()
        self.scale_activation = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class _MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1, act=nn.SiLU))
        layers += [_conv_bn(hidden, hidden, kernel, stride, groups=hidden, act=nn.SiLU),
                   _SqueezeExcitation(hidden, max(1, cin // 4)),
                   _conv_bn(hidden, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Stochastic depth is the identity in eval mode, so the residual is a plain add.
        return x + self.block(x) if self.use_res_connect else self.block(x)


_EFFICIENTNET_B0_CFG = [(1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3), (6, 112, 3, 1, 5),
                        (6, 192, 4, 2, 5), (6, 320, 1, 1, 3)]


class EfficientNet(nn.Module):
    """EfficientNet-B0 with torchvision's layout (MBConv + squeeze-excitation, SiLU, head to 1280)."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2, act=nn.SiLU)]
        cin = 32
        for expand, c, n, s, k in _EFFICIENTNET_B0_CFG:
            stage = []
            for i in range(n):
                stage.append(_MBConv(cin, c, k, s if i == 0 else 1, expand))
                cin = c
            layers.append(nn.Sequential(*stage))
        layers.append(_conv_bn(cin, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def efficientnet_b0(batch: int = 1) -> nn.Module:
    """EfficientNet-B0. ``batch`` is unused."""
    return _finish(EfficientNet())


# --------------------------------------------------------------------------------------------------
# MobileNetV3-Large (Howard et al. 2019), torchvision layout
# --------------------------------------------------------------------------------------------------

def _divisible(v: float, divisor: int = 8) -> int:
    """torchvision's ``_make_divisible``: round to a multiple of ``divisor``, never below 90% of ``v``."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class _SqueezeExcitationV3(nn.Module):
    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x))))) * x


class _InvertedResidualV3(nn.Module):
    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, act: type[nn.Module],
                 stride: int) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(_conv_bn(cin, expanded, 1, act=act))
        layers.append(_conv_bn(expanded, expanded, kernel, stride, groups=expanded, act=act))
        if se:
            layers.append(_SqueezeExcitationV3(expanded, _divisible(expanded // 4)))
        layers.append(_conv_bn(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res_connect else self.block(x)


#: (kernel, expanded, out, squeeze-excitation, hard-swish, stride) per block (the paper's Table 1).
_MOBILENET_V3_LARGE_CFG = [
    (3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
    (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
    (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
    (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
    (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1)]


class MobileNetV3(nn.Module):
    """MobileNetV3-Large with torchvision's layout (hard-swish, squeeze-excitation, head 960 -> 1280)."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 16, 3, 2, act=nn.Hardswish)]
        cin = 16
        for k, exp, out, se, hs, stride in _MOBILENET_V3_LARGE_CFG:
            layers.append(_InvertedResidualV3(cin, k, exp, out, se, nn.Hardswish if hs else nn.ReLU, stride))
            cin = out
        layers.append(_conv_bn(cin, 6 * cin, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * cin, 1280), nn.Hardswish(), nn.Dropout(dropout),
                                        nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v3_large(batch: int = 1) -> nn.Module:
    """MobileNetV3-Large. ``batch`` is unused."""
    return _finish(MobileNetV3())


# --------------------------------------------------------------------------------------------------
# ViT-B/16 (Dosovitskiy et al. 2021), torchvision's parameters (attention as one qkv projection)
# --------------------------------------------------------------------------------------------------

class _ViTAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        qkv = self.qkv(x).reshape(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        probs = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim)), dim=-1)
        return self.proj(torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h))


class _ViTBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-6)
        self.attention = _ViTAttention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp), nn.GELU(), nn.Linear(mlp, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    """ViT-B/16 at 224x224: 16x16 patches (a strided conv), class token, 12 pre-norm blocks."""

    def __init__(self, image: int = 224, patch: int = 16, hidden: int = 768, layers: int = 12, heads: int = 12,
                 mlp: int = 3072, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv_proj = nn.Conv2d(3, hidden, patch, patch)
        seq = (image // patch) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos_embedding = nn.Parameter(torch.empty(1, seq, hidden).normal_(std=0.02))
        self.layers = nn.Sequential(*[_ViTBlock(hidden, heads, mlp) for _ in range(layers)])
        self.ln = nn.LayerNorm(hidden, eps=1e-6)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        return self.head(self.ln(self.layers(x))[:, 0])


def vit_b16(batch: int = 1) -> nn.Module:
    """ViT-B/16 (224x224). ``batch`` is unused."""
    model = VisionTransformer()
    nn.init.normal_(model.class_token, std=0.02)
    return _finish(model, None)


# --------------------------------------------------------------------------------------------------
# BERT-base encoder (Devlin et al. 2019), HuggingFace BertModel layout
# --------------------------------------------------------------------------------------------------

class _BertEmbeddings(nn.Module):
    def __init__(self, vocab: int, hidden: int, max_positions: int, type_vocab: int, eps: float) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        # type_vocab 0: no token types (DistilBERT)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden) if type_vocab else None
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids", torch.arange(max_positions).unsqueeze(0), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        position_ids = self.position_ids[:, :seq]
        x = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        if self.token_type_embeddings is not None:
            x = x + self.token_type_embeddings(torch.zeros_like(input_ids))
        return self.dropout(self.LayerNorm(x))


class _BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.num_heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.reshape(b, s, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
        probs = self.dropout(torch.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v)
        return ctx.transpose(1, 2).reshape(b, s, h)


class _BertSelfOutput(nn.Module):
    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class _BertAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, eps: float) -> None:
        super().__init__()
        self.self = _BertSelfAttention(hidden, heads)
        self.output = _BertSelfOutput(hidden, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x), x)


class _BertIntermediate(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, intermediate)
        self.intermediate_act_fn = nn.GELU()  # exact (erf) GELU, as HF "gelu"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(x))


class _BertOutput(nn.Module):
    def __init__(self, intermediate: int, hidden: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(intermediate, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class _BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float) -> None:
        super().__init__()
        self.attention = _BertAttention(hidden, heads, eps)
        self.intermediate = _BertIntermediate(hidden, intermediate)
        self.output = _BertOutput(intermediate, hidden, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.attention(x)
        return self.output(self.intermediate(a), a)


class _BertEncoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, intermediate: int, eps: float) -> None:
        super().__init__()
        self.layer = nn.ModuleList([_BertLayer(hidden, heads, intermediate, eps) for _ in range(layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class _BertPooler(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x[:, 0]))


class BertModel(nn.Module):
    """BERT encoder with HuggingFace ``BertModel``'s layout and parameter names, no attention mask.

    ``forward(input_ids)`` takes int64 ids of shape ``(batch, seq)`` (``seq <= 512``); token types
    are all zero and positions ``0..seq-1``. It returns ``(last_hidden_state, pooled_output)`` of
    shapes ``(batch, seq, hidden)`` and ``(batch, hidden)``.
    """

    def __init__(self, vocab: int = BERT_VOCAB, hidden: int = 768, layers: int = 12, heads: int = 12,
                 intermediate: int = 3072, max_positions: int = 512, type_vocab: int = 2,
                 eps: float = 1e-12) -> None:
        super().__init__()
        self.embeddings = _BertEmbeddings(vocab, hidden, max_positions, type_vocab, eps)
        self.encoder = _BertEncoder(layers, hidden, heads, intermediate, eps)
        self.pooler = _BertPooler(hidden)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden_states = self.encoder(self.embeddings(input_ids))
        return hidden_states, self.pooler(hidden_states)


def bert_base(batch: int = 1) -> nn.Module:
    """BERT-base (uncased vocabulary size) with pooler. ``batch`` is unused."""
    return _finish(BertModel(), None)


# --------------------------------------------------------------------------------------------------
# DistilBERT-base (Sanh et al. 2019): BERT's layer, 6 of them, no token types and no pooler
# --------------------------------------------------------------------------------------------------

class DistilBertModel(nn.Module):
    """DistilBERT encoder (``distilbert-base-uncased``'s dimensions: 6 layers, hidden 768, 12 heads,
    FFN 3072), no attention mask. ``forward(input_ids)`` takes int64 ids ``(batch, seq)`` and
    returns the last hidden state ``(batch, seq, hidden)``."""

    def __init__(self, vocab: int = BERT_VOCAB, hidden: int = 768, layers: int = 6, heads: int = 12,
                 intermediate: int = 3072, max_positions: int = 512, eps: float = 1e-12) -> None:
        super().__init__()
        self.embeddings = _BertEmbeddings(vocab, hidden, max_positions, 0, eps)
        self.transformer = _BertEncoder(layers, hidden, heads, intermediate, eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.transformer(self.embeddings(input_ids))


def distilbert(batch: int = 1) -> nn.Module:
    """DistilBERT-base. ``batch`` is unused."""
    return _finish(DistilBertModel(), None)


def _distilbert_inputs(batch: int, seed: int) -> list[torch.Tensor]:
    """``input_ids`` of SQuAD's sequence length for DistilBERT (384)."""
    return _bert_inputs(batch, seed, DISTILBERT_SEQ_LEN)


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ZooModel:
    """One built-in model.

    ``build(batch)`` returns the module in eval mode (with weights drawn from torch's global RNG;
    use :func:`build_model` for seeded weights); ``inputs(batch, seed)`` returns the example inputs
    the module's ``forward`` takes, as a list.
    """

    name: str
    description: str
    build: Callable[..., nn.Module]
    inputs: Callable[[int, int], list[torch.Tensor]]


MODELS: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("resnet18", "ResNet-18 (He et al. 2016), 224x224", resnet18, _image_inputs),
    ZooModel("resnet50", "ResNet-50 v1.5 (He et al. 2016), 224x224", resnet50, _image_inputs),
    ZooModel("vgg16", "VGG-16, config D without batch norm (Simonyan & Zisserman 2015), 224x224", vgg16,
             _image_inputs),
    ZooModel("alexnet", "AlexNet, torchvision variant (Krizhevsky et al. 2012), 224x224", alexnet, _image_inputs),
    ZooModel("squeezenet1_0", "SqueezeNet 1.0 (Iandola et al. 2016), 224x224", squeezenet1_0, _image_inputs),
    ZooModel("densenet121", "DenseNet-121 (Huang et al. 2017), 224x224", densenet121, _image_inputs),
    ZooModel("mobilenet_v2", "MobileNetV2, width 1.0 (Sandler et al. 2018), 224x224", mobilenet_v2, _image_inputs),
    ZooModel("efficientnet_b0", "EfficientNet-B0 (Tan & Le 2019), 224x224", efficientnet_b0, _image_inputs),
    ZooModel("mobilenet_v3_large", "MobileNetV3-Large (Howard et al. 2019), 224x224", mobilenet_v3_large,
             _image_inputs),
    ZooModel("vit_b16", "ViT-B/16 (Dosovitskiy et al. 2021), 224x224", vit_b16, _image_inputs),
    ZooModel("bert_base", f"BERT-base encoder + pooler (Devlin et al. 2019), seq {BERT_SEQ_LEN}", bert_base,
             _bert_inputs),
    ZooModel("distilbert", f"DistilBERT-base encoder (Sanh et al. 2019), seq {DISTILBERT_SEQ_LEN} (SQuAD's)",
             distilbert, _distilbert_inputs),
]}


class UnknownModelError(TensortuneError, KeyError, ValueError):
    """A model name not in :data:`MODELS` (both a ``KeyError`` and a ``ValueError``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def model_names() -> list[str]:
    """Names of the built-in models, in registry order."""
    return list(MODELS)


def build_model(name: str, batch: int = 1, seed: int = 0) -> tuple[nn.Module, list[torch.Tensor]]:
    """Build model ``name`` with seeded random weights, in eval mode, and its example inputs.

    The same ``(name, batch, seed)`` always gives identical weights and inputs; the caller's
    global torch RNG state is restored afterwards. Raises :class:`UnknownModelError` for an
    unknown name and ``ValueError`` for ``batch < 1``.
    """
    spec = MODELS.get(name)
    if spec is None:
        raise UnknownModelError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = spec.build(batch)
    return model, spec.inputs(batch, seed)
