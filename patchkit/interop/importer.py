"""``patchkit import``: fixes made from patches in other formats (docs/interop.md). Every
patch is read and checked before anything is written; then each fix is written as ``new``
writes one (the series, then the manifest, all or nothing) and committed to the catalog."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Sequence

from ..capture import capture_commits, diff_of, release_of, tree_release
from ..catalog import Catalog, DependencyCycle, edit, in_dependency_order, patchmail, series, writer
from ..catalog.manifest import AUTHOR_RE, name_problem
from ..engine.contract import PRIMARY_ROOT
from ..catalog.patchmail import PLACEHOLDER_AUTHOR
from ..catalog.reader import ROOT_NAME_RE
from ..catalog.writer import AuthoringResult
from ..errors import PatchFormatError, PatchkitError, UsageError
from . import Patch, dep3, mbox, quilt, refuse_escape



@dataclasses.dataclass(frozen=True)
class Planned:
    """One fix to be made: its name and its patches, in order."""

    name: str
    patches: tuple[Patch, ...]
    named: bool = False  # the name is the user's own (--name), not the patches'


def from_mbox(path: Path) -> list[Patch]:
    return mbox.read(Path(path))


def from_quilt(path: Path, strip: int = 1) -> list[Patch]:
    return quilt.read(Path(path), strip)


def from_commits(src: Path, spec: str) -> tuple[list[Patch], str | None]:
    """The commits of ``A..B`` in ``src`` as patches (the capture ``new --commits`` does),
    their trailers read as DEP-3 fields; and the release at A, when it can be told."""
    captured, _first, parent = capture_commits(Path(src), spec)
    out = []
    for head, files in captured:
        body, trailers = mbox.split_trailers(head.body)
        out.append(Patch(Path(src), head.subject, body, head.author, head.date or "",
                         trailers, diff_of(files, labels=True)))
    release = release_of(Path(src), parent) if parent else None
    return out, release


def plan(patches: Sequence[Patch], *, one: bool, name: str | None) -> list[Planned]:
    """The fixes to make: one of all the patches, or one per patch (consecutive patches
    exported from one fix, by their Patchkit-Fix header, make one fix again; patches whose
    headers name several fixes make those fixes, ``one`` or not); named ``name`` (then
    ``name-1``, ``name-2``... for several), else by the Patchkit-Fix header, else the title."""
    groups: list[tuple[Patch, ...]] = []
    last = None
    headers = {dep3.fields_of(p.fields, p.source).get("name") for p in patches} - {None}
    if len(headers) > 1:  # an export of several fixes comes back as those fixes
        one = False
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
            said or writer.slug(group[0].subject))
        out.append(Planned(fix, group, named=bool(name)))
    for planned in out:
        problem = name_problem(planned.name)
        if problem:
            where = "--name" if name else f"{planned.patches[0].source}: its Patchkit-Fix header"
            raise UsageError(f"{where}: {problem}. Pass --name NAME", fix=planned.name[:200])
    names = [p.name for p in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"the patches would make several fixes named {', '.join(twice)}; "
                         "pass --name NAME (they become NAME-1, NAME-2, ...) or import them as "
                         "one fix", names=twice)
    return out


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
    head = patchmail.Header(patch.subject, body, author, date)
    return patchmail.render(head) + patch.diff + ("" if patch.diff.endswith("\n") else "\n")


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
        where = root or fields.get("root") or PRIMARY_ROOT
        # the diff at its place in the file (blank lines before it): errors name its lines
        records = series.parse_patch(patch.source, where, data=b"\n" * (patch.diff_line - 1)
                                     + patch.diff.encode("utf-8", "surrogateescape"))
        for record in records:
            refuse_escape(record["path"], patch.source)
        texts[f"{i:04d}-{writer.slug(patch.subject)}.patch"] = (
            text, where, [r["path"] for r in records])
    return texts


#: the longest title (mail Subject, DEP-3 Description) an import takes
MAX_TITLE = 500


def _check_text(patch: Patch) -> None:
    """Refuse a title, message or author that is not text a manifest and a commit can hold:
    bytes that are not UTF-8, control characters (NUL...), a title of more than MAX_TITLE."""
    for what, value in (("Subject (title)", patch.subject), ("message", patch.body),
                        ("author", patch.author)):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise PatchFormatError(
                f"{patch.source}: the {what} of the patch {patch.subject[:60]!r} is not UTF-8. "
                f"Re-encode the file as UTF-8 (iconv -f LATIN1 -t UTF-8 {patch.source.name}) "
                "or export it again", file=str(patch.source)) from None
        bad = next((c for c in value if ord(c) < 32 and c not in "\t\n" or ord(c) == 127), None)
        if bad is not None:
            raise PatchFormatError(
                f"{patch.source}: the {what} of the patch {patch.subject[:60]!r} holds the "
                f"control character {bad!r}; a manifest and a commit message hold text only. "
                "Remove it from the file", file=str(patch.source))
    if len(patch.subject) > MAX_TITLE:
        raise PatchFormatError(
            f"{patch.source}: the title (Subject) of a patch is {len(patch.subject)} characters "
            f"long; a fix's title is one line of at most {MAX_TITLE}. Shorten it, putting the "
            "rest in the message", file=str(patch.source))


def _fix_root(root: str | None, patch: Patch) -> str:
    """The ``[upstream] root`` of a fix patching the SGLang root, as an export said it
    (Patchkit-Fix-Root), else that root."""
    if not root or root == PRIMARY_ROOT:
        return PRIMARY_ROOT
    if not ROOT_NAME_RE.match(root):
        raise PatchFormatError(f"{patch.source}: Patchkit-Fix-Root: {root!r} is not a root name "
                               "(letters, digits, '_', '.', '-'). Correct the header or remove "
                               "it", file=str(patch.source))
    return root


def existing(catalog: Catalog, fixes: Sequence[Planned]) -> dict[str, str]:
    """The planned names a fix already has: name -> "yours" (this catalog's) or "shipped"."""
    out = {}
    for fix in fixes:
        if (catalog.manifests_dir / f"{fix.name}.toml").exists() or (
                catalog.patches_dir / fix.name).exists():
            out[fix.name] = "yours"
        elif catalog.beside is not None and fix.name in catalog.beside.names():
            out[fix.name] = "shipped"
    return out


def _release(catalog: Catalog, fixes: Sequence[Planned], release: str | None,
             tree: Path | None, taken: dict[str, str], replace: bool) -> str | None:
    """The release every fix is based on (``--release``, else the tree's; None: each fix's
    own, :func:`_own_release`); a name the catalog has (or ships), ``taken``, is refused
    unless ``replace``."""
    if release is None and tree is not None:
        release = tree_release(Path(tree))
    if taken and not replace:
        name = next(iter(taken))
        whose = ("shipped with patchkit: a fix of yours by that name would shadow it"
                 if taken[name] == "shipped" else f"in {catalog.root}")
        other = ("give --name another name" if any(p.named for p in fixes if p.name == name)
                 else "pass --name to import it under another name")
        raise UsageError(f"fix {name!r} already exists ({whose}); {other}, or --replace to "
                         "replace it", fix=name,
                         existing=sorted(taken))
    return release


def _version(catalog: Catalog, fix: Planned, taken: dict[str, str]) -> tuple[int, str]:
    """The version a fix is imported at, and its changelog entry's summary. An export says
    its fix's version (``Patchkit-Fix: NAME vN``): the fix comes back at vN, so a host that
    applied vN from the catalog it was exported from is not told the fix changed. A fix it
    replaces (``--replace``) at vM gives at least vM+1: the fix continues that lineage, and
    a host running vM sees an upgrade, not the same version with other contents. A name of
    the user's own (``--name``) is a new fix: v1."""
    said = None if fix.named else dep3.fields_of(fix.patches[0].fields,
                                                 fix.patches[0].source).get("version")
    version = said or 1
    summary = (f"Imported by `patchkit import` from an export of v{said}." if said
               else "First version.")
    if fix.name in taken:
        try:
            old = catalog.get(fix.name)
            replaced, above = old.version, old.next_version  # its variants' versions too
            kept = old.variants_said
        except PatchkitError:  # a manifest of the user's own that does not load
            replaced, above, kept = 0, 1, ""
        if replaced:
            version = max(version, above)  # above every version hosts may record
            whose = "the shipped fix" if taken[fix.name] == "shipped" else "your fix"
            summary = ("Imported by `patchkit import`"
                       + (f" from an export of v{said}" if said else "")
                       + f", replacing v{replaced} ({whose} of that name)"
                       + (f" and its variants ({kept}), which an export does not carry"
                          if kept else "") + ".")
    return version, summary


def _own_release(fix: Planned, release: str | None) -> str | None:
    """The release ``fix`` is based on: the one given for all, else its own Patchkit-Release
    (patchkit's export says each fix's base release; fixes exported together may differ)."""
    if release is not None:
        return release
    return dep3.fields_of(fix.patches[0].fields, fix.patches[0].source).get("release")


def _depends(catalog: Catalog, fixes: Sequence[Planned]) -> dict[str, list[str]]:
    """The ``depends_on`` of each planned fix (its Patchkit-Depends-On header): a fix of this
    import by the name it was exported under (as renamed here), else a fix of the catalog (or
    shipped beside it); any other is refused, naming it, before anything is written."""
    said = {p.name: dep3.fields_of(p.patches[0].fields, p.patches[0].source) for p in fixes}
    renamed = {f.get("name"): name for name, f in said.items() if f.get("name")}
    known = set(catalog.names())
    out = {}
    for fix in fixes:
        deps = [renamed.get(d, d) for d in said[fix.name].get("depends_on", [])]
        missing = [d for d in deps if d not in known and d not in said]
        if missing:
            raise UsageError(
                f"{fix.patches[0].source}: fix {fix.name!r} depends on {', '.join(missing)} "
                f"(its Patchkit-Depends-On header), which is not in the catalog {catalog.root} "
                "nor in this import. Import it too (export the fixes together, or import it "
                "first), or remove the header to import the fix without it", fix=fix.name,
                missing=missing)
        out[fix.name] = deps
    _refuse_cycle(catalog, fixes, out)
    return out


def _refuse_cycle(catalog: Catalog, fixes: Sequence[Planned], depends: dict[str, list[str]]) -> None:
    """Refuse an import whose ``depends_on`` would go round, through its fixes and the
    catalog's (which it may replace): written, it would stop every command that orders fixes
    (log, matrix, apply, sync, rebase). The error names the cycle and the mails or files."""
    def deps_of(name: str) -> list[str]:
        if name in depends:
            return depends[name]
        try:
            return list(catalog.get(name).depends_on)
        except PatchkitError:  # a broken one says so itself, where it is read
            return []

    try:
        in_dependency_order([f.name for f in fixes], deps_of)
    except DependencyCycle as cycle:
        source = {f.name: str(f.patches[0].source) for f in fixes}
        where = ", ".join(dict.fromkeys(source[n] for n in cycle.names if n in source))
        raise UsageError(
            f"{where}: depends_on forms a cycle: {' -> '.join(cycle.names)} (their "
            "Patchkit-Depends-On headers, and the catalog's manifests); nothing was written. "
            "Remove one of these dependencies (the header of the mail or patch that should "
            "not have it) and import again", fixes=cycle.names[:-1]) from None


def _manifest(fix: Planned, texts: dict[str, tuple[str, str, list[str]]], release: str | None,
              tree: Path | None, version: tuple[int, str], depends_on: list[str]) -> str:
    """The new manifest's text of a planned fix, its fields from its first patch."""
    patches_sglang = any(t[1] == PRIMARY_ROOT for t in texts.values())
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
    # a fix of another root names its root already: Patchkit-Fix-Root is checked all the same
    fix_root = _fix_root(fields.get("fix_root"), first)
    return edit.new_manifest_text(
        fix.name, first.subject, release or edit.NO_RELEASE, [(f, t[1]) for f, t in texts.items()],
        first.body, date=date, author=author, upstream=fields["upstream"],
        headers=fields["headers"], release_root=fix_root if patches_sglang else None,
        version=version[0], summary=version[1], depends_on=depends_on)


def _message(fixes: Sequence[Planned], versions: Sequence[int], how: str, based: str) -> str:
    lines = [f"{f.name} v{v}: {f.patches[0].subject}\n" for f, v in zip(fixes, versions)]
    if len(fixes) == 1:
        message = lines[0] + "\n"
    else:
        message = (f"import {len(fixes)} fixes: {', '.join(f.name for f in fixes)}\n\n"
                   + "".join(lines) + "\n")
    return message + f"Imported by `patchkit import` from {how}, based on {based}.\n"


def import_fixes(catalog: Catalog, fixes: Sequence[Planned], *, release: str | None,
                 tree: Path | None = None, root: str | None = None, commit: bool = True,
                 dry_run: bool = False, how: str = "patches", replace: bool = False
                 ) -> list[AuthoringResult]:
    """Write the planned fixes to the catalog, each at the version :func:`_version` gives, and
    commit them, all or nothing: every patch of every fix is read and checked, the files are
    staged and read back, then
    moved in and committed as one commit (:func:`patchkit.catalog.writer.write_fixes`); on any
    error the catalog and its git index are as before. A name the catalog has (or ships) is
    refused unless ``replace``."""
    catalog.check_writable("import fixes")
    taken = existing(catalog, fixes)
    release = _release(catalog, fixes, release, tree, taken, replace)
    depends = _depends(catalog, fixes)
    made = []
    identity = writer.identity(catalog) or PLACEHOLDER_AUTHOR
    versions = [_version(catalog, fix, taken) for fix in fixes]
    for fix, version in zip(fixes, versions):
        for patch in fix.patches:
            _check_text(patch)
        texts = _checked(fix, root, identity)
        made.append((fix, texts, _manifest(fix, texts, _own_release(fix, release), tree, version,
                                           depends[fix.name])))
    results = []
    for (fix, texts, _text), (version_no, _summary) in zip(made, versions):
        files = tuple(dict.fromkeys(path for t in texts.values() for path in t[2]))
        results.append(AuthoringResult(
            fix.name, version_no, catalog.manifests_dir / f"{fix.name}.toml",
            tuple(catalog.patches_dir / fix.name / f for f in texts), files,
            _own_release(fix, release) or edit.NO_RELEASE, changed=True, dry_run=dry_run))
    based = " and ".join(dict.fromkeys(r.base_release for r in results))
    if dry_run:
        return results
    sha = writer.write_fixes(catalog, [(f.name, {n: t[:2] for n, t in texts.items()}, text)
                                       for f, texts, text in made],
                             _message(fixes, [v for v, _s in versions], how, based)
                             if commit else None)
    return [dataclasses.replace(r, commit=sha) for r in results]


__all__ = ["Planned", "from_mbox", "from_quilt", "from_commits", "plan", "import_fixes",
           "tree_release", "existing"]
