"""Transfer's view of the pre-training tasks: read from a model's own schema (so the shipped
model transfers without its dataset), or from the pre-training file."""
from __future__ import annotations

import pytest

from tensortune.costmodel.fasor import FASOR_SHIPPED
from tensortune.app.fasor import PretrainingTasks, parse_task_name
from tensortune.costmodel.pretrained import available_ops, predictor_folder
from tensortune.learn.predictor import load_predictor


def test_task_names_parse_and_bad_ones_are_refused() -> None:
    assert parse_task_name("conv2d_nchwc(H=7,W=7,IC=32,OC=64,K=3,S=1,P=1,IB=16,OB=16)") == (
        "conv2d_nchwc", {"H": 7, "W": 7, "IC": 32, "OC": 64, "K": 3, "S": 1, "P": 1, "IB": 16, "OB": 16})
    for bad in ("conv2d", "conv2d(H=x)", "conv2d(H=1", "(H=1)"):
        with pytest.raises(ValueError, match="not a task name"):
            parse_task_name(bad)


@pytest.mark.parametrize("op", available_ops(FASOR_SHIPPED))
def test_the_shipped_model_names_its_pretraining_tasks(op) -> None:
    base = load_predictor(predictor_folder(op, FASOR_SHIPPED))
    pt = PretrainingTasks.of_model(base)
    names = base.schema["dataset"]["task_names"]
    op_class = {"conv2d_nchwc": "conv2d", "depthwise_conv2d_nchwc": "depthwise_conv2d", "dense_pack": "dense"}[op]
    assert (pt.op, pt.op_class, len(pt.args)) == (op, op_class, len(names))  # the dataset's op
    assert pt.features.shape == (len(names), len(base.schema["inputs"]["task_features"]))
    assert set(pt.heldout) == set(base.schema["heldout"]["task_ids"]) and pt.heldout
    reps = pt.representatives(10)
    assert len(set(reps)) == 10 and not set(reps) & set(pt.heldout)  # shots never from the held-out tasks
    assert reps == pt.representatives(10)  # deterministic
    tasks = pt.tasks(reps[:2], {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver3", "num-cores": 2})
    assert [t.name for t in tasks] == [names[i] for i in reps[:2]]
