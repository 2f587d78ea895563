"""Finding the bytecode Python may serve for the files a fix changed: every ``.pyc`` of a
source beside it and under each ``pycache_prefix`` (optimized ones included), none of another
source's, and each directory listed once however many changed files lie in it (a drift series
changes thousands of files in a few hundred directories)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List

import pytest

from patchkit.engine.paths import Roots
from patchkit.engine.pycache import purge_prefixed, pyc_files


def touch(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return str(path)


def test_each_source_gets_its_own_pycs_and_no_other_sources(tmp_path: Path) -> None:
    tree, prefix = tmp_path / "tree", tmp_path / "prefix"
    for name in ("a.py", "ab.py", "a_b.py", "pkg/c.py", "notes.txt"):
        touch(tree / name)
    cache = tree / "__pycache__"
    mine = [touch(cache / "a.cpython-311.pyc"), touch(cache / "a.cpython-312.pyc"),
            touch(cache / "a.cpython-311.opt-1.pyc"), touch(cache / "a.cpython-311.opt-2.pyc")]
    theirs = touch(cache / "ab.cpython-311.pyc")
    touch(cache / "a.cpython-311.pyc.tmp")  # not bytecode Python reads
    touch(cache / "a.pyc")  # no interpreter tag: never served for a.py from __pycache__
    mirrored = touch(prefix / str(tree).lstrip("/") / "pkg" / "c.cpython-311.pyc")
    roots = Roots({"r": str(tree)})

    found = pyc_files(roots, [("r", "a.py"), ("r", "ab.py"), ("r", "a_b.py"), ("r", "pkg/c.py"),
                              ("r", "notes.txt")], [str(prefix)])

    assert found[("r", "a.py")] == sorted(mine)
    assert found[("r", "ab.py")] == [theirs]
    assert found[("r", "a_b.py")] == []
    assert found[("r", "pkg/c.py")] == [mirrored]
    assert ("r", "notes.txt") not in found  # not Python source


def test_a_directory_is_listed_once_for_all_its_files(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    tree, prefix = tmp_path / "tree", tmp_path / "prefix"
    files = [("r", "pkg/m%d.py" % i) for i in range(30)]
    for _root, rel in files:
        touch(tree / rel)
        touch(tree / "pkg" / "__pycache__" / (Path(rel).stem + ".cpython-311.pyc"))
    listed: List[str] = []
    real = os.scandir

    def spy(path: Any = ".") -> Any:
        if not isinstance(path, int):  # pytest's own clean-up lists by descriptor
            listed.append(os.fsdecode(path))
        return real(path)
    monkeypatch.setattr(os, "scandir", spy)

    found = pyc_files(Roots({"r": str(tree)}), files, [str(prefix)])

    assert all(len(pycs) == 1 for pycs in found.values()) and len(found) == 30
    assert sorted(listed) == sorted({str(tree / "pkg" / "__pycache__"),
                                     str(prefix / str(tree / "pkg").lstrip("/"))})


def test_purge_removes_every_prefixed_pyc_of_a_changed_file_and_only_those(tmp_path: Path) -> None:
    tree, prefix = tmp_path / "tree", tmp_path / "prefix"
    touch(tree / "x.py")
    touch(tree / "y.py")
    mirror = prefix / str(tree).lstrip("/")
    gone = [touch(mirror / "x.cpython-311.pyc"), touch(mirror / "x.cpython-311.opt-1.pyc")]
    kept = [touch(mirror / "y.cpython-311.pyc"), touch(tree / "__pycache__" / "x.cpython-311.pyc")]

    removed = purge_prefixed(Roots({"r": str(tree)}), [("r", "x.py")], [str(prefix)])

    assert sorted(removed) == sorted(gone)
    assert not any(os.path.exists(p) for p in gone)
    assert all(os.path.exists(p) for p in kept)  # the sibling __pycache__ is the transaction's
