"""Channel splits, slices and concats inside the blocked layout.

TVM 0.27's ``ConvertLayout`` cannot carry them: a channel ``split`` keeps its split points while
its axis moves to the block axis (the shapes come out wrong, the plan fails and the whole model
stays NCHW), and a channel ``strided_slice``, with the ``concat`` that reads it, falls back to
NCHW with a ``layout_transform`` on each side. So:

- before conversion, a channel ``split`` of a 4-D tensor is written as one slice per part
  (:func:`splits_as_slices`);
- after it, every transform from ``NCHW{b}c`` back to NCHW is moved down past what reads it
  (:func:`sink_transforms`): channel slices at block boundaries, concats, elementwise ops,
  pooling and resizing then run in the block, and the transform meets the one into the next convolution's
  block, and both go. A slice or concat whose channels do not fall on block boundaries keeps
  NCHW, with its transforms. An image turned into channels-last tokens (or back) goes from the
  block to them in one transform instead of a transform and a transpose.
"""
from __future__ import annotations

from typing import Any

from .prepack import static_shape as _shape
from .relaxrewrite import conv_out_dtype, rewrite_calls

#: Ops that compute each element from the same element of their operands: a transform moves past them.
ELEMENTWISE = frozenset({
    "relax.sigmoid", "relax.tanh", "relax.exp", "relax.negative", "relax.sqrt", "relax.rsqrt", "relax.abs",
    "relax.nn.relu", "relax.nn.silu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.leakyrelu",
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
    "relax.power",
})
POOLS = frozenset({"relax.nn.avg_pool2d", "relax.nn.max_pool2d"})
RESIZE = "relax.image.resize2d"
CHANNEL_AXIS = 1


def slice_ints(v: Any) -> list[int]:
    """The integers of a slice argument (a tuple of prim values, or a shape)."""
    items = v.fields if hasattr(v, "fields") else v.values
    return [int(getattr(i, "value", i)) for i in items]


def _channel_axis(axis: int, ndim: int) -> bool:
    return ndim == 4 and axis % ndim == CHANNEL_AXIS


def _as_slices(call: Any, m: Any) -> Any:
    """A channel ``split`` of a 4-D tensor as a tuple of channel slices, a split in one part as its
    input (``call`` otherwise)."""
    from tvm import relax

    x = call.args[0]
    shape = _shape(x)
    if shape is None or not _channel_axis(int(call.attrs.axis), len(shape)):
        return call
    sections = call.attrs.indices_or_sections
    c = shape[CHANNEL_AXIS]
    if isinstance(sections, (int,)) or hasattr(sections, "value"):
        n = int(getattr(sections, "value", sections))
        if c % n:
            return call
        points = [c // n * i for i in range(1, n)]
    else:
        points = [int(getattr(p, "value", p)) for p in sections]
    if not points:  # one part: the ONNX importer types a one-output Split as its input tensor
        return x if isinstance(call.ty, relax.TensorType) else relax.Tuple([x])
    bounds = [0, *points, c]
    return relax.Tuple([m.builder_.emit(relax.op.strided_slice(x, [CHANNEL_AXIS], [lo], [hi]))
                        for lo, hi in zip(bounds, bounds[1:])])


def splits_as_slices(mod: Any) -> Any:
    """``mod`` with every channel ``split`` of a 4-D tensor written as slices (which the layout
    conversion handles correctly, and :func:`sink_transforms` then takes into the block)."""
    from tvm import relax

    return relax.transform.CanonicalizeBindings()(rewrite_calls(mod, "relax.split", _as_slices))


# ---------------------------------------------------------------- transforms
def _block_of(call: Any, to_plain: bool) -> tuple[Any, int] | None:
    """``(source, b)`` if ``call`` is a layout transform from ``NCHW{b}c`` to NCHW (``to_plain``) or
    from NCHW to ``NCHW{b}c`` that only moves elements (no channel padding), else None."""
    from tvm import relax

    if not isinstance(call, relax.Call) or getattr(call.op, "name", "") != "relax.layout_transform":
        return None
    src, dst = _shape(call.args[0]), _shape(call)
    if src is None or dst is None:
        return None
    plain, blocked = (dst, src) if to_plain else (src, dst)
    if len(plain) != 4 or len(blocked) != 5:
        return None
    b = blocked[4]
    if blocked != (plain[0], plain[1] // b, plain[2], plain[3], b) or plain[1] % b:
        return None
    probe = [0, 1, 2, 3, b - 1] if to_plain else [0, b + 1, 2, 3]
    want = [0, b + b - 1, 2, 3] if to_plain else [0, 1, 2, 3, 1]
    got = [int(i) for i in call.attrs.index_map.map_indices(probe)]
    return (call.args[0], b) if got == want else None


def _bound_call(m: Any, v: Any) -> Any:
    from tvm import relax

    return m.lookup_binding(v) if isinstance(v, relax.Var) else v


def _from_block(m: Any, v: Any) -> tuple[Any, int, Any] | None:
    """``(blocked source, b, the transform's call)`` if ``v`` is bound to a transform back to NCHW."""
    call = _bound_call(m, v)
    found = _block_of(call, to_plain=True)
    return (found[0], found[1], call) if found else None


def _to_plain(m: Any, blocked: Any, like: Any) -> Any:
    """``blocked`` transformed back to NCHW with the index map of the transform ``like``."""
    from tvm import relax

    return relax.op.layout_transform(m.builder_.emit(blocked), like.attrs.index_map)


def _scalar(v: Any) -> bool:
    from tvm.ir.expr import Constant

    return isinstance(v, Constant) and _shape(v) == ()


def _sink(call: Any, m: Any) -> Any:
    """``call`` with a transform back to NCHW among its operands moved after it, where the op can run
    in the block; a transform into the block of a transform back to NCHW cancels (``call`` otherwise)."""
    from tvm import relax

    name = call.op.name
    if name == "relax.layout_transform":
        into = _block_of(call, to_plain=False)
        back = _from_block(m, into[0]) if into else None
        if back and back[1] == into[1] and _shape(back[0]) == _shape(call):
            return back[0]
        channels_last = _channels_last_source(m, into[0]) if into else None
        if channels_last is not None:
            b = into[1]
            return relax.op.layout_transform(channels_last, lambda n, h, w, c: (n, c // b, h, w, c % b))
        return call
    if name == "relax.permute_dims":
        return _sink_permute(call, m)
    if name == "relax.strided_slice":
        return _sink_slice(call, m)
    if name == "relax.concat":
        return _sink_concat(call, m)
    if name in POOLS:
        return _sink_pool(call, m)
    if name == RESIZE:
        return _sink_resize(call, m)
    return _sink_elementwise(call, m)


def _sink_slice(call: Any, m: Any) -> Any:
    from tvm import relax

    back = _from_block(m, call.args[0])
    if back is None or len(call.args) > 4 and any(s != 1 for s in slice_ints(call.args[4])):
        return call
    src, b, t = back
    axes, begin, end = slice_ints(call.args[1]), slice_ints(call.args[2]), slice_ints(call.args[3])
    c = _shape(call.args[0])[CHANNEL_AXIS]
    if axes != [CHANNEL_AXIS] or begin[0] % b or min(end[0], c) % b or begin[0] < 0:
        return call
    return _to_plain(m, relax.op.strided_slice(src, [CHANNEL_AXIS], [begin[0] // b], [min(end[0], c) // b]), t)


def _sink_concat(call: Any, m: Any) -> Any:
    from tvm import relax

    fields = call.args[0].fields if isinstance(call.args[0], relax.Tuple) else None
    shape = _shape(call)
    if fields is None or shape is None or not _channel_axis(int(call.attrs.axis), len(shape)):
        return call
    backs = [_from_block(m, f) for f in fields]
    if any(bk is None for bk in backs) or len({bk[1] for bk in backs}) != 1:
        return call
    return _to_plain(m, relax.op.concat([bk[0] for bk in backs], axis=CHANNEL_AXIS), backs[0][2])


def _sink_pool(call: Any, m: Any) -> Any:
    from tvm import relax

    back = _from_block(m, call.args[0])
    a = call.attrs
    if back is None or str(a.layout) != "NCHW" or str(a.out_layout or "NCHW") != "NCHW":
        return call
    src, b, t = back
    op = relax.op.nn.avg_pool2d if call.op.name == "relax.nn.avg_pool2d" else relax.op.nn.max_pool2d
    kw = {"count_include_pad": bool(a.count_include_pad)} if call.op.name == "relax.nn.avg_pool2d" else {}
    pooled = op(src, [int(v) for v in a.pool_size], [int(v) for v in a.strides], [int(v) for v in a.padding],
                [int(v) for v in a.dilation], bool(a.ceil_mode), layout=f"NCHW{b}c", out_layout=f"NCHW{b}c", **kw)
    return _to_plain(m, pooled, t)


def _sink_resize(call: Any, m: Any) -> Any:
    """An image resized in NCHW (an HRNet's upsampled branches, a decoder's) resized in the block:
    TOPI's resize reads ``NCHW{b}c`` directly, each channel alone."""
    from tvm import relax

    back = _from_block(m, call.args[0])
    a = call.attrs
    if back is None or str(a.layout) != "NCHW":
        return call
    src, b, t = back
    resized = relax.op.image.resize2d(src, call.args[1], tuple(float(v) for v in a.roi), f"NCHW{b}c", str(a.method),
                                      str(a.coordinate_transformation_mode), str(a.rounding_method),
                                      float(a.cubic_alpha), int(a.cubic_exclude), float(a.extrapolation_value),
                                      conv_out_dtype(a))
    return _to_plain(m, resized, t)


def _sink_elementwise(call: Any, m: Any) -> Any:
    shape = _shape(call)
    if shape is None or len(shape) != 4:
        return call
    backs = [None if _scalar(a) else _from_block(m, a) for a in call.args]
    tensors = [bk for a, bk in zip(call.args, backs) if not _scalar(a)]
    if not tensors or any(bk is None for bk in tensors) or len({bk[1] for bk in tensors}) != 1 \
            or any(_shape(bk[2]) != shape for bk in tensors):
        return call
    from tvm import relax

    args = [a if bk is None else bk[0] for a, bk in zip(call.args, backs)]
    return _to_plain(m, relax.Call(call.op, args, call.attrs, call.ty_args), tensors[0][2])


def _axes(call: Any) -> list[int] | None:
    axes = call.attrs.axes
    return None if axes is None else [int(a) for a in axes]


def _channels_last_source(m: Any, v: Any) -> Any | None:
    """The channels-last tensor ``(N, H, W, C)`` that the NCHW value ``v`` transposes: ``v`` bound to
    ``permute_dims(y, [0, 3, 1, 2])``, or to tokens ``(N, H*W, C)`` transposed and reshaped to
    ``(N, C, H, W)`` (a transformer's tokens back to an image); None otherwise."""
    from tvm import relax

    call = _bound_call(m, v)
    shape = _shape(v)
    if not isinstance(call, relax.Call) or shape is None or len(shape) != 4:
        return None
    name = getattr(call.op, "name", "")
    if name == "relax.permute_dims" and _axes(call) == [0, 3, 1, 2]:
        return call.args[0]
    if name != "relax.reshape":
        return None
    inner = _bound_call(m, call.args[0])
    if not isinstance(inner, relax.Call) or getattr(inner.op, "name", "") != "relax.permute_dims" \
            or _axes(inner) != [0, 2, 1]:
        return None
    n, c, h, w = shape
    if _shape(inner.args[0]) != (n, h * w, c):
        return None
    return m.builder_.emit(relax.op.reshape(inner.args[0], (n, h, w, c)))


def _sink_permute(call: Any, m: Any) -> Any:
    """A blocked image read as channels last: ``permute_dims(back(z), [0, 2, 3, 1])``, or flattened to
    tokens ``permute_dims(reshape(back(z), (N, C, H*W)), [0, 2, 1])``, as one transform of ``z``."""
    from tvm import relax

    axes = _axes(call)
    src = call.args[0]
    tokens = None
    if axes == [0, 2, 1]:
        flat = _bound_call(m, src)
        if not isinstance(flat, relax.Call) or getattr(flat.op, "name", "") != "relax.reshape":
            return call
        tokens, src = _shape(call), flat.args[0]
    elif axes != [0, 2, 3, 1]:
        return call
    back = _from_block(m, src)
    if back is None:
        return call
    n, c, h, w = _shape(src)
    if tokens is not None and tokens != (n, h * w, c):
        return call
    b = back[1]
    last = relax.op.layout_transform(back[0], lambda n_, cb, h_, w_, ci: (n_, h_, w_, cb * b + ci))
    return relax.op.reshape(m.builder_.emit(last), tokens) if tokens is not None else last


def sink_transforms(mod: Any) -> Any:
    """``mod`` (after the layout conversion) with its transforms back to NCHW moved down past channel
    slices on block boundaries, channel concats, elementwise ops, pooling and resizing, and cancelled against
    the transforms into the block they meet; a transpose between the block and channels last
    (tokens) folded into the transform."""
    from tvm import relax

    ops = ("relax.layout_transform", "relax.permute_dims", "relax.strided_slice", "relax.concat", *POOLS, RESIZE,
           *ELEMENTWISE)
    out = rewrite_calls(mod, ops, _sink)
    return relax.transform.CanonicalizeBindings()(relax.transform.DeadCodeElimination()(out))
