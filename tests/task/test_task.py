"""Tests of Task: ops, argument checks, FLOPs, workload keys, JSON, references, PrimFunc tasks."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from tensortune.task import OPS, OpError, Task
from tensortune.task.ops import conv_out
from tensortune.templates.registry import amx_counterpart

#: op -> (valid shape, expected FLOPs, expected buffer shapes)
VALID = {
    "matmul": ((32, 48, 64), 2 * 32 * 48 * 64, [[32, 64], [64, 48], [32, 48]]),
    "dense": ((32, 48, 64), 2 * 32 * 48 * 64, [[32, 64], [48, 64], [32, 48]]),
    "batch_matmul": ((2, 16, 24, 32), 2 * 2 * 16 * 24 * 32, [[2, 16, 32], [2, 32, 24], [2, 16, 24]]),
    # M, N, K, NB: the weight packed as [N/NB, K, NB]
    "dense_pack": ((32, 48, 64, 16), 2 * 32 * 48 * 64, [[32, 64], [3, 64, 16], [32, 48]]),
    # H, W, IC, OC, K, S, P: 11x11 pad 1 stride 2 -> 6x6
    "conv2d": ((11, 11, 4, 8, 3, 2, 1), 2 * 8 * 6 * 6 * 4 * 9, [[1, 4, 11, 11], [8, 4, 3, 3], [1, 8, 6, 6]]),
    # H, W, C, K, S, P: 12x12 pad 1 stride 1 -> 12x12
    "depthwise_conv2d": ((12, 12, 8, 3, 1, 1), 2 * 8 * 12 * 12 * 9, [[1, 8, 12, 12], [8, 1, 3, 3], [1, 8, 12, 12]]),
    # H, W, IC, OC, K, S, P, IB, OB: the blocked forms (NCHW4c in, OIHW4i8o weight, NCHW8c out)
    "conv2d_nchwc": ((11, 11, 8, 16, 3, 2, 1, 4, 8), 2 * 16 * 6 * 6 * 8 * 9,
                     [[1, 2, 11, 11, 4], [2, 2, 3, 3, 4, 8], [1, 2, 6, 6, 8]]),
    # H, W, IC, OC, KH, KW, SH, SW, PT, PL, PB, PR, DH, DW, G, IB, OB: a 1x5 kernel, stride (1, 2),
    # padding (0, 2, 1, 1), two groups of two 4-channel blocks
    "conv2d_nchwc_general": ((10, 12, 16, 16, 1, 5, 1, 2, 0, 2, 1, 1, 1, 1, 2, 4, 4), 2 * 16 * 11 * 6 * 8 * 5,
                             [[1, 4, 10, 12, 4], [4, 2, 1, 5, 4, 4], [1, 4, 11, 6, 4]]),
    # H, W, C, KH, KW, SH, SW, PT, PL, PB, PR, DH, DW, B: 3x3 stride 2, padded bottom and right only
    "depthwise_conv2d_nchwc_general": ((12, 12, 16, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, 8), 2 * 16 * 6 * 6 * 9,
                                       [[1, 2, 12, 12, 8], [2, 1, 3, 3, 1, 8], [1, 2, 6, 6, 8]]),
    "depthwise_conv2d_nchwc": ((12, 12, 16, 3, 1, 1, 8), 2 * 16 * 12 * 12 * 9,
                               [[1, 2, 12, 12, 8], [2, 1, 3, 3, 1, 8], [1, 2, 12, 12, 8]]),
    # the bf16 forms: weights with pairs of input channels (reduction steps) side by side
    "conv2d_nchwc_bf16": ((11, 11, 8, 16, 3, 2, 1, 4, 8), 2 * 16 * 6 * 6 * 8 * 9,
                          [[1, 2, 11, 11, 4], [2, 2, 3, 3, 2, 8, 2], [1, 2, 6, 6, 8]]),
    "dense_pack_bf16": ((32, 48, 64, 16), 2 * 32 * 48 * 64, [[32, 64], [3, 32, 16, 2], [32, 48]]),
    # B, M, N, K, NB: both operands float32 at run time, B packed in the function
    "batch_matmul_bf16": ((2, 12, 32, 20, 16), 2 * 2 * 12 * 32 * 20, [[2, 12, 20], [2, 20, 32], [2, 12, 32]]),
    "conv2d_nchwc_general_bf16": ((10, 12, 32, 32, 1, 5, 1, 2, 0, 2, 1, 1, 1, 1, 2, 8, 8), 2 * 32 * 11 * 6 * 16 * 5,
                                  [[1, 4, 10, 12, 8], [4, 2, 1, 5, 4, 8, 2], [1, 4, 11, 6, 8]]),
}

MATMUL = ("matmul", (32, 48, 64))


def torch_conv(task: Task, inputs: list[np.ndarray], groups: int = 1) -> np.ndarray:
    x, w = (torch.from_numpy(a) for a in inputs)
    with torch.no_grad():
        y = torch.nn.functional.conv2d(x, w, stride=task.args["S"], padding=task.args["P"], groups=groups)
    return y.numpy()


def elementwise_add_relu(shape=(6, 20)):
    from tvm import te

    a = te.placeholder(shape, name="A")
    b = te.placeholder(shape, name="B")
    s = te.compute(shape, lambda i, j: a[i, j] + b[i, j], name="S")
    out = te.compute(shape, lambda i, j: te.max(s[i, j], 0.0), name="R")
    return te.create_prim_func([a, b, out])


def small_matmul_primfunc(m=10, n=7, k=12):
    from tvm import te

    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return te.create_prim_func([a, b, c])


def key_in_subprocess(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1]


# ---------------------------------------------------------------- valid ops
def test_every_op_is_covered() -> None:
    assert set(VALID) == set(OPS)


@pytest.mark.parametrize("op", sorted(VALID))
def test_from_op_valid(op: str) -> None:
    shape, flops, shapes = VALID[op]
    t = Task.from_op(op, shape)
    assert t.op == op
    assert t.flops == flops
    assert t.kernel_class == op
    assert t.template_name == amx_counterpart(OPS[op].template, t.args, t.target_json)  # AMX where the CPU has it
    assert t.args == dict(zip(OPS[op].arg_names, shape))
    assert t.arg_shapes == shapes and t.out_shape == shapes[-1]
    assert len(t.space) > 1
    key = t.workload_key
    assert isinstance(key, str) and len(key) == 20 and all(ch in "0123456789abcdef" for ch in key)
    # stable: the same task built again (positionally or from a dict) has the same key
    assert Task.from_op(op, shape).workload_key == key
    assert Task.from_op(op, dict(zip(OPS[op].arg_names, shape))).workload_key == key
    assert Task.from_op(op, [np.int64(v) for v in shape]).workload_key == key
    assert t.features["log_flops"] == pytest.approx(np.log2(flops))


def test_flops_other_shapes() -> None:
    assert Task.from_op("conv2d", (10, 10, 8, 16, 3, 1, 1)).flops == 2 * 16 * 10 * 10 * 8 * 9
    assert Task.from_op("conv2d", (8, 8, 8, 16, 1, 1, 0)).flops == 2 * 16 * 8 * 8 * 8
    assert Task.from_op("depthwise_conv2d", (13, 13, 6, 3, 2, 1)).flops == 2 * 6 * 7 * 7 * 9
    assert conv_out(13, 3, 2, 1) == 7 and conv_out(224, 7, 2, 3) == 112


def test_conv_features_include_output_size() -> None:
    f = Task.from_op("conv2d", (11, 11, 4, 8, 3, 2, 1)).features
    assert f["OH"] == 6 and f["OW"] == 6 and f["IC"] == 4 and f["S"] == 2


def test_keys_differ_between_tasks() -> None:
    keys = {
        Task.from_op("matmul", (32, 48, 64)).workload_key,
        Task.from_op("matmul", (32, 48, 32)).workload_key,
        Task.from_op("dense", (32, 48, 64)).workload_key,
        Task.from_op("matmul", (32, 48, 64), template="none").workload_key,
        Task.from_op("conv2d", (10, 10, 8, 16, 3, 1, 1)).workload_key,
        Task.from_op("conv2d", (10, 10, 8, 16, 3, 1, 0)).workload_key,
    }
    assert len(keys) == 6


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("op,shape", [
    ("nope", (1, 2, 3)),
    ("matmul", (32, 48)),
    ("matmul", (32, 48, 64, 1)),
    ("batch_matmul", (2, 16, 24)),
    ("conv2d", (10, 10, 8, 16, 3, 1)),
    ("matmul", (0, 48, 64)),
    ("matmul", (32, -1, 64)),
    ("batch_matmul", (0, 16, 24, 32)),
    ("conv2d", (10, 10, 0, 16, 3, 1, 1)),
    ("conv2d", (10, 10, 8, 16, 3, 0, 1)),
    ("conv2d", (10, 10, 8, 16, -3, 1, 1)),
    ("conv2d", (10, 10, 8, 16, 3, 1, -1)),
    ("depthwise_conv2d", (12, 12, 8, 3, 1, -2)),
    ("conv2d", (4, 4, 8, 16, 7, 1, 1)),          # 7 > 4 + 2
    ("conv2d", (10, 4, 8, 16, 7, 1, 1)),         # wide enough in H, not in W
    ("depthwise_conv2d", (3, 3, 8, 5, 1, 0)),
    ("conv2d_nchwc", (10, 10, 12, 16, 3, 1, 1, 8, 8)),  # 12 input channels in blocks of 8
    ("depthwise_conv2d_nchwc", (10, 10, 12, 3, 1, 1, 8)),
    ("dense_pack", (32, 40, 64, 16)),  # 40 columns in blocks of 16
    ("dense_pack", (32, 48, 64, 0)),
    ("matmul", (32, 4.5, 64)),
    ("matmul", (32, "48", 64)),
    ("matmul", (True, 48, 64)),
])
def test_from_op_rejects(op: str, shape) -> None:
    with pytest.raises(OpError) as e:
        Task.from_op(op, shape)
    assert "\n" not in str(e.value)


def test_from_op_rejects_bad_dict_shapes() -> None:
    with pytest.raises(OpError):
        Task.from_op("matmul", {"M": 1, "N": 2})
    with pytest.raises(OpError):
        Task.from_op("matmul", {"M": 1, "N": 2, "K": 3, "Q": 4})


def test_kernel_exactly_fits_padded_input() -> None:
    t = Task.from_op("conv2d", (4, 4, 2, 2, 6, 1, 1))  # K == H + 2P
    assert t.out_shape == [1, 2, 1, 1]


# ---------------------------------------------------------------- identity across processes and JSON
def test_workload_keys_identical_across_processes() -> None:
    """Op tasks and PrimFunc tasks get the same key in a fresh interpreter."""
    keys = [Task.from_op("conv2d", (11, 11, 4, 8, 3, 2, 1)).workload_key,
            Task.from_op("batch_matmul", (2, 16, 24, 32)).workload_key,
            Task.from_primfunc(elementwise_add_relu()).workload_key]
    code = (
        "from tvm import te\n"
        "from tensortune.task import Task\n"
        "a = te.placeholder((6, 20), name='A'); b = te.placeholder((6, 20), name='B')\n"
        "s = te.compute((6, 20), lambda i, j: a[i, j] + b[i, j], name='S')\n"
        "r = te.compute((6, 20), lambda i, j: te.max(s[i, j], 0.0), name='R')\n"
        "print(Task.from_op('conv2d', (11, 11, 4, 8, 3, 2, 1)).workload_key,\n"
        "      Task.from_op('batch_matmul', [2, 16, 24, 32]).workload_key,\n"
        "      Task.from_primfunc(te.create_prim_func([a, b, r])).workload_key)\n")
    assert key_in_subprocess(code).split() == keys


@pytest.mark.parametrize("op", sorted(VALID))
def test_json_round_trip_keeps_key(op: str) -> None:
    t = Task.from_op(op, VALID[op][0])
    back = Task.from_json(json.loads(json.dumps(t.to_json())))
    assert back.workload_key == t.workload_key
    assert back.args == t.args and back.template_name == t.template_name
    assert back.kernel_class == t.kernel_class and back.flops == t.flops
    assert len(back.space) == len(t.space)


# ---------------------------------------------------------------- references
def test_make_inputs_reproducible() -> None:
    t = Task.from_op(*MATMUL)
    a, b = t.make_inputs(3), t.make_inputs(3)
    assert [x.shape for x in a] == [(32, 64), (64, 48)]
    assert all(x.dtype == np.float32 for x in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], t.make_inputs(4)[0])
    assert t.output_buffer().shape == (32, 48) and not t.output_buffer().any()


@pytest.mark.parametrize("op,shape,expect", [
    ("matmul", (5, 7, 3), lambda x: np.einsum("mk,kn->mn", x[0], x[1])),
    ("dense", (5, 7, 3), lambda x: np.einsum("mk,nk->mn", x[0], x[1])),
    ("batch_matmul", (2, 5, 7, 3), lambda x: np.einsum("bmk,bkn->bmn", x[0], x[1])),
])
def test_gemm_reference(op, shape, expect) -> None:
    t = Task.from_op(op, shape)
    x = t.make_inputs(1)
    got = t.reference(x)
    assert got.shape == tuple(t.out_shape) and got.dtype == np.float32
    np.testing.assert_allclose(got, expect(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [
    (10, 10, 8, 16, 3, 1, 1),
    (11, 11, 4, 8, 3, 2, 1),    # stride 2, padding
    (9, 12, 3, 5, 3, 2, 0),     # stride 2, no padding, not square
    (8, 8, 8, 16, 1, 1, 0),     # 1x1
    (7, 7, 2, 3, 5, 1, 2),
    (14, 14, 3, 4, 3, 3, 2),
])
def test_conv2d_reference_matches_torch(shape) -> None:
    t = Task.from_op("conv2d", shape)
    x = t.make_inputs(2)
    got = t.reference(x)
    assert list(got.shape) == t.out_shape and got.dtype == np.float32
    np.testing.assert_allclose(got, torch_conv(t, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(12, 12, 8, 3, 1, 1), (13, 13, 6, 3, 2, 1), (10, 9, 4, 5, 2, 2), (6, 6, 3, 1, 1, 0)])
def test_depthwise_reference_matches_torch(shape) -> None:
    t = Task.from_op("depthwise_conv2d", shape)
    x = t.make_inputs(2)
    got = t.reference(x)
    assert list(got.shape) == t.out_shape
    np.testing.assert_allclose(got, torch_conv(t, x, groups=t.args["C"]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(11, 11, 8, 16, 3, 2, 1, 4, 8), (13, 13, 3, 8, 3, 1, 1, 3, 8), (7, 9, 16, 8, 1, 1, 0, 8, 4)])
def test_conv2d_nchwc_reference_matches_torch(shape) -> None:
    """The blocked conv is the NCHW conv with data NCHW{IB}c and weight OIHW{IB}i{OB}o (packed by hand here)."""
    from tensortune.task.ops import block, unblock

    t = Task.from_op("conv2d_nchwc", shape)
    x, w = t.make_inputs(3)
    IB, OB = t.args["IB"], t.args["OB"]
    oco, ico, k, _, _, _ = w.shape
    w_oihw = w.transpose(0, 5, 1, 4, 2, 3).reshape(oco * OB, ico * IB, k, k)  # [o, ob, i, ib, h, w]
    ref = torch_conv(t, [unblock(x), np.ascontiguousarray(w_oihw)])
    np.testing.assert_allclose(t.reference([x, w]), block(ref, OB), rtol=1e-4, atol=1e-4)


def test_depthwise_nchwc_reference_matches_torch() -> None:
    from tensortune.task.ops import block, unblock

    t = Task.from_op("depthwise_conv2d_nchwc", (13, 13, 16, 3, 2, 1, 8))
    x, w = t.make_inputs(4)
    w_oihw = np.ascontiguousarray(w[:, 0, :, :, 0, :].transpose(0, 3, 1, 2).reshape(16, 1, 3, 3))
    ref = torch_conv(t, [unblock(x), w_oihw], groups=16)
    np.testing.assert_allclose(t.reference([x, w]), block(ref, 8), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- PrimFunc tasks
@pytest.mark.parametrize("make,expect", [
    (elementwise_add_relu, lambda x: np.maximum(x[0] + x[1], 0.0)),
    (small_matmul_primfunc, lambda x: x[0] @ x[1]),
])
def test_from_primfunc(make, expect) -> None:
    t = Task.from_primfunc(make())
    assert t.op == "primfunc"
    assert t.template_name == "generic" and t.kernel_class == "generic"
    assert not t.has_numpy_reference
    assert len(t.space) >= 1 and list(t.space)
    key = t.workload_key
    assert len(key) == 20
    assert Task.from_primfunc(make()).workload_key == key  # built again: same key
    assert Task.from_json(json.loads(json.dumps(t.to_json()))).workload_key == key
    assert t.name.startswith("generic[")  # kernel class + key prefix
    x = t.make_inputs(0)
    got = t.reference(x)
    np.testing.assert_allclose(got, expect(x), rtol=1e-5, atol=1e-5)
    assert t.flops > 0


def test_primfunc_keys_differ() -> None:
    a = Task.from_primfunc(elementwise_add_relu())
    b = Task.from_primfunc(elementwise_add_relu((6, 21)))
    c = Task.from_primfunc(small_matmul_primfunc())
    assert len({a.workload_key, b.workload_key, c.workload_key}) == 3


def test_primfunc_task_needs_function() -> None:
    with pytest.raises(OpError):
        Task("primfunc", {})


def test_none_template_has_one_config() -> None:
    t = Task.from_op(*MATMUL, template="none")
    assert len(t.space) == 1
    assert t.default_config().index == 0
    assert t.workload_key != Task.from_op(*MATMUL).workload_key


def test_a_generic_function_counts_one_operation_per_point_of_each_stage() -> None:
    """A fast-math softmax (TOPI's polynomial exp) counts as its five stages (max, subtract, exp,
    sum, divide), one operation per point each, not as the 30-odd operations of the polynomial (TVM's estimate);
    a padding stage only moves data and counts none."""
    from tvm import te, topi, tirx
    from tvm.s_tir import analysis

    import tvm

    x = te.placeholder((4, 32), name="X")
    soft = te.create_prim_func([x, topi.nn.fast_softmax(x, axis=1)])
    t = Task.from_primfunc(soft)
    assert t.pattern.op is None
    assert t.flops == 5 * 4 * 32  # none of the stages is a multiply-accumulate
    assert float(analysis.estimate_tir_flops(tvm.IRModule({"main": soft}))) > 5 * t.flops
    pad = te.compute((6, 34), lambda i, j: tirx.if_then_else(
        tirx.all(i >= 1, i < 5, j >= 1, j < 33), x[i - 1, j - 1], tirx.const(0.0, "float32")), name="pad")
    out = te.compute((6, 34), lambda i, j: te.max(pad[i, j], 0.0), name="relu")
    assert Task.from_primfunc(te.create_prim_func([x, out])).flops == 6 * 34
