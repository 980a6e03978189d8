"""Bad inputs and faults against the command line, run as a user would, in a scratch folder.

Each case runs ``tensortune ...`` in its own process and is judged: refused cleanly (a non-zero exit
and one ``tensortune: error:`` line on stderr, no traceback), accepted where it should be, no
hang, and no stored data changed. Cases that need a mount (a full disk, a read-only database) are
skipped where mounting is not allowed.

    python -m bench run --study hostile [-o bench/results/hostile.md] [--only WORD]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SMALL = ["matmul", "--shape", "8,8,8", "--tuner", "random", "--trials", "2", "--no-progress"]
TIMEOUT_S = 180.0
#: The console script, as a user runs it (``python -m`` would put the working folder on sys.path itself).
SCRIPT = Path(sys.executable).parent / "tensortune"


@dataclass
class Case:
    """One input or fault: ``argv`` after ``tensortune`` ({d} is the case's folder, {db} a copy of a
    small good database), made ready by ``setup(folder)``; ``expect`` "refused" or "ok"; ``keep``
    files (relative to the folder) that must not change; ``stdout`` "full" for /dev/full."""

    kind: str
    name: str
    argv: list[str]
    setup: Callable[[Path], None] | None = None
    expect: str = "refused"
    keep: tuple[str, ...] = ()
    stdout: str = ""
    needs_mount: bool = False
    extra_check: Callable[[Path], str] | None = None


@dataclass
class Outcome:
    case: Case
    verdict: str  # clean, accepted, ok, traceback, hang, dirty, changed, skipped
    rc: int | None
    line: str
    seconds: float
    notes: list[str] = field(default_factory=list)


def command_name(cmd: list[str]) -> str:
    """A case's command as a user types it: ``tune-op``, ``db best``."""
    return " ".join(cmd[:2]) if cmd[0] == "db" else cmd[0]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "absent"


def _mount(where: Path, opts: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True).returncode == 0


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


# ---------------------------------------------------------------- set-ups
def corrupt_page(d: Path) -> None:
    b = bytearray((d / "g.db").read_bytes())
    b[4096:8192] = os.urandom(4096)
    (d / "g.db").write_bytes(bytes(b))


def drop_trials(d: Path) -> None:
    con = sqlite3.connect(d / "g.db")
    con.execute("DROP TABLE trials")
    con.commit()
    con.close()


def symlink_loop(d: Path) -> None:
    (d / "a.db").symlink_to(d / "b.db")
    (d / "b.db").symlink_to(d / "a.db")


def fifo(d: Path) -> None:
    os.mkfifo(d / "f")


def text_file(name: str, text: str) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        (d / name).write_text(text)
    return setup


def bytes_file(name: str, data: bytes) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        (d / name).write_bytes(data)
    return setup


def records(mutate: Callable[[dict, dict], list[dict]]) -> Callable[[Path], None]:
    """An import file made from the good database's task and first trial, changed by ``mutate``."""
    def setup(d: Path) -> None:
        lines = [json.loads(x) for x in (d / "good.jsonl").read_text().splitlines()]
        task, trial = lines[0], lines[1]
        (d / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mutate(dict(task), dict(trial))))
    return setup


def symlink_to_text(d: Path) -> None:
    (d / "target.txt").write_text("keep\n")
    (d / "link").symlink_to(d / "target.txt")


def plant_module(d: Path) -> None:
    for name in ("tvm", "runpy", "json"):
        (d / f"{name}.py").write_text(f"open({str(d / 'ran')!r}, 'a').write(__name__ + '\\n')\n")


def planted_ran(d: Path) -> str:
    return "planted module ran" if (d / "ran").exists() else ""


def predictor_without_inputs(d: Path) -> None:
    (d / "p").mkdir()
    (d / "p" / "predictor.json").write_text(json.dumps({"format": 1, "kind": "xgb", "op": "conv2d"}))


def corrupt_shard(d: Path) -> None:
    (d / "shards").mkdir()
    data = bytearray(gzip.compress(b'{"kind": "task"}\n' * 200))
    data[20:40] = b"\xff" * 20
    (d / "shards" / "t.jsonl.gz").write_bytes(bytes(data))


def deep_row(d: Path) -> None:
    con = sqlite3.connect(d / "g.db")
    con.execute("UPDATE trials SET extra = ? WHERE id = (SELECT MIN(id) FROM trials)", ("[" * 5000 + "]" * 5000,))
    con.commit()
    con.close()


def bad_target_row(d: Path) -> None:
    con = sqlite3.connect(d / "g.db")
    con.execute("UPDATE trials SET target = 'not json' WHERE id = (SELECT MIN(id) FROM trials)")
    con.commit()
    con.close()


def onnx_model(d: Path) -> None:
    shutil.copy(BASE / "tiny.onnx", d / "m.onnx")


def cases() -> list[Case]:
    big = "9" * 23
    c: list[Case] = []
    add = c.append
    # code from the working directory
    add(Case("code", "tvm.py/runpy.py/json.py in the working folder, tune-op", ["tune-op", *SMALL, "--db", "{d}/n.db"],
             plant_module, expect="ok", extra_check=planted_ran))
    # the database file
    for cmd in (["tune-op", *SMALL], ["db", "best"], ["db", "export"]):
        add(Case("database", f"corrupt page behind an intact header: {command_name(cmd)}", [*cmd, "--db", "{db}"], corrupt_page))
    for cmd in (["db", "best"], ["tune-op", *SMALL], ["db", "export"]):
        add(Case("database", f"no trials table: {command_name(cmd)}", [*cmd, "--db", "{db}"], drop_trials, keep=("g.db",)))
    for cmd in (["db", "best"], ["tune-op", *SMALL], ["db", "export"], ["db", "import", "{d}/good.jsonl"]):
        add(Case("database", f"symlink loop as --db: {command_name(cmd)}", [*cmd, "--db", "{d}/a.db"], symlink_loop))
    for cmd in (["db", "best"], ["tune-op", *SMALL]):
        add(Case("database", f"a FIFO as --db: {command_name(cmd)}", [*cmd, "--db", "{d}/f"], fifo))
        add(Case("database", f"a text file as --db: {command_name(cmd)}", [*cmd, "--db", "{d}/t.db"],
                 text_file("t.db", "hello\n"), keep=("t.db",)))
        add(Case("database", f"an empty file as --db: {command_name(cmd)}", [*cmd, "--db", "{d}/e.db"], text_file("e.db", ""),
                 **({"expect": "ok"} if cmd[0] == "tune-op" else {"keep": ("e.db",)})))  # SQLite: an empty database
        add(Case("database", f"a directory as --db: {command_name(cmd)}", [*cmd, "--db", "{d}"]))
        add(Case("database", f"/dev/null as --db: {command_name(cmd)}", [*cmd, "--db", "/dev/null"]))
        add(Case("database", f"--db in a missing folder: {command_name(cmd)}", [*cmd, "--db", "{d}/no/such/g.db"]))
    add(Case("database", "best of a missing database", ["db", "best", "--db", "{d}/missing.db"]))
    add(Case("database", "export of a missing database", ["db", "export", "--db", "{d}/missing.db"]))
    add(Case("database", "db upgrade of a text file", ["db", "upgrade", "--db", "{d}/t.db"], text_file("t.db", "x\n"),
             keep=("t.db",)))
    add(Case("database", "a 300-character file name", ["db", "best", "--db", "{d}/" + "x" * 300 + ".db"]))
    add(Case("database", "a stored row nested 5000 deep: export", ["db", "export", "--db", "{db}"], deep_row, keep=("g.db",)))
    add(Case("database", "a stored row nested 5000 deep: best", ["db", "best", "--db", "{db}"], deep_row, keep=("g.db",),
             expect="ok"))
    add(Case("database", "a stored row with a non-JSON target: best (a warning, the row left out)", ["db", "best", "--db", "{db}"],
             bad_target_row, keep=("g.db",), expect="ok"))
    # mounts: full disk, read-only
    add(Case("disk", "tune-op on a full disk (200 KB tmpfs)", ["tune-op", *SMALL, "--db", "{d}/full/n.db"],
             needs_mount=True, extra_check=lambda d: "left a file" if (d / "full" / "n.db").exists() else ""))
    add(Case("disk", "export to a full disk", ["db", "export", "--db", "{db}", "-o", "{d}/full/out.jsonl"], needs_mount=True))
    add(Case("disk", "import into a new database on a full disk", ["db", "import", "--db", "{d}/full/n.db", "{d}/good.jsonl"],
             needs_mount=True))
    add(Case("disk", "best of a WAL database on a read-only mount", ["db", "best", "--db", "{d}/ro/g.db"], needs_mount=True))
    add(Case("disk", "export of a WAL database on a read-only mount", ["db", "export", "--db", "{d}/ro/g.db"],
             needs_mount=True))
    add(Case("disk", "tune-op into a database on a read-only mount", ["tune-op", *SMALL, "--db", "{d}/ro/g.db"],
             needs_mount=True))
    # standard output
    for cmd in (["db", "export", "--db", "{db}"], ["db", "best", "--db", "{db}"], ["tasks", "resnet18"]):
        add(Case("stdout", f"stdout on /dev/full: {command_name(cmd)}", cmd, stdout="full"))
    # numbers and sizes
    for shape in ("99999999999999999999,32,32", "2147483647,32,32", "0,8,8", "-8,8,8", "8,8", "8,8,8,8", "a,b,c", "",
                  "8.5,8,8", "1e3,8,8", " , , ", "8,,8"):
        add(Case("numbers", f"tune-op matmul --shape {shape!r}", ["tune-op", "matmul", "--shape", shape, "--db", "{d}/n.db"]))
    for flag, value in (("--seed", big), ("--seed", "-1"), ("--trials", str(2**70)), ("--trials", "0"), ("--trials", "-3"),
                        ("--time-budget", "nan"), ("--time-budget", "inf"), ("--time-budget", "-1"), ("--time-budget", "0"),
                        ("--cpu-budget", "nan"), ("--early-stopping", "-1"), ("--batch-size", "0"),
                        ("--batch-size", str(2**40)), ("--energy-budget", "-5")):
        add(Case("numbers", f"tune-op {flag} {value}", ["tune-op", "matmul", "--shape", "8,8,8", flag, value,
                                                           "--db", "{d}/n.db", "--no-progress"]))
    for t in ("999", "0", "-1"):
        add(Case("numbers", f"bench --threads {t}", ["bench", "resnet18", "--threads", t]))
    # precision: a name it does not know, a target without AVX512-BF16, an op without a bf16 form
    add(Case("precision", "tune-op --precision fp8", ["tune-op", *SMALL, "--precision", "fp8", "--db", "{d}/n.db"]))
    add(Case("precision", "tune-op --precision bf16 for a znver3 target",
             ["tune-op", *SMALL, "--precision", "bf16", "--target", '{"kind": "llvm", "mcpu": "znver3"}',
              "--db", "{d}/n.db"], extra_check=lambda d: "left a file" if (d / "n.db").exists() else ""))
    add(Case("precision", "compile --precision bf16 for a generic x86-64 target",
             ["compile", "resnet18", "--precision", "bf16", "--target", "generic", "-o", "{d}/r.so"]))
    add(Case("precision", "tune-op depthwise_conv2d --precision bf16 (no bf16 form)",
             ["tune-op", "depthwise_conv2d", "--shape", "8,8,16,3,1,1", "--trials", "2", "--precision", "bf16",
              "--db", "{d}/n.db"]))
    for shape in ("x=-1", "x=1000000000,3,8,8", "x=0", "x=1,3,224,224", "x=a", "nonsense"):
        add(Case("numbers", f"tasks resnet18 --input-shape {shape}", ["tasks", "resnet18", "--input-shape", shape]))
    for shape in ("input=-1,3,8,8", "input=0,3,8,8", "input=1000000000,3,8,8", "nosuch=1,3,8,8"):
        add(Case("numbers", f"tasks ONNX --input-shape {shape}", ["tasks", "{d}/m.onnx", "--input-shape", shape],
                 onnx_model))
    # imports
    def set_field(name: str, value: object) -> Callable[[dict, dict], list[dict]]:
        return lambda task, trial: [task, {**trial, name: value}]
    for name, value in (("seed", 2**70), ("threads", 2**70), ("config_index", 2**70), ("config_index", -1),
                        ("target", "not json"), ("timing", "[1]"), ("costs", [float("nan")]), ("costs", [-1.0]),
                        ("costs", [float("inf")]), ("costs", "fast"), ("error", "exploded"), ("extra", [1]),
                        ("extra", {"confirm": {"group": "", "round": 1, "of": 1}}), ("timestamp", "yesterday"),
                        ("config", "x"), ("workload_key", "nope"), ("verified", "yes"), ("threads", -2),
                        ("uid", "two words"), ("uid", 7), ("uid", "x" * 300)):
        add(Case("import", f"a trial with {name} = {str(value)[:30]}", ["db", "import", "--db", "{d}/n.db", "{d}/in.jsonl"],
                 records(set_field(name, value)),
                 extra_check=lambda d: "wrote a database" if (d / "n.db").exists() else ""))
    add(Case("import", "a trial without its task", ["db", "import", "--db", "{d}/n.db", "{d}/in.jsonl"],
             records(lambda task, trial: [trial])))
    add(Case("import", "a task whose task JSON names a foreign op", ["db", "import", "--db", "{d}/n.db", "{d}/in.jsonl"],
             records(lambda task, trial: [{**task, "task_json": task["task_json"].replace('"matmul"', '"no_such_op"')},
                                          trial])))
    add(Case("import", "nested 100,000 deep", ["db", "import", "--db", "{d}/n.db", "{d}/in.jsonl"],
             text_file("in.jsonl", "[" * 100_000 + "]" * 100_000 + "\n")))
    add(Case("import", "a 5 MB line", ["db", "import", "--db", "{d}/n.db", "{d}/in.jsonl"],
             text_file("in.jsonl", '{"kind": "trial", "error_msg": "' + "x" * (5 << 20) + '"}\n')))
    add(Case("import", "binary junk", ["db", "import", "--db", "{d}/n.db", "{d}/in.jsonl"],
             bytes_file("in.jsonl", os.urandom(4096))))
    add(Case("import", "a JSON array line", ["db", "import", "--db", "{d}/n.db", "{d}/in.jsonl"], text_file("in.jsonl", "[1,2]\n")))
    add(Case("import", "an empty file", ["db", "import", "--db", "{d}/n.db", "{d}/in.jsonl"], text_file("in.jsonl", ""),
             expect="ok"))
    add(Case("import", "a missing file", ["db", "import", "--db", "{d}/n.db", "{d}/missing.jsonl"]))
    add(Case("import", "a directory as the file", ["db", "import", "--db", "{d}/n.db", "{d}"]))
    add(Case("import", "a good file into a corrupt database", ["db", "import", "--db", "{db}", "{d}/good.jsonl"], corrupt_page))
    add(Case("import", "a good file into the database it came from (nothing new)", ["db", "import", "--db", "{db}",
             "{d}/good.jsonl"], keep=("g.db",)))
    add(Case("import", "a good file into the database it came from, --allow-empty", ["db", "import", "--db", "{db}",
             "{d}/good.jsonl", "--allow-empty"], keep=("g.db",), expect="ok"))
    add(Case("import", "a stored trial's uid with other costs", ["db", "import", "--db", "{db}", "{d}/in.jsonl"],
             records(lambda task, trial: [task, {**trial, "costs": [1.0]}]), keep=("g.db",)))
    add(Case("import", "a good file into a new database", ["db", "import", "--db", "{d}/n.db", "{d}/good.jsonl"],
             expect="ok"))
    # outputs
    add(Case("files", "export -o a FIFO", ["db", "export", "--db", "{db}", "-o", "{d}/f"], fifo))
    add(Case("files", "export -o a FIFO --force", ["db", "export", "--db", "{db}", "-o", "{d}/f", "--force"], fifo))
    add(Case("files", "export -o /dev/null --force", ["db", "export", "--db", "{db}", "-o", "/dev/null", "--force"]))
    add(Case("files", "export -o a symlink --force", ["db", "export", "--db", "{db}", "-o", "{d}/link", "--force"],
             symlink_to_text, keep=("target.txt",)))
    add(Case("files", "export -o the database itself", ["db", "export", "--db", "{db}", "-o", "{db}", "--force"], keep=("g.db",)))
    add(Case("files", "export -o an existing file without --force", ["db", "export", "--db", "{db}", "-o", "{d}/t.txt"],
             text_file("t.txt", "keep\n"), keep=("t.txt",)))
    add(Case("files", "export -o a directory", ["db", "export", "--db", "{db}", "-o", "{d}"]))
    add(Case("files", "export -o a missing folder", ["db", "export", "--db", "{db}", "-o", "{d}/no/x.jsonl"]))
    add(Case("files", "compile -o a FIFO", ["compile", "resnet18", "--db", "{db}", "-o", "{d}/f"], fifo))
    add(Case("files", "dataset layers -o a FIFO", ["dataset", "layers", "-o", "{d}/f"], fifo))
    # models and names
    for model in ("{d}/missing.onnx", "{d}/t.onnx", "hf:no_such_type", "hf:vit:hidden_size=-1", "hf:vit:nope",
                  "hf:", "no_such_model", "{d}"):
        add(Case("models", f"tasks {model}", ["tasks", model], text_file("t.onnx", "not onnx\n")))
    add(Case("models", "a truncated ONNX file", ["tasks", "{d}/m.onnx"],
             lambda d: (d / "m.onnx").write_bytes((BASE / "tiny.onnx").read_bytes()[:200])))
    add(Case("models", "tune-op an unknown op", ["tune-op", "no_such_op", "--shape", "8,8,8", "--db", "{d}/n.db"]))
    add(Case("models", "tune-op an unknown tuner", ["tune-op", "matmul", "--shape", "8,8,8", "--tuner", "nope",
                                                   "--db", "{d}/n.db"]))
    add(Case("models", "tune an unknown scheduler", ["tune", "resnet18", "--scheduler", "nope", "--db", "{d}/n.db"]))
    for opt in ("plan_size=-1", "plan_size=nan", "plan_size=" + big, "epsilon=2", "epsilon=nan", "nope=1", "noequals",
                "explorer=nope", "cost_model=nope", "explorer.nope=1", "=1"):
        add(Case("options", f"--option {opt}", ["tune-op", "matmul", "--shape", "8,8,8", "--tuner", "autotvm",
                                                      "--option", opt, "--db", "{d}/n.db"]))
    # the rest
    add(Case("other", "predictor show of a schema without inputs", ["predictor", "show", "{d}/p"], predictor_without_inputs))
    add(Case("other", "dataset status of a corrupt shard", ["dataset", "status", "--db", "{d}/n.db", "--shards", "{d}/shards"],
             corrupt_shard))
    add(Case("other", "tune-op --rpc malformed", ["tune-op", *SMALL, "--rpc", "nohost", "--db", "{d}/n.db"]))
    add(Case("other", "tune-op --rpc to a closed port", ["tune-op", *SMALL, "--rpc", "127.0.0.1:1:key", "--db", "{d}/n.db"]))
    add(Case("other", "an unknown command", ["frobnicate"]))
    add(Case("other", "no command", []))
    return c


BASE = Path()


def make_base(base: Path) -> None:
    """A small good database (two trials of an 8x8x8 matmul), its export, a tiny ONNX model."""
    env = {**os.environ, "TVM_NUM_THREADS": "2"}
    subprocess.run([sys.executable, "-m", "tensortune.cli", "tune-op", *SMALL, "--db", str(base / "g.db")], check=True,
                   env=env, capture_output=True)
    with open(base / "good.jsonl", "w") as f:
        subprocess.run([sys.executable, "-m", "tensortune.cli", "db", "export", "--db", str(base / "g.db")], check=True,
                       stdout=f, env=env)
    import torch

    from tensortune.models.reference import export_onnx

    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
    export_onnx(m, [torch.randn(1, 3, 8, 8)], str(base / "tiny.onnx"))


def run_case(case: Case, work: Path) -> Outcome:
    d = Path(tempfile.mkdtemp(dir=work))
    shutil.copy(BASE / "g.db", d / "g.db")
    shutil.copy(BASE / "good.jsonl", d / "good.jsonl")
    mounted: list[Path] = []
    if case.needs_mount:
        if not _mount(d / "full", "size=200k") or not _mount(d / "ro", "size=4m"):
            return Outcome(case, "skipped", None, "mounting not allowed here", 0.0)
        mounted += [d / "full", d / "ro"]
        shutil.copy(d / "g.db", d / "ro" / "g.db")
        con = sqlite3.connect(d / "ro" / "g.db")
        con.execute("PRAGMA journal_mode=WAL")
        con.close()
        subprocess.run(["mount", "-o", "remount,ro", str(d / "ro")], check=True)
        with open(d / "full" / "filler", "wb", buffering=0) as f:  # fill the disk to the last block
            try:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
            except OSError:
                pass
    if case.setup is not None:
        case.setup(d)
    keep = {k: _sha(d / k) for k in case.keep}
    argv = [a.replace("{db}", str(d / "g.db")).replace("{d}", str(d)) for a in case.argv]
    env = {**os.environ, "TVM_NUM_THREADS": "2"}
    t0 = time.perf_counter()
    out = open("/dev/full", "w") if case.stdout == "full" else subprocess.PIPE
    try:
        p = subprocess.run([str(SCRIPT), *argv], cwd=d, env=env, stdout=out,
                           stderr=subprocess.PIPE, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        subprocess.run(["pkill", "-f", str(d)], capture_output=True)
        return Outcome(case, "hang", None, f"no end after {TIMEOUT_S:.0f} s", time.perf_counter() - t0)
    finally:
        if out is not subprocess.PIPE:
            out.close()
        for m in mounted:
            _umount(m)
    secs = time.perf_counter() - t0
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("WARNING", "[", "  warnings.warn"))]
    notes = [f"{k} changed" for k, v in keep.items() if _sha(d / k) != v]
    if case.extra_check is not None and (msg := case.extra_check(d)):
        notes.append(msg)
    first = lines[0] if lines else ""
    if "Traceback" in err:
        verdict = "traceback"
        first = next((ln for ln in reversed(err.splitlines()) if ln.strip()), "")
    elif notes:
        verdict = "changed"
    elif case.expect == "ok":
        verdict = "ok" if rc == 0 else "refused-but-should-work"
    elif rc == 0:
        verdict = "accepted"
    elif len(lines) == 1 and first.startswith("tensortune: error: ") or (rc == 2 and first.startswith("usage:")):
        verdict = "clean"
    else:
        verdict = "dirty"
    shutil.rmtree(d, ignore_errors=True)
    return Outcome(case, verdict, rc, first[:160], secs, notes)


GOOD = {"clean", "ok", "skipped"}


def report(outcomes: list[Outcome], cpu: str) -> str:
    kinds: dict[str, list[Outcome]] = {}
    for o in outcomes:
        kinds.setdefault(o.case.kind, []).append(o)
    rows = ["| kind | cases | refused cleanly | worked as they should | skipped | failures |", "|---|---|---|---|---|---|"]
    for k, os_ in kinds.items():
        rows.append(f"| {k} | {len(os_)} | {sum(o.verdict == 'clean' for o in os_)} | {sum(o.verdict == 'ok' for o in os_)} "
                    f"| {sum(o.verdict == 'skipped' for o in os_)} | {sum(o.verdict not in GOOD for o in os_)} |")
    rows.append(f"| **all** | {len(outcomes)} | {sum(o.verdict == 'clean' for o in outcomes)} | "
                f"{sum(o.verdict == 'ok' for o in outcomes)} | {sum(o.verdict == 'skipped' for o in outcomes)} | "
                f"{sum(o.verdict not in GOOD for o in outcomes)} |")
    detail = ["| kind | case | verdict | exit | first line | s |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        line = o.line.replace("|", "\\|")
        detail.append(f"| {o.case.kind} | {o.case.name.replace('|', '/')} | {o.verdict}{' (' + '; '.join(o.notes) + ')' if o.notes else ''} "
                      f"| {o.rc} | `{line}` | {o.seconds:.1f} |")
    return (f"# Bad inputs and faults, run again ({time.strftime('%Y-%m-%d')}, {cpu})\n\n"
            "`python -m bench run --study hostile`: each case is a `tensortune` process in a scratch folder; *refused cleanly* is "
            "a non-zero exit with one `tensortune: error:` line (or argparse's usage error) and no traceback; "
            "failures are tracebacks, hangs, accepted bad input, changed files.\n\n"
            + "\n".join(rows) + "\n\n" + "\n".join(detail) + "\n")


def parser() -> argparse.ArgumentParser:
    """The study's command line."""
    p = argparse.ArgumentParser(prog="python -m bench run --study hostile", description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default=None)
    p.add_argument("--only", default=None, help="run the cases whose name contains this")
    return p


def main(argv: list[str] | None = None) -> int:
    global BASE
    a = parser().parse_args(argv)
    from tensortune.target import cpu_model

    with tempfile.TemporaryDirectory(prefix="tensortune-hostile-") as tmp:
        BASE = Path(tmp) / "base"
        BASE.mkdir()
        make_base(BASE)
        todo = [c for c in cases() if a.only is None or a.only in c.name]
        outcomes = []
        for i, case in enumerate(todo, 1):
            try:
                o = run_case(case, Path(tmp))
            finally:  # no mount outlives its case
                for line in Path("/proc/mounts").read_text().splitlines():
                    if tmp in line.split()[1]:
                        _umount(Path(line.split()[1]))
            outcomes.append(o)
            print(f"[{i}/{len(todo)}] {o.verdict:10} {case.kind:9} {case.name[:60]:60} {o.line[:70]}", flush=True)
    text = report(outcomes, cpu_model())
    if a.output:
        Path(a.output).write_text(text)
    else:
        print(text)
    return 0 if all(o.verdict in GOOD for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
