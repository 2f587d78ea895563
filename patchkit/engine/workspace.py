"""The target files a request reads, in memory, with the bytes it will write (every change is
computed before the first byte reaches the disk), and the diffs of the result."""

from __future__ import annotations

import os
import stat
from typing import Dict, List, Optional, Sequence, Tuple, cast

from .fsops import NotRegular, held_of, nearest_existing_dir, read_with_stat
from .hunks import Hunk, decode, sha256_bytes, split_lines
from ..errors import PatchkitError
from .paths import Roots
from .recordbase import MutableRecord, record_dataclass

Key = Tuple[str, str]  # (root name, checkout-layout path)


@record_dataclass(frozen=False)
class Entry(MutableRecord):
    """One target file as read (``original``) and as it will be written (``current``)."""

    root: str
    path: str
    abs: str
    original: Optional[bytes]
    original_mode: Optional[int]
    owner: Optional[Tuple[int, int]]
    current: Optional[bytes]
    mode: Optional[int]
    blocked: Optional[str] = None  # why no file can be at this path (a directory is there...)
    shown: str = ""  # root:path as the file lies in its root (Roots.where)

    def __post_init__(self) -> None:
        self._sums: List[Tuple[bytes, str]] = []  # (version, its sha256): original, latest

    @property
    def where(self) -> str:
        return self.shown or "%s:%s" % (self.root, self.path)

    def sha256(self, data: Optional[bytes]) -> Optional[str]:
        """The sha256 of ``data``, a version of this file's bytes (its original, its current,
        a fix's before or after): each version is hashed once however many records name its
        digest (the plan, the journal, state.json, the git check, the result). Versions are
        told apart by identity: the bytes objects are kept here, so an identity is never
        reused. A file has a version per fix that changes it, and one more: the entry keeps
        them until the workspace lets the file go."""
        if data is None:
            return None
        for held, digest in self._sums:
            if held is data:
                return digest
        digest = cast(str, sha256_bytes(data))
        self._sums.append((data, digest))
        return digest


class Workspace:
    def __init__(self, roots: Roots) -> None:
        self.roots = roots
        self.entries: Dict[Key, Entry] = {}

    def entry(self, root: str, path: str) -> Entry:
        key = (root, path)
        if key not in self.entries:
            abs_path = self.roots.resolve(root, path)
            blocked = None
            try:
                data, st = read_with_stat(abs_path)
            except NotADirectoryError:  # a file stands where a directory of the path should
                data, st = None, None
                blocked = "%s is a file, not a directory" % _first_file(self.roots, root, abs_path)
            except NotRegular as exc:  # a FIFO, a device: never read, never patched
                data, st = None, None
                blocked = "%s:%s %s; patchkit patches regular files only" % (root, path, exc.what)
            if data is None and blocked is None and os.path.isdir(abs_path):
                blocked = "%s is a directory" % self.roots.where(root, path)
            mode = stat.S_IMODE(st.st_mode) if st is not None else None
            owner = (st.st_uid, st.st_gid) if st is not None else None
            self.entries[key] = Entry(root, path, abs_path, data, mode, owner, data, mode, blocked,
                                      self.roots.where(root, path))
        return self.entries[key]

    def sha256(self, root: str, path: str) -> Optional[str]:
        """The sha256 of the file's current bytes (None: no file, as :meth:`entry` reads it),
        without keeping the bytes: a status hashes every recorded file and needs no more."""
        return self.held(root, path)[0]

    def held(self, root: str, path: str) -> Tuple[Optional[str], Optional[int]]:
        """:meth:`sha256` and the file's permission bits (None, None: no file)."""
        e = self.entries.get((root, path))
        if e is not None:
            return e.sha256(e.current), e.mode if e.current is not None else None
        abs_path = self.roots.resolve(root, path)
        try:
            return held_of(abs_path) or (None, None)
        except (NotADirectoryError, NotRegular):  # entry(): no bytes, the path is blocked
            return None, None

    def read(self, root: str, path: str) -> Optional[bytes]:
        return self.entry(root, path).current

    def changed(self) -> List[Entry]:
        return [e for e in self.entries.values()
                if e.current != e.original or (e.current is not None and e.mode != e.original_mode)]


def file_op(before: Optional[bytes], after: Optional[bytes]) -> str:
    if before is None:
        return "create"
    return "delete" if after is None else "modify"


def _first_file(roots: Roots, root: str, abs_path: str) -> str:
    """The outermost component of ``abs_path`` that is not a directory, as ``root:path``."""
    top = nearest_existing_dir(os.path.dirname(abs_path))
    found = os.path.join(top, os.path.relpath(abs_path, top).split(os.sep)[0])
    try:
        return "%s:%s" % (root, roots.relative(root, found))
    except PatchkitError:
        return found


def unified_diff(path: str, before: Optional[bytes], after: Optional[bytes]) -> str:
    """difflib's unified diff of one file's change (``/dev/null`` for a side that is absent),
    with git's "No newline at end of file" markers."""
    import difflib  # here: a status makes no diff

    old = split_lines(decode(before)) if before is not None else []
    new = split_lines(decode(after)) if after is not None else []
    return "".join(_marked(line) for line in difflib.unified_diff(
        old, new, "/dev/null" if before is None else "a/" + path,
        "/dev/null" if after is None else "b/" + path))


def placed_diff(path: str, hunks: Sequence[Hunk], lines: Sequence[int], op: str = "modify") -> str:
    """The diff of a file changed by one patch: its own hunks, each at the line it was placed
    at (docs/design.md, ``diff``), in :func:`unified_diff`'s format. A file the patch creates
    or deletes is its one hunk, whole, against ``/dev/null`` (what difflib gives for it)."""
    if not hunks:
        return ""
    out = ["--- %s\n+++ %s\n" % ("/dev/null" if op == "create" else "a/" + path,
                                   "/dev/null" if op == "delete" else "b/" + path)]
    delta = 0
    for hunk, line in zip(hunks, lines):
        old0 = line - 1 if hunk.old_count else line  # 0-based index of the first old line
        if op == "create":
            old0 = 0
        out.append("@@ -%s +%s @@\n" % (_range(old0, hunk.old_count),
                                        _range(old0 + delta, hunk.new_count)))
        if hunk.body is not None and hunk.body.endswith("\n"):  # these lines, marked: none made
            out.append(hunk.body)
        else:
            out.extend(_marked(kind + text) for kind, text in hunk.lines)
        delta += hunk.new_count - hunk.old_count
    return "".join(out)


def _range(start: int, length: int) -> str:
    """difflib's range of a unified hunk header (``start`` 0-based)."""
    if length == 1:
        return "%d" % (start + 1)
    return "%d,%d" % (start + 1 if length else start, length)


def _marked(line: str) -> str:
    return line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
