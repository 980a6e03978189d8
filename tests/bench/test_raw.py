"""Raw results live in git's history: the manifest names each file's commit and sha256, and
restore writes it back exactly (or refuses a blob that does not match)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import raw


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "bench/results/run/models/m-metaschedule").mkdir(parents=True)
    (root / "bench/results/run/models/m-autotvm.db").write_bytes(b"SQLite format 3\0" + bytes(range(256)) * 40)
    (root / "bench/results/run/models/m-metaschedule/database_tuning_record.json").write_text('{"a": 1}\n')
    (root / "bench/results/run/report.md").write_text("# summary\n")
    git = ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "results"], check=True)
    return root


def test_what_is_raw() -> None:
    assert raw.is_raw("bench/results/x/models/resnet18-autotvm.db")
    assert raw.is_raw("bench/results/x/models/resnet18-metaschedule/database_workload.json")
    assert raw.is_raw("bench/results/x/fasor/weights.pt")
    assert not raw.is_raw("bench/results/x/models.json") and not raw.is_raw("bench/results/x/report.md")


def test_record_then_restore_round_trips_and_refuses_a_wrong_sha(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    paths = ["bench/results/run/models/m-autotvm.db", "bench/results/run/models/m-metaschedule/database_tuning_record.json"]
    files = raw.record(paths, root=root)
    manifest = root / "RAW.json"
    raw.save(files, manifest)
    assert raw.load(manifest) == sorted(files, key=lambda f: f.path)
    original = [(root / p).read_bytes() for p in paths]
    for p in paths:
        (root / p).unlink()
    assert not any(f.present(root) for f in files)
    assert [raw.restore(f, root) for f in files] == [True, True]
    assert [(root / p).read_bytes() for p in paths] == original
    assert raw.restore(files[0], root) is False  # already present: nothing written
    (root / paths[0]).unlink()
    forged = raw.RawFile(files[0].path, files[0].commit, files[0].bytes, "0" * 64)
    with pytest.raises(raw.RestoreError, match="sha256"):
        raw.restore(forged, root)
    assert not (root / paths[0]).exists()  # a blob that does not match writes nothing


def test_no_raw_file_is_tracked_and_git_holds_each_one_the_manifest_names() -> None:
    """No raw file under bench/results is in the working tree's index, and each manifest entry's
    commit holds a blob of the recorded size (its sha256 is checked by restore)."""
    files = raw.load()
    if not (raw.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "-C", str(raw.ROOT), "ls-files", "bench/results"], check=True,
                             capture_output=True, text=True).stdout.split()
    assert [p for p in tracked if raw.is_raw(p)] == []
    assert len(files) >= 45 and not {f.path for f in files} & set(tracked)
    for f in files:
        size = subprocess.run(["git", "-C", str(raw.ROOT), "cat-file", "-s", f"{f.commit}:{f.path}"],
                              capture_output=True, text=True)
        if size.returncode:  # a shallow clone holds no history
            pytest.skip(f"git has no {f.commit[:12]} here (shallow clone)")
        assert int(size.stdout) == f.bytes, f.path


#: The bound on the working tree a clone checks out (the GPU machine takes at most 64 MiB).
TREE_LIMIT = 40 * 2**20


def test_the_working_tree_stays_under_40_mib() -> None:
    """Every tracked file together (datasets, the shipped weights and the results' summaries
    included) is under 40 MiB."""
    if not (raw.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "-C", str(raw.ROOT), "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode().split("\0")
    sizes = {p: (raw.ROOT / p).stat().st_size for p in tracked if p and (raw.ROOT / p).is_file()}
    largest = sorted(sizes, key=sizes.get, reverse=True)[:3]
    assert sum(sizes.values()) < TREE_LIMIT, [(p, sizes[p]) for p in largest]
