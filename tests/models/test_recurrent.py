"""ONNX LSTM and GRU nodes, written out as plain ops, compile and match ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from tensortune.models.compile import compile_model
from tensortune.models.importer import ModelError, load_model
from tensortune.models.reference import compare_outputs


class Recurrent(nn.Module):
    """A recurrent layer over a projected sequence, then a classifier on the last step."""

    def __init__(self, kind: str, bidirectional: bool, layers: int) -> None:
        super().__init__()
        cell = nn.LSTM if kind == "LSTM" else nn.GRU
        self.proj = nn.Linear(8, 12)
        self.rnn = cell(12, 16, num_layers=layers, bidirectional=bidirectional, batch_first=True)
        self.head = nn.Linear(16 * (2 if bidirectional else 1), 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(torch.tanh(self.proj(x)))
        return self.head(y[:, -1])


def _export(module: nn.Module, path, steps: int = 7) -> tuple[str, np.ndarray]:
    torch.manual_seed(0)
    x = torch.randn(2, steps, 8)
    with torch.no_grad():
        torch.onnx.export(module.eval(), (x,), str(path), dynamo=False, opset_version=17, input_names=["x"])
    return str(path), x.numpy()


@pytest.mark.parametrize(("kind", "bidirectional", "layers", "steps"), [
    ("LSTM", False, 1, 7), ("LSTM", True, 2, 7), ("GRU", True, 1, 7), ("GRU", False, 2, 7),
    ("GRU", True, 1, 19),  # more steps than TREE_CONCAT: each output a concat of concats
])
def test_recurrent_layers_compile_and_match_onnxruntime(tmp_path, kind: str, bidirectional: bool, layers: int,
                                                        steps: int) -> None:
    import onnxruntime as ort

    torch.manual_seed(1)
    path, x = _export(Recurrent(kind, bidirectional, layers), tmp_path / "rnn.onnx", steps)
    assert kind in {n.op_type for n in onnx.load(path).graph.node}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    model = load_model(path)
    cm = compile_model(model)
    check = compare_outputs(cm.run([x]), want)
    assert check.ok, check.message


def test_a_recurrent_node_it_cannot_write_out_is_one_line(tmp_path) -> None:
    torch.manual_seed(1)
    path, _ = _export(Recurrent("LSTM", False, 1), tmp_path / "rnn.onnx")
    proto = onnx.load(path)
    node = next(n for n in proto.graph.node if n.op_type == "LSTM")
    node.attribute.append(onnx.helper.make_attribute("activations", ["Relu", "Tanh", "Tanh"]))
    onnx.save(proto, path)
    with pytest.raises(ModelError) as e:
        load_model(path)
    assert "activations" in str(e.value) and "\n" not in str(e.value)


def _node_model(path, node, inputs, outputs, inits, opset: int = 14) -> str:
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph([node], "rnn", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), str(path))
    return str(path)


def test_what_pytorch_does_not_export_matches_too(tmp_path) -> None:
    """A GRU resetting before its recurrent product (linear_before_reset=0) with clipped gates, and a
    reverse LSTM from given initial states: forms PyTorch never writes, checked against ONNX Runtime."""
    import onnxruntime as ort
    from onnx import helper

    rng = np.random.default_rng(0)
    seq, batch, feat, hid = 5, 2, 4, 6
    x = rng.standard_normal((seq, batch, feat)).astype(np.float32)
    f32 = np.float32
    cases = [
        (helper.make_node("GRU", ["x", "w", "r", "b"], ["y", "yh"], hidden_size=hid, linear_before_reset=0, clip=1.5),
         {"w": rng.standard_normal((1, 3 * hid, feat)).astype(f32), "r": rng.standard_normal((1, 3 * hid, hid)).astype(f32),
          "b": rng.standard_normal((1, 6 * hid)).astype(f32)}, ["y", "yh"]),
        (helper.make_node("LSTM", ["x", "w", "r", "b", "", "h0", "c0"], ["y", "yh", "yc"], hidden_size=hid,
                          direction="reverse"),
         {"w": rng.standard_normal((1, 4 * hid, feat)).astype(f32), "r": rng.standard_normal((1, 4 * hid, hid)).astype(f32),
          "b": rng.standard_normal((1, 8 * hid)).astype(f32), "h0": rng.standard_normal((1, batch, hid)).astype(f32),
          "c0": rng.standard_normal((1, batch, hid)).astype(f32)}, ["y", "yh", "yc"]),
    ]
    for i, (node, inits, outs) in enumerate(cases):
        path = _node_model(tmp_path / f"node{i}.onnx", node, [("x", list(x.shape))], outs, inits)
        want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        cm = compile_model(load_model(path))
        check = compare_outputs(cm.run([x]), want)
        assert check.ok, (node.op_type, check.message)


@pytest.mark.parametrize("opset", [11, 14])
def test_the_written_out_graph_computes_what_the_node_does(tmp_path, opset: int) -> None:
    """The plain ops, run by ONNX Runtime itself, give the recurrent node's outputs; the steps'
    inputs are one ``Split`` (its sizes an attribute before opset 13, an input from 13)."""
    import onnxruntime as ort
    from onnx import helper

    from tensortune.models.recurrent import expand_recurrent

    rng = np.random.default_rng(1)
    seq, batch, feat, hid = 12, 2, 4, 6
    x = rng.standard_normal((seq, batch, feat)).astype(np.float32)
    node = helper.make_node("GRU", ["x", "w", "r", "b"], ["y", "yh"], hidden_size=hid, linear_before_reset=1,
                            direction="bidirectional")
    inits = {"w": rng.standard_normal((2, 3 * hid, feat)).astype(np.float32),
             "r": rng.standard_normal((2, 3 * hid, hid)).astype(np.float32),
             "b": rng.standard_normal((2, 6 * hid)).astype(np.float32)}
    path = _node_model(tmp_path / "gru.onnx", node, [("x", list(x.shape))], ["y", "yh"], inits, opset)
    proto = onnx.load(path)
    expanded = expand_recurrent(proto)
    splits = [n for n in expanded.graph.node if n.op_type == "Split"]
    assert len(splits) == 2 and all(len(n.output) == seq for n in splits)
    assert all(any(a.name == "split" for a in n.attribute) == (opset < 13) for n in splits)
    assert all((len(n.input) == 2) == (opset >= 13) for n in splits)

    def run(p) -> list[np.ndarray]:
        return ort.InferenceSession(p.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})

    for got, want in zip(run(expanded), run(proto)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
