"""The bf16 forms of a model's convolutions and matrix products (``--precision bf16``).

Operands are bfloat16, kept as their bits in ``uint16`` buffers (:mod:`tensortune.precision`),
and products accumulate in float32, as AVX512-BF16's ``vdpbf16ps`` computes them: each of its 16
float32 lanes adds the products of one *pair* of bfloat16 values. So the weights are packed once
at compile time with pairs of input channels (or of reduction steps) side by side:

- ``conv2d_nchwc_bf16``: data ``[1, IC/IB, H, W, IB]`` float32 (as the f32 form), weight
  ``[OC/OB, IC/IB, K, K, IB/2, OB, 2]`` bf16 (:func:`pack_conv_weight`), output
  ``[1, OC/OB, OH, OW, OB]`` float32; ``conv2d_nchwc_general_bf16`` the same of any geometry
  and groups of channel blocks (weight ``[OC/OB, IC/G/IB, KH, KW, IB/2, OB, 2]``);
- ``dense_pack_bf16``: data ``[..., K]`` float32, weight ``[N/NB, K/2, NB, 2]`` bf16
  (:func:`pack_dense_weight`), output ``[..., N]`` float32;
- ``batch_matmul_bf16``: both operands computed at run time (attention's ``Q K^T`` and ``P V``):
  ``A[b, M, K] x B[b, K, N]``, float32 in and out; its ``b_bf16`` stage packs ``B`` per call
  the way :func:`pack_dense_weight` packs a weight (``[b, N/NB, K/2, NB, 2]``).

In a model the activations reach a bf16 product as bfloat16 bits: :func:`round_bits_te` rounds
them (to nearest even) in their producer's fused epilogue (:mod:`tensortune.models.bf16act`),
so the producer writes and the product reads half the bytes, and the function's first stage
(``data_bf16``) only pads them. A standalone product (an operator task) takes float32
activations, and that stage rounds them, once per call. Outputs stay float32 for the fused
epilogue.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..precision import AMX_BLOCK, BF16_STORAGE, from_bf16_bits, to_bf16_bits

if TYPE_CHECKING:  # pragma: no cover
    from tvm import te

#: Name of the stage that rounds the float32 activations to bfloat16 (padding included).
CONVERT_STAGE = "data_bf16"
#: Name of the stage that rounds and packs a product's run-time right operand (``batch_matmul_bf16``).
PACK_STAGE = "b_bf16"


def is_stage(name: str, stage: str) -> bool:
    """Whether the block ``name`` is a ``stage`` (:data:`CONVERT_STAGE`, :data:`PACK_STAGE`):
    ``FuseTIR`` renames a second one in a function by counting up its trailing number
    (``data_bf17``)."""
    return re.fullmatch(re.escape(stage.rstrip("0123456789")) + r"\d+", name) is not None


#: Names of the elementwise functions (and their blocks) that round an activation to bfloat16 bits
#: and widen bits back to float32 (:mod:`tensortune.models.bf16act`).
ROUND_FUNC, WIDEN_FUNC = "round_bf16", "widen_bf16"


def bf16_bits_expr(x: Any) -> Any:
    """TIR: the bfloat16 bits (``uint16``) of a float32 value, rounded to nearest even."""
    from tvm import tirx

    u = tirx.reinterpret("uint32", x)
    one = tirx.const(1, "uint32")
    bias = tirx.const(0x7FFF, "uint32") + tirx.bitwise_and(tirx.shift_right(u, tirx.const(16, "uint32")), one)
    return tirx.shift_right(u + bias, tirx.const(16, "uint32")).astype(BF16_STORAGE)


def bf16_value_expr(b: Any) -> Any:
    """TIR: the float32 value of bfloat16 bits (exact)."""
    from tvm import tirx

    return tirx.reinterpret("float32", tirx.shift_left(b.astype("uint32"), tirx.const(16, "uint32")))


def round_bits_te(x: "te.Tensor") -> "te.Tensor":
    """``x`` float32 as bfloat16 bits (``uint16``), rounded to nearest even: elementwise, so it
    fuses into the epilogue of the function that computes ``x``."""
    from tvm import te

    return te.compute(tuple(x.shape), lambda *i: bf16_bits_expr(x[i]), name=ROUND_FUNC)


def widen_bits_te(b: "te.Tensor") -> "te.Tensor":
    """bfloat16 bits ``b`` as float32 values (exact): elementwise, so it fuses into its consumer."""
    from tvm import te

    return te.compute(tuple(b.shape), lambda *i: bf16_value_expr(b[i]), name=WIDEN_FUNC)


def as_bits(value: Any, dtype: str) -> Any:
    """TIR: the bfloat16 bits of an activation loaded from a ``dtype`` tensor: rounded when it is
    float32, as it is when it holds bits already (rounded by its producer)."""
    return value if dtype == BF16_STORAGE else bf16_bits_expr(value)


def _rounding(data: "te.Tensor", padding: Sequence[int]) -> Any:
    """The rounding stage's body: ``data`` ``[1, C, H, W, IB]`` (float32, or bfloat16 bits) as
    bfloat16 bits, zero-padded by ``padding`` (top, left, bottom, right) and, past ``IB``, along
    its block (an odd block, the RGB stem's 3 channels, is read as an even one: the pairs the
    instruction takes)."""
    from tvm import tirx

    _, _, H, W, IB = (int(d) for d in data.shape)
    PT, PL = padding[0], padding[1]

    def convert(n: Any, c: Any, y: Any, x: Any, i: Any) -> Any:
        conds = ([y >= PT, y < H + PT, x >= PL, x < W + PL] if any(padding) else []) + [i < IB]
        value = as_bits(data[n, c, y - PT, x - PL, tirx.min(i, IB - 1)], str(data.dtype))
        return tirx.if_then_else(tirx.all(*conds), value, tirx.const(0, BF16_STORAGE))

    def plain(n: Any, c: Any, y: Any, x: Any, i: Any) -> Any:
        return as_bits(data[n, c, y, x, i], str(data.dtype))

    return convert if any(padding) or IB % 2 else plain


def conv2d_nchwc_bf16_te(data: "te.Tensor", kernel: "te.Tensor", S: int, P: int) -> "te.Tensor":
    """Blocked conv2d in bf16: data ``[1, IC/IB, H, W, IB]`` float32, kernel
    ``[OC/OB, IC/IB, K, K, IB/2, OB, 2]`` bf16 bits; float32 out (the general form's computation
    for one stride and padding: the same function, so the same tasks)."""
    return conv2d_nchwc_general_bf16_te(data, kernel, (S, S), (P, P, P, P), (1, 1), 1)


def group_block(fo: Any, rco: Any, groups: int, OCgo: int, ICgo: int) -> Any:
    """The input channel block output block ``fo`` reads at reduction step ``rco``: its group's
    (``fo // OCgo``) first block plus ``rco``; ``rco`` with one group (the forms
    :mod:`.pattern` reads back)."""
    from tvm import tirx

    if groups == 1:
        return rco
    return (fo if OCgo == 1 else tirx.floordiv(fo, OCgo)) * ICgo + rco


def conv2d_nchwc_general_bf16_te(data: "te.Tensor", kernel: "te.Tensor", strides: Sequence[int],
                                 padding: Sequence[int], dilation: Sequence[int], groups: int) -> "te.Tensor":
    """Blocked conv2d of any geometry in bf16 (the f32 ``conv2d_nchwc_general``'s, with ``padding``
    (top, left, bottom, right) and groups of channel blocks): data ``[1, IC/IB, H, W, IB]`` float32
    (or bfloat16 bits), kernel ``[OC/OB, IC/G/IB, KH, KW, IB/2, OB, 2]`` bf16 bits; float32 out."""
    from tvm import te

    _, ICo, H, W, _ = (int(d) for d in data.shape)
    OCo, ICgo, KH, KW, IB2, OB, _ = (int(d) for d in kernel.shape)
    (SH, SW), (DH, DW), (PT, PL, PB, PR) = strides, dilation, padding
    OH = (H + PT + PB - (KH - 1) * DH - 1) // SH + 1
    OW = (W + PL + PR - (KW - 1) * DW - 1) // SW + 1
    padded = te.compute((1, ICo, H + PT + PB, W + PL + PR, 2 * IB2), _rounding(data, padding), name=CONVERT_STAGE)
    rco = te.reduce_axis((0, ICgo), name="rco")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    rcp = te.reduce_axis((0, IB2), name="rcp")
    rce = te.reduce_axis((0, 2), name="rce")
    return te.compute(
        (1, OCo, OH, OW, OB),
        lambda n, fo, y, x, fi: te.sum(
            bf16_value_expr(padded[n, group_block(fo, rco, groups, OCo // groups, ICgo), y * SH + ry * DH,
                                   x * SW + rx * DW, rcp * 2 + rce])
            * bf16_value_expr(kernel[fo, rco, ry, rx, rcp, fi, rce]),
            axis=[rco, ry, rx, rcp, rce]),
        name="conv_nchwc_bf16",
    )


def dense_pack_bf16_te(data: "te.Tensor", packed: "te.Tensor") -> "te.Tensor":
    """``data[..., K] x W`` in bf16 (data float32 or bfloat16 bits), ``W[K, N]`` packed as
    ``[N/NB, K/2, NB, 2]`` bf16 bits; float32 out."""
    from tvm import te

    nbo, K2, NB, _ = (int(d) for d in packed.shape)
    lead = [int(d) for d in data.shape[:-1]]
    conv = te.compute(tuple(int(d) for d in data.shape), lambda *i: as_bits(data[i], str(data.dtype)), name=CONVERT_STAGE)
    kp = te.reduce_axis((0, K2), name="kp")
    ke = te.reduce_axis((0, 2), name="ke")
    return te.compute(
        (*lead, nbo * NB),
        lambda *idx: te.sum(bf16_value_expr(conv[(*idx[:-1], kp * 2 + ke)])
                            * bf16_value_expr(packed[idx[-1] // NB, kp, idx[-1] % NB, ke]), axis=[kp, ke]),
        name="dense_pack_bf16",
    )


def batch_matmul_bf16_te(a: "te.Tensor", b: "te.Tensor", nb: int, cols_to: int = 0) -> "te.Tensor":
    """``a[..., M, K] x b[..., K, N]`` in bf16, both float32 and computed at run time (the same
    leading dimensions): ``a`` rounded by the ``data_bf16`` stage, ``b`` rounded and packed by
    the ``b_bf16`` stage as ``[..., N'/nb, K/2, nb, 2]``; float32 out ``[..., M, N']``. ``N'`` is
    ``N``, or with ``cols_to`` ``N`` rounded up to a multiple of it, the packed columns past ``N``
    zero (a fused attention's scores: their keys need not divide into vectors). An odd ``K`` (the
    49 keys of PVT's and SegFormer's reduced attention, in ``P V``) is read as ``K + 1``: a zero
    column of ``a`` times a zero row of ``b``, the pairs the instruction takes."""
    from tvm import te, tirx

    lead = [int(d) for d in a.shape[:-2]]
    K, N = (int(d) for d in b.shape[-2:])
    cols = -(-N // cols_to) * cols_to if cols_to else N
    pairs = -(-K // 2)
    zero = tirx.const(0, BF16_STORAGE)

    def convert(*i: Any) -> Any:
        if K % 2 == 0:
            return bf16_bits_expr(a[i])
        inside = bf16_bits_expr(a[(*i[:-1], tirx.min(i[-1], K - 1))])
        return tirx.if_then_else(i[-1] < K, inside, zero)

    conv = te.compute((*(int(d) for d in a.shape[:-1]), 2 * pairs), convert, name=CONVERT_STAGE)

    def pack(*i: Any) -> Any:
        j, k = i[-4] * nb + i[-2], i[-3] * 2 + i[-1]
        if cols == N and K % 2 == 0:
            return bf16_bits_expr(b[(*i[:-4], k, j)])
        inside = bf16_bits_expr(b[(*i[:-4], tirx.min(k, K - 1), tirx.min(j, N - 1))])
        return tirx.if_then_else(tirx.all(j < N, k < K), inside, zero)

    packed = te.compute((*lead, cols // nb, pairs, nb, 2), pack, name=PACK_STAGE)
    kp = te.reduce_axis((0, pairs), name="kp")
    ke = te.reduce_axis((0, 2), name="ke")
    return te.compute(
        (*lead, int(a.shape[-2]), cols),
        lambda *idx: te.sum(bf16_value_expr(conv[(*idx[:-1], kp * 2 + ke)])
                            * bf16_value_expr(packed[(*idx[:-2], idx[-1] // nb, kp, idx[-1] % nb, ke)]), axis=[kp, ke]),
        name="batch_matmul_bf16",
    )


def first_columns_te(x: "te.Tensor", cols: int, name: str = "scores_cut", reads_padding: bool = True) -> "te.Tensor":
    """``x[..., :cols]``: a fused attention's scores without the padded columns, or its output.
    With ``reads_padding`` (the scores) its reads cover every column of ``x`` (the second branch,
    never taken, reads the padded ones), so that a block of rows computed where its rows are used
    computes whole vectors of keys, not a guarded last one (which could not be tensorized); the
    output's cut, computed after its producer, reads only its own columns."""
    from tvm import te, tirx

    width = int(x.shape[-1])

    def cut(*i: Any) -> Any:
        if not reads_padding:
            return x[i]
        return tirx.if_then_else(i[-1] < cols, x[i], x[(*i[:-1], i[-1] + (width - cols))])

    return te.compute((*(int(d) for d in x.shape[:-1]), cols), cut, name=name)


# ---------------------------------------------------------------- weights, packed once
def pack_conv_weight(w: np.ndarray) -> np.ndarray:
    """A blocked float32 weight ``[OC/OB, IC/IB, K, K, IB, OB]`` as bf16 bits
    ``[OC/OB, IC/IB, K, K, IB/2, OB, 2]`` (input-channel pairs side by side; an odd ``IB`` gets a
    zero channel)."""
    if w.shape[4] % 2:
        w = np.pad(w, [(0, 0)] * 4 + [(0, 1), (0, 0)])
    o, i, kh, kw, ib, ob = w.shape
    pairs = np.asarray(w, dtype=np.float32).reshape(o, i, kh, kw, ib // 2, 2, ob).transpose(0, 1, 2, 3, 4, 6, 5)
    return to_bf16_bits(np.ascontiguousarray(pairs))


def unpack_conv_weight(p: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_conv_weight` (float32 values of the bf16 weight)."""
    o, i, kh, kw, ib2, ob, _ = p.shape
    return from_bf16_bits(p).transpose(0, 1, 2, 3, 4, 6, 5).reshape(o, i, kh, kw, ib2 * 2, ob)


def pack_dense_weight(w_kn: np.ndarray, nb: int) -> np.ndarray:
    """``W[K, N]`` float32 as bf16 bits ``[N/nb, K/2, nb, 2]`` (reduction pairs side by side)."""
    K, N = w_kn.shape
    pairs = np.asarray(w_kn, dtype=np.float32).reshape(K // 2, 2, N // nb, nb).transpose(2, 0, 3, 1)
    return to_bf16_bits(np.ascontiguousarray(pairs))


def unpack_dense_weight(p: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_dense_weight`: ``W[K, N]`` float32."""
    nbo, K2, nb, _ = p.shape
    return from_bf16_bits(p).transpose(1, 3, 0, 2).reshape(K2 * 2, nbo * nb)


# ---------------------------------------------------------------- standalone tasks
def conv2d_nchwc_bf16_compute(args: dict[str, int]) -> list:
    from tvm import te

    H, W, IC, OC, K, IB, OB = (args[n] for n in ("H", "W", "IC", "OC", "K", "IB", "OB"))
    data = te.placeholder((1, IC // IB, H, W, IB), name="data")
    kernel = te.placeholder((OC // OB, IC // IB, K, K, IB // 2, OB, 2), BF16_STORAGE, name="kernel")
    return [data, kernel, conv2d_nchwc_bf16_te(data, kernel, args["S"], args["P"])]


def conv2d_nchwc_general_bf16_compute(args: dict[str, int]) -> list:
    from tvm import te

    a = args
    data = te.placeholder((1, a["IC"] // a["IB"], a["H"], a["W"], a["IB"]), name="data")
    kernel = te.placeholder((a["OC"] // a["OB"], a["IC"] // a["G"] // a["IB"], a["KH"], a["KW"], a["IB"] // 2, a["OB"], 2),
                            BF16_STORAGE, name="kernel")
    out = conv2d_nchwc_general_bf16_te(data, kernel, (a["SH"], a["SW"]), (a["PT"], a["PL"], a["PB"], a["PR"]),
                                       (a["DH"], a["DW"]), a["G"])
    return [data, kernel, out]


def conv2d_nchwc_general_bf16_reference(args: dict[str, int], inputs: Sequence[np.ndarray]) -> np.ndarray:
    from .ops import get_op

    return get_op("conv2d_nchwc_general").reference(args, [inputs[0], unpack_conv_weight(inputs[1])])


def dense_pack_bf16_compute(args: dict[str, int]) -> list:
    from tvm import te

    M, N, K, NB = args["M"], args["N"], args["K"], args["NB"]
    A = te.placeholder((M, K), name="A")
    Bp = te.placeholder((N // NB, K // 2, NB, 2), BF16_STORAGE, name="B")
    return [A, Bp, dense_pack_bf16_te(A, Bp)]


def batch_matmul_bf16_compute(args: dict[str, int]) -> list:
    from tvm import te

    B, M, N, K = args["B"], args["M"], args["N"], args["K"]
    A = te.placeholder((B, M, K), name="A")
    Bm = te.placeholder((B, K, N), name="B")
    return [A, Bm, batch_matmul_bf16_te(A, Bm, args["NB"])]


def batch_matmul_bf16_reference(args: dict[str, int], inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The float32 product of the operands' bf16 values (the kernel's accumulation is float32)."""
    a, b = (from_bf16_bits(to_bf16_bits(np.asarray(x, dtype=np.float32))) for x in inputs)
    return np.matmul(a, b)


def conv2d_nchwc_bf16_reference(args: dict[str, int], inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The float32 convolution of the float32 data with the bf16 weight's values: what the
    bf16 kernel approximates (its data rounding is the error the tolerance allows)."""
    from .ops import get_op

    return get_op("conv2d_nchwc").reference(args, [inputs[0], unpack_conv_weight(inputs[1])])


def dense_pack_bf16_reference(args: dict[str, int], inputs: Sequence[np.ndarray]) -> np.ndarray:
    return np.asarray(inputs[0], dtype=np.float32) @ unpack_dense_weight(inputs[1])


def on_dot_product(kernel_class: str) -> bool:
    """Whether a function of ``kernel_class`` sums on ``vdpbf16ps`` (a bf16 product or attention),
    not in float32 (a float32 function whose epilogue rounds its output to bfloat16 bits)."""
    return kernel_class.split("-")[0].endswith("_bf16")


def check_pairs(args: dict[str, int], reduction: str, lanes: str, amx_block: bool = False) -> None:
    """The bf16 forms' own constraints: an even reduction block (pairs), 8 or 16 output lanes, or
    :data:`~tensortune.precision.AMX_BLOCK` where the form has an AMX counterpart that takes it (``amx_block``)."""
    from .ops import OpError

    if args[reduction] % 2:
        raise OpError(f"bf16 needs an even {reduction} (pairs of bfloat16 values), got {args[reduction]}")
    if args[lanes] not in ((8, 16, AMX_BLOCK) if amx_block else (8, 16)):
        more = f", or {AMX_BLOCK} (AMX tiles)" if amx_block else ""
        raise OpError(f"bf16 needs {lanes} of 8 or 16 (one vector of float32 sums){more}, got {args[lanes]}")


#: The ops whose bf16 form :func:`bf16_form` knows.
BF16_FORMS = ("conv2d", "conv2d_nchwc", "conv2d_nchwc_general", "dense", "matmul", "dense_pack", "batch_matmul")


def bf16_form(op: str, args: dict[str, int]) -> tuple[str, dict[str, int]]:
    """The bf16 op of ``op`` and its shape: the blocked conv2d and the packed dense a model's
    bf16 build runs (plain ``conv2d`` blocked by 16, else 8; ``dense`` / ``matmul`` packed by 16,
    else 8); OpError for an op without one."""
    from .ops import OpError

    if op.endswith("_bf16"):
        return op, dict(args)
    if op in ("conv2d_nchwc", "conv2d_nchwc_general"):
        return op + "_bf16", dict(args)
    if op == "dense_pack":
        return "dense_pack_bf16", dict(args)
    if op in ("dense", "matmul"):
        nb = next((b for b in (16, 8) if args["N"] % b == 0), 16)
        return "dense_pack_bf16", {"M": args["M"], "N": args["N"], "K": args["K"], "NB": nb}
    if op == "batch_matmul":
        nb = next((b for b in (16, 8) if args["N"] % b == 0), 16)
        return "batch_matmul_bf16", {**args, "NB": nb}
    if op == "conv2d":
        b = next((b for b in (16, 8) if args["IC"] % b == 0 and args["OC"] % b == 0), 16)
        return "conv2d_nchwc_bf16", {**args, "IB": b, "OB": b}
    raise OpError(f"{op} has no bf16 form; bf16 runs {', '.join(BF16_FORMS)} (and their _bf16 ops)")
