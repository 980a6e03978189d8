"""Tune a PyTorch module for this CPU, export it, and check the exported library against PyTorch.

    python examples/tune_pytorch.py                 # 5 minutes of tuning
    python examples/tune_pytorch.py --trials 8      # 8 trials per task: a quick look
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import tensortune


class SmallNet(torch.nn.Module):
    """A convolution block and a classifier: the kind of model tensortune tunes task by task."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 16, 3, padding=1, groups=16), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
        self.classifier = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=None, help="trials per task (default: 5 minutes in all)")
    p.add_argument("--db", default="smallnet.db", help="tuning records (a rerun resumes)")
    p.add_argument("-o", "--output", default="smallnet.so", help="the compiled model")
    a = p.parse_args()

    torch.manual_seed(0)
    net, x = SmallNet().eval(), torch.randn(1, 3, 32, 32)
    budget = tensortune.Budget(trials=a.trials) if a.trials else tensortune.Budget(wall_s=300)
    tuned = tensortune.tune_model(net, example_inputs=(x,), budget=budget, database=a.db)
    print(f"{len(tuned.outcomes)} tasks tuned; estimated {tuned.estimated_total_ms:.3f} ms per inference")
    library, _ = tuned.export(a.output, force=True)

    # deploy with TVM's runtime alone: no tensortune needed where the model runs
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(library), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x.numpy()))[0].numpy()  # a Relax function returns a tuple
    np.testing.assert_allclose(out, net(x).detach().numpy(), rtol=1e-3, atol=1e-4)
    print(f"{library}: output matches PyTorch")


if __name__ == "__main__":
    main()
