"""A checkout's changes as files to make a series of (``patchkit new``, ``refresh``, ``import
--from``): its uncommitted changes against HEAD, or the commits of a range, each with its mail
header; and the release HEAD (or a commit) is at."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import stat
from dataclasses import dataclass
from dataclasses import replace as dataclass_replace
from email.utils import format_datetime
from pathlib import Path
from typing import Sequence

from . import gitrepo
from .catalog import series
from .catalog.patchmail import Header
from .engine.auto import detect_release
from .engine.fsops import read_bytes
from .engine.hunks import FileChange, apply_change, decode, sha256_bytes
from .engine.paths import Root, detect_layout
from .engine.records import FileRecord, FixRecord, State
from .engine.store import Store
from .errors import PatchkitError, UsageError


@dataclass(frozen=True)
class CapturedFile:
    path: str  # relative to the checkout
    before: bytes | None  # None: absent at HEAD (created)
    after: bytes | None  # None: deleted in the work tree
    mode: str  # git mode in the work tree ("100644" or "100755"); the HEAD mode when deleted
    old_mode: str | None = None  # git mode at HEAD; None when absent at HEAD


def diff_of(files: Sequence[CapturedFile], *, labels: bool = False) -> str:
    """The diffs of captured files, in series form; ``labels``: each hunk header names its
    function, as git diff's do (:func:`series.labelled`)."""
    diffs = (series.diff_files(f.before, f.after, f.path, mode=f.mode, old_mode=f.old_mode)
             for f in files)
    return "".join(series.labelled(d, f.before) if labels else d for d, f in zip(diffs, files))


def release_of(tree: Path, rev: str | None = None) -> str | None:
    """The SGLang release of a checkout's HEAD (or ``rev``) from its committed version file or
    tag, never the work tree's: the fix is written against what HEAD holds."""
    root = Root("sglang", str(tree), os.path.realpath(tree), detect_layout(str(tree)))
    with contextlib.closing(gitrepo.Blobs(tree)) as blobs:
        return detect_release(root, lambda rel: blobs.read(rev or "HEAD", rel))[0]


def tree_release(tree: Path) -> str | None:
    """The SGLang release of a tree: HEAD's of a git checkout (as ``new`` reads it), else
    the version file on disk."""
    if gitrepo.is_git_repo(tree):
        return release_of(tree)
    root = Root("sglang", str(tree), os.path.realpath(tree), detect_layout(str(tree)))
    return detect_release(root)[0]


def checkout(src: Path | str, advice: str) -> Path:
    """``src``, refused unless it is the top of a git checkout (``advice``: what to pass)."""
    if not gitrepo.is_git_repo(src):
        raise UsageError(f"{src} is not the top of a git checkout; {advice}", path=str(src))
    return Path(src)


def capture(src: Path, paths: Sequence[str] = ()) -> list[CapturedFile]:
    """The uncommitted changes of ``src`` (or of ``paths`` in it) against HEAD."""
    src = checkout(src, "patchkit captures a fix as the checkout's uncommitted changes "
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
        left = [] if paths else gitrepo.unclaimed_files(src, [])
        shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        raise UsageError(f"nothing to capture: {what} in {src} has no changes against HEAD"
                         + (f" other than untracked files, taken only when named: {shown}. Name "
                            "the new files as PATH arguments" if left else
                            "; edit the files (or name new files as PATH arguments) first"),
                         path=str(src), untracked=left)
    return out


def record_path(top: Path | str) -> Path:
    """Where a tree keeps its record of applied fixes (the engine's store owns the name)."""
    return Path(Store(str(top)).path("state.json"))


def applied_writers(src: Path, root: str, *,
                    record: Path | None = None) -> dict[str, list[tuple[str, FileRecord]]]:
    """path -> each applied fix that wrote it in the checkout ``src``, in the order they were
    applied, with its record of the file, as the record says (``.patchkit/state.json``, docs/
    state.md): changes patchkit made there, not the author's. Only the files of root ``root``;
    nothing when there is no record. The record is the checkout's own, or that of ``record``,
    the target's sglang tree, when ``src`` is another root of it (a serve checkout): then only
    the fixes applied with ``src`` as ``root``."""
    state = _record(src, root, record)
    if state is None:
        return {}
    here = os.path.realpath(src)
    out: dict[str, list[tuple[str, FileRecord]]] = {}
    for fix in state.fixes:  # application order
        if record is not None and (root not in fix.roots
                                   or os.path.realpath(fix.roots[root]) != here):
            continue  # applied with another checkout as this root
        for f in fix.files:
            if f.root == root:
                out.setdefault(f.path, []).append((fix.name, f))
    return out


def applied_owners(src: Path, root: str, *, but: str | None = None,
                   record: Path | None = None) -> dict[str, str]:
    """path -> the applied fix (other than ``but``) that last wrote it in the checkout ``src``
    (:func:`applied_writers`)."""
    return {p: chain[-1][0] for p, chain in applied_writers(src, root, record=record).items()
            if chain[-1][0] != but}


def as_before(files: list[CapturedFile], writers: dict[str, list[tuple[str, FileRecord]]],
              name: str, src: Path, *, record: Path | None = None
              ) -> tuple[list[CapturedFile], list[tuple[str, tuple[str, ...]]]]:
    """``files`` with each one fix ``name`` wrote after other applied fixes diffed against its
    bytes as they were before ``name`` was applied (``name``'s backup of it), not against HEAD:
    the diff is then ``name``'s change and the author's edits, without the earlier fixes'
    hunks. A file a fix applied after ``name`` wrote too holds that fix's change on top of the
    author's: refused, naming the fix, as no diff of the file tells the two apart. Also
    returned: each file whose new diff does not apply to its bytes at HEAD, with the fixes
    applied before ``name`` (its context holds their lines: it applies only after them)."""
    store = Store(str(Path(record) if record is not None else Path(src)))
    out = []
    stacked: list[tuple[str, tuple[str, ...]]] = []
    for f in files:
        chain = [fix for fix, _rec in writers.get(f.path, [])]
        if name not in chain:
            out.append(f)
            continue
        later = chain[chain.index(name) + 1:]
        if later:
            raise UsageError(
                f"{f.path} was written by fix {name} and then by fix {later[0]}, applied after "
                f"{name}: its change is in the file on top of {name}'s, and refresh would take it "
                f"into {name}. Roll it back (patchkit rollback {' '.join(reversed(later))}), "
                f"refresh {name}, then apply {' '.join(later)} again. An edit of yours in "
                f"{f.path} makes that rollback refuse the file (changed since): copy the file "
                f"aside, roll back with --force (which discards the edit), make the edit again, "
                f"then refresh", fix=name, path=f.path, later=later)
        if chain.index(name) == 0:
            out.append(f)  # nothing applied before it: HEAD is what it changed
            continue
        mine = next(rec for fix, rec in writers[f.path] if fix == name)
        before = None
        if mine.before_sha256 is not None:  # as an upgrade reads it (plan.restore_in_memory)
            before = read_bytes(store.path(mine.backup)) if mine.backup else None
            if before is None or sha256_bytes(before) != mine.before_sha256:
                raise UsageError(f"{f.path}: the backup of fix {name}'s file "
                                 f"({store.path(mine.backup or 'backups')}) is missing or damaged, "
                                 f"so its change cannot be told from those of "
                                 f"{', '.join(chain[:chain.index(name)])}, applied before it. Run "
                                 f"patchkit status --target {src}", fix=name, path=f.path)
        if before == f.after:
            continue  # the author undid all of it: the fix no longer changes this file
        old_mode = None if before is None else f.old_mode or f.mode if mine.mode_before is None \
            else "100755" if mine.mode_before & stat.S_IXUSR else "100644"
        mine_only = dataclass_replace(f, before=before, old_mode=old_mode)
        out.append(mine_only)
        if not applies(mine_only, f.before, name):
            stacked.append((f.path, tuple(chain[:chain.index(name)])))
    return out, stacked


def off_release(src: Path, release: str, files: Sequence[CapturedFile], name: str
                ) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(path, tag, fixes) of each of ``files`` (captured against HEAD) whose change does not
    apply to the release's own file, as the release's tag in the checkout (``vR``, else
    ``R``) has it: HEAD is a fork whose commits after the release changed that file, and the
    change's context holds their lines, so the series does not apply to the release it says
    it is written for. ``fixes``: those the checkout's record has applied there with
    ``--commit`` that wrote the file, the dependencies to declare. Empty when the checkout has
    no such tag, HEAD is it, or every file is as the tag has it."""
    with contextlib.closing(gitrepo.Blobs(src)) as blobs:
        tag = next((t for t in (f"v{release}", release) if blobs.commit_of(f"refs/tags/{t}")), None)
        if tag is None or blobs.commit_of(f"refs/tags/{tag}") == blobs.commit_of("HEAD"):
            return ()
        found = []
        for f in files:
            own = blobs.read(f"refs/tags/{tag}", f.path)
            if own != f.before and not applies(f, own, name):
                found.append(f.path)
    if not found:
        return ()
    state = _record(src, "", None, quiet=True)
    committed = [rec for rec in (state.fixes if state is not None else ()) if rec.commits]
    return tuple((path, tag, tuple(r.name for r in committed if path in {x.path for x in r.files}))
                 for path in found)


def applies(f: CapturedFile, head: bytes | str | None, name: str) -> bool:
    """Whether the diff of ``f`` applies, with zero fuzz as patchkit applies, to ``head``
    (bytes, or text already decoded)."""
    data = series.diff_files(f.before, f.after, f.path, mode=f.mode, old_mode=f.old_mode)
    text = decode(head) if isinstance(head, bytes) else head
    try:
        for rec in series.parse_patch(f"{f.path}.patch", "refresh", data=data.encode("utf-8", "surrogateescape")):
            apply_change(text, FileChange.from_dict(rec, name))
    except PatchkitError:
        return False
    return True


def applied_record(src: Path, name: str, *, record: Path | None = None) -> FixRecord | None:
    """The record of fix ``name`` in ``src`` (or in ``record``, the target's sglang tree): the
    version applied there, its files and commits; None when it records none."""
    found = _record(src, "", record, quiet=True)
    return None if found is None else found.by_name().get(name)


def _record(src: Path, root: str, record: Path | None, quiet: bool = False) -> State | None:
    """The record of applied fixes of ``src`` (or of ``record``); None when there is none.
    ``quiet``: a missing or unreadable record is no record (the capture already said so)."""
    top = Path(record) if record is not None else Path(src)
    path = record_path(top)
    if not path.is_file():
        if record is not None and not quiet:
            raise UsageError(f"{record} has no record of applied fixes ({path} is not there): "
                             "give --target the SGLang tree the fixes were applied to, with "
                             f"--root {root}={src}", path=str(path))
        return None
    try:
        return State.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        if quiet:
            return None
        raise UsageError(f"cannot read the checkout's record {path} ({exc}): it says which files "
                         "applied fixes wrote, which a capture leaves out. Repair it (`patchkit "
                         f"status --target {top}` names the problem) or pass --include-applied",
                         path=str(path)) from None


def leave_applied(files: list[CapturedFile], owners: dict[str, str], src: Path,
                  name: str) -> tuple[list[CapturedFile], tuple[tuple[str, str], ...]]:
    """``files`` without those applied fixes wrote, and those left out (path, fix)."""
    kept = [f for f in files if f.path not in owners]
    left = tuple((f.path, owners[f.path]) for f in files if f.path in owners)
    if left and not kept:
        fixes = ", ".join(sorted({fix for _p, fix in left}))
        raise UsageError(f"nothing to capture for {name!r}: every changed file of {src} was "
                         f"written by an applied fix ({fixes}; recorded in .patchkit/state.json): "
                         f"{', '.join(p for p, _f in left)}. Edit other files, roll those fixes "
                         "back, or pass --include-applied to take them (with their changes: to "
                         "capture only yours on top of theirs, apply them with --commit in this "
                         "checkout first, so HEAD holds them, then pass --include-applied and add "
                         "depends_on; docs/authoring.md)", path=str(src), fix=name)
    return kept, left


def capture_commits(src: Path, spec: str
                    ) -> tuple[list[tuple[Header, list[CapturedFile]]], str, str | None]:
    """Each commit of ``spec`` (``A..B``) in ``src``, oldest first, as (header, files changed);
    then the first commit and its parent (None for a root commit)."""
    src = checkout(src, "pass --from the checkout holding the commits")
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
            out.append((Header(subject.strip(), body.strip(),
                               f"{info.author.name} <{info.author.email}>", date), files))
    return out, shas[0], first_parent


__all__ = ["CapturedFile", "applied_owners", "applied_writers", "as_before", "capture", "capture_commits", "checkout", "diff_of",
           "leave_applied", "release_of", "tree_release"]
