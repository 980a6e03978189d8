"""Attention in one function: the scores matmul, the softmax and the matmul by the values fused.

After TVM's ``FuseOps`` an attention head runs as three functions: ``S = Q K^T`` (its scale or
mask as epilogue), ``P = softmax(S)``, ``O = P V``. ``S`` and ``P`` are M x N a head (Whisper's
encoder: 6 x 1500 x 1500, 54 MB each), each written to memory and read back: in Whisper the
three took 46% of the model's time, the softmax alone at a third of the copy bandwidth.
:func:`fuse_attention` merges the three groups into one primitive function, which ``FuseTIR``
makes one PrimFunc, so that the attention template (:mod:`tensortune.templates.attention`)
computes a block of rows at a time with ``S`` and ``P`` kept in cache. It runs between
``FuseOps`` and ``FuseTIR``; a group it does not recognise is left as it is, and so are small heads
and, in float32, values not in whole vectors (:func:`fused_head`). In bf16 the two matmuls are
replaced by ``batch_matmul_bf16`` calls inside the fused function where the head width comes in
pairs, the keys and the values' width padded to vectors (and an odd number of keys to pairs)
(:mod:`tensortune.templates.attention_bf16` schedules it); otherwise the fused attention stays
float32.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..precision import ATTENTION_LANES, DEFAULT_PRECISION, SCORES_COLUMNS


class _NotAttention(Exception):
    """A candidate that is not the plain three-group chain."""


@dataclass
class _Chain:
    """One attention's bindings in ``main``: the scores, the groups between (the softmax and any
    scale, mask or reshape), the output."""

    s: Any
    mids: list[Any]
    o: Any

    @property
    def inner(self) -> set[Any]:
        return {self.s.var, *(m.var for m in self.mids)}


#: The scores of a head must be at least this large (64 x 64 float32) to be fused: Swin's 49 x 49
#: windows ran 12% slower fused, and from 64 x 64 up the fused function measured faster (LeViT,
#: DistilBERT, GPT-2, T5, MobileViT: 2-8% of the model, bf16 and float32, znver5).
MIN_SCORES_BYTES = 1 << 14
#: Names of the stages that cut a bf16 product's padded columns off: the scores', the output's.
SCORES_CUT, VALUES_CUT = "scores_cut", "values_cut"
#: The least row block the fused function runs well with (a divisor of the rows from here to the
#: template's :data:`~tensortune.templates.attention.MAX_ROW_BLOCK`).
MIN_ROW_BLOCK = 7


def fused_scores(rows: int, keys: int) -> bool:
    """Whether a head of ``rows`` x ``keys`` scores is fused: :data:`MIN_SCORES_BYTES` at least, and
    a row block the template runs well with (ViT's 197 rows have none: they are padded first,
    :mod:`.attention_pad`)."""
    from ..templates.attention import MAX_ROW_BLOCK

    return rows * keys * 4 >= MIN_SCORES_BYTES and any(rows % d == 0 for d in range(MIN_ROW_BLOCK, MAX_ROW_BLOCK + 1))


def fused_head(rows: int, keys: int, width: int, padded: bool = False) -> bool:
    """Whether a head with values ``width`` wide is fused: its scores (:func:`fused_scores`), and
    values in whole vectors or, with ``padded`` (bf16 products, which pad the values' columns), any
    width. The float32 template's product by the values runs a vector at a time; MobileViT's 36
    wide ran at a tenth of the unfused speed."""
    return fused_scores(rows, keys) and (padded or width % ATTENTION_LANES == 0)


#: Ops a score passes through between its matmul, the softmax and the matmul by the values.
_ROW_OPS = frozenset({"relax.reshape", "relax.broadcast_to", "relax.divide", "relax.multiply", "relax.add",
                      "relax.subtract", "relax.astype"})


def attention_products(mod: Any) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The operand shapes of ``mod``'s matmuls that :func:`fuse_attention` will take (before
    ``FuseOps``): ``Q K^T`` whose output reaches a softmax through row-wise ops and reshapes, ``P V``
    whose left operand comes from one, heads of :func:`fused_scores` size. Products of run-time
    operands are left to it instead of running as bf16 products of their own."""
    from tvm import relax

    bound = {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}

    def producer(v: Any, through: frozenset[str]) -> Any:
        """The first call that made ``v`` other than the ops ``through``."""
        while isinstance(v, relax.Var) and isinstance(bound.get(v), relax.Call):
            call = bound[v]
            if getattr(call.op, "name", "") not in through:
                return call
            v = call.args[0]
        return None

    def matmul_shapes(call: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        if call is None or getattr(call.op, "name", "") != "relax.matmul":
            return None
        xs, ws = (_static(a) for a in call.args)
        return (tuple(xs), tuple(ws)) if xs and ws and len(xs) >= 2 and len(ws) >= 2 else None

    out = set()
    for call in bound.values():
        name = getattr(getattr(call, "op", None), "name", "")
        if name == "relax.nn.softmax":
            shapes = matmul_shapes(producer(call.args[0], _ROW_OPS))
            if shapes and fused_scores(shapes[0][-2], shapes[1][-1]):
                out.add(shapes)
        elif name == "relax.matmul":
            shapes = matmul_shapes(call)
            made = producer(call.args[0], _ROW_OPS)
            if shapes and getattr(getattr(made, "op", None), "name", "") == "relax.nn.softmax" \
                    and fused_scores(shapes[0][-2], shapes[0][-1]):
                out.add(shapes)
    return out


def _is_call_tir(e: Any) -> bool:
    from tvm import relax

    return isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir"


def _group_calls(mod: Any, value: Any) -> list[Any] | None:
    """The ``call_tir`` calls a binding of ``main`` runs: the call itself, or the body of the
    primitive function it calls (None for anything else)."""
    from tvm import relax

    if _is_call_tir(value):
        return [value] if len(value.args) == 2 else None
    if not (isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar)):
        return None
    f = mod[value.op]
    if not isinstance(f, relax.Function) or f.attrs is None or "Primitive" not in f.attrs:
        return None
    if len(f.body.blocks) != 1:
        return None
    calls = [b.value for b in f.body.blocks[0].bindings]
    return calls if calls and all(_is_call_tir(c) and len(c.args) == 2 for c in calls) else None


def _matmul(mod: Any, value: Any) -> dict[str, int] | None:
    """The shape of a group whose first function is a (batch) matmul ``A[..., M, K] @ B[..., K, N]``
    of float32 (None otherwise)."""
    from ..task.pattern import analyze_func

    calls = _group_calls(mod, value)
    if not calls or not calls[0].args[0].name_hint.startswith("matmul"):
        return None
    pat = analyze_func(mod[calls[0].args[0]])
    if pat.op not in ("matmul", "batch_matmul") or pat.b_layout != "kn" or pat.prologue:
        return None
    if any(str(getattr(a.ty, "dtype", "")) != "float32" for a in calls[0].args[1].fields):
        return None
    return pat.args


def _row_kind(mod: Any, value: Any, rows: int, keys: int) -> str | None:
    """``softmax`` or ``map`` for a group between the two matmuls (its first function a softmax, or
    none reducing; every result ``[..., rows, keys]``), None for anything else."""
    from ..task.pattern import _blocks

    calls = _group_calls(mod, value)
    if not calls:
        return None
    for c in calls:
        shape = [int(d) for d in c.ty_args[0].shape] if c.ty_args[0].shape is not None else []
        if shape[-2:] != [rows, keys]:
            return None
    softmax = calls[0].args[0].name_hint.startswith("softmax")
    for c in calls[1:] if softmax else calls:
        try:
            if any(b.reduction for b in _blocks(mod[c.args[0]])):
                return None
        except Exception:  # noqa: BLE001 - an unusual function: not part of a chain
            return None
    return "softmax" if softmax else "map"


def _inputs(value: Any) -> list[Any]:
    """The arguments a group takes from ``main``."""
    return list(value.args[1].fields) if _is_call_tir(value) else list(value.args)


def _used_once(main: Any) -> set[Any]:
    """The dataflow variables of ``main`` that exactly one binding uses (TVM's ``udchain``;
    a dataflow variable is never used outside its block)."""
    from tvm import relax

    return {var for block in main.body.blocks if isinstance(block, relax.DataflowBlock)
            for var, users in relax.analysis.udchain(block).items()
            if isinstance(var, relax.DataflowVar) and len(users) == 1}


def _chains(mod: Any) -> list[_Chain]:
    """Every scores -> (scale, mask, reshape) -> softmax -> (reshape) -> values chain of ``main``
    whose intermediates have no other use."""
    from tvm import relax

    main = mod["main"]
    once = _used_once(main)
    bound = {b.var: b for block in main.body.blocks if isinstance(block, relax.DataflowBlock) for b in block.bindings}
    out = []
    for o in bound.values():
        o_shape = _matmul(mod, o.value)
        if o_shape is None:
            continue
        rows, keys = o_shape["M"], o_shape["K"]
        mids: list[Any] = []
        n_softmax = 0
        x = _inputs(o.value)[0]
        while x in bound and x in once:
            kind = _row_kind(mod, bound[x].value, rows, keys)
            if kind is None:
                break
            n_softmax += kind == "softmax"
            mids.insert(0, bound[x])
            nxt = [a for a in _inputs(bound[x].value)
                   if a in bound and getattr(a.ty, "shape", None) is not None
                   and [int(d) for d in a.ty.shape][-2:] == [rows, keys]]
            if not nxt:
                break
            x = nxt[0]
        s = bound.get(x)
        if s is None or x not in once or not mids:
            continue
        s_shape = _matmul(mod, s.value)
        if s_shape is None or (s_shape["M"], s_shape["N"]) != (rows, keys) or n_softmax != 1:
            continue
        if not fused_scores(rows, keys):
            continue
        out.append(_Chain(s, mids, o))
    return out


def _emit_group(bb: Any, mod: Any, value: Any, env: dict[Any, Any], first: Any = None) -> Any:
    """Emit a group's ``call_tir`` calls into ``bb`` (``main``'s variables mapped by ``env``);
    returns the variable of its result. ``first``, given the first call's arguments, emits what
    replaces that call (a bf16 product for a float32 matmul)."""
    from tvm import relax
    from tvm.ir.expr import Constant

    def sub(e: Any, local: dict[Any, Any]) -> Any:
        if isinstance(e, (relax.Var, Constant)) and e in local:  # a constant of main: a parameter
            return local[e]
        raise _NotAttention(f"{type(e).__name__} in a group (primitive functions take no constants)")

    def call(c: Any, local: dict[Any, Any], replaced: Any = None) -> Any:
        args = [sub(a, local) for a in c.args[1].fields]
        if replaced is not None:
            return replaced(args)
        return bb.emit(relax.call_tir(c.args[0], args, c.ty_args[0]))

    if _is_call_tir(value):
        return call(value, env, first)
    f = mod[value.op]
    local = {p: sub(a, env) for p, a in zip(f.params, value.args)}
    for k, b in enumerate(f.body.blocks[0].bindings):
        local[b.var] = call(b.value, local, first if k == 0 else None)
    return local[f.body.body]


def _static(e: Any) -> list[int] | None:
    """The static shape of a Relax expression (None when a dimension is symbolic)."""
    shape = getattr(e.ty, "shape", None)
    try:
        return [int(d) for d in shape] if shape is not None else None
    except TypeError:
        return None


def _bf16_products(mod: Any, chain: _Chain) -> bool:
    """Whether the chain's two products can run on ``vdpbf16ps``: the scores' reduction (the head
    width) in pairs, no broadcast (the values' columns are padded to vectors, an odd number of keys
    gets a zero one in ``P V``)."""
    shapes = [[_static(a) for a in _group_calls(mod, b.value)[0].args[1].fields] for b in (chain.s, chain.o)]
    if any(s is None or len(s) < 2 for pair in shapes for s in pair):
        return False
    (q, kt), (p, v) = shapes
    return q[:-2] == kt[:-2] and p[:-2] == v[:-2] and q[-1] % 2 == 0


def _bf16_product(bb: Any, fb: Any, cols_to: int, cut: str) -> Any:
    """Emits (into ``fb``, its PrimFuncs added to ``bb``) a product in bf16: the left operand
    rounded, the right one packed in vectors, its columns padded to a multiple of ``cols_to`` (the
    scores' keys, the values' width) and the padded columns cut off by a stage named ``cut``."""
    from ..task.ops_bf16 import batch_matmul_bf16_te, first_columns_te

    def emit(args: list[Any]) -> Any:
        a, b = args
        out = fb.emit(bb.call_te(batch_matmul_bf16_te, a, b, ATTENTION_LANES, cols_to,
                                 primfunc_name_hint="batch_matmul_bf16"))
        cols = _static(b)[-1]  # type: ignore[index]
        if cols_to and cols % cols_to:
            out = fb.emit(bb.call_te(first_columns_te, out, cols, cut, cut == SCORES_CUT, primfunc_name_hint=cut))
        return out

    return emit


def _head(mod: Any, chain: _Chain) -> tuple[int, int, int]:
    """The chain's rows, keys and values' width."""
    o = _matmul(mod, chain.o.value)
    assert o is not None  # a chain's output is a matmul (:func:`_chains`)
    return o["M"], o["K"], o["N"]


def _outer_args(mod: Any, chain: _Chain) -> list[Any]:
    """The chain's arguments from ``main`` (its own intermediates left out), in order of use."""
    out: list[Any] = []
    for b in (chain.s, *chain.mids, chain.o):
        for a in _inputs(b.value):
            if a not in chain.inner and not any(a.same_as(x) for x in out):
                out.append(a)
    return out


def _recognized(mod: Any, func: Any) -> bool:
    """Whether ``FuseTIR`` makes ``func`` (a primitive function over ``mod``'s PrimFuncs) a PrimFunc
    the attention template schedules (:func:`tensortune.task.pattern.attention_pattern`): one it
    would not recognise is better left as three functions than scheduled generically."""
    import tvm
    from tvm import relax

    from ..task.pattern import attention_pattern

    used: dict[Any, Any] = {}

    def visit(e: Any) -> None:
        if _is_call_tir(e):
            used[e.args[0]] = mod[e.args[0]]

    try:
        relax.analysis.post_order_visit(func.body, visit)
        bb = relax.BlockBuilder(tvm.IRModule(used))
        gv = bb.add_func(func, "fused_attention")
        params = [relax.Var(f"a{i}", p.ty) for i, p in enumerate(func.params)]
        with bb.function("main", params):
            out = bb.emit(relax.Call(gv, params))
            bb.emit_func_output(out)
        fused = relax.transform.FuseTIR()(bb.get())
        prims = [f for g, f in fused.functions.items() if g.name_hint.startswith("fused_attention")]
        return len(prims) == 1 and attention_pattern(prims[0]) is not None
    except Exception:  # noqa: BLE001 - anything TVM refuses: not fused
        return False


def fuse_attention(mod: Any, precision: str = DEFAULT_PRECISION) -> Any:
    """``mod`` (after ``FuseOps``) with each attention chain of ``main`` in one primitive function
    ``fused_attention*`` (see the module doc); in bf16, its two products on bfloat16 operands
    where their shapes allow (:func:`_bf16_products`)."""
    from tvm import relax

    chains = _chains(mod)
    if not chains:
        return mod
    bb = relax.BlockBuilder(mod)
    replace: dict[Any, Any] = {}  # o var -> new call
    dropped: set[Any] = set()
    for chain in chains:
        args = _outer_args(mod, chain)
        params = [relax.Var(f"a{i}", a.ty) for i, a in enumerate(args)]
        env = dict(zip(args, params))
        fb = relax.BlockBuilder()
        bf16 = precision == "bf16" and _bf16_products(mod, chain)
        scores, values = (None, None)
        if bf16:
            scores = _bf16_product(bb, fb, SCORES_COLUMNS, SCORES_CUT)
            values = _bf16_product(bb, fb, ATTENTION_LANES, VALUES_CUT)
        if not bf16 and not fused_head(*_head(mod, chain)):
            continue
        try:
            with fb.function("fused_attention", params, attrs={"Primitive": True}, private=True):
                with fb.dataflow():
                    env[chain.s.var] = _emit_group(fb, mod, chain.s.value, env, scores)
                    for b in chain.mids:
                        env[b.var] = _emit_group(fb, mod, b.value, env)
                    out = fb.emit_output(_emit_group(fb, mod, chain.o.value, env, values))
                fb.emit_func_output(out)
        except _NotAttention:
            continue
        func = fb.get()["fused_attention"]
        if not _recognized(bb.get() if bf16 else mod, func):
            continue
        gv = bb.add_func(func, "fused_attention")  # one function for equal layers
        replace[chain.o.var] = relax.Call(gv, list(args))
        dropped |= chain.inner
    if not replace:
        return mod
    new = bb.get()
    main = new["main"]
    blocks = []
    for block in main.body.blocks:
        bindings = []
        for b in block.bindings:
            if b.var in dropped:
                continue
            if b.var in replace:
                b = relax.VarBinding(b.var, bb.normalize(replace[b.var]))
            bindings.append(b)
        blocks.append(relax.DataflowBlock(bindings) if isinstance(block, relax.DataflowBlock) else relax.BindingBlock(bindings))
    body = relax.SeqExpr(blocks, main.body.body)
    new["main"] = relax.Function(main.params, body, main.ret_ty, main.is_pure, main.attrs)
    return relax.transform.Normalize()(new)


def fuse_attention_pass(precision: str = DEFAULT_PRECISION) -> Any:
    """:func:`fuse_attention` as a module pass."""
    import tvm

    return tvm.transform.module_pass(lambda mod, ctx: fuse_attention(mod, precision), opt_level=0,
                                     name="FuseAttention")
