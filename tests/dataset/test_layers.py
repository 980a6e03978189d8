"""Layer statistics: what a model's forward pass records, and the shipped zoo statistics."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from tensortune.dataset.layers import EVALUATED, ZOO_LAYERS, LayerStats, collect, load, save, zoo_statistics


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, 2, 1)
        self.dw = nn.Conv2d(8, 8, 5, 1, 2, groups=8)
        self.grouped = nn.Conv2d(8, 8, 3, 1, 1, groups=2)
        self.dilated = nn.Conv2d(8, 8, 3, 1, 2, dilation=2)
        self.again = nn.Conv2d(8, 8, 5, 1, 2, groups=8)  # the same depthwise layer twice
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.again(self.dilated(self.grouped(self.dw(self.conv(x)))))
        return self.fc(x.mean((2, 3)))


def test_collect_records_each_layer_as_its_op() -> None:
    s = collect(Mixed().eval(), [torch.randn(1, 3, 16, 16)], "mixed")
    assert s.rows() == [
        ("conv2d", {"H": 16, "W": 16, "IC": 3, "OC": 8, "K": 3, "S": 2, "P": 1}, 1),
        ("dense", {"M": 1, "N": 10, "K": 8}, 1),
        ("depthwise_conv2d", {"H": 8, "W": 8, "C": 8, "K": 5, "S": 1, "P": 2}, 2),
    ]
    assert dict(s.skipped) == {"grouped conv2d": 1, "conv2d (non-square, dilated or string padding)": 1}
    again = LayerStats.from_json(json.loads(json.dumps(s.to_json())))
    assert again.layers == s.layers and again.skipped == s.skipped


def test_shipped_zoo_statistics_match_a_fresh_collection_and_keep_evaluated_models_apart(tmp_path) -> None:
    prior, evaluated = load()
    assert {s.model for s in evaluated} == set(EVALUATED)
    assert not {s.model for s in prior} & set(EVALUATED) and len(prior) >= 5
    (fresh,) = zoo_statistics(["alexnet"])  # the cheapest model of the prior, collected now
    shipped = next(s for s in prior if s.model == "alexnet")
    assert fresh.layers == shipped.layers
    save([fresh], tmp_path / "a.json")
    assert [s.model for s in load(tmp_path / "a.json")[0]] == ["alexnet"]


def test_a_malformed_file_is_refused(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"prior": [{"model": "x", "layers": [{"op": "conv3d", "args": {}, "count": 1}]}], "evaluated": []}')
    with pytest.raises(ValueError, match="unknown op 'conv3d'"):
        load(bad)
    bad.write_text("not json")
    with pytest.raises(ValueError, match="not a layer statistics file"):
        load(bad)
    assert ZOO_LAYERS.is_file()
