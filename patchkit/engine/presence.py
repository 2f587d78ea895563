"""Is a fix's change in the files, whether or not patchkit recorded it? For ``status`` (an
unrecorded fix ``present-unrecorded`` or ``partly-present``) and apply's ``requires`` check (a
fork may carry a prerequisite fix as a commit of its own)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import ConflictError
from .hunks import FileChange, apply_change, decode, side_found, split_lines

Reader = Callable[[str, str], Optional[bytes]]  # (root, path) -> bytes, None if absent
Key = Tuple[str, str]

NOT_APPLIED, PARTLY, PRESENT = "not-applied", "partly-present", "present-unrecorded"


@dataclass(frozen=True)
class Presence:
    state: str  # NOT_APPLIED | PARTLY | PRESENT
    files: Tuple[Tuple[Key, bool], ...]  # each touched file, and whether all its hunks are in it


def detect(files: Sequence[FileChange], read: Reader) -> Presence:
    """Undo the changes in the current files, newest first; a hunk is present when its new side
    is found and its old side is not (both found proves nothing)."""
    texts: Dict[Key, Optional[str]] = {}
    units: Dict[Key, List[Optional[bool]]] = {}
    for change in reversed(files):
        key = (change.root, change.path)
        if key not in texts:
            data = read(*key)
            texts[key] = None if data is None else decode(data)
        text = texts[key]
        try:
            undone: Optional[Tuple[Optional[str], Any]] = apply_change(text, change.reversed())
        except ConflictError:
            undone = None
        if change.op in ("create", "delete") or text is None:
            verdicts: List[Optional[bool]] = [undone is not None]
        else:
            lines = split_lines(text)
            verdicts = []
            for hunk in change.hunks:
                new, old = side_found(lines, hunk, True), side_found(lines, hunk, False)
                verdicts.append(None if new and old else (new and not old))
        units.setdefault(key, []).extend(verdicts)
        if undone is not None and False not in verdicts:
            texts[key] = undone[0]
    flat = [v for vs in units.values() for v in vs]
    state = NOT_APPLIED if not any(flat) else PRESENT if False not in flat else PARTLY
    return Presence(state, tuple((key, False not in vs) for key, vs in units.items()))
