"""Thread counts of the numeric libraries, set for a block and restored after it."""
from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """PyTorch's intra-op threads set to ``n`` inside the block, restored after it. Tiny networks
    (the RL agents' few-hundred-unit layers) run fastest on one thread: more only wait on each
    other, and on a busy machine they spin."""
    import torch

    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
