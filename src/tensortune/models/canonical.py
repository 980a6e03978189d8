"""Ops rewritten into the forms the layout plan blocks (its first step).

* ``conv1d`` as a ``1 x K`` ``conv2d`` on a height-1 image (:func:`conv1d_as_conv2d`): TVM
  legalizes conv1d to loops no template recognises (Whisper's two input convolutions took half of
  its encoder's time at 2-4% of the peak), while a 1xK conv2d runs blocked.
* A lower-rank constant operand of an elementwise op on a 4-D tensor reshaped to 4-D
  (:func:`full_rank_constants`), so that the op follows the blocked layout.
* An inference batch norm after a constant-weight matmul folded into its weight and a shift
  (:func:`fold_batch_norms`), as import folds those after a convolution; any other inference
  batch norm of an image tensor (a pre-activation one: no convolution before it) as a
  per-channel product and sum, which follow the block (``batch_norm`` itself has no blocked
  layout inference).
* A ``broadcast_to`` to the shape its tensor already has dropped (:func:`drop_same_shape_broadcasts`):
  an exported batched matmul broadcasts both operands to their own shapes, and in MobileViT those
  copies sat between the softmax and the values' matmul, where the fused attention could not
  schedule them (it fell back to a generic schedule 40x slower than the three functions).
* A row-wise chain (a scale by one number, a softmax over the last axis) between a reshape that
  splits the leading axes and the reshape that joins them back computed on the unsplit tensor
  (:func:`row_chains_unsplit`): MobileViT's scores ``[16, 256, 256]`` went through ``[4, 4, 256, 256]``
  and back, and a fused attention's row blocks could not narrow what they compute through that
  index arithmetic (every block computed its whole head: 6% of the peak).
* A one-channel operand an elementwise op broadcasts across a convolution's channels (FocalNet's
  gates) broadcast explicitly (:func:`channel_broadcasts_explicit`), so the op follows the block.
* GroupNorm as the reductions and elementwise ops it is made of (:func:`decompose_group_norm`):
  ``relax.nn.group_norm`` has a layout inference that fails on blocked layouts (TVM 0.27:
``ConvertLayout`` raises on it, and the whole model kept NCHW: a PoolFormer ran at 1/200 of
ONNX Runtime's speed). Written as ``mean``, ``subtract``, ``multiply`` and ``rsqrt`` over the
channel axis, with the affine weights as per-channel constants, every step follows the block
(one group: the spatial mean, then the channel mean as a 1x1 convolution) or goes back to NCHW around a reshape
(several groups). The output is ``x * s + t`` with per-channel ``s`` and ``t``, so no centred copy
of the input is kept for it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .channels import ELEMENTWISE, POOLS
from .prepack import static_shape
from .relaxrewrite import conv_out_dtype, rewrite_calls


def _reshaped(emit: Any, v: Any, shape: tuple[int, ...]) -> Any:
    """``v`` in ``shape``: a reshaped constant, else an emitted reshape."""
    from tvm import relax
    from tvm.ir.expr import Constant

    if isinstance(v, Constant) and hasattr(v.value, "numpy"):
        return relax.const(v.value.numpy().reshape(shape))
    return emit(relax.op.reshape(v, shape))


def _decompose(call: Any, m: Any) -> Any:
    """One NCHW ``group_norm`` call as primitive ops (``call`` unchanged for any other form)."""
    from tvm import relax

    a = call.attrs
    x, gamma, beta = call.args
    shape = getattr(getattr(x, "ty", None), "shape", None)
    if shape is None or len(shape) != 4 or int(a.channel_axis) != 1:
        return call
    n, c, h, w = (int(d) for d in shape)
    groups, eps = int(a.num_groups), float(a.epsilon)
    emit = m.builder_.emit
    dt = str(x.ty.dtype)
    if groups == 1:
        # the mean over channels as a 1x1 convolution with weights 1/C (ConvertLayout cannot
        # infer a blocked layout for a mean over the channel axis; a convolution it can)
        avg = relax.const(np.full((c, c, 1, 1), 1.0 / c, dtype=dt))

        def mean(v: Any) -> Any:
            return emit(relax.op.nn.conv2d(emit(relax.op.mean(v, [2, 3], keepdims=True)), avg))

        xg = x
    else:
        xg = emit(relax.op.reshape(x, (n, groups, c // groups, h, w)))

        def mean(v: Any) -> Any:
            return emit(relax.op.mean(v, [2, 3, 4], keepdims=True))

    # the mean of x, the variance of x - mean, then y = x * s + t with s = gamma / std and
    # t = beta - mean * s per channel (tiny): no centred copy of x is kept for the output
    mu = mean(xg)
    centred = emit(relax.op.subtract(xg, mu))
    var = mean(emit(relax.op.multiply(centred, centred)))
    inv = emit(relax.op.rsqrt(emit(relax.op.add(var, relax.const(np.array(eps, dtype=dt))))))
    gshape = (1, c, 1, 1) if groups == 1 else (1, groups, c // groups, 1, 1)
    scale = emit(relax.op.multiply(inv, _reshaped(emit, gamma, gshape))) if bool(a.scale) else inv
    shift = emit(relax.op.negative(emit(relax.op.multiply(mu, scale))))
    if bool(a.center):
        shift = emit(relax.op.add(shift, _reshaped(emit, beta, gshape)))
    y = relax.op.add(emit(relax.op.multiply(xg, scale)), shift)
    if groups != 1:
        y = relax.op.reshape(emit(y), (n, c, h, w))
    return y


def decompose_group_norm(mod: Any) -> Any:
    """``mod`` with every NCHW ``group_norm`` (channel axis 1, 4-D) written as primitive ops."""
    return rewrite_calls(mod, "relax.nn.group_norm", _decompose)


def _conv1d(call: Any, m: Any) -> Any:
    """One NCW ``conv1d`` call as a conv2d over ``[N, C, 1, L]`` reshaped back (``call`` unchanged otherwise)."""
    from tvm import relax

    a = call.attrs
    x, w = call.args
    xs, ws = getattr(x.ty, "shape", None), getattr(w.ty, "shape", None)
    if (str(a.data_layout), str(a.kernel_layout)) != ("NCW", "OIW") or xs is None or ws is None:
        return call
    n, c, length = (int(d) for d in xs)
    o, i, k = (int(d) for d in ws)
    emit = m.builder_.emit
    x4 = emit(relax.op.reshape(x, (n, c, 1, length)))
    w4 = _reshaped(emit, w, (o, i, 1, k))
    pl, pr = (int(p) for p in a.padding)
    y = emit(relax.op.nn.conv2d(x4, w4, (1, int(a.strides[0])), (0, pl, 0, pr), (1, int(a.dilation[0])),
                                int(a.groups), "NCHW", "OIHW", "NCHW", conv_out_dtype(a)))
    ys = [int(d) for d in y.ty.shape]
    return relax.op.reshape(y, (ys[0], ys[1], ys[3]))


def conv1d_as_conv2d(mod: Any) -> Any:
    """``mod`` with every NCW ``conv1d`` computed as a ``conv2d`` over ``[N, C, 1, L]`` and reshaped back."""
    return rewrite_calls(mod, "relax.nn.conv1d", _conv1d)


#: Elementwise binary ops whose constant operand :func:`full_rank_constants` reshapes.
BINARY_OPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def _full_rank(call: Any, m: Any) -> Any:
    """A binary op of a 4-D tensor and a constant of lower rank with the constant reshaped to 4-D
    (``call`` unchanged otherwise)."""
    from tvm import relax
    from tvm.ir.expr import Constant

    def shape(v: Any) -> tuple[int, ...] | None:
        s = getattr(getattr(v, "ty", None), "shape", None)
        return tuple(int(d) for d in s) if s is not None else None

    args = list(call.args)
    for i, (v, other) in enumerate(((args[0], args[1]), (args[1], args[0]))):
        vs, os_ = shape(v), shape(other)
        if isinstance(v, Constant) and vs and os_ is not None and len(os_) == 4 and len(vs) < 4:
            args[i] = _reshaped(m.builder_.emit, v, (1,) * (4 - len(vs)) + vs)
            return getattr(relax.op, call.op.name.split(".")[-1])(*args)
    return call


def full_rank_constants(mod: Any) -> Any:
    """``mod`` with the constant operand of each elementwise binary op on a 4-D tensor reshaped to 4-D:
    ConvertLayout blocks a ``[1, C, 1, 1]`` constant with the tensor but not a ``[C, 1, 1]`` one (a
    PoolFormer's layer scale), and the tensor went back to NCHW around the op."""
    return rewrite_calls(mod, BINARY_OPS, _full_rank)


def _bound(m: Any, v: Any) -> Any:
    """What ``v`` is bound to (``v`` itself when it is not a variable)."""
    from tvm import relax

    return m.lookup_binding(v) if isinstance(v, relax.Var) else v


def _const_matrix(m: Any, w: Any) -> np.ndarray | None:
    """The ``[K, N]`` values of a matmul's weight operand when it is a 2-D constant (``FoldConstant``,
    run before, has folded a linear layer's transpose into it); None otherwise."""
    from tvm.ir.expr import Constant

    w = _bound(m, w)
    value = w.value.numpy() if isinstance(w, Constant) else None
    return value if value is not None and value.ndim == 2 else None


def _bn_scale_shift(call: Any, bias: Any = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(s, t)`` with ``batch_norm(x + bias) == x * s + t`` per channel, from a batch norm's constant
    statistics and affine parameters."""
    _, gamma, beta, mean, var = call.args
    a = call.attrs
    mu = mean.value.numpy()
    g = gamma.value.numpy() if bool(a.scale) else np.ones_like(mu)
    s = g / np.sqrt(var.value.numpy() + np.float32(a.epsilon))
    return s, (bias - mu) * s + (beta.value.numpy() if bool(a.center) else 0)


def _bn_after_matmul(call: Any, m: Any) -> Any:
    """An inference batch norm over the last axis of a matmul whose weight is a constant (through
    reshapes that keep that axis, and a constant bias added before them) as that matmul on the
    weight's columns scaled, plus one constant shift: a linear layer followed by ``BatchNorm1d``
    (LeViT) runs as one dense with a bias in its epilogue, not as a dense and a pass of its own
    (``call`` unchanged for any other form)."""
    from tvm import relax
    from tvm.ir.expr import Constant

    x, gamma, beta, mean, var = call.args
    a = call.attrs
    shape = getattr(x.ty, "shape", None)
    if shape is None or str(x.ty.dtype) != "float32" or int(a.axis) not in (len(shape) - 1, -1):
        return call
    if not all(isinstance(c, Constant) for c in (gamma, beta, mean, var)):
        return call
    reshapes: list[Any] = []
    v = x
    while isinstance(b := _bound(m, v), relax.Call) and getattr(b.op, "name", "") == "relax.reshape" \
            and int(b.args[0].ty.shape[-1]) == int(b.ty.shape[-1]):
        reshapes.append(b.ty.shape)
        v = b.args[0]
    bias = np.float32(0)
    b = _bound(m, v)
    if isinstance(b, relax.Call) and getattr(b.op, "name", "") == "relax.add":
        for c, other in ((b.args[1], b.args[0]), (b.args[0], b.args[1])):
            if isinstance(c, Constant):
                bias, b = c.value.numpy(), _bound(m, other)
                break
    if not (isinstance(b, relax.Call) and getattr(b.op, "name", "") == "relax.matmul"):
        return call
    w = _const_matrix(m, b.args[1])
    n = int(shape[-1])
    if w is None or w.shape[1] != n or np.ndim(bias) > 1 or np.size(bias) not in (1, n):
        return call
    s, t = _bn_scale_shift(call, bias)
    emit = m.builder_.emit
    y = emit(relax.op.matmul(b.args[0], relax.const((w * s[None, :]).astype(np.float32)), out_dtype="float32"))
    y = emit(relax.op.add(y, relax.const(t.astype(np.float32))))
    for rs in reversed(reshapes):
        y = emit(relax.op.reshape(y, rs))
    return relax.Tuple([y, mean, var])


def _bn_as_scale_shift(call: Any, m: Any) -> Any:
    """An inference batch norm over the channels of an image tensor whose statistics are constants
    (one that no convolution precedes: a pre-activation block's) as ``x * s + t``, ``s`` and ``t``
    of shape (1, C, 1, 1). ``ConvertLayout`` has no blocked form of ``batch_norm``: a DenseNet's
    pre-activations went back to NCHW and forward again, two layout transforms a layer; a product
    and a sum follow any block and fuse with the ReLU after them (``call`` unchanged otherwise)."""
    from tvm import relax
    from tvm.ir.expr import Constant

    x, gamma, beta, mean, var = call.args
    a = call.attrs
    shape = getattr(x.ty, "shape", None)
    if shape is None or len(shape) != 4 or str(x.ty.dtype) != "float32" or int(a.axis) not in (1, -3):
        return call
    if not all(isinstance(c, Constant) for c in (gamma, beta, mean, var)):
        return call
    scale, shift = _bn_scale_shift(call)
    emit = m.builder_.emit
    y = emit(relax.op.multiply(x, relax.const(scale.reshape(1, -1, 1, 1).astype(np.float32))))
    y = emit(relax.op.add(y, relax.const(shift.reshape(1, -1, 1, 1).astype(np.float32))))
    return relax.Tuple([y, mean, var])


def _bn_folded(call: Any, m: Any) -> Any:
    """A batch norm after a constant-weight matmul folded into it, else one of an image tensor as a
    product and a sum (``call`` unchanged for any other)."""
    out = _bn_after_matmul(call, m)
    return out if out is not call else _bn_as_scale_shift(call, m)


def fold_batch_norms(mod: Any) -> Any:
    """``mod`` with each inference batch norm left after import (those after a convolution are
    folded there) folded into the matmul before it or written as a per-channel product and sum
    (:func:`_bn_folded`)."""
    from tvm import relax

    return relax.transform.DeadCodeElimination()(rewrite_calls(mod, "relax.nn.batch_norm", _bn_folded))


def _same_shape_broadcast(call: Any, m: Any) -> Any:
    """The tensor itself for a ``broadcast_to`` to its own shape (``call`` otherwise)."""
    x = call.args[0]
    shape = static_shape(x)
    return x if shape is not None and shape == static_shape(call) else call


def drop_same_shape_broadcasts(mod: Any) -> Any:
    """``mod`` without the ``broadcast_to`` calls that change nothing (a copy each)."""
    from tvm import relax

    return relax.transform.CanonicalizeBindings()(rewrite_calls(mod, "relax.broadcast_to", _same_shape_broadcast))


#: How far back through elementwise ops :func:`_from_conv` looks for a convolution.
_CONV_DEPTH = 8
#: The ops :func:`_from_conv` looks through: they keep a tensor's channels where they are.
_PER_CHANNEL = ELEMENTWISE | POOLS | {"relax.mean", "relax.nn.adaptive_avg_pool2d", "relax.clip"}


def _from_conv(m: Any, v: Any) -> bool:
    """Whether ``v`` is a convolution's output through elementwise ops (so it will be blocked)."""
    from tvm import relax
    from tvm.ir.expr import Constant

    for _ in range(_CONV_DEPTH):
        b = _bound(m, v)
        if not isinstance(b, relax.Call) or not b.args:
            return False
        name = getattr(b.op, "name", "")
        if name == "relax.nn.conv2d":
            return True
        if name not in _PER_CHANNEL:
            return False
        tensors = [a for a in b.args if static_shape(a) is not None and len(static_shape(a)) == 4
                   and not isinstance(_bound(m, a), Constant)]
        if not tensors:
            return False
        v = tensors[0]
    return False


def _channel_broadcast(call: Any, m: Any) -> Any:
    """An elementwise op of a convolution's ``C``-channel output (or a reduction of it) and a
    one-channel tensor with that tensor broadcast to ``C`` channels first (``call`` otherwise)."""
    from tvm import relax
    from tvm.ir.expr import Constant

    if len(call.args) != 2:
        return call
    shapes = [static_shape(a) for a in call.args]
    out = static_shape(call)
    if out is None or any(s is None or len(s) != 4 for s in shapes) or \
            any(isinstance(_bound(m, a), Constant) for a in call.args):
        return call
    for i in (0, 1):
        one, other = shapes[i], shapes[1 - i]
        if one[1] == 1 < other[1] and _from_conv(m, call.args[1 - i]):
            args = list(call.args)
            args[i] = m.builder_.emit(relax.op.broadcast_to(args[i], (one[0], other[1], *one[2:])))
            return relax.Call(call.op, args, call.attrs, call.ty_args)
    return call


def channel_broadcasts_explicit(mod: Any) -> Any:
    """``mod`` with each one-channel operand that an elementwise op broadcasts across a
    convolution's channels made ``C`` channels wide by ``broadcast_to``. ConvertLayout cannot
    broadcast a 4-D operand against a blocked 5-D one (FocalNet multiplies its depthwise
    convolutions' outputs by one-channel gates: its 24 depthwise convolutions kept NCHW); the
    explicit broadcast fuses into the op and its layout transform."""
    return rewrite_calls(mod, BINARY_OPS + ("relax.maximum", "relax.minimum"), _channel_broadcast)


def _row_op(call: Any) -> bool:
    """An op that works row by row whatever the leading axes: a softmax over the last axis, an
    elementwise op of one tensor (a GELU between two convolutions of a conv1d stack), an
    elementwise op with a constant (one number; per channel only where :func:`_unsplit` finds the
    reshapes insert unit axes)."""
    from tvm import relax

    from tvm.ir.expr import Constant

    name = getattr(call.op, "name", "")
    if name == "relax.nn.softmax":
        return int(call.attrs.axis) in (-1, len(call.ty.shape) - 1)
    if name in ELEMENTWISE and len(call.args) == 1:
        return True
    return name in BINARY_OPS and isinstance(call.args[0], relax.Var) and isinstance(call.args[1], Constant)


def _const_array(v: Any) -> np.ndarray | None:
    from tvm.ir.expr import Constant

    return v.value.numpy() if isinstance(v, Constant) and hasattr(v.value, "numpy") else None


def _unit_axes_added(inner: tuple[int, ...], outer: tuple[int, ...]) -> list[int] | None:
    """The axes of ``outer`` that are ``inner``'s with unit axes inserted (``[N, C, L]`` ->
    ``[N, C, 1, L]``: ``[2]``); None for any other reshape."""
    i, added = 0, []
    for j, d in enumerate(outer):
        if i < len(inner) and inner[i] == d:
            i += 1
        elif d == 1:
            added.append(j)
        else:
            return None
    return added if i == len(inner) else None


def _lifted(c: np.ndarray, inner: tuple[int, ...], added: list[int]) -> np.ndarray:
    """Constant ``c``, broadcast against ``inner``, shaped for the tensor with the unit axes ``added``
    (a conv1d's bias ``[C, 1]`` against ``[N, C, L]`` -> ``[1, C, 1, 1]`` against ``[N, C, 1, L]``)."""
    shape = [1] * (len(inner) - c.ndim) + list(c.shape)
    for j in added:
        shape.insert(j, 1)
    return c.reshape(shape)


def _unsplit(call: Any, m: Any) -> Any:
    """A ``reshape`` that undoes another (joins back the leading axes it split, or puts back the unit
    axis it dropped: a conv1d computed as a conv2d), with the row ops between them applied to the
    tensor before the first (``call`` unchanged for any other form)."""
    from tvm import relax

    target = static_shape(call)
    chain = []
    v = call.args[0]
    while isinstance(v, relax.Var):
        b = m.lookup_binding(v)
        if not isinstance(b, relax.Call):
            return call
        if getattr(b.op, "name", "") == "relax.reshape":
            x = b.args[0]
            inner = static_shape(v)
            if not chain or target is None or inner is None or static_shape(x) != target or inner[-1] != target[-1]:
                return call
            consts = [_const_array(op.args[1]) for op in chain if len(op.args) > 1]
            if any(static_shape(op) != inner for op in chain) or any(c is not None and c.ndim > len(inner) for c in consts):
                return call  # an op that broadcasts the rows to another shape
            added = _unit_axes_added(inner, target)
            if added is None and any(c is not None and c.size > 1 for c in consts):
                return call  # a per-channel constant: only across inserted unit axes is its place known
            for op in reversed(chain):
                x = m.builder_.emit(_on(op, x, inner, added))
            return x
        if not _row_op(b):
            return call
        chain.append(b)
        v = b.args[0]
    return call


def _on(op: Any, x: Any, inner: tuple[int, ...], added: list[int] | None) -> Any:
    """Row op ``op`` (of a tensor shaped ``inner``) applied to ``x`` instead: a softmax over the last
    axis whatever ``x``'s rank, a number as a 0-d constant, a per-channel constant lifted across the
    unit axes ``added``."""
    from tvm import relax

    if getattr(op.op, "name", "") == "relax.nn.softmax":
        return relax.op.nn.softmax(x, axis=-1)
    rest = list(op.args[1:])
    c = _const_array(rest[0]) if rest else None
    if c is not None:
        rest[0] = relax.const(c.reshape(()) if c.size == 1 else _lifted(c, inner, added or []))
    return relax.Call(op.op, [x, *rest], op.attrs)


def row_chains_unsplit(mod: Any) -> Any:
    """``mod`` with each row-wise chain between a reshape and its inverse on the unsplit tensor
    (:func:`_unsplit`); the reshapes left unused are dropped."""
    from tvm import relax

    mod = relax.transform.CanonicalizeBindings()(rewrite_calls(mod, "relax.reshape", _unsplit))
    return relax.transform.DeadCodeElimination()(mod)


def canonicalize(mod: Any) -> Any:
    """The rewrites of this module (the row chains after conv1d became conv2d: the reshapes back to
    3-D between two convolutions then cancel, and the stack stays 4-D and blocked)."""
    mod = decompose_group_norm(conv1d_as_conv2d(drop_same_shape_broadcasts(fold_batch_norms(mod))))
    return channel_broadcasts_explicit(full_rank_constants(row_chains_unsplit(mod)))
