"""Operator definitions: TE compute, argument checks, FLOPs, numpy reference, features.

Each op is an :class:`OpDef` in :data:`OPS`, reachable by its short name. Shapes follow
``bench/workloads.json``: NCHW for convolutions (batch 1), ``C[M,N] = A[M,K] x B[K,N]``
for matmul, ``B`` given as ``[N,K]`` for dense, ``A[b,M,K] x B[b,K,N]`` for batch_matmul;
``dense_pack`` is a model's matmul with a constant weight packed at compile time as
``[N/NB, K, NB]`` (:func:`dense_pack_te`, :func:`pack_weight`). ``conv2d_nchwc_bf16``,
``dense_pack_bf16`` and ``batch_matmul_bf16`` are their bf16 forms (:mod:`.ops_bf16`).

The blocked convolutions are the forms a model's layout plan gives them
(:mod:`tensortune.models.layout`): ``conv2d_nchwc`` reads data ``[1, IC/IB, H, W, IB]`` and a
weight packed once at compile time as ``[OC/OB, IC/IB, K, K, IB, OB]`` (``OIHW{IB}i{OB}o``)
and writes ``[1, OC/OB, OH, OW, OB]``; ``depthwise_conv2d_nchwc`` reads ``[1, C/B, H, W, B]``
and ``[C/B, 1, K, K, 1, B]`` (``OIHW1i{B}o``). Their ``_general`` forms take any kernel (1xk, kx1),
stride, padding (top, left, bottom, right) and dilation, and the conv2d one groups of channel
blocks; a model's plain convolutions keep the plain ops (and their tuning records). The same TE computes serve the model's
legalization (:func:`conv2d_nchwc_te`, :func:`depthwise_nchwc_te`), so a standalone task and a
model's function are one computation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import TensortuneError
from ..limits import MAX_EXTENT, MAX_TENSOR_ELEMENTS
from . import ops_bf16


class OpError(TensortuneError, ValueError):
    """Bad op name or shape arguments (one-line message)."""


@dataclass(frozen=True)
class OpDef:
    """Everything tensortune knows about one operator."""

    name: str
    arg_names: tuple[str, ...]
    template: str  # default template name
    kernel_class: str
    compute: Callable[[dict[str, int]], list]  # args -> TE tensors (inputs..., output)
    flops: Callable[[dict[str, int]], float]
    reference: Callable[[dict[str, int], Sequence[np.ndarray]], np.ndarray]
    check: Callable[[dict[str, int]], None]

    def parse_args(self, values: Sequence[int] | dict[str, int]) -> dict[str, int]:
        """Validate shape values (positional in ``arg_names`` order, or a dict)."""
        if isinstance(values, dict):
            missing = [a for a in self.arg_names if a not in values]
            extra = [a for a in values if a not in self.arg_names]
            if missing or extra:
                raise OpError(f"{self.name} takes shape {','.join(self.arg_names)}; missing {missing}, unexpected {extra}")
            args = {a: values[a] for a in self.arg_names}
        else:
            if len(values) != len(self.arg_names):
                raise OpError(f"{self.name} takes {len(self.arg_names)} shape values "
                              f"({','.join(self.arg_names)}), got {len(values)}")
            args = dict(zip(self.arg_names, values))
        for k, v in args.items():
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise OpError(f"{self.name}: shape value {k}={v!r} is not an integer")
            if abs(int(v)) > MAX_EXTENT:
                raise OpError(f"{self.name}: shape value {k}={v} is out of range (at most {MAX_EXTENT})")
            args[k] = int(v)
        self.check(args)
        self._check_sizes(args)
        return args

    def _check_sizes(self, args: dict[str, int]) -> None:
        """OpError when a tensor of the op would hold more than :data:`MAX_TENSOR_ELEMENTS`
        elements (shapes read from the TE computation, which allocates nothing)."""
        for t in self.compute(args):
            shape = [int(d) for d in t.shape]
            if math.prod(shape) > MAX_TENSOR_ELEMENTS:
                raise OpError(f"{self.name}: tensor {t.op.name} of shape {'x'.join(map(str, shape))} has "
                              f"{math.prod(shape):.3g} elements, over the {MAX_TENSOR_ELEMENTS:.3g} a tensor may have")


def _positive(args: dict[str, int], names: Sequence[str]) -> None:
    for n in names:
        if args[n] <= 0:
            raise OpError(f"shape value {n}={args[n]} must be positive")


def conv_out(size: int, k: int, s: int, p: int) -> int:
    """Output extent of a convolution along one axis."""
    return (size + 2 * p - k) // s + 1


# ---------------------------------------------------------------- GEMMs
def _gemm_check(names: Sequence[str]) -> Callable[[dict[str, int]], None]:
    return lambda a: _positive(a, names)


def _matmul_compute(args: dict[str, int]) -> list:
    from tvm import te

    M, N, K = args["M"], args["N"], args["K"]
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def _dense_compute(args: dict[str, int]) -> list:
    from tvm import te

    M, N, K = args["M"], args["N"], args["K"]
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((N, K), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    return [A, B, C]


def _bmm_compute(args: dict[str, int]) -> list:
    from tvm import te

    Bt, M, N, K = args["B"], args["M"], args["N"], args["K"]
    A = te.placeholder((Bt, M, K), name="A")
    B = te.placeholder((Bt, K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    return [A, B, C]


def dense_pack_te(data: "te.Tensor", packed: "te.Tensor", out_dtype: str = "float32") -> "te.Tensor":
    """``data[..., K] x W`` with the weight ``W[K, N]`` packed once as ``[N/NB, K, NB]``
    (:func:`pack_weight`): the columns of one block are contiguous along the reduction."""
    from tvm import te

    nbo, K, NB = (int(d) for d in packed.shape)
    lead = [int(d) for d in data.shape[:-1]]
    k = te.reduce_axis((0, K), name="k")
    return te.compute(
        (*lead, nbo * NB),
        lambda *idx: te.sum(data[(*idx[:-1], k)].astype(out_dtype)
                            * packed[idx[-1] // NB, k, idx[-1] % NB].astype(out_dtype), axis=k),
        name="dense_pack",
    )


def pack_weight(w_kn: np.ndarray, nb: int) -> np.ndarray:
    """``W[K, N]`` -> ``[N/nb, K, nb]`` (the weight layout of ``dense_pack``)."""
    K, N = w_kn.shape
    return np.ascontiguousarray(w_kn.reshape(K, N // nb, nb).transpose(1, 0, 2))


def unpack_weight(packed: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_weight`."""
    nbo, K, nb = packed.shape
    return packed.transpose(1, 0, 2).reshape(K, nbo * nb)


def _dense_pack_compute(args: dict[str, int]) -> list:
    from tvm import te

    M, N, K, NB = args["M"], args["N"], args["K"], args["NB"]
    A = te.placeholder((M, K), name="A")
    Bp = te.placeholder((N // NB, K, NB), name="B")
    return [A, Bp, dense_pack_te(A, Bp)]


# ---------------------------------------------------------------- convolutions
def _conv_check(args: dict[str, int], chan: Sequence[str]) -> None:
    _positive(args, ["H", "W", *chan, "K", "S"])
    if args["P"] < 0:
        raise OpError(f"padding P={args['P']} must be >= 0")
    if args["K"] > args["H"] + 2 * args["P"] or args["K"] > args["W"] + 2 * args["P"]:
        raise OpError(f"kernel K={args['K']} is larger than the padded input "
                      f"({args['H'] + 2 * args['P']}x{args['W'] + 2 * args['P']})")


def _conv2d_compute(args: dict[str, int]) -> list:
    from tvm import te, topi

    H, W, IC, OC, K, S, P = (args[n] for n in ("H", "W", "IC", "OC", "K", "S", "P"))
    OH, OW = conv_out(H, K, S, P), conv_out(W, K, S, P)
    data = te.placeholder((1, IC, H, W), name="data")
    kernel = te.placeholder((OC, IC, K, K), name="kernel")
    pad = topi.nn.pad(data, [0, 0, P, P], [0, 0, P, P], name="pad") if P else data
    rc = te.reduce_axis((0, IC), name="rc")
    ry = te.reduce_axis((0, K), name="ry")
    rx = te.reduce_axis((0, K), name="rx")
    out = te.compute(
        (1, OC, OH, OW),
        lambda n, f, y, x: te.sum(pad[n, rc, y * S + ry, x * S + rx] * kernel[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv",
    )
    return [data, kernel, out]


def _dw_compute(args: dict[str, int]) -> list:
    from tvm import te, topi

    H, W, C, K, S, P = (args[n] for n in ("H", "W", "C", "K", "S", "P"))
    OH, OW = conv_out(H, K, S, P), conv_out(W, K, S, P)
    data = te.placeholder((1, C, H, W), name="data")
    kernel = te.placeholder((C, 1, K, K), name="kernel")
    pad = topi.nn.pad(data, [0, 0, P, P], [0, 0, P, P], name="pad") if P else data
    ry = te.reduce_axis((0, K), name="ry")
    rx = te.reduce_axis((0, K), name="rx")
    out = te.compute(
        (1, C, OH, OW),
        lambda n, c, y, x: te.sum(pad[n, c, y * S + ry, x * S + rx] * kernel[c, 0, ry, rx], axis=[ry, rx]),
        name="conv",
    )
    return [data, kernel, out]


def conv2d_nchwc_te(data: "te.Tensor", kernel: "te.Tensor", S: int, P: int, out_dtype: str = "float32") -> "te.Tensor":
    """Blocked conv2d: data ``[1, IC/IB, H, W, IB]``, kernel ``[OC/OB, IC/IB, K, K, IB, OB]``."""
    from tvm import te, topi

    _, ICo, H, W, IB = (int(d) for d in data.shape)
    OCo, _, K, _, _, OB = (int(d) for d in kernel.shape)
    OH, OW = conv_out(H, K, S, P), conv_out(W, K, S, P)
    pad = topi.nn.pad(data, [0, 0, P, P, 0], [0, 0, P, P, 0], name="pad") if P else data
    rco = te.reduce_axis((0, ICo), name="rco")
    ry = te.reduce_axis((0, K), name="ry")
    rx = te.reduce_axis((0, K), name="rx")
    rci = te.reduce_axis((0, IB), name="rci")
    return te.compute(
        (1, OCo, OH, OW, OB),
        lambda n, fo, y, x, fi: te.sum(
            pad[n, rco, y * S + ry, x * S + rx, rci].astype(out_dtype) * kernel[fo, rco, ry, rx, rci, fi].astype(out_dtype),
            axis=[rco, ry, rx, rci]),
        name="conv_nchwc",
    )


def depthwise_nchwc_te(data: "te.Tensor", kernel: "te.Tensor", S: int, P: int, out_dtype: str = "float32") -> "te.Tensor":
    """Blocked depthwise conv2d: data ``[1, C/B, H, W, B]``, kernel ``[C/B, 1, K, K, 1, B]``."""
    from tvm import te, topi

    _, Co, H, W, B = (int(d) for d in data.shape)
    K = int(kernel.shape[2])
    OH, OW = conv_out(H, K, S, P), conv_out(W, K, S, P)
    pad = topi.nn.pad(data, [0, 0, P, P, 0], [0, 0, P, P, 0], name="pad") if P else data
    ry = te.reduce_axis((0, K), name="ry")
    rx = te.reduce_axis((0, K), name="rx")
    return te.compute(
        (1, Co, OH, OW, B),
        lambda n, c, y, x, ci: te.sum(
            pad[n, c, y * S + ry, x * S + rx, ci].astype(out_dtype) * kernel[c, 0, ry, rx, 0, ci].astype(out_dtype),
            axis=[ry, rx]),
        name="dw_nchwc",
    )


#: Shape arguments of :func:`conv2d_nchwc_general_te`'s op: any kernel, stride, padding (top, left,
#: bottom, right), dilation and groups (``G``: groups of channel blocks, each ``IC/G`` in, ``OC/G`` out).
GENERAL_CONV_ARGS = ("H", "W", "IC", "OC", "KH", "KW", "SH", "SW", "PT", "PL", "PB", "PR", "DH", "DW", "G", "IB", "OB")


def general_conv_out(a: dict[str, int]) -> tuple[int, int]:
    """Output height and width of a ``conv2d_nchwc_general`` (any padding, stride, dilation)."""
    oh = (a["H"] + a["PT"] + a["PB"] - (a["KH"] - 1) * a["DH"] - 1) // a["SH"] + 1
    ow = (a["W"] + a["PL"] + a["PR"] - (a["KW"] - 1) * a["DW"] - 1) // a["SW"] + 1
    return oh, ow


def _padded_window(data: "te.Tensor", kernel: "te.Tensor", strides: Sequence[int], padding: Sequence[int],
                   dilation: Sequence[int]) -> tuple[Any, int, int, Any, Any]:
    """The general blocked convolutions' common part: (padded data, OH, OW, kernel-row and
    kernel-column reduction axes)."""
    from tvm import te, topi

    _, _, H, W, _ = (int(d) for d in data.shape)
    KH, KW = int(kernel.shape[2]), int(kernel.shape[3])
    PT, PL, PB, PR = padding
    OH, OW = general_conv_out({"H": H, "W": W, "KH": KH, "KW": KW, "SH": strides[0], "SW": strides[1], "PT": PT,
                               "PL": PL, "PB": PB, "PR": PR, "DH": dilation[0], "DW": dilation[1]})
    pad = topi.nn.pad(data, [0, 0, PT, PL, 0], [0, 0, PB, PR, 0], name="pad") if any(padding) else data
    return pad, OH, OW, te.reduce_axis((0, KH), name="ry"), te.reduce_axis((0, KW), name="rx")


def conv2d_nchwc_general_te(data: "te.Tensor", kernel: "te.Tensor", strides: Sequence[int], padding: Sequence[int],
                            dilation: Sequence[int], groups: int, out_dtype: str = "float32") -> "te.Tensor":
    """Blocked conv2d of any geometry: data ``[1, IC/IB, H, W, IB]``, kernel
    ``[OC/OB, IC/G/IB, KH, KW, IB, OB]``; ``padding`` is (top, left, bottom, right); output block
    ``fo`` of group ``fo // (OC/G/OB)`` reads that group's ``IC/G/IB`` input blocks."""
    from tvm import te

    OCo, ICgo, _, _, _, OB = (int(d) for d in kernel.shape)
    SH, SW = strides
    DH, DW = dilation
    pad, OH, OW, ry, rx = _padded_window(data, kernel, strides, padding, dilation)
    rco = te.reduce_axis((0, ICgo), name="rco")
    rci = te.reduce_axis((0, int(data.shape[4])), name="rci")
    return te.compute(
        (1, OCo, OH, OW, OB),
        lambda n, fo, y, x, fi: te.sum(
            pad[n, ops_bf16.group_block(fo, rco, groups, OCo // groups, ICgo), y * SH + ry * DH, x * SW + rx * DW,
                rci].astype(out_dtype)
            * kernel[fo, rco, ry, rx, rci, fi].astype(out_dtype), axis=[rco, ry, rx, rci]),
        name="conv_nchwc",
    )


#: Shape arguments of :func:`depthwise_nchwc_general_te`'s op (as :data:`GENERAL_CONV_ARGS`, one channel count).
GENERAL_DW_ARGS = ("H", "W", "C", "KH", "KW", "SH", "SW", "PT", "PL", "PB", "PR", "DH", "DW", "B")


def depthwise_nchwc_general_te(data: "te.Tensor", kernel: "te.Tensor", strides: Sequence[int], padding: Sequence[int],
                               dilation: Sequence[int], out_dtype: str = "float32") -> "te.Tensor":
    """Blocked depthwise conv2d of any geometry: data ``[1, C/B, H, W, B]``, kernel
    ``[C/B, 1, KH, KW, 1, B]``; ``padding`` is (top, left, bottom, right)."""
    from tvm import te

    _, Co, _, _, B = (int(d) for d in data.shape)
    SH, SW = strides
    DH, DW = dilation
    pad, OH, OW, ry, rx = _padded_window(data, kernel, strides, padding, dilation)
    return te.compute(
        (1, Co, OH, OW, B),
        lambda n, c, y, x, ci: te.sum(
            pad[n, c, y * SH + ry * DH, x * SW + rx * DW, ci].astype(out_dtype)
            * kernel[c, 0, ry, rx, 0, ci].astype(out_dtype), axis=[ry, rx]),
        name="dw_nchwc",
    )


def _dw_nchwc_general_compute(args: dict[str, int]) -> list:
    from tvm import te

    a = args
    data = te.placeholder((1, a["C"] // a["B"], a["H"], a["W"], a["B"]), name="data")
    kernel = te.placeholder((a["C"] // a["B"], 1, a["KH"], a["KW"], 1, a["B"]), name="kernel")
    out = depthwise_nchwc_general_te(data, kernel, (a["SH"], a["SW"]), (a["PT"], a["PL"], a["PB"], a["PR"]),
                                     (a["DH"], a["DW"]))
    return [data, kernel, out]


def _general_dw_check(a: dict[str, int]) -> None:
    _positive(a, ["H", "W", "C", "KH", "KW", "SH", "SW", "DH", "DW", "B"])
    if min(a["PT"], a["PL"], a["PB"], a["PR"]) < 0:
        raise OpError("padding must be >= 0")
    _blocks_divide(a, [("C", "B")])
    if min(general_conv_out(a)) < 1:
        raise OpError("the kernel is larger than the padded input")


def _dw_nchwc_general_reference(args: dict[str, int], inputs: Sequence[np.ndarray]) -> np.ndarray:
    a = args
    x = unblock(inputs[0])[0]
    co, _, kh, kw, _, b = inputs[1].shape
    w = inputs[1][:, 0, :, :, 0, :].transpose(0, 3, 1, 2).reshape(co * b, kh, kw)
    x = np.pad(x, ((0, 0), (a["PT"], a["PB"]), (a["PL"], a["PR"])))
    oh, ow = general_conv_out(a)
    out = np.zeros((a["C"], oh, ow), np.float64)
    for ky in range(kh):
        for kx in range(kw):
            out += _window(x, a, ky, kx, oh, ow) * w[:, ky, kx, None, None]
    return block(out[None].astype(np.float32), a["B"])


def _conv2d_nchwc_general_compute(args: dict[str, int]) -> list:
    from tvm import te

    a = args
    data = te.placeholder((1, a["IC"] // a["IB"], a["H"], a["W"], a["IB"]), name="data")
    kernel = te.placeholder((a["OC"] // a["OB"], a["IC"] // a["G"] // a["IB"], a["KH"], a["KW"], a["IB"], a["OB"]),
                            name="kernel")
    out = conv2d_nchwc_general_te(data, kernel, (a["SH"], a["SW"]), (a["PT"], a["PL"], a["PB"], a["PR"]),
                                  (a["DH"], a["DW"]), a["G"])
    return [data, kernel, out]


def _general_conv_check(a: dict[str, int]) -> None:
    _positive(a, ["H", "W", "IC", "OC", "KH", "KW", "SH", "SW", "DH", "DW", "G", "IB", "OB"])
    if min(a["PT"], a["PL"], a["PB"], a["PR"]) < 0:
        raise OpError("padding must be >= 0")
    if a["IC"] % a["G"] or a["OC"] % a["G"]:
        raise OpError(f"channels IC={a['IC']}, OC={a['OC']} not divisible by the groups G={a['G']}")
    _blocks_divide({"ICg": a["IC"] // a["G"], "OCg": a["OC"] // a["G"], "IB": a["IB"], "OB": a["OB"]},
                   [("ICg", "IB"), ("OCg", "OB")])
    if min(general_conv_out(a)) < 1:
        raise OpError("the kernel is larger than the padded input")


def _general_conv_flops(a: dict[str, int]) -> float:
    oh, ow = general_conv_out(a)
    return 2.0 * a["OC"] * oh * ow * (a["IC"] // a["G"]) * a["KH"] * a["KW"]


def _window(x: np.ndarray, a: dict[str, int], ky: int, kx: int, oh: int, ow: int) -> np.ndarray:
    """The ``[C, OH, OW]`` inputs that kernel tap ``(ky, kx)`` meets in padded ``x`` (strides, dilation of ``a``)."""
    y0, x0 = ky * a["DH"], kx * a["DW"]
    return x[:, y0:y0 + (oh - 1) * a["SH"] + 1:a["SH"], x0:x0 + (ow - 1) * a["SW"] + 1:a["SW"]]


def _conv_nchwc_general_reference(args: dict[str, int], inputs: Sequence[np.ndarray]) -> np.ndarray:
    a = args
    x = unblock(inputs[0])[0]
    oco, icgo, kh, kw, ib, ob = inputs[1].shape
    w = inputs[1].transpose(0, 5, 1, 4, 2, 3).reshape(oco * ob, icgo * ib, kh, kw)
    x = np.pad(x, ((0, 0), (a["PT"], a["PB"]), (a["PL"], a["PR"])))
    oh, ow = general_conv_out(a)
    icg, ocg = a["IC"] // a["G"], a["OC"] // a["G"]
    out = np.zeros((a["OC"], oh, ow), np.float64)
    for ky in range(kh):
        for kx in range(kw):
            win = _window(x, a, ky, kx, oh, ow)
            for g in range(a["G"]):
                out[g * ocg:(g + 1) * ocg] += np.einsum("oc,cyx->oyx", w[g * ocg:(g + 1) * ocg, :, ky, kx],
                                                        win[g * icg:(g + 1) * icg])
    return block(out[None].astype(np.float32), a["OB"])


def _conv2d_nchwc_compute(args: dict[str, int]) -> list:
    from tvm import te

    H, W, IC, OC, K, IB, OB = (args[n] for n in ("H", "W", "IC", "OC", "K", "IB", "OB"))
    data = te.placeholder((1, IC // IB, H, W, IB), name="data")
    kernel = te.placeholder((OC // OB, IC // IB, K, K, IB, OB), name="kernel")
    return [data, kernel, conv2d_nchwc_te(data, kernel, args["S"], args["P"])]


def _dw_nchwc_compute(args: dict[str, int]) -> list:
    from tvm import te

    H, W, C, K, B = (args[n] for n in ("H", "W", "C", "K", "B"))
    data = te.placeholder((1, C // B, H, W, B), name="data")
    kernel = te.placeholder((C // B, 1, K, K, 1, B), name="kernel")
    return [data, kernel, depthwise_nchwc_te(data, kernel, args["S"], args["P"])]


def unblock(x: np.ndarray) -> np.ndarray:
    """``[N, C/b, H, W, b]`` -> ``[N, C, H, W]``."""
    n, co, h, w, b = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, co * b, h, w)


def block(x: np.ndarray, b: int) -> np.ndarray:
    """``[N, C, H, W]`` -> ``[N, C/b, H, W, b]``."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _conv_nchwc_reference(args: dict[str, int], inputs: Sequence[np.ndarray]) -> np.ndarray:
    data, kernel = unblock(inputs[0]), inputs[1]
    oco, ico, k, _, ib, ob = kernel.shape
    w = kernel.transpose(0, 5, 1, 4, 2, 3).reshape(oco * ob, ico * ib, k, k)
    return block(_conv_reference(args, [data, w], groups=False), args["OB"])


def _dw_nchwc_reference(args: dict[str, int], inputs: Sequence[np.ndarray]) -> np.ndarray:
    data, kernel = unblock(inputs[0]), inputs[1]
    co, _, k, _, _, b = kernel.shape
    w = kernel[:, 0, :, :, 0, :].transpose(0, 3, 1, 2).reshape(co * b, 1, k, k)
    return block(_conv_reference(args, [data, w], groups=True), args["B"])


def _blocks_divide(args: dict[str, int], pairs: Sequence[tuple[str, str]]) -> None:
    for c, b in pairs:
        if args[c] % args[b]:
            raise OpError(f"channel count {c}={args[c]} is not a multiple of its block {b}={args[b]}")


def _conv_reference(args: dict[str, int], inputs: Sequence[np.ndarray], groups: bool) -> np.ndarray:
    data, kernel = inputs[0][0], inputs[1]
    K, S, P = args["K"], args["S"], args["P"]
    x = np.pad(data, ((0, 0), (P, P), (P, P)))
    win = np.lib.stride_tricks.sliding_window_view(x, (K, K), axis=(1, 2))[:, ::S, ::S]  # C,OH,OW,K,K
    if groups:
        out = np.einsum("cyxhw,chw->cyx", win, kernel[:, 0], optimize=True)
    else:
        C, OH, OW = win.shape[:3]
        cols = win.transpose(1, 2, 0, 3, 4).reshape(OH * OW, -1)  # (OH*OW, C*K*K)
        out = (kernel.reshape(kernel.shape[0], -1) @ cols.T).reshape(-1, OH, OW)
    return out[None].astype(np.float32)


OPS: dict[str, OpDef] = {
    "matmul": OpDef(
        "matmul", ("M", "N", "K"), "gemm", "matmul", _matmul_compute,
        lambda a: 2.0 * a["M"] * a["N"] * a["K"],
        lambda a, x: x[0] @ x[1], _gemm_check(("M", "N", "K")),
    ),
    "dense": OpDef(
        "dense", ("M", "N", "K"), "gemm", "dense", _dense_compute,
        lambda a: 2.0 * a["M"] * a["N"] * a["K"],
        lambda a, x: x[0] @ x[1].T, _gemm_check(("M", "N", "K")),
    ),
    "dense_pack": OpDef(
        "dense_pack", ("M", "N", "K", "NB"), "dense_pack", "dense_pack", _dense_pack_compute,
        lambda a: 2.0 * a["M"] * a["N"] * a["K"],
        lambda a, x: x[0] @ unpack_weight(x[1]),
        lambda a: (_positive(a, ("M", "N", "K", "NB")), _blocks_divide(a, [("N", "NB")])),
    ),
    "batch_matmul": OpDef(
        "batch_matmul", ("B", "M", "N", "K"), "gemm", "batch_matmul", _bmm_compute,
        lambda a: 2.0 * a["B"] * a["M"] * a["N"] * a["K"],
        lambda a, x: np.matmul(x[0], x[1]), _gemm_check(("B", "M", "N", "K")),
    ),
    "conv2d": OpDef(
        "conv2d", ("H", "W", "IC", "OC", "K", "S", "P"), "conv2d", "conv2d", _conv2d_compute,
        lambda a: 2.0 * a["OC"] * conv_out(a["H"], a["K"], a["S"], a["P"]) * conv_out(a["W"], a["K"], a["S"], a["P"]) * a["IC"] * a["K"] ** 2,
        lambda a, x: _conv_reference(a, x, groups=False), lambda a: _conv_check(a, ["IC", "OC"]),
    ),
    "depthwise_conv2d": OpDef(
        "depthwise_conv2d", ("H", "W", "C", "K", "S", "P"), "depthwise_conv2d", "depthwise_conv2d", _dw_compute,
        lambda a: 2.0 * a["C"] * conv_out(a["H"], a["K"], a["S"], a["P"]) * conv_out(a["W"], a["K"], a["S"], a["P"]) * a["K"] ** 2,
        lambda a, x: _conv_reference(a, x, groups=True), lambda a: _conv_check(a, ["C"]),
    ),
    "conv2d_nchwc": OpDef(
        "conv2d_nchwc", ("H", "W", "IC", "OC", "K", "S", "P", "IB", "OB"), "conv2d_nchwc", "conv2d_nchwc",
        _conv2d_nchwc_compute,
        lambda a: 2.0 * a["OC"] * conv_out(a["H"], a["K"], a["S"], a["P"]) * conv_out(a["W"], a["K"], a["S"], a["P"]) * a["IC"] * a["K"] ** 2,
        _conv_nchwc_reference,
        lambda a: (_conv_check(a, ["IC", "OC", "IB", "OB"]), _blocks_divide(a, [("IC", "IB"), ("OC", "OB")])),
    ),
    "conv2d_nchwc_bf16": OpDef(
        "conv2d_nchwc_bf16", ("H", "W", "IC", "OC", "K", "S", "P", "IB", "OB"), "conv2d_nchwc_bf16",
        "conv2d_nchwc_bf16", ops_bf16.conv2d_nchwc_bf16_compute,
        lambda a: 2.0 * a["OC"] * conv_out(a["H"], a["K"], a["S"], a["P"]) * conv_out(a["W"], a["K"], a["S"], a["P"]) * a["IC"] * a["K"] ** 2,
        ops_bf16.conv2d_nchwc_bf16_reference,
        lambda a: (_conv_check(a, ["IC", "OC", "IB", "OB"]), _blocks_divide(a, [("IC", "IB"), ("OC", "OB")]),
                   ops_bf16.check_pairs(a, "IB", "OB", amx_block=True)),
    ),
    "conv2d_nchwc_general_bf16": OpDef(
        "conv2d_nchwc_general_bf16", GENERAL_CONV_ARGS, "conv2d_nchwc_general_bf16", "conv2d_nchwc_general_bf16",
        ops_bf16.conv2d_nchwc_general_bf16_compute, _general_conv_flops, ops_bf16.conv2d_nchwc_general_bf16_reference,
        lambda a: (_general_conv_check(a), ops_bf16.check_pairs(a, "IB", "OB", amx_block=True)),
    ),
    "dense_pack_bf16": OpDef(
        "dense_pack_bf16", ("M", "N", "K", "NB"), "dense_pack_bf16", "dense_pack_bf16", ops_bf16.dense_pack_bf16_compute,
        lambda a: 2.0 * a["M"] * a["N"] * a["K"],
        ops_bf16.dense_pack_bf16_reference,
        lambda a: (_positive(a, ("M", "N", "K", "NB")), _blocks_divide(a, [("N", "NB")]), ops_bf16.check_pairs(a, "K", "NB")),
    ),
    "batch_matmul_bf16": OpDef(
        "batch_matmul_bf16", ("B", "M", "N", "K", "NB"), "batch_matmul_bf16", "batch_matmul_bf16",
        ops_bf16.batch_matmul_bf16_compute, lambda a: 2.0 * a["B"] * a["M"] * a["N"] * a["K"],
        ops_bf16.batch_matmul_bf16_reference,
        lambda a: (_positive(a, ("B", "M", "N", "K", "NB")), _blocks_divide(a, [("N", "NB")]),
                   ops_bf16.check_pairs(a, "K", "NB")),
    ),
    "conv2d_nchwc_general": OpDef(
        "conv2d_nchwc_general", GENERAL_CONV_ARGS, "conv2d_nchwc_general", "conv2d_nchwc_general",
        _conv2d_nchwc_general_compute, _general_conv_flops, _conv_nchwc_general_reference, _general_conv_check,
    ),
    "depthwise_conv2d_nchwc_general": OpDef(
        "depthwise_conv2d_nchwc_general", GENERAL_DW_ARGS, "depthwise_conv2d_nchwc_general",
        "depthwise_conv2d_nchwc_general", _dw_nchwc_general_compute,
        lambda a: 2.0 * a["C"] * np.prod(general_conv_out(a)) * a["KH"] * a["KW"],
        _dw_nchwc_general_reference, _general_dw_check,
    ),
    "depthwise_conv2d_nchwc": OpDef(
        "depthwise_conv2d_nchwc", ("H", "W", "C", "K", "S", "P", "B"), "depthwise_conv2d_nchwc",
        "depthwise_conv2d_nchwc", _dw_nchwc_compute,
        lambda a: 2.0 * a["C"] * conv_out(a["H"], a["K"], a["S"], a["P"]) * conv_out(a["W"], a["K"], a["S"], a["P"]) * a["K"] ** 2,
        _dw_nchwc_reference,
        lambda a: (_conv_check(a, ["C", "B"]), _blocks_divide(a, [("C", "B")])),
    ),
}


def get_op(name: str) -> OpDef:
    """The op called ``name`` (OpError naming the known ones otherwise)."""
    try:
        return OPS[name]
    except KeyError:
        raise OpError(f"unknown op {name!r}; known ops: {', '.join(OPS)}") from None
