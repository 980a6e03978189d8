"""``--target``: another x86-64 CPU's kernels, or a 64-bit Arm device's, built here; its records
are its own, and ``compile --target`` uses them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tensortune.target import TargetError, cross_linker, host_target_json, is_host, parse_target, runs_here

sys.path.insert(0, str(Path(__file__).resolve().parent / "models"))


def test_the_words_cpus_and_json_a_target_takes() -> None:
    here = host_target_json()
    assert parse_target(None) == parse_target("native") == here and is_host(here)
    generic = parse_target("generic")
    assert generic["mcpu"] == "x86-64" and not is_host(generic) or here["mcpu"] == "x86-64"
    z4 = parse_target("znver4", num_cores=4)
    assert z4 == {**{k: v for k, v in here.items() if k != "mattr"}, "mcpu": "znver4", "num-cores": 4}
    assert parse_target("x86-64").get("mattr") is None  # a named cpu: its own features, not this host's


def test_a_cpu_llvm_names_too_old_gets_the_features_the_host_has() -> None:
    """A VM may report a model LLVM reads as an older cpu; the host target adds what the CPU has."""
    from tensortune.precision import host_flags
    from tensortune.target import ISA_FEATURES, host_features_beyond

    here = host_target_json()
    assert set(host_features_beyond(here["mcpu"])) <= set(ISA_FEATURES)
    assert [f"+{f}" for f in host_features_beyond(here["mcpu"])] == (here.get("mattr") or [])
    if "avx2" in host_flags() and "fma" in host_flags():
        assert {"avx2", "fma"} <= set(host_features_beyond("x86-64"))  # SSE2's model lacks both
    assert parse_target('{"kind": "llvm", "mcpu": "skylake-avx512"}')["mtriple"] == "x86_64-linux-gnu"


@pytest.mark.parametrize("spec, says", [
    ("nonsense", "LLVM knows no x86-64 cpu 'nonsense'"),
    ('{"kind": "opencl"}', "only LLVM targets"),
    ('{"kind": "llvm", "mtriple": "riscv64-linux-gnu"}', "mtriple x86_64-linux-gnu or aarch64-linux-gnu"),
    ("aarch64:znver4", "LLVM knows no aarch64 cpu 'znver4'"),
    ("{bad", "not JSON"),
])
def test_what_cannot_be_built_here_is_one_line(spec, says) -> None:
    with pytest.raises(TargetError, match=says.replace("(", r"\(")):
        parse_target(spec)


def test_a_bad_target_is_refused_before_anything_is_written(tmp_path, capsys) -> None:
    from tensortune.cli import main

    db = tmp_path / "t.db"
    for argv in (["tune-op", "matmul", "--shape", "16,16,16", "--trials", "2"], ["tune", "resnet18", "--trials", "2"]):
        assert main([*argv, "--target", "nonsense", "--db", str(db)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "LLVM knows no x86-64 cpu" in err[0], err
    assert not db.exists()
    assert main(["compile", "resnet18", "--target", "nonsense", "-o", str(tmp_path / "m.so")]) == 2
    assert not (tmp_path / "m.so").exists()


def test_aarch64_words_and_json() -> None:
    a = parse_target("aarch64", num_cores=4)
    assert a == {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "generic", "num-cores": 4}
    assert parse_target("aarch64:neoverse-n1")["mcpu"] == "neoverse-n1"
    assert parse_target('{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}')["num-cores"] >= 1
    assert not is_host(a) and not runs_here(a) and runs_here(parse_target("znver4"))
    from tensortune.templates.base import target_lanes

    assert target_lanes(a) == 4  # NEON's 128 bits


def _arm_linker() -> None:
    try:
        cross_linker(parse_target("aarch64"))
    except TargetError as e:  # make installs the cross extra; a bare install may lack it
        pytest.skip(str(e))


def _elf_machine(path: Path) -> int:
    """ELF ``e_machine`` of a shared library (62 x86-64, 183 aarch64)."""
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF"
    return int.from_bytes(head[18:20], "little")


def test_arm_kernels_are_refused_here_without_rpc(tmp_path, capsys) -> None:
    from tensortune.cli import main

    db = tmp_path / "a.db"
    for argv in (["tune-op", "matmul", "--shape", "16,16,16", "--trials", "2"], ["tune", "resnet18", "--trials", "2"]):
        assert main([*argv, "--target", "aarch64", "--db", str(db)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "this machine cannot run its kernels" in err[0] and "--rpc" in err[0], err
    assert not db.exists()


def test_a_candidate_for_aarch64_is_built_and_linked_for_it(tmp_path) -> None:
    """What a device behind --rpc would load: every sampled matmul config links into an aarch64 library."""
    from tensortune.measure.worker import build_candidate
    from tensortune.task import Task

    _arm_linker()
    task = Task.from_op("matmul", [32, 32, 32], target=parse_target("aarch64:cortex-a72"))
    for config in (task.space.get(0), task.space.get(len(task.space) - 1)):
        kind, path, msg, _ = build_candidate(json.dumps(task.to_json()), config.to_json()["knobs"], str(tmp_path))
        assert kind == "none", msg
        assert _elf_machine(Path(path)) == 183


def test_compile_for_aarch64_writes_an_arm_library(tmp_path, capsys) -> None:
    from tiny import tiny

    from tensortune.cli import main
    from tensortune.models.reference import export_onnx

    _arm_linker()
    m, x = tiny()
    path = export_onnx(m, x, str(tmp_path / "tiny.onnx"))
    lib = tmp_path / "a.so"
    assert main(["compile", path, "--target", "aarch64:neoverse-n1", "-o", str(lib), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["counts"]["default"] == len(out["tasks"]) > 0
    assert _elf_machine(lib) == 183
    assert json.loads(Path(str(lib) + ".json").read_text())["target"]["mtriple"] == "aarch64-linux-gnu"


@pytest.mark.timeout(900)
def test_tune_for_generic_x86_64_then_compile_for_it_uses_its_records(tmp_path, capsys) -> None:
    """A tiny model tuned for x86-64 (its code runs here too): the in-model check is skipped, the
    records carry that target, compile --target generic builds every tuned task from them and its
    library computes what PyTorch does; compile for this CPU finds none of them."""
    from tiny import tiny

    from tensortune.cli import main
    from tensortune.database import Database
    from tensortune.models.compile import load_library
    from tensortune.models.reference import export_onnx
    from tensortune.target import target_key

    m, x = tiny()
    path = export_onnx(m, x, str(tmp_path / "tiny.onnx"))
    db = str(tmp_path / "g.db")
    assert main(["tune", path, "--target", "generic", "--tuner", "random", "--trials", "2", "--batch-size", "2",
                 "--db", db, "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["in_model_check"]["skipped"].startswith("built for x86-64")
    with Database(db, readonly=True) as d:
        targets = {r.target for t in d.tasks() for r in d.trials(t.workload_key)}
    assert targets == {target_key(parse_target("generic"))}
    assert main(["compile", path, "--db", db, "--target", "generic", "-o", str(tmp_path / "g.so"), "--json"]) == 0
    gen = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert gen["counts"]["tuned"] == len(out["tasks"]) > 0
    got = load_library(str(tmp_path / "g.so"))(x[0].numpy())[0]
    np.testing.assert_allclose(got, m(x[0]).detach().numpy(), rtol=1e-4, atol=1e-5)
    assert main(["compile", path, "--db", db, "-o", str(tmp_path / "n.so"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["counts"]["tuned"] == 0
