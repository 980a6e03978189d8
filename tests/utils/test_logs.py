"""The command line's messages: one line each on stderr, whoever configured the root logger."""
from __future__ import annotations

import logging

import pytest

from tensortune.utils.logs import ROOT, log_to_stderr, warn_once


@pytest.fixture
def clean_loggers():
    """The root and library loggers as they were, after the test."""
    root, ours = logging.getLogger(), logging.getLogger(ROOT)
    saved = (list(root.handlers), root.level, list(ours.handlers), ours.level, ours.propagate)
    yield
    root.handlers[:], ours.handlers[:] = saved[0], saved[2]
    root.setLevel(saved[1])
    ours.setLevel(saved[3])
    ours.propagate = saved[4]


def test_a_warning_is_one_line_after_a_library_configured_the_root_logger(clean_loggers, capsys) -> None:
    logging.getLogger().handlers[:] = []
    log_to_stderr()
    log_to_stderr()  # idempotent: still one handler
    logging.info("a library logging through the root logger")  # configures a root stderr handler
    assert logging.getLogger().handlers
    warn_once(logging.getLogger(f"{ROOT}.tuners.fasor"), "the predictor was trained on another CPU")
    logging.getLogger(f"{ROOT}.measure").info("below the level: not shown")
    err = capsys.readouterr().err
    assert err == "tensortune: warning: the predictor was trained on another CPU\n"
