"""``patchkit import``: fixes made from patches in other formats (docs/interop.md). Every
patch is read and checked before anything is written; then each fix is written as ``new``
writes one (the series, then the manifest, all or nothing) and committed to the catalog."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import os
import shutil
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Sequence

from .. import authoring, gitrepo
from ..authoring import PLACEHOLDER_AUTHOR, catalog_identity
from ..catalog import Catalog, edit, series
from ..catalog.manifest import AUTHOR_RE
from ..catalog.model import DEFAULT_ROOT
from ..engine.auto import detect_release
from ..engine.paths import Root, detect_layout
from ..errors import PatchFormatError, UsageError
from . import Patch, dep3, mbox, quilt, refuse_escape

#: The base_release of a fix that patches no SGLang root, imported without --release.
NO_RELEASE = "any"


@dataclasses.dataclass(frozen=True)
class Planned:
    """One fix to be made: its name and its patches, in order."""

    name: str
    patches: tuple[Patch, ...]


def from_mbox(path: Path) -> list[Patch]:
    return mbox.read(Path(path))


def from_quilt(path: Path, strip: int = 1) -> list[Patch]:
    return quilt.read(Path(path), strip)


def from_commits(src: Path, spec: str) -> tuple[list[Patch], str | None]:
    """The commits of ``A..B`` in ``src`` as patches (the capture ``new --commits`` does),
    their trailers read as DEP-3 fields; and the release at A, when it can be told."""
    captured, _first, parent = authoring.capture_commits(Path(src), spec)
    out = []
    for head, files in captured:
        body, trailers = mbox.split_trailers(head.body)
        diff = "".join(series.diff_files(f.before, f.after, f.path, mode=f.mode,
                                         old_mode=f.old_mode) for f in files)
        out.append(Patch(Path(src), head.subject, body, head.author, head.date or "",
                         trailers, diff))
    release = authoring.release_of(Path(src), parent) if parent else None
    return out, release


def plan(patches: Sequence[Patch], *, one: bool, name: str | None) -> list[Planned]:
    """The fixes to make: one of all the patches, or one per patch (consecutive patches
    exported from one fix, by their Patchkit-Fix header, make one fix again); named ``name`` (then
    ``name-1``, ``name-2``... for several), else by the Patchkit-Fix header, else the title."""
    groups: list[tuple[Patch, ...]] = []
    last = None
    for patch in patches:  # consecutive patches of one exported fix stay together
        said = dep3.fields_of(patch.fields, patch.source).get("name")
        if one and groups or (said and said == last):
            groups[-1] += (patch,)
        else:
            groups.append((patch,))
        last = said
    out = []
    for i, group in enumerate(groups, 1):
        said = dep3.fields_of(group[0].fields, group[0].source).get("name")
        fix = (name if len(groups) == 1 else f"{name}-{i}") if name else (
            said or authoring._slug(group[0].subject))
        out.append(Planned(fix, group))
    names = [p.name for p in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"the patches would make several fixes named {', '.join(twice)}; "
                         "pass --name NAME (they become NAME-1, NAME-2, ...) or import them as "
                         "one fix", names=twice)
    return out


def tree_release(tree: Path) -> str | None:
    """The SGLang release of a tree: HEAD's of a git checkout (as ``new`` reads it), else
    the version file on disk."""
    if gitrepo.is_git_repo(tree):
        return authoring.release_of(tree)
    root = Root("sglang", str(tree), os.path.realpath(tree), detect_layout(str(tree)))
    return detect_release(root)[0]


def _iso_date(value: str) -> str | None:
    with contextlib.suppress(TypeError, ValueError, IndexError):
        return _dt.date.fromisoformat(value.strip()[:10]).isoformat()
    with contextlib.suppress(TypeError, ValueError, IndexError):
        return parsedate_to_datetime(value).date().isoformat()
    return None


def _mail_date(value: str) -> str | None:
    with contextlib.suppress(TypeError, ValueError, IndexError):
        return format_datetime(parsedate_to_datetime(value))
    iso = _iso_date(value)
    return mbox.rfc2822(iso) if iso else None


def _series_file(patch: Patch, author: str, body: str) -> str:
    date = _mail_date(patch.date) if patch.date else None
    head = (f"From: {author}\n" + (f"Date: {date}\n" if date else "")
            + f"Subject: [PATCH] {patch.subject}\n\n" + (body.strip() + "\n" if body.strip() else ""))
    return head + "---\n" + patch.diff + ("" if patch.diff.endswith("\n") else "\n")


def _checked(fix: Planned, root: str | None, identity: str
             ) -> dict[str, tuple[str, str, list[str]]]:
    """The series files of a planned fix (text, root, paths), each read back by the one patch
    reader and its paths checked; errors name the file the patch came from. ``root``: every
    patch's, else the Patchkit-Root header's, else sglang."""
    texts = {}
    for i, patch in enumerate(fix.patches, 1):
        fields = dep3.fields_of(patch.fields, patch.source)
        author = patch.author if not fields.get("author_unset") else ""
        text = _series_file(patch, author or identity, patch.body)
        where = root or fields.get("root") or DEFAULT_ROOT
        records = series.parse_patch(patch.source, where,
                                     data=patch.diff.encode("utf-8", "surrogateescape"))
        for record in records:
            refuse_escape(record["path"], patch.source)
        texts[f"{i:04d}-{authoring._slug(patch.subject)}.patch"] = (
            text, where, [r["path"] for r in records])
    return texts


def import_fixes(catalog: Catalog, fixes: Sequence[Planned], *, release: str | None,
                 tree: Path | None = None, root: str | None = None, commit: bool = True,
                 dry_run: bool = False, how: str = "patches") -> list[authoring.AuthoringResult]:
    """Write each planned fix (version 1) to the catalog and commit it; nothing is written
    unless every patch of every fix reads, and no fix exists yet."""
    catalog.check_writable("import fixes")
    if release is None and tree is not None:
        release = tree_release(Path(tree))
    made = []
    identity = catalog_identity(catalog) or PLACEHOLDER_AUTHOR
    for fix in fixes:
        if (catalog.manifests_dir / f"{fix.name}.toml").exists() or (
                catalog.patches_dir / fix.name).exists():
            raise UsageError(f"fix {fix.name!r} already exists in {catalog.root}; pass --name "
                             "to import it under another name", fix=fix.name)
        texts = _checked(fix, root, identity)
        patches_sglang = any(t[1] == DEFAULT_ROOT for t in texts.values())
        if release is None and patches_sglang:
            where = f"{tree}" if tree is not None else "no tree was given"
            raise UsageError(f"cannot tell which SGLang release the patches are written against "
                             f"({where}); pass --release VERSION, or --target the release tree "
                             "they apply to", path=str(tree) if tree else None)
        first = fix.patches[0]
        fields = dep3.fields_of(first.fields, first.source)
        author = "" if fields.get("author_unset") else fields.get("author") or first.author
        if author and not AUTHOR_RE.match(author):
            raise PatchFormatError(f"{first.source}: its author {author!r} is not of the form "
                                   "'Name <email>'. Correct the From (or Author) header",
                                   file=str(first.source))
        date = _iso_date(fields.get("date") or first.date) or _dt.date.today().isoformat()
        text = edit.new_manifest_text(
            fix.name, first.subject, release or NO_RELEASE, [(f, t[1]) for f, t in texts.items()],
            first.body, date=date, author=author, upstream=fields["upstream"],
            headers=fields["headers"], release_root=DEFAULT_ROOT if patches_sglang else None)
        made.append((fix, texts, text, release or NO_RELEASE))
    results = []
    for fix, texts, text, based in made:
        patch_dir = catalog.patches_dir / fix.name
        manifest = catalog.manifests_dir / f"{fix.name}.toml"
        files = tuple(dict.fromkeys(path for t in texts.values() for path in t[2]))
        result = authoring.AuthoringResult(fix.name, 1, manifest, tuple(patch_dir / f for f in texts),
                                           files, based, changed=True, dry_run=dry_run)
        if not dry_run:
            catalog.manifests_dir.mkdir(parents=True, exist_ok=True)
            patch_dir.mkdir(parents=True)
            try:
                authoring.write_series({patch_dir / f: t[:2] for f, t in texts.items()},
                                       lambda: authoring._write_new(manifest, text))
            except BaseException:
                shutil.rmtree(patch_dir, ignore_errors=True)
                raise
            title = fix.patches[0].subject
            sha = authoring._commit(catalog, fix.name, f"{fix.name} v1: {title}\n\nImported by "
                                    f"`patchkit import` from {how}, based on {based}.\n"
                                    ) if commit else None
            result = dataclasses.replace(result, commit=sha)
        results.append(result)
    return results


__all__ = ["Planned", "from_mbox", "from_quilt", "from_commits", "plan", "import_fixes",
           "tree_release"]
