"""Build the C++ program in ``deploy_cpp/`` against TVM's runtime and run an exported model with it.

    python examples/tune_pytorch.py --trials 8          # writes smallnet.so
    python examples/deploy_cpp.py smallnet.so 1,3,32,32 # runs it from C++, checks it against Python

Needs a C++17 compiler (``g++``); the headers and ``libtvm_runtime.so`` come with the ``apache-tvm`` wheel.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def build(out: Path) -> Path:
    """Compile ``deploy_cpp/deploy.cc`` into ``out`` (linked to the runtime of the installed TVM)."""
    import tvm
    import tvm_ffi

    tvm_dir, ffi_dir = Path(tvm.__file__).parent, Path(tvm_ffi.__file__).parent
    includes = [tvm_dir / "include", ffi_dir / "include", tvm_dir / "3rdparty" / "dlpack" / "include",
                ffi_dir / "include" / "dlpack"]
    libs = [tvm_dir / "lib", ffi_dir / "lib"]
    cmd = ["g++", "-std=c++17", "-O2", str(HERE / "deploy_cpp" / "deploy.cc"), "-o", str(out),
           *[f"-I{p}" for p in includes if p.is_dir()], *[f"-L{p}" for p in libs],
           *[f"-Wl,-rpath,{p}" for p in libs], "-ltvm_runtime", "-ltvm_ffi", "-ldl", "-pthread"]
    subprocess.run(cmd, check=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("library", help="a model exported by tensortune (.so)")
    p.add_argument("shape", help="the input's shape, e.g. 1,3,32,32")
    a = p.parse_args()

    shape = [int(d) for d in a.shape.split(",")]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp) / "deploy")
        (Path(tmp) / "in.bin").write_bytes(x.tobytes())
        run = subprocess.run([str(exe), a.library, str(Path(tmp) / "in.bin"), a.shape, str(Path(tmp) / "out.bin")],
                             check=True, capture_output=True, text=True)
        print(run.stdout.strip())
        from_cpp = np.fromfile(Path(tmp) / "out.bin", dtype=np.float32)

    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(a.library), tvm.cpu())
    from_python = vm["main"](tvm.runtime.tensor(x))[0].numpy().ravel()
    np.testing.assert_allclose(from_cpp, from_python, rtol=1e-5, atol=1e-6)
    print(f"{a.library}: C++ and Python outputs match ({from_cpp.size} values)")


if __name__ == "__main__":
    sys.exit(main())
