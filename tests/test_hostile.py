"""Hostile input, from a shipped patch file to the target's files: each case is a clear patchkit
error or a correct apply (and exact rollback), never a write outside the roots, never a partial
state.

Every case runs the whole path a user runs (catalog -> series parser -> plan -> engine) against
a checkout that sits next to an ``outside`` directory; ``outside`` and (for a refusal) the root
are compared byte for byte, ``.patchkit`` included, before and after.
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

import pytest

from patchkit import api, errors
from patchkit.catalog import Catalog
from patchkit.catalog.series import diff_files
from patchkit.targets import LocalTarget
from tests.engine.helpers import make_checkout

PY = sys.executable
MOD = "python/sglang/srt/mod.py"
MANIFEST = """format = 1
name = "h"
version = 1
title = "hostile"
status = "active"
rationale = "test"

[upstream]
base_release = "0.5.21"

[[patches]]
file = "0001-h.patch"
root = "sglang"
"""


def digest(top: Path) -> Dict[str, Tuple[str, ...]]:
    out: Dict[str, Tuple[str, ...]] = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, top)] = ("link", os.readlink(p)) if os.path.islink(p) else ("dir",)
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                out[os.path.relpath(p, top)] = ("link", os.readlink(p))
            else:
                data = Path(p).read_bytes()
                out[os.path.relpath(p, top)] = ("file", oct(os.stat(p).st_mode),
                                                hashlib.sha256(data).hexdigest())
    return out


class Case:
    """A checkout ``base/sglang``, a directory ``base/outside``, a catalog with fix ``h``."""

    def __init__(self, base: Path, root: Optional[Path] = None) -> None:
        self.base = base
        self.root = root or make_checkout(base, git_repo=False)
        self.outside = base / "outside"
        self.outside.mkdir(exist_ok=True)
        (self.outside / "victim.py").write_bytes(b"precious = 1\n")
        self.catalog_dir = base / "catalog"
        (self.catalog_dir / "manifests").mkdir(parents=True)
        (self.catalog_dir / "patches" / "h").mkdir(parents=True)
        (self.catalog_dir / "manifests" / "h.toml").write_text(MANIFEST)
        self.target = LocalTarget({"sglang": str(self.root)}, PY, "local")

    def patch(self, data: bytes) -> None:
        (self.catalog_dir / "patches" / "h" / "0001-h.patch").write_bytes(data)

    def apply(self):  # noqa: ANN201
        return api.apply(Catalog(self.catalog_dir), self.target, ["h"])

    def rollback(self):  # noqa: ANN201
        return api.rollback(Catalog(self.catalog_dir), self.target, ["h"])

    def refused(self, kind: type, *said: str) -> errors.PatchkitError:
        """The apply fails with ``kind`` and changes nothing, inside or outside the root."""
        root_before, outside_before = digest(self.root), digest(self.outside)
        with pytest.raises(kind) as info:
            self.apply()
        for text in said:
            assert text in str(info.value)
        assert digest(self.root) == root_before  # no .patchkit either: nothing was written
        assert digest(self.outside) == outside_before
        return info.value

    def round_trip(self, path: str, old: Optional[bytes], new: Optional[bytes]) -> None:
        """The patch of old -> new applies to the exact new bytes and rolls back to old."""
        self.patch(diff_files(old, new, path).encode("utf-8", "surrogateescape"))
        before = {k: v for k, v in digest(self.root).items() if not k.startswith(".patchkit")}
        outside = digest(self.outside)
        self.apply()
        target = self.root / path
        assert (target.read_bytes() if target.exists() else None) == new
        self.rollback()
        assert {k: v for k, v in digest(self.root).items() if not k.startswith(".patchkit")} == before
        assert digest(self.outside) == outside


@pytest.fixture
def case(tmp_path: Path) -> Case:
    return Case(tmp_path)


def unified(path_a: str, path_b: str, body: str) -> bytes:
    return ("--- %s\n+++ %s\n%s" % (path_a, path_b, body)).encode()


# -- paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../outside/victim.py", "python/../../outside/victim.py"])
def test_path_traversal_in_a_patch_header_is_refused(case: Case, name: str) -> None:
    case.patch(unified("a/" + name, "b/" + name, "@@ -1 +1 @@\n-precious = 1\n+precious = 0\n"))
    err = case.refused(errors.UnsafePathError, "..")
    assert "0001-h.patch" in str(err) or name in str(err)
    assert "Fix the file's path in that patch's header" in str(err), str(err)


def test_absolute_path_in_a_patch_header_is_refused(case: Case) -> None:
    victim = str(case.outside / "victim.py")
    case.patch(unified(victim, victim, "@@ -1 +1 @@\n-precious = 1\n+precious = 0\n"))
    case.refused(errors.PatchkitError)


def test_symlinked_file_pointing_outside_is_refused(case: Case) -> None:
    link = case.root / "python/sglang/srt/link.py"
    link.symlink_to(case.outside / "victim.py")
    case.patch(diff_files(b"precious = 1\n", b"precious = 0\n", "python/sglang/srt/link.py").encode())
    err = case.refused(errors.UnsafePathError, "outside root", "symlink")
    # what to do is the target's symlink, not the patch's path (it said to fix the header)
    assert "a symlink in the target takes it out of root" in str(err), str(err)
    assert "patch's header" not in str(err), str(err)


def test_symlinked_directory_pointing_outside_is_refused_for_a_new_file(case: Case) -> None:
    (case.root / "python/sglang/ext").symlink_to(case.outside, target_is_directory=True)
    case.patch(diff_files(None, b"planted = 1\n", "python/sglang/ext/planted.py").encode())
    case.refused(errors.UnsafePathError, "outside root")
    assert not (case.outside / "planted.py").exists()


# -- bytes -------------------------------------------------------------------------------------


def test_crlf_lines_apply_and_roll_back_exactly(case: Case) -> None:
    old = b"".join(b"line %d\r\n" % i for i in range(20))
    (case.root / "scripts/crlf.txt").write_bytes(old)
    case.round_trip("scripts/crlf.txt", old, old.replace(b"line 10\r\n", b"line ten\r\nmore\r\n"))


def test_mixed_line_endings_are_kept_byte_for_byte(case: Case) -> None:
    old = b"a\r\nb\nc\r\nd\n"
    (case.root / "scripts/mixed.txt").write_bytes(old)
    case.round_trip("scripts/mixed.txt", old, b"a\r\nB\nc\r\nd\n")


@pytest.mark.parametrize(("old", "new"), [(b"x = 1\ny = 2", b"x = 1\ny = 3"),  # neither ends in \n
                                          (b"x = 1\ny = 2", b"x = 1\ny = 2\n"),  # newline added
                                          (b"x = 1\ny = 2\n", b"x = 1\ny = 2")])  # newline removed
def test_no_newline_at_end_of_file(case: Case, old: bytes, new: bytes) -> None:
    (case.root / "scripts/eof.py").write_bytes(old)
    case.round_trip("scripts/eof.py", old, new)
    assert b"\\ No newline at end of file" in (case.catalog_dir / "patches/h/0001-h.patch").read_bytes()


def test_non_utf8_bytes_apply_and_roll_back_exactly(case: Case) -> None:
    old = b"# caf\xe9 latin-1\nvalue = '\xff\xfe\x00'\nend\n"
    (case.root / "scripts/latin1.txt").write_bytes(old)
    case.round_trip("scripts/latin1.txt", old, old.replace(b"value = '\xff", b"value = '\xfe\x80"))


def test_binary_patch_is_a_clear_error(case: Case) -> None:
    case.patch(b"diff --git a/python/sglang/blob.bin b/python/sglang/blob.bin\n"
               b"index 1111111..2222222 100644\n"
               b"GIT binary patch\nliteral 4\nLcmZ?wVqgFO0ssI2\n\nliteral 0\nHcmV?d00001\n\n")
    case.refused(errors.PatchFormatError, "0001-h.patch", "binary")


def test_binary_files_differ_line_is_a_clear_error(case: Case) -> None:
    case.patch(b"diff --git a/python/sglang/blob.bin b/python/sglang/blob.bin\n"
               b"index 1111111..2222222 100644\n"
               b"Binary files a/python/sglang/blob.bin and b/python/sglang/blob.bin differ\n")
    case.refused(errors.PatchFormatError, "0001-h.patch", "binary")


def test_huge_file_applies_and_rolls_back_exactly(case: Case) -> None:
    old = b"".join(b"%08d %s\n" % (i, b"x" * 90) for i in range(100_000))  # 10 MB, distinct lines
    (case.root / "scripts/huge.txt").write_bytes(old)
    new = old[:-100] + b"the last line changed\n"
    case.round_trip("scripts/huge.txt", old, new)


# -- permissions and space ---------------------------------------------------------------------


def test_read_only_file_is_patched_and_keeps_its_mode(case: Case) -> None:
    path = case.root / MOD
    path.chmod(0o444)
    old = path.read_bytes()
    new = old.replace(b"return x + 3\n", b"return x + 33\n")
    case.patch(diff_files(old, new, MOD).encode())
    case.apply()
    assert path.read_bytes() == new and (path.stat().st_mode & 0o777) == 0o444
    case.rollback()
    assert path.read_bytes() == old and (path.stat().st_mode & 0o777) == 0o444


def mount(args: list) -> Optional[str]:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    return None if proc.returncode == 0 else (proc.stderr.strip() or "mount failed")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs (a full disk is easy to make on it)."""
    yield from tmpfs_at(tmp_path / "disk", "512k")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: room for a few small trees, and a full disk in a moment."""
    yield from tmpfs_at(tmp_path / "disk", "4m")


def tmpfs_at(disk: Path, size: str) -> Iterator[Path]:
    disk.mkdir()
    failed = mount(["-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", str(disk)])
    if failed:
        pytest.skip("cannot mount a small tmpfs here (%s)" % failed)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, keep: int = 0) -> Path:
    """Fill ``disk``'s file system to the last block but ``keep`` bytes; returns the filler."""
    filler = disk / "filler"
    reserve = disk / "reserve"
    reserve.write_bytes(b"\0" * keep)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (65536, 512):  # big writes first, then the last blocks
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    reserve.unlink()
    return filler


@pytest.mark.parametrize("room,links", [(0, True), (100 * 1024, False), (30 * 1024, True)],
                         ids=["full", "room-for-one-backup-copy", "room-for-linked-backups-only"])
def test_full_disk_is_a_clear_error_and_changes_nothing(small_disk: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         room: int, links: bool) -> None:
    """Full to the last block (``.patchkit/`` cannot even be made); with backups copied (no
    hard links) and room for the transaction's first backup but not the second; with hard
    linked backups (no space needed) but no room for the new file: a clear error, the target
    untouched."""
    if not links:
        def no_link(*_args: object, **_kw: object) -> None:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        monkeypatch.setattr(os, "link", no_link)
    root = make_checkout(small_disk, git_repo=False)
    case = Case(tmp_path, root)
    big = root / "scripts/data.txt"
    old = b"".join(b"row %06d\n" % i for i in range(6000))  # ~66 KB
    big.write_bytes(old)
    new = old.replace(b"row 000010\n", b"row ten\n")
    case.patch(diff_files(old, new, "scripts/data.txt").encode())
    filler = fill(small_disk, keep=room)
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    assert free < 2 * len(old)  # no room for both backups and the temp file
    before = digest(root)
    with pytest.raises(errors.PatchkitError) as info:
        case.apply()
    message = str(info.value)
    assert "No space left on device" in message or "no space" in message.lower(), message
    assert isinstance(info.value, errors.PermissionDenied), message
    assert "free space on the target's file system" in message
    assert digest(root) == before  # byte-identical, no .patchkit left behind
    assert digest(case.outside) == {"victim.py": ("file", oct(0o100644), hashlib.sha256(b"precious = 1\n").hexdigest())}
    if links:
        assert free < len(new)  # not even room for the new file's temporary copy
    filler.unlink()  # with room again, the same apply works
    case.apply()
    assert big.read_bytes() == new


def test_read_only_mount_is_permission_denied_and_changes_nothing(small_disk: Path,
                                                                   tmp_path: Path) -> None:
    root = make_checkout(small_disk, git_repo=False)
    case = Case(tmp_path, root)
    old = (root / MOD).read_bytes()
    case.patch(diff_files(old, old.replace(b"return x + 3\n", b"return x + 4\n"), MOD).encode())
    failed = mount(["-o", "remount,ro", str(small_disk)])
    if failed:
        pytest.skip("cannot remount read-only (%s)" % failed)
    try:
        case.refused(errors.PermissionDenied)
    finally:
        mount(["-o", "remount,rw", str(small_disk)])


# -- modes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["new file mode 104777", "new file mode 102755"])
def test_a_patch_creating_a_setuid_or_setgid_file_is_refused_unless_the_manifest_allows(
        case: Case, header: str) -> None:
    case.patch(("diff --git a/python/sglang/srt/suid.py b/python/sglang/srt/suid.py\n"
                f"{header}\n--- /dev/null\n+++ b/python/sglang/srt/suid.py\n"
                "@@ -0,0 +1 @@\n+planted = 1\n").encode())
    mode = header.split()[-1]
    err = case.refused(errors.UnsafePathError, "fix h, patch file patches/h/0001-h.patch",
                       f"sglang:python/sglang/srt/suid.py would get mode {mode}",
                       "allow_special_modes = true")
    assert err.details["path"] == "python/sglang/srt/suid.py"

    manifest = case.catalog_dir / "manifests" / "h.toml"
    manifest.write_text("allow_special_modes = true\n" + manifest.read_text())
    case.apply()
    assert os.stat(case.root / "python/sglang/srt/suid.py").st_mode & 0o7777 == int(mode[-4:], 8)
    case.rollback()
    assert not (case.root / "python/sglang/srt/suid.py").exists()


def test_a_patch_making_a_file_world_writable_is_refused(case: Case) -> None:
    text = (case.root / MOD).read_bytes()
    case.patch(diff_files(text, text, MOD, mode="100777", old_mode="100644").encode())
    case.refused(errors.UnsafePathError, f"sglang:{MOD} would get mode 100777 (world-writable)")
