"""The rebase run: plan every fix at the start, then write, stop and resume like git rebase.

``start`` classifies every fix in one pass (dependency order) and keeps the results in the
state as a plan, assuming each stopped fix will be skipped. ``--skip`` and ``--continue``
then only write the planned fixes up to the next planned stop. A fix is computed again
when it is reached only if its plan no longer holds: the user changed its files, or it
depends on (or shares a file with) a fix whose resolution the user gave with ``--continue``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..catalog import manifest, series
from ..catalog import Catalog
from ..engine import hunks
from ..errors import ConflictError, PatchkitError, UsageError
from ..catalog.model import Fix
from .. import gitrepo
from .classify import (CLEAN, PatchReport, Series, Tree, apply_all, changes, classify,
                       patch_from_json, series_text)

STATE_DIR = ".patchkit-rebase"
STATE_FORMAT = 2
Progress = Callable[[str, int, int], None]  # (what, done, total)
MARKERS = ("<<<<<<< ", ">>>>>>> ", "||||||| ")


@dataclass(frozen=True)
class FixReport:
    """``outcome``: rebased | extended (release added) | upstreamed | stopped | skipped, and
    for a run onto a commit that is not a release (nothing written): clean | conflict. A dry
    run onto a release says rebased | extended as what it would write, conflict where it
    would stop."""

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
    #: why nothing was written, for a report-only run (``dry_run``, or onto a commit that is
    #: not a release); empty when the run wrote the catalog
    not_written: str = ""
    #: the fixes still to do after the stopped one (a stopped run, see :func:`current`)
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


def fix_from_json(d: dict[str, Any]) -> FixReport:
    return FixReport(**{**d, "patches": tuple(patch_from_json(p) for p in d["patches"])})


class _Skip(Exception):
    pass


def reverted(fix: Fix) -> list[str]:
    """The fix a revert fix removes (``[revert] fix``), as a list: its series is under the
    revert's on both sides of a rebase, like a dependency's."""
    return [fix.revert.fix] if fix.revert is not None and fix.revert.fix else []


def skip_reason(fix: Fix, release: str | None, inactive: bool = False) -> str:
    """Why ``fix`` is not rebased, or "". ``inactive``: dead and superseded fixes too (the
    user named them, or passed --include-inactive): a fork may have them committed."""
    if fix.status in ("dead", "superseded") and not inactive:
        return (f"{fix.status}: not rebased (name it, or pass --include-inactive, to rebase "
                "it anyway)")
    if fix.revert is not None and not fix.revert.fix:
        return ("a revert of a commit named by id: its change is computed from the fork's "
                "commit at apply time")
    if not fix.patches:
        return "no patch series to rebase"
    if not fix.upstream.releases:
        return "no release precondition: the series is not tied to SGLang releases"
    if any(p.root != fix.upstream.root for p in fix.patches):
        return f"patches outside the {fix.upstream.root} root"
    if release is not None and fix.upstream.base_release == release:
        return f"already based on {release}"
    if release is not None and release in fix.upstream.releases:
        return f"already known to apply to {release}"
    return ""


def queue_order(catalog: Catalog, names: Sequence[str]) -> list[Fix]:
    """The named fixes in dependency order, each revert fix after the fix it reverts (the
    revert is rebased against that fix's new version)."""
    fixes = catalog.dependency_order(names)
    selected = {f.name: f for f in fixes}
    order: list[Fix] = []
    seen: set[str] = set()

    def visit(fix: Fix) -> None:
        if fix.name in seen:
            return
        seen.add(fix.name)
        for dep in [*fix.depends_on, *reverted(fix)]:
            if dep in selected:
                visit(selected[dep])
        order.append(fix)

    for fix in fixes:
        visit(fix)
    return order


def _read_series(fix: Fix, patch_dir: Path) -> Series:
    return [(r.file, (patch_dir / r.file).read_text(encoding="utf-8", errors="surrogateescape"))
            for r in fix.patches]


class Run:
    """One rebase: its state (``state.json``), the catalog, the upstream blobs."""

    def __init__(self, catalog: Catalog, state: dict[str, Any], progress: Progress | None) -> None:
        self.catalog, self.state = catalog, state
        self.progress = progress or (lambda _w, _d, _t: None)
        self.dir = catalog.root / STATE_DIR
        self.backup = self.dir / "backup"
        self.blobs = gitrepo.Blobs(state["git_dir"])
        self.virtual: dict[str, Series] = {}  # series the plan expects a fix to end with
        self._upstream: dict[tuple[str, ...], list[tuple[str, str, dict[str, str]]]] = {}
        self.all_paths: list[str] = []  # while planning: one git log for every fix's files
        self._matches: dict[str, tuple[tuple[str, str] | None, dict[str, tuple[str, str]]]] = {}

    @property
    def onto(self) -> str:
        return self.state["onto"]

    @property
    def release(self) -> str | None:
        return self.state["release"]

    @property
    def writes(self) -> bool:
        """Whether this run writes the catalog: not a dry run, and onto a release (a
        manifest's base is a release); otherwise it reports what each fix would do."""
        return self.release is not None and not self.state.get("dry_run")

    @property
    def inactive(self) -> bool:
        """Dead and superseded fixes are rebased too (named, or --include-inactive)."""
        return bool(self.state.get("inactive"))

    # -- state on disk
    def save(self) -> None:
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(self.state), encoding="utf-8")
        tmp.replace(self.dir / "state.json")

    def note_written(self, name: str) -> None:
        """Journal a fix before its files are written, so --abort restores it (cheaper than
        saving the whole state before every write)."""
        self.state["written"].append(name)
        with open(self.dir / "written", "a", encoding="utf-8") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())

    def worktree(self) -> Path:
        return self.dir / "worktree"

    def drop_worktree(self) -> None:
        if self.worktree().exists():
            shutil.rmtree(self.worktree())

    def old_fix(self, name: str) -> Fix:
        return manifest.load_manifest(self.backup / "manifests" / f"{name}.toml",
                                      patch_dir=self.backup / "patches" / name)

    def fingerprint(self, name: str) -> str:
        """The catalog files of a fix as they are now: a plan is only good for these bytes."""
        h = hashlib.sha256()
        path = self.catalog.manifest_path(name)
        h.update(path.read_bytes() if path.is_file() else b"")
        pdir = self.catalog.patches_dir / name
        for p in sorted(pdir.iterdir()) if pdir.is_dir() else ():
            if p.is_file():
                h.update(p.name.encode() + b"\0" + p.read_bytes())
        return h.hexdigest()

    # -- the two sides of a fix
    def base_rev(self, fix: Fix) -> str:
        return self.state.get("base") or f"v{fix.upstream.base_release}"

    def deps(self, fix: Fix) -> list[Fix]:
        """The fixes under this one on both sides, dependencies first: its dependencies and,
        for a revert fix, the fix it reverts (with that fix's dependencies)."""
        return self.catalog.dependency_order([*fix.depends_on, *reverted(fix)], with_deps=True)

    def dep_series(self, name: str, release: str | None, *, old: bool, under: str = "this fix"
                   ) -> tuple[Series, str]:
        """The series of ``name`` to put under a fix on a tree of ``release``, and which
        version it is: the version based on (or known to apply to) that release. The old
        side starts from the catalog as it was at the start of the run, the new side from
        the plan's result or the catalog now; a version of another base comes from the
        catalog's git history (the dependency was rebased in an earlier run)."""
        if not old and name in self.virtual:
            return self.virtual[name], f"as rebased onto {self.onto}"
        fix = self.old_fix(name) if old else self.catalog.get(name)
        if release is None or release == fix.upstream.base_release \
                or release in fix.upstream.releases:
            return _read_series(fix, fix.patch_dir), f"v{fix.version}"
        matching = sorted({e.version for e in fix.changelog
                           if e.base_release == release and e.version != fix.version})
        if matching:
            from .versions import series_of_version  # GitPython: only for an older version

            try:
                texts = series_of_version(self.catalog, name, matching[-1])
            except PatchkitError as exc:
                raise _Skip(f"dependency {name}: its version {matching[-1]} (based on "
                            f"{release}) cannot be read: {exc}") from None
            return list(texts.items()), f"v{matching[-1]}, from the catalog's history"
        if not old:  # tried as it is: it may still apply (the caller says so if not)
            return _read_series(fix, fix.patch_dir), f"v{fix.version}"
        known = ", ".join(f"v{e.version} on {e.base_release or '?'}" for e in fix.changelog) \
            or f"v{fix.version} on {fix.upstream.base_release}"
        raise _Skip(f"dependency {name} has no version based on {release}, the base of "
                    f"{under} (its versions: {known}), so {under}'s old side cannot be built: "
                    f"rebase {under} together with {name} from a catalog commit where {name} "
                    f"is still on {release}, or write {under} again on {self.onto}")

    def base_tree(self, fix: Fix) -> Tree:
        """The old base with the dependencies' versions of that base applied."""
        tree = Tree(self.blobs, self.base_rev(fix))
        base = fix.upstream.base_release
        for dep in self.deps(fix):
            texts, which = self.dep_series(dep.name, base, old=True, under=fix.name)
            for file, chs in changes(dep, texts, dep.patch_dir):
                try:
                    apply_all(tree, chs)
                except ConflictError:
                    raise _Skip(f"dependency {dep.name} ({which}, {file}) does not apply to "
                                f"{base}, the base of this fix: its series there is not the "
                                "one this fix was written on") from None
        return tree

    def onto_tree(self, fix: Fix) -> Tree:
        """The new upstream with the dependencies' series applied, as the catalog will hold
        them when this fix is reached (the plan's expectation while planning)."""
        tree = Tree(self.blobs, self.state["onto_rev"])
        for dep in self.deps(fix):
            texts, which = self.dep_series(dep.name, self.release, old=False)
            for file, chs in changes(dep, texts, dep.patch_dir):
                try:
                    apply_all(tree, chs)
                except ConflictError:
                    hint = f" (a {dep.status} fix is rebased only when named or with " \
                        "--include-inactive)" if dep.status in ("dead", "superseded") else ""
                    raise _Skip(f"dependency {dep.name} ({which}, {file}) does not apply to "
                                f"{self.onto}; rebase it first{hint}") from None
        return tree

    # -- upstream commits holding a fix (patch-id)
    def _candidates(self, fix: Fix, old: Series) -> list[tuple[str, str, str]]:
        """Commits between the fix's base and the target touching its files, each as
        (sha, subject, its diff of those files only)."""
        chs = changes(fix, old, self.backup / "patches" / fix.name)
        paths = sorted({c.path for _f, cs in chs for c in cs})
        base = self.base_rev(fix)
        asked = self.all_paths or paths
        key = (base, *asked)
        if key not in self._upstream:
            self._upstream[key] = gitrepo.commit_diffs(
                self.state["git_dir"], base, self.state["onto_rev"], asked)
        commits = [(sha, subj, "".join(d for p, d in sorted(files.items()) if p in paths))
                   for sha, subj, files in self._upstream[key]]
        return [c for c in commits if c[2]]

    def match_upstream(self, fixes: Sequence[tuple[Fix, Series]]) -> None:
        """For each fix: the upstream commit with its series' ``git patch-id --stable``, else
        the one of each patch. One patch-id process for all the fixes."""
        asked: list[str] = []
        slots = []
        for fix, old in fixes:
            commits = self._candidates(fix, old)
            if not commits:
                self._matches[fix.name] = (None, {})
                continue
            whole = "".join(t for _f, t in old)
            slots.append((fix, old, commits, len(asked)))
            asked += [whole, *(t for _f, t in old), *(c[2] for c in commits)]
        ids = gitrepo.patch_ids(asked) if asked else []
        for fix, old, commits, at in slots:
            mine = ids[at:at + 1 + len(old) + len(commits)]
            by_id = {pid: (sha, subj) for (sha, subj, _d), pid in zip(commits, mine[1 + len(old):])
                     if pid}
            if mine[0] and mine[0] in by_id:
                self._matches[fix.name] = (by_id[mine[0]], {})
                continue
            self._matches[fix.name] = (None, {f: by_id[pid] for (f, _t), pid in
                                              zip(old, mine[1:1 + len(old)]) if pid and pid in by_id})

    def upstream_commits(self, fix: Fix, old: Series
                         ) -> tuple[tuple[str, str] | None, dict[str, tuple[str, str]]]:
        if fix.name not in self._matches:
            self.match_upstream([(fix, old)])
        return self._matches[fix.name]

    # -- one fix: (report, refreshed patch texts, stop) without writing anything
    def one(self, name: str, resumed: dict[str, str | None] | None = None
            ) -> tuple[FixReport, dict[str, str], dict[str, Any] | None]:
        fix = self.catalog.get(name)
        onto, base = self.onto, fix.upstream.base_release
        why = skip_reason(fix, self.release, self.inactive)
        if why:
            return FixReport(name, base, onto, "skipped", why, (), fix.version, fix.version), {}, None
        try:
            new_tree = self.onto_tree(fix)
            old_tree = self.base_tree(fix)
        except _Skip as exc:  # a dependency missing on one side: nothing written for this fix
            return (FixReport(name, base, onto, "skipped", str(exc), (), fix.version,
                              fix.version), {}, None)
        stopped = self.state.get("stopped") or {}
        if stopped.get("name") == name and resumed is not None:
            start, done = stopped["patch"] + 1, dict(stopped["done"])
            reports = [patch_from_json(p) for p in stopped["patches"]]
            new_tree.files = dict(stopped["tree"])
            new_tree.files.update(resumed)
        else:
            start, done, reports = 0, {}, []
        old = self.old_fix(name)
        old_texts = _read_series(old, old.patch_dir)
        whole, per_patch = self.upstream_commits(fix, old_texts)
        for index, (file, chs) in enumerate(changes(old, old_texts, old.patch_dir)):
            pre_new = {c.path: new_tree.get(c.path) for c in chs}
            pre_old = {c.path: old_tree.get(c.path) for c in chs}
            try:
                apply_all(old_tree, chs)  # the series applies to the base it was written on
            except ConflictError as exc:
                under = ", ".join(d.name for d in self.deps(fix))
                return (FixReport(name, base, onto, "skipped", f"{file} does not apply to its "
                                  f"base {base}" + (f" with {under} under it" if under else "")
                                  + f" ({str(exc).split(';')[0]}): check base_release in "
                                  f"{fix.manifest_path.name}", (), fix.version, fix.version),
                        {}, None)
            if index < start:
                continue
            self.progress(f"{name}: {file}", len(self.state["results"]), -1)
            found = whole or per_patch.get(file)
            if found:
                paths = tuple(pre_new)
                reports.append(PatchReport(
                    file, "upstream", f"{onto} already holds this change: upstream commit "
                    f"{found[0][:12]} ({found[1]}) has its patch-id", (), paths, found[0]))
                continue
            rep, merged, conflicted = classify(fix, file, chs, new_tree, pre_old, old_tree, onto)
            reports.append(rep)
            if rep.classification not in CLEAN:
                stop = {"name": name, "patch": index, "file": file, "done": done,
                        "pre": pre_new, "tree": dict(new_tree.files),
                        "patches": [r.to_json() for r in reports], "conflicted": conflicted,
                        "paths": sorted(merged), "merged": merged}
                return (FixReport(name, base, onto, "stopped", rep.detail, tuple(reports),
                                  fix.version, fix.version), done, stop)
            new_tree.files.update(merged)
            done[file] = series_text(dict(old_texts)[file], pre_new, merged)
        return self.decide(fix, done, tuple(reports)), done, None

    def decide(self, fix: Fix, done: dict[str, str], reports: tuple[PatchReport, ...]) -> FixReport:
        onto, base = self.onto, fix.upstream.base_release
        kinds = [r.classification for r in reports]
        if all(k == "upstream" for k in kinds):
            commits = sorted({r.commit[:12] for r in reports if r.commit})
            return FixReport(fix.name, base, onto, "upstreamed", f"{onto} holds the whole change"
                             + (f" (upstream commit {', '.join(commits)})" if commits else "")
                             + ": propose status = \"upstreamed\"", reports, fix.version, fix.version)
        if self.release is None:
            return FixReport(fix.name, base, onto, "clean", f"applies to {onto}; not written "
                             "(not a release: rebase onto a release tag to write)", reports,
                             fix.version, fix.version)
        # onto a release: rebased or extended (a dry run says what it would write)
        if all(k == "unchanged" for k in kinds):
            return FixReport(fix.name, base, onto, "extended", f"the series applies to {onto} "
                             f"unchanged; {onto} added to upstream.releases", reports,
                             fix.version, fix.version)
        summary = (f"Rebased from {base} onto {onto}: "
                   + ", ".join(f"{r.file} {r.classification}" for r in reports) + ".")
        return FixReport(fix.name, base, onto, "rebased", summary, reports, fix.version,
                         fix.version + 1)

    def kept(self, fix: Fix, report: FixReport, done: dict[str, str]) -> Series:
        kinds = {r.file: r.classification for r in report.patches}
        return [(r.file, done[r.file]) for r in fix.patches
                if done.get(r.file) is not None and kinds.get(r.file) != "upstream"]

    def write(self, fix: Fix, report: FixReport, done: dict[str, str]) -> None:
        """Write a completed fix to the catalog (journaled first for --abort)."""
        if report.outcome not in ("rebased", "extended") or not self.writes:
            return
        self.note_written(fix.name)
        if report.outcome == "extended":
            manifest.add_release(fix.manifest_path, self.onto)
        else:
            kept = self.kept(fix, report, done)
            names = {f for f, _t in kept}
            refs = [r for r in fix.patches if r.file in names]
            _write_series(fix, dict(kept), lambda: manifest.bump_manifest(
                fix.manifest_path, version=fix.version + 1, changelog_summary=report.detail,
                date=_dt.date.today().isoformat(), base_release=self.onto,
                patches=[(r.file, r.root, r.description) for r in refs]
                if len(refs) != len(fix.patches) else None))
            for r in fix.patches:
                if r not in refs:
                    r.path.unlink(missing_ok=True)
        self.catalog._fixes.pop(fix.name, None)

    # -- the plan
    def plan(self) -> None:
        """Classify every queued fix now; each stop is assumed skipped by the user."""
        plan: dict[str, Any] = {}
        queue = self.state["queue"]
        olds = []
        for name in queue:
            old = self.old_fix(name)
            if not skip_reason(old, self.release, self.inactive):
                olds.append((old, _read_series(old, old.patch_dir)))
                self.all_paths += [c.path for _f, cs in changes(old, olds[-1][1], old.patch_dir)
                                   for c in cs]
        self.all_paths = sorted(set(self.all_paths))
        self.match_upstream(olds)
        for i, name in enumerate(queue):
            self.progress(name, i, len(queue))
            report, done, stop = self.one(name)
            if report.outcome in ("rebased", "clean"):
                self.virtual[name] = self.kept(self.catalog.get(name), report, done)
            plan[name] = {"key": self.fingerprint(name), "report": report.to_json(),
                          "done": done, "stop": stop}
        self.state["plan"] = plan

    def planned(self, name: str) -> tuple[FixReport, dict[str, str], dict[str, Any] | None] | None:
        entry = self.state["plan"].get(name)
        if entry is None or entry["key"] != self.fingerprint(name):
            return None
        return fix_from_json(entry["report"]), entry["done"], entry["stop"]

    def replan_after(self, name: str, paths: Sequence[str]) -> list[str]:
        """Drop the plan of later fixes that depend on ``name`` or share one of ``paths``."""
        dropped = []
        for later in [n for n in self.state["queue"] if n != name]:
            entry = self.state["plan"].get(later)
            if entry is None:
                continue
            deps = {d.name for d in self.deps(self.catalog.get(later))}
            touched = {p for r in fix_from_json(entry["report"]).patches for p in r.paths}
            if name in deps or touched & set(paths) or not touched:
                self.state["plan"].pop(later)
                dropped.append(later)
        return dropped

    # -- the loop
    def run(self) -> RebaseReport:
        try:
            return self._loop()
        finally:
            self.blobs.close()

    def _loop(self) -> RebaseReport:
        queue: list[str] = self.state["queue"]
        total = len(queue) + len(self.state["results"])
        while queue:
            name = queue[0]
            self.progress(name, len(self.state["results"]), total)
            report, done, stop = self.planned(name) or self.one(name)
            fix = self.catalog.get(name)
            if stop is not None and not self.writes:  # would stop here: go on as if skipped
                report = replace(report, outcome="conflict")
            elif stop is not None:
                self.lay_out(stop)
                self.state["stopped"]["key"] = self.fingerprint(name)
                self.state["plan"].pop(name, None)
                self.save()
                return self.report(report)
            self.write(fix, report, done)
            self.state["results"].append(report.to_json())
            self.state["stopped"] = None
            queue.pop(0)
        self.progress("", total, total)
        return self.finish()

    def lay_out(self, stop: dict[str, Any]) -> None:
        """The stopped patch's files (markers in them) at their paths in the worktree: only
        these, not a checkout of the whole release, which cost most of a stop's time."""
        wt = self.worktree()
        self.drop_worktree()
        wt.mkdir(parents=True)
        for path, text in stop["merged"].items():
            target = wt / path
            if text is None:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(hunks.encode(text))
        self.state["stopped"] = {k: v for k, v in stop.items() if k != "merged"}

    def report(self, stopped: FixReport | None = None) -> RebaseReport:
        fixes = [fix_from_json(d) for d in self.state["results"]]
        if stopped is None:
            return RebaseReport(self.onto, tuple(fixes), not_written=self.not_written())
        conflicted = tuple(self.state["stopped"].get("conflicted", ()))
        return RebaseReport(self.onto, (*fixes, stopped), stopped.name, str(self.worktree()),
                            conflicted, remaining=tuple(self.state["queue"][1:]))

    def not_written(self) -> str:
        if self.writes:
            return ""
        if self.state.get("dry_run"):
            return "--dry-run"
        return (f"{self.onto} is not a release and a manifest's base is one: rebase onto a "
                "release tag to write")

    def stopped_report(self) -> RebaseReport:
        """Where a stopped run is, without doing anything (a bare ``patchkit rebase``)."""
        stop = self.state.get("stopped")
        if not stop:
            return RebaseReport(self.onto, tuple(fix_from_json(d) for d in self.state["results"]),
                                remaining=tuple(self.state["queue"]))
        patches = tuple(patch_from_json(p) for p in stop["patches"])
        fix = self.old_fix(stop["name"])
        detail = patches[-1].detail if patches else ""
        return self.report(FixReport(stop["name"], fix.upstream.base_release, self.onto,
                                     "stopped", detail, patches, fix.version, fix.version))

    def finish(self) -> RebaseReport:
        report = self.report()
        shutil.rmtree(self.dir, ignore_errors=True)
        return report


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
