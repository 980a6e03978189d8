"""A sum across rows (a mean over tokens) is not split into partial sums: those read the rows
with a stride and vectorised every column at once (a 448-wide vector took LLVM 69 s to build)."""
from __future__ import annotations

import re

import torch
from torch import nn

from tensortune.models.compile import compile_model, model_tasks
from tensortune.models.importer import load_model
from tensortune.models.reference import TorchRunner, compare_outputs
from tensortune.templates.generic import MAX_LANE_LOOP


class TokenMean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, -1).mean(1)  # a row reduction (softmax), then one across rows


def test_a_mean_across_rows_keeps_short_vectors_and_matches() -> None:
    model = load_model(TokenMean(), [torch.randn(1, 49, 448, generator=torch.Generator().manual_seed(0))])
    tasks = [mt.task for mt in model_tasks(model) if mt.task.template_name == "generic"]
    assert tasks
    for task in tasks:
        text = task.instantiate(task.default_config()).script()
        widths = [int(w) for w in re.findall(r"T\.vectorized\((?:T\.int64\()?(\d+)", text)]
        assert widths and max(widths) <= MAX_LANE_LOOP, (task.kernel_class, widths)
    cm = compile_model(model)
    check = compare_outputs(cm.run(model.example_inputs), TorchRunner(model.torch_module).run(model.example_inputs))
    assert check.ok, check.message
