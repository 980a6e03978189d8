"""Recognise the bf16 anchors (:mod:`.ops_bf16`) in a PrimFunc: what :mod:`.pattern` does for
their float32 forms, for products of bfloat16 operands.

- ``conv2d_nchwc_bf16``: ``out[n,fo,y,x,fi] += bf(data_bf16[n, rco, y*S+ry, x*S+rx, rcp*2+rce])
  * bf(w[fo, rco, ry, rx, rcp, fi, rce])``, where ``data_bf16`` rounds (and zero-pads) a float32
  ``[1, IC/IB, H, W, IB]`` input; ``conv2d_nchwc_general_bf16`` of any geometry
  (``data_bf16[n, g(fo) + rco, y*SH + ry*DH, x*SW + rx*DW, ...]``, groups of channel blocks);
- ``dense_pack_bf16``: ``out[..., i, j] += bf(data_bf16[..., i, kp*2+ke]) * bf(W[j // NB, kp, j % NB, ke])``;
- ``batch_matmul_bf16``: ``out[b.., i, j] += bf(data_bf16[b.., i, kp*2+ke]) * bf(b_bf16[b.., j // NB, kp, j % NB, ke])``,
  where ``b_bf16`` rounds and packs the right operand in the function itself.
"""
from __future__ import annotations

from typing import Any

from ..precision import BF16_STORAGE
from .ops_bf16 import CONVERT_STAGE, PACK_STAGE, is_stage
from .pattern import (FuncPattern, _Block, _channel_groups, _epilogue_op, _generic, _is_load, _linear, _load_buffer,
                      _plain_var, _prod, _shape, _strip_cast)


def classify_bf16(b: _Block, x: Any, y: Any, before: list[_Block], after: list[_Block]) -> FuncPattern:
    """The bf16 anchor ``b`` with bfloat16 operand loads ``x`` and ``y`` and the blocks ``after`` it
    (generic when its form is another). The epilogue is elementwise over the anchor's output, or
    over its first rows (and a product's first columns) only: a product on rows padded to its
    register tile (:func:`tensortune.models.prepack.row_padding`) or columns padded to its
    vector, whose extra rows and columns the epilogue cuts off."""
    out_elems = _prod([b.extent(v) for v in b.spatial])
    rows = b.extent(b.spatial[-2]) if len(b.spatial) >= 2 else 1
    cols = b.extent(b.spatial[-1]) if b.spatial and len(b.reduction) == 2 else 1  # a product's columns
    kept = {out_elems // (rows * cols) * r * c for r in range(max(1, rows - 15), rows + 1)
            for c in range(max(1, cols - 15), cols + 1)}
    for blk in after:
        if _prod(blk.extents) not in kept:
            return _generic(f"the epilogue is not elementwise over the anchor's output ({blk.name} covers "
                            f"{_prod(blk.extents)} points, the anchor {out_elems})")
    common = {"anchor": b.name, "epilogue": tuple(blk.name for blk in after),
              "epilogue_ops": tuple(_epilogue_op(blk) for blk in after)}
    convert = _convert_stage(before, x, y)
    if convert is None:
        return _generic("bf16 operands not rounded by a data_bf16 stage")
    stage, data, weight = convert
    reads = [r.__chandle__() for r in b.reads]
    wbuf = _load_buffer(weight)
    wh = wbuf.__chandle__()
    pack = next((p.name for p in before if is_stage(p.name, PACK_STAGE)
                 and any(w.__chandle__() == wh for w in p.write_buffers)), None)
    prologue = tuple(p.name for p in before if p.name not in (stage.name, pack))
    extra = {"pad": stage.name, "weight_read": reads.index(wh), "prologue": prologue,
             "index_dtype": str(wbuf.shape[0].ty.dtype)}
    if pack is not None:
        return _packed_product(b, data, weight, common, {**extra, "pack": pack}, batch=True)
    if len(weight.indices) == 7 and len(b.reduction) == 5:
        return _conv(b, stage, data, weight, common, extra)
    if len(weight.indices) == 4 and len(b.reduction) == 2:
        return _packed_product(b, data, weight, common, extra, batch=False)
    return _generic("bf16 operands in a form no bf16 template knows")


def _convert_stage(before: list[_Block], x: Any, y: Any) -> tuple[_Block, Any, Any] | None:
    """(the rounding stage, the data load, the weight load): the data is the operand that stage writes."""
    for data, weight in ((x, y), (y, x)):
        h = _load_buffer(data).__chandle__()
        writers = [p for p in before if any(w.__chandle__() == h for w in p.write_buffers)]
        if writers and is_stage(writers[-1].name, CONVERT_STAGE):
            return writers[-1], data, weight
    return None


def _pair_index(e: Any, pair: Any, elem: Any) -> bool:
    """``e`` is ``pair * 2 + elem``."""
    lin = _linear(e)
    return lin is not None and lin == ({pair: 2, elem: 1}, 0)


def _conv(b: _Block, stage: _Block, data: Any, weight: Any, common: dict[str, Any],
          extra: dict[str, Any]) -> FuncPattern:
    """``conv2d_nchwc_bf16`` (square kernel, one stride and padding, no dilation or groups), else
    ``conv2d_nchwc_general_bf16``."""
    out_idx = [_plain_var(e) for e in b.store.indices]
    if len(out_idx) != 5 or any(v is None for v in out_idx) or out_idx != b.spatial:
        return _generic("bf16 conv output is not NCHWc indexed by its loops")
    n, fo, oy, ox, fi = out_idx
    rco, ry, rx, rcp, rce = b.reduction
    if b.extent(n) != 1:
        return _generic("batch > 1 convolution")
    if [_plain_var(e) for e in weight.indices] != [fo, rco, ry, rx, rcp, fi, rce] or not _pair_index(data.indices[4], rcp, rce):
        return _generic("bf16 conv operands are not indexed as the template expects")
    group = _channel_groups(data.indices[1], fo, rco)
    lin = [_linear(e) for e in (data.indices[0], data.indices[2], data.indices[3])]
    if group is None or any(v is None for v in lin) or lin[0] != ({n: 1}, 0):
        return _generic("bf16 conv data index is not [n, group(fo) + rco, y*S + ry*D, x*S + rx*D, ...]")
    (c_y, off_y), (c_x, off_x) = lin[1], lin[2]  # type: ignore[misc]
    if c_y.keys() != {oy, ry} or c_x.keys() != {ox, rx} or off_y or off_x:
        return _generic("bf16 conv data spatial index is not y*S + ry*D")
    wshape, dshape = _shape(_load_buffer(weight)), _shape(_load_buffer(data))
    source = _source_load(stage.store.value)
    sshape = _shape(_load_buffer(source)) if source is not None else None
    if wshape is None or dshape is None or sshape is None:
        return _generic("bf16 conv input not read by its rounding stage")
    offsets = [_linear(e) for e in source.indices[2:4]]
    if any(v is None for v in offsets):
        return _generic("bf16 conv padding offsets are not constants")
    H, W, PT, PL = sshape[2], sshape[3], -offsets[0][1], -offsets[1][1]  # type: ignore[index]
    PB, PR = dshape[2] - H - PT, dshape[3] - W - PL
    SH, SW, DH, DW, KH, KW = c_y[oy], c_x[ox], c_y[ry], c_x[rx], b.extent(ry), b.extent(rx)
    if min(PT, PL, PB, PR) < 0:
        return _generic("bf16 conv padding crops the input")
    IB, OB = dshape[4], wshape[5]
    G = 1
    if group != (0, 0):
        OCgo, ICgo = group
        G = b.extent(fo) // OCgo
        if ICgo != wshape[1] or dshape[1] != G * ICgo:
            return _generic("grouped bf16 conv whose channel index does not match its shapes")
    if SH == SW and DH == DW == 1 and KH == KW and PT == PL == PB == PR and G == 1:
        args = {"H": H, "W": W, "IC": wshape[1] * IB, "OC": b.extent(fo) * OB, "K": KH, "S": SH, "P": PT,
                "IB": IB, "OB": OB}
        return FuncPattern("conv2d_nchwc_bf16", args, **extra, **common)
    args = {"H": H, "W": W, "IC": dshape[1] * IB, "OC": b.extent(fo) * OB, "KH": KH, "KW": KW, "SH": SH, "SW": SW,
            "PT": PT, "PL": PL, "PB": PB, "PR": PR, "DH": DH, "DW": DW, "G": G, "IB": IB, "OB": OB}
    return FuncPattern("conv2d_nchwc_general_bf16", args, **extra, **common)


def _source_load(e: Any) -> Any | None:
    """The NCHWc load (5 indices) a rounding stage's value reads: float32, or bfloat16 bits."""
    if _is_load(e):
        return e if len(e.indices) == 5 and str(e.ty) in ("float32", BF16_STORAGE) else None
    for name in ("a", "b", "value", "true_value", "false_value"):
        sub = getattr(e, name, None)
        if sub is not None and not isinstance(sub, (int, float, str)):
            found = _source_load(sub)
            if found is not None:
                return found
    for sub in getattr(e, "args", None) or ():
        found = _source_load(sub)
        if found is not None:
            return found
    return None


def _packed_product(b: _Block, data: Any, weight: Any, common: dict[str, Any], extra: dict[str, Any],
                    batch: bool) -> FuncPattern:
    """``dense_pack_bf16`` (a weight packed at compile time, rows without a batch), or with
    ``batch`` ``batch_matmul_bf16`` (the right operand packed in the function, per batch)."""
    name = "batch_matmul_bf16" if batch else "dense"
    out_idx = [_plain_var(e) for e in b.store.indices]
    if len(out_idx) < 2 or any(v is None for v in out_idx) or out_idx != b.spatial or len(b.reduction) != 2:
        return _generic(f"bf16 {name} output is not indexed by its loops")
    i, j = out_idx[-2], out_idx[-1]
    kp, ke = b.reduction
    lead = out_idx[:-2]
    if not batch and any(b.extent(v) != 1 for v in lead):
        return _generic("bf16 dense rows carry a batch")
    w = weight.indices
    if len(w) != (len(lead) + 4 if batch else 4) or (batch and [_plain_var(e) for e in w[:-4]] != lead):
        return _generic(f"bf16 {name} right operand is not [batch.., j // NB, kp, j % NB, ke]")
    div, mod = _strip_cast(w[-4]), _strip_cast(w[-2])
    if type(div).__name__ != "FloorDiv" or type(mod).__name__ != "FloorMod" or _plain_var(div.a) != j \
            or _plain_var(mod.a) != j or _plain_var(w[-3]) != kp or _plain_var(w[-1]) != ke:
        return _generic(f"bf16 {name} right operand is not [.., j // NB, kp, j % NB, ke]")
    if _plain_var(data.indices[-2]) != i or not _pair_index(data.indices[-1], kp, ke) \
            or (batch and [_plain_var(e) for e in data.indices[:-2]] != lead):
        return _generic(f"bf16 {name} data is not [.., i, kp*2+ke]")
    NB = int(_strip_cast(div.b).value)
    args = {"M": b.extent(i), "N": b.extent(j), "K": 2 * b.extent(kp), "NB": NB}
    if batch:
        return FuncPattern("batch_matmul_bf16", {"B": _prod([b.extent(v) for v in lead]), **args}, b_layout="packed",
                           b_ndim=len(w), **extra, **common)
    return FuncPattern("dense_pack_bf16", args, b_layout="packed", b_ndim=4, **extra, **common)
