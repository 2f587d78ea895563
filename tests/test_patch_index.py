"""The stat-stamped index of patch hashes: a patch is read only when its stat says it may
have changed, and no change of a patch is ever missed (git's racy-index rule)."""

from __future__ import annotations

import hashlib
import marshal
import os
import tempfile
import time
from pathlib import Path

import pytest

from patchkit.catalog import series
from patchkit.catalog.series import parse_series, patch_digests, read_series

PATCH = (b"--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n")
SAME_SIZE = (b"--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+d\n")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def settle(path: Path) -> None:
    """Wait until the file system's clock has moved past ``path``'s ctime, so an index entry
    made now is not racy (on a coarse clock the write and the index can share a tick)."""
    ctime = path.stat().st_ctime_ns
    while True:
        fd, probe = tempfile.mkstemp(dir=path.parent)
        try:
            if os.fstat(fd).st_mtime_ns > ctime:
                return
        finally:
            os.close(fd)
            os.unlink(probe)
        time.sleep(0.002)


def counting_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every patch file series.py opens (it reads patches through the builtin open)."""
    opened: list[str] = []
    real = open

    def spy(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(file).endswith(".patch"):
            opened.append(os.path.basename(str(file)))
        return real(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spy)
    return opened


@pytest.fixture
def patch(tmp_path: Path) -> Path:
    path = tmp_path / "patches" / "0001-x.patch"
    path.parent.mkdir()
    path.write_bytes(PATCH)
    settle(path)
    return path


def test_an_indexed_patch_is_not_read_again(patch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert patch_digests([patch]) == [sha(PATCH)]
    opened = counting_opens(monkeypatch)
    assert patch_digests([patch]) == [sha(PATCH)]
    assert opened == []


def test_a_cached_series_is_built_without_reading_its_patches(
        patch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    digests, files = read_series([(patch, "sglang")])
    series._cache.clear()
    opened = counting_opens(monkeypatch)
    again = read_series([(patch, "sglang")])
    assert opened == []
    assert again == (digests, files)
    assert again == parse_series([(patch, "sglang", PATCH)])


def test_an_edit_keeping_size_and_mtime_is_seen(patch: Path) -> None:
    assert patch_digests([patch]) == [sha(PATCH)]
    before = patch.stat()
    patch.write_bytes(SAME_SIZE)
    os.utime(patch, ns=(before.st_atime_ns, before.st_mtime_ns))  # the ctime still moves
    after = patch.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size, before.st_mtime_ns, before.st_ino)
    assert patch_digests([patch]) == [sha(SAME_SIZE)]
    _digests, files = read_series([(patch, "sglang")])
    assert files[0]["hunks"][0]["body"] == " a\n-b\n+d\n"


def test_a_replaced_file_is_hashed_again(patch: Path) -> None:
    assert patch_digests([patch]) == [sha(PATCH)]
    before = patch.stat()
    new = patch.with_name("new.tmp")
    new.write_bytes(SAME_SIZE)
    os.utime(new, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(new, patch)
    assert patch.stat().st_ino != before.st_ino
    assert patch_digests([patch]) == [sha(SAME_SIZE)]


def test_a_racy_entry_is_not_trusted(patch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry whose clock is not past the patch's ctime could have missed a change made in
    the same tick: the patch is read and hashed again, every time."""
    assert patch_digests([patch]) == [sha(PATCH)]
    index_dir = Path(os.environ["HOME"]) / ".cache" / "patchkit" / "patch-index"
    (index_file,) = index_dir.iterdir()
    entries = marshal.loads(index_file.read_bytes())
    stamp = entries[patch.name]
    entries[patch.name] = stamp[:5] + (stamp[4], stamp[6])  # clock == ctime: the same tick
    index_file.write_bytes(marshal.dumps(entries))
    opened = counting_opens(monkeypatch)
    assert patch_digests([patch]) == [sha(PATCH)]
    assert opened == [patch.name]


def test_a_patch_written_in_the_index_tick_is_not_recorded(tmp_path: Path) -> None:
    """A patch whose ctime is not before the index's clock gets no entry at all."""
    path = tmp_path / "p" / "0001-y.patch"
    path.parent.mkdir()
    path.write_bytes(PATCH)
    future = time.time_ns() + 3_600 * 10**9
    os.utime(path, ns=(future, future))  # an mtime past any clock: never trusted
    assert patch_digests([path]) == [sha(PATCH)]
    index_dir = Path(os.environ["HOME"]) / ".cache" / "patchkit" / "patch-index"
    entries = marshal.loads(next(index_dir.iterdir()).read_bytes())
    assert path.name not in entries


def test_an_unreadable_patch_raises_oserror_naming_it(tmp_path: Path) -> None:
    with pytest.raises(OSError) as info:
        read_series([(tmp_path / "gone.patch", "sglang")])
    assert info.value.filename == str(tmp_path / "gone.patch")


def test_a_damaged_index_is_rebuilt(patch: Path) -> None:
    assert patch_digests([patch]) == [sha(PATCH)]
    index_dir = Path(os.environ["HOME"]) / ".cache" / "patchkit" / "patch-index"
    (index_file,) = index_dir.iterdir()
    index_file.write_bytes(b"\x00garbage")
    assert patch_digests([patch]) == [sha(PATCH)]
    assert patch.name in marshal.loads(index_file.read_bytes())


def test_a_patch_gone_after_the_catalog_loaded_is_a_manifest_error(tmp_path: Path) -> None:
    import shutil

    from patchkit.catalog import Catalog
    from patchkit.errors import ManifestError
    from patchkit.plan import fix_request

    root = tmp_path / "catalog"
    shutil.copytree(Path(__file__).parent / "samples" / "catalog", root)
    fix = Catalog(root).get("pool-guard")
    fix.patches[0].path.unlink()
    with pytest.raises(ManifestError) as info:
        fix_request(fix)
    assert str(fix.patches[0].path) in str(info.value)
    assert "Restore the file" in str(info.value)


def test_without_a_writable_cache_every_patch_is_hashed(patch: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert patch_digests([patch]) == [sha(PATCH)]
    opened = counting_opens(monkeypatch)
    patch.write_bytes(SAME_SIZE)
    assert patch_digests([patch]) == [sha(SAME_SIZE)]
    assert opened == [patch.name]
