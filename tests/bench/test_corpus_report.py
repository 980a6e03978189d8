"""The corpus report says why a model is left out of its geomean."""
from __future__ import annotations

from typing import Any

from bench.corpus import report_md

MACHINE = {"cpus": 2, "machine_id": {"cpu_model": "AMD EPYC", "llvm_cpu": "znver5", "cores": 2}}


def _entry(model: str, ratio: float | None, shipped_check: str) -> dict[str, Any]:
    shipped = 1.0 if ratio is not None else None
    return {"model": model, "gflops": 1.0, "ratio": ratio, "fastest": "openvino as shipped" if ratio else None,
            "outputs_match": True, "compile_s": 3.0, "max_rel_err": 1e-2, "below_half_peak": [], "layout": "",
            "fallbacks": [], "ms": {"tensortune untuned": 1.1, "onnxruntime": 2.0, "openvino": 1.5, "pytorch": 9.0,
                                    "openvino as shipped": shipped, "tensortune f32": 1.6},
            "checks": {"pytorch": "reference", "onnxruntime": "outputs match (max abs err 1e-06)",
                       "openvino": "outputs match (max abs err 1e-06)", "openvino as shipped": shipped_check}}


def test_a_model_without_a_ratio_is_named_with_its_anchors_failed_check() -> None:
    differs = "computes in bf16; output 0 differs: max abs err 3.6e-03, 2.9e-02 of max |ref|; tolerance 2e-02"
    data = {"machine": MACHINE, "rounds": 5, "precision": "bf16", "peak": {},
            "models": {"a": _entry("hf:a", 1.1, "computes in bf16; outputs match (max abs err 1e-02)"),
                       "b": _entry("hf:b", None, differs)}}
    text = report_md(data)
    assert "over OpenVINO as shipped: 1.10x over 1 models." in text, text
    assert f"Not compared: hf:b (openvino as shipped: {differs})." in text, text
    data["models"].pop("b")
    assert "Not compared" not in report_md(data)


def test_slow_memory_bound_functions_are_listed_and_transforms_have_a_column() -> None:
    from tensortune.models.profile import FuncProfile, ModelProfile

    # 1 MB moved in 0.5 ms: 2 GB/s of 20; 1 MB in 0.1 ms: too short to list; a compute-bound one is not listed
    slow = FuncProfile("te_layout_transform", 1, 0.5, "te-layout-transform", "generic", bytes=1e6)
    short = FuncProfile("transpose", 1, 0.1, "transpose", "generic", bytes=1e6)
    conv = FuncProfile("conv", 1, 1.0, "conv2d_nchwc-x", "conv2d_nchwc", flops=1e9, bytes=1e6)
    prof = ModelProfile("m", 2, 2.0, [slow, short, conv], peak_gflops=100.0, bandwidth_gbs=20.0)
    assert prof.memory_below(0.5) == [slow]
    entry = _entry("hf:a", 1.1, "outputs match")
    entry.update(transforms=36, bandwidth_gbs=20.0, memory_below_half=[{"task": "te-layout-transform", "gbs": 2.0,
                                                                         "calls": 1, "ms": 0.5}])
    text = report_md({"machine": MACHINE, "rounds": 5, "peak": {}, "models": {"a": entry}})
    assert "| transforms |" in text and "| 36 |" in text, text
    assert "- hf:a: te-layout-transform: 2.0 GB/s, 1 calls, 0.50 ms" in text, text
