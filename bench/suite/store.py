"""The results folder of one benchmark run: CSV rows and JSON summaries, written atomically.

    RESULTS/meta.json          every invocation ("runs"): machine, commit, libraries, threads, settings
    RESULTS/ops_batches.csv    one row per batch per tuner per workload
    RESULTS/ops_summary.json   per workload: per tuner trials, wall time split, re-measured best
    RESULTS/models.json        per model: tuned latency and tuning wall time per system
    RESULTS/peak.json          the machine's measured peak FLOP/s and memory bandwidth
    RESULTS/energy.json        RAPL energy, or why it is not available

A workload's rows and summary are written together when all its tuners are done, so an
interrupted run resumes at the first unfinished workload (``run.ops_done()``), and within it at the
first unfinished tuner (finished tuners wait in ``RESULTS/partial/``). Each stored
result names the invocation that measured it (``"run"``: its index in ``meta.json``'s
``runs``; a workload's summary stands for its CSV rows too); see ``provenance.py``.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from tensortune.utils.atomic import atomic_write

OPS_COLUMNS = ("workload", "group", "op", "tuner", "seed", "batch", "trials", "elapsed_s", "best_ms", "batch_ok",
               "batch_errors", "search_s", "build_s", "run_s", "flops")


#: The files that hold measured results (a folder with any of them has numbers to protect).
RESULT_FILES = ("ops_batches.csv", "ops_summary.json", "models.json", "peak.json")


def _load_json(p: Path, default: Any, remedy: str) -> Any:
    """The JSON file ``p`` (``default`` when absent); a corrupt one stops the run with ``remedy``."""
    if not p.exists():
        return default
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise SystemExit(f"{p}: not valid JSON ({e}); {remedy}") from None


class RunDir:
    """Reads and writes the files of one results folder.

    ``invocation`` is the index in ``meta.json``'s ``runs`` of the run writing the folder now:
    :meth:`add_ops` and :meth:`stamp` record it with each result.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.invocation: int | None = None

    def has_results(self) -> bool:
        """True when the folder holds measured results."""
        return any((self.path / f).exists() for f in RESULT_FILES)

    def stamp(self, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` with ``"run"``: the invocation writing it (see the class)."""
        return {**result, "run": self.invocation}

    def create(self) -> "RunDir":
        """Make the folder (and keep what is in it: runs resume)."""
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    # ------------------------------------------------------------ JSON files
    def read_json(self, name: str, default: Any = None) -> Any:
        """``NAME.json`` of the folder (``default`` when absent)."""
        return _load_json(self.path / f"{name}.json", default, "move it away to start that part again")

    def write_json(self, name: str, payload: Any) -> Path:
        """Write ``NAME.json`` atomically."""
        p = self.path / f"{name}.json"
        atomic_write(p, json.dumps(payload, indent=1, default=str))
        return p

    # ------------------------------------------------------------ operator suite
    def runs(self) -> list[dict[str, Any]]:
        """The invocations that wrote this folder (``meta.json``'s ``runs``), oldest first.

        A folder written before runs were listed holds one invocation at the top level of its
        ``meta.json``; its time is ``None`` when that run was stopped before writing it.
        """
        meta = self.read_json("meta", {}) or {}
        if "runs" in meta or not set(meta) - {"studies"}:  # (a study's invocations are not the suite's runs)
            return list(meta.get("runs", []))
        return [{"date": meta.get("started"), "commit": meta.get("machine", {}).get("git_commit"),
                 "settings": meta.get("settings", {}), "wall_s": meta.get("wall_s")}]

    def ops_rows(self) -> list[dict[str, Any]]:
        """All rows of ``ops_batches.csv`` (numbers parsed)."""
        p = self.path / "ops_batches.csv"
        if not p.exists():
            return []
        rows = []
        for r in csv.DictReader(io.StringIO(p.read_text())):
            out: dict[str, Any] = {}
            for k, v in r.items():
                if k in ("workload", "group", "op", "tuner"):
                    out[k] = v
                elif v in ("", None):
                    out[k] = None
                else:
                    out[k] = float(v) if any(c in v for c in ".eE") else int(v)
            rows.append(out)
        return rows

    def ops_summary(self) -> dict[str, Any]:
        """``ops_summary.json``: workload -> summary."""
        return self.read_json("ops_summary", {}) or {}

    def ops_done(self) -> set[str]:
        """Workloads whose every tuner is done."""
        return set(self.ops_summary())

    # A workload's rows and summary are written once all its tuners are done; each finished tuner's
    # curve waits in ``partial/`` meanwhile, so that a run stopped within a workload (the end of a
    # session) resumes at its first unfinished tuner.
    def _partial(self, workload: str, tuner: str | None = None) -> Path:
        from .specs import slug

        folder = self.path / "partial" / slug(workload)
        return folder if tuner is None else folder / f"{slug(tuner)}.json"

    def keep_tuner(self, workload: str, tuner: str, curve: dict[str, Any]) -> None:
        """Keep one finished tuner's curve of an unfinished workload (with the invocation that ran it)."""
        p = self._partial(workload, tuner)
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(p, json.dumps(self.stamp(curve), default=lambda o: o.item() if hasattr(o, "item") else str(o)))

    def tuner_done(self, workload: str, tuner: str) -> dict[str, Any] | None:
        """The curve :meth:`keep_tuner` kept for ``tuner`` on ``workload``, else None."""
        return _load_json(self._partial(workload, tuner), None, "delete it to run that tuner again")

    def drop_tuners(self, workload: str) -> None:
        """Remove the kept curves of a workload once its rows and summary are stored."""
        import shutil

        shutil.rmtree(self._partial(workload), ignore_errors=True)

    def add_ops(self, workload: str, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        """Store one finished workload: its batch rows (replacing any earlier ones) and summary."""
        keep = [r for r in self.ops_rows() if r["workload"] != workload]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=OPS_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in keep + [{**r, "workload": workload} for r in rows]:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in OPS_COLUMNS})
        atomic_write(self.path / "ops_batches.csv", buf.getvalue())
        s = self.ops_summary()
        s[workload] = self.stamp(summary)
        self.write_json("ops_summary", s)
