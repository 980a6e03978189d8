"""Operator definitions: TE compute, argument checks, FLOPs, numpy reference, features.

Each op is an :class:`OpDef` in :data:`OPS`, reachable by its short name. Shapes follow
``bench/workloads.json``: NCHW for convolutions (batch 1), ``C[M,N] = A[M,K] x B[K,N]``
for matmul, ``B`` given as ``[N,K]`` for dense, ``A[b,M,K] x B[b,K,N]`` for batch_matmul.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np


class OpError(ValueError):
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
            args[k] = int(v)
        self.check(args)
        return args


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
}


def get_op(name: str) -> OpDef:
    """The op called ``name`` (OpError naming the known ones otherwise)."""
    try:
        return OPS[name]
    except KeyError:
        raise OpError(f"unknown op {name!r}; known ops: {', '.join(OPS)}") from None
