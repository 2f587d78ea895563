"""``patchkit import``: fixes made from patches in other formats (docs/interop.md). Every
patch is read and checked before anything is written; then each fix is written as ``new``
writes one (the series, then the manifest, all or nothing) and committed to the catalog."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import os
import shutil
import tempfile
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Sequence

from .. import authoring, gitrepo
from ..authoring import PLACEHOLDER_AUTHOR, catalog_identity
from ..catalog import Catalog, edit, series
from ..catalog.manifest import AUTHOR_RE, load_manifest, name_problem
from ..engine.contract import PRIMARY_ROOT
from ..catalog.reader import ROOT_NAME_RE
from ..engine import faults
from ..engine.auto import detect_release
from ..engine.paths import Root, detect_layout
from ..errors import InternalError, PatchFormatError, PatchkitError, TargetError, UsageError
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
        where = root or fields.get("root") or PRIMARY_ROOT
        records = series.parse_patch(patch.source, where,
                                     data=patch.diff.encode("utf-8", "surrogateescape"))
        for record in records:
            refuse_escape(record["path"], patch.source)
        texts[f"{i:04d}-{authoring._slug(patch.subject)}.patch"] = (
            text, where, [r["path"] for r in records])
    return texts


#: the longest title (mail Subject, DEP-3 Description) an import takes
MAX_TITLE = 500
#: where an import stages its files, inside the catalog (ignored by git), one dir per run
STAGE_DIR = ".patchkit-import"
#: the write points of an import, for the kill sweep (PATCHKIT_FAULT, engine/faults.py)
FAULT_POINTS = ("import-stage", "import-move", "import-manifest", "import-linked",
                "import-commit", "import-done")


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


_ROOT_LINE = 'root = "sglang"                  # the root whose release is checked'


def _with_fix_root(text: str, root: str | None, patch: Patch) -> str:
    """The manifest text with the fix's ``[upstream] root`` an export said (Patchkit-Fix-Root)."""
    if not root or root == PRIMARY_ROOT:
        return text
    if ROOT_NAME_RE.match(root) and _ROOT_LINE not in text:
        return text  # a fix of another root: the manifest names its root already
    if not ROOT_NAME_RE.match(root) or _ROOT_LINE not in text:
        raise PatchFormatError(f"{patch.source}: Patchkit-Fix-Root: {root!r} is not a root name "
                               "(letters, digits, '_', '.', '-'). Correct the header or remove "
                               "it", file=str(patch.source))
    return text.replace(_ROOT_LINE, f'root = "{root}"' + " " * max(1, 18 - len(root))
                        + "# the root whose release is checked", 1)


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


def import_fixes(catalog: Catalog, fixes: Sequence[Planned], *, release: str | None,
                 tree: Path | None = None, root: str | None = None, commit: bool = True,
                 dry_run: bool = False, how: str = "patches", replace: bool = False
                 ) -> list[authoring.AuthoringResult]:
    """Write the planned fixes (version 1) to the catalog and commit them, all or nothing:
    every patch of every fix is read and checked, the files are staged and read back, then
    moved in and committed as one commit; on any error the catalog and its git index are as
    before. A name the catalog has (or ships) is refused unless ``replace``."""
    catalog.check_writable("import fixes")
    said = {dep3.fields_of(p.patches[0].fields, p.patches[0].source).get("release")
            for p in fixes} - {None}
    if release is None and tree is not None:
        release = tree_release(Path(tree))
    if release is None and len(said) == 1:  # patchkit's own export says its base release
        release = said.pop()
    taken = existing(catalog, fixes)
    if taken and not replace:
        name = next(iter(taken))
        whose = ("shipped with patchkit: a fix of yours by that name would shadow it"
                 if taken[name] == "shipped" else f"in {catalog.root}")
        raise UsageError(f"fix {name!r} already exists ({whose}); pass --name to import it "
                         "under another name, or --replace to replace it", fix=name,
                         existing=sorted(taken))
    made = []
    identity = catalog_identity(catalog) or PLACEHOLDER_AUTHOR
    for fix in fixes:
        for patch in fix.patches:
            _check_text(patch)
        texts = _checked(fix, root, identity)
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
        text = edit.new_manifest_text(
            fix.name, first.subject, release or NO_RELEASE, [(f, t[1]) for f, t in texts.items()],
            first.body, date=date, author=author, upstream=fields["upstream"],
            headers=fields["headers"], release_root=PRIMARY_ROOT if patches_sglang else None)
        text = _with_fix_root(text, fields.get("fix_root"), first)
        made.append((fix, texts, text))
    based = release or NO_RELEASE
    results = []
    for fix, texts, _text in made:
        files = tuple(dict.fromkeys(path for t in texts.values() for path in t[2]))
        results.append(authoring.AuthoringResult(
            fix.name, 1, catalog.manifests_dir / f"{fix.name}.toml",
            tuple(catalog.patches_dir / fix.name / f for f in texts), files, based,
            changed=True, dry_run=dry_run))
    if dry_run:
        return results
    if len(made) == 1:
        message = f"{made[0][0].name} v1: {made[0][0].patches[0].subject}\n\n"
    else:
        message = (f"import {len(made)} fixes: {', '.join(f.name for f, _t, _x in made)}\n\n"
                   + "".join(f"{f.name} v1: {f.patches[0].subject}\n" for f, _t, _x in made)
                   + "\n")
    message += f"Imported by `patchkit import` from {how}, based on {based}.\n"
    sha = _write(catalog, [(f.name, {n: t[:2] for n, t in texts.items()}, text)
                           for f, texts, text in made], message if commit else None)
    return [dataclasses.replace(r, commit=sha) for r in results]


# -- writing: staged, checked, moved in, committed; undone on any error or by the next run ---

def _stage_root(catalog: Catalog) -> Path:
    where = catalog.root / STAGE_DIR
    where.mkdir(exist_ok=True)
    ignore = where / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# patchkit import's staging area (a run's files before they move "
                          "in)\n*\n", encoding="utf-8")
    return where


def recover(catalog: Catalog) -> list[str]:
    """Finish or undo what a killed import left (its staging directory names a dead process):
    a fix whose manifest was moved in is imported (and committed, if that was asked), one
    whose manifest was not is taken out again. The names of the fixes it acted on."""
    where = catalog.root / STAGE_DIR
    done: list[str] = []
    if not where.is_dir():
        return done
    for stage in sorted(where.iterdir()):
        if not stage.is_dir() or not stage.name.split("-", 1)[0].isdigit():
            continue
        pid = int(stage.name.split("-", 1)[0])
        if _alive(pid):
            continue
        try:
            journal = json.loads((stage / "journal.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            journal = None  # killed while staging: nothing moved in yet
        if journal:
            done += _settle(catalog, stage, journal)
        shutil.rmtree(stage, ignore_errors=True)
    _tidy(where)
    return done


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != 0


def _ours(path: Path, ino: int) -> bool:
    try:
        return path.lstat().st_ino == ino
    except OSError:
        return False


def _settle(catalog: Catalog, stage: Path, journal: dict) -> list[str]:
    fixes = journal["fixes"]
    complete = journal.get("linked") and all(
        _ours(catalog.manifests_dir / f"{f['name']}.toml", f["manifest_ino"]) for f in fixes)
    if complete:  # every manifest moved in: the import happened; finish its commit
        if journal.get("message"):
            with contextlib.suppress(PatchkitError):
                _commit(catalog, [f["name"] for f in fixes], journal["message"])
        return [f["name"] for f in fixes]
    _undo(catalog, stage, fixes)
    return [f["name"] for f in fixes]


def _undo(catalog: Catalog, stage: Path, fixes: list[dict]) -> None:
    """Take out what the run moved in and put back what it moved aside (``--replace``)."""
    for f in fixes:
        name = f["name"]
        manifest, patch_dir = catalog.manifests_dir / f"{name}.toml", catalog.patches_dir / name
        if _ours(manifest, f["manifest_ino"]):
            manifest.unlink()
        if _ours(patch_dir, f["dir_ino"]):
            shutil.rmtree(patch_dir)
        old = stage / "old" / name
        if (old / "manifest.toml").exists() and not manifest.exists():
            os.rename(old / "manifest.toml", manifest)
        if (old / "patches").exists() and not patch_dir.exists():
            os.rename(old / "patches", patch_dir)


def _write(catalog: Catalog, fixes: list[tuple[str, dict[str, tuple[str, str]], str]],
           message: str | None) -> str | None:
    """Stage every fix's series and manifest, read them back as the catalog will, move them in
    (the manifests last: a fix exists once its manifest does), commit."""
    stage = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=_stage_root(catalog)))
    try:
        recover(catalog)  # another run's leftovers (this run's stage names a live process)
        journal: dict = {"fixes": [], "message": message, "linked": False}
        for name, texts, text in fixes:
            staged = stage / "patches" / name
            staged.mkdir(parents=True)
            for file, (body, root) in texts.items():
                faults.fault("import-stage")
                (staged / file).write_text(body, encoding="utf-8", errors="surrogateescape",
                                           newline="")
                try:
                    series.parse_patch(staged / file, root)
                except PatchFormatError as exc:
                    raise InternalError(f"patchkit wrote a series file {file} for {name} that "
                                        f"it cannot read back: {exc.message}. Nothing was "
                                        "imported; report this", fix=name) from None
            manifest = stage / f"{name}.toml"
            manifest.write_text(text, encoding="utf-8", newline="")
            load_manifest(manifest, patch_dir=staged)  # the catalog reads it back as written
            journal["fixes"].append({"name": name, "manifest_ino": manifest.stat().st_ino,
                                     "dir_ino": staged.stat().st_ino})
        _save(stage, journal)
        catalog.manifests_dir.mkdir(parents=True, exist_ok=True)
        catalog.patches_dir.mkdir(parents=True, exist_ok=True)
        try:
            for name, _texts, _text in fixes:  # a replaced fix's files are moved aside first
                old = stage / "old" / name
                for path, kept in ((catalog.manifests_dir / f"{name}.toml", "manifest.toml"),
                                   (catalog.patches_dir / name, "patches")):
                    if os.path.lexists(path):
                        old.mkdir(parents=True, exist_ok=True)
                        faults.fault("import-move")
                        os.rename(path, old / kept)
                faults.fault("import-move")
                os.rename(stage / "patches" / name, catalog.patches_dir / name)
            for name, _texts, _text in fixes:  # hidden from readers until "linked" is saved
                faults.fault("import-manifest")
                os.link(stage / f"{name}.toml", catalog.manifests_dir / f"{name}.toml")
            faults.fault("import-linked")
            journal["linked"] = True  # the commit point: every fix of the import is in
            _save(stage, journal)
            sha = None
            if message is not None:
                faults.fault("import-commit")
                sha = _commit(catalog, [name for name, _t, _x in fixes], message)
            faults.fault("import-done")
        except BaseException:
            _undo(catalog, stage, journal["fixes"])
            raise
        return sha
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        _tidy(stage.parent)


def _tidy(where: Path) -> None:
    """Remove the staging area when no other run uses it (it is made again when needed)."""
    with contextlib.suppress(OSError):
        if [p.name for p in where.iterdir()] == [".gitignore"]:
            (where / ".gitignore").unlink()
            where.rmdir()


def _save(stage: Path, journal: dict) -> None:
    tmp = stage / "journal.json.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(journal, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, stage / "journal.json")


def _commit(catalog: Catalog, names: list[str], message: str) -> str | None:
    """Commit the fixes' manifests and series alone; on a failure the index is put back and
    the error says nothing was imported."""
    top = gitrepo.work_tree_top(catalog.root)
    if top is None:
        return None
    paths = [os.path.relpath(p.resolve(), top.resolve()) for name in names
             for p in (catalog.manifests_dir / f"{name}.toml", catalog.patches_dir / name)]
    try:
        if not gitrepo._run(top, ["status", "--porcelain", "--", *paths]):
            return None  # replaced by the very same files: nothing to commit
        return gitrepo.commit_paths(top, paths, message)
    except TargetError as exc:
        with contextlib.suppress(TargetError):
            gitrepo._run(top, ["reset", "-q", "--", *paths])
        raise TargetError(
            f"committing the import to the catalog's git repository ({top}) failed: "
            f"{exc.message}. Nothing was imported; fix that and import again (`--no-commit` "
            "skips the commit)", paths=paths) from None


__all__ = ["Planned", "from_mbox", "from_quilt", "from_commits", "plan", "import_fixes",
           "tree_release", "existing", "recover", "FAULT_POINTS"]
