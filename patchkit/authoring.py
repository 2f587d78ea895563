"""Authoring fixes from a checkout: ``patchkit init``, ``new`` and ``refresh`` (docs/authoring.md).

Files are written only once everything is computed (:func:`write_series`); a catalog in git
gets a commit per ``new`` and ``refresh``, the history ``patchkit diff --versions`` reads."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import itertools
import json
import os
import re
import shutil
import stat
from email.utils import format_datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from . import gitrepo
from .catalog import edit, series
from .catalog import Catalog
from .catalog.manifest import AUTHOR_RE, name_problem
from .engine.auto import detect_release
from .engine.paths import Root, detect_layout
from .engine.records import State
from .errors import InternalError, PatchFormatError, TargetError, UsageError


@dataclass(frozen=True)
class CapturedFile:
    path: str  # relative to the checkout
    before: bytes | None  # None: absent at HEAD (created)
    after: bytes | None  # None: deleted in the work tree
    mode: str  # git mode in the work tree ("100644" or "100755"); the HEAD mode when deleted
    old_mode: str | None = None  # git mode at HEAD; None when absent at HEAD


@dataclass(frozen=True)
class AuthoringResult:
    name: str
    version: int
    manifest: Path
    patches: tuple[Path, ...]
    files: tuple[str, ...]
    base_release: str
    changed: bool
    ignored: tuple[str, ...] = ()  # changed or untracked files of the checkout left out
    commit: str | None = None  # the catalog commit recording the change, when one was made
    dry_run: bool = False  # nothing was written: what would be
    renamed: tuple[tuple[str, str], ...] = ()  # series files renamed (old, new)
    # changed files of the checkout left out because an applied fix wrote them: (path, fix)
    applied: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class InitResult:
    root: Path
    files: tuple[Path, ...]
    commit: str | None  # the first commit, when patchkit made or found a git repository


CATALOG_CONFIG = """\
# patchkit.toml: the settings of this catalog (docs/manifest.md, "patchkit.toml").
# patchkit reads it when run from this directory (or with --config).

# The catalog is this directory: manifests/<fix>.toml and patches/<fix>/.
catalog = "."

# The fixes shipped with patchkit sit beside yours: `patchkit list` shows both, and a fix of
# yours named like a shipped one replaces it (with a warning). false: only your own fixes.
shipped_fixes = true

# Name the targets you deploy to, then `patchkit apply FIX --target NAME`:
#
# default_target = "prod"
#
# [targets.prod]
# path = "/opt/sglang"               # an SGLang checkout or installed package
# roots = { serve = "/opt/serve" }   # other roots fixes patch (root = "serve" in a manifest)
#
# [targets.gpu-a]
# host = "gpu-a.example.com"         # a remote target, reached with ssh
# user = "deploy"
# path = "/opt/sglang"
"""


def init_catalog(path: Path | str, *, git: bool = True) -> InitResult:
    """Make a new catalog at ``path`` (``manifests/``, ``patches/``, ``patchkit.toml``) and, with
    ``git``, commit it: to the work tree it lies in, else to a new repository."""
    root = Path(path)
    existing = [n for n in ("manifests", "patches", "patchkit.toml") if (root / n).exists()]
    if existing:
        raise UsageError(f"{root} already holds {', '.join(existing)}: it is (part of) a "
                         "catalog. Use it as it is, or pass `patchkit init` a new directory",
                         path=str(root))
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root} is a file, not a directory; pass `patchkit init` a new "
                         "directory", path=str(root))
    here = root.absolute()
    while not here.exists():  # a DIR to make inside a work tree belongs to that work tree too
        here = here.parent
    top = gitrepo.work_tree_top(here)
    root.mkdir(parents=True, exist_ok=True)
    files = [root / "manifests" / ".gitkeep", root / "patches" / ".gitkeep", root / "patchkit.toml"]
    for keep in files[:2]:  # git keeps no empty directory
        keep.parent.mkdir()
        keep.write_text("")
    files[2].write_text(CATALOG_CONFIG, encoding="utf-8")
    commit = None
    if git:
        if top is None:
            gitrepo.init(root)
            top = root
        rel = [os.path.relpath(f, top) for f in files]
        commit = gitrepo.commit_paths(top, rel, "patchkit catalog: manifests/, patches/, "
                                    "patchkit.toml\n\nMade by `patchkit init`.\n")
    return InitResult(root, tuple(files), commit)


def _commit(catalog: Catalog, name: str, message: str) -> str | None:
    """Commit the fix's manifest and series directory when the catalog is in git."""
    top = gitrepo.work_tree_top(catalog.root)
    if top is None:
        return None
    paths = [os.path.relpath(p.resolve(), top.resolve())
             for p in (catalog.manifests_dir / f"{name}.toml", catalog.patches_dir / name)]
    try:
        return gitrepo.commit_paths(top, paths, message)
    except TargetError as exc:
        raise TargetError(
            f"{message.splitlines()[0]} is written in {catalog.root}, but committing it to "
            f"the catalog's git repository ({top}) failed: {exc.message}. Fix that and commit "
            f"{' and '.join(paths)} yourself (`--no-commit` skips this step)",
            fix=name, paths=paths) from None


def release_of(tree: Path, rev: str | None = None) -> str | None:
    """The SGLang release of a checkout's HEAD (or ``rev``) from its committed version file or
    tag, never the work tree's: the fix is written against what HEAD holds."""
    root = Root("sglang", str(tree), os.path.realpath(tree), detect_layout(str(tree)))
    with contextlib.closing(gitrepo.Blobs(tree)) as blobs:
        return detect_release(root, lambda rel: blobs.read(rev or "HEAD", rel))[0]


def capture(src: Path, paths: Sequence[str] = ()) -> list[CapturedFile]:
    """The uncommitted changes of ``src`` (or of ``paths`` in it) against HEAD."""
    src = _checkout(src, "patchkit captures a fix as the checkout's uncommitted changes "
                         "against HEAD, so pass --from the checkout's top directory")
    out = []
    modes = gitrepo.tracks_modes(src)
    with contextlib.closing(gitrepo.Blobs(src)) as blobs:
        for rel in gitrepo.changed_files(src, paths):
            full = src / rel
            before, old_mode = blobs.file("HEAD", rel) or (None, None)
            after = full.read_bytes() if full.is_file() else None
            if after is None or (old_mode is not None and not modes):
                mode = old_mode or series.DEFAULT_MODE
            else:  # git's rule: the owner's execute bit makes a file 100755
                mode = "100755" if full.stat().st_mode & stat.S_IXUSR else "100644"
            if before == after and (before is None or old_mode == mode):
                continue  # git lists it (staged, or filtered) but bytes and mode equal HEAD's
            out.append(CapturedFile(rel, before, after, mode, old_mode))
    if not out:
        what = " ".join(paths) if paths else "the tree"
        raise UsageError(f"nothing to capture: {what} in {src} has no changes against HEAD; "
                         "edit the files (or name new files as PATH arguments) first",
                         path=str(src))
    return out


def applied_owners(src: Path, root: str, *, but: str | None = None) -> dict[str, str]:
    """path -> the applied fix (other than ``but``) that last wrote it in the checkout ``src``, as
    its own record says (``.patchkit/state.json``, docs/state.md): changes patchkit made there,
    not the author's. Only the files of root ``root``; nothing when the checkout has no record."""
    path = Path(src) / ".patchkit" / "state.json"
    if not path.is_file():
        return {}
    try:
        writers = State.from_json(json.loads(path.read_text(encoding="utf-8"))).last_writers()
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"cannot read the checkout's record {path} ({exc}): it says which files "
                         "applied fixes wrote, which a capture leaves out. Repair it (`patchkit "
                         f"status --target {src}` names the problem) or pass --include-applied",
                         path=str(path)) from None
    return {p: fix for (r, p), (fix, _after) in writers.items() if r == root and fix != but}


def _leave_applied(files: list[CapturedFile], owners: dict[str, str], src: Path,
                   name: str) -> tuple[list[CapturedFile], tuple[tuple[str, str], ...]]:
    """``files`` without those applied fixes wrote, and those left out (path, fix)."""
    kept = [f for f in files if f.path not in owners]
    left = tuple((f.path, owners[f.path]) for f in files if f.path in owners)
    if left and not kept:
        fixes = ", ".join(sorted({fix for _p, fix in left}))
        raise UsageError(f"nothing to capture for {name!r}: every changed file of {src} was "
                         f"written by an applied fix ({fixes}; recorded in .patchkit/state.json): "
                         f"{', '.join(p for p, _f in left)}. Edit other files, roll those fixes "
                         "back, or pass --include-applied to take them", path=str(src), fix=name)
    return kept, left


def _checkout(src: Path | str, advice: str) -> Path:
    if not gitrepo.is_git_repo(src):
        raise UsageError(f"{src} is not the top of a git checkout; {advice}", path=str(src))
    return Path(src)


PLACEHOLDER_AUTHOR = "patchkit <fixes@patchkit.invalid>"  # the From when nobody is known


def catalog_identity(catalog: Catalog) -> str | None:
    """Who commits to the catalog's repository, "Name <email>", as git tells it (config or
    GIT_AUTHOR_* variables), when it has the form a manifest's ``author`` takes."""
    top = gitrepo.work_tree_top(catalog.root)
    if top is None:
        return None
    try:
        ident = gitrepo._run(top, ["var", "GIT_AUTHOR_IDENT"]).strip()
    except TargetError:
        return None
    found = re.sub(r"\s+\d+\s+[-+]\d{4}$", "", ident)
    return found if AUTHOR_RE.match(found) else None


@dataclass(frozen=True)
class _Header:
    subject: str
    body: str = ""
    author: str = PLACEHOLDER_AUTHOR
    date: str | None = None  # RFC 2822, as in a mail; None: no Date line


def _series_text(head: _Header, files: Sequence[CapturedFile]) -> str:
    date = f"Date: {head.date}\n" if head.date else ""
    body = head.body.strip() + "\n" if head.body.strip() else ""
    return (f"From: {head.author}\n{date}Subject: [PATCH] {head.subject}\n\n{body}---\n"
            + "".join(series.diff_files(f.before, f.after, f.path, mode=f.mode,
                                        old_mode=f.old_mode) for f in files))


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:48].rstrip("-") or "change"


def capture_commits(src: Path, spec: str
                    ) -> tuple[list[tuple[_Header, list[CapturedFile]]], str, str | None]:
    """Each commit of ``spec`` (``A..B``) in ``src``, oldest first, as (header, files changed);
    then the first commit and its parent (None for a root commit)."""
    src = _checkout(src, "pass --from the checkout holding the commits")
    shas = gitrepo.commit_range(src, spec)
    if not shas:
        raise UsageError(f"{spec} holds no commits in {src}: the range is A..B, the commits "
                         "after A up to B (e.g. v0.5.23..HEAD)", path=str(src), spec=spec)
    out, first_parent = [], None
    with contextlib.closing(gitrepo.Blobs(src)) as blobs:
        for sha in shas:
            info = gitrepo.commit_info(src, sha)
            parent = info.parents[0] if info.parents else None
            first_parent = parent if sha == shas[0] else first_parent
            files = []
            for path, old_mode, new_mode in gitrepo.commit_files(src, sha):
                before = blobs.read(parent, path) if parent and old_mode else None
                after = blobs.read(sha, path) if new_mode else None
                files.append(CapturedFile(path, before, after, new_mode or old_mode or
                                          series.DEFAULT_MODE, old_mode))
            if not files:
                raise UsageError(f"commit {sha[:12]} in {src} changes no file; leave it out of "
                                 "the range (a fix's patches each change something)", rev=sha)
            subject, _, body = info.message.partition("\n")
            date = format_datetime(_dt.datetime.fromisoformat(info.authored_date))
            out.append((_Header(subject.strip(), body.strip(),
                                f"{info.author.name} <{info.author.email}>", date), files))
    return out, shas[0], first_parent


def new_fix(catalog: Catalog, name: str, src: Path, *, root: str = "sglang",
            paths: Sequence[str] = (), title: str | None = None, rationale: str = "",
            base_release: str | None = None, date: str | None = None,
            commits: str | None = None, commit: bool = True, author: str | None = None,
            dry_run: bool = False, include_applied: bool = False) -> AuthoringResult:
    """Capture a checkout's uncommitted changes (of ``paths``) as version 1 of a new fix, one
    patch titled ``title`` (default: the name); or with ``commits`` (``A..B``) a patch per
    commit, title and rationale defaulting to the first one's, based on the release at A; its
    trailers (Bug:, Reviewed-by:, ...) become manifest fields as ``patchkit import`` maps them.
    ``author`` (the manifest's, and the From of the series) defaults to the first commit's
    author, else the catalog repository's git user. Uncommitted changes an applied fix wrote
    (the checkout's ``.patchkit/state.json``) are left out, unless ``include_applied``."""
    catalog.check_writable(f"create the fix {name[:60]!r}")
    problem = name_problem(name)
    if problem:
        raise UsageError(f"cannot create the fix: {problem}", fix=name[:200])
    manifest_path = catalog.manifests_dir / f"{name}.toml"
    patch_dir = catalog.patches_dir / name
    if manifest_path.exists() or patch_dir.exists():
        raise UsageError(f"fix {name!r} already exists ({manifest_path}); use `patchkit refresh "
                         f"{name} --from DIR` to record a new version of it", fix=name)
    if author and not AUTHOR_RE.match(author):
        raise UsageError(f"--author {author!r} is not of the form 'Name <email>' (as git writes "
                         "it, e.g. \"Ada Lovelace <ada@example.org>\")", fix=name)
    src = Path(src)
    ignored: tuple[str, ...] = ()
    applied: tuple[tuple[str, str], ...] = ()
    upstream: dict[str, str] = {}
    headers: list[tuple[str, str]] = []
    if commits is not None:
        if paths:
            raise UsageError("--commits takes whole commits: name no PATHS with it", fix=name)
        captured, first, parent = capture_commits(src, commits)
        title = title or captured[0][0].subject
        from .interop import dep3, mbox  # the first commit's trailers, read as import reads them
        body, trailers = mbox.split_trailers(captured[0][0].body)
        said = dep3.fields_of(trailers, src)
        upstream, headers = said["upstream"], said["headers"]
        rationale = rationale or body
        first_author = "" if said.get("author_unset") else captured[0][0].author
        author = author or (first_author if AUTHOR_RE.match(first_author) else "")
        release = base_release or (release_of(src, parent) if parent else None)
        where = f"{src} at the parent of {first[:12]}"
    else:
        files = capture(src, paths)
        if not include_applied:
            files, applied = _leave_applied(files, applied_owners(src, root), src, name)
        title = title or name
        author = author or catalog_identity(catalog) or ""
        captured = [(_Header(title, rationale, author or PLACEHOLDER_AUTHOR), files)]
        release = base_release or release_of(src)
        where = str(src)
        ignored = tuple(gitrepo.unclaimed_files(src, [f.path for f in files]
                                                + [p for p, _f in applied]))
    if release is None:
        raise UsageError(f"cannot tell which SGLang release {where} is (no sglang/_version.py, "
                         "no release tag at HEAD); pass --base-release VERSION", path=str(src))
    texts = {f"{i:04d}-{_slug(head.subject)}.patch": _series_text(head, files)
             for i, (head, files) in enumerate(captured, 1)}
    text = edit.new_manifest_text(name, title, release, [(f, root) for f in texts],
                                      rationale, date=date or _dt.date.today().isoformat(),
                                      author=author or "", upstream=upstream, headers=headers)
    touched = tuple(dict.fromkeys(f.path for _h, files in captured for f in files))
    result = AuthoringResult(name, 1, manifest_path, tuple(patch_dir / f for f in texts),
                             touched, release, changed=True, ignored=ignored, dry_run=dry_run,
                             applied=applied)
    if dry_run:
        return result
    catalog.manifests_dir.mkdir(parents=True, exist_ok=True)
    patch_dir.mkdir(parents=True)
    try:
        write_series({patch_dir / f: (body, root) for f, body in texts.items()},
                     lambda: _write_new(manifest_path, text))
    except BaseException:
        shutil.rmtree(patch_dir, ignore_errors=True)
        raise
    sha = _commit(catalog, name, f"{name} v1: {title}\n\nCaptured by `patchkit new` from a "
                  f"checkout of {release}.\n") if commit else None
    return dataclasses.replace(result, commit=sha)


def write_series(files: dict[Path, tuple[str, str]], then: Callable[[], None]) -> None:
    """Write patch files (path: (text, root)), then the manifest (``then``); all or none: each
    text is staged and read back first, and on a failure every file is put back."""
    staged: dict[Path, Path] = {}
    olds: dict[Path, bytes | None] = {}
    try:
        for path, (text, root) in files.items():
            staged[path] = tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text, encoding="utf-8", errors="surrogateescape", newline="")
            try:
                series.parse_patch(tmp, root)
            except PatchFormatError as exc:  # patchkit's bug, said of the file, not the tmp
                raise InternalError(
                    f"patchkit wrote a series for {path} that it cannot read back: "
                    f"{exc.message.replace(str(tmp), str(path))}. Nothing was written; report "
                    "this with the change that was being written", path=str(path)) from None
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


def refresh_fix(catalog: Catalog, name: str, src: Path, *, paths: Sequence[str] = (),
                summary: str | None = None, squash: bool = False, date: str | None = None,
                commit: bool = True, dry_run: bool = False,
                include_applied: bool = False) -> AuthoringResult:
    """Rewrite a fix's series from the checkout and bump its version; nothing is written when
    nothing changed. Files another applied fix wrote are left out, as in :func:`new_fix`. Each patch keeps its files, new ones (``paths``) go to the last; two
    patches touching one file need ``squash``. A one-patch series takes the fix's title as its
    Subject (and file name, when that was made from the old Subject)."""
    catalog.check_writable(f"refresh {name!r}")
    fix = catalog.get(name)
    catalog.check_own([name], "refresh")
    owner: dict[str, int] = {}
    for index, ref in enumerate(fix.patches):
        for record in series.parse_patch(ref.path, ref.root):
            if record["path"] in owner and owner[record["path"]] != index and not squash:
                raise UsageError(
                    f"{record['path']} is changed by both {fix.patches[owner[record['path']]].file}"
                    f" and {ref.file} of {name}; refresh cannot split one file's change between "
                    "patches. Pass --squash to rewrite the series as one patch", fix=name,
                    path=record["path"])
            owner.setdefault(record["path"], index)
    files = capture(src, tuple(sorted(set(owner) | set(paths))))
    applied: tuple[tuple[str, str], ...] = ()
    if not include_applied:
        owners: dict[str, str] = {}
        for root in dict.fromkeys(ref.root for ref in fix.patches):
            owners.update(applied_owners(src, root, but=name))
        files, applied = _leave_applied(files, owners, src, name)
    ignored = tuple(gitrepo.unclaimed_files(src, [f.path for f in files]
                                            + [p for p, _f in applied]))
    groups: list[list[CapturedFile]] = [[] for _ in fix.patches]
    for f in files:
        index = 0 if squash else owner.get(f.path, len(fix.patches) - 1)
        groups[index].append(f)
    refs = fix.patches[:1] if squash else fix.patches
    texts: dict = {}
    targets: dict = {}
    old_texts = {r: r.path.read_text(encoding="utf-8", errors="surrogateescape") for r in refs}
    for ref, group in zip(refs, groups):
        if not group:  # none of its files differ from HEAD any more: the patch is dropped
            continue
        head = _header_of(old_texts[ref], fix.title)
        if fix.author and head.author == PLACEHOLDER_AUTHOR:
            head = dataclasses.replace(head, author=fix.author)
        target = ref.path
        if len(refs) == 1 and head.subject != fix.title:
            prefix = ref.file.split("-", 1)[0]
            if ref.file == f"{prefix}-{_slug(head.subject)}.patch":
                target = ref.path.with_name(f"{prefix}-{_slug(fix.title)}.patch")
            head = dataclasses.replace(head, subject=fix.title)
        texts[ref] = _series_text(head, group)
        targets[ref] = target
    release = release_of(src) or fix.upstream.base_release
    renamed = tuple((r.file, t.name) for r, t in targets.items() if t != r.path)
    unchanged = (list(texts) == list(fix.patches) and not renamed
                 and all(texts[r] == old_texts[r] for r in texts))
    changed = not unchanged or release != fix.upstream.base_release
    version = fix.version + 1 if changed else fix.version
    result = AuthoringResult(name, version, fix.manifest_path, tuple(targets[r] for r in texts),
                             tuple(f.path for f in files), release, changed=changed,
                             ignored=ignored, dry_run=dry_run, renamed=renamed, applied=applied)
    if dry_run or not changed:
        return result
    dropped = [r for r in fix.patches if r not in texts]
    summary = summary or f"Refreshed from a checkout of {release}."
    write_series({targets[r]: (texts[r], r.root) for r in texts}, lambda: edit.bump_manifest(
        fix.manifest_path, version=version, changelog_summary=summary,
        date=date or _dt.date.today().isoformat(),
        patches=([(targets[r].name, r.root, r.description) for r in texts]
                 if dropped or renamed else None),
        base_release=release if release != fix.upstream.base_release else None))
    for ref in fix.patches:
        if ref in dropped or targets[ref] != ref.path:
            ref.path.unlink()
    sha = _commit(catalog, name, f"{name} v{version}: {summary}\n\nRecorded by `patchkit "
                  "refresh` from a checkout.\n") if commit else None
    return dataclasses.replace(result, commit=sha)


def _header_of(text: str, default_subject: str) -> _Header:
    """A series file's mail header (From, Date, Subject, body), kept when it is rewritten."""
    lines = text.split("\ndiff --git ", 1)[0].splitlines()
    found: dict = {"subject": default_subject}
    for i, line in enumerate(lines):
        if line.startswith("From:"):
            found["author"] = line[len("From:"):].strip()
        elif line.startswith("Date:"):
            found["date"] = line[len("Date:"):].strip()
        elif line.startswith("Subject:"):
            found["subject"] = re.sub(r"^Subject:\s*(\[PATCH[^\]]*\]\s*)?", "", line).strip()
            body = itertools.takewhile(lambda ln: ln.strip() != "---", lines[i + 1:])
            return _Header(body="\n".join(body).strip(), **found)
    return _Header(**found)
