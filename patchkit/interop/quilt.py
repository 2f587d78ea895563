"""quilt series: a ``patches/`` directory and its ``series`` file, read into :class:`Patch`
records (``-pN`` strip levels, quilt's ``a.orig/x`` -> ``a/x`` prefixes, DEP-3 headers) and
written so that ``quilt push -a`` applies them."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import PatchFormatError
from . import Patch, dep3, mbox, read_regular, refuse_escape, split_diff

_FILE_HEADER = re.compile(r"^(---|\+\+\+) (.*)$")


def series_dir(path: Path) -> Path:
    """The directory holding ``series``: ``path`` itself or its ``patches/`` (quilt's default)."""
    for candidate in (path, path / "patches"):
        if (candidate / "series").is_file():
            return candidate
    raise PatchFormatError(f"{path}: no quilt series file ({path}/series or "
                           f"{path}/patches/series). Give the directory quilt's QUILT_PATCHES "
                           "names, holding the series file", file=str(path))


def read(path: Path, strip: int = 1) -> list[Patch]:
    """The patches ``series`` lists, in order; a line's own ``-pN`` overrides ``strip``."""
    where = series_dir(Path(path))
    series = where / "series"
    out = []
    raw = read_regular(series, "the series file")
    try:
        lines = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise PatchFormatError(f"{series}: the series file is not UTF-8. Re-encode it (iconv)",
                               file=str(series)) from None
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        level = strip
        for option in words[1:]:
            match = re.fullmatch(r"-p(\d+)", option)
            if match is None:
                raise PatchFormatError(f"{series}:{number}: option {option!r} of {words[0]} is "
                                       "not supported (only -pN). Remove it", file=str(series))
            level = int(match[1])
        refuse_escape(words[0], series)
        file = where / words[0]
        if os.path.exists(file) and not file.is_file():
            read_regular(file, "the patch")  # says what it is (a FIFO, a directory...)
        if not file.is_file():
            raise PatchFormatError(
                f"{series}:{number}: names {words[0]}, which is not in {where}. Add the patch "
                "file, or remove the line from series", file=str(series), line=number)
        out.append(read_patch(file, level))
    if not out:
        raise PatchFormatError(f"{series}: the series lists no patch. Name the patches, one "
                               "a line, in the order quilt applies them", file=str(series))
    return out


def read_patch(file: Path, strip: int = 1) -> Patch:
    """One DEP-3 headed patch, its file headers rewritten to git's ``a/`` ``b/`` form."""
    text = read_regular(file, "the patch").decode("utf-8", "surrogateescape")
    if mbox.FROM_LINE.match(text.split("\n", 1)[0].encode("utf-8", "surrogateescape")):
        found = mbox.read(file)  # git format-patch output in a series, as Debian keeps many
        if len(found) != 1:
            raise PatchFormatError(f"{file}: holds {len(found)} mails; a patch of a quilt "
                                   "series is one. Split it (git mailsplit)", file=str(file))
        found[0].diff = _restrip(found[0].diff, strip, file)
        return found[0]
    head, diff = split_diff(text, file)
    head = head.replace("\r\n", "\n")  # the headers are text; the diff's endings are the tree's
    try:
        head.encode("utf-8")
    except UnicodeEncodeError:
        raise PatchFormatError(f"{file}: its DEP-3 headers are not UTF-8. Re-encode the "
                               f"file's header as UTF-8 (iconv -t UTF-8 {file.name})",
                               file=str(file)) from None
    title, rationale, pairs = dep3.parse(head, file, untitled=_untitled(file))
    fields = dep3.fields_of(pairs, file)
    return Patch(file, title, rationale, fields.get("author", ""), fields.get("date", ""),
                 pairs, _restrip(diff, strip, file), diff_line=head.count("\n") + 1)


def _untitled(file: Path) -> str:
    """A bare patch's title: its name in the series, as quilt calls it (``fix-x.patch``:
    ``fix-x``)."""
    for suffix in (".patch", ".diff"):
        if file.name.endswith(suffix) and len(file.name) > len(suffix):
            return file.name[:-len(suffix)]
    return file.name


def _strip(name: str, level: int, file: Path) -> str:
    name = name.split("\t", 1)[0].rstrip()
    if name == "/dev/null":
        return name
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if len(parts) <= level:
        raise PatchFormatError(f"{file}: the file header {name!r} has no path left after "
                               f"stripping {level} component(s) (-p{level}). Give the right "
                               "-p level (on the command line or in series)", file=str(file))
    rel = "/".join(parts[level:])
    refuse_escape(rel, file)
    return rel


def _restrip(diff: str, level: int, file: Path) -> str:
    """The diff with ``-pN`` applied to its ---/+++ (and diff --git) names, as ``a/``/``b/``;
    ``Index:`` and plain ``diff`` command lines, which name the files again, are dropped."""
    lines = diff.split("\n")
    is_git = any(line.startswith("diff --git ") for line in lines)
    out = []
    for i, line in enumerate(lines):
        if line.startswith("Index: ") or re.match(r"^={20,}$", line) or (
                line.startswith("diff ") and not line.startswith("diff --git ")):
            continue
        match = _FILE_HEADER.match(line)
        is_pair = match and (
            (match[1] == "---" and i + 1 < len(lines) and lines[i + 1].startswith("+++ "))
            or (match[1] == "+++" and i and lines[i - 1].startswith("--- ")))
        if is_pair:
            assert match is not None  # `is_pair` requires it
            rel = _strip(match[2], level, file)
            hunk = lines[i + (2 if match[1] == "---" else 1)] if i + 2 < len(lines) else ""
            if not is_git and hunk.startswith("@@ -0,0 " if match[1] == "---" else "@@ ") and (
                    match[1] == "---" or re.match(r"^@@ -\S+ \+0,0 @@", hunk)):
                rel = "/dev/null"  # quilt (diff -N) names a created or deleted file, dated 1970
            prefix = "a/" if match[1] == "---" else "b/"
            line = f"{match[1]} {rel if rel == '/dev/null' else prefix + rel}"
        elif line.startswith("diff --git "):
            line = line.rstrip("\r")  # a header's line ending is the patch's, not the tree's
            names = line[len("diff --git "):].split(" ")
            if len(names) == 2 and level != 1:
                line = f"diff --git a/{_strip(names[0], level, file)} b/{_strip(names[1], level, file)}"
            elif len(names) == 2:
                for name in names:
                    _strip(name, level, file)
        out.append(line)
    return "\n".join(out)


def patch_text(title: str, rationale: str, author: str, headers: list[tuple[str, str]],
               diff: str) -> str:
    """A DEP-3 headed patch quilt applies with -p1."""
    return dep3.render(title, rationale, author, headers) + diff


def write_series(directory: Path, files: list[str]) -> Path:
    """quilt's ``series`` file naming ``files`` (relative to ``directory``), in order."""
    path = directory / "series"
    path.write_text("".join(f"{f}\n" for f in files), encoding="utf-8")
    return path


__all__ = ["read", "read_patch", "series_dir", "patch_text", "write_series"]
