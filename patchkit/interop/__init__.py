"""Patches in other tools' formats, in and out (docs/interop.md): git format-patch and mbox
(:mod:`.mbox`), quilt series (:mod:`.quilt`), DEP-3 headers (:mod:`.dep3`); ``patchkit
import`` (:mod:`.importer`) and ``patchkit export`` (:mod:`.exporter`).

The readers turn every format into :class:`Patch` records; unidiff (patchkit.catalog.series)
stays the one reader of the diffs themselves."""

from __future__ import annotations

import re
from dataclasses import field
from pathlib import Path

from ..engine import fsops
from ..engine.paths import check_rel
from ..engine.recordbase import MutableRecord, record_dataclass
from ..errors import PatchFormatError, UnsafePathError


@record_dataclass(frozen=False)
class Patch(MutableRecord):
    """One patch read from a foreign format: its message and its diff, byte-exact."""

    source: Path  # the file it came from, named by every error about it
    subject: str
    body: str = ""  # the free text: the rationale of a fix made from it
    author: str = ""  # "Name <email>"
    date: str = ""  # as the format gave it (RFC 2822 in a mail, ISO in DEP-3's Last-Update)
    fields: list[tuple[str, str]] = field(default_factory=list)  # DEP-3 headers / trailers
    diff: str = ""  # from the first file header to the end (surrogateescape'd bytes)
    diff_line: int = 1  # the line of ``source`` the diff starts at (errors name the file's lines)


#: the largest patch, mbox or series file patchkit reads (the largest real diff seen: 184 MB)
MAX_INPUT = 1 << 30


def read_regular(path: Path, what: str = "the file") -> bytes:
    """The bytes of a file a user gave (a patch, an mbox, a series), refused with a
    PatchFormatError when it is not a regular file (a FIFO is not waited on, /dev/zero not
    read) or is larger than MAX_INPUT."""
    try:
        return fsops.read_regular(str(path), MAX_INPUT)
    except fsops.NotRegular as exc:
        raise PatchFormatError(f"{path}: {what} {exc.what}. Give a regular file (save the patch "
                               "to a file first)", file=str(path)) from None
    except OSError as exc:
        raise PatchFormatError(f"{path}: cannot read {what}: {exc.strerror}",
                               file=str(path)) from None


_DIFF_START = re.compile(r"^(diff |Index: |--- \S)", re.M)


def split_diff(text: str, source: Path) -> tuple[str, str]:
    """(what precedes the diff, the diff) of a patch's text; the diff starts at its first
    ``diff``/``Index:`` line or ``---``/``+++`` pair."""
    for match in _DIFF_START.finditer(text):
        start = match.start()
        end = text.find("\n", start)
        if text.startswith("--- ", start) and not (end >= 0 and text.startswith("+++ ", end + 1)):
            continue  # a "--- " that is no file header (a mail's "---" has no space after it)
        return text[:start], text[start:]
    raise PatchFormatError(f"{source}: no diff found (no 'diff --git', '---'/'+++' file "
                           "headers). Give the file the patch itself, as git diff or "
                           "git format-patch writes it", file=str(source))


def strip_signature(diff: str) -> str:
    """The diff without git format-patch's signature (``-- `` then the git version)."""
    match = re.search(r"\n-- \n[^\n]*\n?\s*\Z", diff)
    return diff[:match.start() + 1] if match else diff


def refuse_crlf(text: str, source: Path) -> None:
    """CRLF on a header line means a mail client or editor converted the whole patch: its
    hunks would not match the tree. Said, not guessed at."""
    for number, line in enumerate(text.split("\n"), 1):
        if line.endswith("\r") and re.match(r"(From|Subject|Date|Description|diff |--- |"
                                            r"\+\+\+ |@@ )", line):
            raise PatchFormatError(
                f"{source}:{number}: the patch has CRLF (\\r\\n) line endings; a mail client "
                "or editor converted it, and its hunks would not match the tree. Convert it "
                f"back (dos2unix {source.name}) or export it again, then import", file=str(source),
                line=number)


def refuse_escape(path: str, source: Path) -> None:
    """A path of a patch must stay inside the tree it patches."""
    parts = path.split("/")
    if path.startswith("/") or ".." in parts or not path:
        raise PatchFormatError(
            f"{source}: the patch names {path!r}, outside the tree it patches (an absolute "
            "path or '..'). patchkit imports only patches within the tree; check where the "
            "patch comes from, or fix its file headers (and -p strip level)", file=str(source),
            path=path)
    try:  # the rest of what apply refuses of a path without looking at a tree (.git/, ...)
        check_rel("sglang", path)
    except UnsafePathError as exc:
        raise PatchFormatError(
            f"{source}: the patch names {path!r}: {exc.message.split(' ', 1)[1]}. apply would "
            "refuse it, so import does; check where the patch comes from", file=str(source),
            path=path) from None


__all__ = ["Patch", "split_diff", "strip_signature", "refuse_crlf", "refuse_escape",
           "read_regular", "MAX_INPUT"]
