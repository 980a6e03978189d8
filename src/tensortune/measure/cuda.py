"""CUDA candidates built here: the library TVM exports (the host code that launches the kernels
and the kernels' CUDA source, which TVM's runtime compiles when a GPU process loads the library)
and beside it the kernels compiled by nvcc for the device's architecture: a kernel nvcc or ptxas
rejects is a compile error here, before anything travels to a GPU, and the fatbin is what a GPU
process without a compiler can load."""
from __future__ import annotations

from typing import Any

from ..target import make_target

#: The suffix of the compiled kernels written beside a candidate's library (``x.so.fatbin``).
FATBIN_SUFFIX = ".fatbin"


def device_source(executable: Any) -> str:
    """The CUDA source of an executable's kernels (``tvm.compile``'s result for a CUDA target)."""
    cuda, todo = [], [getattr(executable, "mod", executable)]
    while todo:  # a model's VM executable imports the host module, which imports the kernels
        m = todo.pop()
        if m.kind == "cuda":
            cuda.append(m)
        todo.extend(m.imports)
    if not cuda:
        raise RuntimeError("the built module holds no CUDA kernels")
    return "\n".join(m.inspect_source() for m in cuda)


def compile_fatbin(source: str, target_json: dict[str, Any]) -> bytes:
    """The fatbin nvcc makes of ``source`` for the target's ``arch`` (a RuntimeError carrying
    nvcc's message when it fails)."""
    import shutil

    from tvm.support import nvcc

    if shutil.which("nvcc") is None:
        raise RuntimeError("CUDA kernels are compiled by nvcc, which is not on PATH here (install the CUDA toolkit)")
    with make_target(target_json):
        try:
            return bytes(nvcc.compile_cuda(source, target_format="fatbin", compiler="nvcc"))
        except RuntimeError as e:  # TVM's message is the whole source, then nvcc's output
            raise RuntimeError("nvcc: " + str(e).rpartition("Compilation error:\n")[2].strip()[-1500:]) from None


def write_fatbin(executable: Any, path: str, target_json: dict[str, Any]) -> str:
    """Compile the executable's kernels (:func:`compile_fatbin`) and write them, atomically, to
    ``path`` + :data:`FATBIN_SUFFIX` (nothing is written when nvcc fails); returns that path."""
    from ..utils.atomic import atomic_path

    binary = compile_fatbin(device_source(executable), target_json)
    with atomic_path(path + FATBIN_SUFFIX, suffix=FATBIN_SUFFIX) as tmp:
        tmp.write_bytes(binary)
    return path + FATBIN_SUFFIX


def export_cuda(executable: Any, path: str, target_json: dict[str, Any]) -> str:
    """Write the candidate's compiled kernels (:func:`write_fatbin`), then its library to ``path``;
    returns the fatbin's path."""
    from ..target import cross_linker

    fatbin = write_fatbin(executable, path, target_json)
    executable.export_library(path, fcompile=cross_linker(target_json))
    return fatbin
