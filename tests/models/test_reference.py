"""Reference runners (PyTorch eager, ONNX Runtime), ONNX export, output checks and the latency protocol."""
from __future__ import annotations

import json
import math
import time
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from tensortune.measure.timing import Latency, interleaved_latency, interleaved_rounds, time_callable
from tensortune.measure import timing
from tensortune.models.reference import (DEFAULT_RTOL, DEFAULT_THREADS, OrtRunner, OutputCheck, ReferenceRunError, TorchRunner,
                                         compare_outputs, export_onnx, set_threads)

THREADS = min(2, DEFAULT_THREADS)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 10)
        with torch.no_grad():  # non-trivial statistics so that batch-norm folding is exercised
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        x = nn.functional.max_pool2d(x, 2)
        return self.fc(torch.flatten(x, 1))


class TinyBlock(nn.Module):
    """Embedding from int64 ids + one pre-LN transformer block (attention via matmul/softmax, GELU MLP)."""

    def __init__(self, vocab: int = 50, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.emb = nn.Embedding(vocab, dim)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim)), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        y = self.lin(x)
        return y, (y.sum(dim=1), x * 2)


@pytest.fixture(scope="module")
def cnn_case() -> tuple[nn.Module, list[np.ndarray]]:
    torch.manual_seed(0)
    return SmallCNN().eval(), [np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)]


@pytest.fixture(scope="module")
def block_case() -> tuple[nn.Module, list[np.ndarray]]:
    torch.manual_seed(1)
    return TinyBlock().eval(), [np.random.default_rng(1).integers(0, 50, size=(2, 7), dtype=np.int64)]


# ------------------------------------------------------------------------------------------------
# PyTorch eager
# ------------------------------------------------------------------------------------------------

def test_torch_runner_matches_module(cnn_case):
    module, inputs = cnn_case
    runner = TorchRunner(module, threads=THREADS)
    assert runner.name == "pytorch"
    assert not module.training
    assert torch.get_num_threads() == THREADS
    out = runner.run(inputs)
    with torch.no_grad():
        expected = module(torch.from_numpy(inputs[0])).numpy()
    assert len(out) == 1 and isinstance(out[0], np.ndarray)
    np.testing.assert_array_equal(out[0], expected)
    fn = runner.callable(inputs)
    assert fn() is None


def test_torch_runner_flattens_nested_outputs():
    torch.manual_seed(2)
    module = TwoHeads()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = TorchRunner(module, threads=THREADS).run([x])
    assert [o.shape for o in out] == [(2, 3), (2,), (2, 4)]
    np.testing.assert_array_equal(out[2], x * 2)


def test_set_threads():
    set_threads(1)
    assert torch.get_num_threads() == 1
    set_threads(THREADS)  # the inter-op count can no longer be changed here: the RuntimeError is swallowed
    assert torch.get_num_threads() == THREADS
    with pytest.raises(ValueError):
        set_threads(0)


# ------------------------------------------------------------------------------------------------
# ONNX export + ONNX Runtime
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["cnn_case", "block_case"])
def test_export_and_ort_match_torch(case, request, tmp_path, capfd):
    import onnx

    module, inputs = request.getfixturevalue(case)
    module.train()  # export must use eval mode and restore the flag afterwards
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = export_onnx(module, [torch.from_numpy(x) for x in inputs], str(tmp_path / "sub" / "m.onnx"))
    out, err = capfd.readouterr()
    assert (out, err, [str(w.message) for w in caught]) == ("", "", [])  # quiet
    assert module.training
    module.eval()
    assert path == str(tmp_path / "sub" / "m.onnx")

    model = onnx.load(path)
    assert model.opset_import[0].version == 17
    dims = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input]
    assert dims == [list(x.shape) for x in inputs]  # static shapes

    ort_runner = OrtRunner(path, threads=THREADS)
    assert ort_runner.name == "onnxruntime"
    assert ort_runner.input_names == ["input0"]
    got = ort_runner.run(inputs)
    ref = TorchRunner(module, threads=THREADS).run(inputs)
    check = compare_outputs(got, ref)
    assert check.ok, check.message
    assert check.max_rel_err < DEFAULT_RTOL
    assert ort_runner.callable(inputs)() is None
    # its threads stop spinning when a run returns, so they take no core from the next system timed
    assert ort_runner.session.get_session_options().get_session_config_entry("session.force_spinning_stop") == "1"


def test_ort_rejects_wrong_inputs(cnn_case, tmp_path):
    module, inputs = cnn_case
    runner = OrtRunner(export_onnx(module, [torch.from_numpy(inputs[0])], str(tmp_path / "m.onnx")), threads=1)
    with pytest.raises(ReferenceRunError, match="takes 1 inputs, got 2"):
        runner.run(inputs * 2)
    with pytest.raises(ReferenceRunError, match="expects float32, got float64"):
        runner.run([inputs[0].astype(np.float64)])
    with pytest.raises(ReferenceRunError, match="expects shape"):
        runner.run([inputs[0][:1]])


def test_ort_load_failure_is_reference_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ReferenceRunError) as info:
        OrtRunner(str(bad))
    assert "\n" not in str(info.value)


def test_export_failure_is_one_line_reference_error(tmp_path):
    class Unsupported(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.eigh(x)[0]

    with pytest.raises(ReferenceRunError) as info:
        export_onnx(Unsupported(), [torch.randn(3, 3)], str(tmp_path / "u.onnx"))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("ONNX export of Unsupported failed")


# ------------------------------------------------------------------------------------------------
# Output check
# ------------------------------------------------------------------------------------------------

def _ref() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]


def test_compare_accepts_tiny_perturbation():
    ref = _ref()
    got = [r + np.float32(1e-5) * np.abs(r).max() for r in ref]
    check = compare_outputs(got, ref)
    assert check.ok and check.rtol == DEFAULT_RTOL
    assert 0 < check.max_rel_err < DEFAULT_RTOL
    assert check.message.startswith("outputs match (max abs err ") and check.message.endswith("tolerance 1e-03)")
    assert compare_outputs(ref, ref).max_abs_err == 0.0
    assert compare_outputs([np.zeros(3, np.float32)], [np.zeros(3, np.float32)]).ok  # absolute floor


@pytest.mark.parametrize("kind, fragment", [
    ("perturbed", "output 1 differs"),
    ("shape", "shape mismatch"),
    ("dtype", "dtype mismatch"),
    ("nan", "non-finite"),
    ("count", "output count mismatch: got 1, expected 2"),
    ("error", "could not compare outputs"),
])
def test_compare_catches(kind, fragment):
    ref = _ref()
    got = [r.copy() for r in ref]
    if kind == "perturbed":
        got[1][0] += 0.01 * np.abs(ref[1]).max()
    elif kind == "shape":
        got[0] = got[0].reshape(5, 4)
    elif kind == "dtype":
        got[0] = got[0].astype(np.float64)
    elif kind == "nan":
        got[0][1, 2] = np.nan
    elif kind == "count":
        got = got[:1]
    elif kind == "error":
        got = None  # not a sequence at all
    check = compare_outputs(got, ref)
    assert isinstance(check, OutputCheck) and not check.ok
    assert fragment in check.message and "\n" not in check.message
    json.dumps(check.to_json(), allow_nan=False)
    if kind == "perturbed":
        assert check.max_rel_err == pytest.approx(0.01, rel=1e-3)


def test_compare_ignores_nonfinite_reference_positions():
    ref = [np.array([1.0, np.nan, 2.0], np.float32)]
    check = compare_outputs([np.array([1.0, 0.0, 2.0], np.float32)], ref)
    assert check.ok and "1 non-finite reference value(s) not compared" in check.message


# ------------------------------------------------------------------------------------------------
# Timing
# ------------------------------------------------------------------------------------------------

class FakeClock:
    """Stands in for ``time`` in :mod:`reference`: it moves only when a timed callable says so,
    so the timing logic is checked exactly, whatever else runs on the machine."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def work(self, seconds: float, log: list | None = None):
        """A callable that takes exactly ``seconds`` of this clock (and logs its calls)."""
        def fn() -> None:
            if log is not None:
                log.append(seconds)
            self.now += seconds
        return fn


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(timing, "time", c)
    return c


def test_time_callable_respects_min_time_and_limits(clock):
    calls: list[float] = []
    runs = time_callable(clock.work(0.25, calls), min_time_s=1.0)  # binary fractions: exact sums
    assert len(calls) == len(runs) + 1  # one untimed warm-up
    assert runs == [0.25] * 4  # stops at the first run that reaches min_time_s, not before
    runs = time_callable(clock.work(0.25), min_time_s=1.1)
    assert runs == [0.25] * 5
    assert time_callable(clock.work(2.0), min_time_s=1.0) == [2.0]  # at least one run
    assert len(time_callable(clock.work(0.5), min_time_s=0.0)) == 1
    assert len(time_callable(clock.work(0.5), min_time_s=60.0, max_runs=7)) == 7
    with pytest.raises(ValueError):
        time_callable(clock.work(0.5), max_runs=0)


def test_time_callable_on_the_real_clock():
    """Real sleeps: every timed run lasts at least the sleep, so at most min_time / sleep runs
    are needed (an upper bound only; the machine may be slower, never faster)."""
    calls = []
    runs = time_callable(lambda: calls.append(time.sleep(0.004)), min_time_s=0.03)
    assert len(calls) == len(runs) + 1
    assert 1 <= len(runs) <= 8 and all(r >= 0.004 for r in runs)


def test_interleaved_latency_orders_and_scales(clock):
    res = interleaved_latency({"fast": clock.work(0.002), "slow": clock.work(0.006)}, rounds=5, min_time_s=0.04)
    assert list(res) == ["fast", "slow"]
    fast, slow = res["fast"], res["slow"]
    assert fast.samples == slow.samples == 5
    assert fast.median_ms == pytest.approx(2.0, rel=1e-9) and slow.median_ms == pytest.approx(6.0, rel=1e-9)
    for lat in (fast, slow):
        assert lat.min_ms == pytest.approx(lat.max_ms, rel=1e-9)  # a constant-time callable has no spread
        assert lat.min_ms <= lat.p25_ms <= lat.median_ms <= lat.p75_ms <= lat.max_ms
        assert lat.spread() == pytest.approx(0.0, abs=1e-9)
    json.dumps(fast.to_json(), allow_nan=False)


def test_interleaved_latency_takes_per_round_medians(clock):
    """Warm-up calls are never timed, and each round contributes the median of its runs, so a
    hiccup within a round moves nothing while slower rounds show up in the spread."""
    def scripted(ms: list[float]):
        it = iter(ms)

        def fn() -> None:
            clock.now += next(it) / 1e3
        return fn

    warm = 50.0  # every warm-up call is slow: it must not count
    one_run = scripted([warm] + [warm, 3.0] + [warm, 1.0] + [warm, 2.0])  # min_time 0: one timed run a round
    lat = interleaved_latency({"x": one_run}, rounds=3, min_time_s=0.0, warmup_s=0.0)["x"]
    assert lat.samples == 3
    assert (lat.min_ms, lat.median_ms, lat.max_ms) == pytest.approx((1.0, 2.0, 3.0))
    hiccup = scripted([warm] + [warm, 1.0, 1.0, 10.0] * 3)  # 3 runs reach min_time; the 10 ms one is a hiccup
    lat = interleaved_latency({"x": hiccup}, rounds=3, min_time_s=0.0025, warmup_s=0.0)["x"]
    assert (lat.min_ms, lat.median_ms, lat.max_ms) == pytest.approx((1.0, 1.0, 1.0))


def test_interleaved_rounds_keeps_each_round_for_paired_comparisons(clock):
    """Round r of every system is kept, in order and in seconds: on a machine that slows down
    round by round, b stays exactly twice a in every round, whatever the medians do."""
    def scripted(ms: list[float]):
        it = iter(ms)

        def fn() -> None:
            clock.now += next(it) / 1e3
        return fn

    w = 50.0  # warm-up calls
    a = scripted([w] + [w, 1.0] + [w, 2.0] + [w, 4.0])  # min_time 0: one timed run a round
    b = scripted([w] + [w, 2.0] + [w, 4.0] + [w, 8.0])
    per_round = interleaved_rounds({"a": a, "b": b}, rounds=3, min_time_s=0.0, warmup_s=0.0)
    assert list(per_round) == ["a", "b"]
    assert per_round["a"] == pytest.approx([1e-3, 2e-3, 4e-3]) and per_round["b"] == pytest.approx([2e-3, 4e-3, 8e-3])
    with pytest.raises(ValueError):
        interleaved_rounds({}, rounds=1)


def test_warm_up_lasts_warmup_s_before_the_rounds(clock):
    """Each system is called untimed for warmup_s (a fresh process's first parallel runs read
    slow), at least once and at most DEFAULT_MAX_RUNS times, before any round."""
    calls: list[float] = []
    per_round = interleaved_rounds({"x": clock.work(0.125, calls)}, rounds=2, min_time_s=0.0, warmup_s=0.3)
    # 0.125, 0.25, 0.375 >= 0.3; then per round time_callable's own warm-up call and one timed
    assert len(calls) == 3 + 2 * 2 and per_round["x"] == [0.125, 0.125]
    calls.clear()
    interleaved_rounds({"x": clock.work(1.0, calls)}, rounds=1, min_time_s=0.0, warmup_s=0.3)
    assert len(calls) == 1 + 2
    calls.clear()
    interleaved_rounds({"x": clock.work(0.0, calls)}, rounds=1, min_time_s=0.0, warmup_s=0.3)
    assert len(calls) == timing.DEFAULT_MAX_RUNS + 2  # a clock that never moves: capped


def test_paired_timing_gives_each_build_its_change_against_the_one_before(monkeypatch):
    """The first build has no change; each next one is timed beside the one before it, and its
    change is the median of the per-round ratios (drift that hits both rounds alike cancels)."""
    seen: list[list[str]] = []
    per_build = {"u": [3.0, 3.3, 3.0], "r1": [2.7, 3.0, 2.79], "r2": [2.6, 2.8, 2.8]}

    def fake(fns, rounds, min_time_s, warmup_s=0.3):
        seen.append(sorted(fns))
        return {k: per_build[fn.__name__] for k, fn in fns.items()}

    def build(name):
        def fn() -> None:
            pass
        fn.__name__ = name
        return fn

    monkeypatch.setattr(timing, "interleaved_rounds", fake)
    paired = timing.PairedTiming(rounds=3)
    assert paired.time(build("u")) == (3.0, None, None)
    lat, change, vs_first = paired.time(build("r1"))
    assert lat == 2.79 and change == pytest.approx(3.0 / 3.3 - 1)  # ratios 0.9, 0.909, 0.93
    assert vs_first == pytest.approx(3.0 / 3.3)  # the one before is the first
    t = paired.time(build("r2"))  # beside r1 (its change) and u (its ratio to the first)
    assert t.change == pytest.approx(2.6 / 2.7 - 1)  # ratios 0.963, 0.933, 1.0036
    assert t.vs_first == pytest.approx(2.6 / 3.0)  # ratios 0.867, 0.848, 0.933
    assert seen == [["now"], ["before", "now"], ["before", "first", "now"]]


def test_interleaved_latency_rotates_order(monkeypatch):
    log: list[str] = []

    def recorder(name: str):
        def fn() -> None:
            log.append(name)
        return fn

    fns = {n: recorder(n) for n in "abc"}
    name_of = {fn: n for n, fn in fns.items()}
    timed: list[str] = []
    real = timing.time_callable

    def spy(fn, min_time_s=0.2, max_runs=1000):
        timed.append(name_of[fn])
        return real(fn, min_time_s, max_runs)

    monkeypatch.setattr(timing, "time_callable", spy)
    res = interleaved_latency(fns, rounds=4, min_time_s=0.0, warmup_s=0.0)
    assert log[:3] == ["a", "b", "c"]  # warm-up of every system first
    assert timed == list("abc" "bca" "cab" "abc")  # each round starts with the next system
    assert all(lat.samples == 4 for lat in res.values())
    # nothing interleaves within a system's turn: warm-up + one timed call each, back to back
    turns = [log[3:][i:i + 2] for i in range(0, len(log) - 3, 2)]
    assert all(t[0] == t[1] for t in turns) and [t[0] for t in turns] == timed


def test_latency_summary():
    lat = Latency.from_samples_s([0.001, 0.002, 0.003, 0.004, 0.005])
    assert (lat.median_ms, lat.p25_ms, lat.p75_ms, lat.min_ms, lat.max_ms, lat.samples) == pytest.approx(
        (3.0, 2.0, 4.0, 1.0, 5.0, 5))
    assert lat.spread() == pytest.approx(2.0 / 3.0)
    assert set(lat.to_json()) >= {"median_ms", "p25_ms", "p75_ms", "min_ms", "max_ms", "samples", "spread"}


# ------------------------------------------------------------------------------------------------
# OpenVINO (optional extra)
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def conv_onnx(tmp_path_factory) -> tuple[str, list[np.ndarray]]:
    """A tiny conv+relu exported to ONNX, and an input for it."""
    torch.manual_seed(2)
    module = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU()).eval()
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    path = export_onnx(module, [torch.from_numpy(x)], str(tmp_path_factory.mktemp("ov") / "conv.onnx"))
    return path, [x]


def test_openvino_runner_matches_onnxruntime(conv_onnx):
    openvino = pytest.importorskip("openvino")
    from tensortune.models.reference import OpenVinoRunner

    path, inputs = conv_onnx
    runner = OpenVinoRunner(path, threads=THREADS)
    assert runner.name == "openvino" and runner.input_names == ["input0"] and runner.threads == THREADS
    # float32 kept (no bf16 on AMX/Zen4 CPUs), as many threads as the other systems
    assert runner.compiled.get_property("INFERENCE_PRECISION_HINT") == openvino.Type.f32
    assert int(runner.compiled.get_property("INFERENCE_NUM_THREADS")) == THREADS
    got = runner.run(inputs)
    expected = OrtRunner(path, threads=THREADS).run(inputs)
    assert len(got) == 1 and got[0].shape == expected[0].shape and got[0].dtype == np.float32
    np.testing.assert_allclose(got[0], expected[0], rtol=0, atol=1e-4)
    assert compare_outputs(got, expected).ok
    assert runner.callable(inputs)() is None


def test_openvino_missing_path_is_one_line_reference_error(tmp_path):
    pytest.importorskip("openvino")
    from tensortune.models.reference import OpenVinoRunner

    missing = tmp_path / "missing.onnx"
    with pytest.raises(ReferenceRunError) as info:
        OpenVinoRunner(str(missing), threads=1)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("openvino could not load") and "missing.onnx" in msg


def test_openvino_rejects_wrong_inputs(conv_onnx):
    pytest.importorskip("openvino")
    from tensortune.models.reference import OpenVinoRunner

    path, inputs = conv_onnx
    runner = OpenVinoRunner(path, threads=1)
    wrong_shape = r"openvino input 'input0' expects shape \(1, 3, 8, 8\), got \(1, 3, 4, 4\)"
    with pytest.raises(ReferenceRunError, match=wrong_shape):
        runner.run([inputs[0][:, :, :4, :4]])
    with pytest.raises(ReferenceRunError, match="openvino input 'input0' expects float32, got float64"):
        runner.run([inputs[0].astype(np.float64)])
    with pytest.raises(ReferenceRunError, match="openvino model takes 1 inputs, got 2"):
        runner.callable(inputs * 2)


def test_openvino_not_installed_says_how_to_install(monkeypatch, conv_onnx):
    from tensortune.models.reference import OpenVinoRunner

    monkeypatch.setitem(__import__("sys").modules, "openvino", None)  # import openvino -> ImportError
    with pytest.raises(ReferenceRunError, match=r"^openvino is not installed: pip install 'tensortune\[openvino\]'$"):
        OpenVinoRunner(conv_onnx[0], threads=1)


def test_an_output_of_near_zero_values_is_measured_against_the_floor() -> None:
    """An output whose largest value is below the absolute floor passes by the floor; its error is
    reported against the floor's scale (ABS_FLOOR / rtol), not as 5x its own tiny maximum, so the
    figure stays within the tolerance as the check does."""
    big = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
    tiny = np.full((2, 2), 1e-8, dtype=np.float32)
    check = compare_outputs([big, tiny + 5e-8], [big, tiny], rtol=2e-2)
    assert check.ok and 0 < check.max_rel_err <= 2e-2
    assert check.max_rel_err == pytest.approx(5e-8 / (1e-6 / 2e-2), rel=1e-3)
    assert "output(s) 1 of the reference all (near) zero" in check.message
    assert "near" not in compare_outputs([big], [big]).message


def test_an_openvino_as_shipped_that_fails_to_build_is_a_note_beside_the_f32_row(monkeypatch, tmp_path) -> None:
    """OpenVINO compiled with the f32 hint but not as shipped: the f32 row stays and the report
    says why the row a user compares with is missing (the corpus once dropped it silently)."""
    pytest.importorskip("openvino")
    import sys
    from pathlib import Path

    from tensortune.models import comparison
    from tensortune.models.importer import load_model
    from tensortune.models.reference import OpenVinoRunner

    sys.path.insert(0, str(Path(__file__).parent))
    from tiny import one_conv

    class F32Only(OpenVinoRunner):
        def __init__(self, path: str, threads: int = 1, precision_hint: str | None = "f32") -> None:
            if precision_hint is None:
                raise ReferenceRunError("openvino could not compile as shipped: planted")
            super().__init__(path, threads, precision_hint)

    monkeypatch.setattr(comparison, "OpenVinoRunner", F32Only)
    module, inputs = one_conv()
    model = load_model(module, inputs)
    report = comparison.bench_model(model, rounds=1, min_time_s=0.01)
    names = [r.name for r in report.rows]
    assert "openvino" in names and comparison.SHIPPED_ROW not in names
    assert f"{comparison.SHIPPED_ROW}: no row: openvino could not compile as shipped: planted" in report.notes
