"""TVM's threads placed by tensortune: one core per worker, the calling thread alone on the
first, inside the mask it had, and its mask given back after the TVM code ran."""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from tensortune.utils import placement
from tensortune.utils.placement import plan, tvm_pinned, tvm_pool

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no thread affinity on this system")


def _affinity(tid: int) -> set[int]:
    return os.sched_getaffinity(tid)


def _tids() -> set[int]:
    return {int(p.name) for p in Path("/proc/self/task").iterdir()}


def _in_fresh_thread(fn: Callable[[], Any], threads: int, mask: set[int] | None = None) -> Any:
    """``fn()`` in a new thread (a new TVM pool of ``threads`` threads), its mask first set to ``mask``."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            if mask is not None:
                os.sched_setaffinity(0, mask)
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            out["error"] = e

    before = os.environ.get("TVM_NUM_THREADS")
    os.environ["TVM_NUM_THREADS"] = str(threads)  # read when the thread's pool starts
    try:
        t = threading.Thread(target=body)
        t.start()
        t.join(60)
    finally:
        if before is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = before
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_plan_gives_the_calling_thread_the_first_core_and_a_core_to_each_worker() -> None:
    p = plan(2, {3, 1, 5})
    assert p.cores == (1, 3) and p.pinned and "calling thread on 1" in p.describe()
    assert plan(4, {0, 1, 2, 3}).cores == (0, 1, 2, 3)
    assert not plan(1, {0, 1}).pinned and plan(1, {0, 1}).note == "one thread"
    short = plan(3, {0, 1})
    assert not short.pinned and "3 threads but 2 usable cores" in short.note


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_the_pool_workers_and_the_calling_thread_sit_on_cores_of_their_own() -> None:
    def run() -> dict[str, Any]:
        mask = _affinity(0)
        before = _tids()
        p = tvm_pool()
        workers = _tids() - before
        with tvm_pinned() as inside:
            with tvm_pinned():  # re-entrant: the inner block changes nothing
                nested = _affinity(0)
            held = _affinity(0)
        return {"mask": mask, "placement": p, "inside": inside, "workers": {w: _affinity(w) for w in workers},
                "held": held, "nested": nested, "after": _affinity(0)}

    r = _in_fresh_thread(run, threads=2)
    p = r["placement"]
    assert p.pinned and p.threads == 2 and set(p.cores) <= r["mask"]
    assert r["held"] == r["nested"] == {p.cores[0]}
    assert [a for a in r["workers"].values() if len(a) == 1] == [{p.cores[1]}]  # the worker, on the other core
    assert r["after"] == r["mask"]  # given back: ONNX Runtime or PyTorch in this thread keep every core


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_a_narrow_mask_is_never_widened_and_a_shortage_of_cores_is_said(caplog: pytest.LogCaptureFixture) -> None:
    one = {max(os.sched_getaffinity(0))}

    def run() -> dict[str, Any]:
        before = _tids()
        p = tvm_pool()
        with tvm_pinned():
            held = _affinity(0)
        return {"placement": p, "held": held, "after": _affinity(0),
                "workers": [_affinity(w) for w in _tids() - before]}

    placement._WARNED.clear()
    with caplog.at_level(logging.WARNING, logger="tensortune.utils.placement"):
        r = _in_fresh_thread(run, threads=2, mask=one)
    assert not r["placement"].pinned and r["held"] == r["after"] == one
    assert all(w <= one for w in r["workers"])  # TVM's own binding would have put a worker on core 0
    assert "2 threads but 1 usable core" in caplog.text


@pytest.fixture(scope="module")
def one_conv_compiled() -> Any:
    from models.tiny import one_conv

    from tensortune.app.deploy import compile as compile_model
    from tensortune.app.deploy import load

    return compile_model(load(*one_conv()))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_a_compiled_model_runs_pinned_and_hands_the_mask_back(one_conv_compiled: Any, tmp_path: Path) -> None:
    from tensortune.models.compile import load_library

    lib, _ = one_conv_compiled.export(str(tmp_path / "m.so"))
    x = one_conv_compiled.model.example_inputs

    def run() -> dict[str, Any]:
        mask = _affinity(0)
        held: list[set[int]] = []  # the calling thread's mask while the VM calls each function

        def hook(*_: Any) -> None:
            held.append(_affinity(0))

        one_conv_compiled.reset_vm()
        one_conv_compiled.vm.set_instrument(hook)
        try:
            one_conv_compiled.callable(x)()
            after_call = _affinity(0)
            one_conv_compiled.run(x)
        finally:
            one_conv_compiled.reset_vm()
        out = load_library(lib)(*x)
        return {"mask": mask, "held": held, "after_call": after_call, "after": _affinity(0), "out": out,
                "pool": tvm_pool()}

    r = _in_fresh_thread(run, threads=2)
    assert r["after_call"] == r["after"] == r["mask"]
    assert r["held"] and r["pool"].pinned
    assert all(h == {r["pool"].cores[0]} for h in r["held"])  # on its own core while the model ran
    assert r["out"][0].shape == (1, 8, 16, 16)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_a_runtime_that_cannot_place_its_pool_runs_unplaced_with_a_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import tvm

    real = tvm.get_global_func

    def no_config(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "runtime.config_threadpool":
            def refuse(*_: Any) -> None:
                raise RuntimeError("not in this runtime\nsecond line")
            return refuse
        return real(name, *args, **kwargs)

    monkeypatch.setattr(tvm, "get_global_func", no_config)
    placement._WARNED.clear()

    def run() -> tuple[Any, set[int], set[int]]:
        mask = _affinity(0)
        with tvm_pinned() as p:
            held = _affinity(0)
        return p, mask, held

    with caplog.at_level(logging.WARNING, logger="tensortune.utils.placement"):
        p, mask, held = _in_fresh_thread(run, threads=2)
    assert not p.pinned and held == mask and "could not be configured: not in this runtime" in p.note
    assert "second line" not in caplog.text and "not pinned" in caplog.text


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_a_measuring_worker_times_every_candidate_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each entry point a measuring worker runs TVM code in (a candidate's check and timing, a
    task's setup, the contention probe) holds the calling thread on its pool's first core: an
    unplaced pool put both threads on one core, and candidates read 4 ms where they take 0.3."""
    from tensortune.measure import worker

    held: dict[str, set[int]] = {}

    def spy(name: str) -> Callable[..., Any]:
        def record(*_: Any, **__: Any) -> Any:
            held[name] = _affinity(0)
            raise RuntimeError("recorded")
        return record

    def run() -> dict[str, Any]:
        mask = _affinity(0)
        monkeypatch.setattr(worker, "_task", spy("run_candidate"))
        assert worker.run_candidate("{}", "none.so", {})[0] == "runtime"
        monkeypatch.setattr(worker, "_task", spy("prepare_task"))
        with pytest.raises(RuntimeError):
            worker.prepare_task("{}", 0)
        monkeypatch.setattr(worker, "_probe", spy("probe_state"))
        with pytest.raises(RuntimeError):
            worker.probe_state(0.01)
        return {"mask": mask, "after": _affinity(0), "pool": tvm_pool()}

    r = _in_fresh_thread(run, threads=2)
    assert r["pool"].pinned and r["after"] == r["mask"]
    assert held == {name: {r["pool"].cores[0]} for name in ("run_candidate", "prepare_task", "probe_state")}
