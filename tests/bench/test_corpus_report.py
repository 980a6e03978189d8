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
