"""Backups without copying bytes, and durability with an fsync of each file (docs/state.md).

A target file is only ever replaced (temp file + ``os.replace``) or unlinked, so a hard link of
it is a complete backup. These tests look at the inodes: the backup is the original inode
where linking is allowed and safe, a copy where it is not (another name outside the target,
a file system that refuses links), and rollback and crash recovery restore the same bytes
either way.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from patchkit import errors
from patchkit.engine import run

from .helpers import MOD, SCRIPT, file_record, fix, request, snapshot


def go(op: str, root: Path, fixes: List[Dict[str, Any]]) -> Dict[str, Any]:
    res = run(request(op, {"sglang": root}, fixes))
    assert res["ok"], res["error"]
    return res


def edit(root: Path, name: str = "a", old: str = "return x + 7\n", new: str = "return x * 7\n",
         path: str = MOD) -> Dict[str, Any]:
    before = (root / path).read_text()
    return fix(name, [file_record(path, before, before.replace(old, new))])


def backup_of(root: Path, name: str, path: str = MOD) -> Path:
    """The backup ``state.json`` names for ``path`` of fix ``name``."""
    state = json.loads((root / ".patchkit/state.json").read_text())
    rec = next(f for fx in state["fixes"] if fx["name"] == name for f in fx["files"]
               if f["path"] == path)
    return root / ".patchkit" / rec["backup"]


def test_backup_is_the_original_inode_and_rollback_restores_it(checkout: Path) -> None:
    original = (checkout / MOD).read_bytes()
    ino = (checkout / MOD).stat().st_ino
    f = edit(checkout)
    go("apply", checkout, [f])
    backup = backup_of(checkout, "a")
    assert backup.stat().st_ino == ino  # a link, not a copy
    assert backup.read_bytes() == original
    assert (checkout / MOD).stat().st_ino != ino  # the target got a new inode...
    assert backup.stat().st_nlink == 1  # ...and the transaction's own link is gone
    go("rollback", checkout, [f])
    assert (checkout / MOD).read_bytes() == original
    assert not backup.exists()


def test_links_refused_fall_back_to_copies(checkout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_link(*_args: Any, **_kw: Any) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    original = (checkout / MOD).read_bytes()
    ino = (checkout / MOD).stat().st_ino
    f = edit(checkout)
    go("apply", checkout, [f])
    backup = backup_of(checkout, "a")
    assert backup.stat().st_ino != ino and backup.read_bytes() == original
    go("rollback", checkout, [f])
    assert (checkout / MOD).read_bytes() == original


def test_a_target_file_linked_elsewhere_is_copied(checkout: Path, tmp_path: Path) -> None:
    """Another name of the file could be written in place, and with it a linked backup."""
    original = (checkout / MOD).read_bytes()
    other = tmp_path / "other-name.py"
    os.link(checkout / MOD, other)
    f = edit(checkout)
    go("apply", checkout, [f])
    backup = backup_of(checkout, "a")
    assert backup.stat().st_ino != other.stat().st_ino
    with open(other, "r+b") as fh:  # written in place through the other name
        fh.write(b"# clobbered\n")
    assert backup.read_bytes() == original
    go("rollback", checkout, [f])
    assert (checkout / MOD).read_bytes() == original


def test_each_fix_keeps_its_own_before_bytes(checkout: Path) -> None:
    """Two fixes of one transaction change one file: the first's backup is the original inode,
    the second's holds the first's result (which never existed on disk before)."""
    original = (checkout / MOD).read_text()
    ino = (checkout / MOD).stat().st_ino
    middle = original.replace("return x + 7\n", "return x * 7\n")
    a = fix("a", [file_record(MOD, original, middle)])
    b = fix("b", [file_record(MOD, middle, middle.replace("return x + 33\n", "return 33\n"))])
    go("apply", checkout, [a, b])
    assert backup_of(checkout, "a").stat().st_ino == ino
    assert backup_of(checkout, "a").read_text() == original
    assert backup_of(checkout, "b").read_text() == middle
    go("rollback", checkout, [b, a])
    assert (checkout / MOD).read_text() == original


def test_backup_taken_only_when_the_file_still_holds_the_planned_bytes(checkout: Path) -> None:
    """A backup links only a file holding exactly the planned bytes; a file holding other
    bytes was changed since the plan read it: the transaction stops (it never keeps planned
    bytes the file no longer has, which a rollback would later restore over the change)."""
    from patchkit.engine.paths import Roots
    from patchkit.engine.rootfs import RootDirs
    from patchkit.engine.txn import _keep

    dest = checkout.parent / "keep" / "mod.py"
    with RootDirs(Roots({"sglang": str(checkout)})) as dirs:
        _keep(dirs, "sglang", MOD, str(dest), (checkout / MOD).read_bytes())
        assert dest.stat().st_ino == (checkout / MOD).stat().st_ino
        dest.unlink()
        with pytest.raises(errors.ConcurrentChange, match="changed since patchkit read it"):
            _keep(dirs, "sglang", MOD, str(dest), b"other bytes\n")
    assert not dest.exists()


def test_crash_after_journal_restores_from_a_linked_backup(checkout: Path) -> None:
    """Killed after the first file was replaced: the next run puts the original back from the
    linked backup, byte for byte."""
    tree = snapshot(checkout)
    ino = (checkout / MOD).stat().st_ino
    f = edit(checkout)
    script = (checkout / SCRIPT).read_text()
    f["files"].append(file_record(SCRIPT, script, script.replace("launching", "go"),
                                  patch="0002-b.patch"))
    req = request("apply", {"sglang": checkout}, [f])
    proc = subprocess.run([sys.executable, "-c", "import sys, json; from patchkit.engine import run; "
                           "run(json.loads(sys.stdin.read()))"], input=json.dumps(req), text=True,
                          env=dict(os.environ, PATCHKIT_FAULT="rename:2"), capture_output=True)
    assert proc.returncode != 0
    journal = json.loads((checkout / ".patchkit/journal.json").read_text())
    assert "x * 7" in (checkout / MOD).read_text()  # the first file was replaced
    assert journal["files"][0]["path"] == MOD
    linked = checkout / ".patchkit" / journal["files"][0]["backup"]
    # one name for the transaction's original and the fix's backup: a link of the old inode
    assert journal["files"][0]["backup"].split("/")[2:] == ["fixes", f["name"], "0"]
    assert linked.stat().st_ino == ino and linked.stat().st_nlink == 1
    res = go("status", checkout, [f])
    assert res["recovered"][0]["outcome"] == "rolled-back"
    assert {k: v[:3] for k, v in snapshot(checkout).items()} == {k: v[:3] for k, v in tree.items()}


def test_durability_fsyncs_every_backup_and_written_file(checkout: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every backup and written file is fsynced before the transaction goes on."""
    fsynced: List[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        fsynced.append(os.readlink("/proc/self/fd/%d" % fd))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    g = edit(checkout, "g", "return x + 9\n", "return x - 9\n")
    go("apply", checkout, [g])
    assert str(checkout / MOD) in fsynced
    assert any("/.patchkit/txn/" in p and "/fixes/" in p for p in fsynced)  # the backup


def test_per_fix_backups_are_flat_one_directory_per_fix(checkout: Path) -> None:
    """No directory tree mirroring each file's path: one directory per fix, a file per backup."""
    other = SCRIPT
    before = (checkout / other).read_text()
    f = edit(checkout)
    f["files"].append(file_record(other, before, before + "echo patched\n"))
    go("apply", checkout, [f])
    top = checkout / ".patchkit/backups/a"
    assert sorted(p.name for p in top.iterdir()) == ["0", "1"]
    assert all(p.is_file() for p in top.iterdir())
    assert backup_of(checkout, "a", other).read_text() == before


def test_a_state_of_the_mirrored_layout_still_rolls_back(checkout: Path) -> None:
    """A state written by an earlier engine names backups/<fix>/files/<root>/<path>: its
    recorded path is what rollback reads."""
    original = (checkout / MOD).read_bytes()
    f = edit(checkout)
    go("apply", checkout, [f])
    meta = checkout / ".patchkit"
    state = json.loads((meta / "state.json").read_text())
    rec = state["fixes"][0]["files"][0]
    old = "backups/a/files/sglang/" + MOD
    (meta / old).parent.mkdir(parents=True)
    os.replace(meta / rec["backup"], meta / old)
    rec["backup"] = old
    (meta / "state.json").write_text(json.dumps(state))
    go("rollback", checkout, [f])
    assert (checkout / MOD).read_bytes() == original
    assert not (meta / "backups/a").exists()
