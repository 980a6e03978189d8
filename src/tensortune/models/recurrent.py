"""ONNX ``LSTM`` and ``GRU`` nodes written out as the plain ONNX ops TVM's frontend imports.

TVM 0.27's ONNX frontend has no recurrent operators. With the input shapes fixed, the sequence
length is static, so each recurrent node becomes, per direction: one matrix product of the whole
input sequence by the input weights (all time steps at once), then one step per time step (the
hidden state by the recurrent weights, the gates, the new cell and hidden state), unrolled. The
weights must be constants (initializers): their transposes and summed biases are computed here,
once. What the converter does not cover (activations other than the defaults, ``input_forget``,
peepholes, sequence lengths that differ from the padded length) is refused in one line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The recurrent node types this module writes out.
RECURRENT = ("LSTM", "GRU")
#: Gates per cell: ONNX's order is i, o, f, c for LSTM and z, r, h for GRU.
GATES = {"LSTM": 4, "GRU": 3}
DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}
#: Inputs above which a step concat is written as a tree of concats (:meth:`_Graph.concat`).
TREE_CONCAT = 8


class RecurrentError(ValueError):
    """A recurrent node this converter cannot write out (one line)."""


@dataclass
class _Graph:
    """The nodes and constants written so far, with fresh names."""

    prefix: str
    nodes: list[Any] = field(default_factory=list)
    consts: list[Any] = field(default_factory=list)
    n: int = 0

    def name(self, hint: str) -> str:
        self.n += 1
        return f"{self.prefix}/{hint}_{self.n}"

    def const(self, value: np.ndarray, hint: str = "const") -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.consts.append(numpy_helper.from_array(np.asarray(value, order="C"), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str = "", **attrs: Any) -> str:
        from onnx import helper

        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def slice(self, x: str, lo: int, hi: int, axis: int) -> str:
        return self.op("Slice", [x, self.const(np.array([lo], np.int64)), self.const(np.array([hi], np.int64)),
                                 self.const(np.array([axis], np.int64))])

    def split(self, x: str, parts: int, size: int, axis: int, opset: int) -> list[str]:
        """``x`` cut into ``parts`` pieces of ``size`` along ``axis`` by one ``Split``: one kernel,
        where a ``Slice`` a piece would be a kernel a piece."""
        from onnx import helper

        if parts == 1:
            return [x]
        outs = [self.name("part") for _ in range(parts)]
        if opset >= 13:  # the sizes are an input from opset 13, an attribute before
            node = helper.make_node("Split", [x, self.const(np.full(parts, size, np.int64), "split")], outs,
                                    name=outs[0], axis=axis)
        else:
            node = helper.make_node("Split", [x], outs, name=outs[0], axis=axis, split=[size] * parts)
        self.nodes.append(node)
        return outs

    def concat(self, parts: list[str], axis: int) -> str:
        """``parts`` concatenated; many of them as concats of about sqrt(n) each, concatenated. TVM
        finds each output value's input by a chain of comparisons, one per input (50 steps: 50)."""
        k = math.isqrt(len(parts) - 1) + 1 if len(parts) > TREE_CONCAT else len(parts)
        if k < len(parts):
            parts = [self.op("Concat", parts[i:i + k], axis=axis) for i in range(0, len(parts), k)]
        return self.op("Concat", parts, axis=axis)

    def reshape(self, x: str, shape: tuple[int, ...]) -> str:
        return self.op("Reshape", [x, self.const(np.array(shape, np.int64), "shape")])


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _check(node: Any, attrs: dict[str, Any], kind: str) -> None:
    acts = [a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations", [])]
    directions = 2 if attrs.get("direction", b"forward") in (b"bidirectional", "bidirectional") else 1
    if acts and [a.lower() for a in acts] != [a.lower() for a in DEFAULT_ACTIVATIONS[kind] * directions]:
        raise RecurrentError(f"{kind} node {node.name!r}: activations {acts} (only the defaults are supported)")
    if attrs.get("input_forget", 0):
        raise RecurrentError(f"{kind} node {node.name!r}: input_forget=1 is not supported")


def _step_lstm(g: _Graph, xw_t: str, h: str | None, c: str | None, rt: str, hidden: int, clip: float | None
               ) -> tuple[str, str]:
    """One LSTM step; ``h`` or ``c`` None: zero (the first step without an initial state)."""
    gates = xw_t if h is None else g.op("Add", [xw_t, g.op("MatMul", [h, rt])])
    if clip is not None:
        gates = g.op("Clip", [gates, g.const(np.array(-clip, np.float32)), g.const(np.array(clip, np.float32))])
    i, o, f, cc = (g.slice(gates, k * hidden, (k + 1) * hidden, 1) for k in range(4))
    i, o, f = (g.op("Sigmoid", [v]) for v in (i, o, f))
    new = g.op("Mul", [i, g.op("Tanh", [cc])])
    c = new if c is None else g.op("Add", [g.op("Mul", [f, c]), new])
    return g.op("Mul", [o, g.op("Tanh", [c])]), c


def _step_gru(g: _Graph, xw_t: str, h: str | None, rt: str, rb: np.ndarray, hidden: int, linear_before_reset: bool,
              clip: float | None) -> str:
    """One GRU step; ``h`` None: zero (the first step without an initial state)."""
    def clipped(v: str) -> str:
        return v if clip is None else g.op("Clip", [v, g.const(np.array(-clip, np.float32)),
                                                    g.const(np.array(clip, np.float32))])

    x_zr, x_h = g.slice(xw_t, 0, 2 * hidden, 1), g.slice(xw_t, 2 * hidden, 3 * hidden, 1)
    if h is None:
        zr_in = x_zr
    elif linear_before_reset:  # one product for the three gates, then one elementwise pass
        hw = g.op("Add", [g.op("MatMul", [h, rt]),
                          g.const(np.concatenate([np.zeros(2 * hidden, np.float32), rb[2 * hidden:]]), "rb")])
        zr_in = g.op("Add", [x_zr, g.slice(hw, 0, 2 * hidden, 1)])
    else:
        zr_in = g.op("Add", [x_zr, g.op("MatMul", [h, g.slice(rt, 0, 2 * hidden, 1)])])
    zr = g.op("Sigmoid", [clipped(zr_in)])
    z, r = g.slice(zr, 0, hidden, 1), g.slice(zr, hidden, 2 * hidden, 1)  # their biases are in x_zr
    if h is None:
        hr = g.op("Mul", [r, g.const(rb[2 * hidden:])]) if linear_before_reset else g.const(rb[2 * hidden:])
    elif linear_before_reset:
        hr = g.op("Mul", [r, g.slice(hw, 2 * hidden, 3 * hidden, 1)])
    else:
        hr = g.op("Add", [g.op("MatMul", [g.op("Mul", [r, h]), g.slice(rt, 2 * hidden, 3 * hidden, 1)]),
                          g.const(rb[2 * hidden:])])
    cand = g.op("Tanh", [clipped(g.op("Add", [x_h, hr]))])
    keep = g.op("Neg", [cand]) if h is None else g.op("Sub", [h, cand])
    return g.op("Add", [cand, g.op("Mul", [z, keep])])  # (1 - z) * cand + z * h


def _expand(node: Any, shapes: dict[str, tuple[int, ...]], consts: dict[str, np.ndarray],
            prefix: str, opset: int) -> _Graph:
    """The nodes replacing one LSTM or GRU node."""
    kind = node.op_type
    attrs = _attrs(node)
    _check(node, attrs, kind)
    gates, g = GATES[kind], _Graph(prefix)
    ins = list(node.input) + [""] * (8 - len(node.input))
    x, w_name, r_name, b_name, lens_name, h0_name = ins[:6]
    c0_name = ins[6] if kind == "LSTM" else ""
    if kind == "LSTM" and ins[7]:
        raise RecurrentError(f"{kind} node {node.name!r}: peephole weights are not supported")
    if w_name not in consts or r_name not in consts or (b_name and b_name not in consts):
        raise RecurrentError(f"{kind} node {node.name!r}: weights computed at run time are not supported")
    if x not in shapes:
        raise RecurrentError(f"{kind} node {node.name!r}: the input's shape is not static")
    layout = int(attrs.get("layout", 0))
    if layout:
        x = g.op("Transpose", [x], perm=[1, 0, 2])
    sx = shapes[node.input[0]]
    seq, batch = (sx[1], sx[0]) if layout else (sx[0], sx[1])
    if lens_name:
        lens = consts.get(lens_name)
        if lens is None or np.any(lens != seq):
            raise RecurrentError(f"{kind} node {node.name!r}: sequence lengths other than the padded {seq}")
    for name in (h0_name, c0_name):  # an initial state of constant zeros is no state
        if name and name in consts and not np.any(consts[name]):
            h0_name, c0_name = ("" if name == h0_name else h0_name), ("" if name == c0_name else c0_name)
    hidden = int(attrs["hidden_size"])
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    clip = float(attrs["clip"]) if "clip" in attrs else None
    w, r = consts[w_name], consts[r_name]
    b = consts[b_name] if b_name else np.zeros((len(dirs), 2 * gates * hidden), np.float32)
    ys, hs, cs = [], [], []
    for d, way in enumerate(dirs):
        wb, rb = b[d, :gates * hidden], b[d, gates * hidden:]
        in_bias = wb + rb if kind == "LSTM" else wb + np.concatenate([rb[:2 * hidden], np.zeros(hidden, rb.dtype)])
        rows = g.reshape(x, (seq * batch, -1))  # every step's rows in one matrix product
        xw = g.op("Add", [g.op("MatMul", [rows, g.const(w[d].T.astype(np.float32), "w")]),
                          g.const(in_bias.astype(np.float32), "b")])
        rt = g.const(r[d].T.astype(np.float32), "r")
        h = g.reshape(g.slice(h0_name, d, d + 1, 0), (batch, hidden)) if h0_name else None
        c = g.reshape(g.slice(c0_name, d, d + 1, 0), (batch, hidden)) if c0_name else None
        xw_steps = g.split(xw, seq, batch, 0, opset)
        steps: dict[int, str] = {}
        for t in (range(seq) if way == "forward" else range(seq - 1, -1, -1)):
            xw_t = xw_steps[t]
            if kind == "LSTM":
                h, c = _step_lstm(g, xw_t, h, c, rt, hidden, clip)
            else:
                h = _step_gru(g, xw_t, h, rt, rb.astype(np.float32), hidden, bool(attrs.get("linear_before_reset", 0)),
                              clip)
            steps[t] = g.reshape(h, (1, 1, batch, hidden))
        ys.append(g.concat([steps[t] for t in range(seq)], axis=0))
        hs.append(g.reshape(h, (1, batch, hidden)))
        cs.append(g.reshape(c, (1, batch, hidden)) if kind == "LSTM" else "")
    outs = list(node.output) + [""] * 3
    results = [g.op("Concat", ys, axis=1), g.op("Concat", hs, axis=0)]
    if kind == "LSTM":
        results.append(g.op("Concat", cs, axis=0))
    if layout:
        results[0] = g.op("Transpose", [results[0]], perm=[2, 0, 1, 3])
        results[1:] = [g.op("Transpose", [v], perm=[1, 0, 2]) for v in results[1:]]
    from onnx import helper

    for want, got in zip(outs, results):
        if want:
            g.nodes.append(helper.make_node("Identity", [got], [want], name=g.name("out")))
    return g


def expand_recurrent(proto: Any) -> Any:
    """``proto`` (inputs fixed to static shapes) with every LSTM and GRU node written out
    (:mod:`this module <.recurrent>`); unchanged without any. Raises :class:`RecurrentError`."""
    if not any(n.op_type in RECURRENT for n in proto.graph.node):
        return proto
    import onnx
    from onnx import numpy_helper

    inferred = onnx.shape_inference.infer_shapes(proto)
    shapes: dict[str, tuple[int, ...]] = {}
    for v in [*inferred.graph.input, *inferred.graph.value_info]:
        dims = v.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[v.name] = tuple(int(d.dim_value) for d in dims)
    consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for n in proto.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=13)
    out = onnx.ModelProto.FromString(proto.SerializeToString())
    nodes = []
    for i, n in enumerate(proto.graph.node):
        if n.op_type not in RECURRENT:
            nodes.append(n)
            continue
        g = _expand(n, shapes, consts, f"{n.op_type.lower()}{i}", opset)
        nodes.extend(g.nodes)
        out.graph.initializer.extend(g.consts)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out
