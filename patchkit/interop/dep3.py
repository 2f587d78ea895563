"""DEP-3 patch headers (https://dep-team.pages.debian.net/deps/dep3/) <-> manifest fields, in
both directions; the same mapping reads a mail's trailers. The table is :data:`FIELDS`, and
docs/interop.md shows it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..catalog.model import FORWARDING_STATES, Fix
from ..errors import PatchFormatError

#: DEP-3 header -> (manifest field, what it holds); every other header goes to [headers].
FIELDS: dict[str, tuple[str, str]] = {
    "Description": ("title, rationale", "first line: the title; the lines after it: the rationale"),
    "Subject": ("title, rationale", "DEP-3's other name for Description"),
    "Author": ("author", "Name <email>"),
    "From": ("author", "DEP-3's other name for Author"),
    "Origin": ("upstream.origin", "where the change comes from, as written"),
    "Bug": ("upstream.bug", "the bug report (Bug-<Vendor>: kept in [headers])"),
    "Forwarded": ("upstream.forwarding, upstream.reference",
                  "no = not-forwarded, not-needed = not-applicable, yes = proposed, "
                  "a URL = proposed with that reference"),
    "Applied-Upstream": ("upstream.applied", "the release or commit that contains it"),
    "Last-Update": ("changelog date", "the date of the imported version on import; the "
                    "latest changelog date on export"),
    "Patchkit-Fix": ("the fix's name and version", "written as 'NAME vN' on export; names the "
                     "fix, and gives its version, on import"),
    "Patchkit-Forwarding": ("upstream.forwarding", "exact state when Forwarded cannot say it"),
    "Patchkit-Reference": ("upstream.reference", "exact reference when Forwarded cannot say it"),
    "Patchkit-Author": ("author", "'unset': the mail's From is not the fix's author"),
    "Patchkit-Root": ("[[patches]] root", "the target root of the patch's paths, when not sglang"),
    "Patchkit-Fix-Root": ("upstream.root", "the root whose release the fix checks, when not "
                          "sglang"),
    "Patchkit-Release": ("upstream.base_release", "the release the series is written against; "
                         "import takes it when no --release or --target says otherwise"),
    "Patchkit-Depends-On": ("depends_on", "the fixes that must be applied first, comma-separated; "
                            "import refuses one the catalog does not hold"),
}

_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):(?:[ \t]+(.*)|)$")
_FORWARDED = {"not-forwarded": "no", "not-applicable": "not-needed"}


def forwarded_of(value: str | None) -> tuple[str, str]:
    """(forwarding, reference) a DEP-3 Forwarded value says; missing: not-forwarded."""
    if value is None or value.strip().lower() in ("", "no"):
        return "not-forwarded", ""
    if value.strip().lower() == "not-needed":
        return "not-applicable", ""
    return "proposed", "" if value.strip().lower() == "yes" else value.strip()


def headers_of(fix: Fix, *, last_update: bool = True) -> list[tuple[str, str]]:
    """The DEP-3 headers of a fix besides Description and Author, in a fixed order; those
    :func:`fields_of` maps back to exactly the fix's fields."""
    up = fix.upstream
    out: list[tuple[str, str]] = []
    out += [("Origin", up.origin)] if up.origin else []
    out += [("Bug", up.bug)] if up.bug else []
    value = _FORWARDED.get(up.forwarding) or up.reference or "yes"
    out.append(("Forwarded", value))
    said = forwarded_of(value)
    if said[0] != up.forwarding:
        out.append(("Patchkit-Forwarding", up.forwarding))
    if said[1] != up.reference:
        out.append(("Patchkit-Reference", up.reference))
    out += [("Applied-Upstream", up.applied)] if up.applied else []
    if last_update and fix.changelog:
        out.append(("Last-Update", fix.changelog[-1].date))
    out += list(fix.headers)
    out += fix_tag(fix)
    out += [("Patchkit-Release", up.base_release)] if up.base_release else []
    out += [("Patchkit-Fix-Root", up.root)] if up.root != "sglang" else []
    out += [("Patchkit-Depends-On", ", ".join(fix.depends_on))] if fix.depends_on else []
    return out


def fix_tag(fix: Fix) -> list[tuple[str, str]]:
    """The header naming the fix a patch was exported from (every patch carries it)."""
    return [("Patchkit-Fix", f"{fix.name} v{fix.version}")]


def rooted(headers: list[tuple[str, str]], root: str) -> list[tuple[str, str]]:
    """The headers, saying the patch's root when it is not sglang (import reads it back)."""
    return headers + [("Patchkit-Root", root)] if root != "sglang" else headers


#: The header saying a mail's From is not the fix's author (the fix names none).
AUTHOR_UNSET = ("Patchkit-Author", "unset")


_FIX_VERSION = re.compile(r"^v[1-9][0-9]{0,5}$")


def fields_of(pairs: list[tuple[str, str]], source: Path) -> dict[str, Any]:
    """The manifest fields DEP-3 headers (or trailers) say: author, upstream (a dict),
    headers (the unknown ones, in order), date (Last-Update), name and version (Patchkit-Fix)."""
    upstream: dict[str, str] = {}
    found: dict[str, Any] = {"upstream": upstream, "headers": []}
    forwarded = None
    for key, value in pairs:
        low = key.lower()
        if low in ("author", "from"):
            found["author"] = value
        elif low in ("origin", "bug"):
            upstream[low] = value
        elif low == "applied-upstream":
            upstream["applied"] = value
        elif low == "forwarded":
            forwarded = value
        elif low == "last-update":
            found["date"] = value
        elif low == "patchkit-fix":  # "NAME vN", as export writes it
            words = value.split()
            found["name"] = words[0] if words else ""
            if len(words) > 1 and _FIX_VERSION.match(words[1]):
                found["version"] = int(words[1][1:])
        elif low == "patchkit-author":
            found["author"] = ""
            found["author_unset"] = True
        elif low == "patchkit-root":
            found["root"] = value
        elif low == "patchkit-release":
            found["release"] = value.strip()
        elif low == "patchkit-fix-root":
            found["fix_root"] = value.strip()
        elif low == "patchkit-depends-on":
            found["depends_on"] = [n.strip() for n in value.split(",") if n.strip()]
        elif low not in ("patchkit-forwarding", "patchkit-reference", "description", "subject"):
            found["headers"].append((key, value))
    upstream["forwarding"], upstream["reference"] = forwarded_of(forwarded)
    for key, value in pairs:
        if key.lower() == "patchkit-forwarding":
            if value not in FORWARDING_STATES:
                raise PatchFormatError(
                    f"{source}: Patchkit-Forwarding: {value!r} is not one of "
                    f"{', '.join(FORWARDING_STATES)}. Correct the header or remove it",
                    file=str(source))
            upstream["forwarding"] = value
        elif key.lower() == "patchkit-reference":
            upstream["reference"] = value
    return found


def render(title: str, rationale: str, author: str, headers: list[tuple[str, str]]) -> str:
    """A DEP-3 header block (ending with the ``---`` line that precedes the diff)."""
    lines = [f"Description: {title}"]
    for line in rationale.strip("\n").split("\n") if rationale.strip() else []:
        lines.append(" ." if not line.strip() else " " + line.rstrip())
    lines += [f"Author: {author}"] if author else []
    lines += [f"{key}: {value}" for key, value in headers]
    return "\n".join(lines) + "\n---\n"


def parse(text: str, source: Path, untitled: str | None = None
          ) -> tuple[str, str, list[tuple[str, str]]]:
    """(title, rationale, other headers in order) of the DEP-3 header part of a patch (what
    precedes its diff). Free text that is no header is part of the rationale. ``untitled``:
    the title of a patch with no Description (a bare quilt patch: its name), else refused."""
    pairs: list[list[str]] = []
    free: list[str] = []
    for line in text.split("\n"):
        if line.strip() == "---":
            break
        match = _FIELD.match(line)
        if match and not free:
            pairs.append([match[1], match[2] or ""])
        elif line[:1] in (" ", "\t") and pairs and not free:
            rest = line[1:]
            pairs[-1][1] += "\n" + ("" if rest.strip() == "." else rest)
        elif line.strip() or free:
            free.append(line)
    title, rationale, others = "", "", []
    for key, value in pairs:
        if key.lower() in ("description", "subject") and not title:
            title, _, rationale = value.partition("\n")
        else:
            others.append((key, value.strip()))
    rationale = "\n\n".join(p for p in (rationale.strip("\n"), "\n".join(free).strip()) if p)
    if not title.strip() and untitled:
        note = (f"Imported from {source.name}, which had no header (no DEP-3 Description): "
                "its title is the patch's name.")
        return untitled, "\n\n".join(p for p in (rationale, note) if p), others
    if not title.strip():
        raise PatchFormatError(
            f"{source}: no Description (or Subject) header: a DEP-3 patch starts with "
            "'Description: <one-line title>'. Add one, or pass --name and a title with the "
            "patch as a mail (--mbox)", file=str(source))
    return title.strip(), rationale, others


__all__ = ["AUTHOR_UNSET", "FIELDS", "fields_of", "fix_tag", "forwarded_of", "headers_of", "parse",
           "render", "rooted"]
