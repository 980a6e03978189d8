"""Tuners raced on a Ray cluster, the worst suspended (Trimmer §V-C, Fig. 14).

Each (model, tuner) pair is a Ray actor (:class:`TunerActor`) with a database of its own
(``DB_DIR/MODEL-TUNER.db``; its records stay there whatever happens to the actor). A round of an
actor gives every task of its model one batch of ``batch`` measurements through the task's own
tuner (kept across rounds), then compiles the model with that database's bests and times it. A
coordinator (:func:`race`) runs rounds until the shared budget (wall seconds, or joules where the
machine counts them) is spent or every actor is done. A model's rounds are in step: every running
actor of the model finishes round r before any starts round r + 1, and in between the coordinator
ranks them by their latest improvement (the relative latency change of round r) and, with
``suspend``, suspends the worst while more than one is left. So the ranking compares one round
with the same round, and a suspended actor runs no round after its suspension (an actor that
started its next round as soon as its own returned would be ranked against another's earlier
round, and run a whole round after being suspended). Models are independent: one model's round waits for no other's. The change is measured in pairs:
the model as this round left it timed in interleaved rounds beside the one the round before
left, so the host's drift between rounds does not rank the actors. An actor whose round measured
nothing (every task's tuner has stopped, e.g. chameleon after its 16 iterations) is done: it
leaves the race and the ranking. An actor that dies (killed, or its node lost) is reported as
such and the race goes on without it.

**One actor at work per host.** A host's actors take turns through a lock held by a named actor
per Ray node (:class:`HostLock`; one node per machine): an actor holds it for each task's batch (its search, cost-model
update, building and measuring) and for its model timing, so nothing else any actor does runs
beside a timing. Holding it for the measurements alone is not enough: on 2 cores one actor's
search (PPO, simulated annealing, XGBoost fitting) beside another's model timing slows that
timing many times over, and the suspension ranks by those timings. On one host Ray therefore gives no speed-up; compare the
total cost, not the wall time. Actors on different hosts run at once. An actor that dies
holding the lock (or waiting for it) is forgotten by it when the coordinator learns of the
death, so the others never wait for a dead holder.
``ray.init()`` starts a local instance unless an address is given (``--ray-address``), in which
case it joins that cluster.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Sequence

from ..errors import TensortuneError
from ..utils.names import file_stem

#: Trimmer's round size (measurements per task and round).
RACE_BATCH = 64


LOCK_NAMESPACE = "tensortune"
"""The Ray namespace of the host locks: a detached actor in an anonymous namespace makes the raylet
write a warning to the driver's stdout, which would break ``race --json``."""


class RaySecurityError(TensortuneError, RuntimeError):
    """A local Ray instance would be reachable without authentication."""


def local_ray_options() -> dict[str, Any]:
    """``ray.init`` settings of a local instance (no dashboard). Ray 2.60's servers listen on every
    interface whatever node address is given (``_node_ip_address="127.0.0.1"`` still left them on
    ``*:PORT``), behind the token authentication Ray enables by default; with that turned off
    (``RAY_AUTH_MODE=disabled``) anyone who reaches the host could run code in the race, so a local
    race is refused."""
    if os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "disabled":
        raise RaySecurityError("RAY_AUTH_MODE=disabled: a local Ray instance listens on every interface, and without "
                               "its token anyone who reaches this host could run code in the race; unset it")
    return {"include_dashboard": False}


def lock_name(node_id: str) -> str:
    """The measurement lock actor's name on a Ray node."""
    return f"tensortune-measure-lock-{node_id}"


def host_lock(node_id: str, tries: int = 10) -> Any:
    """A handle on the measurement lock of the Ray node ``node_id`` (:func:`make_lock_actor`),
    made on that node if none is alive (the lock lives and dies with its node).

    One lock per Ray node, so run one node per machine: two nodes started on one machine
    (``ray.cluster_utils.Cluster`` in the tests) measure at once. The lock is detached: it lives as
    long as the Ray instance, one per node for every race, tuning run and driver (owned by one,
    it would be torn down once that one dropped its handle, while the next looks its name up). A
    dead answer is asked for again until its name is free."""
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cls = make_lock_actor()
    for attempt in range(tries):
        lock = cls.options(name=lock_name(node_id), namespace=LOCK_NAMESPACE, get_if_exists=True, lifetime="detached",
                           scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)).remote()
        try:
            ray.get(lock.alive.remote(), timeout=60)
            return lock
        except ray.exceptions.RayActorError:
            time.sleep(0.2 * (attempt + 1))
    raise RuntimeError(f"no live measurement lock on node {node_id} after {tries} tries")


def db_slug(model: str, tuner: str) -> str:
    """The file stem of a (model, tuner) pair's database in a race's folder (``MODEL-TUNER``)."""
    return file_stem(f"{Path(model).stem}-{tuner}")


def pair_db(db_dir: str | Path, model: str, tuner: str) -> Path:
    """A (model, tuner) pair's database in a race's database folder (``DB_DIR/MODEL-TUNER.db``)."""
    return Path(db_dir) / f"{db_slug(model, tuner)}.db"


def _ray() -> Any:
    import ray

    return ray


def make_lock_actor() -> Any:
    """The :class:`HostLock` actor class (defined lazily, so importing this module needs no Ray)."""
    ray = _ray()

    @ray.remote(num_cpus=0)
    class HostLock:
        """One actor at work at a time on a host: an asyncio lock behind a named actor."""

        def __init__(self) -> None:
            import asyncio

            self._lock = asyncio.Lock()
            self.holder = ""
            self.dead: set[str] = set()

        async def acquire(self, who: str) -> bool:
            await self._lock.acquire()
            if who in self.dead:  # granted to a request whose caller died meanwhile: pass it on
                self._lock.release()
                return False
            self.holder = who
            return True

        def release(self, who: str) -> bool:
            """Release the lock if ``who`` holds it."""
            if self.holder != who or not self._lock.locked():
                return False
            self.holder = ""
            self._lock.release()
            return True

        def alive(self) -> bool:
            """A no-op call: answers only while the actor lives."""
            return True

        def forget(self, who: str) -> None:
            """``who`` died: release the lock if it holds it, and never grant it again (a request
            it left waiting would otherwise hold the lock forever)."""
            self.dead.add(who)
            self.release(who)

    return HostLock


@contextmanager
def host_turn(lock: Any, who: str) -> Iterator[None]:
    """The host lock (a :class:`HostLock` handle) held by ``who`` for the block."""
    ray = _ray()
    ray.get(lock.acquire.remote(who))
    try:
        yield
    finally:
        ray.get(lock.release.remote(who))


class Competitor:
    """What a :class:`TunerActor` does (kept apart from Ray so it can be used and tested directly)."""

    def __init__(self, model: str, tuner: str, db_path: str, seed: int = 0, batch: int = RACE_BATCH,
                 turn: Callable[[], ContextManager[Any]] = nullcontext) -> None:
        """``turn()``: a context that holds the host for the block (:func:`host_turn` on a Ray
        node; by default nothing is held)."""
        from ..database import Database
        from ..measure import MeasureOptions, Measurer
        from ..measure.timing import PairedTiming
        from ..models.compile import model_tasks
        from ..models.importer import load_model
        from ..tuners import get_tuner
        from ..utils.options import parse_assignments

        self.model_name, self.spec, self.batch = model, tuner, batch
        name, *items = tuner.split(":")
        opts = parse_assignments(items)
        self.model = load_model(model)
        self.tasks = [t for t in model_tasks(self.model) if t.tunable]
        self.db = Database(db_path)
        self.measurer = Measurer(MeasureOptions.flushed())
        self.turn = turn
        self.tuners = {t.task.workload_key: get_tuner(name, t.task, seed=seed, options=opts) for t in self.tasks}
        self.rounds = 0
        self.cpu_s = 0.0
        self.energy_j: float | None = None
        self.trials = 0
        self.timing = PairedTiming()  # each round's model beside the one the round before left

    def latency(self) -> tuple[float, float | None]:
        """The model compiled with this database's bests, timed (seconds; the host held), and its
        change against the model the round before left (``now / before - 1``; None in the first
        round), the two timed in interleaved rounds (:class:`~tensortune.measure.timing.PairedTiming`):
        the suspension ranks by the change, and timed alone the host's drift between rounds is
        larger than a late round's gain."""
        from ..models.compile import compile_model
        from ..models.reference import set_threads
        from ..target import cpu_count

        with self.turn():
            set_threads(cpu_count())
            t = self.timing.time(compile_model(self.model, self.db).callable(self.model.example_inputs))
        return t.seconds, t.change

    def round(self) -> dict[str, Any]:
        """One batch per task (each in a turn of its own on the host), then the model's latency;
        returns the round's figures."""
        t0 = time.perf_counter()
        measured = 0
        for t in self.tasks:
            tuner = self.tuners[t.task.workload_key]
            have = self.db.count(t.task.workload_key)
            with self.turn():
                res = tuner.tune(have + self.batch, self.measurer, database=self.db)
            measured += res.trials_measured
            if res.cost is not None:
                self.cpu_s += res.cost.cpu_s
                if res.cost.energy_j is not None:
                    self.energy_j = (self.energy_j or 0.0) + res.cost.energy_j
        self.rounds += 1
        self.trials += measured
        lat, change = self.latency()
        return {"round": self.rounds, "latency_s": lat, "change": change, "measured": measured,
                "trials": self.trials, "cpu_s": self.cpu_s, "energy_j": self.energy_j,
                "filtered": self.filtered(), "wall_s": time.perf_counter() - t0}

    def filtered(self) -> int | None:
        """Candidates the cold-candidate filter dropped before measurement so far, over the
        model's tasks (None when the tuner has no filter)."""
        from ..select.cold import filtered_total

        reports = [tuner.search_report() for tuner in self.tuners.values()]
        return filtered_total(r["cold_filter"] for r in reports if "cold_filter" in r)

    def close(self) -> None:
        self.measurer.close()
        self.db.close()


def make_tuner_actor() -> Any:
    """The :class:`TunerActor` class (Ray): a :class:`Competitor` in its own process."""
    ray = _ray()

    @ray.remote(num_cpus=0, max_restarts=0)
    class TunerActor:  # its lock name "MODEL/TUNER" is the coordinator's key of it
        def __init__(self, model: str, tuner: str, db_path: str, seed: int, batch: int) -> None:
            node = ray.get_runtime_context().get_node_id()  # this actor's own node: it takes turns with its neighbours
            lock = host_lock(node)
            self.lock = lock_name(node)
            self.c = Competitor(model, tuner, db_path, seed, batch, lambda: host_turn(lock, f"{model}/{tuner}"))

        def lock_name(self) -> str:
            return self.lock

        def round(self) -> dict[str, Any]:
            return self.c.round()

        def close(self) -> None:
            self.c.close()

    return TunerActor


def _forget(e: "Entry") -> None:
    """Tell a dead actor's host lock to release it and never grant it again (nothing to tell when
    the host went with it)."""
    ray = _ray()
    try:
        ray.get(ray.get_actor(e.lock, namespace=LOCK_NAMESPACE).forget.remote(f"{e.model}/{e.tuner}"), timeout=60)
    except (ValueError, ray.exceptions.RayError):  # no such actor: its node is gone, and the lock with it
        pass


@dataclass
class Entry:
    """One raced (model, tuner) pair in the coordinator."""

    model: str
    tuner: str
    db: str
    actor: Any = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    status: str = "running"  # running | suspended | died | done
    error: str = ""
    lock: str = ""  # the name of its host's lock actor

    @property
    def improvement(self) -> float:
        """The relative latency change of the last round (negative: faster): the paired one the
        actor measured (:meth:`Competitor.latency`), else from the two rounds' timings; 0 before
        two rounds."""
        if len(self.rounds) < 2:
            return float("-inf") if self.rounds else 0.0
        if self.rounds[-1].get("change") is not None:
            return self.rounds[-1]["change"]
        a, b = self.rounds[-2]["latency_s"], self.rounds[-1]["latency_s"]
        return (b - a) / a

    def to_json(self) -> dict[str, Any]:
        last = self.rounds[-1] if self.rounds else {}
        return {"model": self.model, "tuner": self.tuner, "db": self.db, "status": self.status, "error": self.error,
                "rounds": self.rounds, "final_latency_ms": last.get("latency_s", float("nan")) * 1e3 if last else None,
                "trials": last.get("trials", 0), "cpu_s": last.get("cpu_s", 0.0), "energy_j": last.get("energy_j"),
                "filtered": last.get("filtered")}


def race(models: Sequence[str], tuners: Sequence[str], db_dir: str | Path, time_budget: float | None = None,
         energy_budget: float | None = None, max_rounds: int | None = None, batch: int = RACE_BATCH,
         suspend: bool = True, address: str | None = None, seed: int = 0, on_round: Any = None,
         kill_after: dict[str, int] | None = None, on_status: Any = None) -> dict[str, Any]:
    """Race every tuner on every model (module docstring). ``max_rounds`` per actor at most;
    ``on_round(entry, row)`` after each finished round; ``on_status(entry)`` when an actor is
    suspended, done early (its round measured nothing) or found dead; ``kill_after`` ({"MODEL/TUNER": round}) kills
    an actor after that round (the fault test). Returns the entries and the totals."""
    if time_budget is None and energy_budget is None and max_rounds is None:
        raise ValueError("give a time budget, an energy budget or a number of rounds")
    if energy_budget is not None:
        from ..measure.energy import require

        require()
    from ..models.importer import _first_line

    ray = _ray()
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"address": address} if address else local_ray_options()
        ray.init(log_to_driver=False, **kwargs)
        started = True
    t0 = time.perf_counter()
    db_dir = Path(db_dir)
    db_dir.mkdir(parents=True, exist_ok=True)
    entries: list[Entry] = []
    try:
        actor_cls = make_tuner_actor()
        for model in models:
            for tuner in tuners:
                e = Entry(model, tuner, str(pair_db(db_dir, model, tuner)))
                e.actor = actor_cls.remote(model, tuner, e.db, seed, batch)
                entries.append(e)
        for e in entries:  # the host lock each actor takes (its own node's), for when it dies
            try:
                e.lock = ray.get(e.actor.lock_name.remote())
            except Exception as exc:  # noqa: BLE001 - an actor that could not start is a result too
                e.status, e.error = "died", _first_line(exc)
                if on_status is not None:
                    on_status(e)
        pending: dict[Any, Entry] = {}

        def start(model: str) -> None:
            for x in entries:
                if x.model == model and x.status == "running":
                    pending[x.actor.round.remote()] = x

        for model in models:
            start(model)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            ref = done[0]
            e = pending.pop(ref)
            try:
                row = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a dead actor is a result; its records stay
                _forget(e)  # it may have died holding its host's lock
                e.status = "died"
                e.error = _first_line(exc)
                if on_status is not None:
                    on_status(e)
            else:
                e.rounds.append(row)
                if on_round is not None:
                    on_round(e, row)
                if kill_after and kill_after.get(f"{e.model}/{e.tuner}") == len(e.rounds):
                    ray.kill(e.actor)
            if any(x.model == e.model for x in pending.values()):
                continue  # the model's round goes on: its other actors are still at it
            elapsed = time.perf_counter() - t0
            spent_energy = sum((x.rounds[-1].get("energy_j") or 0.0) for x in entries if x.rounds and "latency_s" in x.rounds[-1])
            spent = (time_budget is not None and elapsed >= time_budget) or \
                (energy_budget is not None and spent_energy >= energy_budget)
            for told in _settle_round([x for x in entries if x.model == e.model], spent, max_rounds, suspend):
                if on_status is not None:
                    on_status(told)
            start(e.model)
        for e in entries:
            if e.status == "running":
                e.status = "done"
    finally:
        for e in entries:
            if e.status in ("done", "suspended"):
                try:
                    ray.get(e.actor.close.remote(), timeout=60)
                except Exception:  # noqa: BLE001
                    pass
        if started:
            ray.shutdown()
    live = [e for e in entries if e.rounds and "latency_s" in e.rounds[-1]]
    return {"entries": [e.to_json() for e in entries], "wall_s": time.perf_counter() - t0,
            "cpu_s": sum(e.rounds[-1]["cpu_s"] for e in live),
            "energy_j": (sum(e.rounds[-1]["energy_j"] or 0.0 for e in live)
                         if any(e.rounds[-1].get("energy_j") is not None for e in live) else None),
            "suspend": suspend, "batch": batch}


def _settle_round(entries: list[Entry], spent: bool, max_rounds: int | None, suspend: bool) -> list[Entry]:
    """Settle one model's actors (``entries``) once every running one has finished the round: each
    is done when the budget is ``spent`` or its rounds are all run; done early when its round
    measured nothing (every task's tuner has stopped, e.g. chameleon after its 16 iterations: more
    rounds would only time the same model again); then, with ``suspend``, the worst of those
    still running may be suspended. Returns the entries that stopped early (done early, or
    suspended), for telling; those still running start the next round."""
    told: list[Entry] = []
    for e in entries:
        if e.status != "running":
            continue
        if spent or (max_rounds is not None and len(e.rounds) >= max_rounds):
            e.status = "done"
        elif e.rounds[-1].get("measured") == 0:
            e.status = "done"
            told.append(e)
    worst = _suspend_worst(entries, entries[0].model) if suspend and entries else None
    return told + ([worst] if worst is not None else [])


def _suspend_worst(entries: list[Entry], model: str) -> Entry | None:
    """Among the running actors of ``model`` that have two rounds, suspend the one whose latest
    round improved least, while more than one is running; the suspended entry, if any."""
    running = [e for e in entries if e.model == model and e.status == "running"]
    ranked = [e for e in running if len(e.rounds) >= 2 and "latency_s" in e.rounds[-1]]
    if len(running) > 1 and len(ranked) == len(running):
        worst = max(ranked, key=lambda e: e.improvement)
        worst.status = "suspended"
        return worst
    return None
