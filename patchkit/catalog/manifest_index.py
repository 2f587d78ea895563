"""The stat-stamped index of validated manifests: what ``status`` needs of each fix (name,
version, roots), and each whole fix, without reading or validating its manifest again.

``<index dir>/<key>`` (the user cache's ``patchkit/manifest-index/``; the key is a sha256 of
the manifests directory and of the code that validates): a marshalled dict {file name: (dev,
ino, size, mtime_ns, ctime_ns, clock_ns, summary)}; ``<index dir>/<key>-<file name>``: one
manifest's (dev, ino, size, mtime_ns, ctime_ns, clock_ns, fix data), the fix as
``patchkit.catalog.manifest.fix_data`` encodes it. The rule is :mod:`patchkit.catalog.patch_index`'s (git's
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

from .patch_index import Recording, load, stamp_of, vouches

T = TypeVar("T")
Summary = Any  # marshal-able plain data the caller derives from a validated manifest


def summaries(paths: Sequence[str], summarize: Callable[[str], Summary], index_dir: Path
              ) -> list[Summary]:
    """The summary of each manifest of one directory, from the index when it vouches for the
    file, else ``summarize(path)`` (which loads and validates it, raising its error)."""
    if not paths:
        return []
    index_file = index_dir / _index_name(os.path.dirname(os.path.abspath(paths[0])))
    entries = load(index_file, lambda value: True)
    out: list[Summary] = [None] * len(paths)
    missing: list[int] = []
    for i, path in enumerate(paths):
        entry = entries.get(os.path.basename(path))
        try:
            st = os.stat(path)
        except OSError:
            missing.append(i)  # summarize() says what is wrong with it
            continue
        if vouches(entry, st):
            out[i] = entry[6]  # type: ignore[index]
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
    return entry[6] if vouches(entry, st) else None


def record(path: str, load: Callable[[], T], encode: Callable[[T], Any], index_dir: Path) -> T:
    """``load()`` (which reads and validates the manifest, raising its error), and its
    ``encode``-d result recorded for :func:`cached` when the manifest is not racy: the clock is
    the entry's temp file, created before ``load`` reads."""
    with Recording(_entry_file(path, index_dir)) as rec:
        try:
            before = stamp_of(os.stat(path))
        except OSError:
            before = None
        value = load()
        entry = rec.entry(path, before, None)  # the value encoded only when it is kept
        if entry is not None:
            rec.commit(entry[:6] + (encode(value),))
        return value


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
        for name in ("manifest.py", "model.py", "manifest_index.py", "patch_index.py", "catalog.py"):
            try:
                st = os.stat(here / name)
                stamps.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                stamps.append(f"{name}:?")
        _code = f"{sys.version}|{'|'.join(stamps)}"
    return hashlib.sha256(f"{_code}|{directory}".encode("utf-8", "surrogateescape")).hexdigest()


def _summarize_into(index_file: Path, entries: dict[str, tuple], paths: Sequence[str],
                    missing: list[int], summarize: Callable[[str], Summary],
                    out: list[Summary]) -> None:
    """Summarize the manifests the index could not vouch for and record the non-racy ones."""
    with Recording(index_file) as rec:
        for i in missing:
            path = paths[i]
            name = os.path.basename(path)
            entries.pop(name, None)
            try:
                before = stamp_of(os.stat(path))
            except OSError:
                before = None
            out[i] = summarize(path)  # raises for a manifest that does not validate
            entry = rec.entry(path, before, out[i])
            if entry is not None:
                entries[name] = entry
        rec.commit(entries)
