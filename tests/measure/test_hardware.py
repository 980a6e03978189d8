"""Hardware profiles: spec reading, feature vectors, JSON, the cache and one real measurement."""
from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tensortune.measure import hardware as hw
from tensortune.target import cpu_model, generic_target_json

ZEN4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4", "num-cores": 2}


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _fake_root(root: Path, cpufreq: bool = True) -> Path:
    cpu = ("processor\t: {i}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
           "model name\t: AMD EPYC 9654 96-Core Processor\ncpu MHz\t\t: {mhz}\nflags\t\t: fpu avx512f\n\n")
    _write(root, "proc/cpuinfo", cpu.format(i=0, mhz="2400.000") + cpu.format(i=1, mhz="3550.5"))
    _write(root, "proc/meminfo", "MemTotal:       24684096 kB\nMemFree:         1000 kB\n")
    if cpufreq:
        _write(root, "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "3700000\n")
        _write(root, "sys/devices/system/cpu/cpu1/cpufreq/cpuinfo_max_freq", "2000000\n")
    caches = [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"), (3, "Unified", "32M")]
    for i, (level, kind, size) in enumerate(caches):
        base = f"sys/devices/system/cpu/cpu0/cache/index{i}/"
        _write(root, base + "level", f"{level}\n")
        _write(root, base + "type", f"{kind}\n")
        _write(root, base + "size", f"{size}\n")
        _write(root, base + "coherency_line_size", "128\n")
    return root


def test_read_spec_from_fake_files(tmp_path: Path) -> None:
    spec = hw.read_spec(ZEN4, 2, root=_fake_root(tmp_path))
    assert spec == hw.HardwareSpec(cpu_model="AMD EPYC 9654 96-Core Processor", vendor="AuthenticAMD", family=25,
                                   model=17, llvm_cpu="znver4", frequency_mhz=3700.0, cores=2, vector_bits=512,
                                   memory_gb=round(24684096 / 2**20, 3), cache_line=128, l1d_kb=32, l2_kb=1024,
                                   l3_kb=32768)


def test_frequency_falls_back_to_cpuinfo_mhz(tmp_path: Path) -> None:
    spec = hw.read_spec(ZEN4, 1, root=_fake_root(tmp_path, cpufreq=False))
    assert spec.frequency_mhz == 3550.5


def test_missing_and_garbage_files_give_defaults(tmp_path: Path) -> None:
    empty = hw.read_spec(generic_target_json(1), 1, root=tmp_path / "nothing")
    assert (empty.cpu_model, empty.vendor, empty.family, empty.model) == ("unknown", "", 0, 0)
    assert (empty.frequency_mhz, empty.memory_gb, empty.l1d_kb, empty.l2_kb, empty.l3_kb) == (0, 0, 0, 0, 0)
    assert empty.cache_line == hw.DEFAULT_CACHE_LINE and empty.vector_bits == 128 and empty.cores == 1
    _write(tmp_path, "proc/cpuinfo", "vendor_id: GenuineIntel\ncpu family: x\nmodel: \ncpu MHz: fast\n\x00\xff")
    _write(tmp_path, "proc/meminfo", "MemTotal: lots\n")
    _write(tmp_path, "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "n/a")
    _write(tmp_path, "sys/devices/system/cpu/cpu0/cache/index0/level", "one")
    _write(tmp_path, "sys/devices/system/cpu/cpu0/cache/index1/level", "2")
    _write(tmp_path, "sys/devices/system/cpu/cpu0/cache/index1/size", "big")
    (tmp_path / "sys/devices/system/cpu/cpu0/cache/index2/level").mkdir(parents=True)  # unreadable: a folder
    spec = hw.read_spec(ZEN4, 2, root=tmp_path)
    assert spec.vendor == "GenuineIntel" and spec.family == 0 and spec.model == 0
    assert (spec.frequency_mhz, spec.memory_gb, spec.l2_kb, spec.cache_line) == (0, 0, 0, 64)


def test_vector_bits_rule() -> None:
    bits = {c: hw.vector_bits_of({"kind": "llvm", "mcpu": c})
            for c in ("znver4", "znver5", "skylake-avx512", "sapphirerapids", "znver3", "haswell", "skylake",
                      "alderlake", "x86-64-v3", "sandybridge", "x86-64", "x86-64-v2", "generic", "")}
    assert [c for c, b in bits.items() if b == 512] == ["znver4", "znver5", "skylake-avx512", "sapphirerapids"]
    assert [c for c, b in bits.items() if b == 256] == ["znver3", "haswell", "skylake", "alderlake", "x86-64-v3",
                                                        "sandybridge"]
    assert all(b == 128 for c, b in bits.items() if c in ("x86-64", "x86-64-v2", "generic", ""))


def _profile(spec: hw.HardwareSpec | None = None, target: dict | None = None, threads: int = 2,
             scale: float = 1.0) -> hw.HardwareProfile:
    target = dict(target or ZEN4)
    spec = spec or hw.read_spec(target, threads)
    sig = {n: scale * (i + 1) * 1.5 for i, n in enumerate(hw.SIGNATURE_NAMES)}
    return hw.HardwareProfile(spec=spec, signature=sig, peak_gflops=sig["fma"], bandwidth_gbs=sig["copy_dram"],
                              target=target, threads=threads, tvm_version="0.27.test", measured_at=1.7e9)


def test_vectors_and_names_agree(tmp_path: Path) -> None:
    spec = hw.read_spec(ZEN4, 2, root=_fake_root(tmp_path))
    v = spec.vector()
    assert v.dtype == np.float32 and v.shape == (len(hw.SPEC_FEATURE_NAMES),)
    named = dict(zip(hw.SPEC_FEATURE_NAMES, v.tolist()))
    assert (named["spec_vendor_amd"], named["spec_vendor_intel"], named["spec_vendor_other"]) == (1, 0, 0)
    assert named["spec_vector_bits"] == pytest.approx(math.log2(513))
    assert named["spec_l2_kb"] == pytest.approx(math.log2(1025))
    assert named["spec_family"] == pytest.approx(math.log2(26))
    other = hw.HardwareSpec(**{**spec.to_json(), "vendor": "HygonGenuine"}).vector()
    assert other[:3].tolist() == [0, 0, 1]

    prof = _profile(spec)
    pv = prof.vector()
    assert hw.HW_FEATURE_NAMES == hw.SPEC_FEATURE_NAMES + tuple(f"sig_{n}" for n in hw.SIGNATURE_NAMES)
    assert len(set(hw.HW_FEATURE_NAMES)) == len(hw.HW_FEATURE_NAMES) == pv.shape[0]
    assert "sig_copy_l2" in hw.HW_FEATURE_NAMES and pv.dtype == np.float32
    np.testing.assert_allclose(pv[: len(v)], v)
    i = hw.HW_FEATURE_NAMES.index("sig_copy_l2")
    assert pv[i] == pytest.approx(math.log2(prof.signature["copy_l2"]))


def test_json_round_trip() -> None:
    prof = _profile()
    data = json.loads(json.dumps(prof.to_json()))
    back = hw.HardwareProfile.from_json(data)
    assert back == prof and back.key() == prof.key()
    np.testing.assert_array_equal(back.vector(), prof.vector())


@pytest.mark.parametrize("mutate", [
    lambda d: d.pop("spec"),
    lambda d: d.update(format="tensortune-hardware/0"),
    lambda d: d["spec"].pop("l2_kb"),
    lambda d: d["spec"].update(family="25"),
    lambda d: d["spec"].update(cores=2.5),
    lambda d: d["signature"].pop("matmul"),
    lambda d: d["signature"].update(exp=0.0),
    lambda d: d["signature"].update(fma=float("nan")),
    lambda d: d["signature"].update(strided="fast"),
    lambda d: d.update(signature=[1, 2]),
    lambda d: d.update(threads=0),
    lambda d: d.update(threads=True),
    lambda d: d.update(target="llvm"),
    lambda d: d.update(peak_gflops=-1),
])
def test_from_json_rejects_malformed(mutate) -> None:
    data = _profile().to_json()
    mutate(data)
    with pytest.raises(ValueError) as e:
        hw.HardwareProfile.from_json(data)
    assert "\n" not in str(e.value) and str(e.value).startswith("hardware")


@pytest.mark.parametrize("bad", [None, [], "x", 3])
def test_from_json_rejects_non_objects(bad) -> None:
    with pytest.raises(ValueError):
        hw.HardwareProfile.from_json(bad)


def test_key_identifies_model_target_threads() -> None:
    a = _profile()
    assert a.key() == hw.profile_key(cpu_model(), ZEN4, 2)
    assert a.key() == _profile(target=dict(reversed(list(ZEN4.items())))).key()  # key order does not matter
    assert len({a.key(), _profile(threads=1).key(), _profile(target=generic_target_json(2)).key(),
                hw.profile_key("another cpu", ZEN4, 2)}) == 4


@pytest.fixture
def fake_measure(monkeypatch: pytest.MonkeyPatch) -> list:
    calls: list = []

    def measure(target_json: dict, threads: int, timeout: float = 0) -> hw.HardwareProfile:
        calls.append((dict(target_json), threads))
        return _profile(target=target_json, threads=threads, scale=len(calls))

    monkeypatch.setattr(hw, "measure_profile", measure)
    return calls


def test_cache_measures_once_and_refreshes(tmp_path: Path, fake_measure: list) -> None:
    tj = generic_target_json(1)
    first = hw.profile_for(tj, 1, cache_dir=tmp_path)
    again = hw.profile_for(tj, 1, cache_dir=tmp_path)
    assert len(fake_measure) == 1 and again == first
    files = list(tmp_path.iterdir())
    assert files == [hw.cache_file(first.key(), tmp_path)]
    assert hw.HardwareProfile.from_json(json.loads(files[0].read_text())) == first
    hw.profile_for(tj, 2, cache_dir=tmp_path)  # another thread count: another entry
    assert len(fake_measure) == 2 and len(list(tmp_path.iterdir())) == 2
    fresh = hw.profile_for(tj, 1, cache_dir=tmp_path, refresh=True)
    assert len(fake_measure) == 3 and fresh.signature["fma"] == 3 * first.signature["fma"]
    assert hw.profile_for(tj, 1, cache_dir=tmp_path) == fresh


@pytest.mark.parametrize("content", [b"{not json", b"", b"\xff\xfe\x00", b'{"format": "tensortune-hardware/1"}', b"[]"])
def test_corrupt_cache_is_measured_again(tmp_path: Path, fake_measure: list, caplog, content: bytes) -> None:
    tj = generic_target_json(1)
    path = hw.cache_file(hw.profile_key(cpu_model(), tj, 1), tmp_path)
    path.write_bytes(content)
    prof = hw.profile_for(tj, 1, cache_dir=tmp_path)
    assert len(fake_measure) == 1
    assert [r.name for r in caplog.records if r.levelname == "WARNING"] == ["tensortune.measure.hardware"]
    assert hw.HardwareProfile.from_json(json.loads(path.read_text())) == prof
    assert not [p for p in tmp_path.iterdir() if p != path]  # no temporary file left behind


def test_cache_location_from_environment(tmp_path: Path, fake_measure: list, monkeypatch) -> None:
    monkeypatch.setenv(hw.CACHE_ENV, str(tmp_path))
    prof = hw.profile_for(generic_target_json(1), 1)
    assert hw.cache_file(prof.key()).parent == tmp_path / "hardware"
    assert hw.cache_file(prof.key()).is_file()


def test_measure_profile_errors_are_one_line(monkeypatch) -> None:
    def timeout(*a, **k):
        raise subprocess.TimeoutExpired(a[0], k.get("timeout"))

    monkeypatch.setattr(hw.subprocess, "run", timeout)
    with pytest.raises(hw.HardwareError, match="timed out after 7 s"):
        hw.measure_profile(generic_target_json(1), 1, timeout=7)

    def fails(cmd, **k):
        assert k["env"]["TVM_NUM_THREADS"] == "3"
        return subprocess.CompletedProcess(cmd, 1, "", "Traceback\n  boom\nerror: TVMError: no such cpu\n")

    monkeypatch.setattr(hw.subprocess, "run", fails)
    with pytest.raises(hw.HardwareError) as e:
        hw.measure_profile(generic_target_json(3), 3)
    assert "\n" not in str(e.value) and "exited with 1: error: TVMError: no such cpu" in str(e.value)
    monkeypatch.setattr(hw.subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(cmd, 0, "noise\n{}\n", ""))
    with pytest.raises(hw.HardwareError, match="unreadable output"):
        hw.measure_profile(generic_target_json(1), 1)
    with pytest.raises(ValueError):
        hw.measure_profile(generic_target_json(1), 0)


def test_signature_refuses_a_wrong_thread_pool(monkeypatch) -> None:
    monkeypatch.setenv("TVM_NUM_THREADS", "3")
    with pytest.raises(hw.HardwareError, match="TVM_NUM_THREADS"):
        hw.measure_signature(generic_target_json(1), 1)


def test_main_reports_bad_arguments_in_one_line(capsys) -> None:
    assert hw.main(["--measure", "--threads", "1", "--target", "[1]"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "JSON object" in err


def test_real_profile_of_the_generic_target() -> None:
    tj = generic_target_json(1)
    prof = hw.measure_profile(tj, 1)
    assert set(prof.signature) == set(hw.SIGNATURE_NAMES)
    assert all(math.isfinite(v) and v > 0 for v in prof.signature.values()), prof.signature
    assert prof.signature["fma"] > prof.signature["scalar_reduce"], prof.signature
    assert prof.signature["copy_l1"] > prof.signature["copy_dram"] * 1.5, prof.signature  # caches beat DRAM
    assert prof.peak_gflops == prof.signature["fma"] and prof.bandwidth_gbs == prof.signature["copy_dram"]
    assert prof.target == tj and prof.threads == 1 and prof.spec.cores == 1
    assert prof.spec.llvm_cpu == "x86-64" and prof.spec.vector_bits == 128 and prof.spec.cpu_model == cpu_model()
    assert prof.tvm_version.startswith("0.") and prof.measured_at > 1.6e9
    assert np.isfinite(prof.vector()).all() and prof.vector().shape == (len(hw.HW_FEATURE_NAMES),)
    print(f"measured in {prof.wall_s:.1f} s:", json.dumps({k: round(v, 2) for k, v in prof.signature.items()}))
