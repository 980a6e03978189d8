"""``tensortune dataset layers|tasks``."""
from __future__ import annotations

import json

from tensortune.cli import main
from tensortune.dataset.layers import load


def test_tasks_and_layers_from_the_command_line(tmp_path, capfd) -> None:
    assert main(["dataset", "tasks", "--op", "depthwise_conv2d", "-n", "7", "--seed", "3", "--json"]) == 0
    out = json.loads(capfd.readouterr().out)
    assert out["sampler"] == "pgs" and len(out["tasks"]) == 7 and out["evaluated_layers"] > 0
    assert main(["dataset", "tasks", "--sampler", "nope"]) == 2
    assert capfd.readouterr().err.strip() == "tensortune: error: unknown task sampler 'nope'; known: pgs, random, modelzoo"
    path = tmp_path / "l.json"
    assert main(["dataset", "layers", "--models", "alexnet,resnet18", "-o", str(path)]) == 0
    prior, evaluated = load(path)
    assert [s.model for s in prior] == ["alexnet"] and [s.model for s in evaluated] == ["resnet18"]
    before = path.read_bytes()
    assert main(["dataset", "layers", "--models", "alexnet", "-o", str(path)]) == 2  # no overwrite without --force
    assert path.read_bytes() == before
    assert main(["dataset", "layers", "--models", "lenet", "-o", str(tmp_path / "x.json")]) == 2
