"""``tensortune hardware`` and ``tensortune fasor ...``: the machine's features and Fasor's models.

- ``hardware``: this machine's hardware profile (specs + the timed signature programs), cached.
- ``fasor pretrain``: pre-train the transferable model on exported dataset files (+ the
  sensitivity study and the DQN's offline pre-training).
- ``fasor transfer``: few-shot transfer of a pre-trained model to this machine (measures k
  representative tasks; resumable).
- ``fasor pretuned``: add the best schedules of tuning databases to the pre-tuned start table.
- ``fasor show``: which Fasor model and table the tuner would use here.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..learn.predictor import WEIGHT_DTYPES
from .args import (Parser, check_db, check_output, command_line, open_db, positive_float, positive_int, seed,
                   threads as threads_arg)


def _target(name: str, threads: int) -> dict[str, Any]:
    from ..target import generic_target_json, host_target_json

    if name == "native":
        return dict(host_target_json(threads))
    if name == "generic":
        return generic_target_json(threads)
    raise UsageError(f"--target {name!r}: use native or generic")


def add_parsers(sub: Any) -> None:
    """The ``hardware`` and ``fasor`` sub-commands."""
    from ..target import cpu_count

    hw = sub.add_parser("hardware", help="this machine's hardware profile (specs and timed signature programs)")
    hw.add_argument("--threads", type=threads_arg, default=cpu_count(), help="threads (default: all cores)")
    hw.add_argument("--target", default="native", help="native (this CPU) or generic (x86-64)")
    hw.add_argument("--refresh", action="store_true", help="measure again instead of reading the cache")
    hw.add_argument("--json", action="store_true", help="print the profile as JSON (a file fasor commands accept)")

    f = sub.add_parser("fasor", help="Fasor's models: pre-train, transfer to this machine, pre-tuned starts")
    fs = f.add_subparsers(dest="fasor_cmd", required=True, parser_class=Parser)
    pt = fs.add_parser("pretrain", help="pre-train the transferable model on exported datasets")
    pt.add_argument("--data", action="append", required=True, help="training file .npz (repeatable: same op)")
    pt.add_argument("-o", "--output", required=True, help="folder of Fasor models (the op's sub-folder is written)")
    pt.add_argument("--hardware", action="append", default=[],
                    help="hardware profile JSON of a machine that measured the data (repeatable; this machine's "
                         "is measured when needed)")
    pt.add_argument("--holdout", type=float, default=0.1, help="share of tasks held out and evaluated (0.1)")
    pt.add_argument("--epochs", type=positive_int, default=None, help="epochs (default 20, the paper's)")
    pt.add_argument("--dqn-epochs", type=int, default=20, help="DQN offline pre-training epochs (0: none)")
    pt.add_argument("--no-study", action="store_true", help="skip the sensitivity study")
    pt.add_argument("--time-budget", type=positive_float, default=None, help="stop training after this many seconds")
    pt.add_argument("--seed", type=seed, default=0, help="seed of the randomness (default 0)")
    pt.add_argument("--weights-dtype", choices=WEIGHT_DTYPES, default=WEIGHT_DTYPES[0],
                    help="how the net's weights are stored (float16 halves the file; the shipped models)")
    pt.add_argument("--force", action="store_true", help="replace an existing model of the op")
    tr = fs.add_parser("transfer", help="few-shot transfer of a pre-trained model to this machine")
    tr.add_argument("--data", default=None, help="the pre-training file .npz (its tasks are clustered; default: "
                                                 "the tasks the model's own schema names)")
    tr.add_argument("--op", default="conv2d_nchwc", help="the model's op, without --data (conv2d_nchwc)")
    tr.add_argument("--db", required=True, help="database for the representative tasks' measurements (resumes)")
    tr.add_argument("--model", default=None, help="pre-trained model folder (default: the shipped one)")
    tr.add_argument("-k", type=positive_int, default=10, help="representative tasks measured (10)")
    tr.add_argument("--samples", type=positive_int, default=64, help="measured configs per task (64)")
    tr.add_argument("--target", default="native", help="native (this CPU) or generic (x86-64)")
    tr.add_argument("--threads", type=threads_arg, default=cpu_count(), help="threads (default: all cores)")
    tr.add_argument("-o", "--output", default=None, help="folder for the transferred model (default: this "
                                                          "machine's, where the tuner finds it)")
    tr.add_argument("--seed", type=seed, default=0, help="seed of the randomness (default 0)")
    pu = fs.add_parser("pretuned", help="add the best schedules of tuning databases to the pre-tuned table")
    pu.add_argument("--db", action="append", required=True, help="tensortune database (repeatable)")
    pu.add_argument("-o", "--output", default=None, help="table file (default: the user's table)")
    fs.add_parser("show", help="which Fasor models and pre-tuned table the tuner uses on this machine")


def cmd_hardware(a: argparse.Namespace) -> int:
    """``tensortune hardware``."""
    from ..measure.hardware import HardwareError, profile_for

    try:
        p = profile_for(_target(a.target, a.threads), a.threads, refresh=a.refresh)
    except HardwareError as e:
        raise UsageError(str(e)) from None
    if a.json:
        print(json.dumps(p.to_json(), indent=1))
        return 0
    s = p.spec
    print(f"{s.cpu_model} ({s.vendor} family {s.family} model {s.model}), target {s.llvm_cpu}, {p.threads} threads, "
          f"{s.frequency_mhz:.0f} MHz, {s.vector_bits}-bit vectors, {s.memory_gb:.1f} GB, caches L1d {s.l1d_kb} KB / "
          f"L2 {s.l2_kb} KB / L3 {s.l3_kb} KB, line {s.cache_line} B")
    print(f"peak {p.peak_gflops:.1f} GFLOP/s, DRAM bandwidth {p.bandwidth_gbs:.1f} GB/s")
    print("signature: " + ", ".join(f"{k} {v:.3g}" for k, v in p.signature.items()))
    return 0


def cmd_fasor(a: argparse.Namespace) -> int:
    """``tensortune fasor pretrain|transfer|pretuned|show``."""
    return {"pretrain": _pretrain, "transfer": _transfer, "pretuned": _pretuned, "show": _show}[a.fasor_cmd](a)


def _fasor_training(files: list[str], hardware: list[str]) -> Any:
    from ..learn import concat, load_training
    from ..learn.fasor import fasor_data, machine_profiles
    from ..measure.hardware import HardwareProfile

    try:
        data = concat([load_training(f) for f in files])
        extra = [HardwareProfile.from_json(json.loads(Path(h).read_text())) for h in hardware]
        return fasor_data(data, machine_profiles(data, extra))
    except (OSError, ValueError) as e:
        raise UsageError(str(e)) from None


def _pretrain(a: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..app.fasor import pretrain
    from ..learn.fasor import FASOR_TRAIN
    from ..learn.predictor import SCHEMA_FILE

    data = _fasor_training(a.data, a.hardware)
    out = Path(a.output)
    if (out / data.op / SCHEMA_FILE).exists() and not a.force:
        raise UsageError(f"-o {out}: holds a {data.op} model; use --force to replace it")
    if not 0 <= a.holdout < 1:
        raise UsageError("--holdout must lie in [0, 1)")
    opts = replace(FASOR_TRAIN, seed=a.seed, **({"max_epochs": a.epochs} if a.epochs else {}),
                   time_budget=a.time_budget)
    print(f"pre-training the Fasor {data.op} model on {len(data)} samples of {len(data.tasks())} tasks "
          f"({len(data.summary.get('machines', []))} machine(s))", flush=True)
    summary = pretrain(data, out, holdout=a.holdout, options=opts, study=not a.no_study,
                       dqn_epochs=a.dqn_epochs, seed=a.seed, log=lambda s: print(s, flush=True),
                       command=command_line("fasor", "pretrain"), weights_dtype=a.weights_dtype)
    h = summary.get("heldout")
    if h:
        print(f"held-out tasks ({h['tasks']}): R^2 of -ln(latency) {h['r2_neg_log_latency']:.3f}, "
              f"within-task Spearman {h['spearman']:.3f}, top-1 {h['top1_recall']:.2f}")
    print(f"written: {out / data.op}")
    return 0


def _transfer(a: argparse.Namespace) -> int:
    from ..costmodel.fasor import FASOR_SHIPPED
    from ..app.fasor import PretrainingTasks, transfer
    from ..learn import load_training
    from ..measure import MeasureOptions, Measurer

    try:
        pretrain = PretrainingTasks.of_data(load_training(a.data)) if a.data else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    check_db(a.db, must_exist=False)
    target = _target(a.target, a.threads)
    db = open_db(a.db)
    try:
        with Measurer(MeasureOptions(repeat=3, min_repeat_ms=20, threads=a.threads)) as m:
            out = transfer(a.model or FASOR_SHIPPED, pretrain, db, m, target, a.threads, k=a.k, samples=a.samples,
                           seed=a.seed, out=a.output, op=a.op, log=lambda s: print(s, flush=True))
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        db.close()
    print(f"transferred ({out['records']} records of {len(out['tasks'])} tasks, {out['measure_seconds']:.0f} s "
          f"measuring, {out['train_seconds']:.0f} s fine-tuning): {out['folder']}")
    return 0


def _pretuned(a: argparse.Namespace) -> int:
    from ..database.pretuned import PretunedError, PretunedTable
    from ..tuners.fasor_parts import user_table_path

    path = Path(a.output) if a.output else user_table_path()
    try:
        table = PretunedTable.load(path) if path.is_file() else PretunedTable()
    except PretunedError as e:
        raise UsageError(str(e)) from None
    for d in a.db:
        check_db(d, must_exist=True)
        if a.output:
            check_output(a.output, True, db=d)
        db = open_db(d, readonly=True)
        try:
            s = table.build_from_database(db)
        finally:
            db.close()
        print(f"{d}: {s.added} entries added or improved from {s.tasks} tasks ({s.contexts} machine contexts)")
    path.parent.mkdir(parents=True, exist_ok=True)
    table.save(path)
    print(f"{len(table.entries)} entries: {path}")
    return 0


def _model_line(folder: Path) -> str:
    """One line on a Fasor model folder: op, machines, tasks, held-out R^2, the command."""
    from ..database.pretuned import target_type
    from ..learn.predictor import PredictorError, load_predictor

    try:
        p = load_predictor(folder)
    except PredictorError as e:
        return f"{folder.name}: unreadable ({e})"
    ds = p.schema.get("dataset") or {}
    machines = sorted({target_type(m["target"], m.get("threads", 0)) for m in ds.get("machines", [])})
    parts = [f"{p.op}: {', '.join(machines) or '?'}, {ds.get('tasks', '?')} tasks, {ds.get('samples', '?')} samples"]
    held = (p.schema.get("heldout") or {}).get("r2_neg_log_latency")
    if held is not None:
        parts.append(f"held-out R^2 {held:.3f}")
    if p.schema.get("command"):
        parts.append(f"made by: {p.schema['command']}")
    return "; ".join(parts)


def _show(a: argparse.Namespace) -> int:
    from ..costmodel.fasor import FASOR_SHIPPED, fasor_home
    from ..costmodel.pretrained import available_ops
    from ..tuners.fasor_parts import load_table, user_table_path

    ops = available_ops(FASOR_SHIPPED)
    print(f"shipped Fasor models ({FASOR_SHIPPED}): {', '.join(ops) or 'none'}")
    for op in ops:
        print("  " + _model_line(FASOR_SHIPPED / op))
    moved = sorted(p.parent.parent.name + "/" + p.parent.name for p in fasor_home().glob("*/*/predictor.json"))
    print(f"transferred models ({fasor_home()}): {', '.join(moved) or 'none'}")
    t = load_table()
    print(f"pre-tuned table: {len(t.entries)} entries (shipped + {user_table_path()})")
    return 0


COMMANDS = {"hardware": cmd_hardware, "fasor": cmd_fasor}
