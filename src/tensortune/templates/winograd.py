"""Winograd F(m, 3) for a blocked 3x3 stride-1 convolution: the ``algorithm`` knob of ``conv2d_nchwc``.

Lavin and Gray's minimal filtering computes each m x m output tile as ``A^T [U (.) (B^T d B)] A``
from an (m+2) x (m+2) input tile ``d``, where ``U = G g G^T`` is the transformed 3x3 kernel. The
weight transform is done once, when the model is compiled (:func:`transform_weight`): the function
reads ``U[a, a, OC/OB, IC/IB, IB, OB]`` (a = m + 2) in place of the packed kernel. Per call it
transforms the input tiles, multiplies a^2 matrices (tiles x input channels by input x output
channels), and transforms each tile's products back, the fused epilogue written per output tile.
F(4, 3) does 4x fewer multiplications than the direct convolution; F(6, 3) 5.1x, with larger
transforms and more rounding. The matrices are TVM's (interpolation points chosen for accuracy,
Barabasz et al. 2018).

A task's function holds the direct convolution; :func:`winograd_func` rebuilds it with the anchor
replaced, keeping its prologue (padding) and its epilogue (bias, residual add, activation) as
they are.
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from ..space import Config
    from ..task import Task

#: Output tile sizes m of F(m, 3) the ``algorithm`` knob offers (0 there: the direct convolution).
TILE_SIZES = (2, 4, 6)

#: Prefix of the Winograd stages' block names (kept apart from a fused function's own blocks).
PREFIX = "wino_"


@lru_cache(maxsize=None)
def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, B, G)`` of F(m, 3) in float64: ``A`` is (m+2) x m, ``B`` (m+2) x (m+2), ``G`` (m+2) x 3."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    A, B, G = _cook_toom_convolution(_interpolation_points(m + 2), m, 3)
    return np.asarray(A, np.float64), np.asarray(B, np.float64), np.asarray(G, np.float64)


def transform_weight(w: np.ndarray, m: int) -> np.ndarray:
    """``U[a, a, OCo, ICo, IB, OB] = G w G^T`` of a packed kernel ``w[OCo, ICo, 3, 3, IB, OB]`` (float32)."""
    G = matrices(m)[2]
    u = np.einsum("ar,oirsbc,ts->atoibc", G, w.astype(np.float64), G)
    return np.ascontiguousarray(u, dtype=np.float32)  # einsum's strides follow its path: a kernel takes C order


def tiles(out_h: int, out_w: int, m: int) -> tuple[int, int]:
    """Output tiles of F(m, 3) over an ``out_h`` x ``out_w`` output: (rows, columns)."""
    return -(-out_h // m), -(-out_w // m)


def _const_matrix(mat: np.ndarray, name: str, dtype: str) -> Any:
    """A TE tensor of a constant matrix: a select over rows of selects over columns, which unrolled
    loops fold to its entries (rows + columns tests an entry, not rows x columns: fold time is most
    of a Winograd build)."""
    from tvm import te
    from tvm import tirx as tir

    rows, cols = mat.shape
    zero = tir.const(0.0, "float32")

    def row(r: int, j: Any) -> Any:
        e = zero
        for b in range(cols):
            if mat[r, b] != 0:
                e = tir.Select(j == b, tir.const(float(mat[r, b]), "float32"), e)
        return e

    def entry(i: Any, j: Any) -> Any:
        e = zero
        for r in range(rows):
            if np.any(mat[r] != 0):
                e = tir.Select(i == r, row(r, j), e)
        return e

    return te.compute(tuple(tir.IntImm(dtype, d) for d in mat.shape), entry, name=name)


def _block_of(stmt: Any) -> Any:
    import tvm.s_tir as st

    while not isinstance(stmt, st.SBlockRealize):
        stmt = stmt.body
    return stmt.block


def _touches(nest: Any, buf: Any) -> bool:
    b = _block_of(nest)
    return any(r.source.same_as(buf) for r in [*b.reads, *b.writes])


def _sub_func(params: list[Any], nests: list[Any], allocs: list[Any]) -> Any:
    """A PrimFunc of ``nests`` (loop nests of the original function) over ``params``."""
    import tvm.s_tir as st
    from tvm import tirx as tir

    body = tir.SeqStmt(nests) if len(nests) > 1 else nests[0]
    return tir.PrimFunc(params, st.SBlockRealize([], True, st.SBlock([], [], [], "root", body, alloc_buffers=allocs)))


def _flatten(func: Any) -> Any:
    """``func`` with the extern blocks ``te.extern_primfunc`` leaves (an opaque block around the
    inlined function's root) replaced by their loop nests, so every block is schedulable."""
    import tvm.s_tir as st
    from tvm import tirx as tir

    root = func.body.block
    nests, allocs = [], list(root.alloc_buffers)
    for s in (root.body.seq if isinstance(root.body, tir.SeqStmt) else [root.body]):
        if isinstance(s, st.SBlockRealize) and s.block.name_hint.startswith("extern"):
            inner = s.block.body.block  # the inlined function's root block
            allocs += list(inner.alloc_buffers)
            nests += list(inner.body.seq) if isinstance(inner.body, tir.SeqStmt) else [inner.body]
        else:
            nests.append(s)
    out = tir.PrimFunc(func.params, st.SBlockRealize([], True, st.SBlock([], [], [], "root", tir.SeqStmt(nests),
                                                                     alloc_buffers=allocs)),
                       attrs=func.attrs)
    return out


def weight_param(task: Task) -> int:
    """Index of the kernel among the function's parameters."""
    import tvm
    import tvm.s_tir as st

    func = task.prim_func()
    sch = st.Schedule(tvm.IRModule({"main": func}))
    weight = sch.get(sch.get_sblock(task.pattern.anchor)).reads[task.pattern.weight_read].source
    return next(i for i, p in enumerate(func.params) if p.same_as(weight))


def winograd_func(task: Task, m: int) -> Any:
    """The task's function with its convolution computed by F(m, 3) on a transformed kernel
    (parameter :func:`weight_param` becomes ``U``); prologue and epilogue blocks unchanged."""
    from tvm import te
    from tvm import tirx as tir

    func = task.prim_func()
    root = func.body.block
    nests = list(root.body.seq)
    names = [_block_of(n).name_hint for n in nests]
    ai = names.index(task.pattern.anchor)
    anchor = _block_of(nests[ai])
    data_buf, conv_buf = anchor.reads[0].source, anchor.writes[0].source
    wi = weight_param(task)
    params = list(func.params)
    holders = {i: te.placeholder(p.shape, p.dtype, name=p.name) for i, p in enumerate(params[:-1]) if i != wi}

    def extern(sub_params: list[Any], sub_nests: list[Any], out_buf: Any | None, inputs: list[Any]) -> Any:
        allocs = [a for a in root.alloc_buffers
                  if not a.same_as(out_buf) and not any(a.same_as(p) for p in sub_params)
                  and any(_touches(n, a) for n in sub_nests)]
        return te.extern_primfunc(inputs, _sub_func(sub_params + ([out_buf] if out_buf is not None else []),
                                                    sub_nests, allocs))

    pro = nests[:ai]
    if pro:  # padding (and any fused prologue) kept: F(m, 3) reads the padded data
        used = [i for i, p in enumerate(params[:-1]) if i != wi and any(_touches(n, p) for n in pro)]
        padded = extern([params[i] for i in used], pro, data_buf, [holders[i] for i in used])
    else:
        padded = holders[next(i for i, p in enumerate(params) if p.same_as(data_buf))]
    _, ICo, Hp, Wp, IB = (int(d) for d in padded.shape)
    OCo, OB = int(conv_buf.shape[1]), int(conv_buf.shape[4])
    OH, OW = int(conv_buf.shape[2]), int(conv_buf.shape[3])
    nH, nW = tiles(OH, OW, m)
    dt = str(conv_buf.shape[0].ty.dtype)  # int64 in Relax-made functions: every index in one type

    def ix(*dims: int) -> tuple[Any, ...]:
        return tuple(tir.IntImm(dt, d) for d in dims)

    a, T, m_, nW_ = ix(m + 2, nH * nW, m, nW)
    A, B, _ = matrices(m)
    Am, Bm = _const_matrix(A, PREFIX + "A", dt), _const_matrix(B, PREFIX + "B", dt)
    U = te.placeholder(ix(m + 2, m + 2, OCo, ICo, IB, OB), "float32", name="U")
    zero = tir.const(0.0, "float32")

    def tile_in(ic: Any, t: Any, r1: Any, r2: Any, ci: Any) -> Any:
        y, x = (t // nW_) * m_ + r1, (t % nW_) * m_ + r2
        return tir.if_then_else(tir.all(y < Hp, x < Wp), padded[0, ic, y, x, ci], zero)

    r1 = te.reduce_axis((0, a), "r1")
    Vt = te.compute((T, *ix(ICo), a, a, *ix(IB)), lambda t, ic, e, r2, ci: te.sum(Bm[r1, e] * tile_in(ic, t, r1, r2, ci), axis=r1),
                    name=PREFIX + "Vt")
    r2 = te.reduce_axis((0, a), "r2")
    V = te.compute((a, a, T, *ix(ICo, IB)), lambda e, n, t, ic, ci: te.sum(Vt[t, ic, e, r2, ci] * Bm[r2, n], axis=r2),
                   name=PREFIX + "V")
    rc, rci = te.reduce_axis((0, ix(ICo)[0]), "rc"), te.reduce_axis((0, ix(IB)[0]), "rci")
    M = te.compute((a, a, *ix(OCo), T, *ix(OB)),
                   lambda e, n, oc, t, co: te.sum(V[e, n, t, rc, rci] * U[e, n, oc, rc, rci, co], axis=[rc, rci]),
                   name=PREFIX + "M")
    # Y = A^T M A in two products (a*m*(a+m) terms a tile, not a^2*m^2: 240 against 576 for F(4,3),
    # and for F(6,3) 672 against 2304 unrolled statements that TVM and LLVM take seconds to build)
    na = te.reduce_axis((0, a), "na")
    Ym = te.compute((*ix(OCo), T, a, m_, *ix(OB)),
                    lambda oc, t, e, j, co: te.sum(M[e, na, oc, t, co] * Am[na, j], axis=na), name=PREFIX + "Ym")
    ea = te.reduce_axis((0, a), "ea")
    Yt = te.compute((*ix(OCo), T, m_, m_, *ix(OB)),
                    lambda oc, t, i, j, co: te.sum(Am[ea, i] * Ym[oc, t, ea, j, co], axis=ea), name=PREFIX + "Yt")
    Y = te.compute(conv_buf.shape, lambda n, oc, y, x, co: Yt[oc, (y // m_) * nW_ + x // m_, y % m_, x % m_, co],
                   name=PREFIX + "Y")
    epi = nests[ai + 1:]
    if epi:
        used = [i for i, p in enumerate(params[:-1]) if i != wi and any(_touches(n, p) for n in epi)]
        out = extern([conv_buf] + [params[i] for i in used] + [params[-1]], epi, None, [Y] + [holders[i] for i in used])
    else:
        out = Y
    args = [U if i == wi else holders[i] for i in range(len(params) - 1)] + [out]
    return _flatten(te.create_prim_func(args)).with_attr("global_symbol", "main")


def _new_loops(sch: Any, block: Any, extents: dict[str, int]) -> dict[str, Any]:
    """The loops ``compute_at`` gave ``block``, by name: it makes one only where the region is wider
    than one (a register tile of one tile, one channel block), so ``extents`` (in loop order) says
    which are there."""
    present = [k for k, n in extents.items() if n > 1]
    return dict(zip(present, sch.get_loops(block)[-len(present):])) if present else {}


def schedule_winograd(task: Task, config: Config, m: int) -> Any:
    """The ``tvm.s_tir.Schedule`` of F(m, 3) on the task's function (:func:`winograd_func`).

    Output: per register tile of ``tile_x[1]`` tiles x ``tile_f[1]`` channel blocks, the a^2
    products (``M``) accumulated over input channels (``tile_rc`` cuts the reduction), then each
    tile transformed back and written out through the epilogue. ``wino_input`` places the input
    transform: 0, a pass of its own, parallel over tiles, before the products (parallel over output
    channel blocks x tile rows); 1, per row of tiles of the register tile, inside the parallel loop
    over tile rows, reused by every output channel block (the transformed input stays in cache;
    the transformed kernel is read once per row of tiles)."""
    import tvm
    import tvm.s_tir as st

    from .base import annotate_unroll

    pat = task.pattern
    sch = st.Schedule(tvm.IRModule({"main": winograd_func(task, m)}))
    for name in ("A", "B"):
        sch.compute_inline(sch.get_sblock(PREFIX + name))
    for name in pat.prologue:
        sch.compute_inline(sch.get_sblock(name))
    if pat.pad:
        sch.compute_inline(sch.get_sblock(pat.pad))
    out = sch.get_sblock(PREFIX + "Y")
    if pat.epilogue:
        sch.compute_inline(out)
        for name in pat.epilogue[:-1]:
            sch.compute_inline(sch.get_sblock(name))
        out = sch.get_sblock(pat.epilogue[-1])
    xi, fm = int(config["tile_x"][1]), int(config["tile_f"][1])
    fused_input = bool(config.knobs.get("wino_input", 0))
    a, OB, IB = m + 2, task.args["OB"], task.args["IB"]
    ICo = task.args["IC"] // IB
    n, oc, y, x, co = sch.get_loops(out)
    th, i = sch.split(y, [None, m])
    tw, j = sch.split(x, [None, m])
    two, twi = sch.split(tw, [None, xi])
    oco, ocm = sch.split(oc, [None, fm])
    if fused_input:
        sch.reorder(n, th, two, oco, ocm, twi, i, j, co)
    else:
        sch.reorder(n, oco, th, two, ocm, twi, i, j, co)
    sch.vectorize(co)
    # the output transform's two products, per tile at ``twi``: Yt = A^T Ym, then its producer Ym = M A
    for name, extents, order in (("Yt", {"i": m, "j": m, "co": OB, "ea": a}, ("ea", "i", "j")),
                                 ("Ym", {"e": a, "j": m, "co": OB, "na": a}, ("e", "na", "j"))):
        block = sch.get_sblock(PREFIX + name)
        sch.compute_at(block, twi)
        lp = _new_loops(sch, block, extents)
        sch.reorder(*[lp[k] for k in order], lp["co"])
        for k in order:
            sch.unroll(lp[k])
        sch.vectorize(lp["co"])
    mb = sch.get_sblock(PREFIX + "M")
    sch.compute_at(mb, oco if fused_input else two)
    lp = _new_loops(sch, mb, {"e": a, "nn": a, "ocb": fm, "t": xi, "cob": OB, "rc": ICo, "rci": IB})
    rco, rcm = sch.split(lp["rc"], list(config["tile_rc"])) if "rc" in lp else (None, None)
    order = [rco, lp["e"], lp["nn"], rcm, lp.get("rci"), lp.get("ocb"), lp.get("t"), lp["cob"]]
    sch.reorder(*[x for x in order if x is not None])
    for name in ("ocb", "t"):
        if name in lp:
            sch.unroll(lp[name])
    sch.vectorize(lp["cob"])
    par = sch.fuse(n, th) if fused_input else sch.fuse(n, oco, th)
    sch.parallel(par)
    annotate_unroll(sch, par, config)
    sch.decompose_reduction(mb, rco if rco is not None else lp["e"])
    v = sch.get_sblock(PREFIX + "V")
    if fused_input:
        sch.compute_at(v, two)
        vl = _new_loops(sch, v, {"e": a, "nn": a, "t": xi, "ic": ICo, "ci": IB, "r2": a})
    else:
        vl = dict(zip(("e", "nn", "t", "ic", "ci", "r2"), sch.get_loops(v)))
    head = [vl[k] for k in ("t", "ic") if k in vl]
    sch.reorder(*head, vl["e"], vl["nn"], vl["r2"], vl["ci"])
    vt = sch.get_sblock(PREFIX + "Vt")
    sch.compute_at(vt, head[-1] if head else two)  # one tile of one channel block: beside V
    tl = _new_loops(sch, vt, {"e": a, "r2": a, "ci": IB, "r1": a})
    sch.reorder(tl["e"], tl["r2"], tl["r1"], tl["ci"])
    for loop in (tl["e"], tl["r2"], tl["r1"], vl["e"], vl["nn"], vl["r2"]):
        sch.unroll(loop)
    sch.vectorize(tl["ci"])
    sch.vectorize(vl["ci"])
    if not fused_input:
        sch.parallel(vl["t"])
    sch.decompose_reduction(vt, tl["e"])
    sch.decompose_reduction(v, vl["e"])
    return sch
