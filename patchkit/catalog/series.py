"""Patch files of a series, read byte-exact into the engine's FILE records (docs/design.md),
refusing what unidiff would silently skip; and written from two texts in the same dialect."""

from __future__ import annotations

import difflib
import hashlib
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

import unidiff
import unidiff.errors

from ..engine.hunks import hunk_body, split_lines  # the engine splits files the same way
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


def parse_patch(path: Path | str, root: str, data: bytes | None = None) -> list[dict[str, Any]]:
    """The FILE records of one patch file (hunks as ``lines``), in the order its files appear."""
    path = Path(path)
    if data is None:
        data = _read(path)
    return _parse(path, data, root)


def series_records(patches: Sequence[tuple[Path | str, str]]
                ) -> tuple[list[str], list[dict[str, Any]]]:
    """The sha256 of each ``(path, root)`` patch and the FILE records of the whole series, each
    hunk in the request's ``body`` form; ``OSError`` when a patch cannot be read."""
    digests: list[str] = []
    files: list[dict[str, Any]] = []
    for path, root in patches:
        data = _read(Path(path), oserror=True)
        digests.append(hashlib.sha256(data).hexdigest())
        files.extend(_parse(Path(path), data, root, compact=True))
        del data
    return digests, files


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


def _fail(path: Path, line: int, message: str, todo: str) -> PatchFormatError:
    return PatchFormatError(f"{path}:{line}: {message}. {todo}", file=str(path), line=line)


def _parse(path: Path, data: bytes, root: str, compact: bool = False) -> list[dict[str, Any]]:
    """The FILE records of a patch; ``compact``: each hunk as its ``body`` (the request's form),
    made while its file's unidiff objects are alive, then let go: unidiff keeps an object per
    line (about ten times the patch), so only one file's are held at a time."""
    lines = split_lines(data.decode("utf-8", "surrogateescape"))
    if not any(line.strip() for line in lines):
        raise _fail(path, 1, "the patch is empty", "Write the change as a unified diff "
                    "(git diff, or patchkit's authoring helpers)")
    mails = [n for n, line in enumerate(lines, 1) if _MBOX_FROM.match(line)]
    if len(mails) > 1:  # unidiff would read every mail's diff as one patch
        raise _fail(path, mails[1], f"the file holds {len(mails)} mails (an mbox of several "
                    "patches), and a [[patches]] entry is one patch", "Split it into one file "
                    "per mail (git mailsplit), or import it as fixes with `patchkit import "
                    "--mbox FILE [--split]` (docs/interop.md)")
    records: list[dict[str, Any]] = []
    for patched in _files(path, lines):
        record = _file_record(path, lines, patched, root)
        if compact:
            record["hunks"] = [dict({k: v for k, v in h.items() if k != "lines"},
                                    body=hunk_body(h["lines"])) for h in record["hunks"]]
        records.append(record)
    if not records:
        raise _fail(path, 1, "no file changes found (no ---/+++ headers or hunks)",
                    "Write the change as a unified diff")
    return records


def _files(path: Path, lines: list[str]) -> Iterator[Any]:
    """unidiff's PatchedFile of each file of the patch, in order. A git patch is parsed one
    ``diff --git`` section at a time (no hunk line can start with "diff"), so only one file's
    line objects live at once; line numbers are the whole patch's."""
    starts = [i for i, line in enumerate(lines) if line.startswith("diff --git ")]
    bounds = [0, *starts[1:], len(lines)] if len(starts) > 1 else [0, len(lines)]
    for a, b in zip(bounds, bounds[1:]):
        try:
            patchset = unidiff.PatchSet(lines[a:b] if len(bounds) > 2 else lines)
        except unidiff.errors.UnidiffParseError:
            _parse_failure(path, lines)  # parsed again, counting lines, to say where
            raise
        patchset.reverse()
        while patchset:
            patched = patchset.pop()
            if a:
                patched.diff_line_no = (patched.diff_line_no or 0) + a
                for hunk in patched:
                    for line in hunk:
                        if line.diff_line_no:
                            line.diff_line_no += a
            yield patched


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
        else:
            message = f"malformed patch ({exc})".replace("\n", "")
        raise _fail(path, line, message, "Regenerate the patch, or fix the hunk header counts")
    raise _fail(path, counted.at, "malformed patch", "Regenerate the patch")


def _file_record(path: Path, lines: list[str], patched: Any, root: str) -> dict[str, Any]:
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
    op = "create" if source == DEV_NULL else "delete" if target == DEV_NULL else "modify"
    if op == "create":
        rel = target.removeprefix("b/")
    elif op == "delete":
        rel = source.removeprefix("a/")
    else:
        both = source.startswith("a/") and target.startswith("b/")
        rel = target[2:] if both else target
        if (source[2:] if both else source) != rel:
            raise _fail(path, start, f"the file is renamed ({source} -> {target})",
                        "Renames are not supported; express it as a delete and a create")
    if not rel or rel == DEV_NULL:
        raise _fail(path, start, "a file header names no path", "Regenerate the patch")
    mode = _mode(path, start, patched, op)
    hunks = [_hunk(path, h) for h in patched]
    if not hunks and op == "modify" and mode is None:
        raise _fail(path, start, f"the change to {rel} has no hunks", "Regenerate the patch")
    _check_hunk_ends(path, lines, patched)
    return {"root": root, "path": rel, "patch": path.name, "op": op, "mode": mode, "hunks": hunks}


def _header_names(lines: list[str], start: int, patched: Any) -> tuple[str, str]:
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


def _hunk(path: Path, hunk: Any) -> dict[str, Any]:
    lines: list[list[str]] = []
    for line in hunk:
        kind = line.line_type
        if kind == "\\":
            if not lines or not lines[-1][1].endswith("\n"):
                raise _fail(path, line.diff_line_no or 0, "'\\ No newline at end of file' "
                            "follows no line", "Remove the stray marker")
            lines[-1][1] = lines[-1][1][:-1]
        elif kind in (" ", "-", "+"):
            lines.append([kind, line.value])
        # kind "" is a blank line after a complete hunk: a separator, not content.
    return {"old_start": hunk.source_start, "old_count": hunk.source_length,
            "new_start": hunk.target_start, "new_count": hunk.target_length, "lines": lines}


def _check_hunk_ends(path: Path, lines: list[str], patched: Any) -> None:
    """A body line right after a complete hunk means its header undercounts: unidiff would
    treat it as commentary and apply a truncated hunk."""
    for hunk in patched:
        numbers = [line.diff_line_no for line in hunk if line.diff_line_no]
        if not numbers:
            continue
        at = max(numbers)  # 1-based; lines[at] is the next line
        while at < len(lines) and lines[at].startswith("\\"):
            at += 1
        if at >= len(lines):
            continue
        nxt = lines[at]
        is_body = nxt[:1] in ("+", " ", "-") and not nxt.startswith(("--- ", "+++ "))
        if is_body and nxt.rstrip("\r\n") != "-- ":  # "-- " opens a mail signature
            raise _fail(path, at + 1, f"line {at + 1} continues the hunk at line "
                        f"{min(numbers) - 1} beyond the lengths its header gives",
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


def _range(start: int, count: int) -> str:
    return str(start + 1) if count == 1 else f"{start if count == 0 else start + 1},{count}"


def _body(tag: str, lines: list[str]) -> Iterator[str]:
    return (tag + line if line.endswith("\n") else tag + line + "\n" + _NO_NEWLINE for line in lines)
