"""``patchkit export``: fixes as an mbox ``git am`` applies, a quilt directory ``quilt push
-a`` applies, or DEP-3 headed patches (docs/interop.md). The diffs are the series' own
bytes; the messages come from the manifest."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..authoring import PLACEHOLDER_AUTHOR, catalog_identity
from ..catalog import Catalog
from ..catalog.model import DEFAULT_ROOT, Fix
from ..errors import UsageError
from . import dep3, mbox, quilt, split_diff

FORMATS = ("mbox", "quilt", "dep3")


@dataclass
class ExportResult:
    format: str
    files: list[Path] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _message_of(text: str) -> tuple[str, str]:
    """(subject, body) of a series file's own mail header, if it has one."""
    head = text.split("\ndiff --git ", 1)[0]
    match = re.search(r"^Subject:[ \t]*(?:\[PATCH[^\]]*\][ \t]*)?(.*)$", head, re.M)
    if not match:
        return "", ""
    rest = head[match.end():].lstrip("\n")
    body = re.split(r"^---[ \t]*$", rest, maxsplit=1, flags=re.M)[0]
    return match[1].strip(), body.strip()


def _diffs(fix: Fix) -> list[tuple[str, str, str, str, str]]:
    """(file, subject, body, diff, root) of each patch of the fix's series."""
    if not fix.patches:
        raise UsageError(
            f"{fix.name} has no series of its own: it is a git revert ([revert]) computed at "
            "apply time from the target's history, so there is no patch to export. Export the "
            f"fix it reverts ({fix.revert.fix or fix.revert.commit if fix.revert else '?'}), "
            "or give it a [[patches]] fallback series", fix=fix.name)
    out = []
    for ref in fix.patches:
        text = ref.path.read_bytes().decode("utf-8", "surrogateescape")
        _head, diff = split_diff(text, ref.path)
        subject, body = _message_of(text)
        out.append((ref.file, subject or ref.description or fix.title, body, diff, ref.root))
    return out


def _tag(fix: Fix) -> list[tuple[str, str]]:
    return [("Patchkit-Fix", f"{fix.name} v{fix.version}")]


def _rooted(headers: list[tuple[str, str]], root: str) -> list[tuple[str, str]]:
    """The headers, saying the patch's root when it is not sglang (import reads it back)."""
    return headers + [("Patchkit-Root", root)] if root != DEFAULT_ROOT else headers


def export(catalog: Catalog, names: Sequence[str], fmt: str, out: Path) -> ExportResult:
    """Write the fixes ``names`` in format ``fmt`` under ``out``: ``<fix>.mbox`` each; or a
    quilt directory (``series``, ``<fix>/<patch>``); or ``<fix>/<patch>`` with DEP-3 headers."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}", format=fmt)
    fixes = [catalog.get(name) for name in names]
    planned = [(fix, _diffs(fix)) for fix in fixes]  # every refusal before any file is written
    result = ExportResult(fmt, fixes=[f.name for f in fixes])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    listed: list[str] = []
    fallback = None
    for fix, diffs in planned:
        headers = dep3.headers_of(fix, last_update=fmt != "mbox")
        if fmt == "mbox":
            author = fix.author
            if not author:
                fallback = fallback or catalog_identity(catalog) or ""
                author = fallback or PLACEHOLDER_AUTHOR
                who = "the catalog repository's git user" if fallback else "a placeholder"
                result.notes.append(
                    f"{fix.name} names no author (manifest `author`): its mail is From {author}"
                    f" ({who}); set author = \"Name <email>\" in the manifest to say who wrote it")
                headers = headers + [("Patchkit-Author", "unset")]
            date = mbox.rfc2822(fix.changelog[-1].date) if fix.changelog else ""
            mails = []
            for i, (_file, subject, body, diff, root) in enumerate(diffs, 1):
                first = i == 1
                mails.append(mbox.message(
                    author, date, fix.title if first else subject,
                    fix.rationale if first else body,
                    _rooted(headers if first else _tag(fix), root),
                    diff, number=i, total=len(diffs)))
            path = out / f"{fix.name}.mbox"
            path.write_text("".join(mails), encoding="utf-8", errors="surrogateescape", newline="")
            result.files.append(path)
            continue
        (out / fix.name).mkdir(exist_ok=True)
        for i, (file, subject, body, diff, root) in enumerate(diffs, 1):
            first = i == 1
            text = quilt.patch_text(
                fix.title if first else subject, fix.rationale if first else body,
                fix.author, _rooted(headers if first else _tag(fix), root), diff)
            path = out / fix.name / file
            path.write_text(text, encoding="utf-8", errors="surrogateescape", newline="")
            result.files.append(path)
            listed.append(f"{fix.name}/{file}")
    if fmt == "quilt":
        result.files.append(quilt.write_series(out, listed))
    return result


__all__ = ["FORMATS", "ExportResult", "export", "catalog_identity"]
