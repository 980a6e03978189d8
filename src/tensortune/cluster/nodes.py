"""Measurement slots on the nodes of a Ray cluster: one :class:`NodeMeasurer` per slot.

A slot is a Ray actor pinned to one node (hard node affinity, ``num_cpus`` = the threads a
candidate is timed on, so Ray places nothing else on those cores). It holds a local
:class:`~tensortune.measure.Measurer` on its node: the candidates of a batch are built in parallel
there and timed one at a time while the node's measurement lock is held (:func:`~.race.host_lock`,
shared with races on the node; with several slots on a node, for the whole batch, builds too).
Only configs travel: the task as its JSON text, each config as
its index, and the results come back to the driver, which writes them to its database. The
nodes must be of the driver's CPU kind (CPU model and LLVM cpu): their records are then this
machine's records for ``compile``; :func:`start_slots` refuses another kind in one line.

A node that dies (or whose actor dies) turns the call in flight into :class:`NodeLost`: that
batch is lost and nothing of it is stored; the scheduler gives the slot's task to the others.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from ..measure.base import MeasurerBase, MeasurerLost
from ..measure.options import MeasureOptions
from ..measure.result import MeasureInput, MeasureResult

log = logging.getLogger(__name__)

#: How long a slot's actor may take to start (its node imports TVM and starts its workers).
START_TIMEOUT_S = 300.0


class NodeLost(MeasurerLost):
    """The node of a slot (or its actor) died: the batch in flight is lost."""


@dataclass(frozen=True)
class NodeInfo:
    """What a slot reports of its node."""

    node_id: str
    address: str
    cpu_model: str
    mcpu: str
    cpus: int

    @property
    def kind(self) -> tuple[str, str]:
        """The CPU kind the node's records are valid for."""
        return self.cpu_model, self.mcpu


def this_node_info() -> NodeInfo:
    """The node this process runs on (inside an actor: its node; in the driver: the driver's)."""
    import ray

    from ..target import cpu_count, cpu_model, host_target_json

    ctx = ray.get_runtime_context()
    return NodeInfo(ctx.get_node_id(), ray.util.get_node_ip_address(), cpu_model(),
                    str(host_target_json()["mcpu"]), cpu_count())


def make_slot_actor() -> Any:
    """The :class:`SlotActor` class (defined lazily: importing this module needs no Ray)."""
    import ray

    @ray.remote(max_restarts=0, max_concurrency=2)  # a second thread answers `info` during a batch
    class SlotActor:
        """A node's measurement slot: a local measurer behind the node's lock."""

        def __init__(self, options: MeasureOptions, name: str, slots: int) -> None:
            from ..measure import Measurer
            from ..target import cpu_count
            from .race import host_lock

            self.info = this_node_info()
            self.name = name
            self.lock = host_lock(self.info.node_id)
            self.timed: list[tuple[float, float]] = []
            # alone on its node, a slot holds the lock for its timings only; beside other slots
            # for the whole batch, so that no slot's builds run beside another's timing
            self.whole = slots > 1
            options = replace(options, n_parallel=max(1, cpu_count() // slots))
            self.measurer = Measurer(options, turn=nullcontext if self.whole else self._turn)
            self.measurer.start()
            self._tasks: dict[str, Any] = {}

        @contextmanager
        def _turn(self) -> Iterator[None]:
            """The node's lock around a timing, its span kept (the evidence of overlap)."""
            from .race import host_turn

            with host_turn(self.lock, self.name):
                start = time.time()
                try:
                    yield
                finally:
                    self.timed.append((start, time.time()))

        def node(self) -> NodeInfo:
            return self.info

        def _inputs(self, task_json: str, indices: Sequence[int]) -> list[MeasureInput]:
            import json

            from ..task import Task

            task = self._tasks.get(task_json)
            if task is None:
                task = self._tasks[task_json] = Task.from_json(json.loads(task_json))
            return [MeasureInput(task, task.space.get(int(i))) for i in indices]

        def measure(self, task_json: str, indices: Sequence[int], rounds: int = 0,
                    check: bool = False) -> dict[str, Any]:
            """Build the configs and time them: once, ``rounds`` > 0 interleaved rounds, or
            ``check``: once with the correctness check forced on."""
            inputs = self._inputs(task_json, indices)
            m, self.timed = self.measurer, []
            b0, r0 = m.build_s, m.run_s
            with self._turn() if self.whole else nullcontext():
                if rounds:
                    out = m.measure_rounds(inputs, rounds)
                elif check:
                    out = [[m.verify(inputs[0])]]
                else:
                    out = [m.measure(inputs)]
            return {"results": out, "build_s": m.build_s - b0, "run_s": m.run_s - r0, "timed": self.timed}

        def wait_quiet(self, max_s: float | None = None) -> bool | None:
            from .race import host_turn

            with host_turn(self.lock, self.name):  # its looks are timings too
                return self.measurer.wait_quiet(max_s)

        def close(self) -> None:
            self.measurer.close()

    return SlotActor


class NodeMeasurer(MeasurerBase):
    """A measurer whose candidates are built and timed on one node's slot (module docstring).

    ``intervals`` keeps the wall-clock spans its timings held the node's lock: the evidence
    that slots measure at once."""

    def __init__(self, actor: Any, info: NodeInfo, options: MeasureOptions, name: str) -> None:
        self.actor, self.info, self.options, self.name = actor, info, options, name
        self.build_s, self.run_s = 0.0, 0.0
        self.intervals: list[tuple[float, float]] = []
        self.lost = ""

    def _call(self, task_json: str, indices: list[int], rounds: int = 0, check: bool = False) -> list[list[MeasureResult]]:
        import ray

        if self.lost:
            raise NodeLost(f"node {self.info.address} ({self.name}) is gone: {self.lost}")
        try:
            out = ray.get(self.actor.measure.remote(task_json, indices, rounds, check))
        except (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError) as e:
            self.lost = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            self._forget()
            raise NodeLost(f"node {self.info.address} ({self.name}) died with a batch in flight: {self.lost}") from None
        self.build_s += out["build_s"]
        self.run_s += out["run_s"]
        self.intervals.extend(tuple(t) for t in out["timed"])
        return out["results"]

    @staticmethod
    def _inputs(inputs: Sequence[MeasureInput]) -> tuple[str, list[int]]:
        return inputs[0].task.json_text, [inp.config.index for inp in inputs]

    def measure(self, inputs: Sequence[MeasureInput],
                on_result: Callable[[MeasureInput, MeasureResult], None] | None = None) -> list[MeasureResult]:
        if not inputs:
            return []
        results = self._call(*self._inputs(inputs))[0]
        if on_result is not None:  # here, in the driver: the database is the caller's
            for inp, res in zip(inputs, results):
                on_result(inp, res)
        return results

    def measure_rounds(self, inputs: Sequence[MeasureInput], rounds: int,
                       on_result: Callable[[int, MeasureInput, MeasureResult], None] | None = None
                       ) -> list[list[MeasureResult]]:
        if not inputs:
            return [[] for _ in range(rounds)]
        out = self._call(*self._inputs(inputs), rounds=rounds)
        if on_result is not None:
            for r, results in enumerate(out, start=1):
                for inp, res in zip(inputs, results):
                    on_result(r, inp, res)
        return out

    def verify(self, inp: MeasureInput) -> MeasureResult:
        """Build and run one candidate on the node with the correctness check forced on."""
        return self._call(*self._inputs([inp]), check=True)[0][0]

    def wait_quiet(self, max_s: float | None = None) -> bool | None:
        import ray

        if self.lost:
            return None
        try:
            return ray.get(self.actor.wait_quiet.remote(max_s))
        except (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError):
            return None

    def _forget(self) -> None:
        """Tell the node's lock this slot is gone: released if it held it (an actor killed in a
        timing), never granted to it again; nothing to tell when the node went with it."""
        import ray

        from .race import LOCK_NAMESPACE, lock_name

        try:
            lock = ray.get_actor(lock_name(self.info.node_id), namespace=LOCK_NAMESPACE)
            ray.get(lock.forget.remote(self.name), timeout=30)
        except (ValueError, ray.exceptions.RayError):
            pass

    def close(self) -> None:
        import ray

        if not self.lost:
            try:
                ray.get(self.actor.close.remote(), timeout=60)
            except ray.exceptions.RayError:
                pass
        ray.kill(self.actor, no_restart=True)
        if not self.lost:  # killed, perhaps in a timing (an interrupted run): the lock must not stay held
            self._forget()


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (``auto``: the one this machine belongs to) unless this
    process already has; a cluster that cannot be reached is a one-line UsageError."""
    import socket

    import ray

    if ray.is_initialized():
        return
    if address != "auto":  # fail fast: Ray retries an address that does not answer for minutes
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(f"--ray-address takes auto or HOST:PORT (the head's GCS port, e.g. 10.0.0.1:6379), got {address!r}")
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as e:
            raise UsageError(f"--ray-address {address}: nothing answers there ({e.strerror or e})") from None
    try:
        ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        raise UsageError(f"--ray-address {address}: cannot join the cluster ({lines[0] if lines else type(e).__name__})") from None


def start_slots(options: MeasureOptions, slots_per_node: int = 1, nodes: Sequence[str] | None = None) -> list[NodeMeasurer]:
    """One :class:`NodeMeasurer` per slot on every alive node with the CPUs for it (``nodes``: only
    these node ids), after checking each node is of the driver's CPU kind (UsageError in one line
    naming the first that is not, or when no node can take a slot)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    threads = int(options.threads)
    alive = [n for n in ray.nodes() if n.get("Alive") and (nodes is None or n["NodeID"] in nodes)]
    fit = [n for n in alive if n.get("Resources", {}).get("CPU", 0) >= threads * slots_per_node]
    for n in alive:
        if n not in fit:
            log.warning("node %s has %s CPUs, fewer than %d slot(s) x %d thread(s): it takes no slot",
                        n.get("NodeManagerAddress"), n.get("Resources", {}).get("CPU", 0), slots_per_node, threads)
    if not fit:
        raise UsageError(f"no node of the Ray cluster has {threads * slots_per_node} CPUs for "
                         f"{slots_per_node} slot(s) timing on {threads} thread(s) (lower --threads)")
    node_options = replace(options, rpc=None, rpc_workers=1)
    cls = make_slot_actor()
    actors = []
    run = uuid.uuid4().hex[:8]  # a lock forgets a dead slot's name for good: names are this run's own
    for n in fit:
        for k in range(slots_per_node):
            name = f"slot-{run}-{n['NodeManagerAddress']}-{n['NodeID'][:8]}-{k}"
            actors.append((name, cls.options(num_cpus=threads, scheduling_strategy=NodeAffinitySchedulingStrategy(
                node_id=n["NodeID"], soft=False)).remote(node_options, name, slots_per_node)))
    try:
        infos = ray.get([a.node.remote() for _, a in actors], timeout=START_TIMEOUT_S)
    except (ray.exceptions.RayError, TimeoutError) as e:
        for _, a in actors:
            ray.kill(a, no_restart=True)
        raise UsageError(f"the Ray cluster's measurement slots did not start: {str(e).strip().splitlines()[0]}") from None
    here = this_node_info().kind
    for info in infos:
        if info.kind != here:
            for _, a in actors:
                ray.kill(a, no_restart=True)
            raise UsageError(f"node {info.address} is a {info.cpu_model} ({info.mcpu}), this machine a {here[0]} "
                             f"({here[1]}): a cluster tunes for one CPU kind, the driver's")
    return [NodeMeasurer(a, info, node_options, name) for (name, a), info in zip(actors, infos)]
