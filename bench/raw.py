"""Raw results kept in git's history, not in the working tree.

A results folder keeps its summaries (Markdown, JSON, CSV, PNG) in the tree. Its raw files
(SQLite databases, MetaSchedule record files, model weights) are tens of MB each, so they
live only in the commits that added them: ``bench/results/RAW.json`` names, per file, a commit
that holds it, its size and its sha256, and ``python -m bench restore`` writes any of them
back (checked against the sha256) so that a later run can resume from it or compile it.

    python -m bench restore                       (what the manifest holds, and what is present)
    python -m bench restore PATH [PATH ...]       (these files; a folder restores all under it)
    python -m bench restore --all
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "bench" / "results" / "RAW.json"
# what counts as raw in a results folder: by suffix, and MetaSchedule's record folders whole
RAW_SUFFIXES = (".db", ".pt", ".jsonl", ".npz", ".onnx", ".so", ".tar")
RAW_FOLDER_SUFFIX = "-metaschedule"


@dataclass(frozen=True)
class RawFile:
    """One raw file: its path in the repository, a commit that holds it, its size and sha256."""

    path: str
    commit: str
    bytes: int
    sha256: str

    def present(self, root: Path = ROOT) -> bool:
        """Whether the working tree holds this very file (same sha256)."""
        f = root / self.path
        return f.is_file() and f.stat().st_size == self.bytes and _sha256(f.read_bytes()) == self.sha256


def is_raw(path: str) -> bool:
    """Whether a path under ``bench/results`` is a raw file (kept out of the working tree)."""
    p = PurePosixPath(path)
    return p.suffix in RAW_SUFFIXES or any(part.endswith(RAW_FOLDER_SUFFIX) for part in p.parts[:-1])


def load(manifest: Path = MANIFEST) -> list[RawFile]:
    """The manifest's entries (an empty list when there is none)."""
    if not manifest.is_file():
        return []
    return [RawFile(**e) for e in json.loads(manifest.read_text())["files"]]


def save(files: list[RawFile], manifest: Path = MANIFEST) -> None:
    """Write the manifest, sorted by path."""
    doc = {"about": "raw results kept in git's history, not in the working tree: "
                    "`python -m bench restore PATH` writes one back (bench/raw.py)",
           "files": [f.__dict__ for f in sorted(files, key=lambda f: f.path)]}
    manifest.write_text(json.dumps(doc, indent=1) + "\n")


def _git(*args: str, root: Path = ROOT) -> bytes:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True).stdout


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record(paths: list[str], commit: str = "HEAD", root: Path = ROOT) -> list[RawFile]:
    """Manifest entries for ``paths`` as ``commit`` holds them (the commit is resolved to its id)."""
    rev = _git("rev-parse", commit, root=root).decode().strip()
    out = []
    for path in paths:
        data = _git("cat-file", "blob", f"{rev}:{path}", root=root)
        out.append(RawFile(path, rev, len(data), _sha256(data)))
    return out


class RestoreError(Exception):
    """A file the manifest does not name, or a blob that git cannot give back as recorded."""


def restore(f: RawFile, root: Path = ROOT) -> bool:
    """Write ``f`` back from its commit; False when the tree already holds it. A blob whose
    sha256 differs from the manifest's is refused (nothing is written)."""
    if f.present(root):
        return False
    try:
        data = _git("cat-file", "blob", f"{f.commit}:{f.path}", root=root)
    except subprocess.CalledProcessError as e:
        raise RestoreError(f"git has no {f.path} at {f.commit[:12]} (a shallow clone? `git fetch --unshallow`): "
                           f"{e.stderr.decode().strip()}") from None
    if _sha256(data) != f.sha256:
        raise RestoreError(f"{f.path} at {f.commit[:12]} does not match the manifest's sha256")
    target = root / f.path
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".restoring")
    tmp.write_bytes(data)
    tmp.replace(target)
    return True


def _under(files: list[RawFile], rel: str) -> list[RawFile]:
    """The entries at ``rel`` (a path relative to the repository) or under it, a folder."""
    rel = rel.rstrip("/")
    return [f for f in files if f.path == rel or f.path.startswith(rel + "/")]


def select(files: list[RawFile], wanted: list[str]) -> list[RawFile]:
    """The entries named by ``wanted``: a file's path, or a folder restores everything under it."""
    out: list[RawFile] = []
    for w in wanted:
        rel = w
        if Path(w).is_absolute():
            try:
                rel = Path(w).resolve().relative_to(ROOT).as_posix()
            except ValueError:
                raise RestoreError(f"{w}: not inside this repository ({ROOT})") from None
        hit = _under(files, PurePosixPath(rel).as_posix())
        if not hit:
            raise RestoreError(f"{w}: not in {MANIFEST.relative_to(ROOT)} (python -m bench restore lists it)")
        out += [f for f in hit if f not in out]
    return out


def restore_path(path: Path, root: Path = ROOT) -> bool:
    """Write back the manifest's files at or under ``path`` that the tree lacks (a resumed run's
    database or MetaSchedule folder); True when the manifest names any and all of them are now
    present. A file git cannot give back as recorded leaves it False."""
    try:
        rel = path.resolve().relative_to(root).as_posix()
    except ValueError:  # a results folder outside the repository has no manifest entries
        return False
    chosen = _under(load(), rel)
    try:
        for f in chosen:
            restore(f, root)
    except RestoreError:
        return False
    return bool(chosen)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``restore`` subcommand of ``python -m bench``."""
    r = sub.add_parser("restore", help="write raw results (databases, record files) back from git's history "
                                       "(bench/results/RAW.json)")
    r.add_argument("paths", nargs="*", help="files or folders of the manifest (none: list what it holds)")
    r.add_argument("--all", action="store_true", help="every file of the manifest")


def cmd_restore(a: argparse.Namespace) -> int:
    """List the manifest, or restore the files asked for; one line per problem, exit 1."""
    files = load()
    if not a.paths and not a.all:
        for f in files:
            print(f"{'present' if f.present() else 'absent ':8} {f.bytes / 1e6:8.1f} MB  {f.path}")
        print(f"{len(files)} raw files, {sum(f.bytes for f in files) / 1e6:.0f} MB in all; "
              "`python -m bench restore PATH` writes one back")
        return 0
    try:
        chosen = files if a.all else select(files, a.paths)
        for f in chosen:
            print(f"{'restored' if restore(f) else 'present '} {f.path}")
    except RestoreError as e:
        print(f"error: {e}")
        return 1
    return 0
