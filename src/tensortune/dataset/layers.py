"""Layer statistics of model definitions: the prior of prior-guided task sampling.

One-Shot Tuner (Ryu et al., CC 2022, Algorithm 1) draws its synthetic tasks from the layers
that real models contain. :func:`collect` runs a PyTorch module once with forward hooks on its
``Conv2d`` and ``Linear`` layers and records every layer as the tensortune op that computes it:

- ``conv2d`` (``H, W, IC, OC, K, S, P``): a convolution with one group, a square kernel, equal
  strides and paddings, no dilation;
- ``depthwise_conv2d`` (``H, W, C, K, S, P``): groups == in channels == out channels;
- ``dense`` (``M, N, K``): a linear layer, ``M`` the product of its input's leading dimensions.

Anything else (grouped, dilated or non-square convolutions) is counted under ``skipped``. The
batch is recorded with each model (tensortune's convolutions are batch 1).

The statistics of the built-in zoo ship with the package (``zoo_layers.json``, made by
:func:`zoo_statistics`; ``tests/dataset`` checks one model against a fresh collection). The
models One-Shot's evaluation uses (resnet18, mobilenet_v2, bert_base) are kept apart from the
prior (§5 of the paper), under ``evaluated``, so that what the prior happens to contain of them
can be counted.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

#: The models the One-Shot evaluation measures: never part of the prior.
EVALUATED = ("resnet18", "mobilenet_v2", "bert_base")
#: The shipped statistics of the zoo.
ZOO_LAYERS = Path(__file__).with_name("zoo_layers.json")
#: Op classes the statistics describe, with their shape arguments in tensortune's order.
OP_ARGS = {"conv2d": ("H", "W", "IC", "OC", "K", "S", "P"),
           "depthwise_conv2d": ("H", "W", "C", "K", "S", "P"),
           "dense": ("M", "N", "K")}


@dataclass
class LayerStats:
    """The layers of one model: ``layers[(op, args as a tuple)] = count``, plus what was skipped."""

    model: str
    batch: int = 1
    layers: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)

    def add(self, op: str, args: dict[str, int]) -> None:
        self.layers[(op, tuple(int(args[a]) for a in OP_ARGS[op]))] += 1

    def rows(self, op: str | None = None) -> list[tuple[str, dict[str, int], int]]:
        """``(op, args, count)`` per distinct layer, optionally of one op class."""
        return [(o, dict(zip(OP_ARGS[o], a)), n) for (o, a), n in sorted(self.layers.items())
                if op is None or o == op]

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "batch": self.batch,
                "layers": [{"op": o, "args": a, "count": n} for o, a, n in self.rows()],
                "skipped": dict(self.skipped)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "LayerStats":
        s = cls(str(d["model"]), int(d.get("batch", 1)))
        for row in d["layers"]:
            op = row["op"]
            if op not in OP_ARGS:
                raise ValueError(f"layer statistics of {s.model}: unknown op {op!r}")
            s.layers[(op, tuple(int(row["args"][a]) for a in OP_ARGS[op]))] += int(row["count"])
        s.skipped.update({str(k): int(v) for k, v in d.get("skipped", {}).items()})
        return s


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def collect(module: Any, inputs: Sequence[Any], name: str, batch: int = 1) -> LayerStats:
    """Run ``module(*inputs)`` once (no gradients) and record its Conv2d and Linear layers."""
    import torch
    from torch import nn

    stats = LayerStats(name, batch)

    def conv_hook(mod: nn.Conv2d, args: tuple, _out: Any) -> None:
        x = args[0]
        (kh, kw), (sh, sw), (dh, dw) = _pair(mod.kernel_size), _pair(mod.stride), _pair(mod.dilation)
        pad = mod.padding
        if isinstance(pad, str) or len({*_pair(pad)}) != 1 or kh != kw or sh != sw or (dh, dw) != (1, 1) \
                or x.shape[-1] != x.shape[-2]:
            stats.skipped["conv2d (non-square, dilated or string padding)"] += 1
            return
        p = _pair(pad)[0]
        h, w = int(x.shape[-2]), int(x.shape[-1])
        cin, cout, g = mod.in_channels, mod.out_channels, mod.groups
        if g == 1:
            stats.add("conv2d", {"H": h, "W": w, "IC": cin, "OC": cout, "K": kh, "S": sh, "P": p})
        elif g == cin == cout:
            stats.add("depthwise_conv2d", {"H": h, "W": w, "C": cin, "K": kh, "S": sh, "P": p})
        else:
            stats.skipped["grouped conv2d"] += 1

    def linear_hook(mod: nn.Linear, args: tuple, _out: Any) -> None:
        x = args[0]
        m = 1
        for d in x.shape[:-1]:
            m *= int(d)
        stats.add("dense", {"M": m, "N": mod.out_features, "K": mod.in_features})

    handles = []
    for mod in module.modules():
        if isinstance(mod, nn.Conv2d):
            handles.append(mod.register_forward_hook(conv_hook))
        elif isinstance(mod, nn.Linear):
            handles.append(mod.register_forward_hook(linear_hook))
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in handles:
            h.remove()
    return stats


def zoo_statistics(names: Iterable[str] | None = None) -> list[LayerStats]:
    """Statistics of built-in zoo models (all of them by default), batch 1."""
    from ..models.zoo import build_model, model_names

    out = []
    for name in (names or model_names()):
        module, inputs = build_model(name, batch=1, seed=0)
        out.append(collect(module, inputs, name))
    return out


def save(stats: Sequence[LayerStats], path: str | Path) -> None:
    """Write statistics as JSON (prior and evaluated models apart; see the module)."""
    from ..utils.atomic import atomic_write

    prior = [s.to_json() for s in stats if s.model not in EVALUATED]
    evaluated = [s.to_json() for s in stats if s.model in EVALUATED]
    atomic_write(path, json.dumps({"about": "layer statistics of model definitions (tensortune.dataset.layers)",
                                   "prior": prior, "evaluated": evaluated}, indent=1))


def load(path: str | Path = ZOO_LAYERS) -> tuple[list[LayerStats], list[LayerStats]]:
    """(prior models, evaluated models) from a statistics file (ValueError for a malformed one)."""
    try:
        d = json.loads(Path(path).read_text())
        return ([LayerStats.from_json(x) for x in d["prior"]], [LayerStats.from_json(x) for x in d["evaluated"]])
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a layer statistics file ({exc})") from None
