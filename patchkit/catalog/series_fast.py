"""A fast reader of the plain git-diff subset, for the cold parse of a large series.

unidiff builds an object per line through several regexes: ~1 s for a 2000-patch release
series. Patches written by git (``git diff``, ``git format-patch``) are nearly always the same
simple shape, whose hunk bodies can be checked and cut out with string counts at C speed.

:func:`parse_git_patch` reads only that shape and gives exactly the records
:mod:`patchkit.catalog.series` makes with unidiff (hunks in the ``body`` form). On anything it does
not fully understand -- quoted or spaced paths, renames, copies, binary patches, symlinks,
an empty new file, a "\\r" in a header, a blank or odd line in a hunk, a header whose counts
do not match, a preamble or trailer line unidiff could read as part of the diff -- it returns
``None`` and the caller hands the patch to unidiff, which makes the record or the precise
error. It never raises and never guesses.
"""

from __future__ import annotations

import re
from typing import Any, Optional

_DIFF = "diff --git "
_MARKER = "\\ No newline at end of file\n"
_HUNK = re.compile(r"@@ -([0-9]+)(?:,([0-9]+))? \+([0-9]+)(?:,([0-9]+))? @@")
_MODE = re.compile(r"(new file mode|deleted file mode|old mode|new mode) ([0-9]+)\n\Z")
_INDEX = re.compile(r"index [0-9a-f]+\.\.[0-9a-f]+(?: ([0-9]+))?\n\Z")
_BAD_PATH = (" ", "\t", '"', "\\", "\r", "\n")
# Lines unidiff reads as part of a diff even outside one (or refuses there).
_DIFF_LIKE = ("--- ", "+++ ", "@@", "\\", "new file mode", "deleted file mode", "old mode",
              "new mode", "index ", "Binary file", "GIT binary patch", "similarity",
              "dissimilarity", "rename ", "copy ")
_REFUSED_MODES = ("120000", "160000")


def parse_git_patch(text: str, name: str) -> Optional[list[dict[str, Any]]]:
    """The FILE records of a patch's ``text`` (decoded with surrogateescape), or ``None`` when
    the patch is outside the subset read here (unidiff decides it then)."""
    if text.startswith(_DIFF):
        first = 0
    else:
        at = text.find("\n" + _DIFF)
        if at < 0:
            return None
        first = at + 1
        if not all(_safe(line, preamble=True) for line in text[:first].split("\n")[:-1]):
            return None
    starts = [first]
    at = text.find("\n" + _DIFF, first)
    while at >= 0:
        starts.append(at + 1)
        at = text.find("\n" + _DIFF, at + 1)
    starts.append(len(text))
    records = []
    for i in range(len(starts) - 1):
        record = _section(text[starts[i]:starts[i + 1]], name)
        if record is None:
            return None
        records.append(record)
    return records


def _safe(line: str, *, preamble: bool) -> bool:
    """A line outside any file's section that unidiff ignores: commit message, diffstat,
    format-patch's "-- " signature and version (a body-like line right after a hunk would
    make unidiff refuse it as an undercounted hunk, so only the preamble may hold them)."""
    if line.startswith(_DIFF_LIKE):
        return False
    if line[:1] in ("+", "-", " ") and not preamble:
        return line.rstrip("\r") == "-- "
    return True


def _section(section: str, name: str) -> Optional[dict[str, Any]]:
    """One ``diff --git`` section: headers, then hunks, then (last) lines unidiff ignores."""
    end = section.find("\n@@")
    if end < 0:
        return None  # no hunk: an empty file, a mode change, a binary or renamed file
    headers = section[:end + 1].split("\n")[:-1]
    path = _git_path(headers[0])
    if path is None or len(headers) < 3:
        return None
    old, new = headers[-2], headers[-1]
    source_mode = target_mode = None
    created = deleted = False
    for line in headers[1:-2]:
        mode = _MODE.match(line + "\n")
        if mode is not None:
            kind, value = mode.groups()
            if kind == "new file mode":
                created, target_mode = True, value
            elif kind == "deleted file mode":
                deleted, source_mode = True, value
            elif kind == "old mode":
                source_mode = value
            else:
                target_mode = value
            continue
        index = _INDEX.match(line + "\n")
        if index is None:
            return None
        if index.group(1) is not None:
            source_mode = source_mode or index.group(1)
            target_mode = target_mode or index.group(1)
    if created and deleted:
        return None
    if old != ("--- /dev/null" if created else "--- a/" + path):
        return None
    if new != ("+++ /dev/null" if deleted else "+++ b/" + path):
        return None
    if source_mode in _REFUSED_MODES or target_mode in _REFUSED_MODES:
        return None
    hunks = _hunks(section[end + 1:])
    if hunks is None:
        return None
    if created:
        op, mode = "create", target_mode or "100644"
    elif deleted:
        op, mode = "delete", None
    else:
        op = "modify"
        mode = target_mode if target_mode and source_mode != target_mode else None
    return {"root": "", "path": path, "patch": name, "op": op, "mode": mode, "hunks": hunks}


def _git_path(line: str) -> Optional[str]:
    """X of ``diff --git a/X b/X``, with X plain (no quoting, space, tab or CR)."""
    rest = line[len(_DIFF):]
    if len(rest) % 2 == 0 or not rest.startswith("a/"):
        return None
    half = (len(rest) - 1) // 2
    path = rest[2:half]
    if not path or rest[half:] != " b/" + path or any(bad in path for bad in _BAD_PATH):
        return None
    return path


def _hunks(text: str) -> Optional[list[dict[str, Any]]]:
    """The hunks of a section, from its first ``@@`` line to its end."""
    heads = [0]
    at = text.find("\n@@")
    while at >= 0:
        heads.append(at + 1)
        at = text.find("\n@@", at + 1)
    heads.append(len(text))
    hunks = []
    for i in range(len(heads) - 1):
        chunk = text[heads[i]:heads[i + 1]]
        eol = chunk.find("\n")
        header = _HUNK.match(chunk, 0, eol if eol >= 0 else len(chunk))
        if eol < 0 or header is None:
            return None
        a, b, c, d = header.groups()
        old_count = 1 if b is None else int(b)
        new_count = 1 if d is None else int(d)
        if old_count == 0 and new_count == 0:
            return None
        body = _body(chunk[eol + 1:], old_count, new_count, last=i == len(heads) - 2)
        if body is None:
            return None
        hunks.append({"old_start": int(a), "old_count": old_count, "new_start": int(c),
                      "new_count": new_count, "body": body})
    return hunks


def _body(chunk: str, old_count: int, new_count: int, *, last: bool) -> Optional[str]:
    """The hunk's body: all of ``chunk`` when its lines are exactly the counted ones (checked
    by counting line starts), else, for the section's last hunk, the counted lines with the
    rest checked to be lines unidiff ignores."""
    if _exact(chunk, old_count, new_count):
        return chunk
    if not last:
        return None
    lines = chunk.split("\n")
    if lines[-1] == "":
        lines.pop()
    else:
        return None  # a last line without "\n": leave it to unidiff
    olds = news = 0
    n = 0
    for line in lines:
        kind = line[:1]
        if kind == "\\" and n and line + "\n" == _MARKER and lines[n - 1][:1] != "\\":
            n += 1
            continue
        if kind == " ":
            olds += 1
            news += 1
        elif kind == "-":
            olds += 1
        elif kind == "+":
            news += 1
        else:
            return None
        n += 1
        if olds >= old_count and news >= new_count:
            break
    if olds != old_count or news != new_count:
        return None
    if n < len(lines) and lines[n] + "\n" == _MARKER:
        n += 1
    if not all(_safe(line, preamble=False) for line in lines[n:]):
        return None
    body = "\n".join(lines[:n]) + "\n"
    return body if _exact(body, old_count, new_count) else None


def _exact(chunk: str, old_count: int, new_count: int) -> bool:
    """Every line of ``chunk`` ends in "\\n" and is a context, removed or added line, or a
    "\\ No newline at end of file" marker after one of those (never two in a row, never
    first), and the lines count exactly ``old_count`` old and ``new_count`` new lines."""
    if not chunk.endswith("\n") or chunk[:1] not in (" ", "-", "+"):
        return False
    lines = chunk.count("\n")
    context = chunk.count("\n ") + (chunk[0] == " ")
    removed = chunk.count("\n-") + (chunk[0] == "-")
    added = chunk.count("\n+") + (chunk[0] == "+")
    markers = chunk.count("\n\\") if "\\" in chunk else 0
    if context + removed + added + markers != lines:
        return False
    if context + removed != old_count or context + added != new_count:
        return False
    if markers and (chunk.count("\n" + _MARKER) != markers or "\n" + _MARKER + "\\" in chunk):
        return False
    return True
