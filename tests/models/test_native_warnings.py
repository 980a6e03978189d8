"""The filter of TVM's native warnings: dropped lines are gone, every other line comes through."""
from __future__ import annotations

import os
import random

import tvm

from tensortune.models.compile import compile_model, model_tasks
from tensortune.models.importer import from_torch
from tensortune.target import make_target
from tensortune.utils.quiet import TVM_UNROLL_HINT, drop_native_lines

from tiny import one_conv


def test_dropped_lines_are_gone_and_the_rest_comes_through_in_order(capfd):
    with drop_native_lines("noise"):
        os.write(2, b"first\nsome noise here\n")
        os.write(2, b"second\n")
        os.write(2, b"noise again\nthird")
    err = capfd.readouterr().err
    assert err == "first\nsecond\nthird"  # a last line without its newline kept as it was


def test_lines_written_inside_come_out_when_the_block_raises(capfd):
    try:
        with drop_native_lines("noise"):
            os.write(2, b"kept\nnoise\n")
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert capfd.readouterr().err == "kept\n"


def _explicit_zero(task):
    for c in task.space.sample(random.Random(0), 200):
        if c.knobs.get("unroll_explicit") == 0 and c.knobs.get("auto_unroll_max_step", 0) > 0:
            return c
    raise AssertionError("no config with unroll_explicit 0 in 200 samples")


def test_a_model_whose_config_leaves_unroll_to_llvm_compiles_without_tvms_warning(capfd):
    m, x = one_conv()
    model = from_torch(m, x, name="one_conv")
    task = next(mt.task for mt in model_tasks(model) if any(k.name == "unroll_explicit" for k in mt.task.space.knobs))
    config = _explicit_zero(task)
    tvm.compile(task.instantiate(config), target=make_target(task.target_json))
    assert TVM_UNROLL_HINT in capfd.readouterr().err  # TVM warns for this config's loops

    compiled = compile_model(model, overrides={task.workload_key: config})
    assert [c.source for c in compiled.choices if c.workload_key == task.workload_key] == ["tuned"]
    assert TVM_UNROLL_HINT not in capfd.readouterr().err
