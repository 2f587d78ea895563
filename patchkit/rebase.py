"""Rebase fixes onto a newer SGLang release (``patchkit rebase``, docs/rebase.md).

Per fix (dependency order) and per patch (series order) the new release decides one of:

``unchanged``   the hunks apply at their lines (zero fuzz)
``offset``      the hunks apply, some at other lines (zero fuzz)
``upstream``    the release already holds the change (the reversed hunks apply)
``merged``      git's three-way merge (``git merge-file``: base release / patched / new release)
``anchor-gone`` a grep precondition of the fix no longer matches the new release
``conflict``    the merge leaves conflicts
``resolved``    (after ``--continue``) a conflict or anchor-gone the user resolved by hand

Everything is computed in memory on the releases' blobs of the upstream repository. A fix
whose patches are all clean is written at once (refreshed series, version bumped, base
release moved, a changelog entry saying from which base to which); a fix whose series is
unchanged only gains the release in ``upstream.releases``. The first ``anchor-gone`` or
``conflict`` stops the run: the fix's files, with conflict markers, go to a linked worktree
of the upstream repository at the new release, and the run's state to
``<catalog>/.patchkit-rebase/`` (format 1, below). ``continue_`` takes the edited files as the
patch's new content, ``skip`` leaves the fix as it was, ``abort`` restores every file of the
catalog the run wrote. State file ``state.json``::

    {"format": 1, "onto": "0.5.23", "upstream": "<dir>", "wheels": "<dir>|null",
     "queue": [names still to do, the stopped fix first], "written": [names written],
     "results": [FixReport as JSON], "stopped": null | {"name", "patch", "done": {file: text},
     "pre": {path: text|null}, "patches": [PatchReport as JSON]}}

``backup/`` holds a copy of ``manifests/`` and ``patches/`` from before the run.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import gitrepo, manifest, series
from .catalog import Catalog
from .engine import hunks
from .errors import ConflictError, UsageError
from .model import Fix
from .upstream import UpstreamRepo

STATE_DIR = ".patchkit-rebase"
STATE_FORMAT = 1
CLEAN = ("unchanged", "offset", "merged", "resolved", "upstream")
Progress = Callable[[str, int, int], None]  # (what, done, total)
_MARKER = re.compile(r"^(<<<<<<< |>>>>>>> |\|\|\|\|\|\|\| )", re.M)


@dataclass(frozen=True)
class PatchReport:
    file: str
    classification: str
    detail: str
    offsets: tuple[int, ...] = ()
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class FixReport:
    """``outcome``: rebased | extended (release added) | upstreamed | stopped | skipped."""

    name: str
    from_release: str
    to_release: str
    outcome: str
    detail: str
    patches: tuple[PatchReport, ...] = ()
    old_version: int = 0
    new_version: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RebaseReport:
    onto: str
    fixes: tuple[FixReport, ...]
    stopped: str | None = None  # the fix waiting for --continue/--skip/--abort
    worktree: str | None = None
    conflicted: tuple[str, ...] = field(default=())

    @property
    def done(self) -> bool:
        return self.stopped is None

    def to_json(self) -> dict[str, Any]:
        return {"format": 1, "onto": self.onto, "done": self.done, "stopped": self.stopped,
                "worktree": self.worktree, "conflicted": list(self.conflicted),
                "fixes": [f.to_json() for f in self.fixes]}


def _patch_from_json(d: dict[str, Any]) -> PatchReport:
    return PatchReport(d["file"], d["classification"], d["detail"], tuple(d["offsets"]),
                       tuple(d["paths"]))


def _fix_from_json(d: dict[str, Any]) -> FixReport:
    return FixReport(**{**d, "patches": tuple(_patch_from_json(p) for p in d["patches"])})


# -- in-memory trees --------------------------------------------------------------------------


class _Tree:
    """Files of one release as the rebase sees them, changed in memory by applied series."""

    def __init__(self, up: UpstreamRepo, version: str) -> None:
        self.up, self.rev, self.files = up, f"v{version}", {}

    def get(self, path: str) -> str | None:
        if path not in self.files:
            data = gitrepo.blob_bytes(self.up.git_dir, self.rev, path)
            self.files[path] = None if data is None else hunks.decode(data)
        return self.files[path]


def _changes(fix: Fix, patch_dir: Path) -> list[tuple[str, list[hunks.FileChange]]]:
    """(patch file, its FILE records) of a fix's series read from ``patch_dir``."""
    out = []
    for ref in fix.patches:
        recs = series.parse_patch(patch_dir / ref.file, ref.root)
        out.append((ref.file, [hunks.FileChange.from_dict(r, fix.name) for r in recs]))
    return out


def _apply_all(tree: _Tree, changes: list[hunks.FileChange]) -> list[int]:
    offsets: list[int] = []
    new: dict[str, str | None] = {}
    for ch in changes:
        text = new[ch.path] if ch.path in new else tree.get(ch.path)
        new[ch.path], placements = hunks.apply_change(text, ch)
        offsets += [p.offset for p in placements]
    tree.files.update(new)
    return offsets


def _anchors_gone(fix: Fix, tree: _Tree, paths: Sequence[str]) -> list[str]:
    """The fix's grep preconditions that expect a line and no longer find it."""
    gone = []
    for check in fix.preconditions:
        if check.kind != "grep" or check.get("path") not in paths or check.get("present") is False:
            continue
        if check.get("count") == 0:
            continue
        text = tree.get(check.get("path")) or ""
        pattern = check.get("pattern")
        if check.get("regex"):
            hits = sum(1 for line in text.split("\n") if re.search(pattern, line))
        else:
            hits = sum(1 for line in text.split("\n") if pattern in line)
        want = check.get("count")
        if (want is None and hits == 0) or (want is not None and hits != want):
            gone.append(check.describe())
    return gone


# -- the run ----------------------------------------------------------------------------------


class _Run:
    def __init__(self, catalog: Catalog, state: dict[str, Any], up: UpstreamRepo,
                 progress: Progress | None) -> None:
        self.catalog, self.state, self.up = catalog, state, up
        self.progress = progress or (lambda _w, _d, _t: None)
        self.dir = catalog.root / STATE_DIR
        self.backup = self.dir / "backup"

    # state on disk
    def save(self) -> None:
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(self.state, indent=1), encoding="utf-8")
        tmp.replace(self.dir / "state.json")

    def old_fix(self, name: str) -> Fix:
        return manifest.load_manifest(self.backup / "manifests" / f"{name}.toml",
                                      patch_dir=self.backup / "patches" / name)

    def worktree(self) -> Path:
        return self.dir / "worktree"

    # the base side: the old base release with the original series of deps and fix applied
    def base_tree(self, fix: Fix) -> _Tree:
        tree = _Tree(self.up, fix.upstream.base_release)
        for dep in self.catalog.dependency_order(fix.depends_on, with_deps=True):
            old = self.old_fix(dep.name)
            for _file, chs in _changes(old, old.patch_dir):
                _apply_all(tree, chs)
        return tree

    def onto_tree(self, fix: Fix) -> _Tree:
        """The new release with the catalog's current series of the dependencies applied."""
        tree = _Tree(self.up, self.state["onto"])
        for dep in self.catalog.dependency_order(fix.depends_on, with_deps=True):
            for file, chs in _changes(dep, dep.patch_dir):
                try:
                    _apply_all(tree, chs)
                except ConflictError:
                    raise _Skip(f"dependency {dep.name} ({file}) does not apply to "
                                f"{self.state['onto']}; rebase it first") from None
        return tree

    def run(self) -> RebaseReport:
        queue: list[str] = self.state["queue"]
        total = len(queue) + len(self.state["results"])
        while queue:
            name = queue[0]
            self.progress(name, len(self.state["results"]), total)
            report = self.one(name)
            if report.outcome == "stopped":
                self.save()
                return self.report(report)
            self.state["results"].append(report.to_json())
            self.state["stopped"] = None
            queue.pop(0)
            self.save()
        self.progress("", total, total)
        return self.finish()

    def report(self, stopped: FixReport | None = None) -> RebaseReport:
        fixes = [_fix_from_json(d) for d in self.state["results"]]
        if stopped is None:
            return RebaseReport(self.state["onto"], tuple(fixes))
        conflicted = tuple(self.state["stopped"].get("conflicted", ()))
        return RebaseReport(self.state["onto"], (*fixes, stopped), stopped.name,
                            str(self.worktree()), conflicted)

    def finish(self) -> RebaseReport:
        report = self.report()
        self.drop_worktree()
        shutil.rmtree(self.dir, ignore_errors=True)
        return report

    def drop_worktree(self) -> None:
        if self.worktree().exists():
            shutil.rmtree(self.worktree())

    # one fix
    def one(self, name: str, resumed: dict[str, str | None] | None = None) -> FixReport:
        fix = self.catalog.get(name)
        onto, base = self.state["onto"], fix.upstream.base_release
        skip = _skip_reason(fix, onto)
        if skip:
            return FixReport(name, base, onto, "skipped", skip, (), fix.version, fix.version)
        try:
            new_tree = self.onto_tree(fix)
        except _Skip as why:
            return FixReport(name, base, onto, "skipped", str(why), (), fix.version, fix.version)
        stopped = self.state.get("stopped") or {}
        if stopped.get("name") == name and resumed is not None:
            start, done = stopped["patch"] + 1, dict(stopped["done"])
            reports = [_patch_from_json(p) for p in stopped["patches"]]
            new_tree.files = dict(stopped["tree"])
            new_tree.files.update(resumed)
        else:
            start, done, reports = 0, {}, []
        old_tree = self.base_tree(fix)
        changes = _changes(self.old_fix(name), self.old_fix(name).patch_dir)
        for index, (file, chs) in enumerate(changes):
            pre_new = {c.path: new_tree.get(c.path) for c in chs}
            pre_old = {c.path: old_tree.get(c.path) for c in chs}
            _apply_all(old_tree, chs)  # the original series always applies to its base
            if index < start:
                continue
            self.progress(f"{name}: {file}", len(self.state["results"]), -1)
            rep, merged, conflicted = self.classify(fix, file, chs, new_tree, pre_old, old_tree)
            reports.append(rep)
            if rep.classification not in CLEAN:
                self.stop(fix, index, file, done, reports, pre_new, merged, conflicted,
                          new_tree.files)
                return FixReport(name, base, onto, "stopped", rep.detail, tuple(reports),
                                 fix.version, fix.version)
            new_tree.files.update(merged)
            done[file] = _series_text(fix.patch_dir / file, pre_new, merged)
        return self.complete(fix, done, tuple(reports))

    def classify(self, fix: Fix, file: str, chs: list[hunks.FileChange], tree: _Tree,
                 pre_old: dict[str, str | None], old_tree: _Tree
                 ) -> tuple[PatchReport, dict[str, str | None], list[str]]:
        paths = tuple(dict.fromkeys(c.path for c in chs))
        trial = _Tree(self.up, self.state["onto"])
        trial.files = {p: tree.get(p) for p in paths}
        try:
            offsets = _apply_all(trial, chs)
            kind = "offset" if any(offsets) else "unchanged"
            detail = "applies at its lines" if kind == "unchanged" else \
                "applies at an offset: " + ", ".join(f"{o:+d}" for o in offsets if o)
            return PatchReport(file, kind, detail, tuple(offsets), paths), trial.files, []
        except ConflictError as exc:
            first_failure = str(exc)
        back = _Tree(self.up, self.state["onto"])
        back.files = {p: tree.get(p) for p in paths}
        try:
            _apply_all(back, [c.reversed() for c in reversed(chs)])
            return (PatchReport(file, "upstream", f"{self.state['onto']} already holds this "
                                "change (its reversed hunks apply)", (), paths),
                    {p: tree.get(p) for p in paths}, [])
        except ConflictError:
            pass
        merged: dict[str, str | None] = {}
        conflicted: list[str] = []
        for path in paths:
            ours, base_t, theirs = tree.get(path), pre_old[path], old_tree.get(path)
            if ours is None or base_t is None or theirs is None:
                merged[path] = ours if theirs is None else theirs
                if ours != base_t:
                    conflicted.append(path)
                continue
            out, n = gitrepo.merge_file(
                hunks.encode(ours), hunks.encode(base_t), hunks.encode(theirs),
                labels=(self.state["onto"], fix.upstream.base_release, f"{fix.name} {file}"))
            merged[path] = hunks.decode(out)
            if n:
                conflicted.append(path)
        gone = _anchors_gone(fix, tree, paths)
        if gone:
            return (PatchReport(file, "anchor-gone", "precondition no longer matches "
                                f"{self.state['onto']}: " + "; ".join(gone), (), paths),
                    merged, conflicted or list(paths))
        if conflicted:
            return (PatchReport(file, "conflict", "three-way merge conflicts in "
                                + ", ".join(conflicted) + f" ({first_failure.split(';')[0]})",
                                (), paths), merged, conflicted)
        return PatchReport(file, "merged", "three-way merge with git, no conflicts", (),
                           paths), merged, []

    def stop(self, fix: Fix, index: int, file: str, done: dict[str, str],
             reports: list[PatchReport], pre_new: dict[str, str | None],
             merged: dict[str, str | None], conflicted: list[str],
             tree: dict[str, str | None]) -> None:
        # Only the fix's files, not a checkout of the whole release: a full worktree of the
        # ~5,000-file tree cost most of a stop's time, and the user edits just these files.
        wt = self.worktree()
        self.drop_worktree()
        wt.mkdir(parents=True)
        for path, text in merged.items():
            target = wt / path
            if text is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(hunks.encode(text))
        self.state["stopped"] = {"name": fix.name, "patch": index, "file": file, "done": done,
                                 "pre": pre_new, "tree": dict(tree),
                                 "patches": [asdict(r) for r in reports],
                                 "conflicted": conflicted, "paths": sorted(merged)}

    def complete(self, fix: Fix, done: dict[str, str], reports: tuple[PatchReport, ...]
                 ) -> FixReport:
        onto, base = self.state["onto"], fix.upstream.base_release
        kinds = [r.classification for r in reports]
        if all(k == "upstream" for k in kinds):
            return FixReport(fix.name, base, onto, "upstreamed",
                             f"{onto} holds the whole change: propose status = \"upstreamed\"",
                             reports, fix.version, fix.version)
        self.state["written"].append(fix.name)
        self.save()
        if all(k == "unchanged" for k in kinds):
            manifest.add_release(fix.manifest_path, onto)
            return FixReport(fix.name, base, onto, "extended",
                             f"the series applies to {onto} unchanged; {onto} added to "
                             "upstream.releases", reports, fix.version, fix.version)
        kept = [r for r in fix.patches if done.get(r.file) is not None
                and dict((x.file, x.classification) for x in reports)[r.file] != "upstream"]
        summary = (f"Rebased from {base} onto {onto}: "
                   + ", ".join(f"{r.file} {r.classification}" for r in reports) + ".")
        _write_series(fix, {r.file: done[r.file] for r in kept}, lambda: manifest.bump_manifest(
            fix.manifest_path, version=fix.version + 1, changelog_summary=summary,
            date=_dt.date.today().isoformat(), base_release=onto,
            patches=[(r.file, r.root, r.description) for r in kept]
            if len(kept) != len(fix.patches) else None))
        for r in fix.patches:
            if r not in kept:
                r.path.unlink(missing_ok=True)
        self.catalog._fixes.pop(fix.name, None)
        return FixReport(fix.name, base, onto, "rebased", summary, reports, fix.version,
                         fix.version + 1)


class _Skip(Exception):
    pass


def _skip_reason(fix: Fix, onto: str) -> str:
    if fix.status in ("dead", "superseded"):
        return f"{fix.status}: not rebased"
    if fix.revert is not None:
        return "a revert fix: its change is computed from the fork's commit at apply time"
    if not fix.upstream.releases:
        return "no release precondition: the series is not tied to SGLang releases"
    if any(p.root != fix.upstream.root for p in fix.patches):
        return f"patches outside the {fix.upstream.root} root"
    if fix.upstream.base_release == onto:
        return f"already based on {onto}"
    if onto in fix.upstream.releases:
        return f"already known to apply to {onto}"
    return ""


def _series_text(old_patch: Path, pre: dict[str, str | None],
                 post: dict[str, str | None]) -> str:
    """The patch file refreshed: its mail header kept, its diffs made from the new texts."""
    old = old_patch.read_text(encoding="utf-8", errors="surrogateescape")
    cut = old.find("diff --git ")
    header = old[:cut] if cut >= 0 else ""
    body = "".join(series.diff_files(None if pre[p] is None else hunks.encode(pre[p]),
                                     None if post.get(p) is None else hunks.encode(post[p]), p)
                   for p in pre)
    return header + body


def _write_series(fix: Fix, texts: dict[str, str], bump: Callable[[], None]) -> None:
    """Stage and read back every patch, replace them, then bump the manifest; all or none."""
    staged: dict[str, Path] = {}
    olds = {f: (fix.patch_dir / f).read_bytes() for f in texts}
    try:
        for f, text in texts.items():
            tmp = fix.patch_dir / f".{f}.rebase"
            staged[f] = tmp
            tmp.write_text(text, encoding="utf-8", errors="surrogateescape", newline="")
            series.parse_patch(tmp, fix.upstream.root)
        for f, tmp in staged.items():
            tmp.replace(fix.patch_dir / f)
        bump()
    except BaseException:
        for f, data in olds.items():
            (fix.patch_dir / f).write_bytes(data)
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        raise


# -- public functions -------------------------------------------------------------------------


def _load(catalog: Catalog, up: UpstreamRepo | None, progress: Progress | None) -> _Run:
    path = catalog.root / STATE_DIR / "state.json"
    if not path.is_file():
        raise UsageError(f"no rebase in progress in {catalog.root} (no {STATE_DIR}/state.json); "
                         "start one with `patchkit rebase --onto RELEASE`", catalog=str(catalog.root))
    state = json.loads(path.read_text(encoding="utf-8"))
    if state.get("format") != STATE_FORMAT:
        raise UsageError(f"{path} has format {state.get('format')}; this patchkit reads "
                         f"{STATE_FORMAT}: finish it with the patchkit that started it")
    up = up or UpstreamRepo(state["upstream"], wheels=state.get("wheels"))
    return _Run(catalog, state, up, progress)


def start(catalog: Catalog, onto: str, names: Sequence[str] | None = None, *,
          upstream: UpstreamRepo | None = None, progress: Progress | None = None) -> RebaseReport:
    """Rebase ``names`` (default: every fix) onto release ``onto``; see the module docstring."""
    state_dir = catalog.root / STATE_DIR
    if (state_dir / "state.json").exists():
        raise UsageError(f"a rebase is in progress in {catalog.root}: finish it with "
                         "`patchkit rebase --continue`, `--skip` or `--abort`")
    up = upstream or UpstreamRepo()
    wanted = list(names) if names else catalog.names()
    fixes = catalog.dependency_order(wanted)
    for release in sorted({f.upstream.base_release for f in fixes} | {onto}):
        up.fetch(release, progress=(lambda line: progress(line, 0, -1)) if progress else None)
    state_dir.mkdir(exist_ok=True)
    (state_dir / ".gitignore").write_text("*\n", encoding="utf-8")
    backup = state_dir / "backup"
    shutil.rmtree(backup, ignore_errors=True)
    shutil.copytree(catalog.manifests_dir, backup / "manifests")
    shutil.copytree(catalog.patches_dir, backup / "patches")
    state = {"format": STATE_FORMAT, "onto": onto, "upstream": str(up.path),
             "wheels": str(up.wheels), "queue": [f.name for f in fixes], "written": [],
             "results": [], "stopped": None}
    run = _Run(catalog, state, up, progress)
    run.save()
    return run.run()


def continue_(catalog: Catalog, *, upstream: UpstreamRepo | None = None,
              progress: Progress | None = None) -> RebaseReport:
    """Take the edited worktree files as the stopped patch's result and go on."""
    run = _load(catalog, upstream, progress)
    stopped = run.state["stopped"]
    if not stopped:
        return run.run()
    wt = run.worktree()
    resumed: dict[str, str | None] = {}
    for path in stopped["paths"]:
        f = wt / path
        text = hunks.decode(f.read_bytes()) if f.is_file() else None
        if text is not None and _MARKER.search(text):
            raise UsageError(f"{f} still has conflict markers: resolve them (edit the file), "
                             "then run `patchkit rebase --continue` again", path=str(f))
        resumed[path] = text
    fix = run.catalog.get(stopped["name"])
    file = stopped["file"]
    stopped["done"][file] = _series_text(fix.patch_dir / file, stopped["pre"], resumed)
    reps = stopped["patches"]
    reps[-1] = {**reps[-1], "classification": "resolved",
                "detail": f"{reps[-1]['classification']}, resolved by hand: {reps[-1]['detail']}"}
    report = run.one(stopped["name"], resumed=resumed)
    if report.outcome == "stopped":
        run.save()
        return run.report(report)
    run.drop_worktree()
    run.state["results"].append(report.to_json())
    run.state["stopped"] = None
    run.state["queue"].pop(0)
    run.save()
    return run.run()


def skip(catalog: Catalog, *, upstream: UpstreamRepo | None = None,
         progress: Progress | None = None) -> RebaseReport:
    """Leave the stopped fix as it is in the catalog and go on with the next."""
    run = _load(catalog, upstream, progress)
    stopped = run.state["stopped"]
    if stopped:
        fix = run.catalog.get(stopped["name"])
        run.drop_worktree()
        run.state["results"].append(FixReport(
            fix.name, fix.upstream.base_release, run.state["onto"], "skipped",
            "skipped by the user at a conflict; left as it was", tuple(
                _patch_from_json(p) for p in stopped["patches"]), fix.version,
            fix.version).to_json())
        run.state["stopped"] = None
        run.state["queue"].pop(0)
        run.save()
    return run.run()


def abort(catalog: Catalog, *, upstream: UpstreamRepo | None = None) -> list[str]:
    """Put back every catalog file the run wrote; remove the worktree and the state."""
    run = _load(catalog, upstream, None)
    restored = []
    for name in run.state["written"]:
        shutil.copy2(run.backup / "manifests" / f"{name}.toml", catalog.manifest_path(name))
        src, dst = run.backup / "patches" / name, catalog.patches_dir / name
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
        restored.append(name)
    run.drop_worktree()
    shutil.rmtree(run.dir, ignore_errors=True)
    return restored


def in_progress(catalog: Catalog) -> bool:
    return (catalog.root / STATE_DIR / "state.json").is_file()


__all__ = ["FixReport", "PatchReport", "RebaseReport", "abort", "continue_", "in_progress",
           "range_diff", "series_of_version",
           "skip", "start"]


# -- versions of a series (patchkit diff --versions) -------------------------------------------


def series_of_version(catalog: Catalog, name: str, version: int) -> dict[str, str]:
    """The patch files (name -> text) of ``version`` of a fix: the current one from the
    catalog, an older one from the catalog's git history (the last commit declaring it)."""
    fix = catalog.get(name)
    if version == fix.version:
        return {r.file: r.path.read_text(encoding="utf-8", errors="surrogateescape")
                for r in fix.patches}
    top = gitrepo.work_tree_top(catalog.root)
    if top is None:
        raise UsageError(f"version {version} of {name} is not the current one ({fix.version}) "
                         f"and the catalog {catalog.root} is not in git, where old versions live")
    rel_manifest = fix.manifest_path.resolve().relative_to(top.resolve()).as_posix()
    rel_patches = fix.patch_dir.resolve().relative_to(top.resolve()).as_posix()
    for commit in reversed(gitrepo.path_history(top, [rel_manifest])):
        (text,) = gitrepo.texts_at(top, [(commit.sha, rel_manifest)])
        declared, files = manifest.version_and_patches(text or "")
        if declared == version:
            texts = gitrepo.texts_at(top, [(commit.sha, f"{rel_patches}/{f}") for f in files])
            return {f: t or "" for f, t in zip(files, texts)}
    raise UsageError(f"no version {version} of {name} in the catalog's git history (versions "
                     f"run up to {fix.version}); `patchkit log {name}` lists them")


def range_diff(catalog: Catalog, name: str, old: int, new: int) -> str:
    """A diff of the two versions' patch files, patch by patch (a range-diff of the series)."""
    import difflib

    a, b = series_of_version(catalog, name, old), series_of_version(catalog, name, new)
    out = []
    for file in dict.fromkeys([*a, *b]):
        out += difflib.unified_diff(
            a.get(file, "").splitlines(keepends=True), b.get(file, "").splitlines(keepends=True),
            fromfile=f"v{old}/{file}" if file in a else "/dev/null",
            tofile=f"v{new}/{file}" if file in b else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)
