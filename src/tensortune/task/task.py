"""Tasks: the tunable units (an op with shapes, or an arbitrary PrimFunc) on one target."""
from __future__ import annotations

import hashlib
import json
import re
from functools import cached_property
from typing import Any, Sequence

import numpy as np

from ..precision import BF16_STORAGE, outputs_close, precision_of_dtypes, to_bf16_bits
from ..space import Config, ConfigSpace
from ..target import host_target_json, target_key
from ..templates.registry import Template, TemplateError, amx_counterpart, get_template, template_for
from .ops import OpError, get_op

#: Relative / absolute tolerance of the correctness check (float32, reductions up to ~5k terms).
RTOL, ATOL = 1e-3, 1e-3


class Task:
    """A tunable unit: its PrimFunc, target, space, FLOPs, key, kernel class and features.

    Build one with :meth:`from_op` (an op name and its shape) or :meth:`from_primfunc`.
    Everything is derived from ``(op, args, target, template, func)``, so a task survives a
    JSON round trip (:meth:`to_json` / :meth:`from_json`) into a worker process.
    """

    def __init__(self, op: str, args: dict[str, int], target: dict[str, Any] | None = None,
                 template: str | Template | None = None, func_json: str | None = None,
                 kernel_class: str | None = None) -> None:
        self.op = op
        #: the template handed in (None: looked up by name in the registry)
        self._template = template if isinstance(template, Template) else None
        if isinstance(template, Template):
            template = template.name
        self.args = dict(args)
        self.target_json = dict(target or host_target_json())
        self.func_json = func_json
        if op == "primfunc":
            if func_json is None:
                raise OpError("a primfunc task needs its function")
            default, self._kernel_class = "generic", kernel_class or "generic"
        else:
            opdef = get_op(op)
            self.args = opdef.parse_args(self.args)
            default, self._kernel_class = opdef.template, kernel_class or opdef.kernel_class
        # a template handed in keeps its name; a name becomes its counterpart on the target
        self.template_name = template if self._template else template_for(template or default, self.target_json)
        if template is None:  # an op's default: its AMX counterpart where the target has the tiles
            self.template_name = amx_counterpart(self.template_name, self.args, self.target_json)

    # ---------------------------------------------------------------- constructors
    @classmethod
    def from_op(cls, op: str, shape: Sequence[int] | dict[str, int], target: dict[str, Any] | None = None,
                template: str | None = None) -> "Task":
        """Task of a named op (see :data:`tensortune.task.ops.OPS`) with its shape values."""
        opdef = get_op(op)
        return cls(op, opdef.parse_args(shape), target, template)

    @classmethod
    def from_primfunc(cls, func: Any, target: dict[str, Any] | None = None, template: str = "generic",
                      kernel_class: str = "generic") -> "Task":
        """Task of an arbitrary TIR PrimFunc (tuned with the generic space unless told otherwise)."""
        import tvm

        func = func.with_attr("global_symbol", "main") if func.attrs is None or "global_symbol" not in func.attrs else func
        shapes = [[int(d) for d in b.shape] for b in param_buffers(func)]
        args = {f"p{i}_d{j}": d for i, s in enumerate(shapes) for j, d in enumerate(s)}
        return cls("primfunc", args, target, template, tvm.ir.save_json(func), kernel_class)

    @classmethod
    def from_fused(cls, func: Any, target: dict[str, Any] | None = None, name_hint: str = "") -> "Task":
        """Task of a model's fused PrimFunc: the op template of its anchor (``conv2d-add-relu``
        is scheduled by the conv2d template, its epilogue fused) when :mod:`.pattern`
        recognises one, the attention template for a fused attention, else the generic template.
        ``name_hint`` (the Relax function name, e.g. ``fused_softmax_broadcast_to2``) names the
        kernel class of the others.
        """
        import tvm

        from .pattern import analyze_func, attention_pattern

        if func.attrs is None or "global_symbol" not in func.attrs:
            func = func.with_attr("global_symbol", "main")
        attention = attention_pattern(func)
        if attention is not None:
            kind = "" if attention.precision == "f32" else f"_{attention.precision}"  # its own template and class
            template = amx_counterpart(f"attention{kind}", {}, dict(target or host_target_json()))
            return cls.from_primfunc(func, target, template, generic_kernel_class(name_hint) + kind)
        pat = analyze_func(func)
        if pat.op is None:
            return cls.from_primfunc(func, target, "generic", generic_kernel_class(name_hint))
        try:
            return cls(pat.op, pat.args, target, None, tvm.ir.save_json(func), pat.kernel_class)
        except TemplateError:  # an op whose templates are all for CPUs, on a GPU: the generic one
            return cls.from_primfunc(func, target, "generic", pat.kernel_class)

    # ---------------------------------------------------------------- identity
    def to_json(self) -> dict[str, Any]:
        """Everything needed to rebuild the task in another process."""
        d: dict[str, Any] = {"op": self.op, "args": self.args, "target": self.target_json,
                             "template": self.template_name, "kernel_class": self._kernel_class}
        if self.func_json is not None:
            d["func"] = self.func_json
        return d

    @cached_property
    def json_text(self) -> str:
        """:meth:`to_json` as canonical JSON text (what worker processes receive)."""
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Task":
        """Inverse of :meth:`to_json`."""
        return cls(d["op"], d["args"], d["target"], d.get("template"), d.get("func"), d.get("kernel_class"))

    @cached_property
    def workload_key(self) -> str:
        """Stable id: a digest of op, shape, template (and its version), target and (for
        PrimFuncs) the function."""
        ident = {"op": self.op, "args": self.args, "template": f"{self.template_name}@{self.template.key_version(self)}",
                 "target": json.loads(target_key(self.target_json))}
        if self.func_json is not None:  # structural: the same function from any model, any names
            import tvm_ffi

            ident["func"] = f"{tvm_ffi.structural_hash(self.prim_func()):016x}"
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]

    @property
    def kernel_class(self) -> str:
        """Pattern name, e.g. ``conv2d`` (later ``conv2d-add-relu``)."""
        return self._kernel_class

    @property
    def name(self) -> str:
        """Short human-readable name, e.g. ``conv2d(H=28,W=28,...)``."""
        if self.op == "primfunc":
            return f"{self._kernel_class}[{self.workload_key[:8]}]"
        head = self.op if self.func_json is None else self._kernel_class
        return f"{head}(" + ",".join(f"{k}={v}" for k, v in self.args.items()) + ")"

    def __repr__(self) -> str:
        return f"Task({self.name}, key={self.workload_key})"

    # ---------------------------------------------------------------- compute
    def prim_func(self) -> Any:
        """The PrimFunc of the computation (inputs..., output); built once, TVM IR is immutable."""
        return self._prim_func

    @cached_property
    def _prim_func(self) -> Any:
        import tvm
        from tvm import te

        if self.func_json is not None:
            return tvm.ir.load_json(self.func_json)
        return te.create_prim_func(get_op(self.op).compute(self.args))

    @cached_property
    def _signature(self) -> tuple[list[list[int]], list[str]]:
        f = self.prim_func()
        shapes, dtypes = [], []
        for buf in param_buffers(f):
            shapes.append([int(d) for d in buf.shape])
            dtypes.append(str(buf.dtype))
        return shapes, dtypes

    @property
    def arg_shapes(self) -> list[list[int]]:
        """Shapes of the function's buffers, inputs first, output last."""
        return self._signature[0]

    @property
    def arg_dtypes(self) -> list[str]:
        """Data types of the function's buffers, in the order of :attr:`arg_shapes`."""
        return self._signature[1]

    @property
    def out_shape(self) -> list[int]:
        """Shape of the output buffer."""
        return self.arg_shapes[-1]

    @cached_property
    def flops(self) -> float:
        """Floating-point operations of one call (a fused function's epilogue included).

        A fused function with a recognised anchor counts the anchor's operations as its op does
        (2 per multiply-add) and one per output element for each epilogue block, the way an
        activation is counted: a fast-math activation (:mod:`tensortune.models.fastmath`) is a
        polynomial of dozens of operations per element, and counting them all would make a
        convolution with a SiLU report 4x its GFLOP/s. Other functions are counted the same way
        block by block (:attr:`FuncPattern.flops <tensortune.task.pattern.FuncPattern>`), and where
        their blocks cannot be read, by TVM's estimate."""
        if self.func_json is None:
            return get_op(self.op).flops(self.args)
        if self.pattern.op == self.op:  # a recognised anchor (None for a generic function)
            try:
                anchor = get_op(self.op).flops(self.args)
            except Exception:  # noqa: BLE001 - args the op's formula does not know: TVM's estimate
                anchor = None
            if anchor is not None:
                return float(anchor + len(self.pattern.epilogue) * float(np.prod(self.out_shape)))
        if self.pattern.flops is not None:  # counted when the function's blocks were read
            return self.pattern.flops
        from tvm.s_tir import analysis

        import tvm

        try:
            return float(analysis.estimate_tir_flops(tvm.IRModule({"main": self.prim_func()})))
        except Exception:
            return float(np.prod(self.out_shape))

    @cached_property
    def features(self) -> dict[str, float]:
        """Task features: the shape arguments (and output sizes) as numbers."""
        feats = {k: float(v) for k, v in self.args.items()}
        if self.op.startswith(("conv2d", "depthwise_conv2d")):  # NCHW or NCHW{c}c: the output's H and W
            feats["OH"], feats["OW"] = float(self.out_shape[2]), float(self.out_shape[3])
        feats["log_flops"] = float(np.log2(max(self.flops, 1.0)))
        return feats

    @cached_property
    def pattern(self) -> Any:
        """What the PrimFunc computes: anchor block, padding, epilogue (:mod:`.pattern`)."""
        from .pattern import analyze_func

        return analyze_func(self.prim_func())

    @cached_property
    def attention(self) -> Any:
        """The blocks of a fused attention (:func:`.pattern.attention_pattern`; None for others)."""
        from .pattern import attention_pattern

        return attention_pattern(self.prim_func())

    # ---------------------------------------------------------------- space
    @property
    def template(self) -> Any:
        """The template that owns this task's space: the one handed in, else the registry's."""
        return self._template if self._template is not None else get_template(self.template_name)

    @cached_property
    def space(self) -> ConfigSpace:
        """The task's search space."""
        return self.template.space(self)

    def default_config(self) -> Config:
        """A sane untuned schedule (the template's choice, else the first valid config)."""
        knobs = self.template.default_knobs(self, self.space)
        c = self._valid_config(knobs) if knobs is not None else None
        return c if c is not None else next(iter(self.space))

    def _valid_config(self, knobs: dict[str, Any]) -> Config | None:
        """The config of ``knobs`` if the space's constraints accept it, else None."""
        c = self.space.get(self.space.index_of(knobs))
        return c if self.space.is_valid(c) else None

    def other_algorithm_configs(self) -> list[Config]:
        """The default's untuned counterparts in the template's other algorithms, the
        valid ones, each once and none the default."""
        seen = {self.default_config().index}
        out = []
        for knobs in self.template.other_algorithm_knobs(self, self.space):
            c = self._valid_config(knobs)
            if c is not None and c.index not in seen:
                seen.add(c.index)
                out.append(c)
        return out

    def instantiate(self, config: Config | dict[str, Any]) -> Any:
        """The scheduled IRModule of ``config`` (raises on an impossible config)."""
        if isinstance(config, dict):
            config = self.space.config_from_json(config)
        return self.template.apply(self, config)

    # ---------------------------------------------------------------- data
    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Random inputs (all but the last buffer), reproducible from ``seed``."""
        rng = np.random.default_rng(seed)
        shapes, dtypes = self._signature
        out = []
        for s, dt in zip(shapes[:-1], dtypes[:-1]):
            if dt.startswith("float"):
                out.append(rng.uniform(-1, 1, size=s).astype(dt))
            elif dt == BF16_STORAGE:  # bfloat16 values, as their bits
                out.append(to_bf16_bits(rng.uniform(-1, 1, size=s).astype(np.float32)))
            else:
                out.append(rng.integers(0, 4, size=s).astype(dt))
        return out

    def output_buffer(self) -> np.ndarray:
        """A zeroed array for the output."""
        shapes, dtypes = self._signature
        return np.zeros(shapes[-1], dtype=dtypes[-1])

    @cached_property
    def precision(self) -> str:
        """``bf16`` when the function computes on bfloat16 values (``uint16`` buffers: parameters,
        or stages that round its float32 operands), else ``f32``."""
        from .pattern import _blocks

        dtypes = list(self._signature[1])
        try:
            dtypes += [str(w.dtype) for b in _blocks(self.prim_func()) for w in b.write_buffers]
        except Exception:  # noqa: BLE001 - an unusual block structure: the parameters decide
            pass
        return precision_of_dtypes(dtypes)

    def outputs_match(self, got: np.ndarray, expected: np.ndarray) -> bool:
        """The correctness rule of a candidate's output: :data:`RTOL` / :data:`ATOL` in float32,
        the bf16 tolerance (:func:`tensortune.precision.agreement`) for a bf16 task."""
        return outputs_close(got, expected, self.precision, RTOL, ATOL)

    @property
    def has_numpy_reference(self) -> bool:
        """True for named ops (PrimFunc tasks are checked against TVM's unscheduled build)."""
        return self.func_json is None

    def reference(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """Expected output for ``inputs`` (numpy for named ops, TVM's unscheduled build of the
        function otherwise)."""
        if self.func_json is not None:
            return _unscheduled_output(self, inputs)
        return np.asarray(get_op(self.op).reference(self.args, inputs), dtype=self.output_buffer().dtype)


def generic_kernel_class(name_hint: str) -> str:
    """Kernel class of a function without a recognised anchor, from its Relax name:
    ``fused_softmax_broadcast_to2`` -> ``softmax-broadcast-to``, ``layer_norm`` -> ``layer-norm``."""
    name = name_hint.removeprefix("fused_")
    parts = [re.sub(r"(?<=[a-z])\d+$", "", p) for p in name.split("_")]
    parts = [p for p in parts if p and not p.isdigit()]
    return "-".join(parts) or "generic"


def param_buffers(func: Any) -> list[Any]:
    """The buffers of a PrimFunc's parameters (TVM 0.27 params are buffers themselves)."""
    out = []
    for p in func.params:
        if hasattr(p, "shape"):
            out.append(p)
        else:  # scalar or handle parameter
            raise OpError(f"parameter {p} of the PrimFunc is not a buffer; only buffer parameters are supported")
    return out


def _unscheduled_output(task: Task, inputs: Sequence[np.ndarray]) -> np.ndarray:
    import tvm

    from ..target import make_target

    ex = tvm.compile(tvm.IRModule({"main": task.prim_func()}), target=make_target(task.target_json))
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.tensor(task.output_buffer(), dev)
    ex.mod["main"](*args, out)
    return out.numpy()
