"""``patchkit export``: fixes as an mbox ``git am`` applies, a quilt directory ``quilt push
-a`` applies, or DEP-3 headed patches (docs/interop.md). The diffs are the series' own
bytes; the messages come from the manifest."""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..catalog import Catalog, patchmail, writer
from ..catalog.model import Fix
from ..errors import UsageError
from . import dep3, mbox, quilt, read_regular, split_diff

FORMATS = ("mbox", "quilt", "dep3")


@dataclass
class ExportResult:
    format: str
    files: list[Path] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


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
        head = patchmail.read(text)
        subject, body = head.subject, head.body
        out.append((ref.file, subject or ref.description or fix.title, body, diff, ref.root))
    return out


def _mails(catalog: Catalog, fix: Fix, diffs: list[tuple[str, str, str, str, str]],
           headers: list[tuple[str, str]], fallback: list[str], result: ExportResult) -> str:
    """The fix's mbox: one mail per patch, From its author (else the catalog's git user, said
    in a note; ``fallback`` keeps that user once asked)."""
    author = fix.author
    if not author:
        if not fallback:
            fallback.append(writer.identity(catalog) or "")
        author = fallback[0] or patchmail.PLACEHOLDER_AUTHOR
        who = "the catalog repository's git user" if fallback[0] else "a placeholder"
        result.notes.append(
            f"{fix.name} names no author (manifest `author`): its mail is From {author}"
            f" ({who}); set author = \"Name <email>\" in the manifest to say who wrote it")
        headers = headers + [dep3.AUTHOR_UNSET]
    date = mbox.rfc2822(fix.changelog[-1].date) if fix.changelog else ""
    mails = []
    for i, (_file, subject, body, diff, root) in enumerate(diffs, 1):
        first = i == 1
        mails.append(mbox.message(
            author, date, fix.title if first else subject, fix.rationale if first else body,
            dep3.rooted(headers if first else dep3.fix_tag(fix), root), diff, number=i, total=len(diffs)))
    return "".join(mails)


def export(catalog: Catalog, names: Sequence[str], fmt: str, out: Path) -> ExportResult:
    """Write the fixes ``names`` in format ``fmt`` under ``out``: ``<fix>.mbox`` each; or a
    quilt directory (``series``, ``<fix>/<patch>``); or ``<fix>/<patch>`` with DEP-3 headers.
    Only regular files are written, inside ``out``, never through a symlink; an existing quilt
    ``series`` is merged (the fixes' lines replaced, every other line kept)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}", format=fmt)
    # each after the fixes it depends on (a quilt series is pushed in its order), the others
    # in the order given; a depends_on cycle or a broken dependency refused as list shows it
    fixes = catalog.dependency_order(list(dict.fromkeys(names)))
    catalog.dependency_order(list(names), with_deps=True)
    planned = [(fix, _diffs(fix)) for fix in fixes]  # every refusal before any file is written
    result = ExportResult(fmt, fixes=[f.name for f in fixes])
    out = Path(out)
    writes: list[tuple[str, str]] = []  # (path relative to out, text), in order
    listed: list[str] = []
    fallback: list[str] = []  # the catalog repository's git user, asked once
    for fix, diffs in planned:
        headers = dep3.headers_of(fix, last_update=fmt != "mbox")
        if fmt == "mbox":
            writes.append((f"{fix.name}.mbox", _mails(catalog, fix, diffs, headers, fallback,
                                                      result)))
            continue
        for i, (file, subject, body, diff, root) in enumerate(diffs, 1):
            first = i == 1
            text = quilt.patch_text(
                fix.title if first else subject, fix.rationale if first else body,
                fix.author, dep3.rooted(headers if first else dep3.fix_tag(fix), root), diff)
            writes.append((f"{fix.name}/{file}", text))
            listed.append(f"{fix.name}/{file}")
    stale: list[str] = []
    if fmt == "quilt":
        series, stale = _merged_series(out, [f.name for f in fixes], listed, result)
        writes.append(("series", series))
    for rel, _text in writes:  # every refusal (a link, a directory in the way) before writing
        _check_target(out, rel)
    for rel in stale:
        _check_target(out, rel)
    out.mkdir(parents=True, exist_ok=True)
    top = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel, text in writes:
            _write_in(top, out, rel, text)
            result.files.append(out / rel)
        for rel in stale:
            _unlink_in(top, out, rel)
    finally:
        os.close(top)
    return result


def _merged_series(out: Path, names: list[str], listed: list[str], result: ExportResult
                   ) -> tuple[str, list[str]]:
    """The ``series`` to write: ``listed`` alone, or merged into the series already in ``out``
    (the exported fixes' old lines replaced where the first of them was, every other line
    kept); and the old patch files of those fixes the new series no longer lists."""
    path = out / "series"
    if not os.path.lexists(path):
        return "".join(f"{f}\n" for f in listed), []
    _check_target(out, "series")
    old = read_regular(path, "the quilt series file").decode("utf-8", "surrogateescape")
    ours = tuple(f"{name}/" for name in names)
    kept, placed, dropped = [], False, []
    for line in old.splitlines():
        entry = line.split("#", 1)[0].split()
        if entry and entry[0].startswith(ours):
            dropped.append(entry[0])
            if not placed:
                kept.extend(listed)
                placed = True
            continue
        kept.append(line)
    if not placed:
        kept.extend(listed)
    others = len(kept) - len(listed)
    result.notes.append(
        f"merged into the existing {path}: {len(dropped)} line(s) of "
        f"{', '.join(names)} replaced by {len(listed)}, {others} other line(s) kept as they were")
    stale = [d for d in dropped if d not in listed and os.path.lexists(out / d)]
    if stale:
        result.notes.append(f"removed the patch file(s) the old series listed for these fixes "
                            f"and the new one does not: {', '.join(stale)}")
    return "".join(f"{line}\n" for line in kept), stale


def _check_target(out: Path, rel: str) -> None:
    """Refuse to write ``out/rel`` through a symlink, or over something not a regular file."""
    parts = rel.split("/")
    for i in range(len(parts)):
        path = out.joinpath(*parts[:i + 1])
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        last = i == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"{path} is a symlink (to {os.readlink(path)}); export writes only "
                             f"files of its own inside {out}, never through a link. Remove the "
                             "link, or export into another directory", path=str(path))
        if last and not stat.S_ISREG(st.st_mode) or not last and not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{path} is in the way: it is not a regular "
                             f"{'file' if last else 'directory'}. Remove it, or export into "
                             "another directory", path=str(path))


def _open_dir(top: int, out: Path, parts: list[str]) -> int:
    fd = os.dup(top)
    for i, name in enumerate(parts):
        try:
            os.mkdir(name, 0o755, dir_fd=fd)
        except FileExistsError:
            pass
        try:
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            raise UsageError(f"{out.joinpath(*parts[:i + 1])} is not a directory of its own "
                             f"({exc.strerror}): it changed under the export. Remove it and "
                             "export again", path=str(out.joinpath(*parts[:i + 1]))) from None
        os.close(fd)
        fd = nxt
    return fd


def _write_in(top: int, out: Path, rel: str, text: str) -> None:
    """Write ``out/rel`` as a new regular file (a temporary one renamed over the name), by
    directory descriptors opened without following a link."""
    *dirs, name = rel.split("/")
    fd = _open_dir(top, out, dirs)
    tmp = f".{name}.patchkit-tmp-{os.getpid()}"
    try:
        handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                         dir_fd=fd)
        with os.fdopen(handle, "wb") as fh:
            fh.write(text.encode("utf-8", "surrogateescape"))
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)  # replaces a name, follows nothing
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=fd)
        raise
    finally:
        os.close(fd)


def _unlink_in(top: int, out: Path, rel: str) -> None:
    *dirs, name = rel.split("/")
    fd = _open_dir(top, out, dirs)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


__all__ = ["FORMATS", "ExportResult", "export"]
