"""The built wheel, installed into fresh virtual environments on two Pythons (this one and another
of 3.10-3.13), core only: it tunes an operator, finds its package data, pulls in no PyTorch or
CUDA library, and names the extra a missing library comes from."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
CORE_LIMIT_MB = 900  # TVM's 310 MB, SciPy, scikit-learn, NumPy, XGBoost (CPU), the package's 38 MB

pytestmark = pytest.mark.slow
#: The fresh venvs see only what they installed: no PYTHONPATH of the caller (a source tree on it
#: would pass for an installed tensortune, and pip would install nothing).
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _runs(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "import venv, ensurepip"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def second_python() -> str | None:
    """An interpreter of 3.10-3.13 other than this one: on PATH, else one pyenv installed."""
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for v in ("3.12", "3.13", "3.10", "3.11"):
        if v == ours:
            continue
        found = [p for p in [f"/usr/bin/python{v}", *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{v}*/bin/python{v}")))]
                 if os.path.exists(p)]
        for p in found:
            if _runs(p):
                return p
    return None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(out)],
                   check=True, capture_output=True, timeout=600)
    (whl,) = out.glob("tensortune-*.whl")
    return whl


def _interpreters() -> list[str]:
    base = getattr(sys, "_base_executable", sys.executable)
    second = second_python()
    return [base] + ([second] if second else [])


def _install(python: str, wheel: Path, where: Path) -> tuple[str, Path, subprocess.CompletedProcess]:
    """A fresh venv of ``python`` at ``where`` with the wheel installed core only: (python, venv, pip's run)."""
    venv = where / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300, env=CLEAN_ENV)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), str(wheel)],
                         capture_output=True, text=True, timeout=1200, env=CLEAN_ENV)
    return python, venv, pip


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Path, subprocess.CompletedProcess]]:
    """The wheel installed into a fresh venv of each interpreter, the installs side by side (pip
    waits on the disk about as much as it computes)."""
    pythons = _interpreters()
    with ThreadPoolExecutor(len(pythons)) as pool:
        return list(pool.map(lambda py: _install(py, wheel, tmp_path_factory.mktemp("install")), pythons))


@pytest.mark.parametrize("which", [0, 1], ids=["this-python", "second-python"])
def test_the_wheel_installs_core_only_and_tunes_an_operator(which: int, installed, tmp_path: Path) -> None:
    if which >= len(installed):
        pytest.skip("no second Python of 3.10-3.13 on this machine (PATH or pyenv)")
    python, venv, pip = installed[which]
    py = venv / "bin" / "python"
    assert pip.returncode == 0, pip.stderr[-2000:]
    exe = venv / "bin" / "tensortune"
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120, env=CLEAN_ENV)
    want = subprocess.run([python, "-c", "import platform; print(platform.python_version())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert version.returncode == 0 and version.stdout.startswith("tensortune ") and f"Python {want}" in version.stdout

    site = next((venv / "lib").glob("python3.*/site-packages"))
    names = {p.name.lower() for p in site.iterdir()}
    assert "torch" not in names and not any(n.startswith("nvidia") for n in names), sorted(names)
    size_mb = sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) / 1e6
    assert size_mb < CORE_LIMIT_MB, f"core install is {size_mb:.0f} MB"

    env = {**CLEAN_ENV, "TVM_NUM_THREADS": "1"}
    work = tmp_path / "work"  # not the checkout: the installed package alone
    work.mkdir()
    tune = subprocess.run([str(exe), "tune-op", "matmul", "--shape", "16,16,16", "--trials", "4", "--db", "t.db",
                           "--no-progress"], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert tune.returncode == 0, tune.stderr[-2000:]
    assert "best config:" in tune.stdout
    data = subprocess.run([str(py), "-c", "from tensortune.select.cold import shipped_datasets; "
                           "from tensortune.costmodel.pretrained import SHIPPED; "
                           "print(len(shipped_datasets()), len(list(SHIPPED.glob('*/weights.pt'))))"],
                          cwd=work, capture_output=True, text=True, timeout=300, env=CLEAN_ENV)
    assert data.stdout.split() == ["3", "4"], data.stderr[-1000:]  # Trimmer's datasets, One-Shot's predictors
    missing = subprocess.run([str(exe), "tasks", "resnet18"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 3 and "pip install 'tensortune[torch]'" in missing.stderr, missing.stderr[-1000:]
    assert "Traceback" not in missing.stderr
