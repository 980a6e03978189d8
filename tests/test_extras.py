"""A step that needs an optional library that is missing fails in one line naming the extra
that installs it (exit status 3); any other import failure is left alone."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tensortune.extras import EXTRAS, MissingExtra, missing_extra
from tensortune.registry import Registry, RegistryError


def test_the_message_names_the_extra() -> None:
    err = missing_extra(ModuleNotFoundError("No module named 'torch'", name="torch"), "tuner 'chameleon'")
    assert isinstance(err, MissingExtra) and err.exit_code == 3
    assert str(err) == "tuner 'chameleon' needs PyTorch, which is not installed: pip install 'tensortune[torch]'"
    sub = missing_extra(ModuleNotFoundError(name="onnxruntime.capi"), "tensortune bench")
    assert sub is not None and "tensortune[onnx]" in str(sub)
    assert missing_extra(ModuleNotFoundError(name="tvm"), "x") is None  # a core library: not ours to explain
    assert missing_extra(ValueError("x"), "x") is None
    assert {extra for extra, _ in EXTRAS.values()} == {"torch", "onnx", "trimmer", "ray", "hf", "openvino", "report"}


def test_a_registry_entry_whose_library_is_missing_names_the_extra(tmp_path, monkeypatch) -> None:
    (tmp_path / "needs_ray_mod.py").write_text("import ray\nX = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    reg: Registry[object] = Registry("tuner", {"raced": "needs_ray_mod:X"})
    with pytest.raises(MissingExtra, match=r"tuner 'raced' needs Ray, .*tensortune\[ray\]"):
        reg.get("raced")
    (tmp_path / "broken_mod.py").write_text("import no_such_library_anywhere\n")
    with pytest.raises(RegistryError) as e:
        Registry("tuner", {"b": "broken_mod:X"}).get("b")
    assert not isinstance(e.value, MissingExtra)


def test_the_command_line_says_which_extra_in_one_line() -> None:
    code = ("import sys; sys.modules['torch'] = None; from tensortune.cli import main; "
            "sys.exit(main(['tasks', 'resnet18']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip() == ("tensortune: error: tensortune tasks needs PyTorch, which is not installed: "
                                "pip install 'tensortune[torch]'")
