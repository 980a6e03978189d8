"""The layout plan of a model: convolutions in blocked layouts across the whole graph.

Convolutions run on activations ``NCHW{b}c`` with weights ``OIHW{b}i{b}o`` (depthwise
``OIHW1i{b}o``); relu, add, pooling, mean and concat follow the block, so the only
``layout_transform`` left in the model is at its edges and around ops that cannot follow
(a reshape, a channel shuffle, a convolution whose channels the block does not divide).
The recipe is TVM's own (its Adreno pipeline, Relay's x86 ``alter_conv2d_layout``):

1. ``clip`` (ReLU6) becomes ``minimum(maximum(x, lo), hi)``: ``relax.clip`` has no layout
   inference and would send the activation back to NCHW and forward again;
2. conv1d becomes a 1xK conv2d and GroupNorm its primitive ops (:mod:`.canonical`), a zero
   ``pad`` before a convolution the convolution's own padding (:func:`fold_pads`);
   channel counts the block does not divide are padded up to it where that is cheap
   (:mod:`.chanpad`), so those convolutions run blocked too;
3. ``ConvertLayout`` with a per-call callback: the plan's block for every convolution it can
   block, NCHW for the rest (each with its reason, :class:`ConvPlan`); channel splits, slices
   and concats on block boundaries then run in the block too (:mod:`.channels`);
4. the weights are bound constants, so their layout transforms are done once, here, at compile
   time (with numpy, :mod:`.constfold`; ``FoldConstant`` for the rest); no inference repacks a weight;
5. ``LegalizeOps`` with :func:`legalize_conv2d`: the blocked forms lower to the TE computes of
   :mod:`tensortune.task.ops` (``conv2d_nchwc``, ``depthwise_conv2d_nchwc``), which the op
   templates recognise; NCHW convolutions take TVM's own legalization.

The block ``b`` is one per model (adjacent convolutions with different blocks crash
``ConvertLayout`` in TVM 0.27): the widest of the target's vector lanes and its halves that
covers the most convolution FLOPs (:func:`choose_block`). A stem whose input has fewer
channels than the block (RGB) reads ``NCHW{IC}c``. If planning fails, the model keeps NCHW
everywhere and the plan says why.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..precision import AMX_BLOCK, DEFAULT_PRECISION
from .channels import sink_transforms, splits_as_slices
from .chanpad import PadResult, pad_channels, padded_count, widened_groups
from .canonical import canonicalize
from .attention_pad import pad_attention_heads
from .constfold import fold_constant_transforms
from .prepack import DensePlan, pack_dense_weights
from .relaxrewrite import conv_out_dtype, rewrite_calls, rewrite_functions

log = logging.getLogger(__name__)

#: Layout modes: ``blocked`` (the plan above) or ``nchw`` (no plan: TVM's layouts as imported).
MODES = ("blocked", "nchw")
DEFAULT_MODE = "blocked"


@dataclass
class ConvPlan:
    """What the plan chose for one convolution."""

    kind: str  # conv2d | depthwise_conv2d | grouped
    shape: str  # "64x56x56 -> 128, 3x3 s2"
    flops: float
    layout: str  # the data layout chosen: "NCHW8c" or "NCHW"
    reason: str = ""  # why NCHW (or a smaller input block) was kept
    padded: str = ""  # channel counts padded to the block ("24->32"), '' if none
    padded_flops: float = 0.0  # FLOPs it runs with its padded channels (= flops if none)

    def to_json(self) -> dict[str, Any]:
        """JSON form for reports."""
        return dict(self.__dict__)


@dataclass
class LayoutPlan:
    """The layout plan of one model on one target."""

    mode: str
    block: int = 0  # 0: no blocked layout
    convs: list[ConvPlan] = field(default_factory=list)
    transforms: int = 0  # layout_transform calls left in main (after folding the weights')
    note: str = ""  # why the plan fell back to NCHW everywhere
    denses: list[DensePlan] = field(default_factory=list)  # the matmuls and their packed weights
    dense_note: str = ""  # why no weight was packed (a failure of the rewrite)
    pad_note: str = ""  # why no channel was padded (a failure of the rewrite)

    @property
    def blocked_share(self) -> float:
        """Fraction of the convolution FLOPs that run blocked."""
        total = sum(c.flops for c in self.convs)
        return sum(c.flops for c in self.convs if c.layout != "NCHW") / total if total else 0.0

    def fallbacks(self) -> list[ConvPlan]:
        """Convolutions kept in NCHW (or with a smaller input block), each with its reason."""
        return [c for c in self.convs if c.reason]

    def summary(self) -> str:
        """One line: block, share of conv FLOPs blocked, transforms left, fallbacks; packed matmul weights."""
        if self.mode != "blocked":
            return "layouts: NCHW as imported (no plan)"
        return self._conv_summary() + self._dense_summary()

    def _dense_summary(self) -> str:
        if self.dense_note:
            return f"; matmul weights not packed ({self.dense_note})"
        if not self.denses:
            return ""
        packed = [d for d in self.denses if d.block and not d.at_run_time]
        text = f"; {len(packed)}/{len(self.denses)} matmul weights packed at compile time"
        run_time = sum(d.at_run_time for d in self.denses)
        if run_time:
            text += f", {run_time} products of run-time operands in bf16"
        widened = [d for d in packed if d.extra_cols]
        if widened:
            text += f", {len(widened)} with zero columns up to the block"
        reasons = sorted({d.reason for d in self.denses if d.reason})
        return text + (" (kept: " + "; ".join(reasons[:3]) + ")" if reasons else "")

    def _conv_summary(self) -> str:
        if not self.block:
            return f"layouts: NCHW kept ({self.note})"
        n_conv = len(self.convs)
        n_blocked = sum(c.layout != "NCHW" for c in self.convs)
        text = (f"layouts: NCHW{self.block}c for {n_blocked}/{n_conv} convolutions "
                f"({self.blocked_share:.0%} of conv FLOPs), {self.transforms} layout transforms left in main")
        widened = [c for c in self.convs if c.kind == "grouped" and c.padded_flops > c.flops]
        if widened:
            extra = sum(c.padded_flops - c.flops for c in widened) / max(sum(c.flops for c in self.convs), 1.0)
            text += f"; {len(widened)} grouped convolutions' groups widened to the block (+{extra:.1%} conv FLOPs)"
        grown = [c for c in self.convs if c.padded]
        if grown:
            counts = sorted({g for c in grown for g in c.padded.split(", ")}, key=lambda t: int(t.split("->")[0]))
            extra = sum(c.padded_flops - c.flops for c in grown) / max(sum(c.flops for c in self.convs), 1.0)
            text += (f"; channels padded to the block: {', '.join(counts)} ({len(grown)} convolutions, "
                     f"+{extra:.1%} conv FLOPs)")
        elif self.pad_note:
            text += f"; no channels padded ({self.pad_note})"
        kept = [c for c in self.convs if c.layout == "NCHW"]
        if kept:
            reasons = sorted({c.reason for c in kept})
            text += f"; NCHW kept for {len(kept)}: " + "; ".join(reasons[:3]) + (" ..." if len(reasons) > 3 else "")
        return text

    def to_json(self) -> dict[str, Any]:
        """JSON form for reports."""
        return {"mode": self.mode, "block": self.block, "blocked_share": self.blocked_share, "transforms": self.transforms,
                "note": self.note, "summary": self.summary(), "convs": [c.to_json() for c in self.convs],
                "denses": [d.to_json() for d in self.denses], "dense_note": self.dense_note}


# ---------------------------------------------------------------- the conv calls of a module
@dataclass(frozen=True)
class _Conv:
    groups: int
    data: tuple[int, ...]
    weight: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    layouts: tuple[str, str, str]

    @property
    def kind(self) -> str:
        if self.groups == 1:
            return "conv2d"
        if self.groups == self.data[1] == self.weight[0] and self.weight[1] == 1:
            return "depthwise_conv2d"
        return "grouped"

    @property
    def flops(self) -> float:
        oc, icg, kh, kw = self.weight
        oh = (self.data[2] + self.padding[0] + self.padding[2] - (kh - 1) * self.dilation[0] - 1) // self.strides[0] + 1
        ow = (self.data[3] + self.padding[1] + self.padding[3] - (kw - 1) * self.dilation[1] - 1) // self.strides[1] + 1
        return 2.0 * oc * oh * ow * icg * kh * kw

    def describe(self) -> str:
        oc, _, kh, kw = self.weight
        return f"{self.data[1]}x{self.data[2]}x{self.data[3]} -> {oc}, {kh}x{kw} s{self.strides[0]}"

    def unsupported(self) -> str:
        """Why the blocked templates cannot run it ('' if they can)."""
        if self.layouts != ("NCHW", "OIHW", "NCHW"):
            return f"imported in layout {self.layouts[0]}/{self.layouts[1]}"
        if self.data[0] != 1:
            return "batch > 1"
        return ""


def _ints(v: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in v)


def _conv_of(call: Any) -> _Conv | None:
    if getattr(call.op, "name", "") != "relax.nn.conv2d":
        return None
    a = call.attrs
    try:
        data, weight = _ints(call.args[0].ty.shape), _ints(call.args[1].ty.shape)
    except Exception:  # noqa: BLE001 - symbolic shape
        return None
    return _Conv(int(a.groups), data, weight, _ints(a.strides), _ints(a.padding), _ints(a.dilation),
                 (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout)))


def _conv_calls(mod: Any) -> list[tuple[Any, _Conv]]:
    """Each convolution call of ``main`` with its description, in post order."""
    from tvm import relax

    out: list[tuple[Any, _Conv]] = []

    def visit(e: Any) -> None:
        if isinstance(e, relax.Call):
            c = _conv_of(e)
            if c is not None:
                out.append((e, c))

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return out


def _convs(mod: Any) -> list[_Conv]:
    return [c for _, c in _conv_calls(mod)]


# ---------------------------------------------------------------- the plan
def _decide(conv: _Conv, b: int) -> tuple[list[str] | None, str]:
    """Layouts ``[data, weight, out]`` of one convolution under block ``b`` (None: keep NCHW), and why."""
    why = conv.unsupported()
    if why:
        return None, why
    ic, oc = conv.data[1], conv.weight[0]
    if conv.kind == "depthwise_conv2d":
        if oc % b:
            return None, f"{oc} channels not a multiple of {b}"
        return [f"NCHW{b}c", f"OIHW1i{b}o", f"NCHW{b}c"], ""
    if oc % b:
        return None, f"{oc} output channels not a multiple of {b}"
    if conv.kind == "grouped":
        icg, ocg = ic // conv.groups, oc // conv.groups
        if icg % b or ocg % b:
            return None, f"groups of {icg} -> {ocg} channels: not multiples of {b}, nor narrower groups that fill it"
        return [f"NCHW{b}c", f"OIHW{b}i{b}o", f"NCHW{b}c"], ""
    if ic % b == 0:
        return [f"NCHW{b}c", f"OIHW{b}i{b}o", f"NCHW{b}c"], ""
    if ic < b:  # a stem reading the model's few input channels: all of them in one block
        return [f"NCHW{ic}c", f"OIHW{ic}i{b}o", f"NCHW{b}c"], f"{ic} input channels: input block {ic}"
    return None, f"{ic} input channels not a multiple of {b}"


def candidate_blocks(target_json: dict[str, Any], precision: str = DEFAULT_PRECISION) -> list[int]:
    """The channel blocks a layout plan considers: the target's vector lanes and half of them;
    in bf16 on AMX tiles first :data:`~tensortune.precision.AMX_BLOCK` (a tile row's 32 input
    channels: every ``tdpbf16ps`` sums over all of them, twice a 16-channel block's)."""
    from ..templates.amx import target_has_amx
    from ..templates.base import target_lanes

    lanes = target_lanes(target_json)
    amx = [AMX_BLOCK] if precision == "bf16" and target_has_amx(target_json) else []
    return amx + [b for b in (lanes, lanes // 2) if b >= 4]


def _padded(conv: _Conv, b: int) -> _Conv:
    """``conv`` with the channel counts :func:`~.chanpad.pad_channels` pads under block ``b``."""
    from dataclasses import replace

    ic, oc = padded_count(conv.data[1], b), padded_count(conv.weight[0], b)
    data = (conv.data[0], ic, *conv.data[2:])
    if conv.kind == "depthwise_conv2d":
        return replace(conv, groups=ic, data=data, weight=(ic, *conv.weight[1:]))
    if conv.kind == "grouped":
        groups = widened_groups(conv.data[1], conv.weight[0], conv.groups, b)
        return replace(conv, groups=groups, weight=(conv.weight[0], conv.data[1] // groups, *conv.weight[2:]))
    return replace(conv, data=data, weight=(oc, ic, *conv.weight[2:]))


def choose_block(convs: list[_Conv], target_json: dict[str, Any], precision: str = DEFAULT_PRECISION) -> int:
    """The block that runs the most convolution FLOPs blocked (channels padded as :func:`_padded`
    says): the widest of :func:`candidate_blocks` whose covered FLOPs are within 10% of the best
    (0: none); the AMX block only where it blocks every conv the next block does, and padding
    channels to it adds at most 3% conv FLOPs (:data:`AMX_PADDING`) over the next block's."""
    cands = candidate_blocks(target_json, precision)
    blocked = {b: [_blocked(c, b) for c in convs] for b in cands}
    cover = {b: sum(c.flops for c, p in zip(convs, blocked[b]) if p is not None) for b in cands}
    best = max(cover.values(), default=0.0)
    if best <= 0:
        return 0
    near = [b for b in cands if cover[b] >= 0.9 * best]
    if near[0] == AMX_BLOCK and len(near) > 1:
        padded = {b: sum((p or c).flops for c, p in zip(convs, blocked[b])) for b in near[:2]}
        if cover[AMX_BLOCK] < cover[near[1]] or padded[AMX_BLOCK] > AMX_PADDING * padded[near[1]]:
            return near[1]  # MobileNetV2's 16 and 24 channels: left in NCHW, or padded, they cost more than the tiles gain
    return near[0]


#: The most conv FLOPs (channels padded) the AMX block may run against the next block's.
AMX_PADDING = 1.03


def _blocked(conv: _Conv, b: int) -> _Conv | None:
    """``conv`` with its channels padded to block ``b`` where ``b`` blocks it, else None."""
    padded = _padded(conv, b)
    return padded if _decide(padded, b)[0] is not None else None


def blocked_workload(op: str, args: dict[str, int], target_json: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """The blocked op a model's plan would run a standalone ``conv2d`` / ``depthwise_conv2d`` as
    (same rules as :func:`plan_layouts`, block per workload); ``(op, args)`` unchanged if none applies."""
    if op == "conv2d":
        conv = _Conv(1, (1, args["IC"], args["H"], args["W"]), (args["OC"], args["IC"], args["K"], args["K"]),
                     (args["S"],) * 2, (args["P"],) * 4, (1, 1), ("NCHW", "OIHW", "NCHW"))
    elif op == "depthwise_conv2d":
        conv = _Conv(args["C"], (1, args["C"], args["H"], args["W"]), (args["C"], 1, args["K"], args["K"]),
                     (args["S"],) * 2, (args["P"],) * 4, (1, 1), ("NCHW", "OIHW", "NCHW"))
    else:
        return op, dict(args)
    b = choose_block([conv], target_json)
    layouts = _decide(conv, b)[0] if b else None
    if layouts is None:
        return op, dict(args)
    if op == "depthwise_conv2d":
        return "depthwise_conv2d_nchwc", {**args, "B": b}
    ib = int(layouts[0].removeprefix("NCHW").removesuffix("c"))
    return "conv2d_nchwc", {**args, "IB": ib, "OB": b}


def rewrite_clip(mod: Any) -> Any:
    """``clip(x, lo, hi)`` -> ``minimum(maximum(x, lo), hi)`` in every Relax function (binary
    ops with scalar constants follow any layout; ``relax.clip`` has no layout inference)."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    def scalar(v: Any) -> float:
        v = getattr(v, "value", v)
        return float(getattr(v, "value", v))

    @mutator
    class _Clip(PyExprMutator):  # type: ignore[misc]
        def visit_call_(self, call: Any) -> Any:  # noqa: N802 - TVM's visitor name
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            if name == "relax.call_tir":  # the ONNX frontend writes Clip as TIR maximum/minimum calls
                return _elementwise_call(call)
            if name != "relax.clip":
                return call
            x = call.args[0]
            dt = str(x.ty.dtype)
            lo = relax.const(np.array(scalar(call.args[1]), dtype=dt))
            hi = relax.const(np.array(scalar(call.args[2]), dtype=dt))
            return relax.op.minimum(relax.op.maximum(x, lo), hi)

    return rewrite_functions(mod, _Clip)


def _elementwise_call(call: Any) -> Any:
    """``call_tir(maximum|minimum, (x, scalar))`` as the Relax op (which follows layouts), else ``call``."""
    import re

    from tvm import relax

    op = {"maximum": relax.op.maximum, "minimum": relax.op.minimum}.get(re.sub(r"\d+$", "", call.args[0].name_hint))
    args = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else []
    if op is None or len(args) != 2:
        return call
    shape = getattr(getattr(args[1], "ty", None), "shape", None)
    if shape is None or len(shape) != 0:
        return call
    return op(args[0], args[1])


def _fold_pad(call: Any, m: Any) -> Any:
    """One NCHW conv2d reading a spatial zero ``pad`` as a conv2d with that padding added (``call`` otherwise)."""
    from tvm import relax

    if str(call.attrs.data_layout) != "NCHW":
        return call
    x = call.args[0]
    pad = m.lookup_binding(x) if isinstance(x, relax.Var) else None
    if not isinstance(pad, relax.Call) or getattr(pad.op, "name", "") != "relax.nn.pad":
        return call
    widths = _ints(pad.attrs.pad_width)
    value = pad.attrs.pad_value
    if str(pad.attrs.pad_mode) != "constant" or float(getattr(value, "value", value) or 0.0) != 0.0 \
            or len(widths) != 8 or any(widths[:4]) or min(widths) < 0:
        return call
    a = call.attrs
    t, left, b, r = _ints(a.padding)
    padding = (t + widths[4], left + widths[6], b + widths[5], r + widths[7])
    return relax.op.nn.conv2d(pad.args[0], call.args[1], a.strides, padding, a.dilation, int(a.groups), "NCHW",
                              str(a.kernel_layout), str(a.out_layout or "NCHW"), conv_out_dtype(a))


def fold_pads(mod: Any) -> Any:
    """``conv2d(nn.pad(x), padding=p)`` -> ``conv2d(x, padding=p + the pad)`` where the pad is zeros on
    the spatial axes only (TensorFlow's "same" padding as PyTorch ports write it: ``ZeroPad2d((0, 1,
    0, 1))`` before a stride-2 convolution). The convolution then pads inside its own function (per
    tile, in its blocked layout) instead of after a separate pass over the whole activation."""
    from tvm import relax

    return relax.transform.DeadCodeElimination()(rewrite_calls(mod, "relax.nn.conv2d", _fold_pad))


def count_layout_transforms(mod: Any) -> int:
    """``layout_transform`` calls in ``main`` (Relax ops before legalization, or the fused
    functions named ``*layout_transform*`` after it)."""
    from tvm import relax

    n = 0

    def visit(e: Any) -> None:
        nonlocal n
        if isinstance(e, relax.Call):
            name = getattr(e.op, "name", "")
            if name == "relax.layout_transform":
                n += 1
            elif name == "relax.call_tir" and "layout_transform" in e.args[0].name_hint:
                n += 1

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return n


def plan_layouts(mod: Any, target_json: dict[str, Any], mode: str = DEFAULT_MODE,
                 precision: str = DEFAULT_PRECISION) -> tuple[Any, LayoutPlan]:
    """``mod`` with its convolutions in blocked layouts and their weights transformed (folded),
    and the plan (matrix products on packed weights in ``precision``). Never raises for a planning
    failure: the model keeps NCHW and the plan says why."""
    from tvm import relax

    if mode not in MODES:
        raise ValueError(f"unknown layout mode {mode!r}; known: {', '.join(MODES)}")
    if mode == "nchw":
        return mod, LayoutPlan(mode)
    mod = rewrite_clip(relax.transform.FoldConstant()(mod))
    try:
        mod = fold_pads(canonicalize(mod))
    except Exception as e:  # noqa: BLE001 - an optimisation: the graph as it was
        log.warning("conv1d, group norm and pads before convolutions kept as imported: %s", _last_line(e))
    convs = _convs(mod)
    b = choose_block(convs, target_json, precision)
    pad, unpadded = PadResult({}), mod
    if b:
        try:
            mod, pad = pad_channels(mod, b)
        except Exception as e:  # noqa: BLE001 - TVM cannot rewrite this graph: channels as imported
            pad.note = f"padding failed: {_last_line(e)}"
    padded = _convs(mod)
    if len(padded) != len(convs):  # cannot happen (padding rewrites convolutions one for one): plan as imported
        padded = convs
    plans = []
    for c, p in zip(convs, padded):
        layouts, why = _decide(p, b) if b else (None, "no block covers it")
        grew = [f"{x}->{y}" for x, y in ((c.data[1], p.data[1]), (c.weight[0], p.weight[0])) if x != y]
        plans.append(ConvPlan(c.kind, c.describe(), c.flops, layouts[0] if layouts else "NCHW", why,
                              ", ".join(dict.fromkeys(grew)), p.flops))
    plan = LayoutPlan(mode, b, plans, pad_note=pad.note)
    out = _block_convs(mod, plan, unpadded) if b else mod
    if not b:
        plan.note = "no convolution can be blocked" if convs else "no convolution"
    try:
        out = pad_attention_heads(out)
    except Exception as e:  # noqa: BLE001 - an optimisation: those heads stay unfused
        log.warning("attention heads with prime rows kept as imported: %s", _last_line(e))
    try:
        out, plan.denses = pack_dense_weights(out, target_json, precision)  # every path above folded the constants
    except Exception as e:  # noqa: BLE001 - TVM cannot rewrite this graph: matmuls keep TVM's form
        plan.dense_note = f"packing the weights failed: {_last_line(e)}"
    plan.transforms = count_layout_transforms(out)
    return out, plan


def _last_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[-1][:160]


#: Convolutions a plan keeps in NCHW one by one (after those that fail when blocked alone), because
#: TVM cannot convert the graph around them, before it gives up and keeps the whole model in NCHW.
MAX_KEPT_NCHW = 8


def _block_convs(mod: Any, plan: LayoutPlan, unpadded: Any) -> Any:
    """``mod`` with the plan's convolutions converted and their weights folded. Where TVM cannot
    convert the graph (an op after a convolution cannot take its blocked layout: FocalNet multiplies
    its depthwise convolutions by gates sliced one channel wide), the convolutions behind the failure
    keep NCHW alone and the rest stay blocked: first each one whose conversion alone fails, then,
    while the graph still fails, by bisection over the convolutions in graph order (at most
    :data:`MAX_KEPT_NCHW` more). If the failure is no convolution's, the whole model keeps NCHW
    (``unpadded``: the model before its channels were padded) and the plan says why."""
    import tvm
    from tvm import relax

    b = plan.block
    weights = [call.args[1] for call, _ in _conv_calls(mod)]  # identities the callback matches
    blocked = [i for i, p in enumerate(plan.convs) if p.layout != "NCHW"] if len(weights) == len(plan.convs) else []
    kept: set[int] = set()

    def callback(call: Any) -> dict[str, list[str]]:
        conv = _conv_of(call)
        if conv is None:
            return {}
        layouts, _ = _decide(conv, b)
        if kept and any(call.args[1].same_as(weights[i]) for i in kept):
            layouts = None
        return {"relax.nn.conv2d": layouts or ["NCHW", "OIHW", "NCHW"]}

    def convert(keep: set[int]) -> Any:
        kept.clear()
        kept.update(keep)
        return tvm.transform.Sequential([relax.transform.ConvertLayout({}, callback),  # mod is folded already
                                         relax.transform.Normalize()])(splits_as_slices(mod))

    def first_failing(keep: set[int]) -> int | None:
        """The convolution whose conversion (after those before it) makes ConvertLayout fail."""
        rest = [i for i in blocked if i not in keep]
        lo, hi = 0, len(rest)  # converting rest[:lo] works, rest[:hi] fails
        try:
            convert(keep | set(rest))
        except Exception:  # noqa: BLE001 - fails with every convolution in NCHW: not a convolution's doing
            return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                convert(keep | set(rest[mid:]))
                lo = mid
            except Exception:  # noqa: BLE001 - the failure lies in rest[:mid]
                hi = mid
        return rest[hi - 1] if rest else None

    def fails_alone(i: int) -> bool:
        try:
            convert(set(blocked) - {i})
            return False
        except Exception:  # noqa: BLE001 - this convolution blocked is enough to fail
            return True

    keep: set[int] = set()
    error: Exception | None = None
    singles, bisected = False, 0
    while True:
        try:
            converted = convert(keep)
            break
        except Exception as e:  # noqa: BLE001 - TVM cannot convert this graph: find the convolutions behind it
            error = e
            if not singles:  # first each convolution blocked alone (one conversion each)
                singles = True
                keep = {i for i in blocked if fails_alone(i)}
                if keep:
                    continue
            culprit = first_failing(keep) if bisected < MAX_KEPT_NCHW else None  # then those failing together
            bisected += 1
            if culprit is None:
                for p in plan.convs:
                    p.layout, p.reason, p.padded, p.padded_flops = "NCHW", "layout planning failed", "", p.flops
                plan.block, plan.note = 0, f"ConvertLayout failed: {_last_line(e)}"
                return unpadded
            keep.add(culprit)
    for i in keep:
        p = plan.convs[i]
        p.layout, p.reason = "NCHW", f"the graph after it cannot take a blocked layout ({_last_line(error)})"
    converted = sink_transforms(converted)
    seq = [relax.transform.FoldConstant(), relax.transform.EliminateCommonSubexpr(),
           relax.transform.DeadCodeElimination()]
    return tvm.transform.Sequential(seq)(fold_constant_transforms(converted))


# ---------------------------------------------------------------- legalization
def legalize_conv2d(bb: Any, call: Any, precision: str = DEFAULT_PRECISION) -> Any:
    """Lower a blocked conv2d to :func:`~tensortune.task.ops.conv2d_nchwc_te` (square kernel, one
    stride and padding, no dilation or groups), :func:`~tensortune.task.ops.conv2d_nchwc_general_te`
    (any other geometry, groups of channel blocks), :func:`~tensortune.task.ops.depthwise_nchwc_te` or
    :func:`~tensortune.task.ops.depthwise_nchwc_general_te`; any NCHW conv2d to TVM's own legalization.
    In bf16 a plain one whose weight is a constant and whose blocks the instruction takes (an even
    input block, an output block of 8 or 16) lowers to
    :func:`~tensortune.task.ops_bf16.conv2d_nchwc_bf16_te` on its weight packed here, once."""
    import tvm

    from ..task.ops import conv2d_nchwc_general_te, conv2d_nchwc_te, depthwise_nchwc_general_te, depthwise_nchwc_te

    a = call.attrs
    dl, kl = str(a.data_layout), str(a.kernel_layout)
    if dl == "NCHW" or len(dl) <= 4:
        return tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")(bb, call)
    strides, padding, dilation = _ints(a.strides), _ints(a.padding), _ints(a.dilation)
    groups = int(a.groups)
    out_dtype = str(a.out_dtype) if str(a.out_dtype) not in ("", "void", "None") else str(call.args[0].ty.dtype)
    plain = len(set(strides)) == 1 and len(set(padding)) == 1 and set(dilation) == {1} \
        and call.args[1].ty.shape[2].value == call.args[1].ty.shape[3].value
    if groups > 1 and kl.startswith("OIHW1i"):
        if not plain:
            return bb.call_te(depthwise_nchwc_general_te, call.args[0], call.args[1], strides, padding, dilation,
                              out_dtype, primfunc_name_hint="depthwise_conv2d_nchwc")
        return bb.call_te(depthwise_nchwc_te, call.args[0], call.args[1], strides[0], padding[0], out_dtype,
                          primfunc_name_hint="depthwise_conv2d_nchwc")
    if precision == "bf16" and out_dtype == "float32" and not kl.startswith("OIHW1i"):
        bf16 = _bf16_conv(bb, call, strides, padding, dilation, groups, plain)
        if bf16 is not None:
            return bf16
    if groups == 1 and plain:
        return bb.call_te(conv2d_nchwc_te, call.args[0], call.args[1], strides[0], padding[0], out_dtype,
                          primfunc_name_hint="conv2d_nchwc")
    return bb.call_te(conv2d_nchwc_general_te, call.args[0], call.args[1], strides, padding, dilation, groups,
                      out_dtype, primfunc_name_hint="conv2d_nchwc")


def is_average(w: np.ndarray) -> bool:
    """Whether a conv weight only averages (or sums): every non-zero weight equal, as in the
    channel mean :func:`.canonical.decompose_group_norm` writes as a 1x1 convolution (zeros are
    the block's padded channels)."""
    nz = w[w != 0]
    return bool(nz.size) and bool(np.all(nz == nz[0]))


#: Columns a bf16 conv's output may be widened by (zero input columns on the right, cut off after
#: it, in its epilogue) to a width its exact column tiles divide: SqueezeNet's 7x7 stem gives 109.
MAX_EXTRA_COLUMNS = 3


def _bf16_conv(bb: Any, call: Any, strides: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...],
               groups: int, plain: bool) -> Any | None:
    """The bf16 call of a blocked conv2d on its activation rounded to bfloat16 bits by an
    elementwise call before it (which :mod:`.bf16act` moves into the activation's producer); None
    when its weight is not a constant or its blocks do not fit the instruction: it stays float32."""
    from tvm import relax
    from tvm.ir.expr import Constant

    from ..task.ops_bf16 import conv2d_nchwc_bf16_te, conv2d_nchwc_general_bf16_te, pack_conv_weight
    from ..templates.conv2d_nchwc import exact_columns_fit
    from . import bf16act

    data, weight = call.args
    if not isinstance(weight, Constant) or str(data.ty.dtype) != "float32":
        return None
    w = weight.value.numpy()
    if w.ndim != 6 or w.shape[5] not in (8, 16, AMX_BLOCK) or (w.shape[4] % 2 and w.shape[1] != 1):
        return None  # an odd input block is padded to pairs only where it is the whole input (the stem)
    width = int(call.ty.shape[3])
    extra = next((e for e in range(MAX_EXTRA_COLUMNS + 1) if exact_columns_fit(width + e)), None)
    if extra is None:
        return None  # its tensorized tiles would be one column wide; f32's tiles have guarded tails
    if is_average(w):
        return None  # a mean over channels (a GroupNorm's statistics): norms compute in float32
    packed = relax.const(pack_conv_weight(w))
    if bf16act.STORE_BF16:
        data = bf16act.rounded(bb, data)
    if plain and groups == 1 and not extra:
        return bb.call_te(conv2d_nchwc_bf16_te, data, packed, strides[0], padding[0],
                          primfunc_name_hint="conv2d_nchwc_bf16")
    top, left, bottom, right = padding * 4 if len(padding) == 1 else padding * 2 if len(padding) == 2 else padding
    out = bb.call_te(conv2d_nchwc_general_bf16_te, data, packed, strides, (top, left, bottom, right + extra * strides[-1]),
                     dilation, groups, primfunc_name_hint="conv2d_nchwc_bf16")
    if not extra:
        return out
    from tvm import topi

    return bb.call_te(topi.strided_slice, bb.emit(out), [0], [width], [1], axes=[3], primfunc_name_hint="strided_slice")
