"""CUDA templates build for ``sm_90`` here (no GPU needed): every template's default and sampled
configs go through the real builder (TVM's CUDA codegen, then nvcc and ptxas to a fatbin), the
spaces keep out what the device cannot launch, and TVM's GPU code check refuses it where a space
does not. Nothing here runs a kernel: that needs a GPU."""
from __future__ import annotations

import json
import random
import shutil
from math import prod

import pytest

from tensortune.measure.cuda import FATBIN_SUFFIX
from tensortune.measure.worker import build_candidate
from tensortune.target import CUDA_LIMITS, TargetError, is_cuda, parse_target, runs_here
from tensortune.task import Task
from tensortune.templates import TemplateError
from tensortune.templates.gpu import MAX_ACCUMULATORS, MAX_VTHREADS, _lower_for_check

#: The tests that build (TVM's codegen, then nvcc); the spaces, checks and refusals need no nvcc.
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not installed")

#: Sampled configs built per case besides the default.
N_SAMPLES = 2
#: A fatbin's first four bytes (0xBA55ED50, little-endian).
FATBIN_MAGIC = bytes.fromhex("50ed55ba")

CASES = [
    ("conv2d", (14, 14, 32, 64, 3, 1, 1), "conv2d_cuda"),
    ("conv2d", (15, 15, 16, 24, 3, 2, 0), "conv2d_cuda"),  # strided, no padding, odd sizes
    ("conv2d", (7, 7, 64, 32, 1, 1, 0), "conv2d_cuda"),
    ("depthwise_conv2d", (28, 28, 32, 3, 1, 1), "depthwise_conv2d_cuda"),
    ("depthwise_conv2d", (14, 14, 48, 5, 2, 2), "depthwise_conv2d_cuda"),
    ("matmul", (64, 128, 96), "gemm_cuda"),
    ("dense", (1, 256, 128), "gemm_cuda"),  # one row: one-element fetches
    ("dense", (197, 96, 64), "gemm_cuda"),  # rows a prime
    ("batch_matmul", (2, 32, 64, 48), "gemm_cuda"),
    ("dense", (1, 7, 13), "gemm_cuda"),  # primes: steps that read one element of A, of B, or both
]


@pytest.fixture(scope="module")
def cuda() -> dict:
    return parse_target("cuda")


def test_cuda_words_and_json(cuda) -> None:
    assert cuda["kind"] == "cuda" and cuda["arch"] == "sm_90" and is_cuda(cuda) and not runs_here(cuda)
    assert {k: cuda[k] for k in CUDA_LIMITS} == CUDA_LIMITS
    assert cuda["host"] == {"kind": "llvm", "mtriple": "x86_64-linux-gnu"}  # keys not tied to this CPU
    assert parse_target("cuda:sm_80")["arch"] == "sm_80"
    small = parse_target('{"kind": "cuda", "arch": "sm_89", "max_shared_memory_per_block": 16384}')
    assert small["max_shared_memory_per_block"] == 16384 and small["max_threads_per_block"] == 1024
    import tvm

    assert str(tvm.target.Target(cuda).kind.name) == "cuda"  # the dict form TVM 0.27 takes
    for bad in ("cuda:90", "cuda:compute_90", '{"kind": "cuda", "max_threads_per_block": 8}',
                '{"kind": "cuda", "max_threads_per_block": "many"}', '{"kind": "cuda", "host": "llvm"}'):
        with pytest.raises(TargetError):
            parse_target(bad)


def _fits_shared(task: Task, config, limit: int) -> bool:
    """Whether TVM's GPU code check passes the scheduled config under ``limit`` bytes of shared memory."""
    from tvm.s_tir import analysis

    func = _lower_for_check(task.template.schedule(task, config).mod)["main"]
    return bool(analysis.verify_gpu_code(func, {"max_shared_memory_per_block": limit}))


@needs_nvcc
@pytest.mark.parametrize("op, shape, template", CASES, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}" for c in CASES])
def test_default_and_sampled_configs_build_for_sm90(op, shape, template, cuda, tmp_path) -> None:
    task = Task.from_op(op, shape, target=cuda)
    assert task.template_name == template
    assert Task.from_json(json.loads(task.json_text)).workload_key == task.workload_key
    lim = CUDA_LIMITS
    configs = [task.default_config(), *task.space.sample(random.Random(1), N_SAMPLES)]
    for c in configs:
        spatial = [k for k in c.knobs if k.startswith("tile_") and len(c[k]) == 4]
        assert prod(c[k][2] for k in spatial) <= lim["max_threads_per_block"]
        assert prod(c[k][1] for k in spatial) <= MAX_VTHREADS
        assert prod(c[k][1] * c[k][3] for k in spatial) <= MAX_ACCUMULATORS
        staged = task.template.shared_bytes(task, c)  # the space's estimate is what TVM allocates, to the byte
        assert _fits_shared(task, c, staged) and (staged == 0 or not _fits_shared(task, c, staged - 1)), staged
        kind, path, message, _ = build_candidate(task.json_text, c.knobs, str(tmp_path))
        assert kind == "none", f"{task.name} config {c.index}: {kind}: {message}"
        with open(path + FATBIN_SUFFIX, "rb") as f:
            assert f.read(4) == FATBIN_MAGIC
    default = configs[0]
    assert default["auto_unroll_max_step"] == 512 and default["unroll_explicit"] == 1


@needs_nvcc
def test_a_models_int64_gemm_whose_steps_read_one_element_builds(cuda, tmp_path) -> None:
    """ViT's attention GEMMs come with int64 indices, and with a prime number of rows and terms
    (197 there, 17 and 11 here) the default reads one element of A per step: that operand stays a
    global read."""
    import tvm
    from tvm import te

    n = [tvm.tirx.IntImm("int64", v) for v in (2, 17, 64, 11)]
    a, b = te.placeholder((n[0], n[1], n[3]), name="a"), te.placeholder((n[0], n[3], n[2]), name="b")
    k = te.reduce_axis((0, n[3]), name="k")
    c = te.compute((n[0], n[1], n[2]), lambda z, i, j: te.sum(a[z, i, k] * b[z, k, j], axis=k), name="matmul")
    task = Task.from_fused(te.create_prim_func([a, b, c]), cuda, "fused_matmul")
    assert task.template_name == "gemm_cuda" and task.op == "batch_matmul"
    config = task.default_config()
    assert config["tile_y"][1] * config["tile_y"][2] * config["tile_y"][3] * config["tile_k"][1] == 1
    kind, _, message, _ = build_candidate(task.json_text, config.knobs, str(tmp_path))
    assert kind == "none", message


def test_what_the_device_cannot_launch_is_out_of_the_space_and_refused(cuda) -> None:
    """A config within sm_90's limits but over a smaller device's: that device's space excludes it,
    and scheduling it anyway is refused by TVM's GPU code check (threads, then shared memory); the
    smaller device's own default schedules."""
    shape = (14, 14, 32, 64, 3, 1, 1)
    big = Task.from_op("conv2d", shape, target=cuda)
    c = big.default_config()
    assert c["tile_f"] == (2, 1, 8, 4) and c["tile_y"] == c["tile_x"] == (2, 1, 7, 1)  # 392 threads
    assert big.template.shared_bytes(big, c) == 4 * (4 * 9 * 9 + 32 * 4 * 9)  # 4 channels of a 9 x 9 window, the kernels
    for limits in ({"max_threads_per_block": 256}, {"max_shared_memory_per_block": 4096}):
        small = Task.from_op("conv2d", shape, target=parse_target({**cuda, **limits}))
        same = small.space.get(c.index)
        assert same.knobs == c.knobs and not small.space.is_valid(same)
        with pytest.raises(TemplateError, match="exceeds the device's launch limits"):
            small.template.schedule(small, same)
        own = small.default_config()
        assert own.knobs != c.knobs
        small.template.schedule(small, own)


@needs_nvcc
def test_the_rest_of_a_model_gets_dlight(cuda, tmp_path) -> None:
    from tvm import te, topi

    x = te.placeholder((4, 1000), name="x")
    softmax = Task.from_primfunc(te.create_prim_func([x, topi.nn.softmax(x)]), target=cuda)
    img = te.placeholder((1, 64, 56, 56), name="img")
    pool = Task.from_primfunc(te.create_prim_func([img, topi.nn.pool2d(img, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max")]),
                              target=cuda)
    for task in (softmax, pool):
        assert task.template_name == "generic_cuda" and len(task.space) == 1
        kind, path, message, _ = build_candidate(task.json_text, task.default_config().knobs, str(tmp_path))
        assert kind == "none", message


def test_cpu_only_templates_have_no_cuda_counterpart(cuda) -> None:
    with pytest.raises(TemplateError, match="no CUDA counterpart"):
        Task.from_op("dense_pack", (1, 64, 64, 8), target=cuda)
    from tvm import te

    from tensortune.task.ops import get_op

    packed = te.create_prim_func(get_op("dense_pack").compute({"M": 1, "N": 64, "K": 64, "NB": 8}))
    fused = Task.from_fused(packed, cuda, "fused_dense_pack")  # in a model: the generic GPU schedule
    assert fused.template_name == "generic_cuda" and fused.kernel_class == "dense_pack"
    assert Task.from_op("matmul", (8, 8, 8)).template_name == "gemm"  # CPUs keep theirs


def test_cuda_tuning_is_refused_in_one_line(tmp_path, capsys) -> None:
    from tensortune.cli import main

    db = tmp_path / "t.db"
    for argv in (["tune-op", "matmul", "--shape", "16,16,16", "--trials", "2"], ["tune", "resnet18", "--trials", "2"]):
        assert main([*argv, "--db", str(db), "--target", "cuda"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "cuda:sm_90" in err[0] and "no GPU runner" in err[0], err
    assert not db.exists()


@needs_nvcc
def test_a_model_compiles_for_cuda(tmp_path, capsys) -> None:
    """A small ONNX model fused in NCHW for the GPU: its convolutions and matmul get the CUDA
    templates, the rest dlight, and compile writes the library, its kernels compiled by nvcc and
    the description (the library runs on a GPU only: not run here)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from tiny import tiny

    from tensortune.cli import main
    from tensortune.models.reference import export_onnx

    m, x = tiny()
    path = export_onnx(m, x, str(tmp_path / "tiny.onnx"))
    assert main(["tasks", path, "--target", "cuda", "--json"]) == 0
    tasks = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    templates = {t["template"] for t in tasks}
    assert templates <= {"conv2d_cuda", "depthwise_conv2d_cuda", "gemm_cuda", "generic_cuda"} and "conv2d_cuda" in templates
    lib = tmp_path / "m.so"
    assert main(["compile", path, "--target", "cuda:sm_80", "-o", str(lib), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["counts"]["default"] == len(out["tasks"]) == len(tasks)  # no fallback needed
    with open(str(lib) + FATBIN_SUFFIX, "rb") as f:
        assert f.read(4) == FATBIN_MAGIC
    meta = json.loads(Path(str(lib) + ".json").read_text())
    assert meta["target"]["kind"] == "cuda" and meta["target"]["arch"] == "sm_80" and "tvm.cuda()" in meta["load"]
