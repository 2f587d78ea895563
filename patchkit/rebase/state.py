"""A rebase in progress: its state on disk (``<catalog>/.patchkit-rebase/``, format in
docs/rebase.md), its journal and backup, and its reports."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..catalog import Catalog, manifest
from ..catalog.model import Fix
from ..engine import hunks
from ..engine.variants import release_key
from ..errors import UsageError
from .classify import PatchReport, patch_from_json

STATE_DIR = ".patchkit-rebase"
STATE_FORMAT = 2
Progress = Callable[[str, int, int], None]  # (what, done, total)
MARKERS = ("<<<<<<< ", ">>>>>>> ", "||||||| ")


@dataclass(frozen=True)
class FixReport:
    """``outcome``: rebased | extended | upstreamed | stopped | skipped, or when nothing is
    written: clean | conflict (a dry run says rebased | extended as what it would write)."""

    name: str
    from_release: str
    to_release: str
    outcome: str
    detail: str
    patches: tuple[PatchReport, ...] = ()
    old_version: int = 0
    new_version: int = 0
    #: "name: detail" of each check of its verification that reads a file (grep, sha256,
    #: python-syntax) and fails on the release with the new series applied
    unverified: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def fix_report(fix: Fix, onto: str, outcome: str, detail: str,
               patches: tuple[PatchReport, ...] = (), new_version: int | None = None
               ) -> FixReport:
    return FixReport(fix.name, fix.upstream.base_release, onto, outcome, detail, patches,
                     fix.version, fix.version if new_version is None else new_version)


def fix_from_json(d: dict[str, Any]) -> FixReport:
    return FixReport(**{**d, "patches": tuple(patch_from_json(p) for p in d["patches"]),
                        "unverified": tuple(d.get("unverified") or ())})


def backport(fix: Fix, release: str | None, drop_old: bool = False) -> bool:
    """A rebase onto ``release`` is a backport: a release older than the top level's base,
    without ``--drop-old``. It writes a variant for that release and leaves the top level,
    the series for the newest releases, as it is (docs/rebase.md, "Backports")."""
    return (release is not None and not drop_old
            and release_key(release) < release_key(fix.upstream.base_release))


def start_from(fix: Fix, release: str | None, drop_old: bool = False) -> Fix:
    """The version of ``fix`` a rebase onto ``release`` starts from: its top level, or, for a
    backport, the version based on the newest release not after it, else on the oldest:
    the series nearest the release, so the least has to move (the 0.5.22 variant onto
    0.5.21, not the 0.5.23 series)."""
    if not fix.variants or not backport(fix, release, drop_old):
        return fix
    assert release is not None
    versions = fix.all_variants()
    below = [v for v in versions if release_key(v.upstream.base_release) <= release_key(release)]
    pick = max(below, key=lambda v: release_key(v.upstream.base_release)) if below else \
        min(versions, key=lambda v: release_key(v.upstream.base_release))
    return fix if pick.version == fix.version else pick


#: The outcomes of a fix the rebase wrote to the catalog (the others leave it as it was).
WRITTEN = ("rebased", "extended", "upstreamed")


@dataclass(frozen=True)
class RebaseReport:
    onto: str
    fixes: tuple[FixReport, ...]
    stopped: str | None = None  # the fix waiting for --continue/--skip/--abort
    worktree: str | None = None
    conflicted: tuple[str, ...] = field(default=())
    not_written: str = ""  # why nothing was written (a report-only rebase), else ""
    remaining: tuple[str, ...] = field(default=())

    @property
    def done(self) -> bool:
        return self.stopped is None

    @property
    def dry_run(self) -> bool:
        return bool(self.not_written)

    def to_json(self) -> dict[str, Any]:
        return {"format": 1, "onto": self.onto, "done": self.done, "stopped": self.stopped,
                "worktree": self.worktree, "conflicted": list(self.conflicted),
                "dry_run": self.dry_run, "not_written": self.not_written,
                "remaining": list(self.remaining), "fixes": [f.to_json() for f in self.fixes]}


class RebaseState:
    """The state of one rebase (``data``: ``state.json``), with the catalog it rewrites; a
    report-only one (``writes`` false) keeps its state in ``dir``, a temporary directory
    outside the catalog, which it never writes to (the shipped catalog can be dry-run)."""

    def __init__(self, catalog: Catalog, data: dict[str, Any], dir: Path | None = None) -> None:
        self.catalog, self.data = catalog, data
        self.dir = catalog.root / STATE_DIR if dir is None else dir
        self.backup = self.dir / "backup"
        self.worktree = self.dir / "worktree"
        self.onto: str = data["onto"]
        self.release: str | None = data["release"]  # None: onto a commit that is no release
        self.inactive = bool(data.get("inactive"))

    @classmethod
    def create(cls, catalog: Catalog, data: dict[str, Any]) -> RebaseState:
        """A new state directory, with the backup of the catalog that --abort puts back; for
        a report-only rebase, a temporary one and no backup (the catalog is not written)."""
        state = cls(catalog, data)
        if not state.writes:
            return cls(catalog, data, Path(tempfile.mkdtemp(prefix="patchkit-rebase-")))
        state.dir.mkdir(exist_ok=True)
        (state.dir / ".gitignore").write_text("*\n", encoding="utf-8")
        (state.dir / "written").unlink(missing_ok=True)
        shutil.rmtree(state.backup, ignore_errors=True)
        shutil.copytree(catalog.manifests_dir, state.backup / "manifests")
        shutil.copytree(catalog.patches_dir, state.backup / "patches")
        return state

    @classmethod
    def load(cls, catalog: Catalog) -> RebaseState:
        path = catalog.root / STATE_DIR / "state.json"
        if not path.is_file():
            raise UsageError(f"no rebase in progress in {catalog.root} (no {STATE_DIR}/state.json)"
                             "; start one with `patchkit rebase --onto RELEASE`",
                             catalog=str(catalog.root))
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != STATE_FORMAT:
            raise UsageError(f"{path} has format {data.get('format')}; this patchkit reads "
                             f"{STATE_FORMAT}: finish it with the patchkit that started it")
        journal = path.parent / "written"
        if journal.is_file():
            data["written"] = list(dict.fromkeys(
                [*data["written"], *journal.read_text(encoding="utf-8").split()]))
        return cls(catalog, data)

    @property
    def writes(self) -> bool:
        """Whether the catalog is written: not a dry run, and onto a release."""
        return self.release is not None and not self.data.get("dry_run")

    def base_rev(self, fix: Fix) -> str:
        return self.data.get("base") or f"v{fix.upstream.base_release}"

    def note_written(self, name: str) -> None:
        """Journal a fix before its files are written, so --abort restores it."""
        self.data["written"].append(name)
        with open(self.dir / "written", "a", encoding="utf-8") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())

    def restore_fix(self, name: str) -> None:
        """Put back one fix's catalog files from the backup."""
        shutil.copy2(self.backup / "manifests" / f"{name}.toml", self.catalog.manifest_path(name))
        src, dst = self.backup / "patches" / name, self.catalog.patches_dir / name
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
        self.catalog.forget(name)

    def restore(self) -> list[str]:
        """Put back every catalog file the rebase wrote, then remove the state (--abort)."""
        for name in self.data["written"]:
            shutil.copy2(self.backup / "manifests" / f"{name}.toml",
                         self.catalog.manifest_path(name))
            src, dst = self.backup / "patches" / name, self.catalog.patches_dir / name
            if src.is_dir():
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst)
        self.remove()
        return list(self.data["written"])

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def drop_worktree(self) -> None:
        shutil.rmtree(self.worktree, ignore_errors=True)

    def old_fix(self, name: str) -> Fix:
        """The fix as it was when the rebase started (from the backup; a report-only rebase
        writes nothing, so the catalog's is that one)."""
        saved = self.backup / "manifests" / f"{name}.toml"
        if not self.writes or not saved.is_file():  # one beside (shipped) is never written
            return self.catalog.get(name)
        return manifest.load_manifest(saved, patch_dir=self.backup / "patches" / name)

    def started(self, fix: Fix) -> Fix:
        """The version of ``fix`` this rebase starts from (:func:`start_from`): the one its
        stop, ``--skip`` and a bare ``rebase`` all name."""
        return start_from(fix, self.release, bool(self.data.get("drop_old")))

    def fingerprint(self, name: str) -> str:
        """The catalog files of a fix as they are now: a plan is only good for these bytes."""
        h = hashlib.sha256()
        path = self.catalog.manifest_path(name)
        h.update(path.read_bytes() if path.is_file() else b"")
        pdir = self.catalog.patches_dir / name
        for p in sorted(pdir.rglob("*")) if pdir.is_dir() else ():  # its variants' series too
            if p.is_file():
                h.update(p.relative_to(pdir).as_posix().encode() + b"\0" + p.read_bytes())
        return h.hexdigest()

    def stop_at(self, stop: dict[str, Any]) -> None:
        """Save the stop, and the stopped patch's files (with markers) in the worktree."""
        self.drop_worktree()
        self.worktree.mkdir(parents=True)
        for path, text in stop["merged"].items():
            if text is not None:
                target = self.worktree / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(hunks.encode(text))
        self.data["stopped"] = {k: v for k, v in stop.items() if k != "merged"}
        tmp = self.dir / "state.json.tmp"  # the state is only ever saved at a stop
        tmp.write_text(json.dumps(self.data), encoding="utf-8")
        tmp.replace(self.dir / "state.json")

    def report(self, stopped: FixReport | None = None) -> RebaseReport:
        fixes = tuple(fix_from_json(d) for d in self.data["results"])
        if stopped is None:
            return RebaseReport(self.onto, fixes, not_written=self.not_written())
        return RebaseReport(self.onto, (*fixes, stopped), stopped.name, str(self.worktree),
                            tuple(self.data["stopped"].get("conflicted", ())),
                            remaining=tuple(self.data["queue"][1:]))

    def not_written(self) -> str:
        if self.writes:
            return ""
        return "--dry-run" if self.data.get("dry_run") else (
            f"{self.onto} is not a release and a manifest's base is one: rebase onto a release "
            "tag to write")

    def stopped_report(self) -> RebaseReport:
        """Where a stopped rebase is, without doing anything (a bare ``patchkit rebase``)."""
        stop = self.data.get("stopped")
        if not stop:
            return RebaseReport(self.onto, tuple(fix_from_json(d) for d in self.data["results"]),
                                remaining=tuple(self.data["queue"]))
        patches = tuple(patch_from_json(p) for p in stop["patches"])
        started = self.started(self.old_fix(stop["name"]))
        return self.report(fix_report(started, self.onto, "stopped",
                                      patches[-1].detail if patches else "", patches))
