"""Hunk placement with zero fuzz (a fuzzed hunk is a silent wrong edit): a hunk's old side must
match exactly, at the line the patch names (moved by the previous hunk's offset) or the nearest
exact match. Text is UTF-8 with ``surrogateescape``, split on "\\n" only, so CRLF, a missing
final newline and non-UTF-8 bytes survive unchanged."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import field
from functools import cached_property
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Tuple

from ..errors import ConflictError, PatchFormatError, UsageError
from .contract import FILE_OPS, REVERSED_OP, REVERSED_SIDE
from .recordbase import Record, record_dataclass

_KINDS = frozenset((" ", "-", "+"))


def decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def sha256_bytes(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else hashlib.sha256(data).hexdigest()


_OTHER_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # str.splitlines splits on these too


def split_lines(text: str) -> List[str]:
    """Split on "\\n" only, keeping each line's ending; the last line may have none."""
    if not any(c in text for c in _OTHER_BREAKS):  # then str.splitlines splits the same, in C
        return text.splitlines(True)
    parts = text.split("\n")
    last = parts.pop()
    lines = [part + "\n" for part in parts]
    if last:
        lines.append(last)
    return lines


@record_dataclass(frozen=True)
class Hunk(Record):
    """One hunk: its header and its lines, kept as the request's ``body`` when it came as one
    (``given`` empty): the ``(kind, text)`` lines and the two sides are made from it when used,
    and not kept, so a large patch is held once, as its text (docs/reliability.md, "Scale")."""

    index: int  # 1-based position in its FILE record
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    given: Tuple[Tuple[str, str], ...] = field(repr=False)  # the lines, when not a body
    body: Optional[str] = field(default=None, repr=False)

    @property
    def lines(self) -> Tuple[Tuple[str, str], ...]:
        return self.given if self.body is None else body_lines(self.body)

    def _header(self) -> Tuple[int, int, int, int, int]:
        return self.index, self.old_start, self.old_count, self.new_start, self.new_count

    def __eq__(self, other: object) -> bool:  # a body hunk equals the same hunk sent as lines
        return isinstance(other, Hunk) and self._header() == other._header() and (
            self.body == other.body if self.body is not None and other.body is not None
            else self.lines == other.lines)

    def __hash__(self) -> int:
        return hash(self._header())

    def sides(self) -> Tuple[List[str], List[str]]:
        """The old and the new side's lines (a context line is in both), made now."""
        old: List[str] = []
        new: List[str] = []
        body = self.body
        if body is not None and not (body.startswith("\\") or "\n\\" in body):
            parts = body.split("\n")  # no "No newline" marker
            last = parts.pop()  # "" when the body ends in "\n"
            for part in parts:
                kind, text = part[:1], part[1:] + "\n"
                if kind != "+":
                    old.append(text)
                if kind != "-":
                    new.append(text)
            if last:
                if last[:1] != "+":
                    old.append(last[1:])
                if last[:1] != "-":
                    new.append(last[1:])
            return old, new
        for kind, text in self.lines:
            if kind != "+":
                old.append(text)
            if kind != "-":
                new.append(text)
        return old, new

    def added_text(self) -> str:
        """The new side of a hunk of added lines only (a created file's) as one text: its
        body without each line's "+", no line made; else the new side's lines joined."""
        body = self.body
        if body is not None and body.startswith("+") and (
                body.count("\n+") == body.count("\n") - body.endswith("\n")):
            return body[1:].replace("\n+", "\n")
        return "".join(self.sides()[1])

    @property
    def old(self) -> List[str]:
        return self.sides()[0]

    @property
    def new(self) -> List[str]:
        return self.sides()[1]

    @property
    def expected_index(self) -> int:
        """0-based index of the first old line (for a pure insertion: the insertion point)."""
        return self.old_start if self.old_count == 0 else self.old_start - 1

    def reversed(self) -> "Hunk":
        return Hunk(self.index, self.new_start, self.new_count, self.old_start, self.old_count,
                    tuple((REVERSED_SIDE[k], t) for k, t in self.lines))


@record_dataclass(frozen=True)
class FileChange(Record):
    """One FILE record: the hunks of one patch for one file. ``source`` is the hunks, or the
    request's hunk records and the fix's name, checked and built on first use of ``hunks``."""

    root: str
    path: str
    patch: str
    op: str
    mode: Optional[int]
    source: Any = field(repr=False)
    shown: str = field(default="", compare=False)  # root:path as it lies in its root (Roots.where)

    @cached_property
    def hunks(self) -> Tuple[Hunk, ...]:
        if isinstance(self.source, tuple):
            return self.source
        raw, fix = self.source
        return tuple(_hunk(h, i, fix, self) for i, h in enumerate(raw, 1))

    @property
    def where(self) -> str:
        return self.shown or "%s:%s" % (self.root, self.path)

    def named(self) -> Dict[str, Any]:
        """The file as an error's details name it (docs/cli.md, ``--json``): ``path`` as the
        message does, where it lies in its root (an installed package's ``sglang/x.py``),
        ``where`` the message's ``root:path``, ``patch_path`` the path the patch names."""
        return {"root": self.root, "path": self.where.partition(":")[2], "where": self.where,
                "patch": self.patch, "patch_path": self.path}

    @classmethod
    def from_dict(cls, data: Dict[str, Any], fix: str, lazy: bool = False) -> "FileChange":
        """``lazy``: check and build the hunks on first use instead of now."""
        try:
            root, path, patch = str(data["root"]), str(data["path"]), str(data.get("patch", ""))
            op = str(data.get("op", "modify"))
            raw_hunks = list(data.get("hunks") or [])
        except (KeyError, TypeError) as exc:
            raise UsageError("fix %s: a FILE record lacks %s; rebuild the request with "
                             "patchkit.request_builder" % (fix, exc), fix=fix) from None
        if op not in FILE_OPS:
            raise UsageError("fix %s: %s:%s has op %r; expected one of %s"
                             % (fix, root, path, op, ", ".join(FILE_OPS)), fix=fix, path=path)
        change = cls(root, path, patch, op, parse_mode(data.get("mode")), [raw_hunks, fix])
        if not lazy:
            change.hunks  # noqa: B018  (checks them now)
        return change

    def reversed(self) -> "FileChange":
        op = REVERSED_OP.get(self.op, self.op)
        return FileChange(self.root, self.path, self.patch, op, self.mode,
                          tuple(h.reversed() for h in self.hunks), self.shown)


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
    """The compact ``body`` of a hunk (docs/design.md, FILE); :func:`body_lines` reads it back."""
    out = []
    for kind, text in lines:
        out.append(kind + text)
        if not text.endswith("\n"):
            out.append("\n" + _MARKER)
    return "".join(out)


def body_lines(body: str) -> Tuple[Tuple[str, str], ...]:
    """The ``(kind, text)`` lines of a hunk ``body``; a "\\" marker takes the "\\n" off the line before."""
    out: List[Tuple[str, str]] = []
    for line in split_lines(body):
        if line[0] == "\\":
            if not out or not out[-1][1].endswith("\n"):
                raise ValueError("a '\\ No newline' marker follows no line ending in a newline")
            out[-1] = (out[-1][0], out[-1][1][:-1])
        else:
            out.append((line[0], line[1:]))
    return tuple(out)


def _hunk(data: Any, index: int, fix: str, change: FileChange) -> Hunk:
    patch, where = change.patch, change.where
    try:
        body = data.get("body")
        if body is not None:
            if not isinstance(body, str):
                raise TypeError("body is not a string")
            lines: Tuple[Tuple[str, str], ...] = ()
            kinds = _body_kinds(body)
        else:
            lines = tuple(map(tuple, data["lines"]))
            if any(len(line) != 2 for line in lines):
                raise ValueError("a line is not a [kind, text] pair")
            lines = tuple((str(k), str(t)) for k, t in lines)
            kinds = Counter(k for k, _t in lines)
        hunk = Hunk(index, int(data["old_start"]), int(data["old_count"]),
                    int(data["new_start"]), int(data["new_count"]), lines, body)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PatchFormatError("fix %s, %s: hunk #%d of %s for %s is malformed (%s)"
                               % (fix, patch, index, patch, where, exc),
                               fix=fix, hunk=index, **change.named()) from None
    old, new = kinds[" "] + kinds["-"], kinds[" "] + kinds["+"]
    if set(kinds) - _KINDS or old != hunk.old_count or new != hunk.new_count:
        raise PatchFormatError(
            "%s: hunk #%d for %s has %d old / %d new lines but its header says %d / %d; "
            "the patch file is damaged, regenerate it"
            % (patch, index, where, old, new, hunk.old_count, hunk.new_count),
            fix=fix, hunk=index, **change.named())
    return hunk


def _body_kinds(body: str) -> Counter:
    """How many lines of each kind a hunk ``body`` holds (``body_lines``' check included),
    counted in the text: no line is made unless it has a "No newline" marker."""
    if body.startswith("\\") or "\n\\" in body:
        return Counter(k for k, _t in body_lines(body))
    kinds: Counter = Counter()
    if not body:
        return kinds
    total = body.count("\n") + (body[-1] != "\n")
    plus = body.count("\n+") + (body[0] == "+")
    minus = body.count("\n-") + (body[0] == "-")
    space = total - plus - minus
    if space and body.count("\n ") + (body[0] == " ") != space:
        return Counter(k for k, _t in body_lines(body))  # a line of another kind: say which
    for kind, n in ((" ", space), ("-", minus), ("+", plus)):
        if n:
            kinds[kind] = n
    return kinds


@record_dataclass(frozen=True)
class Placement(Record):
    """Where one hunk landed."""

    patch: str
    index: int
    expected_line: int
    line: int
    offset: int

    def as_dict(self) -> Dict[str, Any]:  # dataclasses.asdict's answer, without its deep copy
        return {"patch": self.patch, "index": self.index, "expected_line": self.expected_line,
                "line": self.line, "offset": self.offset}


def locate(lines: List[str], old: List[str], expected: int, lo: int = 0) -> Optional[int]:
    """The index nearest ``expected`` (not before ``lo``) where ``old`` matches exactly."""
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


Seen = Callable[[List[str], "Hunk", int, List[str]], None]  # (file lines, hunk, index, old side)


def apply_change(text: Optional[str], change: FileChange,
                 seen: Optional[Seen] = None) -> Tuple[Optional[str], List[Placement]]:
    """Apply one FILE record to the current text (None: the file is absent); ``seen``, if
    given, is called with each hunk of a modify as it is placed (the file's lines as read,
    the hunk, the index its old side was found at, that old side)."""
    if change.op == "create":
        if text is not None:
            raise ConflictError("%s: %s creates this file but it already exists; remove it or "
                                "roll back whatever created it" % (change.where, change.patch),
                                **change.named())
        new = "".join([h.added_text() for h in change.hunks])
        return new, [Placement(change.patch, h.index, h.new_start, h.new_start, 0) for h in change.hunks]
    if text is None:
        raise ConflictError("%s: %s changes this file but it does not exist"
                            % (change.where, change.patch), **change.named())
    lines = split_lines(text)
    if change.op == "delete":
        old = [t for h in change.hunks for t in h.sides()[0]]
        if old != lines:
            _conflict(change, change.hunks[0] if change.hunks else None, lines, old, 0,
                      "deletes this file but its content differs from the patch")
        return None, [Placement(change.patch, h.index, h.old_start, h.old_start, 0) for h in change.hunks]
    placements: List[Placement] = []
    out: List[str] = []
    prev, carried = 0, 0  # where the file is copied up to; the offset of the previous hunk
    for hunk in change.hunks:
        expected = hunk.expected_index + carried
        removed, added = hunk.sides()
        idx = locate(lines, removed, expected, prev)
        if idx is None:
            _conflict(change, hunk, lines, removed, max(0, min(expected, len(lines))),
                      "does not apply: its context is not in the file (zero fuzz)")
        if seen is not None:
            seen(lines, hunk, idx, removed)
        carried = idx - hunk.expected_index
        line = idx if hunk.old_count == 0 else idx + 1
        placements.append(Placement(change.patch, hunk.index, hunk.old_start, line,
                                    line - hunk.old_start))
        out.extend(lines[prev:idx])
        out.extend(added)
        prev = idx + len(removed)
    out.extend(lines[prev:])
    return "".join(out), placements


def _conflict(change: FileChange, hunk: Optional[Hunk], lines: Sequence[str], old: Sequence[str],
              at: int, what: str) -> NoReturn:
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
    elif wanted is not None and found is not None and (
            wanted.endswith("\r\n") != found.endswith("\r\n")) and (
            wanted.rstrip("\r\n") == found.rstrip("\r\n")):
        # judged against the tree: the same text, another line ending (a CRLF file, an LF patch)
        difference = "line %d: the line ends in %s in the patch and in %s in the file" % (
            diff_line, _ending(wanted), _ending(found))
        what += (" (different line endings: convert the patch's to the file's, e.g. unix2dos "
                 "or dos2unix on the patch)")
    else:
        difference = "line %d: the patch expects %s but the file has %s" % (
            diff_line, _shown(wanted), "end of file" if found is None else _shown(found))
        if found is not None and wanted is not None and _ending(wanted) != _ending(found) and (
                wanted.rstrip("\r\n") == found.rstrip("\r\n")):
            difference = ("line %d: the same text with another line ending: the patch expects "
                          "%s (%s) but the file has %s (%s)" % (
                              diff_line, _shown(wanted), _ending(wanted), _shown(found),
                              _ending(found)))
    raise ConflictError(
        "%s: hunk #%d of %s %s; expected at line %d; first difference at %s. %s"
        % (change.where, number, change.patch, what, expected_line, difference, STALE),
        hunk=number, expected_line=expected_line,
        first_difference={"line": diff_line, "expected": wanted, "found": found},
        **change.named())


#: A hunk that does not apply: the advice for a patch gone stale (or a target on another
#: release), which a conflict with a better reason takes out (:func:`without_stale_advice`).
STALE = ("Refresh the patch against this tree or check that the target runs the release the "
         "fix was written for")


def without_stale_advice(exc: ConflictError) -> ConflictError:
    """``exc`` without :data:`STALE`, for a conflict whose cause the caller knows better."""
    exc.message = exc.message.replace(". " + STALE, "")
    exc.args = (exc.message,)
    return exc


def of_fix(exc: ConflictError, fix: str, others: Sequence[str] = (),
           dependents: Sequence[str] = ()) -> ConflictError:
    """``exc``, a conflict met while placing (or undoing) fix ``fix``'s change, naming that fix:
    the hunks know their file, not their fix. ``others``: the fixes that wrote the file before
    (earlier in the run, or applied there), whose change the hunk's context may no longer
    find, said as such rather than as a stale patch alone. ``dependents``: the fixes that
    depend on ``fix`` (depends_on, however deep): one of them among ``others`` was applied on
    top of ``fix``'s change, which is no longer under it; ``fix`` is never told to build on
    its own dependent."""
    exc.details.setdefault("fix", fix)
    if not exc.message.startswith("fix %s:" % fix):
        exc.message = "fix %s: %s" % (fix, exc.message)
    on_top = [o for o in others if o in dependents]
    others = [o for o in others if o not in dependents]
    if on_top and "others" not in exc.details:
        exc.details["dependents"] = on_top
        named = ("fix %s" % on_top[0] if len(on_top) == 1 else "fixes %s and %s"
                 % (", ".join(on_top[:-1]), on_top[-1]))
        exc.message += ("; %s, which depend%s on %s, changed this file on top of %s change, and "
                        "that change is no longer under it (edited or reverted since): roll %s "
                        "back (patchkit rollback %s), then apply %s and %s again"
                        % (named, "s" if len(on_top) == 1 else "", fix, fix + "'s",
                           "it" if len(on_top) == 1 else "them", " ".join(on_top), fix,
                           " ".join(on_top)))
    if others and "others" not in exc.details:
        exc.details["others"] = list(others)
        named = ("fix %s" % others[0] if len(others) == 1 else "fixes %s and %s"
                 % (", ".join(others[:-1]), others[-1]))
        them = "it" if len(others) == 1 else "them"
        exc.message += ("; %s changed this file before it, and may have changed the lines this "
                        "hunk expects: see %s, and make this fix build on %s: depends_on, and "
                        "its change captured on top of %s (apply %s with --commit in the checkout, "
                        "then patchkit refresh %s --include-applied: docs/authoring.md)"
                        % (named, ", ".join("patchkit show %s" % o for o in others), them, them,
                           " ".join(others), fix))
    exc.args = (exc.message,)
    return exc


def _ending(line: str) -> str:
    """How a line ends, as a message names it."""
    if line.endswith("\r\n"):
        return "CRLF (\\r\\n)"
    if line.endswith("\n"):
        return "LF (\\n)"
    return "CR (\\r)" if line.endswith("\r") else "no newline"


def _shown(line: Optional[str]) -> str:
    """A line as a message quotes it: without its line ending and, unless it holds a character
    that would not show (a control character, trailing blanks), unescaped."""
    text = (line or "").rstrip("\r\n")
    if text != text.rstrip() or any(not c.isprintable() and c != "\t" for c in text):
        return repr(text)
    return '"%s"' % text


def side_found(lines: List[str], hunk: Hunk, new_side: bool) -> bool:
    """Whether one side of a hunk occurs anywhere in the file (status' "present" detection)."""
    side = hunk.sides()[1 if new_side else 0]
    start = (hunk.new_start - 1) if new_side else hunk.expected_index
    return bool(side) and locate(lines, side, max(start, 0)) is not None
