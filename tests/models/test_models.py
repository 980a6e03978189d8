"""Import, task extraction, compilation and export of whole models (a tiny CNN, an ONNX file)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from tensortune.budget import Budget
from tensortune.database import Database
from tensortune.measure import MeasureOptions, Measurer
from tensortune.models.compile import compile_model, load_library, model_tasks
from tensortune.models.importer import ModelError, load_model
from tensortune.models.reference import OrtRunner, TorchRunner, compare_outputs, export_onnx
from tensortune.scheduler import RoundRobinScheduler, SequentialScheduler
from tensortune.tuners import get_tuner

from tiny import dense_class, tiny


def generous() -> MeasureOptions:
    """Default measuring, with build and run limits only a hanging candidate reaches (a busy
    2-core machine can take many seconds to compile)."""
    return MeasureOptions(build_timeout=300.0, run_timeout=300.0)


@pytest.fixture(scope="module")
def model():
    m, x = tiny()
    return load_model(m, x)


def test_tasks_fuse_epilogues_and_fold_batch_norm(model):
    tasks = model_tasks(model)
    classes = {t.kernel_class: t for t in tasks}
    assert "conv2d_nchwc-add-relu" in classes  # BN folded into the conv's constants: only a bias add remains
    assert any(c.startswith("depthwise_conv2d_nchwc-add-clip") for c in classes), classes
    assert dense_class() in classes, classes  # the linear layer, packed or not by the host's lanes
    conv = classes["conv2d_nchwc-add-relu"].task
    assert conv.template_name == "conv2d_nchwc"
    assert conv.args == {"H": 16, "W": 16, "IC": 3, "OC": 8, "K": 3, "S": 1, "P": 1, "IB": 3, "OB": 8}
    assert not any("subtract" in c or "divide" in c for c in classes)
    assert sum(t.weight for t in tasks) >= 4
    # every task's default config builds, runs and matches TVM's unscheduled function
    with Measurer(generous()) as m:
        from tensortune.measure import MeasureInput

        res = m.measure([MeasureInput(t.task, t.task.default_config()) for t in tasks])
    assert all(r.ok for r in res), [(t.task.name, r.error, r.error_msg) for t, r in zip(tasks, res)]


def test_compile_default_matches_pytorch_and_exports(model, tmp_path):
    cm = compile_model(model)
    assert cm.counts()["naive"] == 0 and cm.counts()["tuned"] == 0
    ref = TorchRunner(model.torch_module).run(model.example_inputs)
    check = compare_outputs(cm.run(model.example_inputs), ref)
    assert check.ok, check.message
    lib, meta = cm.export(str(tmp_path / "tiny.so"))
    assert os.path.exists(meta)
    f = load_library(lib)
    assert compare_outputs(f(*model.example_inputs), ref).ok


@pytest.mark.slow  # end to end: a model tuned, compiled, resumed
def test_tune_then_compile_uses_records_and_resumes(model, tmp_path):
    tasks = model_tasks(model)
    db = Database(str(tmp_path / "t.db"))
    def make(task, r):
        tuner = get_tuner("random", task, seed=r, batch_size=2)
        tuner.confirm_top = tuner.confirm_rounds = 1  # each call's confirmation at its smallest (tests/tuners size it)
        return tuner

    with Measurer(generous()) as m:
        out = RoundRobinScheduler(tasks, make, m, db, Budget(trials=3), batch_size=2).run()
        assert all(db.count(t.task.workload_key) == 3 for t in tasks if t.tunable)
        assert all(o.best_s < float("inf") for o in out)
        again = SequentialScheduler(tasks, make, m, db, Budget(trials=3)).run()  # resume: nothing left
        assert sum(o.measured for o in again) == 0
    cm = compile_model(model, db)
    assert cm.counts()["tuned"] == len(tasks)
    ref = TorchRunner(model.torch_module).run(model.example_inputs)
    assert compare_outputs(cm.run(model.example_inputs), ref).ok
    db.close()


def test_onnx_model_compiles_and_matches_onnxruntime(tmp_path):
    m, x = tiny()
    path = export_onnx(m, x, str(tmp_path / "tiny.onnx"))
    model = load_model(path)
    assert model.source == "onnx" and model.inputs[0].shape == (1, 3, 16, 16)
    kinds = {t.kernel_class for t in model_tasks(model)}
    assert {"conv2d_nchwc-add-relu", "depthwise_conv2d_nchwc-add-clip-add"} <= kinds, kinds  # ONNX's Clip follows the block
    cm = compile_model(model)
    ref = OrtRunner(path).run(model.example_inputs)
    assert compare_outputs(cm.run(model.example_inputs), ref).ok


class Shuffle(torch.nn.Module):
    """ShuffleNet's unit: exporters write its split and channel shuffle as Shape -> Gather -> Div chains."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=1)
        out = torch.cat((a, torch.relu(self.conv(b))), dim=1)
        n, c, h, w = out.shape
        return out.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)


def test_onnx_shape_arithmetic_is_folded_to_static_shapes(tmp_path):
    torch.manual_seed(0)
    m, x = Shuffle().eval(), torch.randn(1, 8, 6, 6)
    path = export_onnx(m, [x], str(tmp_path / "shuffle.onnx"))
    model = load_model(path)
    # 4 channels: blocked by 4 on AVX2, NCHW where the smallest block is 8 (AVX-512); the shuffle's
    # reshape and transpose cannot follow a block, so they get layout transforms around them
    assert {t.kernel_class for t in model_tasks(model)} & {"conv2d-add-relu", "conv2d_nchwc-add-relu"}
    ref = OrtRunner(path).run(model.example_inputs)
    assert compare_outputs(compile_model(model).run(model.example_inputs), ref).ok


class DataDependent(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x > 0).float().sum(0)


def test_data_dependent_shape_is_refused_in_one_line(tmp_path):
    path = export_onnx(DataDependent(), [torch.randn(4, 4)], str(tmp_path / "nonzero.onnx"))
    with pytest.raises(ModelError, match="known only at run time") as e:
        load_model(path)
    assert "\n" not in str(e.value)


def test_import_errors_are_one_line(tmp_path):
    with pytest.raises(ModelError, match="no such file, and not a built-in model"):
        load_model(str(tmp_path / "missing.onnx"))
    with pytest.raises(ModelError, match="is a directory"):
        load_model(str(tmp_path))
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model")
    with pytest.raises(ModelError, match="not an ONNX model"):
        load_model(str(bad))
    m, x = tiny()
    dyn = str(tmp_path / "dyn.onnx")
    torch.onnx.export(m, tuple(x), dyn, input_names=["image"], dynamic_axes={"image": {0: "batch"}}, dynamo=False)
    with pytest.raises(ModelError, match="dynamic dimension 'batch' at axis 0") as e:
        load_model(dyn)
    assert "\n" not in str(e.value)
    fixed = load_model(dyn, input_shapes={"image": (1, 3, 16, 16)})
    assert fixed.inputs[0].shape == (1, 3, 16, 16)
    with pytest.raises(ModelError, match="no input named"):
        load_model(dyn, input_shapes={"nope": (1,)})


class Unsupported(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigh(x @ x.T)[0]


def test_unsupported_operator_is_named():
    with pytest.raises(ModelError) as e:
        load_model(Unsupported(), [torch.randn(4, 4)])
    assert "Unsupported" in str(e.value) and "eigh" in str(e.value) and "\n" not in str(e.value)


def test_builtin_model_names_resolve():
    with pytest.raises(ModelError, match="built-ins: resnet18"):
        load_model("resnet19")
    assert np.all(np.isfinite(load_model("mobilenet_v2").example_inputs[0]))
