"""Channel counts padded up to the layout block (part of the layout plan).

A convolution runs blocked (``NCHW{b}c``) only when the block divides its channels. Models are
full of counts no vector block divides: MobileNetV2's 24, ShuffleNetV2's 58, 116 and 232.
Rather than keep those layers in NCHW (a slow kernel and a layout transform on each side) or
shrink the whole model's block, the plan pads such a count up to the next multiple of the
block, when that adds at most a third (:data:`MAX_WASTE`): the convolution producing it gets
zero output channels (zero weights, zero bias), every convolution reading it gets zero input
weights for them, so the real channels are computed exactly as before. The padded tensor flows
through what works channel by channel (depthwise convolutions, per-channel constants, unary
activations, residual adds, pooling, resizing); anything else (a reshape, a concat, a matmul, the
model's output) first gets the real channels back by a ``strided_slice``.

Padded channels hold finite values only (zeros, then finite functions of them: the constants
padded for them are zeros, or ones for a divisor), so a zero weight never meets an infinity or
a NaN. A convolution whose input no other convolution pads (a channel split, say) gets its
input padded by ``nn.pad`` when its own channels are padded.

Grouped convolutions whose groups are narrower than the block (ResNeXt's 4 and 8 channels)
get their groups widened to the block instead (:func:`widen_groups`), so they run blocked too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .prepack import static_shape as _shape
from .relaxrewrite import conv_out_dtype

#: A count is padded only when the padded count is at most this many times the count.
MAX_WASTE = 4.0 / 3.0

#: Unary ops that compute each element alone and map finite values to finite values.
_UNARY = frozenset({"relax.nn.relu", "relax.nn.silu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.sigmoid",
                    "relax.tanh", "relax.clip", "relax.nn.leakyrelu", "relax.negative", "relax.abs"})
#: Binary elementwise ops (padded constants: 0, or 1 for the divisor of ``divide``).
_BINARY = frozenset({"relax.add", "relax.subtract", "relax.multiply", "relax.maximum", "relax.minimum",
                     "relax.divide"})
#: Pooling and resizing over each channel alone (an HRNet's upsampled branches: unpadded, each
#: fusion sum sliced its other branches back to the real channels and padded them again).
_POOL = frozenset({"relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d",
                   "relax.image.resize2d"})


def padded_count(c: int, block: int) -> int:
    """``c`` rounded up to the block, or ``c`` itself when that wastes more than :data:`MAX_WASTE`
    (or ``c`` is below one block: a stem's 3 channels are read as one block instead)."""
    if block <= 0 or c % block == 0 or c < block:
        return c
    p = -(-c // block) * block
    return p if p <= MAX_WASTE * c else c


@dataclass
class PadResult:
    """What :func:`pad_channels` did."""

    padded: dict[int, int]  # channel count -> padded count, for every count it padded
    slices: int = 0  # strided_slice calls added to give ops the real channels back
    widened: int = 0  # grouped convolutions whose groups were widened to the block (widen_groups)
    note: str = ""  # why nothing was padded, if padding was given up


def widened_groups(ic: int, oc: int, groups: int, block: int) -> int:
    """The groups a grouped convolution runs with under ``block``: ``ic / block`` when its groups
    are narrower than the block, as wide in as out, and a whole number of them fills each block
    (ResNeXt's 4 and 8 channels, RegNet's 8 under a block of 16), else ``groups`` unchanged."""
    gw = ic // groups
    if groups <= 1 or gw * groups != ic or oc != ic or gw >= block or block % gw or ic % block:
        return groups
    return ic // block


def widen_groups(w: np.ndarray, groups: int, block: int) -> np.ndarray:
    """A grouped weight ``[OC, gw, KH, KW]`` as the block-diagonal weight of ``IC / block`` groups,
    ``[OC, block, KH, KW]``: each output channel keeps its own group's weights at its group's
    place inside its block and zeros elsewhere, so the groups of one block run as one group and
    compute exactly what they did (at ``block / gw`` times the multiply-adds)."""
    oc, gw = w.shape[:2]
    out = np.zeros((oc, block, *w.shape[2:]), w.dtype)
    for o in range(oc):
        start = (o // gw) * gw % block  # the group's first input channel inside its block
        out[o, start:start + gw] = w[o]
    return out


def _pad_axis(a: np.ndarray, axis: int, to: int, value: float = 0.0) -> np.ndarray:
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, to - a.shape[axis])
    return np.pad(a, widths, constant_values=value)


def pad_channels(mod: Any, block: int) -> tuple[Any, PadResult]:
    """``mod`` (NCHW, constants folded) with channel counts padded to ``block`` where
    :func:`padded_count` says so, and what was done. ``main``'s signature never changes: if it
    would (a padded tensor returned), nothing is padded and the note says why."""
    from tvm import relax
    from tvm.ir.expr import Constant
    from tvm.relax.expr_functor import PyExprMutator, mutator

    result = PadResult({})
    if block <= 0:
        return mod, result

    @mutator
    class _Pad(PyExprMutator):  # type: ignore[misc]
        def const_of(self, e: Any) -> Any:
            if isinstance(e, Constant):
                return e
            if isinstance(e, relax.Var):
                bound = self.lookup_binding(e)
                return bound if isinstance(bound, Constant) else None
            return None

        def unpad(self, new: Any, old: Any) -> Any:
            """``new`` with its real channels only (``old`` is the expression it replaced)."""
            if isinstance(new, relax.Tuple) and isinstance(old, relax.Tuple):
                return relax.Tuple([self.unpad(n, o) for n, o in zip(new.fields, old.fields)])
            ns, os_ = _shape(new), _shape(old)
            if ns is None or os_ is None or ns == os_:
                return new
            result.slices += 1
            return self.builder_.emit(relax.op.strided_slice(new, axes=[1], begin=[0], end=[os_[1]]))

        def pad_input(self, x: Any, to: int) -> Any:
            """``x`` (an input no convolution padded) with zero channels up to ``to``."""
            return self.builder_.emit(relax.op.nn.pad(x, [0, 0, 0, to - _shape(x)[1], 0, 0, 0, 0]))

        def padded(self, new: Any, old: Any) -> bool:
            ns, os_ = _shape(new), _shape(old)
            return ns is not None and os_ is not None and len(ns) == 4 and ns != os_

        def visit_call_(self, call: Any) -> Any:  # noqa: N802 - TVM's visitor name
            # the arguments by hand: rebuilding the call with a padded argument before the
            # constants beside it are padded would fail shape inference
            new = relax.Call(call.op, [self.visit_expr(a) for a in call.args], call.attrs, call.ty_args)
            name = getattr(new.op, "name", "")
            if not name:  # a call of a function: only its real channels
                return relax.Call(new.op, [self.unpad(n, o) for n, o in zip(new.args, call.args)], new.attrs,
                                  new.ty_args)
            if name == "relax.nn.conv2d":
                out = self.conv(new, call)
                if out is not None:
                    return out
            elif name in _UNARY or name in _POOL:
                if not call.args or _shape(new.args[0]) is None or len(_shape(new.args[0])) == 4:
                    return new
            elif name in _BINARY:
                out = self.binary(new, call)
                if out is not None:
                    return out
            args = [self.unpad(n, o) for n, o in zip(new.args, call.args)]
            return relax.Call(new.op, args, new.attrs, new.ty_args)

        def conv(self, new: Any, old: Any) -> Any:
            a = new.attrs
            if (str(a.data_layout), str(a.kernel_layout)) != ("NCHW", "OIHW") or str(a.out_layout) not in ("NCHW", ""):
                return None
            w = self.const_of(new.args[1])
            xs, os_ = _shape(new.args[0]), _shape(old.args[0])
            if w is None or xs is None or os_ is None or str(w.value.dtype) != "float32":
                return None
            wv = w.value.numpy()
            x = new.args[0]
            oc, icg = wv.shape[0], wv.shape[1]
            groups = int(a.groups)
            if groups == 1:
                ic = os_[1]
                ic_to = xs[1] if xs[1] != ic else padded_count(ic, block)
                oc_to = padded_count(oc, block)
                if ic_to == xs[1] == ic and oc_to == oc:
                    return None
                if xs[1] == ic and ic_to != ic:
                    x = self.pad_input(x, ic_to)
                wv = _pad_axis(_pad_axis(wv, 1, ic_to), 0, oc_to)
            elif groups == os_[1] == oc and icg == 1:  # depthwise: follows its input's padding
                groups = xs[1] if xs[1] != oc else padded_count(oc, block)
                if groups == oc:
                    return None
                if xs[1] == oc:
                    x = self.pad_input(x, groups)
                wv = _pad_axis(wv, 0, groups)
            elif xs[1] == os_[1] and widened_groups(os_[1], oc, groups, block) != groups:
                wv, groups = widen_groups(wv, groups, block), os_[1] // block
                result.widened += 1
                return relax.op.nn.conv2d(x, relax.const(wv), a.strides, a.padding, a.dilation, groups, "NCHW",
                                          "OIHW", "NCHW", conv_out_dtype(a))
            else:
                return None
            for c, p in ((os_[1], wv.shape[1] * groups), (oc, wv.shape[0])):
                if p != c:
                    result.padded[c] = p
            return relax.op.nn.conv2d(x, relax.const(wv), a.strides, a.padding, a.dilation, groups, "NCHW", "OIHW",
                                      "NCHW", conv_out_dtype(a))

        def binary(self, new: Any, old: Any) -> Any:
            pads = [self.padded(n, o) for n, o in zip(new.args, old.args)]
            if not any(pads):
                return None
            to = next(_shape(n)[1] for n, p in zip(new.args, pads) if p)
            divide = getattr(new.op, "name", "") == "relax.divide"
            args = []
            for i, (n, o, p) in enumerate(zip(new.args, old.args, pads)):
                if p:
                    if _shape(n)[1] != to:
                        return None
                    if divide and i == 1:
                        return None  # a padded divisor could be zero
                    args.append(n)
                    continue
                s = _shape(n)
                c = self.const_of(n)
                axis = len(s) - 3 if s is not None else -1
                if s is None or axis < 0 or s[axis] == 1:
                    args.append(n)  # no channel axis in it: it broadcasts over the padding too
                elif c is not None and s[axis] == _shape(o)[axis]:
                    fill = 1.0 if divide and i == 1 else 0.0
                    args.append(relax.const(_pad_axis(c.value.numpy(), axis, to, fill)))
                else:
                    return None  # an unpadded activation: the generic path slices the other side
            return relax.Call(new.op, args, new.attrs, new.ty_args)

    main = mod["main"]
    out = mod.clone() if hasattr(mod, "clone") else mod
    padder = _Pad(out)
    gv = out.get_global_var("main")
    new_main = padder.visit_expr(main)
    if str(new_main.body.ty) != str(main.body.ty):
        return mod, PadResult({}, note="padding would change the model's output")
    padder.builder_.update_func(gv, new_main)
    out = padder.builder_.get()
    return relax.transform.DeadCodeElimination()(relax.transform.Normalize()(out)), result
