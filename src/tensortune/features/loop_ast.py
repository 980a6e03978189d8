"""Loop-AST features of a scheduled candidate (AutoTVM, Chen et al., NeurIPS 2018, sec. 4).

The scheduled TIR of a candidate is walked once (:func:`analyze`): one node per ``For``
loop in pre-order, block variables replaced by their bindings so that every buffer index
is an expression of loop variables. Index expressions are compiled to small Python
functions (cached by their source text) and evaluated numerically: the coefficient of loop
variable ``v`` in an index is ``f(v=1, others 0) - f(all 0)``, which stays meaningful under
``floordiv``/``floormod``/``min``/``max``/casts/``if_then_else`` (a layout-transformed
``kernel[v // 64, ..., v % 64]`` gets coefficient 0 resp. 1 for the inner loop).

From that analysis come three views:

* :func:`extract_loop_tree` - the :class:`~tensortune.features.base.LoopTree` (one context
  vector of :data:`CTX_DIM` values per loop, and parent indices) for tree models;
* :func:`itervar_features` - the flattened loop contexts, :data:`MAX_LOOPS` of them;
* :func:`curve_features` - the paper's context-relation features: per top buffer, the
  maxima of one loop feature among loops whose other feature is below log2-spaced
  thresholds, plus whole-function globals. Its length (:data:`CURVE_DIM`) does not depend
  on the op, shape or schedule, so a model trained on it transfers across tasks.

Layout of one loop context (``ctx[k]``; counts and bytes are ``log2(1 + x)``):

====== ===========================================================================
0      extent
1      depth (0 for outermost loops)
2      innermost flag (no loop inside)
3      reduction flag (the loop variable feeds a reduction block variable)
4..7   annotation: parallel (or GPU thread binding), vectorize, unroll (kind
       unrolled or ``pragma_auto_unroll_max_step > 0``), none
8      product of extents of the loops enclosing and including ``k``
9      ``pragma_auto_unroll_max_step``
10..25 top :data:`N_TOP_BUFFERS` buffers by accesses inside ``k`` (count desc, ties by
       name), each: bytes touched by one full run of ``k``, reuse (accesses / elements
       touched), stride of ``k``'s variable in the row-major flattened index, accesses
       by one full run of ``k``; zeros for missing buffers
26..28 float add/sub, mul, other (div, min, max, select, calls) run by one full run of ``k``
====== ===========================================================================

Bytes touched: per dimension, the span of the index over the loops at and inside ``k`` is
``max(sum |coef_v| * (ext_v - 1) + 1, |f(last) - f(0)| + 1)`` (the second term, with those
loops at their last iteration, is exact for monotone floordiv indices), capped at the
dimension's size; the product of spans times the element size, maximised over the
buffer's access sites. Strides are maximised over sites too, counts summed. Block
predicates (``T.where``) are ignored; a block's ``init`` is not repeated by its reduction
loops; a non-constant loop extent counts as 1; an unknown node is skipped, never fatal.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..space import Config
from .base import CandidateCache, FeatureExtractor, LoopTree

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

# ---------------------------------------------------------------- layout constants
#: Buffers described per loop context.
N_TOP_BUFFERS = 4
#: Values per buffer in a loop context: bytes, reuse, stride, count.
BUFFER_FEATS = 4
#: Offsets inside a loop context.
F_EXTENT, F_DEPTH, F_INNERMOST, F_REDUCTION = 0, 1, 2, 3
F_PARALLEL, F_VECTORIZE, F_UNROLL, F_NO_ANNOT = 4, 5, 6, 7
F_TOPDOWN, F_UNROLL_STEP = 8, 9
F_BUFFERS = 10
F_ARITH = F_BUFFERS + N_TOP_BUFFERS * BUFFER_FEATS  # add, mul, other
#: Length of one loop context vector.
CTX_DIM = F_ARITH + 3

#: Loops kept by :func:`itervar_features` (pre-order; the rest is truncated).
MAX_LOOPS = 24
#: Length of :func:`itervar_features`.
ITERVAR_DIM = MAX_LOOPS * CTX_DIM

#: Buffers described by the curve features (top by total accesses over the function).
CURVE_BUFFERS = 4
#: Columns of a buffer's relation matrix Z (all ``log2(1 + x)`` of the raw value).
Z_BYTES, Z_REUSE, Z_COUNT, Z_STRIDE, Z_TOPDOWN = 0, 1, 2, 3, 4
Z_NAMES = ("bytes", "reuse", "count", "stride", "topdown")
#: (i, j) pairs: R_t(ij) = max of Z_i over loops whose raw Z_j is below 2**t.
CURVE_PAIRS: tuple[tuple[int, int], ...] = (
    (Z_REUSE, Z_BYTES), (Z_COUNT, Z_BYTES), (Z_STRIDE, Z_BYTES), (Z_REUSE, Z_COUNT), (Z_TOPDOWN, Z_BYTES),
)
#: Thresholds 2**0 .. 2**(CURVE_THRESHOLDS - 1).
CURVE_THRESHOLDS = 24
#: Whole-function values appended to the curve features.
CURVE_GLOBAL_NAMES = ("log_flops", "log_bytes", "log_intensity", "log_parallel", "log_vector",
                      "log_unroll_step", "log_loops", "log_stores")
N_CURVE_GLOBALS = len(CURVE_GLOBAL_NAMES)
#: Length of :func:`curve_features`.
CURVE_DIM = CURVE_BUFFERS * len(CURVE_PAIRS) * CURVE_THRESHOLDS + N_CURVE_GLOBALS

_THRESHOLDS = np.exp2(np.arange(CURVE_THRESHOLDS, dtype=np.float64))

# ---------------------------------------------------------------- loop kinds (tirx.ForKind)
_KIND_PARALLEL, _KIND_VECTORIZED, _KIND_UNROLLED, _KIND_THREAD = 1, 2, 3, 4


def _log(x: float) -> float:
    return math.log2(1.0 + x) if x > 0 else 0.0


# ---------------------------------------------------------------- compiled index functions
def _fd(a: Any, b: Any) -> Any:
    return a // b if b else 0


def _fm(a: Any, b: Any) -> Any:
    return a % b if b else 0


def _td(a: Any, b: Any) -> Any:
    if not b:
        return 0
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _tm(a: Any, b: Any) -> Any:
    if not b:
        return 0
    if isinstance(a, int) and isinstance(b, int):
        return a - _td(a, b) * b
    return math.fmod(a, b)


_EVAL_GLOBALS = {"_fd": _fd, "_fm": _fm, "_td": _td, "_tm": _tm, "min": min, "max": max, "__builtins__": {}}
_COMPILED: dict[str, Callable[..., tuple]] = {}
_COMPILED_MAX = 50_000
_LOOP_REF = re.compile(r"L(\d+)")


def _compile(src: str) -> Callable[..., tuple] | None:
    """``eval`` a lambda once per distinct source text."""
    fn = _COMPILED.get(src)
    if fn is None:
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.clear()
        try:
            fn = eval(src, _EVAL_GLOBALS)  # noqa: S307 - source generated from TIR by _Walker
        except Exception:  # noqa: BLE001 - degrade: an uncompilable index gets no coefficients
            fn = None
        _COMPILED[src] = fn  # type: ignore[assignment]
    return fn


_BIN = {"Add": "+", "Sub": "-", "Mul": "*", "EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
_FUNC = {"FloorDiv": "_fd", "FloorMod": "_fm", "Div": "_td", "Mod": "_tm", "Min": "min", "Max": "max"}
_LOAD_NAMES = ("BufferLoad", "TensorLoad")
#: Binary arithmetic node -> slot of the float-op counts (add/sub, mul, other).
_BINARY_OP_SLOT = {"Add": 0, "Sub": 0, "Mul": 1, **{name: 2 for name in _FUNC}}
_DTYPE_BYTES: dict[str, int] = {}
_DTYPE_FLOAT: dict[str, bool] = {}


def _dtype_bytes(dt: str) -> int:
    b = _DTYPE_BYTES.get(dt)
    if b is None:
        m = re.match(r"[a-z_]*?(\d+)(?:x(\d+))?$", dt)
        b = max(1, (int(m.group(1)) * int(m.group(2) or 1) + 7) // 8) if m else 4
        if dt == "bool":
            b = 1
        _DTYPE_BYTES[dt] = b
    return b


def _is_float(e: Any) -> bool:
    try:
        dt = str(e.ty.dtype)
    except Exception:  # noqa: BLE001
        return False
    f = _DTYPE_FLOAT.get(dt)
    if f is None:
        f = _DTYPE_FLOAT[dt] = dt.startswith(("float", "bfloat"))
    return f


# ---------------------------------------------------------------- the analysis
@dataclass
class _Buffer:
    name: str
    shape: tuple[int, ...]  # -1 for a non-constant dimension
    nbytes: int  # bytes per element
    order: int  # first appearance (deterministic tie-break)


@dataclass
class _Site:
    buf: int
    path: tuple[int, ...]  # enclosing loops, outermost first
    index: list[str]  # source per dimension, over L<k> loop variables
    write: bool


@dataclass
class LoopAnalysis:
    """Everything measured by one walk of a scheduled PrimFunc.

    Per loop ``k`` (pre-order): ``extent``, ``parent``, ``depth``, ``kind`` (tirx.ForKind as
    int), ``unroll_step`` (``pragma_auto_unroll_max_step``), ``reduction``, ``innermost``,
    ``topdown`` (product of extents of enclosing loops and ``k``), ``arith`` ([n, 3] float
    add/sub, mul, other run by one full run of ``k``) and ``stats[k]``: buffer name ->
    (bytes touched, reuse, stride, accesses) for one full run of ``k``. ``root_stats`` holds
    the same for the whole function; ``root_arith`` its operation counts.
    """

    extent: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    unroll_step: list[int] = field(default_factory=list)
    reduction: list[bool] = field(default_factory=list)
    innermost: list[bool] = field(default_factory=list)
    topdown: list[float] = field(default_factory=list)
    arith: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    stats: list[dict[str, tuple[float, float, float, float]]] = field(default_factory=list)
    root_stats: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)
    root_arith: np.ndarray = field(default_factory=lambda: np.zeros(3))
    buffer_order: dict[str, int] = field(default_factory=dict)
    n_stores: int = 0

    def __len__(self) -> int:
        return len(self.extent)

    def top_buffers(self, stats: dict[str, tuple[float, float, float, float]], n: int) -> list[str]:
        """The ``n`` buffers with most accesses in ``stats`` (count desc, then name, then order)."""
        return sorted(stats, key=lambda b: (-stats[b][3], b, self.buffer_order.get(b, 0)))[:n]


class _Walker:
    """One pass over the TIR: loops, access sites (index sources) and per-store op counts."""

    def __init__(self) -> None:
        self.extent: list[int] = []
        self.parent: list[int] = []
        self.kind: list[int] = []
        self.unroll: list[int] = []
        self.reduction: list[bool] = []
        self.has_child: list[bool] = []
        self.sites: list[_Site] = []
        self.stores: list[tuple[tuple[int, ...], int, int, int]] = []
        self.buffers: list[_Buffer] = []
        self._buf_ids: dict[int, int] = {}
        self.env: dict[int, str] = {}  # var handle -> source over L<k>

    # ------------------------------------------------------------ expressions -> source
    def src(self, e: Any) -> str:
        name = type(e).__name__
        try:
            if name == "IntImm":
                return repr(int(e.value))
            if name in _BIN:
                return f"({self.src(e.a)}{_BIN[name]}{self.src(e.b)})"
            if name == "Var" or name == "SizeVar":
                return self.env.get(e.__chandle__(), "0")
            if name in _FUNC:
                return f"{_FUNC[name]}({self.src(e.a)},{self.src(e.b)})"
            if name == "FloatImm":
                v = float(e.value)
                return repr(v) if math.isfinite(v) else "0"
            if name == "Cast":
                return self.src(e.value)
            if name == "And":
                return f"({self.src(e.a)} and {self.src(e.b)})"
            if name == "Or":
                return f"({self.src(e.a)} or {self.src(e.b)})"
            if name == "Not":
                return f"(not {self.src(e.a)})"
            if name == "Select":
                return f"({self.src(e.true_value)} if {self.src(e.condition)} else {self.src(e.false_value)})"
            if name == "Call":
                args = e.args
                if str(e.op.name).endswith("if_then_else") and len(args) == 3:
                    return f"({self.src(args[1])} if {self.src(args[0])} else {self.src(args[2])})"
                return "0"
            if name == "Let":
                self.env[e.var.__chandle__()] = self.src(e.value)
                return self.src(e.body)
            if name == "Ramp":
                return self.src(e.base)
            if name == "Broadcast":
                return self.src(e.value)
        except Exception:  # noqa: BLE001 - unknown shape of a node: degrade to a constant
            return "0"
        return "0"

    # ------------------------------------------------------------ buffers and accesses
    def buffer_id(self, buf: Any) -> int:
        h = buf.__chandle__()
        i = self._buf_ids.get(h)
        if i is None:
            shape = []
            for d in buf.shape:
                shape.append(int(d.value) if type(d).__name__ == "IntImm" else -1)
            i = self._buf_ids[h] = len(self.buffers)
            self.buffers.append(_Buffer(str(buf.name), tuple(shape), _dtype_bytes(str(buf.dtype)), i))
        return i

    def access(self, node: Any, path: tuple[int, ...], write: bool) -> None:
        try:
            # TVM 0.27 loads are ir.TensorLoad (``source``); stores keep ``buffer``
            buf = node.source if type(node).__name__ == "TensorLoad" else node.buffer
            b = self.buffer_id(buf)
            idx = [self.src(x) for x in node.indices]
        except Exception:  # noqa: BLE001
            return
        self.sites.append(_Site(b, path, idx, write))

    def value(self, e: Any, path: tuple[int, ...], ops: list[int]) -> None:
        """Walk a stored value: record loads, count float operations."""
        name = type(e).__name__
        try:
            if name in _LOAD_NAMES:
                self.access(e, path, False)
                return
            if name in ("IntImm", "FloatImm", "Var", "SizeVar", "StringImm", "Ramp"):
                return
            binary_op = _BINARY_OP_SLOT.get(name, -1 if name in _BIN or name in ("And", "Or") else None)
            if binary_op is not None:  # add/sub -> 0, mul -> 1, div/mod/min/max -> 2, comparisons -> none
                if binary_op >= 0 and _is_float(e):
                    ops[binary_op] += 1
                self.value(e.a, path, ops)
                self.value(e.b, path, ops)
            elif name == "Not":
                self.value(e.a, path, ops)
            elif name == "Cast" or name == "Broadcast":
                self.value(e.value, path, ops)
            elif name == "Select":
                if _is_float(e):
                    ops[2] += 1
                self.value(e.condition, path, ops)
                self.value(e.true_value, path, ops)
                self.value(e.false_value, path, ops)
            elif name == "Call":
                if _is_float(e):
                    ops[2] += 1
                for a in e.args:
                    self.value(a, path, ops)
            elif name == "Let":
                self.env[e.var.__chandle__()] = self.src(e.value)
                self.value(e.value, path, ops)
                self.value(e.body, path, ops)
        except Exception:  # noqa: BLE001 - unknown node: ignore its subtree
            return

    # ------------------------------------------------------------ statements
    def stmt(self, s: Any, path: tuple[int, ...]) -> None:
        if s is None:
            return
        name = type(s).__name__
        try:
            if name == "SeqStmt":
                for c in s.seq:
                    self.stmt(c, path)
            elif name == "For":
                self.loop(s, path)
            elif name == "SBlockRealize":
                self.block(s, path)
            elif name == "BufferStore":
                self.access(s, path, True)
                ops = [0, 0, 0]
                self.value(s.value, path, ops)
                self.stores.append((path, ops[0], ops[1], ops[2]))
            elif name == "SBlock":
                self.stmt(s.body, path)
            elif name == "IfThenElse":
                self.stmt(s.then_case, path)
                self.stmt(s.else_case, path)
            elif name in ("LetStmt", "Bind"):
                self.env[s.var.__chandle__()] = self.src(s.value)
                if hasattr(s, "body"):
                    self.stmt(s.body, path)
            elif name == "Evaluate":
                ops = [0, 0, 0]
                self.value(s.value, path, ops)
                if any(ops):
                    self.stores.append((path, ops[0], ops[1], ops[2]))
            else:
                body = getattr(s, "body", None)
                if body is not None:
                    self.stmt(body, path)
        except Exception:  # noqa: BLE001 - an unknown statement: skip it
            return

    def loop(self, s: Any, path: tuple[int, ...]) -> None:
        ext_node = s.extent
        ext = int(ext_node.value) if type(ext_node).__name__ == "IntImm" else 1
        ext = max(ext, 1)
        kind = int(s.kind)
        unroll = 0
        ann = s.annotations
        if len(ann):
            try:
                if "pragma_auto_unroll_max_step" in ann:
                    unroll = int(ann["pragma_auto_unroll_max_step"])
            except Exception:  # noqa: BLE001
                unroll = 0
        k = len(self.extent)
        self.extent.append(ext)
        self.parent.append(path[-1] if path else -1)
        self.kind.append(kind)
        self.unroll.append(unroll)
        self.reduction.append(False)
        self.has_child.append(False)
        if path:
            self.has_child[path[-1]] = True
        self.env[s.loop_var.__chandle__()] = f"L{k}"
        self.stmt(s.body, path + (k,))

    def block(self, realize: Any, path: tuple[int, ...]) -> None:
        blk = realize.block
        red: set[int] = set()
        for iv, val in zip(blk.iter_vars, realize.iter_values):
            src = self.src(val)
            self.env[iv.var.__chandle__()] = src
            if int(iv.iter_type) == 2:  # CommReduce
                for m in _LOOP_REF.finditer(src):
                    k = int(m.group(1))
                    if k < len(self.reduction):
                        self.reduction[k] = True
                        red.add(k)
        for b in blk.alloc_buffers:
            self.buffer_id(b)
        init = blk.init
        if init is not None:  # runs once per spatial point: not repeated by the reduction loops
            self.stmt(init, tuple(k for k in path if k not in red))
        self.stmt(blk.body, path)


def _prim_func(mod_or_func: Any) -> Any:
    """The PrimFunc of an IRModule (``main``, else its only function) or the function itself."""
    if hasattr(mod_or_func, "functions") and not hasattr(mod_or_func, "body"):
        try:
            return mod_or_func["main"]
        except Exception:  # noqa: BLE001
            funcs = list(mod_or_func.functions.values())
            if not funcs:
                raise ValueError("the IRModule has no function") from None
            return funcs[0]
    return mod_or_func


def analyze(mod_or_func: Any) -> LoopAnalysis:
    """Walk a scheduled IRModule / PrimFunc once and measure every loop (see module doc)."""
    func = _prim_func(mod_or_func)
    w = _Walker()
    w.stmt(func.body, ())
    return _summarize(w)


def _site_coefs(site: _Site, ext: list[int]) -> np.ndarray | None:
    """Index evaluations of one access site, [2 * len(path) + 1, ndim]:

    rows ``0..m-1`` the coefficient of each path loop variable (``f(e_p) - f(0)``), row ``m``
    ``f(0)``, rows ``m+1+p`` the distance ``|f(last) - f(0)|`` where the loops at and inside
    ``path[p]`` are at their last iteration (exact for monotone floordiv / floormod indices,
    where a unit step alone says too little).
    """
    n = len(site.path)
    args = ",".join(f"L{k}" for k in site.path)
    fn = _compile(f"lambda {args}: ({','.join(site.index)},)")
    if fn is None:
        return None
    try:
        zero = [0] * n
        base = fn(*zero)
        rows = []
        for p in range(n):
            zero[p] = 1
            v = fn(*zero)
            zero[p] = 0
            rows.append([float(a) - float(b) for a, b in zip(v, base)])
        rows.append([float(b) for b in base])
        # extreme points: loops at/inside path[p] at their last iteration, outer loops at 0
        last = [0] * n
        for p in range(n - 1, -1, -1):
            last[p] = ext[site.path[p]] - 1
            v = fn(*last)
            rows.append([abs(float(a) - float(b)) for a, b in zip(v, base)])
        out = np.asarray(rows, dtype=np.float64).reshape(2 * n + 1, len(site.index))
        # reorder the extreme rows to path order (they were appended innermost first)
        out[n + 1:] = out[n + 1:][::-1].copy()
        return out
    except Exception:  # noqa: BLE001 - e.g. a division by a loop variable: no coefficients
        return None


def _summarize(w: _Walker) -> LoopAnalysis:
    n = len(w.extent)
    ext = w.extent
    depth = [0] * n
    topdown = [1.0] * n
    for k in range(n):
        p = w.parent[k]
        depth[k] = depth[p] + 1 if p >= 0 else 0
        topdown[k] = (topdown[p] if p >= 0 else 1.0) * ext[k]

    # per loop (and root = index n) and buffer: [count, max elements, max |stride|]
    acc: list[dict[int, list[float]]] = [dict() for _ in range(n + 1)]
    for site in w.sites:
        buf = w.buffers[site.buf]
        path = site.path
        m = len(path)
        ndim = len(site.index)
        shape = np.asarray([d if d > 0 else np.inf for d in buf.shape], dtype=np.float64)
        coefs = _site_coefs(site, ext) if ndim else None
        exts = np.asarray([ext[k] for k in path], dtype=np.float64)
        # accesses of one full run of path[p]: product of extents from p inwards
        suffix_prod = np.cumprod(exts[::-1])[::-1] if m else exts
        if coefs is not None and ndim == len(shape):
            span_terms = np.abs(coefs[:m]) * (exts[:, None] - 1.0)  # [m, ndim]
            spans = np.cumsum(span_terms[::-1], axis=0)[::-1] + 1.0 if m else np.zeros((0, ndim))
            if m:
                spans = np.maximum(spans, coefs[m + 1:] + 1.0)
            spans = np.minimum(spans, shape[None, :])
            elems = np.prod(spans, axis=1) if m else np.zeros(0)
            row = np.ones(ndim)
            for d in range(ndim - 2, -1, -1):
                row[d] = row[d + 1] * (buf.shape[d + 1] if buf.shape[d + 1] > 0 else 1)
            strides = np.abs(coefs[:m] @ row) if m else np.zeros(0)
            root_elems = float(elems[0]) if m else 1.0
        else:
            elems = np.ones(m)
            strides = np.zeros(m)
            root_elems = 1.0
        for p, k in enumerate(path):
            a = acc[k].get(site.buf)
            if a is None:
                acc[k][site.buf] = [float(suffix_prod[p]), float(elems[p]), float(strides[p])]
            else:
                a[0] += float(suffix_prod[p])
                a[1] = max(a[1], float(elems[p]))
                a[2] = max(a[2], float(strides[p]))
        total = float(suffix_prod[0]) if m else 1.0
        a = acc[n].get(site.buf)
        if a is None:
            acc[n][site.buf] = [total, root_elems, 0.0]
        else:
            a[0] += total
            a[1] = max(a[1], root_elems)

    # unique buffer names (a repeated name gets its first-appearance number)
    seen: dict[str, int] = {}
    for b in w.buffers:
        seen[b.name] = seen.get(b.name, 0) + 1
    names = [b.name if seen[b.name] == 1 else f"{b.name}#{b.order}" for b in w.buffers]

    def finish(d: dict[int, list[float]]) -> dict[str, tuple[float, float, float, float]]:
        out: dict[str, tuple[float, float, float, float]] = {}
        for b, (count, elems, stride) in d.items():
            elems = max(elems, 1.0)
            out[names[b]] = (elems * w.buffers[b].nbytes, count / elems, stride, count)
        return out

    arith = np.zeros((n, 3))
    root_arith = np.zeros(3)
    for path, a, m_, o in w.stores:
        ops = np.asarray([a, m_, o], dtype=np.float64)
        mult = 1.0
        for k in reversed(path):
            mult *= ext[k]
            arith[k] += ops * mult
        root_arith += ops * mult

    res = LoopAnalysis(
        extent=list(ext), parent=list(w.parent), depth=depth, kind=list(w.kind), unroll_step=list(w.unroll),
        reduction=list(w.reduction), innermost=[not c for c in w.has_child], topdown=topdown, arith=arith,
        stats=[finish(acc[k]) for k in range(n)], root_stats=finish(acc[n]), root_arith=root_arith,
        n_stores=len(w.stores),
    )
    res.buffer_order = {nm: b.order for nm, b in zip(names, w.buffers)}
    return res


# ---------------------------------------------------------------- views
def loop_contexts(an: LoopAnalysis) -> np.ndarray:
    """[n_loops, CTX_DIM] float32 context vectors (layout in the module docstring)."""
    n = len(an)
    ctx = np.zeros((n, CTX_DIM), dtype=np.float32)
    for k in range(n):
        row = ctx[k]
        row[F_EXTENT] = _log(an.extent[k])
        row[F_DEPTH] = an.depth[k]
        row[F_INNERMOST] = float(an.innermost[k])
        row[F_REDUCTION] = float(an.reduction[k])
        kind = an.kind[k]
        par = kind in (_KIND_PARALLEL, _KIND_THREAD)
        vec = kind == _KIND_VECTORIZED
        unr = kind == _KIND_UNROLLED or an.unroll_step[k] > 0
        row[F_PARALLEL], row[F_VECTORIZE], row[F_UNROLL] = float(par), float(vec), float(unr)
        row[F_NO_ANNOT] = float(not (par or vec or unr))
        row[F_TOPDOWN] = _log(an.topdown[k])
        row[F_UNROLL_STEP] = _log(an.unroll_step[k])
        stats = an.stats[k]
        for slot, b in enumerate(an.top_buffers(stats, N_TOP_BUFFERS)):
            nbytes, reuse, stride, count = stats[b]
            o = F_BUFFERS + slot * BUFFER_FEATS
            row[o], row[o + 1], row[o + 2], row[o + 3] = _log(nbytes), _log(reuse), _log(stride), _log(count)
        row[F_ARITH] = _log(an.arith[k, 0])
        row[F_ARITH + 1] = _log(an.arith[k, 1])
        row[F_ARITH + 2] = _log(an.arith[k, 2])
    return ctx


def _as_analysis(x: Any) -> LoopAnalysis:
    return x if isinstance(x, LoopAnalysis) else analyze(x)


def extract_loop_tree(mod_or_func: Any) -> LoopTree:
    """The :class:`LoopTree` of a scheduled IRModule / PrimFunc (or of a :class:`LoopAnalysis`)."""
    an = _as_analysis(mod_or_func)
    return LoopTree(ctx=loop_contexts(an), parent=np.asarray(an.parent, dtype=np.int64))


def itervar_features(tree: LoopTree | Any, max_loops: int = MAX_LOOPS) -> np.ndarray:
    """Flattened loop contexts in pre-order, truncated / zero-padded to ``max_loops`` loops.

    ``tree`` is a :class:`LoopTree`, or anything :func:`extract_loop_tree` accepts.
    """
    if not isinstance(tree, LoopTree):
        tree = extract_loop_tree(tree)
    out = np.zeros((max_loops, CTX_DIM), dtype=np.float32)
    n = min(len(tree), max_loops)
    out[:n] = tree.ctx[:n]
    return out.reshape(-1)


def relation_matrix(an: LoopAnalysis, buffer: str) -> tuple[np.ndarray, np.ndarray]:
    """(raw, logged) [rows, 5] matrices Z of ``buffer``: one row per loop accessing it (pre-order)
    and a last row for the whole function; columns bytes, reuse, count, stride, top-down product."""
    rows = []
    for k in range(len(an)):
        st = an.stats[k].get(buffer)
        if st is not None:
            nbytes, reuse, stride, count = st
            rows.append((nbytes, reuse, count, stride, an.topdown[k]))
    st = an.root_stats.get(buffer)
    if st is not None:
        rows.append((st[0], st[1], st[3], 0.0, 1.0))
    raw = np.asarray(rows, dtype=np.float64).reshape(-1, len(Z_NAMES))
    return raw, np.log2(1.0 + np.maximum(raw, 0.0))


def curve_features(mod_or_analysis: Any) -> np.ndarray:
    """Context-relation features (length :data:`CURVE_DIM`, independent of op, shape and schedule).

    For each of the top :data:`CURVE_BUFFERS` buffers by total accesses (ties by name), and
    each pair ``(i, j)`` of :data:`CURVE_PAIRS`: ``R_t = max(log2(1 + Z_ki))`` over loops ``k``
    whose raw ``Z_kj < 2**t``, ``t = 0 .. CURVE_THRESHOLDS - 1`` (0 where no loop qualifies);
    then the globals :data:`CURVE_GLOBAL_NAMES`.
    """
    an = _as_analysis(mod_or_analysis)
    T = CURVE_THRESHOLDS
    out = np.zeros(CURVE_DIM, dtype=np.float32)
    block = len(CURVE_PAIRS) * T
    for slot, b in enumerate(an.top_buffers(an.root_stats, CURVE_BUFFERS)):
        raw, z = relation_matrix(an, b)
        if raw.shape[0] == 0:
            continue
        for pi, (i, j) in enumerate(CURVE_PAIRS):
            mask = raw[None, :, j] < _THRESHOLDS[:, None]  # [T, rows]
            r = np.where(mask, z[None, :, i], 0.0).max(axis=1)
            o = slot * block + pi * T
            out[o:o + T] = r
    flops = float(an.root_arith.sum())
    nbytes = float(sum(s[0] for s in an.root_stats.values()))
    par = 1.0
    vec = 0.0
    for k in range(len(an)):
        if an.kind[k] == _KIND_VECTORIZED:
            vec = max(vec, an.extent[k])
    # parallelism: the largest product of parallel extents along one root-to-loop path
    par_prod = [1.0] * len(an)
    for k in range(len(an)):
        p = an.parent[k]
        base = par_prod[p] if p >= 0 else 1.0
        par_prod[k] = base * (an.extent[k] if an.kind[k] in (_KIND_PARALLEL, _KIND_THREAD) else 1.0)
        par = max(par, par_prod[k])
    g = CURVE_BUFFERS * block
    out[g:g + N_CURVE_GLOBALS] = (
        _log(flops), _log(nbytes), _log(flops / nbytes if nbytes else 0.0), _log(par), _log(vec),
        _log(max(an.unroll_step, default=0)), _log(len(an)), _log(an.n_stores),
    )
    return out


# ---------------------------------------------------------------- per-candidate cache
_ANALYSES = CandidateCache(512)


def analyze_config(task: Task, config: Config) -> LoopAnalysis:
    """:func:`analyze` of ``task.instantiate(config)``, memoised for the last few hundred
    candidates so that several extractors (and the tree model) share one instantiation."""
    return _ANALYSES.get(task, config, lambda: analyze(task.instantiate(config)))


def loop_tree(task: Task, config: Config) -> LoopTree:
    """The :class:`LoopTree` of one candidate (instantiate + :func:`extract_loop_tree`)."""
    return extract_loop_tree(analyze_config(task, config))


# ---------------------------------------------------------------- extractors
class ItervarFeatures(FeatureExtractor):
    """Flattened loop contexts (:func:`itervar_features`), length :data:`ITERVAR_DIM`."""

    name = "itervar"

    def __init__(self, max_loops: int = MAX_LOOPS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_loops = max_loops

    def extract_one(self, task: Task, config: Config) -> np.ndarray:
        return itervar_features(extract_loop_tree(analyze_config(task, config)), self.max_loops)


class CurveFeatures(FeatureExtractor):
    """Context-relation features (:func:`curve_features`), length :data:`CURVE_DIM` for every task."""

    name = "curve"

    def extract_one(self, task: Task, config: Config) -> np.ndarray:
        return curve_features(analyze_config(task, config))


class PerStoreFeatures(FeatureExtractor):
    """TVM MetaSchedule's ``PerStoreFeature`` (Ansor-style, one row per store), pooled to one
    fixed vector: the mean and the max of the rows, then ``log2(1 + rows)``."""

    name = "perstore"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._extractor: Any = None
        self._contexts: dict[str, Any] = {}

    def _context(self, task: Task) -> Any:
        import json

        key = json.dumps(task.target_json, sort_keys=True)
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = self._contexts[key] = _tune_context(task.target_json)
        return ctx

    def extract_one(self, task: Task, config: Config) -> np.ndarray:
        from tvm.s_tir import Schedule
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature
        from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

        if self._extractor is None:
            self._extractor = PerStoreFeature()
        mod = task.instantiate(config)
        cand = MeasureCandidate(Schedule(mod), ArgInfo.from_prim_func(mod["main"]))
        rows = self._extractor.extract_from(self._context(task), [cand])[0].numpy()
        rows = np.asarray(rows, dtype=np.float32).reshape(rows.shape[0], -1)
        if rows.shape[0] == 0:
            return np.zeros(2 * rows.shape[1] + 1, dtype=np.float32)
        return np.concatenate([rows.mean(axis=0), rows.max(axis=0),
                               np.asarray([_log(rows.shape[0])], dtype=np.float32)]).astype(np.float32)


def _tune_context(target_json: dict[str, Any]) -> Any:
    """A bare MetaSchedule TuneContext holding only the target (what PerStoreFeature reads).

    ``TuneContext.__init__`` imports ``tvm.s_tir.tensor_intrin``, which registers every
    tensor intrinsic of every backend (about a minute on a 2-core machine); the extractor
    needs none of them, so the object is built from its FFI constructor directly, falling
    back to the public constructor if that fails.
    """
    from tvm.s_tir.meta_schedule import TuneContext, _ffi_api
    from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func

    from ..target import make_target

    target = make_target(target_json)
    try:
        ctx = TuneContext.__new__(TuneContext)
        ctx.__init_handle_by_constructor__(  # type: ignore[attr-defined]
            _ffi_api.TuneContext, None, target, None, None, "tensortune-features", 1, -1,
            get_logging_func(get_logger(__name__)),
        )
        _ffi_api.TuneContextInitialize(ctx)
        return ctx
    except Exception:  # noqa: BLE001 - API drift: the slow public path
        return TuneContext(target=target, task_name="tensortune-features", num_threads=1)


__all__ = [
    "CTX_DIM", "CURVE_DIM", "CURVE_PAIRS", "CURVE_THRESHOLDS", "ITERVAR_DIM", "MAX_LOOPS", "N_TOP_BUFFERS",
    "CurveFeatures", "ItervarFeatures", "LoopAnalysis", "PerStoreFeatures", "analyze", "analyze_config",
    "curve_features", "extract_loop_tree", "itervar_features", "loop_contexts", "loop_tree", "relation_matrix",
]
