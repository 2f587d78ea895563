"""Authoring fixes from a checkout: ``patchkit new`` and ``patchkit refresh`` (like quilt's).

An author edits an SGLang checkout, then captures its uncommitted changes (against HEAD) as a
fix: a series file and a manifest skeleton whose base release is read from the tree.
``refresh`` rewrites an existing series from the checkout's current state and bumps the
version, keeping the manifest's comments and layout. Files are written only once everything
is computed; a failure leaves the catalog as it was.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from . import gitrepo, manifest, series
from .catalog import Catalog
from .engine.auto import detect_release
from .engine.paths import Root, detect_layout
from .errors import InternalError, PatchFormatError, UsageError


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


def release_of(tree: Path) -> str | None:
    """The SGLang release a checkout's HEAD is: its committed ``_version.py`` (or
    ``version.py``), else the tag of HEAD. Never the work tree's version file: the author may
    have edited it, and the fix is written against what HEAD holds."""
    real = os.path.realpath(tree)
    root = Root("sglang", str(tree), real, detect_layout(str(tree)))
    version, _where = detect_release(root, lambda rel: gitrepo.head_bytes(tree, rel))
    return version


def capture(src: Path, paths: Sequence[str] = ()) -> list[CapturedFile]:
    """The uncommitted changes of ``src`` (or of ``paths`` in it) against HEAD."""
    src = Path(src)
    if not gitrepo.is_git_repo(src):
        raise UsageError(
            f"{src} is not the top of a git checkout; patchkit captures a fix as the checkout's "
            "uncommitted changes against HEAD, so pass --from the checkout's top directory",
            path=str(src),
        )
    out = []
    modes = gitrepo.tracks_modes(src)
    for rel in gitrepo.changed_files(src, paths):
        full = src / rel
        at_head = gitrepo.head_file(src, rel)
        before, old_mode = at_head if at_head is not None else (None, None)
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
        raise UsageError(
            f"nothing to capture: {what} in {src} has no changes against HEAD; edit the files "
            "(or name new files as PATH arguments) first",
            path=str(src),
        )
    return out


def _series_text(subject: str, body: str, files: Sequence[CapturedFile]) -> str:
    head = f"From: patchkit <fixes@patchkit.invalid>\nSubject: [PATCH] {subject}\n\n"
    if body.strip():
        head += body.strip() + "\n"
    head += "---\n"
    return head + "".join(series.diff_files(f.before, f.after, f.path, mode=f.mode,
                                            old_mode=f.old_mode) for f in files)


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:48].rstrip("-") or "change"


def _today() -> str:
    return _dt.date.today().isoformat()


def new_fix(
    catalog: Catalog,
    name: str,
    src: Path,
    *,
    root: str = "sglang",
    paths: Sequence[str] = (),
    title: str | None = None,
    rationale: str = "",
    base_release: str | None = None,
    date: str | None = None,
) -> AuthoringResult:
    """Capture the changes of a checkout as a new fix (version 1)."""
    manifest_path = catalog.manifests_dir / f"{name}.toml"
    patch_dir = catalog.patches_dir / name
    if manifest_path.exists() or patch_dir.exists():
        raise UsageError(
            f"fix {name!r} already exists ({manifest_path}); use `patchkit refresh {name} --from DIR` "
            "to record a new version of it",
            fix=name,
        )
    files = capture(src, paths)
    release = base_release or release_of(src)
    if release is None:
        raise UsageError(
            f"cannot tell which SGLang release {src} is (no sglang/_version.py, no release tag at "
            "HEAD); pass --base-release VERSION",
            path=str(src),
        )
    title = title or f"{name}: describe the change in one line"
    patch_file = f"0001-{_slug(title)}.patch"
    text = manifest.new_manifest_text(
        name, title, release, [(patch_file, root)], rationale, date=date or _today()
    )
    body = _series_text(title, rationale, files)

    catalog.manifests_dir.mkdir(parents=True, exist_ok=True)
    catalog.patches_dir.mkdir(parents=True, exist_ok=True)
    staging = _staging_dir(catalog.patches_dir, name)
    try:
        (staging / patch_file).write_text(body, encoding="utf-8", errors="surrogateescape", newline="")
        _read_back(staging / patch_file, patch_dir / patch_file, root)
        os.replace(staging, patch_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        _write_new(manifest_path, text)
    except BaseException:
        shutil.rmtree(patch_dir, ignore_errors=True)
        raise
    return AuthoringResult(
        name=name,
        version=1,
        manifest=manifest_path,
        patches=(patch_dir / patch_file,),
        files=tuple(f.path for f in files),
        base_release=release,
        changed=True,
    )


def _read_back(written: Path, final: Path, root: str) -> None:
    """What was written must read back as a series; if not, that is patchkit's bug, reported
    under the series file's own name (not the staging file's, which is gone by then)."""
    try:
        series.parse_patch(written, root)
    except PatchFormatError as exc:
        raise InternalError(
            f"patchkit wrote a series for {final} that it cannot read back: "
            f"{exc.message.replace(str(written), str(final))}. Nothing was written; report this "
            "with the `git diff` of the checkout", path=str(final)) from None


def _staging_dir(parent: Path, name: str) -> Path:
    """A fresh hidden directory in ``parent`` with the permissions of any directory the user
    makes (0777 less the umask), renamed into place once complete. ``tempfile.mkdtemp`` would
    make it 0700, and the rename would carry that private mode into the catalog."""
    while True:
        staging = parent / f".{name}.{secrets.token_hex(4)}"
        try:
            staging.mkdir()
            return staging
        except FileExistsError:
            continue


def _write_new(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)


def refresh_fix(
    catalog: Catalog,
    name: str,
    src: Path,
    *,
    paths: Sequence[str] = (),
    summary: str | None = None,
    squash: bool = False,
    date: str | None = None,
) -> AuthoringResult:
    """Rewrite a fix's series from the checkout's current state and bump its version.

    Each patch keeps the files it touched; files new to the fix go to the last patch. A series
    where two patches touch one file cannot be split back apart: that needs ``squash``.
    When the rewritten series equals the current one, nothing is written.
    """
    fix = catalog.get(name)
    owner: dict[str, int] = {}
    for index, ref in enumerate(fix.patches):
        for record in series.parse_patch(ref.path, ref.root):
            if record["path"] in owner and owner[record["path"]] != index and not squash:
                raise UsageError(
                    f"{record['path']} is changed by both {fix.patches[owner[record['path']]].file} and "
                    f"{ref.file} of {name}; refresh cannot split one file's change between patches. "
                    "Pass --squash to rewrite the series as one patch",
                    fix=name,
                    path=record["path"],
                )
            owner.setdefault(record["path"], index)
    files = capture(src, tuple(sorted(set(owner) | set(paths))))
    groups: list[list[CapturedFile]] = [[] for _ in fix.patches]
    for f in files:
        index = 0 if squash else owner.get(f.path, len(fix.patches) - 1)
        groups[index].append(f)
    refs = fix.patches[:1] if squash else fix.patches
    texts = {}
    old_texts = {r: r.path.read_text(encoding="utf-8", errors="surrogateescape") for r in refs}
    for ref, group in zip(refs, groups):
        if not group:  # none of its files differ from HEAD any more: the patch is dropped
            continue
        subject, body = _header_of(old_texts[ref], fix.title)
        texts[ref] = _series_text(subject, body, group)
    release = release_of(src) or fix.upstream.base_release
    unchanged = list(texts) == list(fix.patches) and all(texts[r] == old_texts[r] for r in texts)
    if unchanged and release == fix.upstream.base_release:
        return AuthoringResult(
            name, fix.version, fix.manifest_path, tuple(r.path for r in texts),
            tuple(f.path for f in files), release, changed=False,
        )
    version = fix.version + 1
    dropped = [r for r in fix.patches if r not in texts]
    _replace_series(texts, old_texts, lambda: manifest.bump_manifest(
        fix.manifest_path,
        version=version,
        changelog_summary=summary or f"Refreshed from a checkout of {release}.",
        date=date or _today(),
        patches=[(r.file, r.root, r.description) for r in texts] if dropped else None,
        base_release=release if release != fix.upstream.base_release else None,
    ))
    for ref in dropped:
        ref.path.unlink()
    return AuthoringResult(
        name, version, fix.manifest_path, tuple(r.path for r in texts),
        tuple(f.path for f in files), release, changed=True,
    )


def _replace_series(texts: dict, old_texts: dict, bump: Callable[[], None]) -> None:
    """Write every new series file, then the manifest; all of them or none.

    Each text is staged and read back before any file is replaced, and the old texts are put
    back if the manifest cannot be bumped, so a failure leaves the catalog as it was.
    """
    staged = {}
    try:
        for ref, text in texts.items():
            tmp = ref.path.with_name(f".{ref.path.name}.tmp")
            staged[ref] = tmp
            tmp.write_text(text, encoding="utf-8", errors="surrogateescape", newline="")
            _read_back(tmp, ref.path, ref.root)
    except BaseException:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        raise
    replaced = []
    try:
        for ref, tmp in staged.items():
            os.replace(tmp, ref.path)
            replaced.append(ref)
        bump()
    except BaseException:
        for ref in replaced:
            ref.path.write_text(old_texts[ref], encoding="utf-8", errors="surrogateescape",
                                newline="")
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        raise


def _header_of(text: str, default_subject: str) -> tuple[str, str]:
    """Subject and body of a series file's mail-style header (before the first diff)."""
    head = text.split("\ndiff --git ", 1)[0]
    subject = default_subject
    body_lines: list[str] = []
    in_body = False
    for line in head.splitlines():
        if line.startswith("Subject:"):
            subject = re.sub(r"^Subject:\s*(\[PATCH[^\]]*\]\s*)?", "", line).strip()
            in_body = True
            continue
        if in_body:
            if line.strip() == "---":
                break
            body_lines.append(line)
    return subject, "\n".join(body_lines).strip()
