"""Import a model into a Relax module: a built-in name, an ONNX file or a ``torch.nn.Module``.

Every path ends in the same :class:`Model`: the Relax module with its weights bound as
constants and batch norm folded into the preceding convolutions
(``relax.transform.FoldBatchnormToConv2D``, as any deployment compiler does), the
static input signature, reproducible example inputs and the framework model that serves
as the reference (the PyTorch module, or the ONNX file for ONNX Runtime). An ONNX graph's
shape arithmetic is constant-folded at its static input shapes first (:func:`fold_onnx_shapes`).

Anything that cannot be imported raises :class:`ModelError` with one line naming what
and where: a path that is not a file, a file that is not ONNX, an operator the frontend
lacks, a dynamic dimension that was not fixed with ``input_shapes``, an intermediate
shape known only at run time (``NonZero``), a graph TVM cannot legalize.
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import TensortuneError
from ..limits import LimitError, check_shape
from ..precision import BF16_RTOL, DEFAULT_PRECISION


class ModelError(TensortuneError, ValueError):
    """A model that cannot be imported (one-line message)."""


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, static shape, dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_json(self) -> dict[str, Any]:
        """JSON form (saved next to a compiled library)."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass
class Model:
    """An imported model, ready for task extraction and compilation."""

    name: str
    source: str  # "zoo" | "torch" | "onnx" | "hf"
    mod: Any  # Relax IRModule, weights bound, batch norm folded, not yet legalized
    inputs: list[InputSpec]
    example_inputs: list[np.ndarray]
    torch_module: Any = None  # reference for zoo / torch models
    onnx_path: str | None = None  # reference (ONNX Runtime) for ONNX models
    batch: int = 1
    meta: dict[str, Any] = field(default_factory=dict)
    #: ``f32`` or ``bf16`` (:mod:`tensortune.precision`): the precision its convolutions and
    #: matrix products run in; outputs are checked against the float32 reference with its tolerance
    precision: str = DEFAULT_PRECISION
    _fused: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def rtol(self) -> float:
        """The output tolerance of this model's builds against their float32 reference."""
        from .reference import DEFAULT_RTOL

        return BF16_RTOL if self.precision == "bf16" else DEFAULT_RTOL

    def with_precision(self, precision: str) -> "Model":
        """This model to be built in ``precision`` (itself when it already is; the fused modules
        of both are kept in one cache)."""
        from dataclasses import replace

        return self if precision == self.precision else replace(self, precision=precision)

    def fused(self, target_json: dict[str, Any], layout: str | None = None) -> Any:
        """The module with its layout plan (:mod:`.layout`), legalized and fused for
        ``target_json`` (computed once per target and layout mode: tuning, compiling tuned and
        untuned all start from it)."""
        from ..precision import require
        from ..target import is_host, make_target
        from .extract import lower_to_fused
        from .layout import plan_layouts

        key = self._key(target_json, layout)
        if key not in self._fused:
            require(self.precision, target_json, runs_here=is_host(target_json))
            target = make_target(target_json)
            with target:
                planned, plan = plan_layouts(self.mod, target_json, key[1], self.precision)
            try:
                fused = lower_to_fused(planned, target, self.precision)
            except Exception as e:  # noqa: BLE001
                if planned is self.mod:  # a graph TVM cannot legalize is bad input, not a crash
                    raise ModelError(f"{self.name}: TVM cannot legalize and fuse it: {_first_line(e)}") from None
                try:  # the plan made something TVM cannot lower: NCHW everywhere, said in the plan
                    fused = lower_to_fused(self.mod, target, self.precision)
                except Exception as e2:  # noqa: BLE001
                    raise ModelError(f"{self.name}: TVM cannot legalize and fuse it: {_first_line(e2)}") from None
                from .layout import LayoutPlan

                plan = LayoutPlan(key[1], 0, plan.convs, 0, f"lowering the planned graph failed: {_first_line(e)}")
                for c in plan.convs:
                    c.layout, c.reason = "NCHW", "layout plan could not be lowered"
            self._fused[key] = (fused, plan)
        return self._fused[key][0]

    def layout_plan(self, target_json: dict[str, Any], layout: str | None = None) -> Any:
        """The :class:`~tensortune.models.layout.LayoutPlan` of :meth:`fused`."""
        self.fused(target_json, layout)
        return self._fused[self._key(target_json, layout)][1]

    def _key(self, target_json: dict[str, Any], layout: str | None) -> tuple[str, str, str]:
        from ..target import target_key

        return target_key(target_json), layout_mode(target_json, layout), self.precision


def layout_mode(target_json: dict[str, Any], layout: str | None) -> str:
    """The layout mode a model is fused in for ``target_json``: ``layout``, else the default; NCHW
    on CUDA whatever is asked (the blocked layouts are the CPU templates')."""
    from ..target import is_cuda
    from .layout import DEFAULT_MODE

    return "nchw" if is_cuda(target_json) else layout or DEFAULT_MODE


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # TVM errors end with the useful line; Python ones start with it
    line = lines[-1] if type(e).__module__.startswith("tvm") and lines else lines[0]
    return line[:300]


def load_model(model: Any, example_inputs: Sequence[Any] | None = None, *, batch: int = 1, seed: int = 0,
               input_shapes: dict[str, Sequence[int]] | None = None) -> Model:
    """Import ``model``: a built-in name (see :func:`tensortune.models.zoo.model_names`), a path to
    an ONNX file, a Hugging Face ``hf:MODEL_TYPE[:key=value,...]`` spec or ``save_pretrained`` folder
    (:mod:`.hf`), or a ``torch.nn.Module`` with ``example_inputs``."""
    if isinstance(model, str):
        from .zoo import MODELS

        try:
            input_shapes = {k: check_shape(f"input {k!r}", v) for k, v in (input_shapes or {}).items()} or None
        except LimitError as e:
            raise ModelError(str(e)) from None
        if input_shapes and model in MODELS:
            raise ModelError(f"{model} is a built-in model: its input shape is fixed (give --batch instead of "
                             "--input-shape)")
        if model.startswith("hf:") or (os.path.isdir(model) and os.path.isfile(os.path.join(model, "config.json"))):
            from .hf import load_hf  # a Hugging Face spec or save_pretrained folder (the optional hf extra)

            return load_hf(model, batch=batch, seed=seed, input_shapes=input_shapes)
        if model in MODELS:
            if batch < 1:
                raise ModelError(f"batch size {batch} must be at least 1")
            from .zoo import build_model

            module, inputs = build_model(model, batch=batch, seed=seed)
            m = from_torch(module, inputs, name=model)
            m.source, m.batch = "zoo", batch
            return m
        if not os.path.exists(model):
            raise ModelError(f"{model}: no such file, and not a built-in model (built-ins: {', '.join(MODELS)})")
        if os.path.isdir(model):
            raise ModelError(f"{model}: is a directory, not a model file")
        return from_onnx(model, input_shapes=input_shapes, seed=seed)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise ModelError(f"{type(model).__name__}: a torch.nn.Module needs example inputs")
        return from_torch(model, list(example_inputs), name=type(model).__name__)
    raise ModelError(f"cannot import a {type(model).__name__}: give a built-in name, an ONNX path or a torch.nn.Module")


# ---------------------------------------------------------------- PyTorch
def from_torch(module: Any, example_inputs: Sequence[Any], name: str) -> Model:
    """Import a ``torch.nn.Module`` through ``torch.export`` and the Relax PyTorch frontend."""
    import torch

    module = module.eval()
    inputs = [x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x)) for x in example_inputs]
    try:
        with torch.no_grad():
            ep = torch.export.export(module, tuple(inputs))
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"{name}: torch.export failed: {_first_line(e)}") from None
    from tvm.relax.frontend.torch import from_exported_program

    try:
        mod = from_exported_program(ep)
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"{name}: the Relax PyTorch frontend cannot import it: {_unsupported(e)}") from None
    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    specs = [InputSpec(n, tuple(int(d) for d in x.shape), str(x.dtype).removeprefix("torch.")) for n, x in zip(names, inputs)]
    mod = _finish(mod, name)
    return Model(name, "torch", mod, specs, [x.detach().numpy().copy() for x in inputs], torch_module=module,
                 batch=int(inputs[0].shape[0]) if inputs and inputs[0].dim() else 1)


def _unsupported(e: BaseException) -> str:
    text = str(e)
    m = re.search(r"Unsupported function types? \[([^\]]*)\]", text)
    if m:
        return f"unsupported operator(s) {m.group(1)}"
    m = re.search(r"operators are not supported[^:]*:\s*(.+)", text)
    if m:
        return f"unsupported operator(s) {m.group(1).strip()}"
    return _first_line(e)


# ---------------------------------------------------------------- ONNX
def _onnx_dtype(elem_type: int) -> str:
    import onnx

    return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))


def from_onnx(path: str, input_shapes: dict[str, Sequence[int]] | None = None, seed: int = 0) -> Model:
    """Import an ONNX file through ``tvm.relax.frontend.onnx`` (static shapes only)."""
    import onnx

    try:
        proto = onnx.load(path)
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"{path}: not an ONNX model ({_first_line(e)})") from None
    if not proto.graph.node:
        raise ModelError(f"{path}: not an ONNX model (the graph has no nodes)")
    init_names = {t.name for t in proto.graph.initializer}
    given = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    specs: list[InputSpec] = []
    graph_inputs = [i for i in proto.graph.input if i.name not in init_names]
    unknown = set(given) - {i.name for i in graph_inputs}
    if unknown:
        raise ModelError(f"{path}: no input named {sorted(unknown)[0]!r} (inputs: {', '.join(i.name for i in graph_inputs)})")
    for inp in graph_inputs:
        tt = inp.type.tensor_type
        dims = list(tt.shape.dim)
        if inp.name in given:
            shape = given[inp.name]
            if len(shape) != len(dims):
                raise ModelError(f"{path}: input {inp.name!r} has rank {len(dims)}, --input-shape gave {len(shape)} values")
        else:
            shape_l = []
            for k, d in enumerate(dims):
                if d.HasField("dim_value") and d.dim_value > 0:
                    shape_l.append(int(d.dim_value))
                else:
                    sym = d.dim_param or "?"
                    raise ModelError(f"{path}: input {inp.name!r} has a dynamic dimension {sym!r} at axis {k}; "
                                     f"fix it with --input-shape {inp.name}=d0,d1,...")
            shape = tuple(shape_l)
        specs.append(InputSpec(inp.name, tuple(shape), _onnx_dtype(tt.elem_type)))
    proto = fold_onnx_shapes(proto, specs)
    from .recurrent import RecurrentError, expand_recurrent

    try:
        proto = expand_recurrent(proto)
    except RecurrentError as e:
        raise ModelError(f"{path}: {e}") from None
    from tvm.relax.frontend.onnx import from_onnx as relax_from_onnx

    try:
        mod = relax_from_onnx(proto, shape_dict={s.name: list(s.shape) for s in specs},
                              dtype_dict={s.name: s.dtype for s in specs}, keep_params_in_input=False)
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"{path}: TVM's ONNX frontend cannot import it: {_unsupported(e)}") from None
    name = os.path.splitext(os.path.basename(path))[0]
    mod = _finish(mod, path)
    rng = np.random.default_rng(seed)
    examples = [_example(s, rng) for s in specs]
    return Model(name, "onnx", mod, specs, examples, onnx_path=os.path.abspath(path),
                 batch=specs[0].shape[0] if specs and specs[0].shape else 1)


def fold_onnx_shapes(proto: Any, specs: Sequence[InputSpec]) -> Any:
    """``proto`` with its inputs fixed to ``specs``' shapes and its shape arithmetic constant-folded.

    Exporters write ``x.view(b, c // 2, ...)`` or ``x.chunk(2, 1)`` as ``Shape -> Gather -> Div ->
    Concat -> Reshape/Slice`` chains that TVM's ONNX frontend turns into dynamic shapes even when
    every input shape is static. ONNX Runtime's basic graph optimizations (constant folding and
    other semantics-preserving rewrites into standard ONNX operators, what onnx-simplifier does)
    fold them at the fixed input shapes. If ONNX Runtime cannot load the graph, it is returned
    unchanged (with its inputs fixed) and the frontend gets the last word.
    """
    import onnx

    proto = onnx.ModelProto.FromString(proto.SerializeToString())  # a copy: the caller's proto stays as given
    by_name = {s.name: s.shape for s in specs}
    for inp in proto.graph.input:
        if inp.name in by_name:
            dims = inp.type.tensor_type.shape.dim
            for d, v in zip(dims, by_name[inp.name]):
                d.Clear()
                d.dim_value = int(v)
    try:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.log_severity_level = 3
        with tempfile.TemporaryDirectory(prefix="tensortune-onnx-") as tmp:
            opts.optimized_model_filepath = os.path.join(tmp, "folded.onnx")
            ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            return onnx.load(opts.optimized_model_filepath)
    except Exception:  # noqa: BLE001 - folding is an optimisation; the frontend reports real problems
        return proto


def _example(spec: InputSpec, rng: np.random.Generator) -> np.ndarray:
    """A reproducible example input: standard normal floats, small non-negative integers
    (valid as indices into any embedding table)."""
    dt = np.dtype(spec.dtype)
    if dt.kind == "f":
        return rng.standard_normal(spec.shape).astype(dt)
    return rng.integers(0, 2, spec.shape).astype(dt)


# ---------------------------------------------------------------- common
def _finish(mod: Any, where: str) -> Any:
    """Fold batch norm into convolutions; refuse dynamic shapes."""
    from tvm import relax

    mod = relax.transform.FoldBatchnormToConv2D()(mod)
    main = mod["main"]
    for p in main.params:
        ty = p.ty  # TVM 0.27: relax.TensorType (struct_info is gone)
        if not _is_static(ty):
            raise ModelError(f"{where}: input {_var_name(p)!r} has a dynamic shape ({ty}); only static shapes can be tuned")
    _check_static(main, where)
    return mod


def _is_static(ty: Any) -> bool:
    """Whether a Relax type has a shape of integer constants."""
    values = getattr(getattr(ty, "shape", None), "values", None)
    return values is not None and all(type(v).__name__ == "IntImm" for v in values)


def _var_name(v: Any) -> str:
    """A Relax variable's name (TVM 0.27 calls it ``name``; older ones ``name_hint``)."""
    return str(getattr(v, "name", None) or getattr(v, "name_hint", "?"))


def _check_static(main: Any, where: str) -> None:
    """Refuse a graph whose intermediate tensors have shapes only known at run time (one line naming the op)."""
    from tvm import relax

    for block in main.body.blocks:
        for b in block.bindings:
            ty = b.var.ty
            if isinstance(ty, relax.TensorType) and not _is_static(ty):
                op = getattr(getattr(b.value, "op", None), "name", type(b.value).__name__)
                raise ModelError(f"{where}: the output of {op} ({_var_name(b.var)}) has a shape known only at run time "
                                 f"({ty}); only static shapes can be tuned")
