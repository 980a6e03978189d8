"""Recognising anchors, padding and epilogues in PrimFuncs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import te, topi

from tensortune.target import make_target
from tensortune.task import Task
from tensortune.task.pattern import analyze_func


@pytest.mark.parametrize("op, shape, args", [
    ("conv2d", [28, 28, 128, 256, 3, 2, 1], {"H": 28, "W": 28, "IC": 128, "OC": 256, "K": 3, "S": 2, "P": 1}),
    ("depthwise_conv2d", [56, 56, 64, 3, 1, 1], {"H": 56, "W": 56, "C": 64, "K": 3, "S": 1, "P": 1}),
    ("dense", [128, 768, 3072], {"M": 128, "N": 768, "K": 3072}),
    ("matmul", [64, 32, 16], {"M": 64, "N": 32, "K": 16}),
    ("batch_matmul", [12, 128, 64, 128], {"B": 12, "M": 128, "N": 64, "K": 128}),
    ("dense_pack", [128, 768, 3072, 16], {"M": 128, "N": 768, "K": 3072, "NB": 16}),
])
def test_named_ops_are_recognised(op, shape, args):
    pat = analyze_func(Task.from_op(op, shape).prim_func())
    assert pat.op == op and pat.args == args and pat.epilogue == ()
    expect = {"dense": "nk", "dense_pack": "packed"}.get(op, "kn")
    assert pat.b_layout == expect or op.endswith("conv2d")


def test_dense_pack_with_leading_rows_axis_and_epilogue():
    from tensortune.task.ops import dense_pack_te

    a = te.placeholder((1, 6, 20), name="A")
    w = te.placeholder((3, 20, 8), name="W")
    b = te.placeholder((24,), name="b")
    d = dense_pack_te(a, w)
    add = te.compute(d.shape, lambda n, i, j: d[n, i, j] + b[j], name="T_add")
    pat = analyze_func(te.create_prim_func([a, w, b, add]))
    assert pat.op == "dense_pack" and pat.args == {"M": 6, "N": 24, "K": 20, "NB": 8}
    assert pat.epilogue_ops == ("add",) and pat.weight_read == 1


def _conv_relu_func(P: int):
    data = te.placeholder((1, 16, 14, 14), name="data")
    w = te.placeholder((32, 16, 3, 3), name="w")
    b = te.placeholder((1, 32, 1, 1), name="b")
    pad = topi.nn.pad(data, [0, 0, P, P], [0, 0, P, P], name="pad")
    rc, ry, rx = te.reduce_axis((0, 16)), te.reduce_axis((0, 3)), te.reduce_axis((0, 3))
    OH = 14 + 2 * P - 2
    conv = te.compute((1, 32, OH, OH), lambda n, f, y, x: te.sum(pad[n, rc, y + ry, x + rx] * w[f, rc, ry, rx],
                                                                  axis=[rc, ry, rx]), name="conv")
    add = te.compute(conv.shape, lambda n, f, y, x: conv[n, f, y, x] + b[0, f, 0, 0], name="T_add")
    relu = te.compute(conv.shape, lambda *i: te.max(add(*i), 0.0), name="compute")
    return te.create_prim_func([data, w, b, relu])


def test_fused_conv_with_epilogue_gets_conv_template_and_runs():
    func = _conv_relu_func(1)
    pat = analyze_func(func)
    assert pat.op == "conv2d" and pat.pad == "pad" and pat.epilogue == ("T_add", "compute")
    assert pat.kernel_class == "conv2d-add-relu" and pat.args["P"] == 1
    task = Task.from_fused(func)
    assert task.template_name == "conv2d" and task.name.startswith("conv2d-add-relu(")
    mod = task.instantiate(task.default_config())  # the epilogue is fused, the padding kept
    assert "T_add" not in mod.script() and "compute" in mod.script()
    # ... and it runs: the scheduled kernel computes relu(conv(data, w) + b)
    data, w, b = task.make_inputs(0)
    ex = tvm.compile(mod, target=make_target(task.target_json))
    dev = tvm.cpu()
    out = tvm.runtime.tensor(task.output_buffer(), dev)
    ex.mod["main"](*(tvm.runtime.tensor(x, dev) for x in (data, w, b)), out)
    with torch.no_grad():
        conv = torch.nn.functional.conv2d(torch.from_numpy(data), torch.from_numpy(w), padding=1)
    expected = np.maximum(conv.numpy() + b, 0.0)
    assert expected.shape == (1, 32, 14, 14) and (expected > 0).any() and (expected == 0).any()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_copy_stage_without_padding_is_inlined():
    pat = analyze_func(_conv_relu_func(0))
    assert pat.op == "conv2d" and pat.pad is None and pat.prologue == ("pad",) and pat.args["P"] == 0


def test_unrecognised_functions_are_generic_with_a_reason():
    x = te.placeholder((4, 8), name="x")
    k = te.reduce_axis((0, 8))
    s = te.compute((4,), lambda i: te.sum(x[i, k], axis=k), name="s")
    pat = analyze_func(te.create_prim_func([x, s]))
    assert pat.op is None and "multiply-accumulate" in pat.reason
    task = Task.from_fused(te.create_prim_func([x, s]), name_hint="fused_sum_mean3")
    assert task.template_name == "generic" and task.kernel_class == "sum-mean"


def test_an_epilogue_that_broadcasts_the_anchor_is_generic_and_runs():
    """Squeeze-and-excitation (EfficientNet): a 1x1 conv on a 1x1 map, its sigmoid gate multiplied
    into the whole 7x7 feature map in the same fused function. The templates write an epilogue
    per tile of the anchor's output, which cannot hold the larger map (TVM refused the schedule
    for most configs), so the function goes to the generic template, and computes the right answer."""
    s = te.placeholder((1, 8, 1, 1), name="s")
    w = te.placeholder((16, 8, 1, 1), name="w")
    fmap = te.placeholder((1, 16, 7, 7), name="fmap")
    rc = te.reduce_axis((0, 8))
    conv = te.compute((1, 16, 1, 1), lambda n, f, y, x: te.sum(s[n, rc, y, x] * w[f, rc, 0, 0], axis=rc), name="conv")
    gate = te.compute(conv.shape, lambda *i: te.sigmoid(conv(*i)), name="T_sigmoid")
    out = te.compute(fmap.shape, lambda n, f, y, x: fmap[n, f, y, x] * gate[n, f, 0, 0], name="T_multiply")
    func = te.create_prim_func([s, w, fmap, out])
    pat = analyze_func(func)
    assert pat.op is None and "not elementwise over the anchor's output" in pat.reason
    task = Task.from_fused(func, name_hint="fused_conv2d_sigmoid_multiply")
    assert task.template_name == "generic"
    args = task.make_inputs(0)
    ex = tvm.compile(task.instantiate(task.default_config()), target=make_target(task.target_json))
    dev = tvm.cpu()
    res = tvm.runtime.tensor(task.output_buffer(), dev)
    ex.mod["main"](*(tvm.runtime.tensor(x, dev) for x in args), res)
    expected = args[2] * (1 / (1 + np.exp(-np.einsum("nc,fc->nf", args[0][:, :, 0, 0], args[1][:, :, 0, 0]))))[:, :, None, None]
    np.testing.assert_allclose(res.numpy(), expected, rtol=1e-4, atol=1e-5)
