"""Channel counts padded to the layout block, and channel splits kept on block boundaries.

A convolution runs blocked (``NCHW{b}c``) only when the block divides its channels, and a channel
slice or concat stays in the block only where its channels start on block boundaries. Models are
full of counts no vector block divides (MobileNetV2's 24, ShuffleNetV2's 58) and of splits that
fall inside a block (a Res2Net's 26-wide parts, a mixed-kernel network's 180-wide parts, a ghost
module's two 12-channel halves). So each 4-D tensor gets a *channel map*: where its real channels
sit in a channel axis that may be wider (:class:`ChanMap`). A convolution writes its output
channels where the map says (zero weights and bias elsewhere) and reads its input through the map
(zero weights for the other channels), so the real channels are computed exactly as before:

- a convolution's output is its channels padded up to the block (:func:`padded_count`), or, when
  its output is sliced or split on the channel axis (through per-channel ops), each part padded to
  the block at a block boundary, so that every part is a block-aligned slice;
- depthwise convolutions, per-channel constants, unary activations, pooling, resizing and
  elementwise ops of two tensors with the same map keep the map; a concat concatenates the maps;
- a channel slice keeps the blocks that hold its channels (no copy when that is all of them);
- a residual sum of two different maps asks the convolution behind one operand (through per-channel
  ops used nowhere else) to write the other's map, and the rewrite runs again;
- anything else (a reshape, a matmul, the model's output) first gets the real channels back.

Channels outside the map hold finite values only (zeros, finite functions of them, or real
channels of a slice's neighbour), so a zero weight never meets an infinity or a NaN.

Grouped convolutions whose groups are narrower than the block (ResNeXt's 4 and 8 channels)
get their groups widened to the block instead (:func:`widen_groups`), so they run blocked too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .channels import POOLS, RESIZE, slice_ints, splits_as_slices
from .prepack import static_shape as _shape
from .relaxrewrite import conv_out_dtype

#: A count is padded only when the padded count is at most this many times the count.
MAX_WASTE = 4.0 / 3.0
#: Rewrites of ``main`` at most: each one may ask convolutions for other operands' maps.
MAX_ROUNDS = 4

#: Unary ops that compute each element alone and map finite values to finite values.
_UNARY = frozenset({"relax.nn.relu", "relax.nn.silu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.sigmoid",
                    "relax.tanh", "relax.clip", "relax.nn.leakyrelu", "relax.negative", "relax.abs"})
#: Binary elementwise ops (padded constants: 0, or 1 for the divisor of ``divide``).
_BINARY = frozenset({"relax.add", "relax.subtract", "relax.multiply", "relax.maximum", "relax.minimum",
                     "relax.divide"})
#: Pooling and resizing over each channel alone (an HRNet's upsampled branches: unpadded, each
#: fusion sum sliced its other branches back to the real channels and padded them again).
_POOL = POOLS | {"relax.nn.adaptive_avg_pool2d", RESIZE}
_CONV = "relax.nn.conv2d"


def padded_count(c: int, block: int) -> int:
    """``c`` rounded up to the block, or ``c`` itself when that wastes more than :data:`MAX_WASTE`
    (or ``c`` is below one block: a stem's 3 channels are read as one block instead)."""
    if block <= 0 or c % block == 0 or c < block:
        return c
    p = -(-c // block) * block
    return p if p <= MAX_WASTE * c else c


@dataclass(frozen=True)
class ChanMap:
    """Where a tensor's real channels sit: ``at[i]`` is real channel ``i``'s index in a channel
    axis of ``width`` (real and padding)."""

    at: tuple[int, ...]
    width: int

    @classmethod
    def plain(cls, c: int, width: int | None = None) -> ChanMap:
        """The first ``c`` channels of ``width`` (``c``: no padding)."""
        return cls(tuple(range(c)), c if width is None else width)

    @classmethod
    def segmented(cls, c: int, cuts: set[int], block: int) -> ChanMap:
        """``c`` channels cut at ``cuts``, each part starting on a block boundary."""
        bounds = sorted({0, c, *(k for k in cuts if 0 < k < c)})
        at: list[int] = []
        start = 0
        for lo, hi in zip(bounds, bounds[1:]):
            at.extend(range(start, start + hi - lo))
            start += -(-(hi - lo) // block) * block
        return cls(tuple(at), start)

    @property
    def real(self) -> int:
        """The real channel count."""
        return len(self.at)

    @property
    def is_plain(self) -> bool:
        """No padding: the channels as they were."""
        return self.width == len(self.at)

    def runs(self) -> list[tuple[int, int]]:
        """The map as ``(start, stop)`` runs of consecutive channels."""
        out: list[tuple[int, int]] = []
        for p in self.at:
            if out and out[-1][1] == p:
                out[-1] = (out[-1][0], p + 1)
            else:
                out.append((p, p + 1))
        return out


def _scatter(a: np.ndarray, axis: int, m: ChanMap, fill: float = 0.0) -> np.ndarray:
    """``a`` (real channels along ``axis``) laid out by ``m``: ``fill`` elsewhere."""
    shape = list(a.shape)
    shape[axis] = m.width
    out = np.full(shape, fill, a.dtype)
    index = [slice(None)] * a.ndim
    index[axis] = list(m.at)
    out[tuple(index)] = a
    return out


@dataclass
class PadResult:
    """What :func:`pad_channels` did."""

    padded: dict[int, int]  # channel count -> padded width, for every count it padded
    slices: int = 0  # slices added to give ops the real channels back
    widened: int = 0  # grouped convolutions whose groups were widened to the block (widen_groups)
    rounds: int = 1  # rewrites of main (more when a sum asked a convolution for another map)
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


# ---------------------------------------------------------------- the graph before the rewrite
@dataclass
class _Graph:
    """``main``'s bindings: what each variable is bound to, who binds each call, how often each
    variable is read."""

    value: dict[Any, Any] = field(default_factory=dict)  # in binding order
    var_of: dict[Any, Any] = field(default_factory=dict)
    uses: dict[Any, int] = field(default_factory=dict)

    @classmethod
    def of(cls, main: Any) -> _Graph:
        from tvm import relax

        g = cls()

        def count(e: Any) -> None:
            if isinstance(e, relax.Var):
                g.uses[e] = g.uses.get(e, 0) + 1
            elif isinstance(e, relax.Tuple):
                for f in e.fields:
                    count(f)
            elif isinstance(e, relax.TupleGetItem):
                count(e.tuple_value)
            elif isinstance(e, relax.Call):
                for a in e.args:
                    count(a)

        for block in main.body.blocks:
            for b in block.bindings:
                if isinstance(b, relax.VarBinding):
                    g.value[b.var], g.var_of[b.value] = b.value, b.var
                    count(b.value)
        count(main.body.body)
        return g

    def bound(self, v: Any) -> Any:
        """What ``v`` is bound to, through aliases (None for a parameter)."""
        from tvm import relax

        seen = 0
        while isinstance(v, relax.Var) and v in self.value and seen < 64:
            v, seen = self.value[v], seen + 1
        return None if isinstance(v, relax.Var) else v

    def const(self, e: Any) -> Any:
        """The constant ``e`` is or is bound to, else None."""
        from tvm import relax
        from tvm.ir.expr import Constant

        b = e if isinstance(e, Constant) else (self.bound(e) if isinstance(e, relax.Var) else None)
        return b if isinstance(b, Constant) else None


def _op(call: Any) -> str:
    return getattr(call.op, "name", "")


def _is_4d(e: Any) -> bool:
    s = _shape(e)
    return s is not None and len(s) == 4


def _plain_conv(call: Any, g: _Graph) -> bool:
    """A conv2d in NCHW/OIHW with static shapes and a constant float32 weight."""
    a = call.attrs
    w = g.const(call.args[1])
    return ((str(a.data_layout), str(a.kernel_layout)) == ("NCHW", "OIHW") and str(a.out_layout) in ("NCHW", "")
            and _is_4d(call.args[0]) and _is_4d(call) and w is not None and str(w.value.dtype) == "float32")


def _channel_slice(call: Any) -> tuple[int, int] | None:
    """``(begin, end)`` of a unit-stride slice of a 4-D tensor's channel axis, clipped to it."""
    if _op(call) != "relax.strided_slice" or not _is_4d(call.args[0]):
        return None
    try:
        axes, begin, end = slice_ints(call.args[1]), slice_ints(call.args[2]), slice_ints(call.args[3])
        strides = slice_ints(call.args[4]) if len(call.args) > 4 else [1]
    except (TypeError, ValueError, AttributeError):
        return None
    c = _shape(call.args[0])[1]
    if axes != [1] or strides != [1] or begin[0] < 0 or end[0] < 0:
        return None
    return min(begin[0], c), min(end[0], c)


def _activations(call: Any, g: _Graph) -> list[int]:
    """Indices of ``call``'s 4-D non-constant arguments with a channel axis of its 4-D output's size."""
    out = _shape(call)
    if out is None or len(out) != 4:
        return []
    return [i for i, a in enumerate(call.args) if _is_4d(a) and g.const(a) is None and _shape(a)[1] == out[1]]


def _channel_operands(call: Any, g: _Graph) -> list[int]:
    """:func:`_activations` but a one-channel tensor spread across the channels (:func:`_spread_channel`)."""
    return [i for i in _activations(call, g) if _spread_channel(call.args[i], g) is None]


def _spread_channel(v: Any, g: _Graph) -> Any:
    """The one-channel tensor that ``v`` broadcasts across the channels (``broadcast_to`` of a
    ``[N, 1, H, W]`` tensor, as :func:`~.canonical.channel_broadcasts_explicit` writes a gate);
    None for anything else."""
    b = g.bound(v)
    if getattr(getattr(b, "op", None), "name", "") != "relax.broadcast_to" or not _is_4d(b.args[0]):
        return None
    s = _shape(b.args[0])
    return b.args[0] if s is not None and s[1] == 1 else None


def _per_channel_pool(call: Any) -> bool:
    """A pooling or resizing op in NCHW (each channel alone)."""
    if _op(call) not in _POOL:
        return False
    layouts = (getattr(call.attrs, "layout", "NCHW"), getattr(call.attrs, "out_layout", "") or "NCHW")
    return all(str(x) == "NCHW" for x in layouts)


def _cut_requests(g: _Graph, block: int) -> dict[Any, ChanMap]:
    """For each convolution whose output (through per-channel ops) is sliced on the channel axis:
    the map that puts each slice's channels on a block boundary, when that wastes at most
    :data:`MAX_WASTE`."""
    cuts: dict[Any, set[int]] = {}
    for value in g.value.values():
        se = _channel_slice(value) if hasattr(value, "op") else None
        if se is not None:
            cuts.setdefault(value.args[0], set()).update(se)
    requests: dict[Any, ChanMap] = {}
    for v in reversed(list(g.value)):
        call = g.value[v]
        if v not in cuts or not hasattr(call, "op"):
            continue
        name = _op(call)
        if name == _CONV and _plain_conv(call, g):
            w = g.const(call.args[1]).value.shape
            if int(call.attrs.groups) == 1:
                m = ChanMap.segmented(w[0], cuts[v], block)
                if not m.is_plain and m.width <= MAX_WASTE * w[0]:
                    requests[call] = m
                continue
        depthwise = (name == _CONV and _is_4d(call) and _is_4d(call.args[0])
                     and int(call.attrs.groups) == _shape(call)[1] == _shape(call.args[0])[1])
        if (name in _UNARY and _is_4d(call)) or _per_channel_pool(call) or depthwise:
            sources = [0]
        elif name in _BINARY:
            sources = _channel_operands(call, g)
        else:
            continue
        for i in sources:
            cuts.setdefault(call.args[i], set()).update(cuts[v])
    return requests


def _chain_conv(v: Any, g: _Graph) -> Any:
    """The convolution (groups 1) that alone makes ``v`` through per-channel ops, each read only
    once (so it can write another map at no cost), else None."""
    from tvm import relax

    for _ in range(16):
        if not isinstance(v, relax.Var) or g.uses.get(v, 0) != 1 or v not in g.value:
            return None
        call = g.value[v]
        if not isinstance(call, relax.Call):
            return None
        name = _op(call)
        if name == _CONV:
            return call if _plain_conv(call, g) and int(call.attrs.groups) == 1 else None
        if name in _UNARY or _per_channel_pool(call):
            v = call.args[0]
        elif name in _BINARY and len(acts := _channel_operands(call, g)) == 1:
            v = call.args[acts[0]]
        else:
            return None
    return None


# ---------------------------------------------------------------- the rewrite
def pad_channels(mod: Any, block: int) -> tuple[Any, PadResult]:
    """``mod`` (NCHW, constants folded) with channel maps (see the module docstring) under
    ``block``, and what was done. ``main``'s signature never changes: if it would (a padded tensor
    returned), nothing is padded and the note says why."""
    from tvm import relax

    if block <= 0:
        return mod, PadResult({})
    sliced = splits_as_slices(mod)
    g = _Graph.of(sliced["main"])
    requests = _cut_requests(g, block)
    for rounds in range(1, MAX_ROUNDS + 1):
        out, result, asked = _rewrite(sliced, g, block, requests)
        result.rounds = rounds
        new = {c: m for c, m in asked.items() if c not in requests}
        if not new or rounds == MAX_ROUNDS:
            break
        requests = {**requests, **new}
    if out is None:
        return mod, PadResult({}, note="padding would change the model's output")
    return relax.transform.DeadCodeElimination()(relax.transform.Normalize()(out)), result


def _rewrite(mod: Any, g: _Graph, block: int, requests: dict[Any, ChanMap]) -> tuple[Any, PadResult, dict[Any, ChanMap]]:
    """One rewrite of ``main`` with ``requests`` (convolution -> output map): the module (None if
    its output would change), what was done, and the maps sums asked convolutions for."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    result = PadResult({})
    asked: dict[Any, ChanMap] = {}

    maps: dict[Any, ChanMap] = {}  # old variable -> its map in the new graph (absent: as it was)

    @mutator
    class _Pad(PyExprMutator):  # type: ignore[misc]
        def map_of(self, old: Any) -> ChanMap | None:
            """The map of old argument ``old`` in the new graph (None: as it was)."""
            seen = 0
            while isinstance(old, relax.Var) and old not in maps and old in g.value and seen < 64:
                nxt = g.value[old]
                if not isinstance(nxt, relax.Var):
                    break
                old, seen = nxt, seen + 1
            return maps.get(old)

        def emit(self, expr: Any, old: Any, m: ChanMap) -> Any:
            """``expr`` bound, with map ``m`` for the variable that bound ``old``."""
            if not m.is_plain and old in g.var_of:
                maps[g.var_of[old]] = m
            return self.builder_.emit(expr)

        def real(self, new: Any, old: Any) -> Any:
            """``new`` with its real channels only, in order."""
            if isinstance(old, relax.Tuple):
                return relax.Tuple([self.real(n, o) for n, o in zip(new.fields, old.fields)])
            m = self.map_of(old)
            if m is None:
                return new
            result.slices += 1
            parts = [self.builder_.emit(relax.op.strided_slice(new, [1], [lo], [hi])) for lo, hi in m.runs()]
            return parts[0] if len(parts) == 1 else self.builder_.emit(relax.op.concat(parts, axis=1))

        def generic(self, call: Any, args: list[Any]) -> Any:
            """``call`` on its arguments' real channels."""
            return relax.Call(call.op, [self.real(n, o) for n, o in zip(args, call.args)], call.attrs, call.ty_args)

        def visit_call_(self, call: Any) -> Any:  # noqa: N802 - TVM's visitor name
            args = [self.visit_expr(a) for a in call.args]
            name = _op(call)
            if name == _CONV and _plain_conv(call, g):
                out = self.conv(call, args)
            elif (name in _UNARY or _per_channel_pool(call)) and _is_4d(call.args[0]) and _is_4d(call):
                m = self.map_of(call.args[0])
                out = None if m is None else self.emit(relax.Call(call.op, args, call.attrs, call.ty_args), call, m)
            elif name in _BINARY:
                out = self.binary(call, args)
            elif (name == "relax.concat" and _is_4d(call) and int(call.attrs.axis) % 4 == 1
                  and isinstance(call.args[0], relax.Tuple)):
                out = self.concat(call, args)
            elif _channel_slice(call) is not None:
                out = self.slice(call, args)
            else:
                out = None
            return self.generic(call, args) if out is None else out

        def pad_to(self, x: Any, c: int, width: int) -> Any:
            """``x`` (``c`` channels) with zero channels up to ``width``."""
            return self.builder_.emit(relax.op.nn.pad(x, [0, 0, 0, width - c, 0, 0, 0, 0]))

        def conv(self, call: Any, args: list[Any]) -> Any:
            """A convolution reading its input through its map and writing its output's map (a
            request, else its channels padded to the block); widened groups; None: as it was."""
            a = call.attrs
            wv = g.const(call.args[1]).value.numpy()
            x, ic = args[0], _shape(call.args[0])[1]
            oc, groups = wv.shape[0], int(a.groups)
            mi = self.map_of(call.args[0])
            if groups == 1 or (groups == ic == oc and wv.shape[1] == 1):
                if mi is None:
                    to = padded_count(ic, block)
                    if to == ic and call not in requests and (groups > 1 or padded_count(oc, block) == oc):
                        return None
                    if to != ic:
                        x, mi = self.pad_to(x, ic, to), ChanMap.plain(ic, to)
                    else:
                        mi = ChanMap.plain(ic)
                if groups == 1:
                    mo = requests.get(call) or ChanMap.plain(oc, padded_count(oc, block))
                    w = _scatter(_scatter(wv, 1, mi), 0, mo)
                else:  # depthwise: its output keeps its input's map
                    mo, groups = mi, mi.width
                    w = _scatter(wv, 0, mi)
            elif mi is None and widened_groups(ic, oc, groups, block) != groups:
                w, groups, mo = widen_groups(wv, groups, block), ic // block, None
                result.widened += 1
            else:
                return None
            for c, m in ((ic, mi), (oc, mo)):
                if m is not None and m.width != c:
                    result.padded[c] = m.width
            new = relax.op.nn.conv2d(x, relax.const(w), a.strides, a.padding, a.dilation, groups, "NCHW", "OIHW",
                                     "NCHW", conv_out_dtype(a))
            return self.emit(new, call, mo) if mo is not None else new

        def binary(self, call: Any, args: list[Any]) -> Any:
            """An elementwise op whose tensor operands share one map, constants laid out by it and
            broadcast operands given their real channels; None (and a request for the next round)
            when the operands' maps differ."""
            spread, acts = [], []
            for i in _activations(call, g):
                (acts if _spread_channel(call.args[i], g) is None else spread).append(i)
            of = {i: self.map_of(call.args[i]) for i in acts}
            mapped = [i for i in acts if of[i] is not None]
            if not mapped:
                return None
            target = of[mapped[0]]
            if any(of[i] != target for i in acts):
                self.ask(call, acts, of)
                return None
            divide = _op(call) == "relax.divide"
            if divide and 1 in acts:
                return None  # a padded divisor could be zero
            new_args = []
            for i, (n, o) in enumerate(zip(args, call.args)):
                c = g.const(o)
                s = _shape(o)
                axis = len(s) - 3 if s is not None else -1
                if i in acts:
                    new_args.append(n)
                elif i in spread:  # one channel made C wide: made as wide as the map instead
                    one = self.real(self.visit_expr(x := _spread_channel(o, g)), x)  # a gate sliced off a map: its channel
                    new_args.append(self.builder_.emit(relax.op.broadcast_to(one, [s[0], target.width, *s[2:]])))
                elif s is None or axis < 0 or s[axis] == 1:  # nothing per channel in it: it broadcasts
                    new_args.append(self.real(n, o))  # (a one-channel slice of a mapped tensor: that channel)
                elif c is not None and s[axis] == target.real:
                    new_args.append(relax.const(_scatter(c.value.numpy(), axis, target, 1.0 if divide and i == 1 else 0.0)))
                else:
                    return None
            return self.emit(relax.Call(call.op, new_args, call.attrs, call.ty_args), call, target)

        def ask(self, call: Any, acts: list[int], of: dict[int, ChanMap | None]) -> None:
            """Ask the convolution behind one operand of a sum for the other's map (next round),
            an operand whose channels are in order (as a convolution writes them) first."""
            order = sorted(acts, key=lambda i: of[i] is not None and of[i].at != tuple(range(of[i].real)))
            for i in order:
                conv = _chain_conv(call.args[i], g)
                others = {of[j] for j in acts if j != i and of[j] is not None}
                if conv is not None and len(others) == 1 and conv not in requests:
                    asked[conv] = others.pop()
                    return

        def concat(self, call: Any, args: list[Any]) -> Any:
            """A channel concat of mapped parts: their maps side by side (unmapped parts padded to
            the block, so the parts after them stay aligned); None when no part has a map."""
            fields, new_fields = call.args[0].fields, args[0].fields
            of = [self.map_of(f) for f in fields]
            if all(m is None for m in of) or not all(_is_4d(f) for f in fields):
                return None
            parts = []
            for f, n, m in zip(fields, new_fields, of):
                if m is None:  # a part no map pads: padded to the block, so the ones after it stay aligned
                    c = _shape(f)[1]
                    to = -(-c // block) * block
                    m = ChanMap.plain(c, to)
                    n = self.pad_to(n, c, to) if to != c else n
                parts.append((n, m))
            at, offset = [], 0
            for _, m in parts:
                at.extend(offset + p for p in m.at)
                offset += m.width
            new = relax.op.concat([n for n, _ in parts], axis=1)
            return self.emit(new, call, ChanMap(tuple(at), offset))

        def slice(self, call: Any, args: list[Any]) -> Any:
            """A channel slice of a mapped tensor: the blocks holding its channels (no copy when
            that is all of them), or its real channels alone when that window wastes too much."""
            m = self.map_of(call.args[0])
            begin, end = _channel_slice(call)
            sub = m.at[begin:end] if m is not None else ()
            if not sub:
                return None
            lo = min(sub) // block * block
            hi = min(m.width, -(-(max(sub) + 1) // block) * block)
            if list(sub) != sorted(sub):
                return None
            if hi - lo > max(MAX_WASTE * len(sub), block):  # too wide a window: the real channels alone
                if sub != tuple(range(sub[0], sub[0] + len(sub))):
                    return None
                result.slices += 1
                return self.builder_.emit(relax.op.strided_slice(args[0], [1], [sub[0]], [sub[0] + len(sub)]))
            kept = ChanMap(tuple(p - lo for p in sub), hi - lo)
            if (lo, hi) == (0, m.width):
                if call in g.var_of:
                    maps[g.var_of[call]] = kept
                return args[0]
            return self.emit(relax.op.strided_slice(args[0], [1], [lo], [hi]), call, kept)

    main = mod["main"]
    out = mod.clone() if hasattr(mod, "clone") else mod
    padder = _Pad(out)
    gv = out.get_global_var("main")
    new_main = padder.visit_expr(main)
    if str(new_main.body.ty) != str(main.body.ty):
        return None, result, asked
    padder.builder_.update_func(gv, new_main)
    return padder.builder_.get(), result, asked
