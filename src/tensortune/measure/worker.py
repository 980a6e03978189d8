"""Functions that run inside the builder and runner worker processes.

They take and return plain data (JSON text, paths, lists of floats, error tuples), import
TVM once per process and cache each task (and its inputs and reference output) by key.
"""
from __future__ import annotations

import importlib
import json
import os
import time
import traceback
import uuid
from typing import TYPE_CHECKING, Any

from ..utils.placement import pinned_calls
from ..utils.warmup import warm_up

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

#: Tasks a worker keeps built (it serves task after task when reused).
MAX_TASKS = 64
_TASKS: dict[str, Any] = {}
_DATA: dict[str, tuple[list[Any], Any, dict[str, tuple[list[Any], list[Any]]], Any]] = {}
_WARM = False  # this process has run its warm-up (utils.warmup.warm_up)
_PROBE: list[Any] = []  # this process's contention probe (measure.noise.make_probe), built once


def init_worker(imports: tuple[str, ...] = (), threads: int | None = None) -> None:
    """Worker start-up: pin the thread count, import TVM and the plug-in modules, and keep numpy's
    BLAS on the calling thread. A task's numpy reference (an ``einsum`` of a convolution, a
    matmul) run on BLAS's own threads left them spinning for a while after it, beside the first
    candidate timed: it read 4-8 ms where it takes 0.3 (each time slice of a core they held)."""
    if threads:
        os.environ["TVM_NUM_THREADS"] = str(threads)
    import numpy  # noqa: F401 - loaded before its BLAS is limited
    import tvm  # noqa: F401
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)

    for name in imports:  # plug-ins (their templates register themselves); built-ins load on first use
        importlib.import_module(name)


def _task(task_json: str) -> Any:
    from ..task import Task

    t = _TASKS.get(task_json)
    if t is None:
        if len(_TASKS) >= MAX_TASKS:  # a worker reused by measurer after measurer
            _TASKS.clear()
        t = Task.from_json(json.loads(task_json))
        _TASKS[task_json] = t
    return t


def _short(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:2000]


def build_candidate(task_json: str, knobs: dict[str, Any], out_dir: str) -> tuple[str, Any, str, float]:
    """Schedule, compile and export one candidate.

    Returns ``(error_kind, artifact_path, message, seconds)`` with error_kind ``"none"``,
    ``"instantiation"`` (the template rejected the config) or ``"compile"``.
    """
    import tvm

    from ..target import cross_linker, is_cuda, make_target

    t0 = time.perf_counter()
    try:
        task = _task(task_json)
        config = task.space.config_from_json({"knobs": knobs})
        mod = task.instantiate(config)
    except Exception as e:  # noqa: BLE001 - every failure is a recorded result
        return "instantiation", None, _short(e) + "\n" + traceback.format_exc(limit=3)[-1500:], time.perf_counter() - t0
    try:
        ex = tvm.compile(mod, target=make_target(task.target_json))
        path = os.path.join(out_dir, f"{task.workload_key}_{config.index}_{uuid.uuid4().hex[:8]}.so")
        if is_cuda(task.target_json):
            from .cuda import export_cuda

            export_cuda(ex, path, task.target_json)
        else:
            ex.export_library(path, fcompile=cross_linker(task.target_json))
    except Exception as e:  # noqa: BLE001
        return "compile", None, _short(e), time.perf_counter() - t0
    return "none", path, "", time.perf_counter() - t0


def _data(task: Task, seed: int, variant: str = "") -> tuple[list[Any], Any, list[Any], Any]:
    """``(inputs, expected, args, out)`` of the task: numpy inputs and reference, and the
    TVM tensors every candidate of the task runs on (``variant``: those of a config whose function
    takes its inputs transformed, :meth:`~tensortune.templates.registry.Template.input_variant`).

    The tensors are allocated once per task (and variant) and reused, so all candidates are timed on
    the same addresses: re-allocating them per candidate moved the same kernel by up to
    30% (cache-set and 4K-aliasing luck), which drowned the differences a tuner looks for.
    """
    import numpy as np
    import tvm

    key = f"{task.workload_key}:{seed}"
    dev = tvm.cpu()
    if key not in _DATA:
        inputs = task.make_inputs(seed)
        _DATA.clear()  # keep one task's data resident
        out = task.output_buffer()
        sentinel = np.full(out.shape, np.nan, dtype=out.dtype) if out.dtype.kind == "f" else out
        _DATA[key] = (inputs, task.reference(inputs), {"": (inputs, [tvm.runtime.tensor(x, dev) for x in inputs])},
                      (tvm.runtime.tensor(out, dev), sentinel))
    inputs, expected, variants, out = _DATA[key]
    if variant not in variants:
        arrays = task.template.variant_inputs(task, variant, list(inputs))
        variants[variant] = (arrays, [tvm.runtime.tensor(x, dev) for x in arrays])
    arrays, args = variants[variant]
    return arrays, expected, args, out


def _probe() -> Any:
    from .noise import make_probe

    if not _PROBE:
        _PROBE.append(make_probe())
    return _PROBE[0]


@pinned_calls
def probe_state(window_s: float) -> tuple[float | None, float | None, float]:
    """The contention probe timed for about ``window_s`` seconds, and the cores' worth of CPU the
    rest of the machine took meanwhile (:mod:`tensortune.measure.noise`): ``(median seconds, others,
    others' counting error)``."""
    from .noise import BusyWindow

    probe = _probe()
    window, times = BusyWindow(), []
    end = time.perf_counter() + window_s
    while not times or time.perf_counter() < end:
        times.append(probe())
    busy = window.stop()
    return sorted(times)[len(times) // 2], *(busy if busy is not None else (None, 0.0))


@pinned_calls
def prepare_task(task_json: str, seed: int, variant: str = "") -> None:
    """Set up a task in this process (template, inputs, reference output) before its first
    candidate, so that a fresh runner's setup is not charged to that candidate's run timeout."""
    _data(_task(task_json), seed, variant)


@pinned_calls
def run_candidate(task_json: str, artifact: str, opts: dict[str, Any]
                  ) -> tuple[str, list[float], str, int, float, tuple[float | None, float | None, float] | None]:
    """Load, check and time one built candidate.

    Returns ``(error_kind, costs, message, threads, timed_seconds, noise)``: error_kind ``"none"``,
    ``"runtime"`` or ``"wrong_answer"``; costs in seconds, one per repeat; timed_seconds is
    the wall time of the timing loop itself (the candidate's own timed runs); noise is
    ``(probe seconds, others' cores, their counting error)`` over the timing and the probe right after it
    (:mod:`tensortune.measure.noise`; None when nothing was timed).
    """
    from .noise import BusyWindow

    import numpy as np
    import tvm

    threads = int(os.environ.get("TVM_NUM_THREADS", "0") or 0)
    try:
        task = _task(task_json)
        dev = tvm.cpu()
        mod = tvm.runtime.load_module(artifact)
        inputs, expected, args, (out, sentinel) = _data(task, int(opts.get("seed", 0)), opts.get("variant", ""))
        for a, x in zip(args, inputs):  # same addresses, fresh contents: a candidate that
            a.copyfrom(x)  # wrote into an input cannot corrupt the next one
        out.copyfrom(sentinel)  # NaN: output elements a candidate never writes fail the check
        if opts.get("check_correctness", True):
            mod["main"](*args, out)
            got = out.numpy()
            if not task.outputs_match(got, expected):
                bad = np.abs(got.astype(np.float64) - expected) if got.shape == expected.shape else None
                detail = f"max abs error {bad.max():.3g}" if bad is not None else f"shape {got.shape} != {expected.shape}"
                return "wrong_answer", [], f"output does not match the reference ({detail})", threads, 0.0, None
        global _WARM
        if not _WARM:  # the first candidate this process times (a correct one): warm the process first
            warm_up(lambda: mod["main"](*args, out), float(opts.get("warmup_s", 0.0)))
            _WARM = True
        timer = mod.time_evaluator(
            "main", dev,
            number=int(opts["number"]), repeat=int(opts["repeat"]), min_repeat_ms=int(opts["min_repeat_ms"]),
            cooldown_interval_ms=int(opts["cooldown_ms"]),
            f_preproc="cache_flush_cpu_non_first_arg" if opts.get("flush_cache") else "",
        )
        probe = _probe() if opts.get("probe", True) else None
        window = BusyWindow()
        t0 = time.perf_counter()
        costs = [float(c) for c in timer(*args, out).results]
        timed = time.perf_counter() - t0
        probe_s = probe() if probe is not None else None
        busy = window.stop()
        noise = (probe_s, *(busy if busy is not None else (None, 0.0)))
    except Exception as e:  # noqa: BLE001
        return "runtime", [], _short(e), threads, 0.0, None
    return "none", costs, "", threads, timed, noise


_NUMPY: dict[str, tuple[list[Any], Any, Any]] = {}


def _numpy_data(task: Task, seed: int) -> tuple[list[Any], Any, Any]:
    """``(inputs, expected, sentinel output)`` of the task as numpy arrays (for a remote device)."""
    import numpy as np

    key = f"{task.workload_key}:{seed}"
    if key not in _NUMPY:
        inputs = task.make_inputs(seed)
        out = task.output_buffer()
        sentinel = np.full(out.shape, np.nan, dtype=out.dtype) if out.dtype.kind == "f" else out
        _NUMPY.clear()
        _NUMPY[key] = (inputs, task.reference(inputs), sentinel)
    return _NUMPY[key]


#: A reused session lives at most this many run timeouts (so a hung kernel holds its device that long).
SESSION_SPAN = 3

#: This worker's RPC session per device, kept across candidates: ``[session, candidates run, opened at]``.
_SESSIONS: dict[tuple[str, int, str], list[Any]] = {}


def rpc_session(device: tuple[str, int, str], opts: dict[str, Any]) -> tuple[Any, bool]:
    """A session on a device of ``device`` (``(tracker host, port, key)``) and whether it is
    fresh. The session this worker holds is reused while it has run fewer than
    ``opts["session_reuse"]`` candidates and is young enough that the next one ends before the
    device's session timeout (``session_timeout``, the run timeout times :data:`SESSION_SPAN`);
    else a new one is requested from the tracker (the request, a process forked on the device,
    costs about 0.1 s)."""
    from tvm import rpc

    held = _SESSIONS.get(device)
    timeout = float(opts.get("session_timeout", 0))
    if held is not None:
        young = not timeout or time.time() - held[2] < timeout * (SESSION_SPAN - 1) / SESSION_SPAN
        if held[1] < int(opts.get("session_reuse", 1)) and young:
            return held[0], False
        held = None  # the last reference: the old session must close before its device is asked for again
        rpc_release()
    host, port, key = device
    remote = rpc.connect_tracker(host, int(port)).request(key, priority=1, session_timeout=timeout)
    _SESSIONS[device] = [remote, 0, time.time()]
    return remote, True


def rpc_done(device: tuple[str, int, str], healthy: bool) -> None:
    """After a candidate: a session that failed is dropped (the next candidate asks for a new
    one); a healthy one is kept unless another requester waits at the tracker for a device of the
    key (so more workers than devices still share them, as with a session per candidate)."""
    held = _SESSIONS.get(device)
    if held is None:
        return
    held[1] += 1
    if not healthy or _others_waiting(device):
        rpc_release()


def _others_waiting(device: tuple[str, int, str]) -> bool:
    from tvm import rpc

    host, port, key = device
    try:
        queue = rpc.connect_tracker(host, int(port)).summary().get("queue_info", {})
    except Exception:  # noqa: BLE001 - a tracker that does not answer: let the device go
        return True
    return any(int(q.get("pending", 0)) > 0 for k, q in queue.items() if k == key or k.endswith(key))


def rpc_release() -> None:
    """Close this worker's RPC sessions (the devices go back to the tracker)."""
    _SESSIONS.clear()


def rpc_run_candidate(task_json: str, artifact: str, opts: dict[str, Any], device: tuple[str, int, str]
                      ) -> tuple[str, list[float], str, int, float]:
    """Upload, check and time one built candidate on a device of a TVM RPC tracker.

    ``device`` is ``(tracker host, port, key)``; the session comes from :func:`rpc_session` (this
    worker's, reused, or a new one) and is dropped when anything fails, so a device that died
    leaves the next candidate to another one. Returns what :func:`run_candidate` returns; the
    thread count is the device's own (``runtime.NumThreads`` there). Any failure of the session
    (no device, a lost connection) is a ``"runtime"`` result whose message starts with ``rpc``.
    """
    import numpy as np
    import tvm

    host, port, key = device
    where = f"rpc device {key!r} of {host}:{port}"
    try:
        remote, fresh = rpc_session(device, opts)
    except Exception as e:  # noqa: BLE001
        return "runtime", [], f"{where}: no session ({_short(e)})", 0, 0.0
    name = os.path.basename(artifact)
    try:
        threads = int(remote.get_function("runtime.NumThreads")())
        task = _task(task_json)
        remote.upload(artifact)
        mod = remote.load_module(name)
        remote.remove(name)  # loaded: the file is no longer needed there
        dev = remote.cpu()
        inputs, expected, sentinel = _numpy_data(task, int(opts.get("seed", 0)))
        if opts.get("variant"):
            inputs = task.template.variant_inputs(task, opts["variant"], list(inputs))
        args = [tvm.runtime.tensor(x, dev) for x in inputs]
        out = tvm.runtime.tensor(sentinel, dev)
        if opts.get("check_correctness", True):
            mod["main"](*args, out)
            got = out.numpy()
            if not task.outputs_match(got, expected):
                rpc_done(device, healthy=True)
                return "wrong_answer", [], "output does not match the reference (on the rpc device)", threads, 0.0
        if fresh:  # a session is a fresh process on the device (TVM's server forks one per session)
            warm_up(lambda: mod["main"](*args, out), float(opts.get("warmup_s", 0.0)))
        timer = mod.time_evaluator(
            "main", dev, number=int(opts["number"]), repeat=int(opts["repeat"]),
            min_repeat_ms=int(opts["min_repeat_ms"]), cooldown_interval_ms=int(opts["cooldown_ms"]),
            f_preproc="cache_flush_cpu_non_first_arg" if opts.get("flush_cache") else "")
        t0 = time.perf_counter()
        costs = [float(c) for c in timer(*args, out).results]
        timed = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001
        rpc_done(device, healthy=False)
        return "runtime", [], f"rpc: {where}: {_short(e)}", 0, 0.0
    rpc_done(device, healthy=True)
    return "none", costs, "", threads, timed
