"""Every example in ``examples/`` runs, on a tiny budget, as a user would run it; and the README's
Python snippet is the one the first example shows."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run(tmp_path: Path, name: str, *args: str) -> str:
    env = {**os.environ, "TVM_NUM_THREADS": "2", "PYTHONWARNINGS": "ignore"}
    p = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    return p.stdout


def test_every_example_is_tested() -> None:
    tested = {"tune_pytorch.py", "tune_onnx.py", "tune_huggingface.py", "tune_operator.py", "read_database.py",
              "deploy_cpp.py",
              "compile_with_tvm.py"}  # by tests/test_metaschedule_records.py, beside tensortune compile
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


@pytest.mark.slow  # tuned, checked in the model, exported, built and run from C++ (about 30 s)
def test_tune_a_pytorch_module_export_and_deploy(tmp_path: Path) -> None:
    out = run(tmp_path, "tune_pytorch.py", "--trials", "2")
    assert "tasks tuned" in out and "output matches PyTorch" in out
    assert (tmp_path / "smallnet.so").is_file() and (tmp_path / "smallnet.so.json").is_file()
    rows = run(tmp_path, "read_database.py", "smallnet.db").splitlines()
    assert len(rows) >= 3 and all("best" in r and "ms of" in r for r in rows)
    # the exported library run from C++ with TVM's runtime alone, its output that of Python's
    out = run(tmp_path, "deploy_cpp.py", "smallnet.so", "1,3,32,32")
    assert "output shape 1x10" in out and "C++ and Python outputs match" in out


@pytest.mark.slow  # an ONNX file tuned, then benched beside ONNX Runtime and OpenVINO
def test_tune_an_onnx_file(tmp_path: Path) -> None:
    out = run(tmp_path, "tune_onnx.py", "--trials", "2")
    assert "small.onnx" in out and "tensortune tuned" in out and "onnxruntime" in out.lower()


@pytest.mark.slow  # a Hugging Face definition, tuned and profiled
def test_tune_a_hugging_face_model(tmp_path: Path) -> None:
    out = run(tmp_path, "tune_huggingface.py", "--trials", "1",
              "--spec", "hf:bert:num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64,"
                        "vocab_size=128,seq_len=16")
    assert "ms" in out


@pytest.mark.slow  # an operator tuned and its best confirmed, as a user would run the script
def test_tune_one_operator(tmp_path: Path) -> None:
    out = run(tmp_path, "tune_operator.py", "--shape", "64,64,64", "--trials", "4")
    assert "matmul" in out and "GFLOPS after 4 trials" in out and "best from:" in out


@pytest.mark.slow  # the README's snippet run as a user would: tuned, checked in the model, exported
def test_the_readme_python_snippet_tunes_a_torch_module(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    snippet = next(b for b in blocks if "tensortune.tune_model(" in b)
    assert len(snippet.strip().splitlines()) < 10  # "in under ten lines"
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    out = run(tmp_path, str(script))
    assert "ms after" in out and (tmp_path / "net.so").is_file() and (tmp_path / "net.db").is_file()
