"""Is a fix's change in the files, whether or not patchkit recorded it? For ``status`` (an
unrecorded fix ``present-unrecorded`` or ``partly-present``) and apply's ``requires`` check (a
fork may carry a prerequisite fix as a commit of its own)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import ConflictError
from .contract import NOT_APPLIED, PARTLY_PRESENT, PRESENT_UNRECORDED
from .hunks import (FileChange, Hunk, Placement, apply_change, decode, locate, side_found,
                    split_lines)
from .recordbase import Record, record_dataclass

Reader = Callable[[str, str], Optional[bytes]]  # (root, path) -> bytes, None if absent
Key = Tuple[str, str]


@record_dataclass(frozen=True)
class Presence(Record):
    """Whether a fix's change is in the files, as a whole and per touched file."""

    state: str  # NOT_APPLIED | PARTLY_PRESENT | PRESENT_UNRECORDED
    files: Tuple[Tuple[Key, bool], ...]  # each touched file, and whether all its hunks are in it


def detect(files: Sequence[FileChange], read: Reader, beneath: Optional[Reader] = None) -> Presence:
    """Undo the changes in the current files, newest first; a hunk is present when its new side
    is found and its old side is not (both found proves nothing). ``beneath``: each file as it
    was before the fixes patchkit recorded on it (their backups): a fix applied on top of
    an unrecorded one (a commit of the fork it depends on) may have rewritten the lines that
    show it, so a file holds the change when either reading holds it whole."""
    found = _detect(files, read)
    if beneath is None or found.state == PRESENT_UNRECORDED:
        return found
    below = _detect(files, beneath)
    if below.state == NOT_APPLIED:
        return found
    whole = dict(below.files)
    files_ = tuple((key, ok or whole.get(key, False)) for key, ok in found.files)
    if all(ok for _key, ok in files_):
        return Presence(PRESENT_UNRECORDED, files_)
    return Presence(PARTLY_PRESENT, files_)


def _detect(files: Sequence[FileChange], read: Reader) -> Presence:
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
    state = (NOT_APPLIED if not any(flat)
             else PRESENT_UNRECORDED if False not in flat else PARTLY_PRESENT)
    return Presence(state, tuple((key, False not in vs) for key, vs in units.items()))


NEAR = 20  # lines around a hunk's place where a block it adds counts as "already there"


def added_blocks(hunk: Hunk) -> List[List[str]]:
    """The runs of consecutive added lines of a hunk that say something: two or more non-blank
    lines, or one long one (a lone ``pass`` or ``)`` proves nothing)."""
    blocks: List[List[str]] = []
    run: List[str] = []
    for kind, text in (*hunk.lines, (" ", "")):
        if kind == "+":
            run.append(text)
            continue
        if run:  # a run ends
            solid = [t for t in run if t.strip()]
            if len(solid) >= 2 or (solid and len(solid[0].strip()) >= 40):
                blocks.append(run)
            run = []
    return blocks


def _count(lines: List[str], block: List[str]) -> int:
    """How many times ``block`` stands in ``lines``: where its first line is (``list.index``),
    the rest compared there."""
    first, n, count, at = block[0], len(block), 0, -1
    stop = len(lines) - n + 1
    while True:
        try:
            at = lines.index(first, at + 1, stop)
        except ValueError:
            return count
        if lines[at:at + n] == block:
            count += 1


def already_added(lines: List[str], hunk: Hunk, at: int,
                  old: Optional[List[str]] = None) -> Optional[Tuple[int, List[str]]]:
    """Where (1-based line) the blocks ``hunk`` adds already stand verbatim in ``lines``, within
    :data:`NEAR` lines of ``at`` (the 0-based index its old side is placed at), with the first
    block; None unless *every* block the hunk adds is there (blocks the hunk itself removes do
    not count). One block of several proves nothing: real code repeats lines (a keyword
    argument passed on to two calls, a name in two lists), and upstream's own diffs add such
    lines beside their twins. Nor do lines that end in a comma (the items of a call or a
    literal: code passes the same arguments to two calls), so a hunk needs two added
    statements before it can be a second copy. ``old``: the hunk's old side, when the caller
    has it."""
    body = hunk.body
    if body is not None and body.count("\n+") + body.startswith("+") < 2:
        return None  # two added statements are needed (below): fewer added lines, no copy
    old = hunk.old if old is None else old
    blocks = added_blocks(hunk)
    if sum(1 for b in blocks for line in b if line.strip() and not line.rstrip().endswith(",")) < 2:
        return None
    lo, hi = max(0, at - NEAR), min(len(lines), at + len(old) + NEAR)
    window = lines[lo:hi]
    if any(_count(window, block) <= _count(old, block) for block in blocks):
        return None
    block = blocks[0]
    n = len(block)
    first = next(i for i in range(len(window) - n + 1) if window[i:i + n] == block)
    return lo + first + 1, block


Duplicate = Tuple[int, Hunk, List[str]]  # (1-based line of the copy, the hunk, the block)
Placed = Union[Tuple[Optional[str], List[Placement]], ConflictError]  # apply_change's answer


def placed_with_duplicates(text: str, change: FileChange) -> Tuple[Optional[Duplicate], Placed]:
    """:func:`duplicates` and :func:`apply_change` of one modify record, from one placement of
    each hunk: the first duplicate (found as each hunk is placed), and the new text with the
    placements, or the ``ConflictError`` that stopped them (the duplicates of the hunks
    placed before it count, as in :func:`duplicates`)."""
    found: List[Duplicate] = []

    def seen(lines: List[str], hunk: Hunk, at: int, old: List[str]) -> None:
        if not found:
            copy = already_added(lines, hunk, at, old)
            if copy is not None:
                found.append((copy[0], hunk, copy[1]))

    try:
        placed: Placed = apply_change(text, change, seen)
    except ConflictError as exc:
        placed = exc
    return (found[0] if found else None), placed


def duplicates(text: Optional[str], change: FileChange) -> Optional[Duplicate]:
    """The first hunk of ``change`` that, applied to ``text``, would write a second copy of a
    block already there: (1-based line of the copy, the hunk, the block), else None."""
    if text is None or change.op != "modify":
        return None
    lines = split_lines(text)
    prev, carried = 0, 0
    for hunk in change.hunks:
        old = hunk.old
        idx = locate(lines, old, hunk.expected_index + carried, prev)
        if idx is None:
            return None
        carried, prev = idx - hunk.expected_index, idx + len(old)
        found = already_added(lines, hunk, idx, old)
        if found is not None:
            return found[0], hunk, found[1]
    return None
