"""The one writer of a catalog's files and commits: a series (its patch files, then the
manifest, all or nothing), a new fix (series and new manifest, from ``catalog.edit``'s
validated text), several new fixes at once as ``patchkit import`` makes them (staged, read
back, moved in, surviving a kill; docs/interop.md), and the commit of what was written to the
catalog's git repository. ``authoring``, ``interop``, ``rebase`` and the upstream check write
through it; the loaded fixes of the :class:`~patchkit.catalog.Catalog` are forgotten as their
files change."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import gitrepo
from ..engine import faults
from ..errors import InternalError, PatchFormatError, PatchkitError, TargetError, UsageError
from . import Catalog, is_source_tree, series
from .manifest import AUTHOR_RE, load_manifest

#: where an import stages its files, inside the catalog (ignored by git), one dir per run
STAGE_DIR = ".patchkit-import"
#: the write points of an import, for the kill sweep (PATCHKIT_FAULT, engine/faults.py)
FAULT_POINTS = ("import-stage", "import-move", "import-manifest", "import-linked",
                "import-commit", "import-done")

Texts = dict[str, tuple[str, str]]  # series file name -> (text, root)


@dataclass(frozen=True)
class AuthoringResult:
    """What writing one fix did (or, ``dry_run``, would do): ``new``, ``refresh``, ``import``."""

    name: str
    version: int  # the version written (the current one when nothing changed)
    manifest: Path
    patches: tuple[Path, ...]  # the series files, in order
    files: tuple[str, ...]  # the paths the series changes
    base_release: str
    changed: bool
    ignored: tuple[str, ...] = ()  # changed or untracked files of the checkout left out
    commit: str | None = None  # the catalog commit recording the change, when one was made
    dry_run: bool = False  # nothing was written: what would be
    renamed: tuple[tuple[str, str], ...] = ()  # series files renamed (old, new)
    # changed files of the checkout left out because an applied fix wrote them: (path, fix)
    applied: tuple[tuple[str, str], ...] = ()
    # refresh: the version of the fix the checkout's record says is applied there (its files
    # now hold the version written: `patchkit apply` records it, writing nothing)
    recorded: int | None = None
    recorded_new: tuple[str, ...] = ()  # of those files, the ones the applied version did not change
    # refresh: files whose new diff is written on top of fixes applied before it there, and
    # applies only after them: (path, those fixes)
    stacked: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # refresh: files the old series changed that no longer differ in the checkout (dropped)
    dropped: tuple[str, ...] = ()
    # refresh: the releases the old version served besides the checkout's, which keep it as a
    # [[variants]] entry (the new one is known to apply to the checkout's release only)
    kept_for: tuple[str, ...] = ()
    kept_version: int | None = None
    # refresh: fixes applied on top of this one in a file (depends_on it, or stacked) whose
    # series applied on the old version and no longer applies on the new: (fix, its version, path)
    breaks: tuple[tuple[str, int, str], ...] = ()
    # new and refresh from a fork: files whose change does not apply to the release's own file
    # (commits after the release's tag changed it, and the change's context holds their
    # lines): (path, the tag, the fixes applied with --commit there that wrote it)
    off_release: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    # refresh: files whose new change does not apply on what the fixes it depends on leave
    # there (it took a dependency's lines in): (that dependency, path)
    against: tuple[tuple[str, str], ...] = ()


def slug(text: str) -> str:
    """A patch file's (or a fix's) name made of a title: lower case, dashes, at most 48."""
    found = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return found[:48].rstrip("-") or "change"


def identity(catalog: Catalog) -> str | None:
    """Who commits to the catalog's repository, "Name <email>", as git tells it (config or
    GIT_AUTHOR_* variables), when it has the form a manifest's ``author`` takes."""
    top = gitrepo.work_tree_top(catalog.root)
    found = gitrepo.author_ident(top) if top is not None else None
    return found if found and AUTHOR_RE.match(found) else None


def _read_back(staged: Path, root: str, named: Path) -> None:
    """A series file patchkit wrote must read back; else it is patchkit's bug, said of it."""
    try:
        series.parse_patch(staged, root)
    except PatchFormatError as exc:
        raise InternalError(
            f"patchkit wrote a series for {named} that it cannot read back: "
            f"{exc.message.replace(str(staged), str(named))}. Nothing was written; report "
            "this with the change that was being written", path=str(named)) from None


def write_series(files: dict[Path, tuple[str, str]], then: Callable[[], None]) -> None:
    """Write patch files (path: (text, root)), then the manifest (``then``); all or none: each
    text is staged and read back first, and on a failure every file is put back."""
    staged: dict[Path, Path] = {}
    olds: dict[Path, bytes | None] = {}
    try:
        for path, (text, root) in files.items():
            staged[path] = tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text, encoding="utf-8", errors="surrogateescape", newline="")
            _read_back(tmp, root, path)
        for path, tmp in staged.items():
            olds[path] = path.read_bytes() if path.exists() else None
            os.replace(tmp, path)
        then()
    except BaseException:
        for path, data in olds.items():
            if data is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(data)
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        raise


def _write_new(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


def create_fix(catalog: Catalog, name: str, texts: Texts, manifest: str) -> None:
    """Write a new fix: its series directory (``texts``) and its manifest (``manifest``, the
    text ``catalog.edit.new_manifest_text`` made), all or nothing; an existing one is never
    overwritten."""
    patch_dir = catalog.patches_dir / name
    catalog.manifests_dir.mkdir(parents=True, exist_ok=True)
    patch_dir.mkdir(parents=True)
    try:
        write_series({patch_dir / f: text for f, text in texts.items()},
                     lambda: _write_new(catalog.manifests_dir / f"{name}.toml", manifest))
    except BaseException:
        shutil.rmtree(patch_dir, ignore_errors=True)
        raise
    finally:
        catalog.forget(name)


def _paths(catalog: Catalog, top: Path, names: Sequence[str]) -> list[str]:
    return [os.path.relpath(p.resolve(), top.resolve()) for name in names
            for p in (catalog.manifests_dir / f"{name}.toml", catalog.patches_dir / name)]


def repository(catalog: Catalog) -> Path | None:
    """The git work tree the catalog's changes are committed to: the one it lies in (None:
    none). Not patchkit's own source tree for a catalog made inside it (`init` makes one there
    only with --no-git): its fixes are never committed to patchkit's repository. The tree's
    own catalog (its manifests/ and patches/, named with --catalog) is, as a patchkit
    developer's."""
    return _repository(catalog.root)


def _repository(root: Path) -> Path | None:
    top = gitrepo.work_tree_top(root)
    if top is not None and is_source_tree(Path(top), None) and Path(top).resolve() != root.resolve():
        return None
    return top


def not_committed(root: Path) -> str:
    """Why a change written to the catalog at ``root`` is not committed though it lies in a
    git work tree ("" when it is committed, or in no work tree)."""
    top = gitrepo.work_tree_top(root)
    if top is None or _repository(root) is not None:
        return ""
    return (f"not committed: the catalog lies in patchkit's own source tree ({top}), whose "
            "repository it is never committed to; make it a repository of its own (git init) "
            "to commit its fixes")


def check_committable(catalog: Catalog, what: str) -> None:
    """Refuse, before anything is written, a change the catalog's git repository could not
    commit for lack of the user's name or email (a new user's git knows none)."""
    top = repository(catalog)
    if top is not None:
        check_identity(top, what, "--no-commit")


def check_identity(where: Path, what: str, instead: str) -> None:
    """Refuse ``what`` before anything is written when git cannot commit as the user in
    ``where``, saying how to set who they are, or ``instead`` (the option that commits nothing)."""
    problem = gitrepo.identity_problem(where)
    if problem:
        raise UsageError(f"cannot {what}: it is committed to git, and git cannot commit as you in "
                         f"{where} ({problem}): set who you are (git config --global user.name "
                         "'Your Name'; git config --global user.email you@example.org), or pass "
                         f"{instead}. Nothing was written", path=str(where))


def commit(catalog: Catalog, name: str, message: str) -> str | None:
    """Commit the fix's manifest and series directory alone, when the catalog is in git
    (None when it is not); a failure says what is written and what to commit by hand."""
    top = repository(catalog)
    if top is None:
        return None
    paths = _paths(catalog, top, [name])
    try:
        return gitrepo.commit_paths(top, paths, message)
    except TargetError as exc:
        raise TargetError(
            f"{message.splitlines()[0]} is written in {catalog.root}, but committing it to "
            f"the catalog's git repository ({top}) failed: {exc.message}. Fix that and commit "
            f"{' and '.join(paths)} yourself (`--no-commit` skips this step)",
            fix=name, paths=paths) from None


def _commit_import(catalog: Catalog, names: list[str], message: str) -> str | None:
    """Commit an import's fixes; on a failure the index is put back and the error says
    nothing was imported."""
    top = repository(catalog)
    if top is None:
        return None
    paths = _paths(catalog, top, names)
    try:
        if gitrepo.is_clean(top, paths):
            return None  # replaced by the very same files: nothing to commit
        return gitrepo.commit_paths(top, paths, message)
    except TargetError as exc:
        with contextlib.suppress(TargetError):
            gitrepo.unstage(top, paths)
        raise TargetError(
            f"committing the import to the catalog's git repository ({top}) failed: "
            f"{exc.message}. Nothing was imported; fix that and import again (`--no-commit` "
            "skips the commit)", paths=paths) from None


# -- several new fixes at once: staged, checked, moved in, committed; undone on any error or by
#    the next run (patchkit import) ---------------------------------------------------------

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
                _commit_import(catalog, [f["name"] for f in fixes], journal["message"])
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
        catalog.forget(name)


def _stage(stage: Path, fixes: list[tuple[str, Texts, str]]) -> list[dict]:
    """Write every fix's series and manifest into ``stage``, each read back as the catalog
    will read it; the journal's entries that say what to undo."""
    entries: list[dict] = []
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
        entries.append({"name": name, "manifest_ino": manifest.stat().st_ino,
                        "dir_ino": staged.stat().st_ino})
    return entries


def _move_in(catalog: Catalog, stage: Path, names: list[str]) -> None:
    """Move each fix's series in (a replaced fix's files aside first), then link the
    manifests: hidden from readers until the journal says "linked"."""
    for name in names:
        old = stage / "old" / name
        for path, kept in ((catalog.manifests_dir / f"{name}.toml", "manifest.toml"),
                           (catalog.patches_dir / name, "patches")):
            if os.path.lexists(path):
                old.mkdir(parents=True, exist_ok=True)
                faults.fault("import-move")
                os.rename(path, old / kept)
        faults.fault("import-move")
        os.rename(stage / "patches" / name, catalog.patches_dir / name)
    for name in names:
        faults.fault("import-manifest")
        os.link(stage / f"{name}.toml", catalog.manifests_dir / f"{name}.toml")
        catalog.forget(name)


def write_fixes(catalog: Catalog, fixes: list[tuple[str, Texts, str]],
                message: str | None) -> str | None:
    """Write new fixes (name, series texts, manifest text) all or nothing: staged, read back
    as the catalog will, moved in (the manifests last: a fix exists once its manifest does)
    and committed with ``message`` (None: no commit); the commit made."""
    stage = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=_stage_root(catalog)))
    names = [name for name, _t, _x in fixes]
    try:
        recover(catalog)  # another run's leftovers (this run's stage names a live process)
        journal: dict = {"fixes": _stage(stage, fixes), "message": message, "linked": False}
        _save(stage, journal)
        catalog.manifests_dir.mkdir(parents=True, exist_ok=True)
        catalog.patches_dir.mkdir(parents=True, exist_ok=True)
        try:
            _move_in(catalog, stage, names)
            faults.fault("import-linked")
            journal["linked"] = True  # the commit point: every fix of the import is in
            _save(stage, journal)
            sha = None
            if message is not None:
                faults.fault("import-commit")
                sha = _commit_import(catalog, names, message)
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


__all__ = ["AuthoringResult", "FAULT_POINTS", "STAGE_DIR", "Texts", "commit", "create_fix", "identity", "recover",
           "slug", "write_fixes", "write_series"]
