"""Hunk placement with zero fuzz: a FILE record of the engine request applied to text in memory.

A hunk's old side (its " " and "-" lines) must match the file exactly. It is tried first at the
line the patch names, moved by the offset the previous hunk was found at, then at the nearest
exact match searching outward. Nothing is ever matched approximately: a hunk whose context
differs by one line is a conflict even where GNU patch would fuzz it, because a fuzzed hunk in
a production tree is a silent wrong edit. Text is the file's bytes decoded as UTF-8 with
``surrogateescape`` and split on "\\n" only, so CRLF, a missing final newline and non-UTF-8
bytes all survive unchanged.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import ConflictError, PatchFormatError, UsageError

OPS = ("modify", "create", "delete")
_KINDS = frozenset((" ", "-", "+"))


def decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


# The same bytes are hashed at several steps of one request (checks, journal, result, state);
# the engine's ``run`` empties this memo before and after each request. Keyed by the bytes
# themselves (a dict compares them on a hit), so a hash can only be of exactly these bytes.
_sha_memo: Dict[bytes, str] = {}


def sha256_bytes(data: Optional[bytes]) -> Optional[str]:
    if data is None:
        return None
    found = _sha_memo.get(data)
    if found is None:
        found = _sha_memo[data] = hashlib.sha256(data).hexdigest()
    return found


def clear_memo() -> None:
    _sha_memo.clear()


_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


def split_lines(text: str) -> List[str]:
    """Split on "\\n" only, keeping each line's ending; the last line may have none.

    ``str.splitlines`` is the fast path: it breaks at every "\\n" and at other characters
    too ("\\r", "\\x0c", ...), so when it finds exactly as many lines as there are "\\n"-lines
    its breaks are the "\\n" ones; otherwise the regex splits on "\\n" alone."""
    lines = text.splitlines(True)
    if len(lines) == text.count("\n") + (text[-1:] not in ("\n", "")):
        return lines
    return _LINE.findall(text)


class Hunk:
    """One hunk. ``lines`` is given, or built on first use from ``body`` (the request's patch
    text of the lines): placement reads only ``old`` and ``new``, which a body without a
    marker gives directly, so a release's worth of hunks never becomes ~10^5 tuples."""

    __slots__ = ("index", "old_start", "old_count", "new_start", "new_count", "body", "_lines",
                 "_old", "_new")

    def __init__(self, index: int, old_start: int, old_count: int, new_start: int, new_count: int,
                 lines: Optional[Tuple[Tuple[str, str], ...]] = None,
                 body: Optional[str] = None) -> None:
        if lines is None and body is None:
            lines = ()
        self.index = index  # 1-based position in its FILE record
        self.old_start = old_start
        self.old_count = old_count
        self.new_start = new_start
        self.new_count = new_count
        self.body = body
        self._lines = lines
        self._old: Optional[List[str]] = None
        self._new: Optional[List[str]] = None

    @property
    def lines(self) -> Tuple[Tuple[str, str], ...]:
        if self._lines is None:
            self._lines = body_lines(self.body or "")
        return self._lines

    def _sides(self) -> None:
        body = self.body
        if self._lines is None and body is not None and "\n\\" not in body \
                and not body.startswith("\\"):
            # no marker: the body's lines, each a tag then its text (checked by _hunk)
            parts = split_lines(body)
            self._old = [p[1:] for p in parts if p[0] != "+"]
            self._new = [p[1:] for p in parts if p[0] != "-"]
            return
        lines = self.lines
        self._old = [t for k, t in lines if k == " " or k == "-"]
        self._new = [t for k, t in lines if k == " " or k == "+"]

    # Computed once per hunk (placement reads them several times); callers never mutate them.
    @property
    def old(self) -> List[str]:
        if self._old is None:
            self._sides()
        return self._old  # type: ignore[return-value]

    @property
    def new(self) -> List[str]:
        if self._new is None:
            self._sides()
        return self._new  # type: ignore[return-value]

    @property
    def new_text(self) -> str:
        """The new side as one string; a pure insertion sent as a body without a marker (every
        line of a created file) is that body without its tags, in two C-level passes."""
        body = self.body
        if self.old_count == 0 and self._lines is None and body is not None \
                and body[-1:] == "\n" and "\n\\" not in body and body[:1] == "+":
            return body[1:].replace("\n+", "\n")
        return "".join(self.new)

    def _key(self) -> Tuple[Any, ...]:
        return (self.index, self.old_start, self.old_count, self.new_start, self.new_count,
                self.lines)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hunk) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "Hunk(index=%d, old_start=%d, old_count=%d, new_start=%d, new_count=%d)" % (
            self.index, self.old_start, self.old_count, self.new_start, self.new_count)

    @property
    def expected_index(self) -> int:
        """0-based index of the first old line (for a pure insertion: the insertion point)."""
        return self.old_start if self.old_count == 0 else self.old_start - 1

    def reversed(self) -> "Hunk":
        flip = {"-": "+", "+": "-", " ": " "}
        return Hunk(self.index, self.new_start, self.new_count, self.old_start, self.old_count,
                    tuple((flip[k], t) for k, t in self.lines))


@dataclass(frozen=True)
class FileChange:
    """One FILE record: the hunks of one patch for one file.

    ``source`` is the hunks, or (lazy) the request's hunk records and the fix's name: they are
    checked and built on first use of ``hunks`` (a status reads no hunk of a recorded fix).
    """

    root: str
    path: str
    patch: str
    op: str
    mode: Optional[int]
    source: Any = field(repr=False)

    @cached_property
    def hunks(self) -> Tuple[Hunk, ...]:
        if isinstance(self.source, tuple):
            return self.source
        raw, fix = self.source
        where = "%s:%s" % (self.root, self.path)
        return tuple(_hunk(h, i, fix, self.patch, where) for i, h in enumerate(raw, 1))

    @property
    def where(self) -> str:
        return "%s:%s" % (self.root, self.path)

    @classmethod
    def from_dict(cls, data: Dict[str, Any], fix: str, lazy: bool = False) -> "FileChange":
        """``lazy``: check and build the hunks on first use instead of now."""
        try:
            root, path, patch = str(data["root"]), str(data["path"]), str(data.get("patch", ""))
            op = str(data.get("op", "modify"))
            raw_hunks = list(data.get("hunks") or [])
        except (KeyError, TypeError) as exc:
            raise UsageError("fix %s: a FILE record lacks %s; rebuild the request with "
                             "patchkit.plan" % (fix, exc), fix=fix) from None
        if op not in OPS:
            raise UsageError("fix %s: %s:%s has op %r; expected one of %s"
                             % (fix, root, path, op, ", ".join(OPS)), fix=fix, path=path)
        change = cls(root, path, patch, op, parse_mode(data.get("mode")), [raw_hunks, fix])
        if not lazy:
            change.hunks  # noqa: B018  (checks them now)
        return change

    def reversed(self) -> "FileChange":
        op = {"create": "delete", "delete": "create"}.get(self.op, self.op)
        return FileChange(self.root, self.path, self.patch, op, self.mode,
                          tuple(h.reversed() for h in self.hunks))


def parse_mode(value: Any) -> Optional[int]:
    """A git mode ("100755", 0o100755 or 493) as permission bits, or None."""
    if value is None or value == "":
        return None
    if isinstance(value, int):
        return value & 0o7777
    try:
        return int(str(value), 8) & 0o7777
    except ValueError:
        raise UsageError("file mode %r is not an octal number such as 100644" % (value,)) from None


_MARKER = "\\ No newline at end of file\n"


def hunk_body(lines: Any) -> str:
    """The compact ``body`` of a hunk (docs/design.md, FILE): its lines in the patch's own
    notation, a tag then the text, and after a text without a final "\\n" a newline and the
    "\\ No newline at end of file" marker. :func:`body_lines` reads it back exactly (texts
    as :func:`split_lines` makes them: a "\\n" only at the end)."""
    body = "".join([kind + text for kind, text in lines])
    if body.count("\n") == len(lines):  # every text ends in "\n": no marker needed
        return body
    out = []
    for kind, text in lines:
        out.append(kind + text)
        if not text.endswith("\n"):
            out.append("\n" + _MARKER)
    return "".join(out)


def body_lines(body: str) -> Tuple[Tuple[str, str], ...]:
    """The ``(kind, text)`` lines of a hunk ``body``: split on "\\n" only; a line starting
    with "\\" is a marker that takes the "\\n" off the text before it."""
    if "\n\\" not in body and not body.startswith("\\"):  # no marker: one split, one slice
        parts = body.split("\n")
        last = parts.pop()
        lines = [(p[:1], p[1:] + "\n") for p in parts]
        if last:
            lines.append((last[:1], last[1:]))
        return tuple(lines)
    out: List[Tuple[str, str]] = []
    for line in split_lines(body):
        if line[0] == "\\":
            if not out or not out[-1][1].endswith("\n"):
                raise ValueError("a '\\ No newline' marker follows no line ending in a newline")
            out[-1] = (out[-1][0], out[-1][1][:-1])
        else:
            out.append((line[0], line[1:]))
    return tuple(out)


def _hunk(data: Any, index: int, fix: str, patch: str, where: str) -> Hunk:
    # A release's worth of hunks has ~10^5 lines: the checks run as C-level count/map/set
    # passes, and a body without a marker is only counted here (split when placed).
    try:
        body = data.get("body")
        lines = None
        if body is not None:
            if not isinstance(body, str):
                raise TypeError("body is not a string")
            kinds = _body_kinds(body)
            if kinds is None:  # a marker or a line without a tag: the full split says which
                lines = body_lines(body)
        else:
            lines = tuple(map(tuple, data["lines"]))
            if set(map(len, lines)) - {2}:
                raise ValueError("a line is not a [kind, text] pair")
            if set(map(type, map(_text, lines))) - {str}:
                lines = tuple((str(k), str(t)) for k, t in lines)
        hunk = Hunk(index, int(data["old_start"]), int(data["old_count"]),
                    int(data["new_start"]), int(data["new_count"]), lines,  # type: ignore[arg-type]
                    body)
        if lines is not None:
            kinds = Counter(map(_kind, lines))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PatchFormatError("fix %s, %s: hunk #%d of %s for %s is malformed (%s)"
                               % (fix, patch, index, patch, where, exc),
                               fix=fix, patch=patch, hunk=index) from None
    old, new = kinds[" "] + kinds["-"], kinds[" "] + kinds["+"]
    if set(kinds) - _KINDS or old != hunk.old_count or new != hunk.new_count:
        raise PatchFormatError(
            "%s: hunk #%d for %s has %d old / %d new lines but its header says %d / %d; "
            "the patch file is damaged, regenerate it"
            % (patch, index, where, old, new, hunk.old_count, hunk.new_count),
            fix=fix, patch=patch, hunk=index)
    return hunk


def _body_kinds(body: str) -> Optional[Dict[str, int]]:
    """The number of lines of each tag of a body without a marker, by counting; None when the
    body has a marker or a line whose tag is none of " ", "-", "+" (the caller splits it)."""
    if not body:
        return {" ": 0, "-": 0, "+": 0}
    if "\n\\" in body or body[0] == "\\":
        return None
    first, count = body[0], body.count
    kinds = {" ": count("\n ") + (first == " "), "-": count("\n-") + (first == "-"),
             "+": count("\n+") + (first == "+")}
    total = body.count("\n") + (body[-1] != "\n")
    return kinds if sum(kinds.values()) == total else None


_kind = itemgetter(0)
_text = itemgetter(1)


class Placement:
    """Where one hunk landed (a plain class with slots: ~10^4 per release-sized apply, and
    cheaper to define than a dataclass)."""

    __slots__ = ("patch", "index", "expected_line", "line", "offset")

    def __init__(self, patch: str, index: int, expected_line: int, line: int, offset: int) -> None:
        self.patch, self.index, self.expected_line, self.line, self.offset = (
            patch, index, expected_line, line, offset)

    def _key(self) -> Tuple[str, int, int, int, int]:
        return (self.patch, self.index, self.expected_line, self.line, self.offset)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Placement) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "Placement(patch=%r, index=%d, expected_line=%d, line=%d, offset=%d)" % self._key()

    def to_dict(self) -> Dict[str, Any]:
        return {"patch": self.patch, "index": self.index, "expected_line": self.expected_line,
                "line": self.line, "offset": self.offset}


def locate(lines: Sequence[str], old: Sequence[str], expected: int, lo: int = 0) -> Optional[int]:
    """The index nearest ``expected`` (not before ``lo``) where ``old`` matches exactly."""
    if type(lines) is not list:  # a slice of a list compares equal only to a list
        lines = list(lines)
    if type(old) is not list:
        old = list(old)
    hi = len(lines) - len(old)
    if hi < lo:
        return None
    start = min(max(expected, lo), hi)
    n = len(old)
    first = old[0] if old else None
    for distance in range(0, max(start - lo, hi - start) + 1):
        for i in (start + distance, start - distance) if distance else (start,):
            if lo <= i <= hi and (first is None or lines[i] == first) and lines[i:i + n] == old:
                return i
    return None


def apply_change(text: Optional[str], change: FileChange) -> Tuple[Optional[str], List[Placement]]:
    """Apply one FILE record to the current text (None: the file is absent)."""
    if change.op == "create":
        if text is not None:
            raise ConflictError("%s: %s creates this file but it already exists; remove it or "
                                "roll back whatever created it" % (change.where, change.patch),
                                root=change.root, path=change.path, patch=change.patch)
        new = "".join([h.new_text for h in change.hunks])
        return new, [Placement(change.patch, h.index, h.new_start, h.new_start, 0) for h in change.hunks]
    if text is None:
        raise ConflictError("%s: %s changes this file but it does not exist"
                            % (change.where, change.patch),
                            root=change.root, path=change.path, patch=change.patch)
    lines = split_lines(text)
    if change.op == "delete":
        old = [t for h in change.hunks for t in h.old]
        if old != lines:
            _conflict(change, change.hunks[0] if change.hunks else None, lines, old, 0,
                      "deletes this file but its content differs from the patch")
        return None, [Placement(change.patch, h.index, h.old_start, h.old_start, 0) for h in change.hunks]
    placements: List[Placement] = []
    found_at: List[Tuple[int, Hunk]] = []
    lo, carried = 0, 0
    for hunk in change.hunks:
        expected = hunk.expected_index + carried
        idx = locate(lines, hunk.old, expected, lo)
        if idx is None:
            _conflict(change, hunk, lines, hunk.old, max(0, min(expected, len(lines))),
                      "does not apply: its context is not in the file (zero fuzz)")
        assert idx is not None
        carried = idx - hunk.expected_index
        line = idx if hunk.old_count == 0 else idx + 1
        placements.append(Placement(change.patch, hunk.index, hunk.old_start, line,
                                    line - hunk.old_start))
        found_at.append((idx, hunk))
        lo = idx + len(hunk.old)
    out: List[str] = []
    prev = 0
    for idx, hunk in found_at:
        out.extend(lines[prev:idx])
        out.extend(hunk.new)
        prev = idx + len(hunk.old)
    out.extend(lines[prev:])
    new_text = "".join(out)
    return new_text, placements


def _conflict(change: FileChange, hunk: Optional[Hunk], lines: Sequence[str], old: Sequence[str],
              at: int, what: str) -> None:
    diff_line, wanted, found = at + 1, None, None
    for i, want in enumerate(old):
        have = lines[at + i] if at + i < len(lines) else None
        if have != want:
            diff_line, wanted, found = at + i + 1, want, have
            break
    number = hunk.index if hunk else 1
    expected_line = hunk.old_start if hunk else 1
    if wanted is None and len(lines) != len(old) and change.op == "delete":
        difference = "the file has %d lines, the patch %d" % (len(lines), len(old))
    else:
        difference = "line %d: the patch expects %r but the file has %s" % (
            diff_line, wanted, "end of file" if found is None else repr(found))
    raise ConflictError(
        "%s: hunk #%d of %s %s; expected at line %d; first difference at %s. Refresh the patch "
        "against this tree or check that the target runs the release the fix was written for"
        % (change.where, number, change.patch, what, expected_line, difference),
        root=change.root, path=change.path, patch=change.patch, hunk=number,
        expected_line=expected_line, first_difference={"line": diff_line, "expected": wanted,
                                                       "found": found})


def side_found(lines: Sequence[str], hunk: Hunk, new_side: bool) -> bool:
    """Whether one side of a hunk occurs anywhere in the file (status' "present" detection)."""
    side = hunk.new if new_side else hunk.old
    start = (hunk.new_start - 1) if new_side else hunk.expected_index
    return bool(side) and locate(lines, side, max(start, 0)) is not None
