"""The in-memory view of the target files a request reads and plans to write.

Plan first, write last: every new content is computed here, so a conflict or a failed
precondition is found before the first byte reaches the disk, and a later fix of the request
sees the planned result of the earlier ones.
"""

from __future__ import annotations

import difflib
import os
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


def unified_diff(path: str, before: Optional[bytes], after: Optional[bytes]) -> str:
    """A unified diff of one file's change, with git's "No newline at end of file" markers."""
    old = split_lines(decode(before)) if before is not None else []
    new = split_lines(decode(after)) if after is not None else []
    out: List[str] = []
    for line in difflib.unified_diff(old, new, "/dev/null" if before is None else "a/" + path,
                                     "/dev/null" if after is None else "b/" + path):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
