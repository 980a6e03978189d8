"""bench.studies: every study is a registered spec run by ``python -m bench run --study NAME``,
in this process, with its invocation recorded in its results folder's meta.json."""
from __future__ import annotations

import argparse
import importlib
import json

import pytest

from bench import studies
from bench.suite.cli import main as bench_main
from bench.suite.store import RunDir

from test_versus import _summaries


@pytest.mark.parametrize("name", list(studies.STUDIES))
def test_every_study_has_a_parser_and_a_main(name) -> None:
    module = importlib.import_module(studies.STUDIES[name].module)
    assert isinstance(module.parser(), argparse.ArgumentParser) and callable(module.main)


def test_a_study_runs_through_the_harness_and_its_invocation_is_kept(tmp_path, capsys) -> None:
    run = RunDir(tmp_path / "r").create()
    for w, s in _summaries().items():
        run.add_ops(w, [], s)
    assert bench_main(["run", "--study", "versus", str(run.path), "--tuner", "oneshot"]) == 0
    assert (run.path / "versus-oneshot-autotvm.md").is_file()
    assert bench_main(["run", "--study", "versus", str(run.path), "--tuner", "chameleon"]) == 1
    kept = json.loads((run.path / "meta.json").read_text())["studies"]
    assert [(k["study"], k["exit"]) for k in kept] == [("versus", 0), ("versus", 1)]
    assert kept[0]["argv"] == [str(run.path), "--tuner", "oneshot"] and kept[0]["machine"]["cpu_model"]
    assert "commit" in kept[0] and kept[0]["wall_s"] >= 0


def test_an_unknown_study_or_bad_arguments_are_one_line(capsys) -> None:
    with pytest.raises(SystemExit, match="unknown study 'nope'; known: chameleon"):
        bench_main(["run", "--study", "nope"])
    with pytest.raises(SystemExit) as e:
        bench_main(["run", "--study", "versus", "--no-such-flag"])
    assert e.value.code == 2
    assert bench_main(["studies"]) == 0 and "fasor-ablation" in capsys.readouterr().out
