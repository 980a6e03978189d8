"""Fasor (Huang et al., "Fasor: A Fast Tensor Program Optimization Framework for Efficient DNN
Deployment", ICS 2024) as the tuner ``fasor``.

Per task:

1. **Cost model**: the transferable model (:class:`~tensortune.costmodel.fasor.FasorCostModel`:
   the one transferred to this machine by ``tensortune fasor transfer`` when there is one, else
   the shipped pre-trained one) predicts each candidate's latency and its compute- and
   memory-bound scores. It is used for inference only.
2. **Start point**: the pre-tuned schedule table (:mod:`tensortune.database.pretuned`): an exact
   key is an O(1) hit, else the most Spearman-similar entry above ``tau`` (0.6), else the
   template default.
3. **Shrunk space** (:mod:`tensortune.space.shrink`): empirical option pruning, then the task is
   classed compute- or memory-sensitive by the model's scores of the start config, and only
   the ``n_p`` knobs that move that score most (the one-time sensitivity study kept with the
   model, ``sensitivity.json``) are tuned; the rest stay at the start's values.
4. **Exploration**: the DQN explorer (``dqn``, pre-trained offline on the dataset when its
   weights ship with the model) walks the shrunk space from the start / best config, rewarded
   by ``phi1 (T_prev - T) + phi2 CS/MS - phi3 #iter`` on the model's predictions; the model
   ranks the ``candidates`` (64) it found and the top ``validate`` are measured.

Modes: ``efficiency`` (default; phi = 0.35, 0.25, 0.4): one DQN iteration, then the tuner is
finished whatever budget is left; ``quality`` (phi = 0.45, 0.35, 0.2): iterations continue from
the best measured config until ``patience`` iterations bring no better measurement, or the
budget ends (a task whose op has no Fasor model is tuned by the ``fallback`` tuner under the same
rule, in rounds of ``candidates`` trials). The template default is measured first (as for every
tuner), and so is the pre-tuned start.

Ablation switches (Fasor's Fig. 8): ``primitives`` = ``random`` (random knobs instead of the
most sensitive) or ``all`` (no selection), ``prune`` off, ``start`` off (no pre-tuned start),
``search`` = ``sa`` (simulated annealing instead of DQN), ``roofline`` off (phi2 = 0), and a
model folder of the untransferred model (``model=``) for "no transfer".
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..costmodel.fasor import DQN_FILE, SENSITIVITY_FILE
from ..explore import EXPLORERS, make_explorer
from ..explore.dqn import PHI
from ..utils.logs import warn_once
from ..measure import MeasureResult
from ..space import Config
from .base import DEFAULT_BATCH_SIZE, Tuner

if TYPE_CHECKING:  # pragma: no cover
    from ..task import Task

log = logging.getLogger(__name__)

#: Candidates the explorer proposes per iteration, and how many of the model's top are measured.
CANDIDATES, VALIDATE = 64, 8
#: Knobs tuned (the paper's default n_p, range 5-8).
N_P = 7
#: Pre-tuned start similarity threshold (the paper's tau).
TAU = 0.6


@dataclass(frozen=True)
class FasorOptions:
    """See the module. ``model``: a Fasor model folder (default: transferred, else shipped);
    ``pretuned``: a pre-tuned table file (default: the shipped table merged with the user's,
    see :func:`tensortune.database.pretuned`); ``search_options`` go to the explorer (``phi``
    defaults to the mode's); ``fallback``: the tuner that tunes a task whose op has no Fasor
    model ("" refuses such tasks): ``validate`` trials in efficiency mode; in quality mode rounds
    of ``candidates`` trials until ``patience`` rounds bring no better config, or the budget."""

    mode: str = "efficiency"
    model: str | None = None
    candidates: int = CANDIDATES
    validate: int = VALIDATE
    n_p: int = N_P
    primitives: str = "sensitivity"
    prune: bool = True
    start: bool = True
    pretuned: str | None = None
    tau: float = TAU
    search: str = "dqn"
    search_options: dict[str, Any] = field(default_factory=dict)
    roofline: bool = True
    patience: int = 3
    workers: int | None = None
    fallback: str = "autotvm"

    def __post_init__(self) -> None:
        if self.mode not in PHI:
            raise ValueError(f"mode must be one of {', '.join(PHI)}")
        if self.primitives not in ("sensitivity", "random", "all"):
            raise ValueError("primitives must be sensitivity, random or all")
        if self.search not in EXPLORERS:
            raise ValueError(f"search must be one of {', '.join(EXPLORERS)}")
        if self.candidates < 1 or self.validate < 1 or self.n_p < 1 or self.patience < 1:
            raise ValueError("candidates, validate, n_p and patience must be at least 1")
        if self.validate > self.candidates:
            raise ValueError("validate must be at most candidates")
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError("tau must lie in [0, 1]")
        from . import TUNERS

        if self.fallback == "fasor" or (self.fallback and self.fallback not in TUNERS):
            raise ValueError(f"fallback must be \"\" or one of {', '.join(n for n in TUNERS if n != 'fasor')}")


class FasorTuner(Tuner):
    """Fasor's per-task tuning (see the module)."""

    name = "fasor"
    Options = FasorOptions

    def __init__(self, task: Task, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE,
                 start_from_default: bool = True, options: Any = None, **overrides: Any) -> None:
        from ..costmodel.fasor import FasorCostModel

        super().__init__(task, seed, batch_size, start_from_default, options, **overrides)
        o = self.options
        self.model = FasorCostModel(o.model, workers=o.workers)
        self.delegate: Tuner | None = None
        self._delegated = 0
        self._round_left = 0  # quality mode's fallback: trials left in its current round
        self.notice = ""
        if o.fallback and not self.model.has_predictor(task):
            from . import get_tuner

            self.delegate = get_tuner(o.fallback, task, seed=seed, batch_size=batch_size, start_from_default=False)
            self.notice = f"no Fasor {task.op} model: {o.fallback} tunes it"
        self.shrunk: Any = None
        self.start_point: Any = None
        self.explorer: Any = None
        self.sensitive = ""  # "compute" | "memory"
        self.iterations = 0
        self.since_better = 0
        self.search_seconds = 0.0
        self.prepare_seconds = 0.0
        self.pending: list[Config] = []  # the current iteration's validation set, best first
        self._iteration_best = float("inf")
        self.history: list[dict[str, Any]] = []

    @classmethod
    def check_options(cls, values: Any) -> FasorOptions:
        """The options, the explorer's own included (checked against it)."""
        from ..utils.options import make_options

        o = super().check_options(values)
        make_options(EXPLORERS.get(o.search).Options, _search_options(o), owner=f"explorer {o.search!r}")
        return o

    # ------------------------------------------------------------ preparation (once per task)
    def prepare(self) -> None:
        """Start point, sensitivity class, shrunk space and explorer (once; see the module)."""
        if self.shrunk is not None or self.delegate is not None:
            return
        from ..costmodel.fasor import task_threads
        from ..costmodel.pretrained import machine_mismatch
        from ..space.shrink import shrink

        t0 = time.perf_counter()
        o, task = self.options, self.task
        predictor = self.model.predictor_for(task)
        origin = self.model.origin.get(task.op, "")
        if origin == "shipped":
            self.notice = machine_mismatch(predictor, task.target_json)
            if self.notice:
                self.notice += "; transfer it with `tensortune fasor transfer`"
                warn_once(log, self.notice)
        default = task.default_config()
        self.start_point = self._start(default)
        start = self.start_point.config
        cs, ms = self.model.outputs(task, [start])[0, 1:3]
        self.sensitive = "compute" if cs >= ms else "memory"
        ranking, n_p = self._ranking(predictor)
        self.shrunk = shrink(self.space, start, task_threads(task), getattr(task.template, "parallel_splits", ()),
                             ranking, n_p, prune=o.prune)
        self.explorer = make_explorer(o.search, self.shrunk.space, seed=self.seed, options=_search_options(o))
        self._load_dqn(predictor)
        self.prepare_seconds = time.perf_counter() - t0

    def _start(self, default: Config) -> Any:
        from ..database.pretuned import StartPoint

        if not self.options.start:
            return StartPoint(default, "default", None, None, "pre-tuned start off")
        from ..costmodel.fasor import task_threads

        table = load_table(self.options.pretuned)
        return table.lookup(self.task, task_threads(self.task), tau=self.options.tau)

    def _ranking(self, predictor: Any) -> tuple[list[str] | None, int | None]:
        """Knobs by sensitivity for the task's class (or random / none, per ``primitives``)."""
        o = self.options
        names = [k.name for k in self.space.knobs]
        if o.primitives == "all":
            return None, None
        if o.primitives == "random":
            order = list(names)
            self.rng.shuffle(order)
            return order, o.n_p
        study = read_sensitivity(predictor)
        ranking = study.get(self.sensitive) if study else None
        if not ranking:
            return None, None  # no study kept with the model: every knob is tuned (status says so)
        return list(ranking), o.n_p

    def _load_dqn(self, predictor: Any) -> None:
        """The explorer's offline pre-trained weights, kept beside the model (DQN only)."""
        folder = predictor.folder
        if self.options.search != "dqn" or folder is None or not (folder / DQN_FILE).is_file():
            return
        try:
            self.explorer.load(folder / DQN_FILE)
        except ValueError as exc:
            log.warning("%s not used (%s)", folder / DQN_FILE, exc)

    # ------------------------------------------------------------ search
    def _iterate(self) -> list[Config]:
        """One exploration iteration: the explorer's ``candidates`` ranked by the model, the
        unmeasured top ``validate`` (task-space configs, best first)."""
        o = self.options
        t0 = time.perf_counter()
        sub = self.shrunk
        score, roofline = self.model.position_scorers(self.task, sub.space)
        if hasattr(self.explorer, "set_roofline"):
            self.explorer.set_roofline(roofline if o.roofline else None)
        seeds = []
        for c in ([self.best_config] if self.best_config is not None else []) + [self.start_point.config]:
            s = sub.from_full(c)
            if s is not None and s.index not in seeds:
                seeds.append(s.index)
        exclude = {s.index for c in self.visited if (s := sub.from_full(self.space.get(c))) is not None}
        found = self.explorer.find_maximums(score, o.candidates, exclude=exclude, seeds=seeds)
        configs = [sub.to_full(sub.space.get(int(i))) for i in found]
        configs = [c for c in configs if c.index not in self.visited]
        if configs:
            pred = self.model.predict(self.task, configs)
            order = np.argsort(-pred, kind="stable")[: o.validate]
            configs = [configs[int(i)] for i in order]
        self.search_seconds += time.perf_counter() - t0
        self.iterations += 1
        self.history.append({"iteration": self.iterations, "found": len(found), "validate": len(configs),
                             "seconds": time.perf_counter() - t0})
        return configs

    def next_batch(self, n: int) -> list[Config]:
        if self.delegate is not None:
            if self.options.mode == "quality":
                return self._delegate_round(n)
            left = self.options.validate - self._delegated  # efficiency: the same few trials
            out = self.delegate.next_batch(min(n, left)) if left > 0 else []
            self._delegated += len(out)
            if not out:
                self.finished = f"{self.options.fallback} spent validate={self.options.validate} trials " \
                                f"(no Fasor {self.task.op} model)"
            return out
        self.prepare()
        o = self.options
        out: list[Config] = []
        start = self.start_point.config
        if start.index not in self.visited and self.start_point.how != "default":
            out.append(start)
        while len(out) < n:
            self.pending = [c for c in self.pending if c.index not in self.visited and c not in out]
            if not self.pending:
                if self.iterations and out:
                    break  # the last iteration's candidates are measured before the next starts
                if self.iterations and not self._continue():
                    break
                self._iteration_best = self.best_cost
                self.pending = self._iterate()
                if not self.pending:
                    self.finished = self.finished or "the explorer found no unmeasured candidate"
                    break
            take = self.pending[: n - len(out)]
            out += take
            self.pending = self.pending[len(take):]
        return out

    def _delegate_round(self, n: int) -> list[Config]:
        """Quality mode on a task without a Fasor model: the fallback tuner in rounds of
        ``candidates`` trials, stopped by the rule of Fasor's own iterations (``patience``
        rounds without a better config) or the budget. Unbounded, an autotvm fallback spends
        the task's whole share: on bert_base, 6,800 trials of one batch_matmul in 11 minutes."""
        if self._round_left == 0:
            if self.iterations and not self._continue():
                return []
            self._iteration_best = self.best_cost
            self.iterations += 1
            self._round_left = self.options.candidates
        assert self.delegate is not None
        out = self.delegate.next_batch(min(n, self._round_left))
        self._round_left -= len(out)
        if not out:
            self.finished = self.finished or f"{self.options.fallback} found no unmeasured candidate " \
                                             f"(no Fasor {self.task.op} model)"
        return out

    def _continue(self) -> bool:
        """Whether another iteration runs (sets :attr:`finished` when not)."""
        if self.options.mode == "efficiency":
            self.finished = f"efficiency mode: one iteration, top {self.options.validate} of " \
                            f"{self.options.candidates} validated"
            return False
        if self.best_cost < self._iteration_best:
            self.since_better = 0
        else:
            self.since_better += 1
        if self.since_better >= self.options.patience:
            self.finished = f"quality mode: converged ({self.options.patience} iterations without a better config)"
            return False
        return True

    def update(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Bookkeeping only (the model is not refitted); a fallback tuner learns as it does."""
        super().update(configs, results)
        if self.delegate is not None:
            self.delegate.update(configs, results)

    def search_report(self) -> dict[str, Any]:
        """What the tuner did: start point, class, shrinking, iterations, seconds searching."""
        if self.delegate is not None or self.shrunk is None:
            return {"notice": self.notice}
        sp = self.start_point
        return {"mode": self.options.mode, "start": sp.how, "start_reason": sp.reason, "sensitive": self.sensitive,
                "shrink": self.shrunk.report, "iterations": self.iterations, "search_seconds": self.search_seconds,
                "prepare_seconds": self.prepare_seconds, "model": self.model.origin.get(self.task.op, ""),
                "explorer": getattr(self.explorer, "stats", {}), "history": self.history}

    @property
    def status(self) -> str:
        """Model origin, start, class, space and search time in one line."""
        if self.delegate is not None:
            return f"fasor: {self.notice}"
        if self.shrunk is None:
            return "fasor: preparing"
        line = (f"fasor {self.options.mode}: {self.model.origin.get(self.task.op, '?')} model, start {self.start_point.how}, "
                f"{self.sensitive}-sensitive, space {self.shrunk.report.get('points')}, "
                f"{self.iterations} iterations, search {self.search_seconds:.1f} s")
        return f"{line}; {self.notice}" if self.notice else line


#: File name of a pre-tuned table, shipped (``learn/pretrained/fasor/``) and the user's (:func:`fasor_home`).
PRETUNED_FILE = "pretuned.json"
_TABLES: dict[str, Any] = {}


def user_table_path() -> Path:
    """The user's pre-tuned table (``tensortune fasor pretuned --db ...`` adds to it)."""
    from ..costmodel.fasor import fasor_home

    return fasor_home() / PRETUNED_FILE


def load_table(path: str | None = None) -> Any:
    """The pre-tuned table: the file ``path``, else the shipped table merged with the user's
    (entries of lower cost win); read once per process. A missing file is an empty table; an
    unreadable one raises :class:`~tensortune.database.pretuned.PretunedError`."""
    from ..costmodel.fasor import FASOR_SHIPPED
    from ..database.pretuned import PretunedTable

    key = str(path)
    if key not in _TABLES:
        if path is not None:
            table = PretunedTable.load(path)
        else:
            table = PretunedTable()
            for p in (FASOR_SHIPPED / PRETUNED_FILE, user_table_path()):
                if p.is_file():
                    table.merge(PretunedTable.load(p))
        _TABLES[key] = table
    return _TABLES[key]


def _search_options(o: FasorOptions) -> dict[str, Any]:
    """The explorer's options: the mode's phi (phi2 = 0 without the roofline term) for DQN."""
    if o.search != "dqn":
        return dict(o.search_options)
    phi = tuple(o.search_options.get("phi", PHI[o.mode]))
    if not o.roofline:
        phi = (phi[0], 0.0, phi[2])
    return {**o.search_options, "phi": phi}


def read_sensitivity(predictor: Any) -> dict[str, list[str]]:
    """The sensitivity study kept with a Fasor model: ``{"compute": [knobs], "memory": [knobs]}``
    (most sensitive first); {} when there is none."""
    folder = predictor.folder
    if folder is None or not (folder / SENSITIVITY_FILE).is_file():
        return {}
    try:
        d = json.loads((folder / SENSITIVITY_FILE).read_text())
        return {k: [str(n) for n in d[k]["ranking"]] for k in ("compute", "memory") if k in d}
    except (json.JSONDecodeError, KeyError, TypeError):
        log.warning("%s cannot be read; every knob is tuned", folder / SENSITIVITY_FILE)
        return {}


__all__ = ["FasorOptions", "FasorTuner"]
