"""A model that imports always builds: schedules that do not lower fall back, function by function."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from tensortune.models import compile as compile_mod
from tensortune.models.compile import SOURCES, builds, compile_model
from tensortune.models.importer import from_torch
from tensortune.models.reference import compare_outputs
from tensortune.target import host_target_json
from tensortune.task import Task
from tensortune.templates.generic import SHARED_EXPR_CHARS

from tiny import one_conv


def _split_func(expensive: bool) -> tvm.tirx.PrimFunc:
    """A producer read by three slices (a reshape feeding ``split``, as exported attention's qkv);
    ``expensive``: its expression is long enough that the generic template keeps it materialised."""
    a = te.placeholder((4, 12), name="A")

    def value(i: object, j: object, k: object) -> object:
        x = a[i, j * 4 + k]
        if not expensive:
            return x * 2.0
        y = x
        for c in range(12):
            y = y * x + float(c) * te.exp(x * float(c + 1))
        return y

    r = te.compute((4, 3, 4), value, name="R")

    def part(j: int) -> te.Tensor:
        return te.compute((4, 4), lambda i, k: r[i, j, k], name=f"S{j}")

    return te.create_prim_func([a, part(0), part(1), part(2)])


def _broken(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """TVM 0.27's ``reverse_compute_inline`` of one slice into the shared producer: it applies, and
    the function then fails to lower (FlattenBuffer: "R is used before its definition")."""
    sch = tvm.s_tir.Schedule(func)
    sch.reverse_compute_inline(sch.get_sblock("S0"))
    return sch.mod["main"]


def test_the_tvm_fault_is_real_and_the_generic_template_avoids_it():
    tj = host_target_json()
    func = _split_func(expensive=True)
    with pytest.raises(Exception, match="before its definition"):
        builds(_broken(func), tj)
    t = Task.from_primfunc(func, tj, "generic", "split")
    assert len(str(t.prim_func())) > SHARED_EXPR_CHARS  # the producer really stays materialised
    sched = t.instantiate(t.default_config())["main"]
    builds(sched, tj)  # the generic schedule lowers and builds
    lib = tvm.tirx.build(tvm.IRModule({"main": sched}), compile_mod.make_target(tj))
    x = np.random.default_rng(0).standard_normal((4, 12)).astype("float32") * 0.1
    outs = [tvm.runtime.tensor(np.zeros((4, 4), "float32")) for _ in range(3)]
    lib(tvm.runtime.tensor(x), *outs)
    ref = tvm.tirx.build(tvm.IRModule({"main": func}), compile_mod.make_target(tj))
    want = [tvm.runtime.tensor(np.zeros((4, 4), "float32")) for _ in range(3)]
    ref(tvm.runtime.tensor(x), *want)
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o.numpy(), w.numpy(), rtol=1e-4, atol=1e-5)


@pytest.fixture()
def conv_model():
    module, inputs = one_conv()
    return module, inputs, from_torch(module, inputs, "one_conv")


def _plant(monkeypatch: pytest.MonkeyPatch, kernel: str, templates: set[str]) -> None:
    """Make every schedule of the tasks of kernel class prefix ``kernel`` made by one of ``templates``
    apply but not lower."""
    real = Task.instantiate

    def instantiate(self: Task, config: object) -> tvm.IRModule:
        if self.kernel_class.startswith(kernel) and self.template_name in templates:
            return tvm.IRModule({"main": _broken(_split_func(expensive=False))})
        return real(self, config)

    monkeypatch.setattr(Task, "instantiate", instantiate)


def test_a_schedule_that_cannot_lower_falls_back_and_is_reported(conv_model, monkeypatch):
    module, inputs, model = conv_model
    _plant(monkeypatch, "conv2d", {"conv2d", "conv2d_nchwc"})
    cm = compile_model(model)
    conv = [c for c in cm.choices if c.kernel_class.startswith("conv2d")]
    assert conv and all(c.source == "generic" for c in conv)
    assert all("default failed (" in c.reason and "before its definition" in c.reason for c in conv)
    assert cm.counts()["generic"] >= 1 and set(cm.counts()) == set(SOURCES)
    import torch

    with torch.no_grad():
        want = [module(*inputs).numpy()]
    assert compare_outputs(cm.run([x.numpy() for x in inputs]), want).ok


def test_every_schedule_broken_still_builds_from_naive_loops(conv_model, monkeypatch):
    module, inputs, model = conv_model
    _plant(monkeypatch, "conv2d", {"conv2d", "conv2d_nchwc", "generic"})
    cm = compile_model(model)
    conv = [c for c in cm.choices if c.kernel_class.startswith("conv2d")]
    assert conv and all(c.source in ("tvm", "naive") for c in conv)
    assert all("generic failed (" in c.reason for c in conv)
    import torch

    with torch.no_grad():
        want = [module(*inputs).numpy()]
    assert compare_outputs(cm.run([x.numpy() for x in inputs]), want).ok


def test_tvm_default_schedule_applies_to_a_reduction_and_says_when_not():
    tj = host_target_json()
    a = te.placeholder((16, 64), name="A")
    k = te.reduce_axis((0, 64), "k")
    s = te.compute((16,), lambda i: te.sum(a[i, k], axis=k), name="S")
    norm = te.compute((16, 64), lambda i, j: a[i, j] / s[i], name="N")
    builds(compile_mod.tvm_default_schedule(te.create_prim_func([a, norm]), tj), tj)
    double = te.compute((16, 64), lambda i, j: a[i, j] * 2.0, name="D")
    with pytest.raises(ValueError, match="no rule"):
        compile_mod.tvm_default_schedule(te.create_prim_func([a, double]), tj)
