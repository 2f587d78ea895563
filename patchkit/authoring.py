"""Authoring fixes from a checkout: ``patchkit init``, ``new`` and ``refresh`` (docs/authoring.md).

Files are written only once everything is computed, through the catalog's one writer
(:mod:`patchkit.catalog.writer`); a catalog in git gets a commit per ``new`` and ``refresh``,
the history ``patchkit diff --versions`` reads."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Sequence

from . import gitrepo
from .capture import (CapturedFile, applies, applied_owners, applied_record, applied_writers, as_before, capture,
                      capture_commits, diff_of, leave_applied, off_release,
                      release_of)
from .catalog import Catalog, edit, is_source_tree, patchmail, series, writer
from .catalog.manifest import AUTHOR_RE, name_problem
from .catalog.model import Fix, PatchRef, Variant
from .catalog.patchmail import PLACEHOLDER_AUTHOR, Header
from .catalog.writer import AuthoringResult
from .engine.contract import PRIMARY_ROOT
from .errors import UsageError

__all__ = ["AuthoringResult", "CATALOG_CONFIG", "InitResult", "init_catalog", "new_fix",
           "refresh_fix"]


@dataclass(frozen=True)
class InitResult:
    root: Path
    files: tuple[Path, ...]
    commit: str | None  # the first commit, when patchkit made or found a git repository
    repository: Path | None = None  # the work tree committed to: the catalog's own, or one it lies in


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

# The restarts fixes name (restart = "prefill" in a manifest, as the shipped fixes do):
# `apply` and `rollback` say which are needed, and with --restart run them.
#
# [restarts]
# prefill = "systemctl restart sglang-prefill"
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
    if git and top is not None and is_source_tree(top, None):
        # the Quick start runs from a clone of patchkit: `patchkit init fixes` there committed
        # the user's catalog to patchkit's own repository (a trial)
        raise UsageError(f"{root} lies in patchkit's own source tree ({top}): a catalog made "
                         "there would be committed to patchkit's git repository. Make it outside "
                         "the clone (e.g. `patchkit init ~/sglang-fixes`), or pass --no-git",
                         path=str(root), repository=str(top))
    if git:  # found before anything is written: a rerun once it is set works
        writer.check_identity(here, "make the catalog", "--no-git")
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
    return InitResult(root, tuple(files), commit, top if git else None)


@dataclass(frozen=True)
class _Capture:
    """What ``new`` took from the checkout: a header and files per patch, and the manifest's
    fields they say."""

    patches: list[tuple[Header, list[CapturedFile]]]
    title: str
    rationale: str
    author: str
    release: str | None
    where: str  # the tree the release was read from, for the error when there is none
    upstream: dict[str, str] = dataclasses.field(default_factory=dict)
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    ignored: tuple[str, ...] = ()
    applied: tuple[tuple[str, str], ...] = ()


def _check_new(catalog: Catalog, name: str, author: str | None) -> None:
    catalog.check_writable(f"create the fix {name[:60]!r}")
    problem = name_problem(name)
    if problem:
        raise UsageError(f"cannot create the fix: {problem}", fix=name[:200])
    manifest_path = catalog.manifests_dir / f"{name}.toml"
    if manifest_path.exists() or (catalog.patches_dir / name).exists():
        raise UsageError(f"fix {name!r} already exists ({manifest_path}); use `patchkit refresh "
                         f"{name} --from DIR` to record a new version of it", fix=name)
    if author and not AUTHOR_RE.match(author):
        raise UsageError(f"--author {author!r} is not of the form 'Name <email>' (as git writes "
                         "it, e.g. \"Ada Lovelace <ada@example.org>\")", fix=name)


def _from_commits(src: Path, commits: str, title: str | None, rationale: str,
                  author: str | None, base_release: str | None) -> _Capture:
    """A patch per commit; title, rationale, author and trailers from the first one, read as
    ``patchkit import`` reads them; the release at the range's start."""
    captured, first, parent = capture_commits(src, commits)
    from .interop import dep3, mbox  # the first commit's trailers, read as import reads them
    body, trailers = mbox.split_trailers(captured[0][0].body)
    said = dep3.fields_of(trailers, src)
    first_author = "" if said.get("author_unset") else captured[0][0].author
    return _Capture(captured, title or captured[0][0].subject, rationale or body,
                    author or (first_author if AUTHOR_RE.match(first_author) else ""),
                    base_release or (release_of(src, parent) if parent else None),
                    f"{src} at the parent of {first[:12]}", said["upstream"], said["headers"])


def _from_changes(catalog: Catalog, name: str, src: Path, root: str, paths: Sequence[str],
                  title: str | None, rationale: str, author: str | None,
                  base_release: str | None, include_applied: bool,
                  record: Path | None) -> _Capture:
    """One patch of the checkout's uncommitted changes (but those applied fixes wrote)."""
    files = capture(src, paths)
    applied: tuple[tuple[str, str], ...] = ()
    owners: dict[str, str] = {}
    if not include_applied:
        owners = applied_owners(src, root, record=record)
        files, applied = leave_applied(files, owners, src, name)
    title = title or name
    author = author or writer.identity(catalog) or ""
    ignored, applied = _unclaimed(src, files, applied, owners)
    return _Capture([(Header(title, rationale, author or PLACEHOLDER_AUTHOR), files)], title,
                    rationale, author, base_release or release_of(src), str(src),
                    ignored=ignored, applied=applied)


def _unclaimed(src: Path, files: list[CapturedFile], applied: tuple[tuple[str, str], ...],
               owners: dict[str, str]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The changed files a capture left out: those applied fixes wrote (``owners``) are said
    as theirs, with the ones the capture met (``applied``), not as files to name as PATHs
    (naming one is refused); the rest are ``ignored``."""
    left = gitrepo.unclaimed_files(src, [f.path for f in files] + [p for p, _f in applied])
    theirs = tuple((p, owners[p]) for p in left if p in owners)
    return tuple(p for p in left if p not in owners), applied + theirs


def new_fix(catalog: Catalog, name: str, src: Path, *, root: str = "sglang",
            paths: Sequence[str] = (), title: str | None = None, rationale: str = "",
            base_release: str | None = None, date: str | None = None,
            commits: str | None = None, commit: bool = True, author: str | None = None,
            dry_run: bool = False, include_applied: bool = False,
            record: Path | None = None) -> AuthoringResult:
    """Capture a checkout's uncommitted changes (of ``paths``) as version 1 of a new fix, one
    patch titled ``title`` (default: the name); or with ``commits`` (``A..B``) a patch per
    commit, title and rationale defaulting to the first one's, based on the release at A; its
    trailers (Bug:, Reviewed-by:, ...) become manifest fields as ``patchkit import`` maps them.
    ``author`` (the manifest's, and the From of the series) defaults to the first commit's
    author, else the catalog repository's git user. Uncommitted changes an applied fix wrote
    (the checkout's ``.patchkit/state.json``, or for another ``root`` than sglang that of
    ``record``, the target's sglang tree) are left out, unless ``include_applied``. A series of
    another root checks no release (``releases = []``), as ``import`` writes one."""
    _check_new(catalog, name, author)
    if commit and not dry_run:
        writer.check_committable(catalog, f"create the fix {name!r}")
    src = Path(src)
    if commits is not None:
        if paths:
            raise UsageError("--commits takes whole commits: name no PATHS with it", fix=name)
        got = _from_commits(src, commits, title, rationale, author, base_release)
    else:
        got = _from_changes(catalog, name, src, root, paths, title, rationale, author,
                            base_release, include_applied, record)
    sglang = root == PRIMARY_ROOT
    if got.release is None and not sglang:
        got = dataclasses.replace(got, release=edit.NO_RELEASE)
    if got.release is None:
        raise UsageError(f"cannot tell which SGLang release {got.where} is (no sglang/_version.py, "
                         "no release tag at HEAD); pass --base-release VERSION", path=str(src))
    texts = {f"{i:04d}-{writer.slug(head.subject)}.patch": patchmail.render(head) + diff_of(files, labels=True)
             for i, (head, files) in enumerate(got.patches, 1)}
    text = edit.new_manifest_text(name, got.title, got.release, [(f, root) for f in texts],
                                  got.rationale, date=date or _dt.date.today().isoformat(),
                                  author=got.author or "", upstream=got.upstream,
                                  headers=got.headers, release_root=root if sglang else None)
    touched = tuple(dict.fromkeys(f.path for _h, files in got.patches for f in files))
    fork = (off_release(src, got.release, [f for _h, files in got.patches for f in files], name)
            if sglang and commits is None and got.release != edit.NO_RELEASE else ())
    result = AuthoringResult(name, 1, catalog.manifests_dir / f"{name}.toml",
                             tuple(catalog.patches_dir / name / f for f in texts), touched,
                             got.release, changed=True, ignored=got.ignored, dry_run=dry_run,
                             applied=got.applied, off_release=fork)
    if dry_run:
        return result
    writer.create_fix(catalog, name, {f: (body, root) for f, body in texts.items()}, text)
    sha = writer.commit(catalog, name, f"{name} v1: {got.title}\n\nCaptured by `patchkit new` "
                        f"from a checkout of {got.release}.\n") if commit else None
    return dataclasses.replace(result, commit=sha)


def _owners(fix: Fix, squash: bool) -> dict[str, int]:
    """path -> the index of the patch of the series that changes it (the first, with
    ``squash``); a file two patches change is refused without ``squash``."""
    owner: dict[str, int] = {}
    for index, ref in enumerate(fix.patches):
        for record in series.parse_patch(ref.path, ref.root):
            if record["path"] in owner and owner[record["path"]] != index and not squash:
                raise UsageError(
                    f"{record['path']} is changed by both {fix.patches[owner[record['path']]].file}"
                    f" and {ref.file} of {fix.name}; refresh cannot split one file's change "
                    "between patches. Pass --squash to rewrite the series as one patch",
                    fix=fix.name, path=record["path"])
            owner.setdefault(record["path"], index)
    return owner


def _refreshed(fix: Fix, refs: Sequence[PatchRef], groups: list[list[CapturedFile]],
               old_texts: dict[PatchRef, str]) -> tuple[dict[PatchRef, str], dict[PatchRef, Path]]:
    """Each kept patch's new text (its header kept) and the file it goes to: a one-patch series
    takes the fix's title as its Subject (and file name, when that was made from the old
    Subject)."""
    texts: dict[PatchRef, str] = {}
    targets: dict[PatchRef, Path] = {}
    for ref, group in zip(refs, groups):
        if not group:  # none of its files differ from HEAD any more: the patch is dropped
            continue
        head = patchmail.read(old_texts[ref], fix.title)
        if fix.author and head.author == PLACEHOLDER_AUTHOR:
            head = dataclasses.replace(head, author=fix.author)
        target = ref.path
        if len(refs) == 1 and head.subject != fix.title:
            prefix = ref.file.split("-", 1)[0]
            if ref.file == f"{prefix}-{writer.slug(head.subject)}.patch":
                target = ref.path.with_name(f"{prefix}-{writer.slug(fix.title)}.patch")
            head = dataclasses.replace(head, subject=fix.title)
        # as the patch was written: its mbox From line (in ``head``), its hunks' function
        # labels and its format-patch signature, where it had them
        old = old_texts[ref]
        texts[ref] = (patchmail.render(head) + diff_of(group, labels=series.has_labels(old))
                      + patchmail.signature(old))
        targets[ref] = target
    return texts, targets


def refresh_fix(catalog: Catalog, name: str, src: Path, *, paths: Sequence[str] = (),
                summary: str | None = None, squash: bool = False, date: str | None = None,
                commit: bool = True, dry_run: bool = False,
                include_applied: bool = False, record: Path | None = None) -> AuthoringResult:
    """Rewrite a fix's series from the checkout and bump its version; nothing is written when
    nothing changed. Files another applied fix wrote are left out, as in :func:`new_fix`. Each
    patch keeps its files, new ones (``paths``) go to the last; two patches touching one file
    need ``squash``. A one-patch series takes the fix's title as its Subject."""
    catalog.check_writable(f"refresh {name!r}")
    fix = catalog.get(name)
    catalog.check_own([name], "refresh")
    if commit and not dry_run:
        writer.check_committable(catalog, f"refresh {name!r}")
    served = _variant_of(fix, src)  # a checkout of an older release a variant serves: that one
    view = fix if served is None else fix.as_variant(served)
    primary = any(ref.root == PRIMARY_ROOT for ref in fix.patches)
    here = applied_record(src, name, record=None if primary else record)
    if here is not None and here.commits:
        raise UsageError(
            f"{name} v{here.version} is applied in {src} with --commit: HEAD holds its change, "
            "and refresh captures the changes against HEAD, so the new version would lose it. "
            f"Roll it back first (patchkit rollback {name} --target {src}: a revert commit), "
            "apply it without --commit, make the edit, then refresh", fix=name, path=str(src))
    owner = _owners(view, squash)
    files = capture(src, tuple(sorted(set(owner) | set(paths))))
    applied: tuple[tuple[str, str], ...] = ()
    owners: dict[str, str] = {}
    stacked: list[tuple[str, tuple[str, ...]]] = []
    on_others: set[str] = set()  # files whose change is written on other applied fixes
    if not include_applied:
        for root in dict.fromkeys(ref.root for ref in view.patches):
            kept = None if root == PRIMARY_ROOT else record
            writers = applied_writers(src, root, record=kept)
            # a file this fix wrote is its own, diffed against it as before; one only other
            # applied fixes wrote is theirs, left out
            files, found = as_before(files, writers, name, src, record=kept)
            on_others.update(path for path, _before in found)
            declared = {d.name for d in _depends_on(catalog, view)}  # said by no warning
            stacked += [(path, before) for path, before in found if not set(before) <= declared]
            owners.update({p: chain[-1][0] for p, chain in writers.items()
                           if name not in (fix for fix, _rec in chain)})
        files, applied = leave_applied(files, owners, src, name)
    ignored, applied = _unclaimed(src, files, applied, owners)
    groups: list[list[CapturedFile]] = [[] for _ in view.patches]
    for f in files:
        groups[0 if squash else owner.get(f.path, len(view.patches) - 1)].append(f)
    refs = view.patches[:1] if squash else view.patches
    old_texts = {r: series.patch_text(r.path) for r in refs}
    texts, targets = _refreshed(view, refs, groups, old_texts)
    release = release_of(src) or view.upstream.base_release
    renamed = tuple((r.file, t.name) for r, t in targets.items() if t != r.path)
    unchanged = (list(texts) == list(view.patches) and not renamed
                 and all(texts[r] == old_texts[r] for r in texts))
    # a variant keeps its base release (it serves the checkout's); the top level moves to it
    changed = not unchanged or served is None and release != fix.upstream.base_release
    version = fix.next_version if changed else view.version
    # the releases the top level served besides the checkout's keep the old version (a
    # variant), as a rebase keeps them: the new series is known to apply to this one only
    kept_for = tuple(r for r in view.upstream.releases if r != release) if changed else ()
    result = AuthoringResult(name, version, fix.manifest_path, tuple(targets[r] for r in texts),
                             tuple(f.path for f in files), release, changed=changed,
                             ignored=ignored, dry_run=dry_run, renamed=renamed, applied=applied,
                             recorded=None if here is None else here.version,
                             stacked=tuple(stacked),
                             dropped=tuple(sorted(set(owner) - {f.path for f in files}
                                                  - {a for a, _f in applied})),
                             recorded_new=() if here is None else tuple(
                                 f.path for f in files if f.path not in {r.path for r in here.files}),
                             kept_for=kept_for, kept_version=view.version if kept_for else None,
                             breaks=_breaks(catalog, view, files, owner, release) if changed else (),
                             off_release=tuple(
                                 o for o in off_release(src, release, [
                                     f for f in files if f.path not in on_others], name)
                                 if not o[2] or not set(o[2]) <= {  # declared: no warning
                                     d.name for d in _depends_on(catalog, view)})
                             if changed and primary else (),
                             against=_against(catalog, view, files, owner, release)
                             if changed else ())
    if dry_run or not changed:
        return result
    summary = summary or f"Refreshed from a checkout of {release}."
    _write_refresh(catalog, fix, served, texts, targets, version, release, summary, date, bool(kept_for))
    sha = writer.commit(catalog, name, f"{name} v{version}: {summary}\n\nRecorded by `patchkit "
                        "refresh` from a checkout.\n") if commit else None
    return dataclasses.replace(result, commit=sha)


def _depends_on(catalog: Catalog, view: Fix) -> list[Fix]:
    """The fixes ``view`` depends on, however deep, each after its own dependencies (none when
    they cannot be read: a missing one, a cycle)."""
    from .errors import PatchkitError

    try:
        return [d for d in catalog.dependency_order([view.name], with_deps=True)
                if d.name != view.name]
    except PatchkitError:
        return []


def _file_roots(view: Fix, files: list[CapturedFile], owner: dict[str, int]) -> dict[str, str]:
    """The root of each captured file: that of the patch of ``view`` that changes it."""
    last = len(view.patches) - 1
    return {f.path: view.patches[min(owner.get(f.path, last), last)].root for f in files}


def _served(fix: Fix, release: str, roots: Collection[str]) -> tuple[int, list[dict[str, Any]]] | None:
    """The version of ``fix`` serving ``release`` and its FILE records on ``roots``; None when
    no version serves it. An unreadable series raises, as reading it does."""
    from .catalog.series import series_records

    served = fix.variant_for(release)
    if served is None:
        return None
    mine = [(r.path, r.root) for r in served.patches if r.root in roots]
    return served.version, series_records(mine)[1] if mine else []


def _of_file(records: list[dict[str, Any]], path: str, root: str) -> list[dict[str, Any]]:
    return [r for r in records if r["path"] == path and r["root"] == root]


def _placed(text: str | None, records: list[dict[str, Any]], fix: str) -> str | None:
    """``text`` with ``records`` (one file's) placed on it as apply places them (zero fuzz)."""
    from .engine.hunks import FileChange, apply_change

    for record in records:
        text = apply_change(text, FileChange.from_dict(record, fix))[0]
    return text


def _against(catalog: Catalog, view: Fix, files: list[CapturedFile], owner: dict[str, int],
             release: str) -> tuple[tuple[str, str], ...]:
    """(dependency, path) of each file of the new version whose change does not apply on the
    file as the fixes ``view`` depends on leave it, placed (zero fuzz) on the bytes it was
    captured against: a capture against HEAD where a dependency is applied but not committed
    (``--include-applied``) takes that fix's lines into this one, which then conflicts with
    it wherever both are applied. Files the dependencies do not change, or that they do not
    apply to as captured (the capture already holds them), are not judged."""
    from .engine.hunks import decode
    from .errors import PatchkitError

    roots = _file_roots(view, files, owner)
    try:
        deps = [(d.name, (_served(d, release, roots.values()) or (0, []))[1])
                for d in _depends_on(catalog, view)]
    except (OSError, PatchkitError):
        return ()
    found: list[tuple[str, str]] = []
    for f in files:
        below = [(name, _of_file(recs, f.path, roots[f.path])) for name, recs in deps]
        under = [name for name, recs in below if recs]
        if not under:
            continue
        try:
            text = None if f.before is None else decode(f.before)
            for name, recs in below:
                text = _placed(text, recs, name)
        except PatchkitError:  # the capture holds them already (or not as they are): no judgement
            continue
        if not applies(f, text, view.name):
            found.append((under[-1], f.path))
    return tuple(found)


def _breaks(catalog: Catalog, view: Fix, files: list[CapturedFile], owner: dict[str, int],
            release: str) -> tuple[tuple[str, int, str], ...]:
    """The fixes stacked on ``view`` in a file of the new version (their series, for
    ``release``, applies on the old version's result and not on the new one's): the judgement
    ``patchkit matrix`` makes of a dependent by a dry run, made here by the same placement
    (zero fuzz) on the file alone, as the checkout holds it before the fix and after it. Each
    fix is judged with the fixes it depends on (``depends_on``, through each other) applied
    first, as a target holds them: a fix stacked on ``view`` through another one applies on
    neither version's result alone."""
    from .catalog.series import series_records
    from .engine.hunks import decode
    from .errors import ConflictError, PatchkitError

    try:
        _digests, old_records = series_records([(r.path, r.root) for r in view.patches])
    except (OSError, PatchkitError):
        return ()
    roots = _file_roots(view, files, owner)
    served_records: dict[str, tuple[int, list[dict[str, Any]]] | None] = {}

    def records_of(fix: Fix) -> tuple[int, list[dict[str, Any]]] | None:
        """:func:`_served`, read once per fix; None too when its series cannot be read."""
        if fix.name not in served_records:
            try:
                served_records[fix.name] = _served(fix, release, roots.values())
            except (OSError, PatchkitError):
                served_records[fix.name] = None
        return served_records[fix.name]

    # under the new version as under the old: what the checkout held before it
    beneath = {view.name, *(d.name for d in _depends_on(catalog, view))}
    found: list[tuple[str, int, str]] = []
    for other in catalog.all():
        if other.name == view.name or other.is_inactive:
            continue
        mine = records_of(other)
        if mine is None:  # no version of it for this release: nothing of it to break here
            continue
        deps = [d for d in _depends_on(catalog, other) if d.name not in beneath]
        version, records = mine
        for f in files:
            theirs = _of_file(records, f.path, roots[f.path])
            if not theirs or f.before is None and f.after is None:
                continue
            below = [(d.name, _of_file((records_of(d) or (0, []))[1], f.path, roots[f.path]))
                     for d in deps]
            try:
                old = _placed(None if f.before is None else decode(f.before),
                              [r for r in old_records if r["path"] == f.path], view.name)
                for name, recs in below:
                    old = _placed(old, recs, name)
                _placed(old, theirs, other.name)  # applied on the old version: stacked on it
            except PatchkitError:  # a conflict too: not stacked on the old version
                continue
            try:
                new = None if f.after is None else decode(f.after)
                for name, recs in below:
                    new = _placed(new, recs, name)
            except ConflictError:  # a fix it depends on breaks: that one is said
                continue
            try:
                _placed(new, theirs, other.name)
            except ConflictError:
                found.append((other.name, version, f.path))
    return tuple(found)


def _variant_of(fix: Fix, src: Path) -> Variant | None:
    """The ``[[variants]]`` entry serving the release ``src`` is a checkout of, if one does:
    refresh then rewrites that variant's series, as the fix's next version (docs/rebase.md,
    "Variants"); None: the top level's."""
    found = release_of(src)
    if found is None or not fix.variants or found in fix.upstream.releases:
        return None
    return next((v for v in fix.variants if found in v.releases), None)


def _write_refresh(catalog: Catalog, fix: Fix, served: Variant | None, texts: dict[PatchRef, str],
                   targets: dict[PatchRef, Path], version: int, release: str, summary: str,
                   date: str | None, keep: bool = False) -> None:
    """Write the refreshed series and bump the manifest (the variant ``served``, else the top
    level); drop the patches left out. ``keep``: the old top level stays a variant for the
    releases it served besides ``release`` (its series copied to its own folder first)."""
    old = fix.patches if served is None else served.patches
    dropped = [r for r in old if r not in texts]
    renamed = any(targets[r] != r.path for r in texts)
    patches = ([(targets[r].name, r.root, r.description) for r in texts]
               if dropped or renamed else None)
    day = date or _dt.date.today().isoformat()
    files = {targets[r]: (texts[r], r.root) for r in texts}
    keep_as = None
    if keep:  # the old version's series, copied to a folder of its own first
        taken = {v.dir for v in fix.variants}
        keep_as = (edit.variant_dir(fix, fix.upstream.base_release) if served is None
                   else next(d for d in (f"v{served.version}", f"v{served.version}-{served.base_release}")
                             if d not in taken))
        (fix.patch_dir / keep_as).mkdir(parents=True, exist_ok=True)
        files.update({fix.patch_dir / keep_as / r.file: (
            series.patch_text(r.path), r.root) for r in old})

    def bump() -> None:
        if served is not None:
            edit.bump_variant(fix.manifest_path, served.dir, version=version,
                              changelog_summary=summary, date=day, patches=patches,
                              split=None if keep_as is None else (release, keep_as))
            return
        edit.bump_manifest(
            fix.manifest_path, version=version, changelog_summary=summary, date=day,
            patches=patches, base_release=release if release != fix.upstream.base_release else None,
            releases=[release] if keep_as is not None else None, keep_as=keep_as)

    writer.write_series(files, bump)
    for ref in old:
        if ref in dropped or targets[ref] != ref.path:
            ref.path.unlink()
    catalog.forget(fix.name)
