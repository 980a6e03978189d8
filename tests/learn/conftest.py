"""Fixtures of the learn tests."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learn_data import write_training  # noqa: E402


@pytest.fixture
def training_file(tmp_path) -> Path:
    return write_training(tmp_path / "train.npz")
