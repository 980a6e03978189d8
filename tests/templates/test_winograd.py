"""Winograd F(m, 3): the algorithm knob of a blocked 3x3 stride-1 conv, checked like any candidate."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tensortune.measure import MeasureInput, Measurer, MeasureOptions
from tensortune.models.compile import compile_model, model_tasks, schedule_module
from tensortune.models.importer import load_model
from tensortune.models.reference import compare_outputs
from tensortune.target import host_target_json
from tensortune.task.task import Task
from tensortune.templates.winograd import TILE_SIZES, matrices, tiles, transform_weight

AVX2 = dict(host_target_json(), mcpu="znver3")


def _config(task: Task, m: int, xi: int = 1, fm: int = 1, fused_input: int = 0):
    """A valid config of the task with ``algorithm`` m, ``xi`` tiles x ``fm`` channel blocks a register
    tile, the input transform a pass of its own (or, ``fused_input``, per row of tiles)."""
    space = task.space
    knobs = dict(task.default_config().knobs, algorithm=m, unroll_kw=0, wino_input=fused_input)
    knobs["tile_x"] = next(e for e in space.knob("tile_x").entities if e[1] == xi)
    knobs["tile_f"] = next(e for e in space.knob("tile_f").entities if e[1] == fm)
    knobs["tile_y"] = space.knob("tile_y").entities[0]
    config = space.get(space.index_of(knobs))
    assert space.is_valid(config), config
    return config


@pytest.mark.parametrize("m", TILE_SIZES)
def test_the_matrices_compute_a_one_dimensional_correlation(m: int) -> None:
    A, B, G = matrices(m)
    rng = np.random.default_rng(m)
    d, g = rng.standard_normal(m + 2), rng.standard_normal(3)
    want = np.correlate(d, g, mode="valid")
    assert np.allclose(A.T @ ((G @ g) * (B.T @ d)), want, atol=1e-9)


def test_the_kernel_transform_is_g_w_gt_per_channel_pair() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2, 3, 3, 3, 4, 8)).astype(np.float32)  # OCo, ICo, K, K, IB, OB
    u = transform_weight(w, 4)
    G = matrices(4)[2]
    assert u.shape == (6, 6, 2, 3, 4, 8) and u.dtype == np.float32 and u.flags.c_contiguous
    assert np.allclose(u[:, :, 1, 2, 3, 5], G @ w[1, 2, :, :, 3, 5].astype(np.float64) @ G.T, atol=1e-5)


def test_every_tuner_measures_each_algorithm_in_its_first_batch() -> None:
    """A 3x3 stride-1 task's default (F(4, 3) here) comes with its counterparts in the other
    algorithms (direct, F(2, 3), F(6, 3)), each valid and untuned; a tuner's first batch leads
    with all four, so measurement picks the algorithm whatever its search samples. A 1x1 task has
    no other algorithm."""
    from tensortune.tuners import get_tuner

    task = Task.from_op("conv2d_nchwc", dict(H=28, W=28, IC=64, OC=64, K=3, S=1, P=1, IB=8, OB=8), AVX2)
    default = task.default_config()
    others = task.other_algorithm_configs()
    assert default["algorithm"] == 4
    assert sorted(c["algorithm"] for c in others) == [0, 2, 6]
    assert all(task.space.is_valid(c) for c in others)
    for name in ("random", "grid", "genetic", "autotvm", "chameleon", "oneshot", "trimmer", "fasor"):
        assert [c.index for c in get_tuner(name, task, seed=0).ask(4)] == [default.index, *(c.index for c in others)]
    more = get_tuner("autotvm", task, seed=0).ask(8)  # the search's proposals after them, none twice
    assert len({c.index for c in more}) == 8
    one = Task.from_op("conv2d_nchwc", dict(H=28, W=28, IC=64, OC=64, K=1, S=1, P=0, IB=8, OB=8), AVX2)
    assert one.other_algorithm_configs() == []


def test_only_a_float32_3x3_stride_1_conv_offers_it_and_other_keys_stay() -> None:
    def task(k: int, s: int) -> Task:
        return Task.from_op("conv2d_nchwc", dict(H=14, W=14, IC=16, OC=16, K=k, S=s, P=k // 2, IB=8, OB=8), AVX2)

    assert "algorithm" in [k.name for k in task(3, 1).space.knobs]
    for k, s in ((1, 1), (3, 2)):
        t = task(k, s)
        assert "algorithm" not in [k.name for k in t.space.knobs]
        assert t.template.key_version(t) == 1  # its space did not change: its records still apply
    t = task(3, 1)
    assert t.template.key_version(t) == 2
    assert t.template.input_variant(t, t.default_config().space.get(t.space.index_of(
        dict(t.default_config().knobs, algorithm=0)))) == ""
    assert t.template.input_variant(t, _config(t, 4)) == "winograd4"


def test_no_winograd_config_repeats_another() -> None:
    t = Task.from_op("conv2d_nchwc", dict(H=8, W=8, IC=16, OC=16, K=3, S=1, P=1, IB=8, OB=8), AVX2)
    seen = set()
    for c in t.space:
        if c.knobs["algorithm"]:
            key = (c.knobs["algorithm"], tuple(c["tile_x"]), tuple(c["tile_f"]), tuple(c["tile_rc"]),
                   c.knobs["auto_unroll_max_step"], c.knobs["unroll_explicit"], c.knobs["wino_input"])
            assert key not in seen, c
            seen.add(key)
            assert tiles(8, 8, c.knobs["algorithm"])[1] % c["tile_x"][1] == 0
        else:
            assert c.knobs["wino_input"] == 0  # the direct conv has no input transform to place
    assert {m for m, *_ in seen} == set(TILE_SIZES)


class ResidualPair(nn.Module):
    """conv-bias-relu, then conv-bias + the block's input, relu: epilogues of one and two adds."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.a = nn.Conv2d(8, c, 3, padding=1)
        self.b = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        return torch.relu(self.b(y) + y)


def _onnx(tmp_path) -> tuple[str, np.ndarray, np.ndarray]:
    torch.manual_seed(0)
    module = ResidualPair().eval()
    x = torch.randn(1, 8, 10, 10)
    with torch.no_grad():
        want = module(x).numpy()
    path = tmp_path / "pair.onnx"
    torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=17, input_names=["x"])
    return str(path), x.numpy(), want


def test_winograd_candidates_of_fused_functions_are_measured_and_verified(tmp_path) -> None:
    path, _, _ = _onnx(tmp_path)
    tasks = [mt.task for mt in model_tasks(load_model(path), AVX2) if "algorithm" in [k.name for k in mt.task.space.knobs]]
    assert len(tasks) == 2 and any("add-add" in t.kernel_class for t in tasks)
    shapes = ((2, 5, 2, 0), (4, 1, 1, 0), (6, 2, 1, 0), (2, 1, 1, 1), (4, 3, 2, 1), (6, 1, 2, 1))
    inputs = [MeasureInput(t, _config(t, *shape)) for t in tasks for shape in shapes]
    with Measurer(MeasureOptions(number=1, repeat=1, min_repeat_ms=0, check_correctness=True)) as me:
        results = me.measure(inputs)
    for inp, r in zip(inputs, results):
        assert r.ok and r.extra.get("verified"), (inp.config, r.error, r.message)


def _built_with(tmp_path, m: int, xi: int, fm: int):
    """``(compiled, input, expected)``: the residual pair built with every Winograd-able task on F(m, 3)."""
    path, x, want = _onnx(tmp_path)
    model = load_model(path)
    over = {mt.task.workload_key: _config(mt.task, m, xi, fm) for mt in model_tasks(model, AVX2)
            if "algorithm" in [k.name for k in mt.task.space.knobs]}
    return compile_model(model, target_json=AVX2, overrides=over), x, want


def test_a_model_built_with_winograd_configs_matches(tmp_path) -> None:
    cm, x, want = _built_with(tmp_path, 4, 1, 2)
    assert sum(c.source == "tuned" for c in cm.choices) == 2
    check = compare_outputs(cm.run([x]), [want])
    assert check.ok, check.message


class RuntimeKernel(nn.Module):
    """A conv whose kernel is computed at run time (scaled by an input): nothing to transform ahead."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 8, 3, 3))

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return nn.functional.conv2d(x, self.w * s, padding=1)


def test_a_run_time_kernel_keeps_the_direct_convolution(tmp_path) -> None:
    torch.manual_seed(0)
    module = RuntimeKernel().eval()
    x, s = torch.randn(1, 8, 10, 10), torch.tensor(0.5)
    with torch.no_grad():
        want = module(x, s).numpy()
    path = tmp_path / "runtime.onnx"
    torch.onnx.export(module, (x, s), str(path), dynamo=False, opset_version=17, input_names=["x", "s"])
    model = load_model(str(path))
    tasks = [mt.task for mt in model_tasks(model, AVX2) if "algorithm" in [k.name for k in mt.task.space.knobs]]
    if not tasks:
        pytest.skip("the layout plan keeps this conv out of the blocked layout")
    over = {t.workload_key: _config(t, 4) for t in tasks}
    _, choices = schedule_module(model.fused(AVX2, None), AVX2, None, model.name, over)
    picked = [c for c in choices if c.workload_key in over]
    assert picked and all("needs constant inputs" in c.reason for c in picked), [c.reason for c in picked]
    cm = compile_model(model, target_json=AVX2, overrides=over)
    check = compare_outputs(cm.run([x.numpy(), s.numpy()]), [want])
    assert check.ok, check.message


@pytest.mark.parametrize("ic, oc, hw, m", [(3, 64, 56, 0), (64, 64, 56, 4), (16, 32, 28, 4), (512, 512, 7, 2),
                                          (64, 64, 7, 0)])
def test_the_untuned_algorithm_follows_what_was_measured(ic: int, oc: int, hw: int, m: int) -> None:
    ib = min(ic, 8)
    t = Task.from_op("conv2d_nchwc", dict(H=hw, W=hw, IC=ic, OC=oc, K=3, S=1, P=1, IB=ib, OB=8), AVX2)
    d = t.default_config()
    assert d.knobs["algorithm"] == m and t.space.is_valid(d)
    assert d.knobs["wino_input"] == int(m == 4)  # F(4, 3) transforms its input per row of tiles


def test_compile_and_profile_name_the_winograd_functions(tmp_path) -> None:
    from tensortune.models.profile import profile_compiled

    cm, x, _ = _built_with(tmp_path, 2, 1, 1)
    wino = [c for c in cm.choices if c.variant]
    assert len(wino) == 2 and all(c.variant == "winograd2" and "(winograd2)" in c.reason for c in wino)
    prof = profile_compiled(cm, [x], runs=2)
    rows = [f for f in prof.funcs if f.variant]
    assert len(rows) == 2 and "winograd2: direct-conv FLOPs" in prof.table()
