"""The in-memory view of the target files a request reads and plans to write.

Plan first, write last: every new content is computed here, so a conflict or a failed
precondition is found before the first byte reaches the disk, and a later fix of the request
sees the planned result of the earlier ones.
"""

from __future__ import annotations

import difflib
import hashlib
import marshal
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .fsops import file_mode, read_bytes
from .hunks import decode, split_lines
from .paths import Roots

Key = Tuple[str, str]  # (root name, checkout-layout path)


@dataclass
class Entry:
    root: str
    path: str
    abs: str
    original: Optional[bytes]
    original_mode: Optional[int]
    owner: Optional[Tuple[int, int]]
    current: Optional[bytes]
    mode: Optional[int]

    @property
    def where(self) -> str:
        return "%s:%s" % (self.root, self.path)


class Workspace:
    def __init__(self, roots: Roots) -> None:
        self.roots = roots
        self.entries: Dict[Key, Entry] = {}

    def entry(self, root: str, path: str) -> Entry:
        key = (root, path)
        if key not in self.entries:
            abs_path = self.roots.resolve(root, path)
            data = read_bytes(abs_path)
            mode = file_mode(abs_path) if data is not None else None
            owner = None
            if data is not None:
                st = os.stat(abs_path)
                owner = (st.st_uid, st.st_gid)
            self.entries[key] = Entry(root, path, abs_path, data, mode, owner, data, mode)
        return self.entries[key]

    def read(self, root: str, path: str) -> Optional[bytes]:
        return self.entry(root, path).current

    def changed(self) -> List[Entry]:
        return [e for e in self.entries.values()
                if e.current != e.original or (e.current is not None and e.mode != e.original_mode)]


# The diffs of an apply are a pure function of (path, before, after) and difflib: costly for a
# large series (seconds for a release's worth of files) and the same on every run of the same
# series on the same tree. So they are kept in the user's cache directory, keyed by content
# hashes. Only when this module is a file on disk: the agent shipped to a remote host is loaded
# from memory and writes nothing outside its roots.
_CACHE_ON = os.path.isfile(globals().get("__file__") or "")
_stamp: Optional[str] = None


def _diff_cache_file(items: List[Tuple[str, Optional[str], Optional[str]]]) -> str:
    global _stamp
    if _stamp is None:
        with open(__file__, "rb") as fh:
            ident = ("%s|" % (sys.version_info[:2],)).encode() + fh.read()
        _stamp = hashlib.sha256(ident).hexdigest()[:16]
    key = hashlib.sha256("\0".join("%s\0%s\0%s" % item for item in items).encode(
        "utf-8", "surrogateescape")).hexdigest()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "patchkit", "diffs", _stamp, key)


def unified_diffs(items: List[Tuple[str, Optional[bytes], Optional[bytes]]],
                  hashes: List[Tuple[Optional[str], Optional[str]]]) -> List[str]:
    """:func:`unified_diff` of each (path, before, after); ``hashes`` are their sha256s."""
    if not _CACHE_ON or not items:
        return [unified_diff(*item) for item in items]
    cache = _diff_cache_file([(p, h[0], h[1]) for (p, _b, _a), h in zip(items, hashes)])
    try:
        with open(cache, "rb") as fh:
            diffs = marshal.loads(fh.read())
        if isinstance(diffs, list) and len(diffs) == len(items):
            return diffs
    except (OSError, ValueError, EOFError, TypeError):
        pass
    diffs = [unified_diff(*item) for item in items]
    try:  # best effort, atomic; a cache that cannot be written is skipped
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(cache))
        with os.fdopen(fd, "wb") as fh:
            fh.write(marshal.dumps(diffs))
        os.replace(tmp, cache)
    except OSError:
        pass
    return diffs


def unified_diff(path: str, before: Optional[bytes], after: Optional[bytes]) -> str:
    """A unified diff of one file's change, with git's "No newline at end of file" markers."""
    old = split_lines(decode(before)) if before is not None else []
    new = split_lines(decode(after)) if after is not None else []
    out: List[str] = []
    for line in difflib.unified_diff(old, new, "/dev/null" if before is None else "a/" + path,
                                     "/dev/null" if after is None else "b/" + path):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
