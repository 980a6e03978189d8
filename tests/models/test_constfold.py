"""Constant layout transforms folded with numpy give what TVM's FoldConstant gives."""
from __future__ import annotations

import numpy as np
import pytest
from tvm import relax
from tvm.ir.expr import GenericConst

from tensortune.models.constfold import fold_constant_transforms


def _module(x: np.ndarray, index_map, pad_value=None):
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        with bb.dataflow():
            y = bb.emit(relax.op.layout_transform(relax.const(x), index_map, pad_value))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _constant(mod) -> np.ndarray:
    found = []

    def visit(e):
        if isinstance(e, GenericConst):
            found.append(e.value.numpy())

    relax.analysis.post_order_visit(mod["main"].body, visit)
    assert len(found) == 1, "the transform is folded into one constant"
    return found[0]


@pytest.mark.parametrize("case", ["blocked-weight", "grouped-weight", "padded-channels"])
def test_numpy_fold_matches_fold_constant(case: str) -> None:
    rng = np.random.default_rng(0)
    if case == "blocked-weight":  # OIHW -> OIHW4i8o
        x = rng.standard_normal((16, 8, 3, 1)).astype("float32")
        index_map, pad = (lambda o, i, h, w: (o // 8, i // 4, h, w, i % 4, o % 8)), None
    elif case == "grouped-weight":  # a grouped weight's input channels per group, 1x7 kernel
        x = rng.standard_normal((8, 4, 1, 7)).astype("float32")
        index_map, pad = (lambda o, i, h, w: (o // 4, i // 4, h, w, i % 4, o % 4)), None
    else:  # NCHW -> NCHW8c with 12 channels: the layout pads 4 channels with the pad value
        x = rng.standard_normal((1, 12, 2, 3)).astype("float32")
        index_map, pad = (lambda n, c, h, w: (n, c // 8, h, w, c % 8)), 0.0
    mod = _module(x, index_map, pad)
    ours = fold_constant_transforms(mod)
    theirs = relax.transform.FoldConstant()(mod)
    np.testing.assert_array_equal(_constant(ours), _constant(theirs))
