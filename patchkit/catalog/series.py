"""Patch files of a series, read byte-exact into the engine's FILE records (docs/design.md),
refusing what unidiff would silently skip; and written from two texts in the same dialect."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

import unidiff
import unidiff.errors
from unidiff.constants import RE_HUNK_HEADER

from ..engine.hunks import split_lines  # the engine splits files the same way
from ..errors import PatchFormatError
from .patchmail import MBOX_FROM as _MBOX_FROM  # the mbox From line: patchmail's

DEV_NULL = "/dev/null"
DEFAULT_MODE = "100644"
_REFUSED_MODES = {"120000": "a symbolic link", "160000": "a git submodule"}
_REFUSED_INFO = (("rename from ", "renames"), ("copy from ", "copies"))
_NO_NEWLINE = "\\ No newline at end of file\n"


class _Counted:
    """Feeds lines to unidiff and remembers the line number it is at, for error messages."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.at = 0
        self.last_hunk = 0

    def __iter__(self) -> Iterator[str]:
        for self.at, line in enumerate(self.lines, 1):
            if line.startswith("@@"):
                self.last_hunk = self.at
            yield line


class _Section(Sequence[str]):
    """The lines of one ``diff --git`` section, indexed by their place in the whole patch
    (``base`` lines before it): only this section's text is split into lines; a line outside
    it reads as "" (nothing a check looks for), and the patch seems to end where it ends."""

    def __init__(self, lines: list[str], base: int) -> None:
        self.lines, self.base = lines, base

    def __len__(self) -> int:
        return self.base + len(self.lines)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            start = i.start or 0
            return self.lines[max(0, start - self.base):]  # lines[start:] is all that is asked
        return self.lines[i - self.base] if i >= self.base else ""


def parse_patch(path: Path | str, root: str, data: bytes | None = None) -> list[dict[str, Any]]:
    """The FILE records of one patch file (hunks as ``lines``), in the order its files appear."""
    path = Path(path)
    if data is None:
        data = _read(path)
    return _parse(path, data, root)


def series_records(patches: Sequence[tuple[Path | str, str]]
                   ) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The digests of each ``(path, root)`` patch and the FILE records of the whole series,
    each hunk in the request's ``body`` form; ``OSError`` when a patch cannot be read.

    A patch's digests are ``sha256``, of the whole file, and ``diff_sha256``, of its change
    alone (:func:`diff_digest`): what tells a series from another (``refuse_changed_series``)
    is the change, not a mail header, a message or the context git writes after ``@@``."""
    digests: list[dict[str, str]] = []
    files: list[dict[str, Any]] = []
    for path, root in patches:
        data = _read(Path(path), oserror=True)
        records = _parse(Path(path), data, root, compact=True)
        digests.append({"sha256": hashlib.sha256(data).hexdigest(),
                        "diff_sha256": diff_digest(records)})
        files.extend(records)
        del data
    return digests, files


def diff_digest(records: Sequence[dict[str, Any]]) -> str:
    """The sha256 of the change one patch makes: each file's root, path, operation and mode,
    and each hunk's place, counts and lines (compact FILE records, ``series_records``), in
    order. Nothing else of the patch file counts: not its mail or DEP-3 header, message,
    trailers, ``index`` lines, the function name after ``@@``, nor the file's own name."""
    import json

    change = [[r["root"], r["path"], r["op"], r["mode"],
               [[h["old_start"], h["old_count"], h["new_start"], h["new_count"], h["body"]]
                for h in r["hunks"]]] for r in records]
    return hashlib.sha256(json.dumps(change, ensure_ascii=True).encode()).hexdigest()


def _read(path: Path, oserror: bool = False) -> bytes:
    """A patch file's bytes: a regular file (not a FIFO, which would block), bounded;
    ``oserror``: a file that cannot be read raises the OSError (series_records' contract)."""
    from ..engine import fsops
    from ..interop import MAX_INPUT, read_regular

    if oserror:
        try:
            return fsops.read_regular(str(path), MAX_INPUT)
        except fsops.NotRegular as exc:
            raise PatchFormatError(f"{path}: the patch {exc.what}. Put the patch itself there",
                                   file=str(path)) from None
    return read_regular(path, "the patch")


def patch_text(path: Path | str) -> str:
    """A patch file's text, its line ends as they are: a CRLF file's hunks carry their CRs,
    which ``Path.read_text`` (universal newlines) would drop, so they no longer matched the
    file they change (``upstream check`` called a fix to a CRLF file not contained)."""
    return _text(_read(Path(path)))


def _fail(path: Path, line: int, message: str, todo: str) -> PatchFormatError:
    return PatchFormatError(f"{path}:{line}: {message}. {todo}", file=str(path), line=line)


_MBOX_FROM_BYTES = re.compile(_MBOX_FROM.pattern.encode(), re.M)
_DIFF_GIT = b"diff --git "


def _diff_git_lines(data: bytes) -> list[int]:
    """Where each line starting ``diff --git `` starts (``bytes.find``: a multi-line regex
    tries every position of the patch)."""
    out = [0] if data.startswith(_DIFF_GIT) else []
    at = data.find(b"\n" + _DIFF_GIT)
    while at >= 0:
        out.append(at + 1)
        at = data.find(b"\n" + _DIFF_GIT, at + 1)
    return out


_SOLID = re.compile(rb"[!-~]")  # a printable ASCII character: not white space


def _blank(data: bytes) -> bool:
    """No line holds anything but white space (as ``str.strip`` sees it); found without a
    copy of the patch unless it holds no printable ASCII character at all."""
    return _SOLID.search(data) is None and not _text(data).strip()


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _parse(path: Path, data: bytes, root: str, compact: bool = False) -> list[dict[str, Any]]:
    """The FILE records of a patch; ``compact``: each hunk as its ``body`` (the request's form).
    The patch is read one ``diff --git`` section at a time (no hunk line can start with
    "diff"): only one section's text, lines and unidiff objects (an object per line, about ten
    times the text) live at once, and a compact record keeps only its hunks' bodies."""
    if _blank(data):
        raise _fail(path, 1, "the patch is empty", "Write the change as a unified diff "
                    "(git diff, or patchkit's authoring helpers)")
    mails = [m.start() for m, _ in zip(_MBOX_FROM_BYTES.finditer(data), range(2))]
    if len(mails) > 1:  # unidiff would read every mail's diff as one patch
        count = sum(1 for _ in _MBOX_FROM_BYTES.finditer(data))
        raise _fail(path, data.count(b"\n", 0, mails[1]) + 1, f"the file holds {count} mails "
                    "(an mbox of several patches), and a [[patches]] entry is one patch",
                    "Split it into one file per mail (git mailsplit), or import it as fixes "
                    "with `patchkit import --mbox FILE [--split]` (docs/interop.md)")
    starts = _diff_git_lines(data)
    bounds = [0, *starts[1:], len(data)] if len(starts) > 1 else [0, len(data)]
    records: list[dict[str, Any]] = []
    base = 0  # lines of the patch before the section
    for a, b in zip(bounds, bounds[1:]):
        lines = split_lines(_text(data[a:b]))
        section = _Section(lines, base)
        for patched, spans in _files(path, data, lines, base):
            records.append(_file_record(path, section, patched, root, compact, base, spans))
        base += len(lines)
    if not records:
        raise _fail(path, 1, "no file changes found (no ---/+++ headers or hunks)",
                    "Write the change as a unified diff")
    return records


def _files(path: Path, data: bytes, lines: list[str], base: int) -> Iterator[Any]:
    """unidiff's PatchedFile of each file of one section of the patch, in order, with where
    each of its hunks lies in ``lines`` (``_spans``); line numbers are the section's, but for
    the file's own (``base`` lines before the section).

    unidiff reads the section without making an object per line (``metadata_only``: it still
    checks every line's kind and every hunk's length against its header), and each hunk's
    lines are then taken from ``lines`` where unidiff found them. A section with a line that
    is not a plain ``" "``, ``"-"`` or ``"+"`` line ending in a newline (a "No newline"
    marker, a bare empty line...) is read again with unidiff's lines, as before."""
    try:
        patchset = unidiff.PatchSet(lines, metadata_only=True)
    except unidiff.errors.UnidiffParseError:
        _parse_failure(path, split_lines(_text(data)))  # parsed again, counting lines, to say where
        raise
    spans = _spans(lines, patchset)
    if spans is None:
        patchset = unidiff.PatchSet(lines)  # the same reading, with a Line per line
    patchset.reverse()  # each file let go once its record is made
    n = 0
    while patchset:
        patched = patchset.pop()
        if base:
            patched.diff_line_no = (patched.diff_line_no or 0) + base
        yield patched, None if spans is None else spans[n]
        n += 1


def _plain(text: str, count: int) -> bool:
    """Whether ``text`` is ``count`` lines, each ending in a newline and starting with " ", "-"
    or "+" (counted in the text: no line is made)."""
    if not text:
        return count == 0
    if text[-1] != "\n" or text.count("\n") != count:
        return False
    # every line but the first starts right after a newline (the last newline ends the text)
    return (text[0] in " -+") + text.count("\n ") + text.count("\n-") + text.count("\n+") == count


def _spans(lines: list[str], patchset: Any) -> list[list[tuple[int, int, str]]] | None:
    """Per file of ``patchset`` (read with ``metadata_only``), per hunk: the index in ``lines``
    of its ``@@`` header and of the line after its last, and its lines' text; None when a
    hunk has a line :func:`_hunk` would read otherwise than as its kind and text (a "\\" marker, a line
    without a newline, a bare empty line), or a marker or an empty line follows it. Every ``@@`` line unidiff
    matched is a hunk header (no hunk line starts with "@"), in order."""
    out: list[list[tuple[int, int, str]]] = []
    at, size = 0, len(lines)
    for patched in patchset:
        spans = []
        for hunk in patched:
            while at < size and not (lines[at].startswith("@@") and RE_HUNK_HEADER.match(lines[at])):
                at += 1
            end = at + 1 + hunk.source_length + hunk.added  # unidiff counted these lines
            text = "".join(lines[at + 1:end])
            if end > size or not _plain(text, end - at - 1) or (
                    end < size and lines[end][:1] in ("\\", "\n")):
                return None  # a marker, or an empty line unidiff gives the hunk, may follow
            spans.append((at, end, text))
            at = end
        out.append(spans)
    return out


def _parse_failure(path: Path, lines: list[str]) -> None:
    """Raise the error of a patch unidiff refused, naming the line it stopped at."""
    counted = _Counted(lines)
    try:
        unidiff.PatchSet(counted)
    except unidiff.errors.UnidiffParseError as exc:
        line = counted.at
        if "shorter" in str(exc):
            line = counted.last_hunk
            message = (f"the hunk at line {line} has fewer lines than its header says "
                       f"(the patch ends at line {counted.at})")
        elif "Hunk diff line expected" in str(exc) and counted.last_hunk:
            # a line no hunk line starts like, inside the hunk its header says is this long:
            # that line is wrong, or (a hand-edited patch) the header's counts are
            header = lines[counted.last_hunk - 1].strip()
            message = (f"line {line} ({lines[line - 1].strip()[:60]!r}) is not a line of the "
                       f"hunk at line {counted.last_hunk} ({header[:60]}), whose header says "
                       "it runs on to there")
        else:
            message = f"malformed patch ({exc})".replace("\n", "")
        raise _fail(path, line, message, "Regenerate the patch, or fix the hunk header counts")
    raise _fail(path, counted.at, "malformed patch", "Regenerate the patch")


def _file_record(path: Path, lines: Sequence[str], patched: Any, root: str,
                 compact: bool = False, base: int = 0,
                 spans: list[tuple[int, int, str]] | None = None) -> dict[str, Any]:
    """``base``: lines of the patch before the section, added to a hunk line's number;
    ``spans``: where each hunk lies in the section (``_spans``), else its lines are unidiff's."""
    start = patched.diff_line_no or 1
    if patched.is_binary_file:
        raise _fail(path, start, "binary patches are not supported", "Ship the file through "
                    "a text patch, or keep binary files out of the series")
    info = [str(line) for line in (patched.patch_info or [])]
    for prefix, what in _REFUSED_INFO:
        if any(line.startswith(prefix) for line in info):
            raise _fail(path, start, f"{what} are not supported", "Express it as a delete "
                        "and a create (git diff --no-renames)")
    source, target = _header_names(lines, start, patched)
    git = any(line.startswith("diff --git ") for line in info)  # (git says a rename, a creation)
    if not git and DEV_NULL not in (source, target) and len(patched) == 1:
        # `diff -N`: a file absent on one side is dated the epoch and has no lines there
        hunk = patched[0]
        if _epoch(patched.source_timestamp) and hunk.source_start == hunk.source_length == 0:
            source = DEV_NULL
        elif _epoch(patched.target_timestamp) and hunk.target_start == hunk.target_length == 0:
            target = DEV_NULL
    op = "create" if source == DEV_NULL else "delete" if target == DEV_NULL else "modify"
    if op == "create":
        rel = target.removeprefix("b/")
    elif op == "delete":
        rel = source.removeprefix("a/")
    else:
        both = source.startswith("a/") and target.startswith("b/")
        rel, was = (target[2:], source[2:]) if both else (target, source)
        edited = None if git else _edited(was, rel)
        if edited is not None:
            rel = edited
        elif was != rel:
            raise _fail(path, start, f"the file is renamed ({source} -> {target})",
                        "Renames are not supported; express it as a delete and a create")
    if not rel or rel == DEV_NULL:
        raise _fail(path, start, "a file header names no path", "Regenerate the patch")
    mode = _mode(path, start, patched, op)
    if spans is None:
        hunks = [_hunk(path, h, compact, base) for h in patched]
    else:
        local = lines.lines if isinstance(lines, _Section) else list(lines)
        hunks = [_sliced(local, span, h, compact) for h, span in zip(patched, spans)]
    if not hunks and op == "modify" and mode is None:
        raise _fail(path, start, f"the change to {rel} has no hunks", "Regenerate the patch")
    if spans is None:
        _check_hunk_ends(path, lines, patched, base)
    else:
        _check_span_ends(path, lines, spans, base)
    return {"root": root, "path": rel, "patch": path.name, "op": op, "mode": mode, "hunks": hunks}


def _epoch(timestamp: Any) -> bool:
    """A ---/+++ timestamp of 1970-01-01 (in any zone's spelling): how ``diff -N`` dates the
    side a file is absent from."""
    return bool(timestamp) and str(timestamp).startswith(("1970-01-01", "1969-12-31"))


#: What ``diff -u`` users name the copy they kept of the file they edit: ``x.orig`` -> ``x``.
_KEPT_COPY = (".orig", ".old", ".bak", "~")


def _edited(was: str, now: str) -> str | None:
    """The file a plain (not git) diff from ``was`` to ``now`` edits when one of the two names
    is a copy kept beside the other, as GNU patch finds it (``x.orig`` -> ``x``: ``x``; ``x`` ->
    ``x.new``: ``x``); else None."""
    if any(was == now + kept for kept in _KEPT_COPY):
        return now
    if now == was + ".new":
        return was
    return None


def _header_names(lines: Sequence[str], start: int, patched: Any) -> tuple[str, str]:
    """The ---/+++ names of the file's section (exact even with spaces), else the git header."""
    first = lines[start - 1]
    if first.startswith("+++ ") and start >= 2 and lines[start - 2].startswith("--- "):
        return _header_name(lines[start - 2][4:]), _header_name(first[4:])
    source = None
    for line in lines[start:]:
        if line.startswith(("@@", "diff --git ")):
            break
        if line.startswith("--- "):
            source = _header_name(line[4:])
        elif line.startswith("+++ ") and source is not None:
            return source, _header_name(line[4:])
    git = _git_header_names(first) if first.startswith("diff --git ") else None
    src, dst = git or (_unquote(patched.source_file), _unquote(patched.target_file))
    return (DEV_NULL if patched.source_file == DEV_NULL else src,
            DEV_NULL if patched.target_file == DEV_NULL else dst)


def _header_name(raw: str) -> str:
    raw = raw.rstrip("\n")
    if raw.startswith('"'):
        return _unquote(raw[:_quoted_end(raw) + 1])
    return raw.split("\t", 1)[0].rstrip("\r")


_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def _quoted_end(raw: str) -> int:
    """The index of the quote closing the quoted name ``raw`` starts with (else its end)."""
    match = _QUOTED.match(raw)
    return match.end() - 1 if match else len(raw) - 1


def _git_header_names(line: str) -> tuple[str, str] | None:
    rest = line[len("diff --git "):].rstrip("\n")
    if rest.startswith('"'):
        end = _quoted_end(rest)
        return _unquote(rest[:end + 1]), _unquote(rest[end + 2:])
    # Unquoted: "a/X b/X" with the same X on both sides (git's own form, spaces allowed).
    half = (len(rest) - 1) // 2
    if len(rest) % 2 == 1 and rest[half] == " " and rest[:half][2:] == rest[half + 1:][2:]:
        return rest[:half], rest[half + 1:]
    return None


_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_ESCAPED = re.compile(rb'\\([0-7]{3}|[abtnvfr"\\])')


def _unquote(name: str) -> str:
    """Undo git's C-style quoting of a path ("a/f\\303\\251" -> a/fé)."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return name
    body = name[1:-1].encode("utf-8", "surrogateescape")
    out = _ESCAPED.sub(lambda m: bytes([int(m[1], 8) if len(m[1]) == 3 else _ESCAPES[m[1].decode()]]), body)
    return out.decode("utf-8", "surrogateescape")


def _mode(path: Path, start: int, patched: Any, op: str) -> str | None:
    for mode in (patched.source_mode, patched.target_mode):
        if mode in _REFUSED_MODES:
            raise _fail(path, start, f"the patch changes {_REFUSED_MODES[mode]}, which is not "
                        "supported", "Keep it out of the series")
    if op == "create":
        return patched.target_mode or DEFAULT_MODE
    if op == "modify" and patched.target_mode and patched.source_mode != patched.target_mode:
        return patched.target_mode
    return None


def _hunk(path: Path, hunk: Any, compact: bool = False, base: int = 0) -> dict[str, Any]:
    """A hunk record: its ``lines`` as [kind, text] pairs, or (``compact``) its ``body``, made
    from unidiff's lines directly (the same text as ``hunk_body`` of the lines)."""
    lines: list[list[str]] = []
    body: list[str] = []
    last = ""  # the text of the last line, for the "\\ No newline" marker
    for line in hunk:
        kind = line.line_type
        if kind == "\\":
            if not (lines or body) or not last.endswith("\n"):
                raise _fail(path, (line.diff_line_no or 0) + base, "'\\ No newline at end of file' "
                            "follows no line", "Remove the stray marker")
            last = last[:-1]
            if compact:
                body.append(_NO_NEWLINE)
            else:
                lines[-1][1] = last
        elif kind in (" ", "-", "+"):
            last = line.value
            if compact:
                body.append(kind + last if last.endswith("\n") else kind + last + "\n" + _NO_NEWLINE)
            else:
                lines.append([kind, last])
        # kind "" is a blank line after a complete hunk: a separator, not content.
    out: dict[str, Any] = {"old_start": hunk.source_start, "old_count": hunk.source_length,
                           "new_start": hunk.target_start, "new_count": hunk.target_length}
    if compact:
        out["body"] = "".join(body)
    else:
        out["lines"] = lines
    return out


def _sliced(lines: list[str], span: tuple[int, int, str], hunk: Any,
            compact: bool) -> dict[str, Any]:
    """A hunk record from its lines as they stand in the patch (each a plain " ", "-" or "+"
    line ending in a newline: ``_spans``, which joined them), the same as :func:`_hunk` makes
    of unidiff's."""
    out: dict[str, Any] = {"old_start": hunk.source_start, "old_count": hunk.source_length,
                           "new_start": hunk.target_start, "new_count": hunk.target_length}
    a, b, text = span
    if compact:
        out["body"] = text
    else:
        out["lines"] = [[line[0], line[1:]] for line in lines[a + 1:b]]
    return out


def _check_span_ends(path: Path, lines: Sequence[str], spans: list[tuple[int, int, str]],
                     base: int) -> None:
    """:func:`_check_hunk_ends` for hunks found by ``_spans`` (no marker follows any)."""
    for a, b, _text in spans:
        if b == a + 1:  # no line
            continue
        _check_after_hunk(path, lines, b + base, a + base + 1)  # b + base: the line after it


def _check_hunk_ends(path: Path, lines: Sequence[str], patched: Any, base: int = 0) -> None:
    """A body line right after a complete hunk means its header undercounts: unidiff would
    treat it as commentary and apply a truncated hunk. ``base``: as for :func:`_file_record`."""
    for hunk in patched:  # its lines in order: the first and the last numbered ones
        first = next((line.diff_line_no for line in hunk if line.diff_line_no), None)
        if first is None:
            continue
        first += base
        at = next(line.diff_line_no for line in reversed(hunk) if line.diff_line_no) + base
        # at is 1-based; lines[at] is the next line
        while at < len(lines) and lines[at].startswith("\\"):
            at += 1
        _check_after_hunk(path, lines, at, first - 1)


def _check_after_hunk(path: Path, lines: Sequence[str], at: int, header_line: int) -> None:
    """Refuse a body line at index ``at``, right after the hunk whose header is at line
    ``header_line``: the header undercounts."""
    if at >= len(lines):
        return
    nxt = lines[at]
    is_body = nxt[:1] in ("+", " ", "-") and not nxt.startswith(("--- ", "+++ "))
    if is_body and nxt.rstrip("\r\n") != "-- ":  # "-- " opens a mail signature
        raise _fail(path, at + 1, f"line {at + 1} continues the hunk at line {header_line} "
                    "beyond the lengths its header gives",
                    "Fix the hunk header counts, or regenerate the patch")


# -- writing ---------------------------------------------------------------------------------

_QUOTE_AS = {'"': '\\"', "\\": "\\\\", "\t": "\\t", "\n": "\\n"}


def _quote(name: str) -> str:
    """git's C quoting, only when the path needs it (quote, backslash, control, non-ASCII)."""
    if name.isascii() and name.isprintable() and '"' not in name and "\\" not in name:
        return name
    out = [_QUOTE_AS.get(chr(byte)) or (f"\\{byte:03o}" if byte < 0x20 or byte >= 0x7F else chr(byte))
           for byte in name.encode("utf-8", "surrogateescape")]
    return '"' + "".join(out) + '"'


def _side(prefix: str, path: str) -> str:
    quoted = _quote(prefix + path)
    # git ends a name holding a space with a tab, so the header cannot be misread.
    return quoted + ("\t" if " " in quoted and not quoted.startswith('"') else "")


def diff_files(old: bytes | None, new: bytes | None, path: str, *,
               mode: str = DEFAULT_MODE, old_mode: str | None = None) -> str:
    """A git-style unified diff of one file (``None`` = absent); "" when nothing changed.
    ``mode`` is the git mode after the change, ``old_mode`` before it (default: the same)."""
    import difflib  # here: reading a series (a status, an apply) writes no diff

    old_mode = old_mode or mode
    mode_changed = old is not None and new is not None and old_mode != mode
    if old == new and not mode_changed:
        return ""
    header = f"diff --git {_quote('a/' + path)} {_quote('b/' + path)}\n"
    if old is None:
        header += f"new file mode {mode}\n"
    elif new is None:
        header += f"deleted file mode {old_mode}\n"
    elif mode_changed:
        header += f"old mode {old_mode}\nnew mode {mode}\n"
    if old == new:
        return header
    a = split_lines((old or b"").decode("utf-8", "surrogateescape"))
    b = split_lines((new or b"").decode("utf-8", "surrogateescape"))
    if not a and not b:
        return header  # an empty file created or deleted: no hunk to show
    out = [header,
           f"--- {DEV_NULL if old is None else _side('a/', path)}\n",
           f"+++ {DEV_NULL if new is None else _side('b/', path)}\n"]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@\n")
        for tag, a1, a2, b1, b2 in group:
            out.extend(_body(" " if tag == "equal" else "-", a[a1:a2]))
            if tag != "equal":
                out.extend(_body("+", b[b1:b2]))
    return "".join(out)


#: A hunk header: its old start and count, and what follows the second ``@@``.
_HUNK_HEAD = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@(.*)")


def has_labels(text: str) -> bool:
    """Whether a series names a function after any hunk header's second ``@@``, as git diff
    does: a rewrite of it names them too (:func:`labelled`)."""
    return any(m and m.group(3).strip() for m in map(_HUNK_HEAD.match, text.split("\n")))


def labelled(diff: str, old: bytes | None) -> str:
    """One file's ``diff`` (of ``old``) with each hunk header naming the function it is in, as
    git diff's default funcname does: the nearest line above the hunk that starts with a
    letter, ``_`` or ``$``, cut to 80 bytes, trailing spaces removed. A header naming one
    already, and a new file's, are left as they are."""
    if old is None:
        return diff
    lines = split_lines(old.decode("utf-8", "surrogateescape"))
    out = []
    for line in diff.split("\n"):
        found = _HUNK_HEAD.fullmatch(line)
        if found is not None and not found.group(3):
            start, count = int(found.group(1)), int(found.group(2) or 1)
            above = start - 1 if count else start  # the lines above the hunk's first
            label = next((ln for ln in reversed(lines[:above])
                          if ln[:1].isascii() and (ln[:1].isalpha() or ln[:1] in "_$")), "")
            cut = label.encode("utf-8", "surrogateescape")[:80].rstrip()
            if cut:
                line += " " + cut.decode("utf-8", "surrogateescape")
        out.append(line)
    return "\n".join(out)


def _range(start: int, count: int) -> str:
    return str(start + 1) if count == 1 else f"{start if count == 0 else start + 1},{count}"


def _body(tag: str, lines: list[str]) -> Iterator[str]:
    return (tag + line if line.endswith("\n") else tag + line + "\n" + _NO_NEWLINE for line in lines)
