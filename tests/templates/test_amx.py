"""bf16 on AMX tiles: which tasks take the tile templates, the instructions they hold, and their
outputs against the float32 op (the last only where this CPU has AMX-BF16)."""
from __future__ import annotations

import pytest

from tensortune import precision as prec
from tensortune.task import Task
from tensortune.templates import amx

SPR = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "sapphirerapids", "num-cores": 2}
ZNVER4 = {**SPR, "mcpu": "znver4"}
needs_amx = pytest.mark.skipif(amx.CPU_FLAG not in prec.host_flags(),
                               reason="this CPU has no amx_bf16: the tile kernels cannot run here")


def test_bf16_tasks_take_the_tiles_where_the_target_has_them_and_the_shape_fits() -> None:
    conv = [14, 14, 64, 64, 3, 1, 1, 16, 16]
    assert Task.from_op("conv2d_nchwc_bf16", conv, target=SPR).template_name == "conv2d_nchwc_amx"
    assert Task.from_op("dense_pack_bf16", [64, 256, 64, 16], target=SPR).template_name == "dense_pack_amx"
    assert Task.from_op("batch_matmul_bf16", [2, 16, 32, 64, 16], target=SPR).template_name == "batch_matmul_amx"
    general = [8, 8, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, 16, 16]
    assert Task.from_op("conv2d_nchwc_general_bf16", general, target=SPR).template_name == "conv2d_nchwc_general_amx"
    # no AMX on the target, or the feature turned off: the vdpbf16ps template
    assert Task.from_op("conv2d_nchwc_bf16", conv, target=ZNVER4).template_name == "conv2d_nchwc_bf16"
    off = {**SPR, "mattr": ["-amx-bf16"]}
    assert Task.from_op("conv2d_nchwc_bf16", conv, target=off).template_name == "conv2d_nchwc_bf16"
    on = {**ZNVER4, "mcpu": "rocketlake", "mattr": ["+amx-tile", "+amx-bf16", "+avx512bf16"]}
    assert Task.from_op("conv2d_nchwc_bf16", conv, target=on).template_name == "conv2d_nchwc_amx"
    # shapes a tile does not fit: 8-channel output blocks, fewer than MIN_ROWS rows a tile
    assert Task.from_op("conv2d_nchwc_bf16", [5, 5, 16, 8, 1, 1, 0, 8, 8], target=SPR).template_name \
        == "conv2d_nchwc_bf16"
    assert Task.from_op("dense_pack_bf16", [3, 64, 64, 16], target=SPR).template_name == "dense_pack_bf16"
    # a template named by the caller stays
    assert Task.from_op("conv2d_nchwc_bf16", conv, target=SPR, template="conv2d_nchwc_bf16").template_name \
        == "conv2d_nchwc_bf16"
    # f32 and the two bf16 templates never share records
    keys = {Task.from_op("conv2d_nchwc_bf16", conv, target=t).workload_key for t in (SPR, ZNVER4)}
    assert len(keys) == 2


def test_a_bf16_model_on_amx_takes_blocks_of_32_channels() -> None:
    """Its input blocks fill a tile row (every ``tdpbf16ps`` sums 32 channels); f32, and bf16
    without AMX, keep the vector's 16."""
    from tensortune.models.layout import candidate_blocks
    from tensortune.precision import AMX_BLOCK

    assert candidate_blocks(SPR, "bf16")[0] == AMX_BLOCK
    assert AMX_BLOCK not in candidate_blocks(SPR, "f32") and AMX_BLOCK not in candidate_blocks(ZNVER4, "bf16")
    wide = [6, 6, 64, 64, 3, 1, 1, 32, 32]
    assert Task.from_op("conv2d_nchwc_bf16", wide, target=SPR).template_name == "conv2d_nchwc_amx"


def test_the_amx_block_is_not_taken_where_padding_channels_to_it_costs_more() -> None:
    """MobileNetV2's 24 and 144 channels stay in blocks of 16."""
    from tensortune.models.layout import _Conv, choose_block
    from tensortune.precision import AMX_BLOCK

    def conv(ic: int, oc: int) -> _Conv:
        return _Conv(1, (1, ic, 28, 28), (oc, ic, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), ("NCHW", "OIHW", "NCHW"))

    assert choose_block([conv(64, 128), conv(128, 256)], SPR, "bf16") == AMX_BLOCK
    assert choose_block([conv(24, 144), conv(144, 24)], SPR, "bf16") == 16  # padded to 32: 1.8x the FLOPs
    assert choose_block([conv(64, 128)], SPR, "f32") == 16


@pytest.mark.parametrize("op,shape", [("conv2d_nchwc_bf16", [6, 6, 32, 32, 3, 1, 1, 16, 16]),
                                      ("conv2d_nchwc_bf16", [6, 6, 64, 64, 3, 1, 1, 32, 32]),
                                      ("conv2d_nchwc_bf16", [8, 8, 16, 32, 1, 1, 0, 16, 16]),
                                      ("dense_pack_bf16", [16, 32, 64, 16])])
def test_codegen_for_an_amx_cpu_holds_the_tile_instructions(op: str, shape: list[int]) -> None:
    """Built for sapphirerapids (no execution: any x86 machine checks it)."""
    import tvm

    from tensortune.target import make_target

    task = Task.from_op(op, shape, target=SPR)
    lib = tvm.compile(task.instantiate(task.default_config()), target=make_target(SPR))
    asm = lib.mod.inspect_source("asm")
    assert all(i in asm for i in ("ldtilecfg", "tileloadd", "tdpbf16ps", "tilestored")), op


@needs_amx
@pytest.mark.parametrize("op,shape", [("conv2d_nchwc_bf16", [14, 14, 32, 32, 3, 1, 1, 16, 16]),
                                      ("conv2d_nchwc_bf16", [8, 8, 32, 48, 1, 1, 0, 16, 16]),
                                      # a stem: one 4-channel input block, 7x7 window, stride 2
                                      ("conv2d_nchwc_bf16", [20, 20, 4, 16, 7, 2, 3, 4, 16]),
                                      # 2-channel blocks (one pair a step), stride 2 of a 1x1
                                      ("conv2d_nchwc_bf16", [9, 9, 2, 16, 3, 1, 1, 2, 16]),
                                      ("conv2d_nchwc_bf16", [12, 12, 16, 32, 1, 2, 0, 16, 16]),
                                      # general: 1x5 kernel, stride (1, 2), asymmetric padding, two groups
                                      ("conv2d_nchwc_general_bf16",
                                       [10, 12, 64, 64, 1, 5, 1, 2, 0, 2, 1, 1, 1, 1, 2, 16, 16]),
                                      # dilation 2; four groups of one block each (RegNet's)
                                      ("conv2d_nchwc_general_bf16",
                                       [12, 12, 32, 32, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1, 16, 16]),
                                      ("conv2d_nchwc_general_bf16",
                                       [8, 8, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, 16, 16]),
                                      # 100 pairs: tiles of 10
                                      # blocks of 32 channels (two tiles a block), plain and two groups
                                      ("conv2d_nchwc_bf16", [6, 6, 64, 64, 3, 1, 1, 32, 32]),
                                      ("conv2d_nchwc_general_bf16",
                                       [6, 5, 64, 64, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 2, 32, 32]),
                                      ("dense_pack_bf16", [24, 32, 200, 16]),
                                      ("batch_matmul_bf16", [3, 16, 32, 64, 16])])
def test_tile_kernels_match_their_f32_references(op: str, shape: list[int]) -> None:
    """Every config of the (small) space against the float32 op within the bf16 tolerance; the
    error is the data's rounding, not more."""
    import tvm

    from tensortune.target import make_target

    task = Task.from_op(op, shape)
    assert task.template_name.endswith("_amx")
    inputs = task.make_inputs(seed=3)
    ref = task.reference(inputs)
    configs = [c for c in (task.space.get(i) for i in range(len(task.space))) if task.space.is_valid(c)]
    assert task.space.is_valid(task.default_config())
    for config in [task.default_config()] + configs[:5] + configs[-2:]:
        lib = tvm.compile(task.instantiate(config), target=make_target(task.target_json))
        out = tvm.runtime.tensor(task.output_buffer())
        lib.mod["main"](*[tvm.runtime.tensor(x) for x in inputs], out)
        got = out.numpy()
        assert task.outputs_match(got, ref), config
        assert 0 < prec.agreement(got, ref).max_rel_err < 1e-2
