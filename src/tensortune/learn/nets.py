"""The neural predictors: a Transformer encoder (One-Shot Tuner), and MLP and LSTM for ablation.

Every net maps a standardised flat input row ``[curve | knob | task]`` to one number, the
predicted normalised throughput. The sequence models read the row as tokens (:class:`TokenLayout`):
one token per buffer of the context-relation features (its relation curves), one for the
curve's global features, one for the knob values and one for the task features; each kind of
token has its own linear embedding into ``d_model``, plus a learned position embedding.

Nets are built by name from :data:`NETS` with their hyper-parameters (kept in the predictor's
schema, so a saved state dict is rebuilt into the same shape).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class TokenLayout:
    """How a flat input row splits into tokens: ``sizes[i]`` columns for token ``i``, in order;
    tokens of equal ``kinds[i]`` share their embedding."""

    sizes: tuple[int, ...]
    kinds: tuple[int, ...]

    @classmethod
    def for_inputs(cls, curve_dim: int, knob_dim: int, task_dim: int, curve_buffers: int, curve_globals: int,
                   hw_dim: int = 0) -> "TokenLayout":
        """Curve per buffer, curve globals, knobs, task features, hardware features (empty parts dropped)."""
        block = (curve_dim - curve_globals) // curve_buffers if curve_buffers else 0
        if block * curve_buffers + curve_globals != curve_dim:
            raise ValueError(f"curve width {curve_dim} is not {curve_buffers} buffers + {curve_globals} globals")
        sizes, kinds = [block] * curve_buffers, [0] * curve_buffers
        for kind, size in ((1, curve_globals), (2, knob_dim), (3, task_dim), (4, hw_dim)):
            if size:
                sizes.append(size)
                kinds.append(kind)
        return cls(tuple(sizes), tuple(kinds))

    @property
    def width(self) -> int:
        """Columns of a row."""
        return sum(self.sizes)


class _Tokens(nn.Module):
    """Flat rows -> ``[batch, tokens, d_model]``: a linear embedding per token kind + positions."""

    def __init__(self, layout: TokenLayout, d_model: int) -> None:
        super().__init__()
        self.layout = layout
        first: dict[int, int] = {}
        for i, k in enumerate(layout.kinds):
            first.setdefault(k, i)
        self.embed = nn.ModuleList(nn.Linear(layout.sizes[first[k]], d_model) for k in sorted(first))
        self.kind_slot = {k: j for j, k in enumerate(sorted(first))}
        self.position = nn.Parameter(torch.zeros(len(layout.sizes), d_model))
        nn.init.normal_(self.position, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, start = [], 0
        for size, kind in zip(self.layout.sizes, self.layout.kinds):
            out.append(self.embed[self.kind_slot[kind]](x[:, start:start + size]))
            start += size
        return torch.stack(out, dim=1) + self.position


@dataclass(frozen=True)
class TransformerConfig:
    """One-Shot Tuner's predictor (its Table 2): 3 encoder layers, 4 heads, feed-forward 1024,
    dropout 0.25; ``d_model`` is ours (the paper does not give it)."""

    d_model: int = 128
    layers: int = 3
    heads: int = 4
    ff: int = 1024
    dropout: float = 0.25


class TransformerRegressor(nn.Module):
    """``torch.nn.TransformerEncoder`` over the input's tokens, mean-pooled, and a linear head."""

    Config = TransformerConfig

    def __init__(self, layout: TokenLayout, config: TransformerConfig = TransformerConfig(), outputs: int = 1) -> None:
        super().__init__()
        c = config
        self.tokens = _Tokens(layout, c.d_model)
        layer = nn.TransformerEncoderLayer(c.d_model, c.heads, c.ff, c.dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, c.layers, enable_nested_tensor=False)
        self.head = nn.Linear(c.d_model, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _squeeze(self.head(self.encoder(self.tokens(x)).mean(dim=1)))


@dataclass(frozen=True)
class LSTMConfig:
    """A 2-layer LSTM over the same tokens (ablation)."""

    d_model: int = 128
    layers: int = 2
    dropout: float = 0.25


class LSTMRegressor(nn.Module):
    """An LSTM reads the tokens in order; its last hidden state feeds a linear head."""

    Config = LSTMConfig

    def __init__(self, layout: TokenLayout, config: LSTMConfig = LSTMConfig(), outputs: int = 1) -> None:
        super().__init__()
        c = config
        self.tokens = _Tokens(layout, c.d_model)
        self.lstm = nn.LSTM(c.d_model, c.d_model, c.layers, batch_first=True, dropout=c.dropout if c.layers > 1 else 0.0)
        self.head = nn.Linear(c.d_model, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.tokens(x))
        return _squeeze(self.head(out[:, -1]))


@dataclass(frozen=True)
class MLPConfig:
    """Fully connected layers over the flat row (ablation)."""

    hidden: tuple[int, ...] = (512, 256, 128)
    dropout: float = 0.25


class MLPRegressor(nn.Module):
    """Linear + ReLU + dropout per hidden width, then a linear head."""

    Config = MLPConfig

    def __init__(self, layout: TokenLayout, config: MLPConfig = MLPConfig(), outputs: int = 1) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = layout.width
        for h in config.hidden:
            layers += [nn.Linear(width, h), nn.ReLU(), nn.Dropout(config.dropout)]
            width = h
        layers.append(nn.Linear(width, outputs))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _squeeze(self.net(x))


def _squeeze(y: torch.Tensor) -> torch.Tensor:
    """``[batch]`` for a one-output head, ``[batch, outputs]`` otherwise."""
    return y.squeeze(-1) if y.shape[-1] == 1 else y


def xavier_init(net: nn.Module) -> None:
    """Xavier-uniform weights and zero biases for every linear layer and every matrix of the
    attention blocks (Fasor's initialisation); embeddings of positions keep theirs."""
    for name, p in net.named_parameters():
        if p.dim() >= 2 and not name.endswith("position"):
            nn.init.xavier_uniform_(p)
        elif name.endswith("bias"):
            nn.init.zeros_(p)


#: Neural predictors by name.
NETS: dict[str, type[nn.Module]] = {"transformer": TransformerRegressor, "mlp": MLPRegressor, "lstm": LSTMRegressor}


def make_net(kind: str, layout: TokenLayout, config: dict[str, Any] | None = None,
             outputs: int = 1) -> tuple[nn.Module, dict[str, Any]]:
    """The net ``kind`` for ``layout`` with ``outputs`` heads and its hyper-parameters from
    ``config`` (defaults for the rest), and every hyper-parameter it was built with (JSON-ready,
    for the schema)."""
    if kind not in NETS:
        raise ValueError(f"unknown net {kind!r}; known: {', '.join(NETS)}")
    from ..utils.options import OptionError, make_options

    cls: Any = NETS[kind]
    try:
        cfg = make_options(cls.Config, dict(config or {}), owner=f"net {kind!r}")
    except OptionError as exc:
        raise ValueError(str(exc)) from None
    return cls(layout, cfg, outputs), asdict(cfg)
