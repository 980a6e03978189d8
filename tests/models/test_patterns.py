"""The pattern networks export to ONNX with the structure each stands for."""
from __future__ import annotations

import onnx
import pytest

from tensortune.models.patterns import export_pattern, pattern_names

#: ONNX node types each pattern's export must hold.
EXPECTED = {
    "cross_stage": {"Split", "Concat"},
    "hier_split": {"Split", "Concat", "AveragePool"},
    "ghost": {"Concat", "Slice"},
    "mixed_kernel": {"Split", "Concat"},
    "reduced_attn": {"Transpose", "Softmax", "LayerNormalization"},
    "four_three_d": {"AveragePool", "Transpose", "Softmax"},
    "dense": {"Concat", "AveragePool"},
    "multi_res": {"Resize", "Concat", "Add"},
    "recurrent": {"LSTM", "GRU"},
}


def test_every_pattern_is_checked() -> None:
    assert set(pattern_names()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pattern_exports_its_structure(tmp_path, name: str) -> None:
    proto = onnx.load(export_pattern(name, str(tmp_path)))
    ops = {n.op_type for n in proto.graph.node}
    assert EXPECTED[name] <= ops, sorted(ops)
    (inp,) = [i for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
    assert all(d.dim_value > 0 for d in inp.type.tensor_type.shape.dim)  # static: the importer needs no --input-shape
