"""The packaged predictors load without pickle and score real candidates of their op."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from tensortune.costmodel.pretrained import available_ops, predictor_folder
from tensortune.learn import load_predictor
from tensortune.task import Task

ZNVER4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}
#: A small task of each op a predictor may be packaged for.
SHAPES = {"conv2d": (14, 14, 32, 32, 3, 1, 1), "conv2d_nchwc": (14, 14, 32, 32, 3, 1, 1, 16, 16),
          "depthwise_conv2d_nchwc": (14, 14, 32, 3, 1, 1, 16), "dense_pack": (16, 64, 64, 16)}


@pytest.mark.parametrize("op", available_ops() or [pytest.param("none", marks=pytest.mark.skip("none packaged"))])
def test_packaged_predictor(op) -> None:
    p = load_predictor(predictor_folder(op))
    assert p.op == op and p.schema["dataset"]["tasks"] >= 1 and p.machine.get("cpu_model")
    assert p.schema.get("command", "").startswith("tensortune predictor train")
    assert p.schema["weights_dtype"] == "float16"  # stored at half size, computed in float32
    assert all(v.dtype == torch.float32 for v in p.net.state_dict().values() if v.is_floating_point())
    if op not in SHAPES:
        pytest.skip(f"no test shape for {op}")
    task = Task.from_op(op, SHAPES[op], target=ZNVER4)
    scores = p.predict(task, task.space.sample(random.Random(0), 24))
    assert scores.shape == (24,) and np.isfinite(scores).all() and scores.std() > 0
