"""The stat-stamped index of patch hashes: a series' cache key without reading its patches.

``<index dir>/<sha256 of the patches directory>`` (the user cache's ``patchkit/patch-index/``):
a marshalled dict {file name: (dev, ino, size, mtime_ns, ctime_ns, clock_ns, sha256)}.
``clock_ns`` is the file system's clock (the mtime of a file created in the index directory)
read *before* the patch's bytes were read. An entry is written and trusted only when the
patch's ctime and mtime are strictly before that clock, on the same file system (git's
racy-index rule, made strict as the engine's stat stamps are): any later change of the patch
-- even one that keeps its size and puts its mtime back -- sets its ctime to that clock or
later, so the stamp no longer matches and the patch is read and hashed again.
"""

from __future__ import annotations

import hashlib
import marshal
import os
from pathlib import Path
from typing import Any, Callable, Sequence


def digests(paths: Sequence[Path | str], read: dict[int, bytes], index_dir: Path) -> list[str]:
    """The sha256 of each patch file, read and hashed only when the index cannot vouch for it,
    keeping in ``read`` (by position) the bytes of each patch it had to read.

    A ``status`` of a catalog with a 2000-patch fix would otherwise read every patch (tens of
    MB, cold when other work pushed them out of the page cache) only to find its series in the
    cache. Raises ``OSError`` (``filename`` set) for a patch that cannot be stat'ed or read.
    """
    paths = [os.fspath(p) for p in paths]
    out: list[str | None] = [None] * len(paths)
    by_dir: dict[str, list[int]] = {}
    for i, path in enumerate(paths):
        by_dir.setdefault(os.path.dirname(os.path.abspath(path)), []).append(i)
    for directory, indexes in by_dir.items():
        index_file = index_dir / hashlib.sha256(
            os.fsencode(directory)).hexdigest()
        entries = load(index_file, lambda value: isinstance(value, str))
        missing = []
        for i in indexes:
            entry = entries.get(os.path.basename(paths[i]))
            if vouches(entry, os.stat(paths[i])):
                out[i] = entry[6]  # type: ignore[index]
            else:
                missing.append(i)
        if missing:
            datas = _hash_into_index(index_file, entries, [paths[i] for i in missing])
            for i, (sha, data) in zip(missing, datas):
                out[i] = sha
                read[i] = data
    return out  # type: ignore[return-value]  # every slot is set above


def _hash_into_index(index_file: Path, entries: dict[str, tuple], paths: list[str]
                     ) -> list[tuple[str, bytes]]:
    """The sha256 and bytes of each of ``paths``, recording the non-racy ones in the index."""
    with Recording(index_file) as rec:
        shas = []
        for path in paths:
            with open(path, "rb", buffering=0) as fh:
                stamp = stamp_of(os.fstat(fh.fileno()))
                data = fh.read()
            sha = hashlib.sha256(data).hexdigest()
            shas.append((sha, data))
            name = os.path.basename(path)
            entries.pop(name, None)
            entry = rec.entry(path, stamp, sha)
            if entry is not None:
                entries[name] = entry
        rec.commit(entries)
        return shas


# -- the mechanism, shared with patchkit.catalog.manifest_index -------------------------------------


def stamp_of(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What an entry keeps of a file's stat: device, inode, size, mtime and ctime in ns."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def vouches(entry: Any, st: os.stat_result) -> bool:
    """Whether ``entry`` (stamp + (clock_ns, value)) still holds for a file whose stat is ``st``:
    the same stamp, and ctime and mtime strictly before the entry's clock."""
    return (isinstance(entry, tuple) and len(entry) == 7 and entry[:5] == stamp_of(st)
            and st.st_ctime_ns < entry[5] and st.st_mtime_ns < entry[5])


def load(index_file: Path, valid: Callable[[Any], bool]) -> dict[str, tuple]:
    """The entries of a marshalled index {name: entry} whose value passes ``valid``; {} when
    the file is absent or damaged."""
    try:
        entries = marshal.loads(index_file.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items()
            if isinstance(v, tuple) and len(v) == 7 and valid(v[6])}


class Recording:
    """Rewriting one index file under the racy rule. Its temp file, created first, is the
    clock: an entry is made (:meth:`entry`) only for a file whose stamp, taken before its bytes
    were read, is on the clock's file system, strictly older than the clock and unchanged
    since. :meth:`commit` replaces the index file with the temp file, atomically; best effort
    throughout: without a writable index directory nothing is recorded and nothing trusted."""

    def __init__(self, index_file: Path) -> None:
        self.index_file = index_file
        try:
            index_file.parent.mkdir(parents=True, exist_ok=True)
            import tempfile  # only when an index is rewritten: most runs read one and stop

            self.fd, self.tmp = tempfile.mkstemp(prefix=".tmp-", dir=index_file.parent)
            self.clock: os.stat_result | None = os.fstat(self.fd)
        except OSError:
            self.fd, self.tmp, self.clock = -1, "", None

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        if self.tmp:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass

    def entry(self, path: str, before: tuple[int, ...] | None, value: Any) -> tuple | None:
        """``before + (clock_ns, value)`` when ``path`` may be trusted by its stamp later."""
        clock = self.clock
        if (clock is not None and before is not None and before[0] == clock.st_dev
                and before[4] < clock.st_mtime_ns and before[3] < clock.st_mtime_ns
                and stamp_of(os.stat(path)) == before):
            return before + (clock.st_mtime_ns, value)
        return None

    def commit(self, data: Any) -> None:
        if self.fd < 0:
            return
        try:
            view = memoryview(marshal.dumps(data))
            while view:
                view = view[os.write(self.fd, view):]
            os.close(self.fd)
            self.fd = -1
            os.replace(self.tmp, self.index_file)
            self.tmp = ""
        except (OSError, ValueError):
            pass  # best effort, like the plan cache
