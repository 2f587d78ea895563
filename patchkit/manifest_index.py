"""The stat-stamped index of validated manifests: what ``status`` needs of each fix (name,
version, roots), and each whole fix, without reading or validating its manifest again.

``<index dir>/<key>`` (the user cache's ``patchkit/manifest-index/``; the key is a sha256 of
the manifests directory and of the code that validates): a marshalled dict {file name: (dev,
ino, size, mtime_ns, ctime_ns, clock_ns, summary)}; ``<index dir>/<key>-<file name>``: one
manifest's (dev, ino, size, mtime_ns, ctime_ns, clock_ns, fix data), the fix as
``patchkit.manifest.fix_data`` encodes it. The rule is :mod:`patchkit.patch_index`'s (git's
racy-index rule, strict): ``clock_ns`` is the file system's clock (the mtime of the new
index's temp file) taken *before* the manifest was read, and an entry is written and trusted
only when the manifest's ctime and mtime are strictly before it, on the same file system and
with the same stamp. Any later edit sets the ctime to that clock or later, so the manifest is
loaded and validated again. Only a manifest that validated is ever recorded: a broken one is
loaded (and refused) on every run.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")
Summary = Any  # marshal-able plain data the caller derives from a validated manifest


def summaries(paths: Sequence[str], summarize: Callable[[str], Summary], index_dir: Path
              ) -> list[Summary]:
    """The summary of each manifest of one directory, from the index when it vouches for the
    file, else ``summarize(path)`` (which loads and validates it, raising its error)."""
    if not paths:
        return []
    index_file = index_dir / _index_name(os.path.dirname(os.path.abspath(paths[0])))
    entries = _load(index_file)
    out: list[Summary] = [None] * len(paths)
    missing: list[int] = []
    for i, path in enumerate(paths):
        entry = entries.get(os.path.basename(path))
        try:
            st = os.stat(path)
        except OSError:
            missing.append(i)  # summarize() says what is wrong with it
            continue
        if (entry is not None and entry[:5] == _stamp_of(st)
                and st.st_ctime_ns < entry[5] and st.st_mtime_ns < entry[5]):
            out[i] = entry[6]
        else:
            missing.append(i)
    if missing:
        _summarize_into(index_file, entries, paths, missing, summarize, out)
    return out


def cached(path: str, index_dir: Path) -> Any:
    """The data recorded by :func:`record` for the manifest at ``path``, or None when its
    stat stamp no longer vouches for it (or none was recorded)."""
    try:
        entry = marshal.loads(_entry_file(path, index_dir).read_bytes())
        st = os.stat(path)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if (isinstance(entry, tuple) and len(entry) == 7 and entry[:5] == _stamp_of(st)
            and st.st_ctime_ns < entry[5] and st.st_mtime_ns < entry[5]):
        return entry[6]
    return None


def record(path: str, load: Callable[[], T], encode: Callable[[T], Any], index_dir: Path) -> T:
    """``load()`` (which reads and validates the manifest, raising its error), and its
    ``encode``-d result recorded for :func:`cached` when the manifest is not racy: the clock is
    the entry's temp file, created before ``load`` reads."""
    import tempfile

    dest = _entry_file(path, index_dir)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=dest.parent)
    except OSError:
        return load()
    try:
        clock = os.fstat(fd)
        try:
            before = _stamp_of(os.stat(path))
        except OSError:
            before = None
        value = load()
        if (before is not None and before[0] == clock.st_dev and before[4] < clock.st_mtime_ns
                and before[3] < clock.st_mtime_ns and _stamp_of(os.stat(path)) == before):
            try:
                view = memoryview(marshal.dumps(before + (clock.st_mtime_ns, encode(value))))
                while view:
                    view = view[os.write(fd, view):]
                os.close(fd)
                fd = -1
                os.replace(tmp, dest)
                tmp = ""
            except (OSError, ValueError):
                pass  # best effort
        return value
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _entry_file(path: str, index_dir: Path) -> Path:
    """One entry per manifest, next to its directory's summaries."""
    directory, name = os.path.split(os.path.abspath(path))
    return index_dir / f"{_index_name(directory)}-{name}"


def default_dir() -> Path:
    """``patchkit/manifest-index/`` in the user's cache (XDG), next to the patch index."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "patchkit" / "manifest-index"


_code: str | None = None


def _index_name(directory: str) -> str:
    """Keyed by the directory and by the stamps of the modules whose rules a summary holds
    (validation in manifest, ``Fix.roots`` in model, this format), so new code starts afresh."""
    global _code
    if _code is None:
        here = Path(__file__).parent
        stamps = []
        for name in ("manifest.py", "model.py", "manifest_index.py", "catalog.py"):
            try:
                st = os.stat(here / name)
                stamps.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                stamps.append(f"{name}:?")
        _code = f"{sys.version}|{'|'.join(stamps)}"
    return hashlib.sha256(f"{_code}|{directory}".encode("utf-8", "surrogateescape")).hexdigest()


def _stamp_of(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _load(index_file: Path) -> dict[str, tuple]:
    try:
        entries = marshal.loads(index_file.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if isinstance(v, tuple) and len(v) == 7}


def _summarize_into(index_file: Path, entries: dict[str, tuple], paths: Sequence[str],
                    missing: list[int], summarize: Callable[[str], Summary],
                    out: list[Summary]) -> None:
    """Summarize the manifests the index could not vouch for and record the non-racy ones; the
    clock is the temp file that becomes the new index, created before any manifest is read."""
    import tempfile  # only when a manifest changed: its import is a good part of a status

    try:
        index_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=index_file.parent)
    except OSError:
        fd, tmp = -1, ""  # no index can be written: load every time, trust nothing
    try:
        clock = os.fstat(fd) if fd >= 0 else None
        for i in missing:
            path = paths[i]
            name = os.path.basename(path)
            entries.pop(name, None)
            try:
                before = _stamp_of(os.stat(path))
            except OSError:
                before = None
            out[i] = summarize(path)  # raises for a manifest that does not validate
            if (clock is not None and before is not None and before[0] == clock.st_dev
                    and before[4] < clock.st_mtime_ns and before[3] < clock.st_mtime_ns
                    and _stamp_of(os.stat(path)) == before):
                entries[name] = before + (clock.st_mtime_ns, out[i])
        if fd >= 0:
            try:
                view = memoryview(marshal.dumps(entries))
                while view:
                    view = view[os.write(fd, view):]
                os.close(fd)
                fd = -1
                os.replace(tmp, index_file)
                tmp = ""
            except (OSError, ValueError):
                pass  # best effort, like the patch index
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
