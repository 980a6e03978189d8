"""Reference runners for whole models, ONNX export and output checks.

A model compiled with TVM is compared against PyTorch eager (:class:`TorchRunner`), ONNX Runtime
(:class:`OrtRunner`) and, when the optional ``openvino`` extra is installed, OpenVINO
(:class:`OpenVinoRunner`) on the same numpy inputs and the same thread count. Every system is reduced to
two things: ``run(inputs) -> list of numpy arrays`` for the output check (:func:`compare_outputs`)
and a zero-argument callable doing one inference for timing (:func:`interleaved_latency`, which the
caller also uses for TVM by wrapping it as a plain Python callable).

Timing is :mod:`tensortune.measure.timing`'s protocol.

ONNX export uses PyTorch's TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``),
which needs no package beyond ``torch`` and ``onnx``; the ``torch.export``-based exporter (the default
of ``torch.onnx.export`` since torch 2.9) is only tried as a fallback and needs ``onnxscript``.
"""
from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import re
import tempfile
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from ..errors import TensortuneError
from ..utils.quiet import redirected_fds

__all__ = [
    "ABS_FLOOR", "DEFAULT_OPSET", "DEFAULT_RTOL", "DEFAULT_THREADS", "OPENVINO_MISSING", "OpenVinoRunner", "OrtRunner",
    "OutputCheck", "ReferenceRunError", "TorchRunner", "compare_outputs", "export_onnx", "set_threads",
]


def _usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


DEFAULT_THREADS: int = _usable_cores()
"""Threads given to every system: the cores usable by this process (``len(os.sched_getaffinity(0))``)."""
DEFAULT_RTOL: float = 1e-3
"""Output tolerance, relative to the largest reference magnitude of each output (see :func:`compare_outputs`)."""
ABS_FLOOR: float = 1e-6
"""Absolute tolerance added to ``rtol * max|ref|`` so that all-zero (or tiny) outputs can pass."""
DEFAULT_OPSET: int = 17
"""ONNX opset used by :func:`export_onnx`."""

_DYNAMO_MIN_OPSET = 18  # the torch.export-based exporter writes opset-18 ops (Split num_outputs) even when asked for 17


class ReferenceRunError(TensortuneError, RuntimeError):
    """A reference system could not export, load or run a model. The message is one line."""


logger = logging.getLogger(__name__)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: first non-empty line of the message``, shortened to ``limit`` characters."""
    plain = _ANSI.sub("", str(exc))
    text = next((ln.strip() for ln in plain.splitlines() if ln.strip()), "")
    out = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return out if len(out) <= limit else out[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------------
# Threads
# --------------------------------------------------------------------------------------------------

def set_threads(n: int) -> None:
    """Make PyTorch use ``n`` intra-op threads (and ``n`` inter-op threads, if that can still be set).

    PyTorch only accepts the inter-op thread count once and before its first parallel work; later
    attempts raise ``RuntimeError``, which is ignored (eager inference does not use the inter-op pool).
    """
    if n < 1:
        raise ValueError(f"thread count must be >= 1, got {n}")
    torch.set_num_threads(n)
    # torch >= 2.13 names it set_num_interop_threads; older releases set_interop_threads
    set_interop = getattr(torch, "set_num_interop_threads", None) or getattr(torch, "set_interop_threads", None)
    if set_interop is not None and torch.get_num_interop_threads() != n:
        try:
            set_interop(n)
        except RuntimeError:
            pass


# --------------------------------------------------------------------------------------------------
# PyTorch eager
# --------------------------------------------------------------------------------------------------

def _flatten_outputs(out: Any) -> list[torch.Tensor]:
    """A tensor, or (nested) tuples/lists/dicts of tensors, as a flat list in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _flatten_outputs(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in _flatten_outputs(item)]
    raise ReferenceRunError(f"model output of type {type(out).__name__} is not a tensor or a tuple/list/dict of tensors")


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):  # no numpy equivalent
        t = t.float()
    return t.numpy()


def _to_tensors(inputs: Sequence[np.ndarray]) -> list[torch.Tensor]:
    return [torch.from_numpy(np.asarray(x, order="C")) for x in inputs]


class TorchRunner:
    """PyTorch eager reference: module in eval mode, run under ``torch.inference_mode()`` on CPU.

    The module is put in eval mode (permanently). PyTorch's thread count is global; it is set to
    ``threads`` at construction and again before each :meth:`run` / :meth:`callable` if it changed.
    """

    name = "pytorch"

    def __init__(self, module: torch.nn.Module, threads: int = DEFAULT_THREADS) -> None:
        """Wrap ``module`` (switched to eval mode) to run with ``threads`` intra-op threads."""
        self.module = module.eval()
        self.threads = threads
        set_threads(threads)

    def _ensure_threads(self) -> None:
        if torch.get_num_threads() != self.threads:
            set_threads(self.threads)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """One forward pass on ``inputs``; the outputs (a tensor or tuple/list of tensors) as a flat list of arrays."""
        self._ensure_threads()
        tensors = _to_tensors(inputs)
        try:
            with torch.inference_mode():
                out = self.module(*tensors)
        except Exception as exc:
            raise ReferenceRunError(f"pytorch forward failed: {_one_line(exc)}") from exc
        return [_to_numpy(t) for t in _flatten_outputs(out)]

    def callable(self, inputs: Sequence[np.ndarray]) -> Callable[[], None]:
        """A zero-argument function running one forward pass on ``inputs`` (converted to tensors once), for timing."""
        self._ensure_threads()
        tensors = _to_tensors(inputs)
        module = self.module

        def forward() -> None:
            with torch.inference_mode():
                module(*tensors)

        return forward


# --------------------------------------------------------------------------------------------------
# ONNX Runtime
# --------------------------------------------------------------------------------------------------

_ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16, "tensor(int8)": np.int8,
    "tensor(uint64)": np.uint64, "tensor(uint32)": np.uint32, "tensor(uint16)": np.uint16,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_,
}


def _check_inputs(system: str, names: Sequence[str], dtypes: Sequence[np.dtype | None],
                  shapes: Sequence[Sequence[Any]], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``inputs`` as C-contiguous arrays, checked against a model's inputs, in order.

    ``dtypes`` holds each input's expected dtype (None: not checked); ``shapes`` each input's
    dimensions, where an ``int`` is a fixed size and anything else (None, a symbolic name) is a
    dynamic dimension that accepts any size. Shared by the ONNX-file runners so that a wrong input
    reads the same, one line naming ``system`` and the input, whichever runtime is fed.
    """
    if len(inputs) != len(names):
        raise ReferenceRunError(f"{system} model takes {len(names)} inputs, got {len(inputs)}")
    arrays: list[np.ndarray] = []
    for name, want, shape, x in zip(names, dtypes, shapes, inputs):
        arr = np.asarray(x, order="C")
        if want is not None and arr.dtype != want:
            raise ReferenceRunError(f"{system} input {name!r} expects {want.name}, got {arr.dtype.name}")
        static = len(shape) == arr.ndim and all(not isinstance(d, int) or d == s for d, s in zip(shape, arr.shape))
        if not static:
            raise ReferenceRunError(f"{system} input {name!r} expects shape {tuple(shape)}, got {arr.shape}")
        arrays.append(arr)
    return arrays


class OrtRunner:
    """ONNX Runtime CPU reference.

    Session: ``CPUExecutionProvider``, ``intra_op_num_threads=threads``, ``inter_op_num_threads=1``,
    sequential execution, graph optimisation level ``ORT_ENABLE_ALL``, only errors logged, and
    ``session.force_spinning_stop``: its worker threads spin inside a run as by default, but stop
    when the run returns. By default they go on spinning between runs, on every core they have,
    so whatever is timed next in the same process (tensortune's model, PyTorch) loses a core to
    an idle ONNX Runtime: resnet18 on 2 cores ran about 10% slower beside an idle session.
    Inputs are given positionally, in the order of :attr:`input_names`; their dtypes and (static)
    shapes must match the model's, otherwise :class:`ReferenceRunError` says which input is wrong.
    """

    name = "onnxruntime"

    def __init__(self, onnx_path: str, threads: int = DEFAULT_THREADS) -> None:
        """Load ``onnx_path`` into an ONNX Runtime CPU session using ``threads`` intra-op threads."""
        import onnxruntime as ort

        if threads < 1:
            raise ValueError(f"thread count must be >= 1, got {threads}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3  # errors only
        opts.add_session_config_entry("session.force_spinning_stop", "1")  # no spinning between runs
        try:
            self.session = ort.InferenceSession(str(onnx_path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ReferenceRunError(f"onnxruntime could not load {onnx_path}: {_one_line(exc)}") from exc
        self.onnx_path = str(onnx_path)
        self.threads = threads
        meta = self.session.get_inputs()
        self.input_names: list[str] = [i.name for i in meta]
        self._input_types: list[str] = [i.type for i in meta]
        self._input_dtypes: list[np.dtype | None] = [
            np.dtype(_ORT_TYPES[t]) if t in _ORT_TYPES else None for t in self._input_types]
        self._input_shapes: list[list[Any]] = [list(i.shape) for i in meta]
        self.output_names: list[str] = [o.name for o in self.session.get_outputs()]

    def _feed(self, inputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        arrays = _check_inputs(self.name, self.input_names, self._input_dtypes, self._input_shapes, inputs)
        return dict(zip(self.input_names, arrays))

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """One inference on ``inputs`` (positional, in :attr:`input_names` order); all outputs as arrays."""
        feed = self._feed(inputs)
        try:
            return list(self.session.run(None, feed))
        except Exception as exc:
            raise ReferenceRunError(f"onnxruntime run failed: {_one_line(exc)}") from exc

    def callable(self, inputs: Sequence[np.ndarray]) -> Callable[[], None]:
        """A zero-argument function running one inference on ``inputs`` (feed built once), for timing."""
        feed = self._feed(inputs)
        session = self.session

        def infer() -> None:
            session.run(None, feed)

        return infer


# --------------------------------------------------------------------------------------------------
# OpenVINO
# --------------------------------------------------------------------------------------------------

OPENVINO_MISSING = "openvino is not installed: pip install 'tensortune[openvino]'"
"""Message of the :class:`ReferenceRunError` raised by :class:`OpenVinoRunner` without the ``openvino`` extra."""


def _ov_one_line(exc: BaseException, limit: int = 300) -> str:
    """One line of an OpenVINO exception: its last informative line, not the C++ source locations.

    OpenVINO's messages are a chain of ``Exception from src/...cpp:N:`` and ``Check '...' failed at``
    lines, with the actual cause (``Could not open the file``, ``got [1,3,4,4] expecting [1,3,8,8]``)
    last; :func:`_one_line` would keep only the first, useless, location.
    """
    plain = _ANSI.sub("", str(exc))
    lines = [ln.strip() for ln in plain.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Exception from ", "Check '"))]
    if not useful:
        return _one_line(exc, limit)
    out = f"{type(exc).__name__}: {useful[-1]}"
    return out if len(out) <= limit else out[: limit - 3] + "..."


class OpenVinoRunner:
    """OpenVINO CPU reference: a second library baseline beside :class:`OrtRunner`, on the same ONNX file.

    The ONNX file is compiled for the ``CPU`` device with ``INFERENCE_NUM_THREADS=threads``,
    ``PERFORMANCE_HINT=LATENCY`` (one stream, all ``threads`` on one inference: what every other
    system does) and ``INFERENCE_PRECISION_HINT=f32``: without it (``precision_hint=None``, OpenVINO
    as shipped, what a user who passes no hint gets) OpenVINO runs float32 models in bf16 on CPUs
    with AMX/AVX-512-BF16 (Sapphire Rapids, Zen 4), faster but not like-with-like against float32
    systems; :attr:`precision` says what it chose. One infer request is made and reused.
    Inputs are given positionally, in the order of :attr:`input_names`, and are checked as
    :class:`OrtRunner`'s are (:func:`_check_inputs`). Needs the optional extra
    ``pip install 'tensortune[openvino]'``; without it the constructor raises :class:`ReferenceRunError`.
    """

    name = "openvino"

    def __init__(self, onnx_path: str, threads: int = DEFAULT_THREADS, precision_hint: str | None = "f32") -> None:
        """Compile ``onnx_path`` for OpenVINO's CPU device with ``threads`` inference threads, with
        ``precision_hint`` (None: OpenVINO's own choice)."""
        try:
            import openvino as ov
        except ImportError as exc:
            raise ReferenceRunError(OPENVINO_MISSING) from exc

        if threads < 1:
            raise ValueError(f"thread count must be >= 1, got {threads}")
        config: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
        if precision_hint is not None:
            config["INFERENCE_PRECISION_HINT"] = precision_hint
        try:
            self.compiled = ov.Core().compile_model(str(onnx_path), "CPU", config)
            self.request = self.compiled.create_infer_request()
        except Exception as exc:
            raise ReferenceRunError(f"openvino could not load {onnx_path}: {_ov_one_line(exc)}") from exc
        self.onnx_path = str(onnx_path)
        self.threads = threads
        ports = list(self.compiled.inputs)
        self.input_names: list[str] = [p.get_any_name() for p in ports]
        self._input_dtypes: list[np.dtype | None] = [_ov_dtype(p) for p in ports]
        self._input_shapes: list[list[Any]] = [
            [d.get_length() if d.is_static else None for d in p.get_partial_shape()] for p in ports]
        self.output_names: list[str] = [p.get_any_name() for p in self.compiled.outputs]
        #: the precision OpenVINO computes in (``f32``, ``bf16``, ``f16``), as its compiled model reports it
        self.precision = _ov_precision(self.compiled.get_property("INFERENCE_PRECISION_HINT"))
        logger.debug("openvino compiled %s for CPU: %d threads, precision %s", self.onnx_path, threads, self.precision)

    def _feed(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return _check_inputs(self.name, self.input_names, self._input_dtypes, self._input_shapes, inputs)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """One inference on ``inputs`` (positional, in :attr:`input_names` order); all outputs as arrays (copies)."""
        feed = self._feed(inputs)
        try:
            result = self.request.infer(feed)
        except Exception as exc:
            raise ReferenceRunError(f"openvino run failed: {_ov_one_line(exc)}") from exc
        return [np.array(v) for v in result.to_tuple()]

    def callable(self, inputs: Sequence[np.ndarray]) -> Callable[[], None]:
        """A zero-argument function running one inference on ``inputs`` (checked and bound once), for timing.

        The inputs are bound once, without a copy, to an infer request of the callable's own (so
        :meth:`run` cannot rebind them); each call only runs it. Passing the arrays on every call
        instead costs about 0.1 ms of Python-side wrapping per inference (2-core host), which would
        be timed as OpenVINO's.
        """
        import openvino as ov

        feed = self._feed(inputs)
        request = self.compiled.create_infer_request()
        for i, arr in enumerate(feed):
            request.set_input_tensor(i, ov.Tensor(arr, shared_memory=True))

        def infer(_bound: list[np.ndarray] = feed) -> None:  # the default keeps the shared arrays alive
            request.infer()

        return infer


def _ov_precision(value: Any) -> str:
    """OpenVINO's precision property (an element type, ``<Type: 'bfloat16'>``) in tensortune's words."""
    text = str(getattr(value, "type_name", None) or value).lower()
    for word, name in (("bfloat16", "bf16"), ("bf16", "bf16"), ("float16", "f16"), ("f16", "f16")):
        if word in text:
            return name
    return "f32"


def _ov_dtype(port: Any) -> np.dtype | None:
    """The numpy dtype of an OpenVINO port, None when it has none (then the input's dtype is not checked)."""
    try:
        return np.dtype(port.get_element_type().to_dtype())
    except Exception:  # noqa: BLE001 - e.g. bf16, dynamic element type
        return None


# --------------------------------------------------------------------------------------------------
# ONNX export
# --------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence Python warnings, Python-level prints, the ``torch.onnx`` loggers and C/C++ prints on fds 1/2.

    File descriptors 1 and 2 point at a scratch file while inside (output of other threads during
    that time is lost too); if they cannot be redirected, only the Python-level silencing applies.
    """
    onnx_logger = logging.getLogger("torch.onnx")
    old_level = onnx_logger.level
    with contextlib.ExitStack() as stack:
        try:
            onnx_logger.setLevel(logging.CRITICAL)
            with contextlib.suppress(OSError):  # no scratch file: only the Python-level silencing
                stack.enter_context(redirected_fds((1, 2), stack.enter_context(tempfile.TemporaryFile())))
            stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
            stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            yield
        finally:
            onnx_logger.setLevel(old_level)


def _export_torchscript(module: torch.nn.Module, args: tuple[torch.Tensor, ...], path: str, opset: int,
                        input_names: list[str], output_names: list[str]) -> None:
    torch.onnx.export(module, args, path, dynamo=False, opset_version=opset, input_names=input_names,
                      output_names=output_names, do_constant_folding=True)


def _export_dynamo(module: torch.nn.Module, args: tuple[torch.Tensor, ...], path: str, opset: int,
                   input_names: list[str], output_names: list[str]) -> None:
    torch.onnx.export(module, args, path, dynamo=True, opset_version=max(opset, _DYNAMO_MIN_OPSET),
                      input_names=input_names, output_names=output_names, optimize=True, external_data=False)


def _check_exported(path: str) -> None:
    """The file is a valid ONNX model whose graph inputs all have fixed positive dimensions."""
    import onnx

    onnx.checker.check_model(path)
    model = onnx.load(path, load_external_data=False)
    initializers = {init.name for init in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        dims = inp.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") or d.dim_value <= 0 for d in dims):
            raise ValueError(f"input {inp.name!r} has a dynamic shape")


def export_onnx(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], path: str,
                opset: int = DEFAULT_OPSET) -> str:
    """Export ``module`` (in eval mode) to ONNX at ``path`` with the static shapes of ``example_inputs``; return ``path``.

    Graph inputs are named ``input0, input1, ...`` and outputs ``output0, output1, ...`` (the module's
    outputs flattened). The TorchScript-based exporter (``dynamo=False``, needs only ``torch`` and
    ``onnx``) is used at opset ``opset``; if it fails and ``onnxscript`` is importable, the
    ``torch.export``-based exporter is tried at opset ``max(opset, 18)`` (it cannot write a valid
    opset-17 model for ``chunk``/``split``). The result is checked with ``onnx.checker`` and for
    static input shapes. Exporter prints and warnings are suppressed. The module's training flag is
    restored afterwards.

    Raises:
        ReferenceRunError: (one line) if no exporter produced a valid model.
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = [example_inputs]
    args = tuple(example_inputs)
    path = os.fspath(path)
    model_name = type(module).__name__
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    was_training = module.training
    module.eval()
    try:
        try:
            with torch.no_grad():
                n_outputs = len(_flatten_outputs(module(*args)))
        except ReferenceRunError:
            raise
        except Exception as exc:
            raise ReferenceRunError(f"ONNX export of {model_name} failed: the module does not run on the example "
                                    f"inputs: {_one_line(exc)}") from exc
        input_names = [f"input{i}" for i in range(len(args))]
        output_names = [f"output{i}" for i in range(n_outputs)]

        exporters: list[tuple[str, Callable[..., None]]] = [("torchscript exporter", _export_torchscript)]
        if _has_onnxscript():
            exporters.append(("dynamo exporter", _export_dynamo))
        errors: list[str] = []
        for label, exporter in exporters:
            try:
                with _quiet(), torch.no_grad():
                    exporter(module, args, path, opset, input_names, output_names)
                _check_exported(path)
                return path
            except Exception as exc:
                errors.append(f"{label}: {_one_line(exc, 200)}")
        if len(exporters) == 1:
            errors.append("dynamo exporter: not tried, onnxscript is not installed")
        raise ReferenceRunError(f"ONNX export of {model_name} failed: " + "; ".join(errors))
    finally:
        module.train(was_training)


def _has_onnxscript() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnxscript") is not None


# --------------------------------------------------------------------------------------------------
# Output check
# --------------------------------------------------------------------------------------------------

@dataclass
class OutputCheck:
    """Result of :func:`compare_outputs`.

    ``max_abs_err`` / ``max_rel_err`` are the worst over all outputs; they are ``inf`` when the
    outputs could not be compared (count, shape or dtype mismatch, non-finite values, error).
    """

    ok: bool
    max_abs_err: float
    max_rel_err: float
    rtol: float
    message: str

    def to_json(self) -> dict:
        """A JSON-safe dict (non-finite errors become ``None``)."""
        d = asdict(self)
        for key in ("max_abs_err", "max_rel_err"):
            if not math.isfinite(d[key]):
                d[key] = None
        return d


def _fail(message: str, rtol: float) -> OutputCheck:
    return OutputCheck(ok=False, max_abs_err=math.inf, max_rel_err=math.inf, rtol=rtol, message=message)


def compare_outputs(got: Sequence[np.ndarray], ref: Sequence[np.ndarray], rtol: float = DEFAULT_RTOL) -> OutputCheck:
    """Check a system's outputs ``got`` against reference outputs ``ref``.

    Rule: there must be as many outputs as reference outputs, and for each pair the shapes and
    dtypes must be equal, and ``got`` must be finite wherever ``ref`` is finite (positions where
    ``ref`` is NaN/inf are not compared). The pair passes when
    ``max|got - ref| <= rtol * max|ref| + 1e-6`` (:data:`ABS_FLOOR`), both maxima over the positions
    where ``ref`` is finite. ``max_rel_err`` is ``max|got - ref| / max|ref|`` of the worst output,
    an output of near-zero values measured against the floor's scale (``ABS_FLOOR / rtol``), as
    its check is: an error within the tolerance reads at most ``rtol``.
    All outputs must pass. The message is one line, e.g. ``outputs match (max abs err 3.1e-05,
    2.0e-06 of max |ref|; tolerance 1e-03)``, or says why the check failed.
    """
    try:
        got_l, ref_l = list(got), list(ref)
        if len(got_l) != len(ref_l):
            return _fail(f"output count mismatch: got {len(got_l)}, expected {len(ref_l)}", rtol)
        worst_abs = 0.0
        worst_rel = 0.0
        failures: list[str] = []
        skipped = 0
        dead: list[int] = []  # outputs whose reference is all (near) zero: a match there says little
        floor = ABS_FLOOR / rtol if rtol > 0 else 0.0  # the scale an output of near-zero values is measured on
        for i, (g_raw, r_raw) in enumerate(zip(got_l, ref_l)):
            g, r = np.asarray(g_raw), np.asarray(r_raw)
            if g.shape != r.shape:
                return _fail(f"output {i}: shape mismatch: got {g.shape}, expected {r.shape}", rtol)
            if g.dtype != r.dtype:
                return _fail(f"output {i}: dtype mismatch: got {g.dtype}, expected {r.dtype}", rtol)
            g64, r64 = g.astype(np.float64), r.astype(np.float64)
            ref_finite = np.isfinite(r64)
            bad = int(np.count_nonzero(ref_finite & ~np.isfinite(g64)))
            if bad:
                return _fail(f"output {i}: {bad} non-finite value(s) (NaN/inf) where the reference is finite", rtol)
            skipped += int(r64.size - np.count_nonzero(ref_finite))
            if not np.any(ref_finite):
                continue
            abs_err = float(np.max(np.abs(g64[ref_finite] - r64[ref_finite])))
            scale = float(np.max(np.abs(r64[ref_finite])))
            denom = max(scale, floor)
            rel_err = abs_err / denom if denom > 0 else (0.0 if abs_err == 0 else math.inf)
            worst_abs, worst_rel = max(worst_abs, abs_err), max(worst_rel, rel_err)
            if scale <= ABS_FLOOR:
                dead.append(i)
            if abs_err > rtol * scale + ABS_FLOOR:
                failures.append(f"output {i} differs: max abs err {abs_err:.1e}, {rel_err:.1e} of max |ref| {scale:.1e}")
        note = f"; {skipped} non-finite reference value(s) not compared" if skipped else ""
        if dead:
            note += f"; output(s) {', '.join(map(str, dead))} of the reference all (near) zero: compared against the floor only"
        if failures:
            more = f" (and {len(failures) - 1} more output(s))" if len(failures) > 1 else ""
            return OutputCheck(False, worst_abs, worst_rel, rtol,
                               f"{failures[0]}; tolerance {rtol:.0e}{more}{note}")
        return OutputCheck(True, worst_abs, worst_rel, rtol,
                           f"outputs match (max abs err {worst_abs:.1e}, {worst_rel:.1e} of max |ref|; "
                           f"tolerance {rtol:.0e}{note})")
    except Exception as exc:  # e.g. outputs that are not arrays at all
        return _fail(f"could not compare outputs: {_one_line(exc, 200)}", rtol)
