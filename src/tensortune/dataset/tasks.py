"""Task samplers: which synthetic tasks a tuning dataset measures.

- ``pgs``: prior-guided sampling (One-Shot Tuner, Algorithm 1). The layers of the prior's models
  define a chained conditional distribution per op class, ``P(K) P(S | K) P(P | K, S)
  P(IC | K, S, P) ...`` in the order of :data:`CHAINS`: each value is drawn from the layers that
  agree with every value drawn before it, weighted by how often they occur. So common layers come
  out often; and since with probability ``backoff`` a value is drawn from its variable's marginal
  instead (every value seen for it in any layer of the class), combinations no model has still
  appear. A drawn shape that is not a valid op (kernel larger than the input, say) is drawn again.
- ``random``: every variable drawn uniformly and independently from the values seen for it in
  the class (the same support as ``pgs``, none of its structure): the ablation baseline.
- ``modelzoo``: the prior's distinct layers themselves, frequent ones first (weighted sampling
  without replacement).

Every sampler returns distinct ``(op, args)`` pairs, reproducibly for a seed, and never more than
it can find (a small class may have fewer distinct layers than asked for).
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from .layers import OP_ARGS, LayerStats

#: The order in which ``pgs`` draws each op class's variables (W follows H: square inputs).
CHAINS = {"conv2d": ("K", "S", "P", "IC", "OC", "H"),
          "depthwise_conv2d": ("K", "S", "P", "C", "H"),
          "dense": ("K", "N", "M")}
#: Probability that ``pgs`` draws a value from its variable's marginal instead of its conditional.
BACKOFF = 0.1
#: Draws per wanted task before a sampler gives up on finding new distinct tasks.
MAX_TRIES_PER_TASK = 50


@dataclass(frozen=True)
class SampledTask:
    """An op class and its shape arguments (tensortune's :class:`~tensortune.task.Task` takes them)."""

    op: str
    args: tuple[tuple[str, int], ...]

    @property
    def shape(self) -> dict[str, int]:
        return dict(self.args)

    def key(self) -> tuple[str, tuple[int, ...]]:
        return self.op, tuple(v for _, v in self.args)


def layer_counts(stats: Sequence[LayerStats], op: str) -> Counter:
    """``{args tuple: count}`` of one op class over models."""
    out: Counter = Counter()
    for s in stats:
        for (o, a), n in s.layers.items():
            if o == op:
                out[a] += n
    return out


def _valid(op: str, args: dict[str, int]) -> bool:
    from ..task.ops import OpError, get_op

    try:
        get_op(op).parse_args(args)
    except OpError:
        return False
    return True


def _make(op: str, values: dict[str, int]) -> SampledTask:
    if "H" in values and "W" not in values:
        values = {**values, "W": values["H"]}
    return SampledTask(op, tuple((a, int(values[a])) for a in OP_ARGS[op]))


def _draw_distinct(n: int, seed: int, draw: Callable[[random.Random], SampledTask]) -> list[SampledTask]:
    rng = random.Random(seed)
    out: dict[tuple, SampledTask] = {}
    tries = 0
    while len(out) < n and tries < n * MAX_TRIES_PER_TASK:
        tries += 1
        t = draw(rng)
        if t is not None and t.key() not in out and _valid(t.op, t.shape):
            out[t.key()] = t
    return list(out.values())


def sample_pgs(stats: Sequence[LayerStats], op: str, n: int, seed: int = 0, backoff: float = BACKOFF) -> list[SampledTask]:
    """``n`` distinct tasks of ``op`` from the chained conditional distribution of ``stats``."""
    counts = layer_counts(stats, op)
    if not counts:
        return []
    names = OP_ARGS[op]
    chain = CHAINS[op]
    rows = [(dict(zip(names, a)), c) for a, c in counts.items()]
    marginal = {v: sorted({r[v] for r, _ in rows}) for v in chain}

    def draw(rng: random.Random) -> SampledTask:
        values: dict[str, int] = {}
        for var in chain:
            match = [(r[var], c) for r, c in rows if all(r[k] == values[k] for k in values)]
            if not match or rng.random() < backoff:
                values[var] = rng.choice(marginal[var])
            else:
                vals, weights = zip(*match)
                values[var] = rng.choices(vals, weights=weights)[0]
        return _make(op, values)

    return _draw_distinct(n, seed, draw)


def sample_random(stats: Sequence[LayerStats], op: str, n: int, seed: int = 0) -> list[SampledTask]:
    """``n`` distinct tasks of ``op``, each variable uniform over the values seen for it."""
    counts = layer_counts(stats, op)
    if not counts:
        return []
    names = OP_ARGS[op]
    marginal = {v: sorted({a[names.index(v)] for a in counts}) for v in CHAINS[op]}
    return _draw_distinct(n, seed, lambda rng: _make(op, {v: rng.choice(vals) for v, vals in marginal.items()}))


def sample_modelzoo(stats: Sequence[LayerStats], op: str, n: int, seed: int = 0) -> list[SampledTask]:
    """Up to ``n`` of the distinct layers of ``op`` themselves, drawn by frequency without replacement."""
    counts = layer_counts(stats, op)
    rng = random.Random(seed)
    pool = sorted(counts.items())
    out = []
    while pool and len(out) < n:
        k = rng.choices(range(len(pool)), weights=[c for _, c in pool])[0]
        args, _ = pool.pop(k)
        t = _make(op, dict(zip(OP_ARGS[op], args)))
        if _valid(op, t.shape):
            out.append(t)
    return out


#: Task samplers by name.
TASK_SAMPLERS = {"pgs": sample_pgs, "random": sample_random, "modelzoo": sample_modelzoo}


def sample_tasks(sampler: str, stats: Sequence[LayerStats], op: str, n: int, seed: int = 0) -> list[SampledTask]:
    """``n`` distinct tasks of op class ``op`` from the sampler called ``sampler``."""
    if sampler not in TASK_SAMPLERS:
        raise ValueError(f"unknown task sampler {sampler!r}; known: {', '.join(TASK_SAMPLERS)}")
    if op not in OP_ARGS:
        raise ValueError(f"unknown op class {op!r}; known: {', '.join(OP_ARGS)}")
    return TASK_SAMPLERS[sampler](stats, op, n, seed)


def overlap(tasks: Sequence[SampledTask], evaluated: Sequence[LayerStats]) -> tuple[int, int]:
    """(how many of ``tasks`` are layers of the evaluated models, how many distinct such layers
    there are of the tasks' op classes): what the prior happens to contain of the evaluation."""
    ops = {t.op for t in tasks}
    layers = {(o, a) for s in evaluated for (o, a) in s.layers if o in ops}
    return sum(t.key() in layers for t in tasks), len(layers)
