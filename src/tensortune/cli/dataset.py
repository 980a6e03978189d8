"""``tensortune dataset ...``: layer statistics, task samplers, and the measured tuning datasets."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .args import Parser, check_db, check_output, open_db, positive_float, positive_int, seed


def add_parsers(sub: Any) -> None:
    """The sub-commands of this group."""
    ds = sub.add_parser("dataset", help="tuning-dataset parts: layer statistics and task samplers")
    dsub = ds.add_subparsers(dest="dataset_cmd", required=True, parser_class=Parser)
    dl = dsub.add_parser("layers", help="collect the layer statistics of zoo models (the task prior)")
    dl.add_argument("--models", default=None, help="comma-separated zoo models (default: all)")
    dl.add_argument("-o", "--output", required=True, help="JSON file (the package ships zoo_layers.json)")
    dl.add_argument("--force", action="store_true", help="overwrite an existing file")
    dt = dsub.add_parser("tasks", help="sample synthetic tasks from the layer statistics")
    dt.add_argument("--sampler", default="pgs", help="pgs (prior-guided), random or modelzoo")
    dt.add_argument("--op", default="conv2d", help="conv2d, depthwise_conv2d or dense")
    dt.add_argument("-n", type=positive_int, default=150, help="distinct tasks wanted")
    dt.add_argument("--seed", type=seed, default=0, help="seed of the randomness (default 0)")
    dt.add_argument("--layers", default=None, help="statistics file (default: the shipped zoo statistics)")
    dt.add_argument("--json", action="store_true", help="print JSON")
    dg = dsub.add_parser("generate", help="measure a tuning dataset into a database (resumes; runs for hours)")
    dg.add_argument("--db", required=True, help="SQLite database of the dataset (created if missing; resumed)")
    dg.add_argument("--op", default="conv2d", help="conv2d, depthwise_conv2d or dense")
    dg.add_argument("--tasks", type=positive_int, default=150, help="tasks (default 150)")
    dg.add_argument("--samples", type=positive_int, default=200, help="measured configs per task (default 200)")
    dg.add_argument("--sampler", default="pgs", help="task sampler: pgs, random or modelzoo")
    dg.add_argument("--code", default="ebs", help="code sampler: ebs (autotvm's trajectory) or random")
    dg.add_argument("--seed", type=seed, default=0, help="seed of the randomness (default 0)")
    dg.add_argument("--time-budget", type=positive_float, default=None, help="stop after this many seconds")
    dg.add_argument("--repeat", type=positive_int, default=5, help="timed repeats per sample (default 5)")
    dg.add_argument("--min-repeat-ms", type=int, default=40, help="shortest repeat in ms (default 40)")
    dg.add_argument("--unblocked", action="store_true",
                    help="measure the plain NCHW/GEMM ops instead of the forms a compiled model runs "
                         "(conv2d_nchwc, depthwise_conv2d_nchwc, dense_pack)")
    dg.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    shards_help = ("folder of per-task shard files kept under version control (e.g. src/tensortune/dataset/shipped/conv2d): "
                   "restored into --db first, and each task's shard written again as it is measured")
    dg.add_argument("--shards", default=None, help=shards_help)
    dst = dsub.add_parser("status", help="how far a dataset is: tasks complete, samples, measuring hours")
    dst.add_argument("--db", required=True, help="SQLite database file")
    dst.add_argument("--shards", default=None, help="restore this shard folder into --db first")
    dst.add_argument("--json", action="store_true", help="print JSON")
    de = dsub.add_parser("export", help="features and labels of a dataset database, for training")
    de.add_argument("--db", required=True, help="SQLite database file")
    de.add_argument("--op", default="conv2d_nchwc",
                    help="the tasks' op as stored (conv2d_nchwc, depthwise_conv2d_nchwc, dense_pack, conv2d, ...)")
    de.add_argument("-o", "--output", required=True, help=".npz file (a .json summary goes beside it)")
    de.add_argument("--force", action="store_true", help="overwrite an existing output file")
    de.add_argument("--shards", default=None, help="restore this shard folder into --db first")
    de.add_argument("--max-tasks", type=positive_int, default=None,
                    help="only the first N tasks (in the generator's order, kept beside the database)")
    de.add_argument("--max-samples", type=positive_int, default=None,
                    help="only the first N samples measured of each task (a shorter trajectory, as if generated so)")


def cmd_dataset(a: argparse.Namespace) -> int:
    """``tensortune dataset layers|tasks``."""
    from ..dataset import layers as L

    if a.dataset_cmd == "layers":
        from ..models.zoo import model_names

        names = [m.strip() for m in a.models.split(",")] if a.models else model_names()
        unknown = [m for m in names if m not in model_names()]
        if unknown:
            raise UsageError(f"unknown model {unknown[0]!r}; known: {', '.join(model_names())}")
        check_output(a.output, a.force)
        stats = L.zoo_statistics(names)
        L.save(stats, a.output)
        for st in stats:
            role = "evaluated (kept out of the prior)" if st.model in L.EVALUATED else "prior"
            print(f"{st.model:16} {sum(st.layers.values()):4d} layers, {len(st.layers):3d} distinct, {role}"
                  + (f"; skipped {dict(st.skipped)}" if st.skipped else ""))
        print(f"written: {a.output}")
        return 0
    if a.dataset_cmd in ("generate", "export", "status"):
        return _dataset_db(a)
    from ..dataset.tasks import overlap, sample_tasks

    try:
        prior, evaluated = L.load(a.layers or L.ZOO_LAYERS)
        tasks = sample_tasks(a.sampler, prior, a.op, a.n, a.seed)
    except ValueError as e:
        raise UsageError(str(e)) from None
    hits, total = overlap(tasks, evaluated)
    if a.json:
        print(json.dumps({"sampler": a.sampler, "op": a.op, "seed": a.seed, "tasks": [t.shape for t in tasks],
                          "evaluated_layers_contained": hits, "evaluated_layers": total}))
    else:
        for t in tasks:
            print(f"{t.op} {','.join(str(v) for _, v in t.args)}")
        print(f"{len(tasks)} distinct {a.op} tasks ({a.sampler}, seed {a.seed}); {hits} of them are among the "
              f"{total} distinct {a.op} layers of the evaluated models ({', '.join(L.EVALUATED)})")
    return 0


def _dataset_db(a: argparse.Namespace) -> int:
    """``tensortune dataset generate|export``."""
    from ..app import dataset as G

    if a.shards:
        _restore_shards(a)
    if a.dataset_cmd == "export":
        check_db(a.db, must_exist=True)
        check_output(a.output, a.force, db=a.db)
        try:
            spec = G.read_spec(a.db)  # None for records imported from elsewhere
        except ValueError as e:
            raise UsageError(str(e)) from None
        db = open_db(a.db, readonly=True)
        try:
            kept = G.tasks_path(a.db)  # the generator's task order, for --max-tasks
            order = json.loads(kept.read_text()) if a.max_tasks and kept.exists() else None
            summary = G.export(db, a.op, a.output, spec=spec, max_tasks=a.max_tasks, max_samples=a.max_samples,
                               order=order)
        except ValueError as e:
            raise UsageError(str(e)) from None
        finally:
            db.close()
        print(f"{summary['samples']} samples of {len(summary['tasks'])} {a.op} tasks on {len(summary['machines'])} "
              f"machine(s) ({summary['dropped']} dropped: failed, unverified or > {summary['max_slowdown']:g}x the best); "
              f"written: {a.output} and {a.output}.json")
        return 0
    if a.dataset_cmd == "status":
        check_db(a.db, must_exist=True)
        try:
            spec = G.read_spec(a.db)
            if spec is None:
                raise ValueError(f"no settings file {G.spec_path(a.db)}")
            tasks = G.frozen_tasks(spec, a.db)
        except (OSError, ValueError, TypeError) as e:
            raise UsageError(f"{a.db}: not a dataset database ({e})") from None
        db = open_db(a.db, readonly=True)
        try:
            st = G.status(spec, db, tasks)
        finally:
            db.close()
        if a.json:
            print(json.dumps(st))
        else:
            print(f"{a.db}: {spec.op} ({spec.task_sampler}/{spec.code_sampler}); {st['complete']}/{st['tasks']} tasks "
                  f"complete{_exhausted_text(st['exhausted'], spec.samples)}, {st['samples']} samples, "
                  f"{st['measuring_hours']:.2f} h of measuring")
            for name, m in st["machines"].items():
                print(f"  {name}: {m['tasks']} tasks, {m['samples']} samples, {m['seconds'] / 3600:.2f} h")
        return 0
    from ..measure import Measurer
    from ..utils.progress import ProgressBar

    try:
        spec = G.DatasetSpec(a.op, a.tasks, a.samples, a.sampler, a.code, a.seed, blocked=not a.unblocked,
                             repeat=a.repeat, min_repeat_ms=a.min_repeat_ms)
        check_db(a.db, must_exist=False)
        G.check_spec(spec, a.db)
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        kept = G.frozen_tasks(spec, a.db)
        tasks = G.top_up(spec, a.db, kept)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if len(tasks) > len(kept):
        print(f"{a.db}: {len(tasks) - len(kept)} tasks added to the {len(kept)} it kept (today's layer statistics "
              f"give more distinct {a.op} tasks)", flush=True)
    print(f"dataset {a.db}: {len(tasks)} {a.op} tasks ({a.sampler}), {a.samples} {a.code} samples each; "
          "every trial is committed as it completes: rerun the same command to resume", flush=True)
    db = open_db(a.db)
    bar = ProgressBar(len(tasks) * a.samples, desc=f"dataset {a.op}", disable=a.no_progress)

    if a.shards:
        from ..dataset.shards import save_sidecars, save_task

        save_sidecars(a.db, a.shards)

    def done(p: Any) -> None:
        if a.shards and p.measured:
            save_task(db, a.shards, p.workload_key)
        if a.no_progress:
            print(f"{p.name}: {p.stored} samples stored ({p.measured} this run){'; ' + p.note if p.note else ''}",
                  flush=True)

    try:
        with Measurer(spec.measure_options()) as m:
            progress = G.generate(spec, db, m, tasks, a.time_budget, on_task=done, callbacks=[bar])
    finally:
        bar.close()
        db.close()
    exhausted = sum(p.stored < a.samples and p.note == "space_exhausted" for p in progress)
    full = sum(p.stored >= a.samples for p in progress) + exhausted
    print(f"{full}/{len(tasks)} tasks complete{_exhausted_text(exhausted, a.samples)}, "
          f"{sum(p.measured for p in progress)} samples measured this run")
    return 0


def _exhausted_text(exhausted: int, samples: int) -> str:
    """The status line's note on tasks whose whole space was smaller than the samples asked for."""
    return f" ({exhausted} of them with every config of a space smaller than {samples} measured)" if exhausted else ""


def _restore_shards(a: argparse.Namespace) -> None:
    """Fill ``a.db`` from the shard folder ``a.shards`` (see :mod:`tensortune.dataset.shards`)."""
    from ..database import DatabaseError
    from ..dataset.shards import restore

    if not Path(a.shards).is_dir():
        if a.dataset_cmd != "generate":
            raise UsageError(f"{a.shards}: no such shard folder")
        return
    check_db(a.db, must_exist=False)
    db = open_db(a.db)
    try:
        shards, trials = restore(a.db, db, a.shards)
    except DatabaseError as e:
        raise UsageError(str(e)) from None
    finally:
        db.close()
    if shards:
        print(f"restored {shards} task shard(s), {trials} samples, from {a.shards} into {a.db}", flush=True)


COMMANDS = {"dataset": cmd_dataset}
