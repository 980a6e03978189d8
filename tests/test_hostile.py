"""Hostile input and faults against the command line: each ends in one line on stderr and a non-zero
status, with no traceback, and no stored data lost or changed. Also: child interpreters run no code
from the working directory."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensortune.cli import main
from tensortune.database import Database

SMALL = ["tune-op", "matmul", "--shape", "8,8,8", "--tuner", "random", "--repeat", "3", "--min-repeat-ms", "5",
         "--trials", "2", "--no-progress"]


def cli(capfd, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capfd.readouterr()
    return rc, out, err


def refused(rc: int, err: str, words: str, code: int = 2) -> None:
    """One line on stderr that contains ``words``, no traceback, exit status ``code``."""
    assert rc == code, err
    assert err.count("\n") == 1 and err.startswith("tensortune: error: "), err
    assert words in err, err
    assert "Traceback" not in err


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def small_db(tmp_path_factory) -> Path:
    """A database with two trials of an 8x8x8 matmul."""
    db = tmp_path_factory.mktemp("hostile") / "g.db"
    assert main([*SMALL, "--db", str(db)]) == 0
    return db


@pytest.fixture
def db_copy(small_db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy.db"
    copy.write_bytes(small_db.read_bytes())
    return copy


# ---------------------------------------------------------------- sizes and numbers
@pytest.mark.parametrize("args, words", [
    (["tune-op", "matmul", "--shape", "99999999999999999999,32,32"], "out of range"),  # hung in divisor search
    (["tune-op", "matmul", "--shape", "2147483647,32,32"], "elements"),
    (["tune-op", "matmul", "--shape", "8,8,8", "--time-budget", "nan"], "positive finite"),
    (["tune-op", "matmul", "--shape", "8,8,8", "--time-budget", "inf"], "positive finite"),
    (["tune-op", "matmul", "--shape", "8,8,8", "--seed", "99999999999999999999999"], "out of range"),
    (["tune-op", "matmul", "--shape", "8,8,8", "--seed", "-1"], "out of range"),
    (["tune-op", "matmul", "--shape", "8,8,8", "--trials", str(2**70)], "too large"),
    (["bench", "resnet18", "--threads", "999"], "cores"),  # hung at exit joining 999 TVM threads
    (["tasks", "resnet18", "--input-shape", "x=-1"], "out of range"),
    (["tasks", "resnet18", "--input-shape", "x=1000000000,3,8,8"], "elements"),
    (["tasks", "resnet18", "--input-shape", "x=1,3,224,224"], "built-in"),
])
def test_out_of_range_numbers_are_refused_before_any_work(tmp_path: Path, capfd, args: list[str], words: str) -> None:
    db = tmp_path / "new.db"
    if args[0] == "tune-op" and "--trials" not in args:
        args = [*args, "--trials", "2"]
    rc, _, err = cli(capfd, *args, *(["--db", str(db), "--no-progress"] if args[0] == "tune-op" else []))
    refused(rc, err, words)
    assert not db.exists()


# ---------------------------------------------------------------- output paths
def test_special_files_and_links_are_never_replaced(db_copy: Path, tmp_path: Path, capfd) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it to look for an SQLite header blocked for ever
    real = tmp_path / "real.jsonl"
    real.write_text("keep\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    cases = [(fifo, "not a regular file"), (link, "symbolic link"), (loop, "cannot resolve")]
    if os.path.exists("/dev/null"):
        cases.append((Path("/dev/null"), "not a regular file"))
    for path, words in cases:
        for force in ([], ["--force"]):
            rc, _, err = cli(capfd, "db", "export", "--db", str(db_copy), "-o", str(path), *force)
            refused(rc, err, words)
    assert fifo.is_fifo() and link.is_symlink() and real.read_text() == "keep\n"
    assert Path("/dev/null").is_char_device() or not os.path.exists("/dev/null")


def test_a_fifo_as_database_is_refused(tmp_path: Path, capfd) -> None:
    fifo = tmp_path / "db"
    os.mkfifo(fifo)
    refused(*cli(capfd, "db", "best", "--db", str(fifo))[::2], "not a regular file")


# ---------------------------------------------------------------- damaged databases
def _corrupt_page(db: Path, page: int) -> None:
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    assert len(data) >= size * (page + 1)
    data[size * page:size * (page + 1)] = b"\x5a" * size
    db.write_bytes(bytes(data))


def test_a_corrupt_page_behind_an_intact_header_is_one_line(db_copy: Path, capfd) -> None:
    pages = db_copy.stat().st_size // int.from_bytes(db_copy.read_bytes()[16:18], "big")
    _corrupt_page(db_copy, pages - 1)
    before = digest(db_copy)
    for args in (["db", "best"], ["db", "export"], SMALL):
        rc, _, err = cli(capfd, *args, "--db", str(db_copy))
        refused(rc, err, "malformed")
    assert digest(db_copy) == before


def test_a_database_that_cannot_be_created_leaves_no_file(tmp_path: Path, capfd, monkeypatch) -> None:
    """A full disk made SQLite fail half-way through creating the schema; the empty file stayed."""
    import sqlite3

    def fail(self, con) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Database, "_create_schema", fail)
    db = tmp_path / "new.db"
    refused(*cli(capfd, *SMALL, "--db", str(db))[::2], "disk I/O error")
    assert sorted(os.listdir(tmp_path)) == []


def test_stdout_on_a_full_device_is_one_line(small_db: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    for args in (["db", "export", "--db", str(small_db)], ["db", "best", "--db", str(small_db)]):
        with open("/dev/full", "w") as full:
            p = subprocess.run([sys.executable, "-m", "tensortune.cli", *args], stdout=full, stderr=subprocess.PIPE,
                               text=True, timeout=120)
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and "No space left" in p.stderr, p.stderr


# ---------------------------------------------------------------- imports
def _records(db: Path, tmp_path: Path) -> tuple[dict, dict]:
    out = tmp_path / "all.jsonl"
    assert main(["db", "export", "--db", str(db), "-o", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    return lines[0], lines[1]


@pytest.mark.parametrize("field, value, words", [
    ("seed", 2**70, "out of range"),
    ("threads", 2**70, "out of range"),
    ("config_index", 2**70, "out of range"),
    ("target", "not json", "not the JSON text"),  # stored, it broke every later `best`
    ("timing", "[1]", "not the JSON text"),
    ("uid", "two words", "not an identifier"),
    ("uid", 7, "expected str"),
])
def test_an_import_with_a_bad_field_names_the_line_and_writes_nothing(small_db: Path, tmp_path: Path, capfd,
                                                                     field: str, value, words: str) -> None:
    task, trial = _records(small_db, tmp_path)
    capfd.readouterr()
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps(task) + "\n" + json.dumps({**trial, field: value, "timestamp": 1.0}) + "\n")
    db = tmp_path / "new.db"
    refused(*cli(capfd, "db", "import", "--db", str(db), str(src))[::2], f"line 2: field '{field}'")
    assert not db.exists()


@pytest.mark.parametrize("text, words", [
    ("[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
    ('{"kind": "trial", "error_msg": "' + "x" * (5 << 20) + '"}\n', "longer than"),
])
def test_an_import_of_nested_or_huge_lines_is_refused(tmp_path: Path, capfd, text: str, words: str) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text(text)
    refused(*cli(capfd, "db", "import", "--db", str(tmp_path / "new.db"), str(src))[::2], words)


def test_a_symlink_loop_as_database_is_one_line_for_every_command(small_db: Path, tmp_path: Path, capfd) -> None:
    """``tune-op`` and ``import`` raised RuntimeError from ``Path.resolve`` (found by bench.hostile)."""
    loop = tmp_path / "a.db"
    loop.symlink_to(tmp_path / "b.db")
    (tmp_path / "b.db").symlink_to(loop)
    task, trial = _records(small_db, tmp_path)
    capfd.readouterr()
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(task) + "\n")
    for args in ([*SMALL, "--db", str(loop)], ["db", "import", "--db", str(loop), str(src)], ["db", "best", "--db", str(loop)]):
        refused(*cli(capfd, *args)[::2], "a.db")


def test_an_import_refused_after_parsing_leaves_no_new_database(small_db: Path, tmp_path: Path, capfd) -> None:
    """A trial whose task is missing passes parsing and fails the check: the new file was left behind."""
    _, trial = _records(small_db, tmp_path)
    capfd.readouterr()
    src = tmp_path / "orphan.jsonl"
    src.write_text(json.dumps(trial) + "\n")
    db = tmp_path / "new.db"
    rc, _, err = cli(capfd, "db", "import", "--db", str(db), str(src))
    refused(rc, err, "")
    assert not db.exists() and not Path(str(db) + "-wal").exists()


def test_an_import_that_adds_nothing_is_one_line_and_changes_nothing(db_copy: Path, tmp_path: Path, capfd) -> None:
    """The database's own export (every trial already there), and a stored trial's uid with other
    costs (refused): status 1, one line saying why, the file untouched; ``--allow-empty`` accepts it."""
    task, trial = _records(db_copy, tmp_path)
    capfd.readouterr()
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({**trial, "costs": [1.0]}) + "\n")
    before = digest(db_copy)
    for src, words in ((tmp_path / "all.jsonl", "already stored: 1 tasks and"),
                       (other, "refused 1: 1 trials whose uid")):
        refused(*cli(capfd, "db", "import", "--db", str(db_copy), str(src))[::2], words, code=1)
        assert digest(db_copy) == before
    rc, out, _ = cli(capfd, "db", "import", "--db", str(db_copy), str(other), "--allow-empty")
    assert rc == 0 and out.startswith("imported 0 tasks and 0 trials; refused 1") and digest(db_copy) == before


# ---------------------------------------------------------------- fuzzed imports and options
# Generated inputs, derandomized (the same examples in every run) and kept out of the example
# database: each either works or is refused in one line, never a traceback.
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**80, 2**80) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)


@st.composite
def mutated_records(draw: st.DrawFn, task: dict, trial: dict) -> str:
    """A task line and a trial line with one to three fields set to any JSON, dropped or added, and
    maybe a line of junk."""
    recs = [dict(task), dict(trial)]
    for _ in range(draw(st.integers(1, 3))):
        rec = recs[draw(st.integers(0, 1))]
        op = draw(st.sampled_from(["set", "drop", "add"]))
        key = draw(st.text(max_size=8)) if op == "add" else draw(st.sampled_from(sorted(rec)))
        if op == "drop":
            rec.pop(key, None)
        else:
            rec[key] = draw(JSON_VALUES)
    lines = [json.dumps(r) for r in recs]
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, 2)), draw(st.text(max_size=40)).replace("\n", " "))
    return "\n".join(lines) + "\n"


def test_fuzzed_imports_are_stored_whole_or_refused_in_one_line(small_db: Path, tmp_path: Path, capfd) -> None:
    task, trial = _records(small_db, tmp_path)
    capfd.readouterr()
    n = iter(range(10**6))

    @FUZZ
    @given(mutated_records(task, trial))
    def check(text: str) -> None:
        k = next(n)
        src, db = tmp_path / f"f{k}.jsonl", tmp_path / f"f{k}.db"
        src.write_text(text)
        rc, _, err = cli(capfd, "db", "import", "--db", str(db), str(src))
        if rc:
            refused(rc, err, "")
            assert not db.exists()  # all or nothing
            return
        # what was stored reads back: best and export of it work
        assert cli(capfd, "db", "best", "--db", str(db))[0] == 0
        assert cli(capfd, "db", "export", "--db", str(db), "-o", str(tmp_path / f"f{k}.out"))[0] == 0

    check()


def _option_keys() -> list[str]:
    """Every tuner's option names and some parts' nested keys."""
    from tensortune.tuners import TUNERS
    from tensortune.utils.options import option_names

    keys = {k for name in TUNERS for k in option_names(TUNERS.get(name).Options)}
    return sorted(keys | {"explorer.n_chains", "explorer.steps", "cost_model.max_rounds", "selector.lam",
                          "search.population", "cold_filter.threshold"})


OPTION_VALUES = (st.sampled_from(["", "none", "nan", "inf", "-inf", "-1", "0", "1", "1e999", "9" * 30, "true", "x",
                                  "1,2", "0.5", "sa", "xgb", "random", "[1]", "=", "a=b"])
                 | st.integers(-2**70, 2**70).map(str) | st.floats().map(str) | st.text(max_size=8))


def test_fuzzed_tuner_options_make_a_tuner_or_are_refused_in_one_line() -> None:
    from tensortune.app.checks import tuner_options as _tuner_options
    from tensortune.errors import UsageError
    from tensortune.task import Task
    from tensortune.tuners import TUNERS, get_tuner

    task = Task.from_op("matmul", [8, 8, 8])
    item = (st.builds(lambda k, v: f"{k}={v}", st.sampled_from(_option_keys()) | st.text(max_size=6), OPTION_VALUES)
            | st.text(max_size=12))

    @FUZZ
    @given(st.sampled_from(sorted(TUNERS)), st.lists(item, max_size=3))
    def check(name: str, items: list[str]) -> None:
        try:
            values = _tuner_options(name, items)
        except UsageError as e:
            assert "\n" not in str(e)
            return
        try:  # the command line's next step: a ValueError here is its one-line UsageError
            get_tuner(name, task, options=values)
        except ValueError as e:
            assert "\n" not in str(e).strip(), str(e)

    check()


# ---------------------------------------------------------------- predictors and shards
def test_a_predictor_schema_without_inputs_is_one_error(tmp_path: Path) -> None:
    from tensortune.learn import PredictorError, load_predictor
    from tensortune.learn.predictor import FORMAT

    (tmp_path / "predictor.json").write_text(json.dumps({"format": FORMAT, "kind": "xgb", "op": "x"}))
    with pytest.raises(PredictorError, match="inputs"):
        load_predictor(tmp_path)


def test_a_corrupt_gzip_shard_is_one_error(tmp_path: Path) -> None:
    from tensortune.database import DatabaseError
    from tensortune.dataset.shards import read_shard

    data = bytearray(gzip.compress(b'{"kind": "task"}\n' * 200))
    data[20:40] = b"\xff" * 20  # a valid header, a broken deflate stream (zlib.error)
    shard = tmp_path / "t.jsonl.gz"
    shard.write_bytes(bytes(data))
    with pytest.raises(DatabaseError, match="not a gzip"):
        read_shard(shard)


def test_every_library_error_is_a_tensortune_error() -> None:
    from tensortune.cli import UsageError
    from tensortune.database import DatabaseError
    from tensortune.database.pretuned import PretunedError
    from tensortune.errors import TensortuneError
    from tensortune.learn import PredictorError
    from tensortune.measure import WorkerStartError
    from tensortune.measure.hardware import HardwareError
    from tensortune.models.importer import ModelError
    from tensortune.models.reference import ReferenceRunError
    from tensortune.registry import RegistryError
    from tensortune.task.ops import OpError
    from tensortune.templates import TemplateError
    from tensortune.utils.atomic import OutputError
    from tensortune.utils.options import OptionError

    for cls in (UsageError, DatabaseError, PretunedError, PredictorError, WorkerStartError, HardwareError, ModelError,
                ReferenceRunError, RegistryError, OpError, TemplateError, OutputError, OptionError):
        assert issubclass(cls, TensortuneError), cls


# ---------------------------------------------------------------- the working directory
PLANT = "open({marker!r}, 'a').write(__name__ + '\\n')\n"


def test_child_interpreters_run_no_code_from_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    """A ``tvm.py`` (and a ``runpy.py``, a ``json.py``) left where tensortune runs was executed by the
    worker processes, which started with ``python -c`` and the current directory first on sys.path."""
    from tensortune.measure.pool import Worker
    from tensortune.utils.child import module_command, python_command

    marker = tmp_path / "ran"
    plant = tmp_path / "cwd"
    plant.mkdir()
    for name in ("tvm", "runpy", "json", "tensortune"):
        (plant / f"{name}.py").write_text(PLANT.format(marker=str(marker)))
    monkeypatch.chdir(plant)
    assert subprocess.run(python_command("import json, runpy"), timeout=60).returncode == 0
    assert subprocess.run(module_command("json.tool", "--help"), capture_output=True, timeout=60).returncode == 0
    w = Worker()
    try:
        w.start()
        assert w.call(os.getcwd, (), timeout=60).value == str(plant)
    finally:
        w.close()
    assert not marker.exists(), marker.read_text()


# ---------------------------------------------------------------- two writers
@pytest.mark.slow  # end to end: two tune-op processes
def test_two_writers_on_one_task_share_its_budget_and_never_measure_a_config_twice(tmp_path: Path) -> None:
    """Two ``tune-op`` processes on one database and task each spent the whole budget (8 configs
    measured twice); with claims in the database they share it."""
    db = tmp_path / "shared.db"
    assert main([*SMALL[:-3], "--trials", "1", "--db", str(db), "--no-progress"]) == 0  # the file and task exist
    cmd = [sys.executable, "-m", "tensortune.cli", *SMALL[:-3], "--trials", "9", "--batch-size", "2", "--db", str(db),
           "--no-progress"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
             for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read()
    with Database(db, readonly=True) as d:
        search = [t for t in d.trials() if t.confirmation is None]
        claims = d._con.execute("SELECT count(*) FROM claims").fetchone()[0]
    indices = [t.config_index for t in search]
    assert len(indices) == len(set(indices)), sorted(indices)
    assert len(search) == 9 and claims == 0


def test_a_one_trial_budget_measures_one_config(tmp_path: Path, capfd) -> None:
    """``--trials 1`` asked the tuner for the default and 0 more, which random search took as "no
    limit": it measured the whole space (628 configs of an 8x8x8 matmul before it was stopped)."""
    from tensortune.task import Task
    from tensortune.tuners import TUNERS, get_tuner

    task = Task.from_op("matmul", (8, 8, 8))
    for name in TUNERS:
        assert len(get_tuner(name, task).ask(1)) == 1, name
    db = tmp_path / "one.db"
    rc, out, _ = cli(capfd, *SMALL[:-3], "--trials", "1", "--db", str(db), "--json", "--no-progress")
    assert rc == 0 and json.loads(out)["trials_measured"] == 1
    with Database(db, readonly=True) as d:
        assert len([t for t in d.trials() if t.confirmation is None]) == 1
