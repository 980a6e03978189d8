"""``tensortune predictor ...``: train, evaluate and show pre-trained cost models."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..learn.predictor import WEIGHT_DTYPES
from .args import Parser, command_line, positive_float, positive_int, seed


def add_parsers(sub: Any) -> None:
    """The sub-commands of this group."""
    pr = sub.add_parser("predictor", help="pre-trained cost models: train, evaluate, show")
    psub = pr.add_subparsers(dest="predictor_cmd", required=True, parser_class=Parser)
    pt = psub.add_parser("train", help="train a predictor on exported datasets (tensortune dataset export)")
    pt.add_argument("--data", action="append", required=True, help="training file .npz (repeatable: same op)")
    pt.add_argument("--kind", default="transformer", help="transformer (One-Shot Tuner), mlp, lstm or xgb")
    pt.add_argument("-o", "--output", required=True, help="predictor folder to write")
    pt.add_argument("--holdout", type=float, default=0.0,
                    help="share of the tasks kept out of training and evaluated at the end (default 0)")
    pt.add_argument("--epochs", type=positive_int, default=None, help="most passes over the data")
    pt.add_argument("--lr", type=positive_float, default=None, help="learning rate (default 1e-4)")
    pt.add_argument("--batch-size", type=positive_int, default=None, help="rows per step (default 512)")
    pt.add_argument("--time-budget", type=positive_float, default=None, help="stop training after this many seconds")
    pt.add_argument("--seed", type=seed, default=0, help="seed of the randomness (default 0)")
    pt.add_argument("-O", "--option", action="append", default=[], metavar="KEY=VALUE",
                    help="any other training option (patience, val_fraction, oversample, net.d_model, ...)")
    pt.add_argument("--weights-dtype", choices=WEIGHT_DTYPES, default=WEIGHT_DTYPES[0],
                    help="how a neural predictor's weights are stored (float16 halves the file; the shipped ones)")
    pt.add_argument("--force", action="store_true", help="replace an existing predictor folder's files")
    pe = psub.add_parser("eval", help="R^2, Spearman and top-k recall of a predictor on a training file")
    pe.add_argument("predictor", help="predictor folder")
    pe.add_argument("--data", action="append", required=True, help="training file .npz (repeatable)")
    pe.add_argument("--json", action="store_true", help="print JSON")
    ps = psub.add_parser("show", help="what a predictor was trained on (default: the packaged ones)")
    ps.add_argument("predictor", nargs="?", default=None, help="predictor folder")



def cmd_predictor(a: argparse.Namespace) -> int:
    """``tensortune predictor train|eval|show``."""
    from ..learn import PredictorError, concat, load_predictor, load_training

    if a.predictor_cmd == "show":
        from ..costmodel.pretrained import SHIPPED, available_ops, predictor_folder

        folders = [Path(a.predictor)] if a.predictor else [predictor_folder(op) for op in available_ops()]
        if not folders:
            print(f"no predictors packaged in {SHIPPED}")
        for folder in folders:
            try:
                p = load_predictor(folder)
            except PredictorError as e:
                raise UsageError(str(e)) from None
            d, t = p.schema.get("dataset", {}), p.schema.get("training", {})
            m = p.machine
            print(f"{folder}: {p.kind} predictor of {p.op}; {d.get('samples')} samples of {d.get('tasks')} tasks "
                  f"measured on {m.get('cpu_model', '?')} {m.get('target', '')} ({m.get('threads', '?')} threads)")
            rep = t.get("report", {})
            if rep:
                vm = rep.get("val_metrics", {})
                print(f"  trained {rep.get('epochs')} epochs in {rep.get('seconds', 0):.0f} s ({rep.get('stop_reason')}); "
                      f"validation tasks: R^2 {vm.get('r2', 0):.3f}, Spearman {vm.get('spearman', 0):.3f}")
            if p.schema.get("heldout"):
                h = p.schema["heldout"]
                print(f"  held-out tasks ({h.get('tasks')}): R^2 {h.get('r2', 0):.3f}, Spearman {h.get('spearman', 0):.3f}, "
                      f"top-1 {h.get('top1_recall', 0):.2f}, top-5 {h.get('top5_recall', 0):.2f}")
            if p.schema.get("command"):
                print(f"  made by: {p.schema['command']}")
            if p.kind != "xgb":
                print(f"  weights stored as {p.schema.get('weights_dtype', 'float32')}")
        return 0
    try:
        data = concat([load_training(f) for f in a.data])
    except ValueError as e:
        raise UsageError(str(e)) from None
    if a.predictor_cmd == "eval":
        from ..learn.metrics import ranking_metrics

        try:
            p = load_predictor(a.predictor)
        except PredictorError as e:
            raise UsageError(str(e)) from None
        if data.op and data.op != p.op:
            raise UsageError(f"{a.predictor} predicts {p.op} tasks; the data holds {data.op} tasks")
        m = ranking_metrics(data.label, p.predict_rows(data.inputs()), data.task_index)
        print(json.dumps(m) if a.json else ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                    for k, v in m.items()))
        return 0
    return _predictor_train(a, data)


def _predictor_train(a: argparse.Namespace, data: Any) -> int:
    """``tensortune predictor train``."""
    from ..learn.metrics import ranking_metrics
    from ..learn.predictor import SCHEMA_FILE
    from ..learn.trainer import TrainOptions, train_predictor
    from ..utils.options import OptionError, make_options, parse_assignments

    out = Path(a.output)
    if out.exists() and (not out.is_dir() or ((out / SCHEMA_FILE).exists() and not a.force)):
        raise UsageError(f"-o {out}: {'not a folder' if not out.is_dir() else 'holds a predictor; use --force to replace it'}")
    if not 0.0 <= a.holdout < 1.0:
        raise UsageError("--holdout must lie in [0, 1)")
    try:
        extra = parse_assignments(a.option)
        given = {k: v for k, v in (("kind", a.kind), ("max_epochs", a.epochs), ("lr", a.lr),
                                   ("batch_size", a.batch_size), ("time_budget", a.time_budget), ("seed", a.seed))
                 if v is not None}
        options = make_options(TrainOptions, {**extra, **given}, owner="predictor training")
    except (OptionError, ValueError) as e:
        raise UsageError(str(e)) from None
    train, held = data.split(a.holdout, seed=a.seed) if a.holdout > 0 else (data, None)
    print(f"training a {options.kind} predictor of {data.op}: {len(train)} samples of {len(train.tasks())} tasks"
          + (f"; {len(held.tasks())} tasks held out" if held is not None else ""), flush=True)

    def epoch(e: int, tl: float, vl: float) -> None:
        if e == 1 or e % 10 == 0:
            print(f"  epoch {e}: train loss {tl:.5f}, validation loss {vl:.5f}", flush=True)

    predictor, report = train_predictor(train, options, on_epoch=epoch)
    predictor.schema["command"] = command_line("predictor")
    vm = report.val_metrics
    print(f"{report.epochs} epochs in {report.seconds:.0f} s ({report.stop_reason}); validation tasks: "
          f"R^2 {vm['r2']:.3f}, Spearman {vm['spearman']:.3f}, top-1 {vm['top1_recall']:.2f}, top-5 {vm['top5_recall']:.2f}")
    if held is not None and len(held):
        hm = ranking_metrics(held.label, predictor.predict_rows(held.inputs()), held.task_index)
        names = data.summary.get("tasks", [])
        hm["task_names"] = [names[int(t)].get("name") if int(t) < len(names) else str(t) for t in held.tasks()]
        predictor.schema["heldout"] = hm
        print(f"held-out tasks ({hm['tasks']}): R^2 {hm['r2']:.3f}, Spearman {hm['spearman']:.3f}, "
              f"top-1 {hm['top1_recall']:.2f}, top-5 {hm['top5_recall']:.2f}, top-64 quality {hm['top64_quality']:.3f}")
    predictor.save(out, a.weights_dtype)
    print(f"written: {out}")
    return 0


COMMANDS = {"predictor": cmd_predictor}
