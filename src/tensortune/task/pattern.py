"""Recognise what a PrimFunc computes: its anchor op, shapes, padding and fused epilogue.

A model's fused functions (``fused_conv2d_add_relu`` ...) carry a padding stage before
the anchor reduction and elementwise stages after it. :func:`analyze_func` reads the
unscheduled TIR (block iteration variables and the index expressions of the loads) and
says which op template can schedule it, with which shape arguments and which blocks play
which role, or that none can (``op is None``: the generic template).

Recognised anchors (a multiply-accumulate reduction block ``C += X * Y``):

- ``conv2d``: ``out[n,f,y,x] += data[n, rc, y*S+ry, x*S+rx] * w[f, rc, ry, rx]``, square
  kernel and stride, no dilation, batch 1, optional symmetric zero padding stage.
- ``depthwise_conv2d``: the same with ``data[n, f(+rc), ...]`` and ``w[f, 0|rc, ry, rx]``.
- ``conv2d_nchwc``: ``out[n,fo,y,x,fi] += data[n, rco, y*S+ry, x*S+rx, rci] * w[fo, rco, ry, rx, rci, fi]``
  (the blocked form a model's layout plan gives it, see :mod:`tensortune.task.ops`).
- ``conv2d_nchwc_general``: the same of any geometry: ``data[n, g(fo) + rco, y*SH+ry*DH, x*SW+rx*DW, rci]``
  with ``g(fo) = (fo // OCgo) * ICgo`` for groups of channel blocks, 1xk/kx1 kernels, asymmetric padding.
- ``depthwise_conv2d_nchwc``: ``out[n,c,y,x,ci] += data[n, c, y*S+ry, x*S+rx, ci] * w[c, 0, ry, rx, 0, ci]``,
  and ``depthwise_conv2d_nchwc_general`` of any geometry.
- ``matmul`` / ``dense`` / ``batch_matmul``: one reduction variable ``k``,
  ``out[..., i, j] += A[..., i, k] * B[..., k, j]`` (``B[..., j, k]``: dense).
- ``dense_pack``: ``out[..., i, j] += A[..., i, k] * W[j // NB, k, j % NB]`` (a weight packed at
  compile time, :func:`tensortune.task.ops.dense_pack_te`).
- ``conv2d_nchwc_bf16`` / ``dense_pack_bf16``: the same products over bfloat16 operands
  (:mod:`.pattern_bf16`).

The blocks after the anchor form its epilogue only when each is elementwise over the anchor's
output (as many points): a function that broadcasts the anchor's result into a larger tensor
(squeeze-and-excitation's gate multiplied into the feature map) is generic. A product's first
epilogue block may cut off its last columns (a packed weight's zero columns, :mod:`tensortune.models.prepack`);
the blocks after it are elementwise over what it keeps.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from .ops_bf16 import ROUND_FUNC, WIDEN_FUNC


@dataclass(frozen=True)
class FuncPattern:
    """What :func:`analyze_func` found in a PrimFunc."""

    op: str | None  # template op, or None: no recognised anchor (generic)
    args: dict[str, int] = field(default_factory=dict)
    anchor: str | None = None  # block name of the anchor reduction
    pad: str | None = None  # block name of the padding stage feeding the anchor's data
    pack: str | None = None  # bf16: block name of the stage that rounds and packs a run-time right operand
    weight_read: int = 1  # index of the weight (conv) / B (gemm) operand in the anchor's reads
    b_layout: str = "kn"  # gemm: "kn" (B[..., k, j]), "nk" (B[..., j, k]) or "packed" (dense_pack)
    b_ndim: int = 2  # gemm: rank of B
    index_dtype: str = "int32"  # dtype of the buffers' shape values (int64 in Relax-made functions)
    prologue: tuple[str, ...] = ()  # other blocks before the anchor
    epilogue: tuple[str, ...] = ()  # blocks after the anchor, in program order
    epilogue_ops: tuple[str, ...] = ()  # one short name per epilogue block (add, relu, clip, ...)
    n_outputs: int = 1
    reason: str = ""  # why op is None
    flops: float | None = None  # operations of one call counted block by block (_count_flops)

    @property
    def kernel_class(self) -> str:
        """The whole fused pattern, e.g. ``conv2d-add-relu`` (``generic`` without an anchor)."""
        if self.op is None:
            return "generic"
        name = "-".join((self.op, *self.epilogue_ops))
        return name.replace("maximum-minimum", "clip").replace("relu-minimum", "clip")  # clip as the layout plan writes it


# ---------------------------------------------------------------- small expression helpers
def _strip_cast(e: Any) -> Any:
    while type(e).__name__ == "Cast":
        e = e.value
    return e


def _is_load(e: Any) -> bool:
    return type(e).__name__ in ("BufferLoad", "TensorLoad")


def _load_buffer(e: Any) -> Any:
    return e.source if type(e).__name__ == "TensorLoad" else e.buffer


def _linear(e: Any) -> tuple[dict[Any, int], int] | None:
    """``e`` as ``sum(coef * var) + const`` over variables (keyed by handle), else None."""
    e = _strip_cast(e)
    name = type(e).__name__
    if name == "IntImm":
        return {}, int(e.value)
    if name in ("Var", "SizeVar"):
        return {e.__chandle__(): 1}, 0
    if name in ("Add", "Sub"):
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        sign = 1 if name == "Add" else -1
        coefs = dict(a[0])
        for v, c in b[0].items():
            coefs[v] = coefs.get(v, 0) + sign * c
        return {v: c for v, c in coefs.items() if c}, a[1] + sign * b[1]
    if name == "Mul":
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        if not a[0]:
            a, b = b, a
        if b[0]:  # product of two variables
            return None
        return {v: c * b[1] for v, c in a[0].items() if c * b[1]}, a[1] * b[1]
    return None


def _shape(buf: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in buf.shape)
    except Exception:  # noqa: BLE001 - symbolic dimension
        return None


@dataclass
class _Block:
    name: str
    vars: list[Any]  # var handles in iteration order
    kinds: list[bool]  # True: reduction
    extents: list[int]
    store: Any
    reads: list[Any]
    write_buffers: list[Any]
    has_init: bool

    @property
    def spatial(self) -> list[Any]:
        return [v for v, r in zip(self.vars, self.kinds) if not r]

    @property
    def reduction(self) -> list[Any]:
        return [v for v, r in zip(self.vars, self.kinds) if r]

    def extent(self, var: Any) -> int:
        return self.extents[self.vars.index(var)]


def _blocks(func: Any) -> list[_Block]:
    import tvm
    import tvm.s_tir as st

    sch = st.Schedule(tvm.IRModule({"main": func}))
    out = []
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        blk = sch.get(b)
        extents = []
        for iv in blk.iter_vars:
            dom = iv.dom.extent
            extents.append(int(dom) if type(dom).__name__ == "IntImm" else -1)
        out.append(_Block(
            str(blk.name_hint), [iv.var.__chandle__() for iv in blk.iter_vars],
            [int(iv.iter_type) == 2 for iv in blk.iter_vars], extents, blk.body,
            [r.source for r in blk.reads], [w.source for w in blk.writes], blk.init is not None,
        ))
    return out


def _mac_operands(b: _Block) -> tuple[Any, Any] | None:
    """The two loads ``X, Y`` of a reduction block ``C = C + X * Y`` (else None)."""
    st = b.store
    if type(st).__name__ != "BufferStore" or not b.reduction or not b.has_init:
        return None
    v = _strip_cast(st.value)
    if type(v).__name__ != "Add":
        return None
    for acc, prod in ((v.a, v.b), (v.b, v.a)):
        acc, prod = _strip_cast(acc), _strip_cast(prod)
        if _is_load(acc) and _load_buffer(acc).same_as(st.buffer) and type(prod).__name__ == "Mul":
            x, y = _strip_cast(prod.a), _strip_cast(prod.b)
            x, y = (_or(bf16_load(e), e) for e in (x, y))
            if _is_load(x) and _is_load(y):
                return x, y
    return None


def _or(e: Any | None, other: Any) -> Any:
    return other if e is None else e


def bf16_load(e: Any) -> Any | None:
    """The load of a bfloat16 operand ``reinterpret(float32, cast(uint32, load) << 16)`` (else None)."""
    if type(e).__name__ != "Call" or not str(e.op.name).endswith("reinterpret") or str(e.ty) != "float32":
        return None
    shift = e.args[0]
    if type(shift).__name__ == "LShift":
        load, amount = _strip_cast(shift.a), shift.b
    elif type(shift).__name__ == "Call" and str(shift.op.name).endswith("shift_left"):
        load, amount = _strip_cast(shift.args[0]), shift.args[1]
    else:
        return None
    if not _is_load(load) or str(load.ty) != "uint16" or type(amount).__name__ != "IntImm" or int(amount.value) != 16:
        return None
    return load


def _plain_var(e: Any) -> Any | None:
    e = _strip_cast(e)
    return e.__chandle__() if type(e).__name__ in ("Var", "SizeVar") else None


def _epilogue_op(b: _Block) -> str:
    """Short name of an elementwise block: ``add``, ``relu``, ``clip``, ``sigmoid`` ..."""
    for name in (ROUND_FUNC, WIDEN_FUNC):  # an activation's bfloat16 bits written or read
        if b.name.startswith(name):
            return name
    if b.name.startswith("T_"):
        return re.sub(r"_?\d+$", "", b.name[2:])
    v = _strip_cast(b.store.value) if type(b.store).__name__ == "BufferStore" else None
    name = type(v).__name__
    if name == "Max":
        inner = _strip_cast(v.a)
        const = _strip_cast(v.b)
        if type(inner).__name__ == "Min" or type(const).__name__ == "Min":
            return "clip"
        if type(const).__name__ == "FloatImm" and float(const.value) == 0.0:
            return "relu"
        return "max"
    if name == "Min":
        return "clip" if "Max" in (type(_strip_cast(v.a)).__name__, type(_strip_cast(v.b)).__name__) else "min"
    if name == "Call":
        return str(v.op.name).split(".")[-1]
    return {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide"}.get(name, re.sub(r"_\d+$", "", b.name))


def _generic(reason: str, n_outputs: int = 1) -> FuncPattern:
    return FuncPattern(None, reason=reason, n_outputs=n_outputs)


def analyze_func(func: Any) -> FuncPattern:
    """Classify ``func`` (see the module doc), with its operations counted block by block;
    never raises for a well-formed PrimFunc."""
    try:
        blocks = _blocks(func)
    except Exception as e:  # noqa: BLE001 - no root block, nested blocks ...
        return _generic(f"unusual block structure ({str(e).splitlines()[0][:80]})")
    return replace(_classify(func, blocks), flops=_count_flops(blocks))


def _classify(func: Any, blocks: list[_Block]) -> FuncPattern:
    params = {p.__chandle__() for p in func.params}  # TVM 0.27: parameters are the buffers
    outputs = {w.__chandle__() for b in blocks for w in b.write_buffers if w.__chandle__() in params}
    n_out = max(1, len(outputs))
    if n_out > 1:
        return _generic(f"{n_out} outputs", n_out)
    anchors = [(k, ops) for k, b in enumerate(blocks) if (ops := _mac_operands(b)) is not None]
    if not anchors:
        return _generic("no multiply-accumulate reduction")
    size = lambda kb: _prod(blocks[kb[0]].extents)  # noqa: E731
    k, (x, y) = max(anchors, key=size)
    anchor = blocks[k]
    if any(e < 0 for e in anchor.extents):
        return _generic("symbolic extents")
    before, after = blocks[:k], blocks[k + 1:]
    if any(b.reduction for b in after):
        return _generic("a reduction after the anchor")
    if any(b.reduction for b in before):
        return _generic("a reduction before the anchor")
    out_elems = _prod([anchor.extent(v) for v in anchor.spatial])
    if str(x.ty) == "uint16" and str(y.ty) == "uint16":
        from .pattern_bf16 import classify_bf16

        return classify_bf16(anchor, x, y, before, after)
    for i, b in enumerate(after):
        if i == 0 and len(anchor.reduction) == 1 and _cuts_columns(anchor, b):
            out_elems = _prod(b.extents)  # a product's zero columns cut off (models.prepack)
            continue
        # e.g. squeeze-and-excitation: a 1x1 conv's per-channel gate multiplied into the whole
        # feature map. The templates write the epilogue per tile of the anchor's output.
        if _prod(b.extents) != out_elems:
            return _generic(f"the epilogue is not elementwise over the anchor's output ({b.name} covers "
                            f"{_prod(b.extents)} points, the anchor {out_elems})")
    ep_ops = tuple(_epilogue_op(b) for b in after)
    common = {"anchor": anchor.name, "epilogue": tuple(b.name for b in after), "epilogue_ops": ep_ops}
    if len(anchor.reduction) == 1:
        return _gemm(anchor, x, y, before, common)
    return _conv(anchor, x, y, before, common)


def _cuts_columns(anchor: _Block, b: _Block) -> bool:
    """``b`` copies the anchor's output without its last columns: the same spatial extents but a
    shorter last one, a plain load of the anchor's buffer (a packed weight's zero columns cut off)."""
    spatial = [anchor.extent(v) for v in anchor.spatial]
    if b.reduction or len(b.extents) != len(spatial) or b.extents[:-1] != spatial[:-1]:
        return False
    if not 0 < b.extents[-1] < spatial[-1] or type(b.store).__name__ != "BufferStore":
        return False
    value = _strip_cast(b.store.value)
    plain = lambda idx: len(idx) == len(b.vars) and all(_plain_var(i) == v for i, v in zip(idx, b.vars))  # noqa: E731
    return (_is_load(value) and _load_buffer(value).same_as(anchor.write_buffers[0]) and plain(value.indices)
            and plain(b.store.indices))


def _moves_data(e: Any) -> bool:
    """``e`` only moves data: a load, a constant, or a choice between them (padding)."""
    e = _strip_cast(e)
    kind = type(e).__name__
    if _is_load(e) or kind in ("FloatImm", "IntImm"):
        return True
    if kind == "Select":
        return _moves_data(e.true_value) and _moves_data(e.false_value)
    if kind == "Call" and str(e.op.name).split(".")[-1] == "if_then_else":
        return _moves_data(e.args[1]) and _moves_data(e.args[2])
    return False


def _count_flops(blocks: list[_Block]) -> float | None:
    """Floating-point operations of one call of a function with these blocks, counted the way an
    anchor and its epilogue are: 2 per point of a multiply-accumulate reduction, none for a block
    that only moves data (a copy, a transpose, a padding stage), and 1 per point of any other
    block (an elementwise or reducing stage, whatever its expression). A fast-math activation
    (:mod:`tensortune.models.fastmath`) is a polynomial that TVM's estimate counts in full (85
    operations per element for ``fast_exp``); here it is one, as ``relu`` is. None where an extent
    is symbolic or a block is not a plain store."""
    total = 0.0
    for b in blocks:
        if any(e < 0 for e in b.extents) or type(b.store).__name__ != "BufferStore":
            return None
        if _mac_operands(b) is not None:
            total += 2.0 * _prod(b.extents)
        elif not _moves_data(b.store.value):
            total += float(_prod(b.extents))
    return total


def _prod(xs: list[int]) -> int:
    p = 1
    for v in xs:
        p *= max(v, 1)
    return p


# ---------------------------------------------------------------- GEMMs
def _gemm(b: _Block, x: Any, y: Any, before: list[_Block], common: dict[str, Any]) -> FuncPattern:
    (k,) = b.reduction
    out_idx = [_plain_var(e) for e in b.store.indices]
    if any(v is None for v in out_idx) or out_idx != b.spatial or b.vars[-1] != k or len(out_idx) < 2:
        return _generic("gemm output is not indexed by its loops in order")
    i, j = out_idx[-2], out_idx[-1]
    batch = out_idx[:-2]

    def vars_of(load: Any) -> list[Any] | None:
        vs = []
        for e in load.indices:
            v = _plain_var(e)
            if v is None:
                lin = _linear(e)
                if lin is None or lin[0]:
                    return None
                v = "const"
            vs.append(v)
        return vs

    for a_load, b_load in ((x, y), (y, x)):
        nb = _packed_block(b_load, j, k)
        av = vars_of(a_load)
        if nb and av is not None and av[-1] == k and i in av:
            if any(v not in batch and v not in (i, k) for v in av):
                return _generic("dense_pack data is not indexed by its loops")
            reads = [r.__chandle__() for r in b.reads]
            bbuf = _load_buffer(b_load)
            args = {"M": b.extent(i), "N": b.extent(j), "K": b.extent(k), "NB": nb}
            return FuncPattern("dense_pack", args, weight_read=reads.index(bbuf.__chandle__()), b_layout="packed",
                               b_ndim=3, index_dtype=str(bbuf.shape[0].ty.dtype),
                               prologue=tuple(p.name for p in before), **common)
    xv, yv = vars_of(x), vars_of(y)
    if xv is None or yv is None:
        return _generic("gemm operands are not indexed by plain loop variables")
    if i in xv and j in yv and i not in yv and j not in xv:
        a_vars, b_vars, b_pos = xv, yv, 1
    elif i in yv and j in xv and i not in xv and j not in yv:
        a_vars, b_vars, b_pos = yv, xv, 0
    else:
        return _generic("gemm operands do not separate rows and columns")
    if k not in a_vars or k not in b_vars or any(v in b_vars for v in a_vars if v not in batch and v not in (k, "const")):
        return _generic("gemm reduction variable is not shared")
    if b_vars[-2:] == [k, j]:
        layout = "kn"
    elif b_vars[-2:] == [j, k]:
        layout = "nk"
    else:
        return _generic("B is not [..., K, N] or [..., N, K]")
    b_batch = [v for v in b_vars[:-2] if v != "const"]
    if any(v not in batch for v in b_batch) or len(b_batch) != len(b_vars) - 2:
        return _generic("B has dimensions that are not batch dimensions")
    if len(b_vars) > 4:
        return _generic("B has more than two batch dimensions")
    reads = [r.__chandle__() for r in b.reads]
    bbuf = _load_buffer(y if b_pos == 1 else x)
    bh = bbuf.__chandle__()
    if bh not in reads:
        return _generic("B is not among the anchor's reads")
    M, N, K = b.extent(i), b.extent(j), b.extent(k)
    nb = _prod([b.extent(v) for v in batch])
    if b_batch:
        op, args = "batch_matmul", {"B": nb, "M": M, "N": N, "K": K}
    else:
        op, args = ("dense" if layout == "nk" else "matmul"), {"M": M, "N": N, "K": K}
    return FuncPattern(op, args, weight_read=reads.index(bh), b_layout=layout, b_ndim=len(b_vars),
                       index_dtype=str(bbuf.shape[0].ty.dtype),
                       prologue=tuple(p.name for p in before), **common)


def _packed_block(load: Any, j: Any, k: Any) -> int:
    """NB when ``load`` reads a packed weight ``W[j // NB, k, j % NB]`` (else 0)."""
    if len(load.indices) != 3 or _plain_var(load.indices[1]) != k:
        return 0
    div, mod = _strip_cast(load.indices[0]), _strip_cast(load.indices[2])
    if type(div).__name__ != "FloorDiv" or type(mod).__name__ != "FloorMod":
        return 0
    if _plain_var(div.a) != j or _plain_var(mod.a) != j:
        return 0
    nbs = [_strip_cast(e.b) for e in (div, mod)]
    if any(type(v).__name__ != "IntImm" for v in nbs) or int(nbs[0].value) != int(nbs[1].value):
        return 0
    return int(nbs[0].value)


# ---------------------------------------------------------------- convolutions
def _conv(b: _Block, x: Any, y: Any, before: list[_Block], common: dict[str, Any]) -> FuncPattern:
    if len(b.store.indices) == 5:
        return _conv_nchwc(b, x, y, before, common)
    out_idx = [_plain_var(e) for e in b.store.indices]
    if len(out_idx) != 4 or any(v is None for v in out_idx) or out_idx != b.spatial or b.vars[:4] != out_idx:
        return _generic("reduction output is not NCHW indexed by its loops")
    n, f, oy, ox = out_idx
    if b.extent(n) != 1:
        return _generic("batch > 1 convolution")
    red = b.reduction
    if len(red) == 3:
        rc, ry, rx = red
    elif len(red) == 2:
        rc, (ry, rx) = None, red
    else:
        return _generic(f"{len(red)} reduction variables")
    # the weight is indexed by plain variables / constants only
    for data, weight in ((x, y), (y, x)):
        wv = [_plain_var(e) for e in weight.indices]
        if len(wv) == 4 and wv[0] == f and wv[2] == ry and wv[3] == rx:
            break
    else:
        return _generic("no [OC, IC, KH, KW] weight operand")
    if len(data.indices) != 4:
        return _generic("data is not 4-D")
    lin = [_linear(e) for e in data.indices]
    if any(v is None for v in lin):
        return _generic("non-linear data index")
    (c_n, _), (c_ch, _), (c_y, off_y), (c_x, off_x) = lin  # type: ignore[misc]
    if c_n != {n: 1}:
        return _generic("data batch index")
    if c_y.keys() != {oy, ry} or c_x.keys() != {ox, rx} or off_y or off_x:
        return _generic("data spatial index is not y*S + ry")
    S, SW, dil_y, dil_x = c_y[oy], c_x[ox], c_y[ry], c_x[rx]
    if S != SW or dil_y != 1 or dil_x != 1:
        return _generic("non-square stride or dilation")
    KH, KW = b.extent(ry), b.extent(rx)
    if KH != KW:
        return _generic("non-square kernel")
    wshape, dshape = _shape(_load_buffer(weight)), _shape(_load_buffer(data))
    if wshape is None or dshape is None:
        return _generic("symbolic shapes")
    if rc is not None and c_ch == {rc: 1}:
        op = "conv2d"
    elif c_ch == {f: 1} or (rc is not None and c_ch == {f: 1, rc: 1} and b.extent(rc) == 1):
        op = "depthwise_conv2d"
        if wshape[1] != 1:
            return _generic("grouped convolution")
    else:
        return _generic("grouped convolution")
    # padding: the data operand written by a zero-padding block just before
    pad_block, P = None, 0
    H, W = dshape[2], dshape[3]
    dh = _load_buffer(data).__chandle__()
    writers = [p for p in before if any(w.__chandle__() == dh for w in p.write_buffers)]
    if writers:
        pb = writers[-1]
        padded = _pad_amount(pb)
        if padded is None:
            return _generic("data produced by a stage that is not zero padding")
        P, H, W = padded
        pad_block = pb.name
        if dshape[2] != H + 2 * P or dshape[3] != W + 2 * P:
            return _generic("asymmetric padding")
    OC, OH, OW = b.extent(f), b.extent(oy), b.extent(ox)
    if (H + 2 * P - KH) // S + 1 != OH or (W + 2 * P - KW) // S + 1 != OW:
        return _generic("output size does not follow from the input, kernel, stride and padding")
    reads = [r.__chandle__() for r in b.reads]
    wh = _load_buffer(weight).__chandle__()
    if op == "conv2d":
        args = {"H": H, "W": W, "IC": wshape[1], "OC": OC, "K": KH, "S": S, "P": P}
    else:
        if dshape[1] != OC:
            return _generic("depthwise channel multiplier != 1")
        args = {"H": H, "W": W, "C": OC, "K": KH, "S": S, "P": P}
    if pad_block is not None and P == 0:  # a copy stage: inline it
        pad_block = None
    prologue = tuple(p.name for p in before if p.name != pad_block)
    return FuncPattern(op, args, pad=pad_block, weight_read=reads.index(wh), prologue=prologue, **common)


def _conv_nchwc(b: _Block, x: Any, y: Any, before: list[_Block], common: dict[str, Any]) -> FuncPattern:
    """The blocked convolutions (see the module doc)."""
    out_idx = [_plain_var(e) for e in b.store.indices]
    if any(v is None for v in out_idx) or out_idx != b.spatial or b.vars[:5] != out_idx:
        return _generic("reduction output is not NCHWc indexed by its loops")
    n, fo, oy, ox, fi = out_idx
    if b.extent(n) != 1:
        return _generic("batch > 1 convolution")
    red = b.reduction
    for data, weight in ((x, y), (y, x)):
        if len(data.indices) == 5 and len(weight.indices) == 6:
            break
    else:
        return _generic("no blocked [O, I, KH, KW, i, o] weight operand")
    wv = [_plain_var(e) for e in weight.indices]
    lin = [_linear(e) for i, e in enumerate(data.indices)]
    wshape, dshape = _shape(_load_buffer(weight)), _shape(_load_buffer(data))
    if wshape is None or dshape is None:
        return _generic("symbolic shapes")
    G = 1
    if len(red) == 4:
        rco, ry, rx, rci = red
        op = "conv2d_nchwc"
        group = _channel_groups(data.indices[1], fo, rco)
        if wv != [fo, rco, ry, rx, rci, fi] or group is None or lin[4] != ({rci: 1}, 0):
            return _generic("blocked conv2d operands are not indexed as the template expects")
        if group != (0, 0):  # grouped: output block fo reads input blocks (fo // OCgo) * ICgo + rco
            OCgo, ICgo = group
            G = b.extent(fo) // OCgo
            if ICgo != wshape[1] or b.extent(fo) % OCgo or dshape[1] != G * ICgo:
                return _generic("grouped blocked conv2d whose channel index does not match its shapes")
    elif len(red) == 2:
        ry, rx = red
        op = "depthwise_conv2d_nchwc"
        if wv[0] != fo or wv[2:4] != [ry, rx] or wv[5] != fi or lin[1] != ({fo: 1}, 0) or lin[4] != ({fi: 1}, 0):
            return _generic("blocked depthwise operands are not indexed as the template expects")
    else:
        return _generic(f"{len(red)} reduction variables in a blocked convolution")
    if any(v is None for v in (lin[0], lin[2], lin[3])):
        return _generic("non-linear data index")
    (c_n, _), (c_y, off_y), (c_x, off_x) = lin[0], lin[2], lin[3]  # type: ignore[misc]
    if c_n != {n: 1} or c_y.keys() != {oy, ry} or c_x.keys() != {ox, rx} or off_y or off_x:
        return _generic("data spatial index is not y*S + ry*D")
    SH, SW, DH, DW = c_y[oy], c_x[ox], c_y[ry], c_x[rx]
    KH, KW = b.extent(ry), b.extent(rx)
    pad_block, PT, PL, H, W = None, 0, 0, dshape[2], dshape[3]
    dh = _load_buffer(data).__chandle__()
    writers = [p for p in before if any(w.__chandle__() == dh for w in p.write_buffers)]
    if writers:
        padded = _pad_offsets(writers[-1])
        if padded is None:
            return _generic("data produced by a stage that is not zero padding")
        PT, PL, H, W = padded
        pad_block = writers[-1].name if dshape[2:4] != (H, W) else None  # a copy stage is inlined
    PB, PR = dshape[2] - H - PT, dshape[3] - W - PL
    if min(PB, PR) < 0:
        return _generic("padding crops the input")
    OH, OW = b.extent(oy), b.extent(ox)
    if (H + PT + PB - (KH - 1) * DH - 1) // SH + 1 != OH or (W + PL + PR - (KW - 1) * DW - 1) // SW + 1 != OW:
        return _generic("output size does not follow from the input, kernel, stride and padding")
    plain = SH == SW and DH == DW == 1 and KH == KW and PT == PL == PB == PR and G == 1
    if op == "conv2d_nchwc":
        IB, OB = wshape[4], wshape[5]
        if plain:
            args = {"H": H, "W": W, "IC": wshape[1] * IB, "OC": b.extent(fo) * OB, "K": KH, "S": SH, "P": PT,
                    "IB": IB, "OB": OB}
        else:
            op = "conv2d_nchwc_general"
            args = {"H": H, "W": W, "IC": dshape[1] * IB, "OC": b.extent(fo) * OB, "KH": KH, "KW": KW, "SH": SH,
                    "SW": SW, "PT": PT, "PL": PL, "PB": PB, "PR": PR, "DH": DH, "DW": DW, "G": G, "IB": IB, "OB": OB}
    else:
        B = wshape[5]
        if wshape[1] != 1 or wshape[4] != 1 or dshape[1] != b.extent(fo):
            return _generic("blocked depthwise channel multiplier != 1")
        if plain:
            args = {"H": H, "W": W, "C": b.extent(fo) * B, "K": KH, "S": SH, "P": PT, "B": B}
        else:
            op = "depthwise_conv2d_nchwc_general"
            args = {"H": H, "W": W, "C": b.extent(fo) * B, "KH": KH, "KW": KW, "SH": SH, "SW": SW, "PT": PT,
                    "PL": PL, "PB": PB, "PR": PR, "DH": DH, "DW": DW, "B": B}
    reads = [r.__chandle__() for r in b.reads]
    prologue = tuple(p.name for p in before if p.name != pad_block)  # a P = 0 copy stage is inlined
    return FuncPattern(op, args, pad=pad_block, weight_read=reads.index(_load_buffer(weight).__chandle__()),
                       prologue=prologue, **common)


def _channel_groups(e: Any, fo: Any, rco: Any) -> tuple[int, int] | None:
    """The data's channel-block index of a blocked conv2d: ``rco`` -> ``(0, 0)`` (one group);
    ``(fo // OCgo) * ICgo + rco`` (``fo * ICgo + rco`` when ``OCgo`` is 1) -> ``(OCgo, ICgo)``;
    anything else -> None."""
    lin = _linear(e)
    if lin is not None:
        if lin == ({rco: 1}, 0):
            return 0, 0
        coefs, const = lin
        if const == 0 and coefs.get(rco) == 1 and set(coefs) == {fo, rco}:
            return 1, coefs[fo]
        return None
    e = _strip_cast(e)
    if type(e).__name__ != "Add":
        return None
    for term, rest in ((e.a, e.b), (e.b, e.a)):
        if _linear(rest) != ({rco: 1}, 0):
            continue
        term, scale = _strip_cast(term), 1
        if type(term).__name__ == "Mul":
            for d, c in ((term.a, term.b), (term.b, term.a)):
                if type(_strip_cast(c)).__name__ == "IntImm":
                    term, scale = _strip_cast(d), int(_strip_cast(c).value)
                    break
        if type(term).__name__ == "FloorDiv" and _linear(term.a) == ({fo: 1}, 0) \
                and type(_strip_cast(term.b)).__name__ == "IntImm":
            return int(_strip_cast(term.b).value), scale
    return None


def _pad_amount(pb: _Block) -> tuple[int, int, int] | None:
    """``(P, H, W)`` of a symmetric zero-padding block ``out[n,c,y,x] = if(in range) in[n,c,y-P,x-P] else 0``
    (the bottom and right padding follow from the output's shape)."""
    offsets = _pad_offsets(pb)
    if offsets is None or offsets[0] != offsets[1]:
        return None
    return offsets[0], offsets[2], offsets[3]


def _pad_offsets(pb: _Block) -> tuple[int, int, int, int] | None:
    """``(top, left, H, W)`` of a zero-padding block ``out[n,c,y,x] = if(in range) in[n,c,y-top,x-left] else 0``."""
    if pb.reduction or type(pb.store).__name__ != "BufferStore":
        return None
    v = _strip_cast(pb.store.value)
    if _is_load(v):  # a plain copy (the padding stage of a convolution without padding)
        load = v
    elif type(v).__name__ == "Call" and str(v.op.name).endswith("if_then_else"):
        load, other = _strip_cast(v.args[1]), _strip_cast(v.args[2])
        if type(other).__name__ != "FloatImm" or float(other.value) != 0.0:
            return None
    else:
        return None
    if not _is_load(load) or len(load.indices) not in (4, 5):  # NCHW or NCHW{c}c
        return None
    lin = [_linear(e) for e in load.indices]
    if any(v_ is None for v_ in lin):
        return None
    py, px = -lin[2][1], -lin[3][1]  # type: ignore[index]
    if py < 0 or px < 0 or any(lin[i][1] for i in range(len(lin)) if i not in (2, 3)):  # type: ignore[index]
        return None
    shape = _shape(_load_buffer(load))
    if shape is None:
        return None
    return py, px, shape[2], shape[3]


# ---------------------------------------------------------------- attention
@dataclass(frozen=True)
class AttentionPattern:
    """The blocks of a fused attention (:mod:`tensortune.models.attention`): ``S = Q K^T``, the
    stages between (scale, mask, softmax), ``O = P V`` and O's elementwise epilogue. In bf16 the
    two products read bfloat16 operands: ``rounds`` names the stages that round ``Q`` and pack
    ``K`` (for ``S``), and round ``P`` and pack ``V`` (for ``O``), in that order."""

    scores: str
    out: str
    between: tuple[str, ...]
    after: tuple[str, ...]
    args: dict[str, int]  # B (batch and heads), M (rows), N (keys), K (head width of Q), D (of V)
    rounds: tuple[str, ...] = ()

    @property
    def precision(self) -> str:
        return "bf16" if self.rounds else "f32"


def _products(blocks: list[_Block], macs: list[int]) -> list[dict[str, Any]] | None:
    """Each product's shape (B, M, N, K) and, for bf16 forms, the stages rounding its operands
    (``pad``, ``pack``): float32 ``(batch) matmul`` with B as ``[..., K, N]``, or
    ``batch_matmul_bf16``; None for another form or a mix."""
    from .pattern_bf16 import classify_bf16

    common: dict[str, Any] = {"anchor": "", "epilogue": (), "epilogue_ops": ()}
    out = []
    for k in macs:
        x, y = _mac_operands(blocks[k])  # type: ignore[misc]
        if str(x.ty) == str(y.ty) == "uint16":
            pat = classify_bf16(blocks[k], x, y, blocks[:k], [])
            if pat.op != "batch_matmul_bf16" or pat.pack is None:
                return None
            out.append({**pat.args, "pad": pat.pad, "pack": pat.pack})
        else:
            pat = _gemm(blocks[k], x, y, [], common)
            if pat.op not in ("matmul", "batch_matmul") or pat.b_layout != "kn":
                return None
            out.append(dict(pat.args))
    return out if len({"pad" in p for p in out}) == 1 else None


def attention_pattern(func: Any) -> AttentionPattern | None:
    """The :class:`AttentionPattern` of ``func``, None when it is not one: two (batch) matmuls
    with B as ``[..., K, N]`` (or two ``batch_matmul_bf16``, their operands' rounding and packing
    stages aside), the second reducing over the first's columns, only row reductions and
    elementwise stages over ``S`` between them, an elementwise epilogue after, static extents."""
    from ..precision import ATTENTION_LANES, ATTENTION_ROW_MULTIPLE, SCORES_COLUMNS
    from .ops_bf16 import CONVERT_STAGE, PACK_STAGE, is_stage

    def stage(b: _Block) -> bool:
        return is_stage(b.name, CONVERT_STAGE) or is_stage(b.name, PACK_STAGE)

    try:
        blocks = _blocks(func)
    except Exception:  # noqa: BLE001 - no root block, nested blocks ...
        return None
    macs = [k for k, b in enumerate(blocks) if _mac_operands(b) is not None]
    if len(macs) != 2 or any(e < 0 for b in blocks for e in b.extents):
        return None
    shapes = _products(blocks, macs)
    if shapes is None:
        return None
    s, o = shapes
    rounds = tuple(n for p in (s, o) for n in (p.get("pad"), p.get("pack")) if n)
    if any(not stage(b) for b in blocks[:macs[0]]) or sum(map(stage, blocks)) != len(rounds):
        return None
    a, z = macs
    batch = s.get("B", 1)
    rows = batch * s["M"]
    between = [b for b in blocks[a + 1:z] if b.name not in rounds]
    keys = o["K"]
    if rounds and between and keys % 2 == 0 and _prod(between[0].extents) == rows * (keys - 1):
        keys -= 1  # bf16: an odd number of keys, ``P V`` reducing over one zero key more (pairs)
    padded = bool(rounds) and 0 < s["N"] - keys < SCORES_COLUMNS  # bf16 scores over keys padded to vectors
    if o.get("B", 1) != batch or o["M"] != s["M"] or not (s["N"] == keys or padded):
        return None
    scores = rows * keys
    for b in between[int(s["N"] != keys):]:
        size = _prod(b.extents)
        if not ((not b.reduction and size == scores) or (len(b.reduction) == 1 and size == scores
                                                         and _prod([b.extent(v) for v in b.spatial]) == rows)):
            return None
    if sum(1 for b in between if b.reduction) < 2 or not between or between[-1].reduction:
        return None
    after = blocks[z + 1:]
    widths = {o["N"]} | (set(range(o["N"] - ATTENTION_LANES + 1, o["N"])) if rounds else set())  # bf16: values padded
    heights = range(max(1, s["M"] - ATTENTION_ROW_MULTIPLE + 1), s["M"] + 1)  # padded rows cut off
    if any(b.reduction or _prod(b.extents) not in {batch * m * w for m in heights for w in widths} for b in after):
        return None
    return AttentionPattern(blocks[a].name, blocks[z].name, tuple(b.name for b in between), tuple(b.name for b in after),
                            {"B": batch, "M": s["M"], "N": keys, "K": s["K"], "D": o["N"]}, rounds)
