"""Tune an ONNX file for this CPU and compare the tuned model with ONNX Runtime, OpenVINO and PyTorch.

    python examples/tune_onnx.py model.onnx                   # your file, 5 minutes of tuning
    python examples/tune_onnx.py --trials 8                   # a small CNN written to ONNX here
"""
from __future__ import annotations

import argparse

import tensortune
from tensortune.app import bench


def small_onnx(path: str) -> str:
    """A small CNN exported to ONNX (so the example runs without a file of yours)."""
    import torch

    from tensortune.models.reference import export_onnx

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 8, (1, 7), padding=(0, 3)), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    return export_onnx(net.eval(), [torch.randn(1, 3, 28, 28)], path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default=None, help="an ONNX file (default: a small CNN made here)")
    p.add_argument("--trials", type=int, default=None, help="trials per task (default: 5 minutes in all)")
    p.add_argument("--db", default="onnx.db", help="tuning records (a rerun resumes)")
    a = p.parse_args()

    path = a.model or small_onnx("small.onnx")
    budget = tensortune.Budget(trials=a.trials) if a.trials else tensortune.Budget(wall_s=300)
    tuned = tensortune.tune_model(path, budget=budget, database=a.db)
    print(f"{path}: {len(tuned.outcomes)} tasks; tuning took {tuned.wall_s:.0f} s")
    print(bench(path, a.db).table())  # tuned and untuned, each checked, beside the libraries


if __name__ == "__main__":
    main()
