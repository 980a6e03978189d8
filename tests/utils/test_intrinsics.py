"""Only the host CPU's tensor intrinsics are registered, and MetaSchedule still finds what it needs."""
from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from tensortune.utils.intrinsics import HOST_MODULES

pytestmark = pytest.mark.skipif(HOST_MODULES.get(platform.machine().lower()) != "x86",
                                reason="the check names x86 intrinsics")

SCRIPT = r"""
import sys
from tensortune.utils.intrinsics import register_host_intrinsics
assert register_host_intrinsics() == "x86"
assert register_host_intrinsics() == "x86"  # a second call is harmless
assert "tvm.s_tir.tensor_intrin.cuda" not in sys.modules
import tvm
from tvm.s_tir import TensorIntrin
assert TensorIntrin.get("dot_16x4_vnni") is not None
import tvm.s_tir.tensor_intrin  # what MetaSchedule's TuneContext does: nothing more is imported
assert "tvm.s_tir.tensor_intrin.cuda" not in sys.modules
assert tvm.s_tir.tensor_intrin.x86.VNNI_DOT_16x4_INTRIN == "dot_16x4_vnni"
from tvm.s_tir import meta_schedule as ms
ctx = ms.TuneContext(target=tvm.target.Target({"kind": "llvm", "num-cores": 1}), task_name="t", num_threads=1)
assert "tvm.s_tir.tensor_intrin.cuda" not in sys.modules
print("ok")
"""


def test_only_the_host_intrinsics_are_registered_and_metaschedule_starts() -> None:
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
