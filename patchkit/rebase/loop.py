"""The rebase loop: plan every fix at the start (each stop assumed skipped), then write, stop
and resume like git rebase. A fix is computed again only if its plan no longer holds: its
files changed, or it depends on (or shares a file with) a fix resolved with ``--continue``."""

from __future__ import annotations

import datetime as _dt
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..catalog.writer import write_series
from ..catalog import edit
from ..catalog.manifest import load_manifest
from ..catalog.model import Fix, Variant
from ..catalog.series import patch_text
from ..errors import ConflictError, PatchkitError
from .classify import CLEAN, Decision, PatchReport, Series, Tree, apply_all, changes, \
    classify, decide, missing_on, patch_from_json, series_text
from .matching import UpstreamMatches
from .sides import Sides, Skip, read_series, skip_reason
from .state import (WRITTEN, FixReport, Progress, RebaseReport, RebaseState, backport,
                    fix_from_json, fix_report)

Computed = tuple[FixReport, dict[str, str], dict[str, Any] | None]  # report, texts, stop


class Rebase:
    """A rebase at work on its :class:`RebaseState`: compute, plan, write and stop."""

    def __init__(self, state: RebaseState, progress: Progress | None) -> None:
        self.state = state
        self.progress = progress or (lambda _w, _d, _t: None)
        self.doing = "rebasing"  # what progress calls the work on a fix: the plan classifies
        self.sides = Sides(state)
        self.matches = UpstreamMatches(state.data["git_dir"], state.data["onto_rev"],
                                       state.base_rev,
                                       lambda fix: state.old_fix(fix.name).patch_dir)

    def rebase_fix(self, name: str, resumed: dict[str, str | None] | None = None) -> Computed:
        """One fix: its report, refreshed patch texts and stop (or None); ``resumed``: the
        user's files for the stopped patch (``--continue``)."""
        every = self.state.catalog.get(name)  # the fix with every version it has
        why = skip_reason(every, self.state.release, self.state.inactive, self.drop_old)
        if why:
            return fix_report(every, self.state.onto, "skipped", why), {}, None
        fix = self.start(every)  # the version nearest the release, for a backport
        onto, base = self.state.onto, fix.upstream.base_release
        try:
            new_tree = self.sides.tree(fix, old=False)
            old_tree = self.sides.tree(fix, old=True)
        except Skip as exc:  # a dependency missing on one side: nothing written for this fix
            return fix_report(fix, onto, "skipped", str(exc)), {}, None
        stopped = self.state.data.get("stopped") or {}
        if stopped.get("name") == name and resumed is not None:
            start, done = stopped["patch"] + 1, dict(stopped["done"])
            reports = [patch_from_json(p) for p in stopped["patches"]]
            new_tree.files = {**stopped["tree"], **resumed}
        else:
            start, done, reports = 0, {}, []
        old = self.start(self.state.old_fix(name))
        old_texts = read_series(old)
        whole, per_patch = self.matches.of(fix, old_texts)
        for index, (file, chs) in enumerate(changes(old, old_texts, old.patch_dir)):
            pre_new = {c.path: new_tree.get(c.path) for c in chs}
            pre_old = {c.path: old_tree.get(c.path) for c in chs}
            try:
                apply_all(old_tree, chs)  # the series applies to the base it was written on
            except ConflictError as exc:
                under = ", ".join(d.name for d in self.sides.deps(fix))
                return fix_report(fix, onto, "skipped", f"{file} does not apply to its base "
                                  f"{base}" + (f" with {under} under it" if under else "")
                                  + f" ({str(exc).split(';')[0]}): check base_release in "
                                  f"{fix.manifest_path.name}"), {}, None
            if index < start:
                continue
            self.progress(f"{self.doing} {name}: {file}", len(self.state.data["results"]), -1)
            rep, merged, conflicted = self.decide_patch(fix, file, chs, new_tree, old_tree,
                                                        pre_old, pre_new,
                                                        whole or per_patch.get(file))
            reports.append(rep)
            if merged is None:  # upstream holds it: nothing to apply
                continue
            if rep.classification not in CLEAN:
                stop = {"name": name, "patch": index, "file": file, "done": done,
                        "pre": pre_new, "tree": dict(new_tree.files),
                        "patches": [r.to_json() for r in reports], "conflicted": conflicted,
                        "paths": sorted(merged), "merged": merged,
                        "missing": missing_on(new_tree, pre_old, old_tree)}
                return fix_report(fix, onto, "stopped", rep.detail, tuple(reports)), done, stop
            new_tree.files.update(merged)
            done[file] = series_text(dict(old_texts)[file], pre_new, merged)
        report = self.outcome(fix, tuple(reports), every)
        if report.outcome in ("rebased", "extended", "clean"):
            report = replace(report, unverified=tuple(unverified(fix, new_tree)))
        return report, done, None

    def decide_patch(self, fix: Fix, file: str, chs: list, new_tree: Tree, old_tree: Tree,
                     pre_old: dict[str, str | None], pre_new: dict[str, str | None],
                     found: Any) -> tuple[PatchReport, dict[str, str | None] | None, list[str]]:
        """One patch onto the new tree: its report, the merged files (None when upstream holds
        it, so nothing is applied) and the conflicted paths."""
        onto = self.state.onto
        reverted = self.matches.reverted(fix, found)
        # the decision `patchkit upstream check` makes too (patchkit.rebase.contains)
        said = decide(new_tree, chs, found, reverted, Tree.of(old_tree, pre_old))
        if said.kind == "absent" and said.applies:  # would it bring removed code back?
            said = self.walk(fix, chs, said)
        if said.held is not None:
            return PatchReport(file, "upstream", said.held.detail(onto), (), tuple(pre_new),
                               said.held.commit), None, []
        if said.kind in ("ambiguous", "removed"):  # a human decides: nothing is applied
            kind = "ambiguous" if said.kind == "ambiguous" else "removed-upstream"
            return PatchReport(file, kind, said.detail, (), tuple(pre_new), said.commit), \
                dict(pre_new), []
        rep, merged, conflicted = classify(fix, file, chs, new_tree, pre_old, old_tree, onto)
        if rep.classification in CLEAN and all(merged.get(p) == pre_new[p] for p in pre_new):
            return replace(rep, classification="upstream", detail=f"{onto} already holds this "
                           f"change: {rep.detail} gives {onto}'s files unchanged"), None, []
        if said.kind == "reverted":
            rep = replace(rep, detail=f"{rep.detail}; {said.detail}", commit=said.commit,
                          classification="reverted-upstream"
                          if rep.classification in CLEAN else rep.classification)
        return rep, merged, conflicted

    def walk(self, fix: Fix, chs: list, said: Decision) -> Decision:
        """A patch the target does not hold, asked of every release between the fix's base and
        the target: held in one of them means upstream took it and removed it again."""
        for version in self.sides.releases_between(fix.upstream.base_release,
                                                   self.state.release):
            there = decide(Tree(self.sides.blobs, f"v{version}"), chs, None)
            if there.held is not None:
                return Decision("removed", None, f"landed upstream in {version} ("
                                f"{there.held.detail(version)}), and {self.state.onto} no "
                                "longer has it: upstream removed it (or reverted it)")
        return said

    @property
    def drop_old(self) -> bool:
        return bool(self.state.data.get("drop_old"))

    def start(self, fix: Fix) -> Fix:
        """The version of ``fix`` this rebase starts from (:meth:`RebaseState.started`)."""
        return self.state.started(fix)

    def outcome(self, fix: Fix, reports: tuple[PatchReport, ...], whole: Fix) -> FixReport:
        """What a fix whose every patch landed comes to (``fix`` the version it started from,
        ``whole`` the fix with every version)."""
        onto, base = self.state.onto, fix.upstream.base_release
        kinds = [r.classification for r in reports]
        if all(k == "upstream" for k in kinds):
            commits = sorted({r.commit[:12] for r in reports if r.commit})
            held = f"{onto} holds the whole change" + (
                f" (upstream commit {', '.join(commits)})" if commits else "")
            if backport(whole, self.state.release, self.drop_old):  # later releases may not
                return fix_report(fix, onto, "upstreamed", held + ": hosts on it need no "
                                  "version of the fix; nothing written (it is not marked upstream, "
                                  "as the releases after it may lack the change)", reports)
            return fix_report(fix, onto, "upstreamed", held
                              + (f": marked upstream since {onto}, no variant for it"
                                 if self.state.writes else ": it would be marked upstream"), reports)
        if self.state.release is None:
            return fix_report(fix, onto, "clean", f"applies to {onto}; not written (not a "
                              "release: rebase onto a release tag to write)", reports)
        variant = self._variant(whole, fix)
        if all(k == "unchanged" for k in kinds):  # a dry run says what it would write
            where = f"the releases of its variant v{fix.version}" if variant else "upstream.releases"
            return fix_report(fix, onto, "extended", f"the series applies to {onto} unchanged; "
                              f"{onto} added to {where}", reports)
        done = (f"Rebased from {base} onto {onto}: " if self.state.writes  # the changelog's
                else f"A rebase from {base} onto {onto} would give: ")  # a dry run's, not done
        summary = done + ", ".join(f"{r.file} {r.classification}" for r in reports) + "."
        if backport(whole, self.state.release, self.drop_old):
            summary += f" A variant for {onto}; the newer releases keep theirs."
        return fix_report(fix, onto, "rebased", summary, reports, whole.next_version)

    @staticmethod
    def _variant(whole: Fix, fix: Fix) -> Variant | None:
        """The ``[[variants]]`` entry ``fix`` is (None: it is the top level)."""
        return next((v for v in whole.variants if v.version == fix.version
                     and v.base_release == fix.upstream.base_release), None)

    def kept(self, fix: Fix, report: FixReport, done: dict[str, str]) -> Series:
        """The refreshed series: the patches upstream does not already hold."""
        kinds = {r.file: r.classification for r in report.patches}
        return [(r.file, done[r.file]) for r in fix.patches
                if done.get(r.file) is not None and kinds.get(r.file) != "upstream"]

    def write(self, fix: Fix, report: FixReport, done: dict[str, str]) -> None:
        """Write a completed fix to the catalog (journaled first for --abort): the new series
        becomes the top level and the old one a variant for the releases it still serves
        (docs/rebase.md, "Variants"), unless ``drop_old``; a fix upstream in the release
        is marked upstream since it, with no new variant."""
        if report.outcome not in WRITTEN or not self.state.writes:
            return
        onto, drop = self.state.onto, self.drop_old
        if backport(fix, self.state.release, drop):
            if report.outcome != "upstreamed":  # nothing to write for a release holding it
                self.state.note_written(fix.name)
                self.write_backport(fix, report, done)
            self.state.catalog.forget(fix.name)
            return
        self.state.note_written(fix.name)
        if report.outcome == "upstreamed":
            edit.set_upstream(fix.manifest_path, onto)
        elif report.outcome == "extended":
            edit.add_release(fix.manifest_path, onto)
        else:
            kept = dict(self.kept(fix, report, done))
            refs = [r for r in fix.patches if r.file in kept]
            files = {r.path: (kept[r.file], r.root) for r in refs}
            keep_as = None
            if not drop and [r for r in fix.upstream.releases if r != onto]:
                keep_as = edit.variant_dir(fix, fix.upstream.base_release)
                (fix.patch_dir / keep_as).mkdir(parents=True, exist_ok=True)
                files.update({fix.patch_dir / keep_as / r.file: (
                    patch_text(r.path), r.root)
                    for r in fix.patches})
            bump = lambda: edit.bump_manifest(  # noqa: E731
                fix.manifest_path, version=fix.next_version, changelog_summary=report.detail,
                date=_dt.date.today().isoformat(), base_release=onto,
                patches=[(r.file, r.root, r.description) for r in refs]
                if len(refs) != len(fix.patches) else None, keep_as=keep_as, drop_variants=drop)
            write_series(files, bump)
            for r in fix.patches:
                if r not in refs:
                    r.path.unlink(missing_ok=True)
            used = {v.dir for v in load_manifest(fix.manifest_path).variants}
            for v in fix.variants:  # the folders of variants the manifest no longer has
                if v.dir not in used:
                    shutil.rmtree(fix.patch_dir / v.dir, ignore_errors=True)
        self.state.catalog.forget(fix.name)

    def write_backport(self, fix: Fix, report: FixReport, done: dict[str, str]) -> None:
        """A backport written: the release added to the variant it started from (its series
        applies there unchanged), or a new variant for the release, the fix's next version;
        the top level and every other variant as they were."""
        onto, source = self.state.onto, self.start(fix)
        variant = self._variant(fix, source)
        if report.outcome == "extended":
            if variant is None:
                edit.add_release(fix.manifest_path, onto)
            else:
                edit.add_variant_release(fix.manifest_path, variant.dir, onto)
            return
        kept = dict(self.kept(source, report, done))
        refs = [r for r in source.patches if r.file in kept]
        folder = onto if onto not in {v.dir for v in fix.variants} else f"v{fix.next_version}"
        (fix.patch_dir / folder).mkdir(parents=True, exist_ok=True)
        files = {fix.patch_dir / folder / r.file: (kept[r.file], r.root) for r in refs}
        write_series(files, lambda: edit.add_variant(
            fix.manifest_path, version=fix.next_version, base_release=onto, variant_dir=folder,
            patches=[(r.file, r.root, r.description) for r in refs],
            changelog_summary=report.detail, date=_dt.date.today().isoformat(),
            checks_from=variant.dir if variant is not None else None))

    def plan(self) -> None:
        """Classify every queued fix now; each stop is assumed skipped by the user."""
        queue, plan = self.state.data["queue"], {}
        olds = [(self.start(old), read_series(self.start(old)))
                for old in map(self.state.old_fix, queue)
                if not skip_reason(old, self.state.release, self.state.inactive, self.drop_old)]
        self.matches.match(olds)
        self.doing = "classifying"
        for i, name in enumerate(queue):
            self.progress(f"classifying {name}", i, len(queue))
            report, done, stop = self.rebase_fix(name)
            if report.outcome in ("rebased", "clean"):
                self.sides.planned[name] = self.kept(self.start(self.state.catalog.get(name)),
                                                     report, done)
            plan[name] = {"key": self.state.fingerprint(name), "report": report.to_json(),
                          "done": done, "stop": stop}
        self.state.data["plan"] = plan
        self.doing = "rebasing"

    def from_plan(self, name: str) -> Computed | None:
        entry = self.state.data["plan"].get(name)
        if entry is None or entry["key"] != self.state.fingerprint(name):
            return None
        return fix_from_json(entry["report"]), entry["done"], entry["stop"]

    def replan_after(self, name: str, paths: Sequence[str]) -> None:
        """Drop the plan of later fixes that depend on ``name`` or share one of ``paths``."""
        plan = self.state.data["plan"]
        for later in [n for n in self.state.data["queue"] if n != name and n in plan]:
            deps = {d.name for d in self.sides.deps(self.state.catalog.get(later))}
            touched = {p for r in fix_from_json(plan[later]["report"]).patches for p in r.paths}
            if name in deps or touched & set(paths) or not touched:
                plan.pop(later)

    def done_with(self, fix: Fix, report: FixReport, done: dict[str, str]) -> None:
        """Write the fix at the head of the queue, record its report and take it off; a fix
        that cannot be written is put back as it was and reported skipped, never left as a
        state no --skip gets past."""
        try:
            self.write(fix, report, done)
        except PatchkitError as exc:
            self.state.restore_fix(fix.name)
            report = replace(report, outcome="skipped", new_version=report.old_version,
                             detail=f"not written, left as it was: {exc}")
        self.state.data["results"].append(report.to_json())
        self.state.data["stopped"] = None
        self.state.data["queue"].pop(0)

    def rebase_loop(self) -> RebaseReport:
        """Take the queue (planned results where they hold) up to a stop or the end."""
        try:
            queue: list[str] = self.state.data["queue"]
            total = len(queue) + len(self.state.data["results"])
            while queue:
                name = queue[0]
                planned = self.from_plan(name)
                if planned is None or self.state.writes:  # a planned fix of a dry run: no work
                    self.progress(f"{'writing' if planned else 'rebasing'} {name}",
                                  len(self.state.data["results"]), total)
                report, done, stop = planned or self.rebase_fix(name)
                if stop is not None and not self.state.writes:  # go on as if skipped
                    report = replace(report, outcome="conflict")
                elif stop is not None:
                    self.state.data["plan"].pop(name, None)
                    self.state.stop_at({**stop, "key": self.state.fingerprint(name)})
                    return self.state.report(report)
                self.done_with(self.state.catalog.get(name), report, done)
            self.progress("", total, total)
            final = self.state.report()
            self.state.remove()
            return final
        finally:
            self.sides.blobs.close()


def unverified(fix: Fix, tree: Tree) -> list[str]:
    """The checks of ``fix``'s verification that read a file of its root (grep, sha256,
    python-syntax: what a dry run asks too) and fail on ``tree``, the release with the fix and
    those under it applied: "name: detail" each. The version a rebase writes carries these
    checks; one failing would fail every host's apply after writing (a trial's did)."""
    import tempfile

    from ..engine.checks import CONTENT_KINDS, CheckContext, run_checks
    from ..engine.hunks import encode
    from ..engine.paths import Roots

    root = fix.upstream.root or "sglang"
    checks = [c.to_request() for c in fix.verification
              if c.kind in CONTENT_KINDS and (c.get("root") or root) == root]
    if not checks:
        return []

    def read(_root: str, rel: str) -> bytes | None:
        text = tree.get(rel)
        return None if text is None else encode(text)

    with tempfile.TemporaryDirectory(prefix="patchkit-rebase-") as tmp:
        (Path(tmp) / "python" / "sglang").mkdir(parents=True)  # a checkout's layout, as the tree's
        ctx = CheckContext(fix.name, Roots({root: tmp}), sys.executable, {}, read)
        results = run_checks([(dict(c, root=root), ctx) for c in checks])
    return [f"{r['name']}: {r['detail']}" for r in results if not r["ok"]]
