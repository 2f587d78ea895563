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
from typing import Sequence


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
        entries = _load_index(index_file)
        missing = []
        for i in indexes:
            st = os.stat(paths[i])
            entry = entries.get(os.path.basename(paths[i]))
            if (entry is not None and entry[:5] == _stamp_of(st)
                    and st.st_ctime_ns < entry[5] and st.st_mtime_ns < entry[5]):
                out[i] = entry[6]
            else:
                missing.append(i)
        if missing:
            datas = _hash_into_index(index_file, entries, [paths[i] for i in missing])
            for i, (sha, data) in zip(missing, datas):
                out[i] = sha
                read[i] = data
    return out  # type: ignore[return-value]  # every slot is set above


def _stamp_of(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _load_index(index_file: Path) -> dict[str, tuple]:
    try:
        entries = marshal.loads(index_file.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items()
            if isinstance(v, tuple) and len(v) == 7 and isinstance(v[6], str)}


def _hash_into_index(index_file: Path, entries: dict[str, tuple], paths: list[str]
                     ) -> list[tuple[str, bytes]]:
    """The sha256 and bytes of each of ``paths``, recording the non-racy ones in the index: the clock
    is the temp file that becomes the new index, created before any patch is read."""
    try:
        index_file.parent.mkdir(parents=True, exist_ok=True)
        import tempfile  # only when the index is rewritten: most runs read it and stop

        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=index_file.parent)
    except OSError:
        fd, tmp = -1, ""  # no index can be written: hash, trust nothing
    try:
        clock = os.fstat(fd) if fd >= 0 else None
        shas = []
        for path in paths:
            with open(path, "rb", buffering=0) as fh:
                stamp = _stamp_of(os.fstat(fh.fileno()))
                data = fh.read()
            sha = hashlib.sha256(data).hexdigest()
            shas.append((sha, data))
            name = os.path.basename(path)
            entries.pop(name, None)
            if (clock is not None and stamp[0] == clock.st_dev
                    and stamp[4] < clock.st_mtime_ns and stamp[3] < clock.st_mtime_ns
                    and _stamp_of(os.stat(path)) == stamp):
                entries[name] = stamp + (clock.st_mtime_ns, sha)
        if fd >= 0:
            try:
                view = memoryview(marshal.dumps(entries))
                while view:
                    view = view[os.write(fd, view):]
                os.close(fd)
                fd = -1
                os.replace(tmp, index_file)
                tmp = ""
            except OSError:
                pass  # best effort, like the plan cache
        return shas
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
