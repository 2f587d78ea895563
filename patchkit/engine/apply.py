"""The apply op: prepare every fix's change in memory, check every precondition, then write
them all in one transaction."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple, cast

from ..errors import (ConflictError, DriftError, PreconditionFailed, TargetFileMissing,
                      UsageError, VerificationFailed, VersionMismatch)
from . import auto, record
from .checks import CheckContext, failure_lines, run_check
from .fsops import missing_dirs
from .hunks import Placement, apply_change, decode, encode, sha256_bytes
from .request import FixSpec, Request, check_file_modes, check_patch_paths
from .store import Store, created_dirs, last_writers, utc_now
from .txn import backup_name, run_transaction
from .workspace import Key, Workspace, file_op, placed_diff, unified_diff

if TYPE_CHECKING:  # revert and gitcommit are imported only by the applies that use them
    from . import gitcommit, revert
    from .hunks import FileChange

Sources = Dict[str, Tuple[Optional["revert.Source"], Dict[str, Any]]]  # a revert fix's commit


@dataclass
class FixChange:
    """One fix's change (apply and rollback), computed in memory before anything is written."""

    spec: FixSpec
    preconditions: List[Dict[str, Any]]
    keys: List[Key] = field(default_factory=list)
    before: Dict[Key, Tuple[Optional[bytes], Optional[int]]] = field(default_factory=dict)
    after: Dict[Key, Tuple[Optional[bytes], Optional[int]]] = field(default_factory=dict)
    placements: Dict[Key, List[Placement]] = field(default_factory=dict)
    changes: Dict[Key, List[FileChange]] = field(default_factory=dict)  # FILE records applied
    verification: List[Dict[str, Any]] = field(default_factory=list)
    created_dirs: List[List[str]] = field(default_factory=list)  # [root, dir relative to it]
    source: Optional[revert.Source] = None  # the commit a revert fix undoes (git roots)
    commits: List[Dict[str, str]] = field(default_factory=list)  # apply --commit: {root, sha}

    def snapshot(self, ws: Workspace, side: Dict[Key, Tuple[Optional[bytes], Optional[int]]]) -> None:
        for key in self.keys:
            e = ws.entry(*key)
            side[key] = (e.current, e.mode)


def fix_result(fc: FixChange, outcome: str, release: bool = False) -> Dict[str, Any]:
    """The fix's entry of the engine result (docs/design.md, "Engine result"); ``release``: the
    result is the last use of the fix's bytes, let go file by file as its diff is made."""
    files = []
    for key in fc.keys:
        before, after = fc.before[key][0], fc.after[key][0]
        if release:
            fc.before[key], fc.after[key] = (None, fc.before[key][1]), (None, fc.after[key][1])
        changes = fc.changes.get(key, [])
        one = changes[0] if len(changes) == 1 else None  # one patch: its hunks, as placed
        if one is not None and one.op == file_op(before, after) and (
                one.op == "modify" or len(one.hunks) == 1):
            diff = placed_diff(key[1], one.hunks, [p.line for p in fc.placements[key]], one.op)
        else:  # merged from several patches, reverted, rolled back
            diff = unified_diff(key[1], before, after)
        files.append({"root": key[0], "path": key[1], "op": file_op(before, after),
                      "before_sha256": sha256_bytes(before), "after_sha256": sha256_bytes(after),
                      "hunks": [p.as_dict() for p in fc.placements.get(key, [])], "diff": diff})
    out = {"name": fc.spec.name, "version": fc.spec.version, "outcome": outcome, "files": files,
           "preconditions": fc.preconditions, "verification": fc.verification}
    if fc.source is not None:
        out["revert"] = {"root": fc.source.root, "commit": fc.source.sha,
                         "title": fc.source.title, "found_by": fc.source.found_by}
    if fc.commits:
        out["commits"] = list(fc.commits)
    return out


def touched(spec: FixSpec, sources: Sources) -> List[Tuple[str, str, str]]:
    """(root, path, first op) of each file the fix changes: a revert's from its commit on a git
    root, else from the FILE records."""
    if spec.name in sources:
        src, check = sources[spec.name]
        if src is not None:
            return [(src.root, f.path, "revert") for f in src.files]
        if not check["ok"]:
            return []
    out: Dict[Key, str] = {}
    for change in spec.files:
        out.setdefault((change.root, change.path), change.op)
    return [(k[0], k[1], op) for k, op in out.items()]


def apply(req: Request, store: Store) -> List[Dict[str, Any]]:
    state, lost, lost_records = _drop_lost(req, store.read_state())
    recorded = {f["name"]: f for f in state.get("fixes", [])}
    outcomes: Dict[str, Dict[str, Any]] = {}
    todo: List[FixSpec] = []
    upgrades: Dict[str, Dict[str, Any]] = {}  # name -> the record of the version applied now
    for spec in req.fixes:
        rec = recorded.get(spec.name)
        if spec.not_needed and (rec is None or spec.name in lost_records):
            # upstream holds the change in this release: nothing to write; a record the
            # upgrade made lost is dropped (docs/manifest.md, "Upstream since R")
            outcomes[spec.name] = {"name": spec.name, "version": spec.version, "outcome": "not-needed",
                                   "detail": spec.not_needed, "files": [], "preconditions": [],
                                   "verification": []}
            if spec.name in lost_records:
                outcomes[spec.name]["lost"] = lost[spec.name]
        elif rec is None:
            todo.append(spec)
        elif int(rec.get("version", 0)) == spec.version:
            from .observe import drifted_files  # a recorded fix: do its files hold what it wrote?

            outcomes[spec.name] = {"name": spec.name, "version": spec.version, "outcome": "already-applied",
                                   "files": [], "preconditions": [], "verification": [],
                                   "drifted": drifted_files(req.roots, state, rec)}
        elif rec.get("commits"):
            raise VersionMismatch(
                "fix %s version %s is applied in %s with --commit, and this is version %d; roll "
                "it back first (patchkit rollback %s: a revert commit) and apply again, or keep "
                "the applied version"
                % (spec.name, rec.get("version"), req.state_root.path, spec.version, spec.name),
                fix=spec.name, applied_version=rec.get("version"), version=spec.version)
        else:  # an upgrade: the old version out and this one in, in one transaction
            upgrades[spec.name] = rec
            todo.append(spec)
    if not req.git and (req.commit or any(s.revert is not None for s in todo)):
        raise UsageError("%s needs git, and --no-git was given; drop --no-git, or apply the "
                         "other fixes without it" % ("--commit" if req.commit else "a revert fix (%s)"
                                                     % ", ".join(s.name for s in todo if s.revert)))
    check_patch_paths(req.roots, list(todo) + list(req.dependencies))
    if req.sync:
        todo = _sync_skips(req, todo, outcomes, set(upgrades))
    check_file_modes(todo)  # dependencies are looked for, never written
    ws = Workspace(req.roots)
    if upgrades:
        _take_out(req, store, state, ws, upgrades)
    left = _left_behind(store, ws, {n: r for n, r in lost_records.items() if n in {t.name for t in todo}})
    sources: Sources = {}
    if any(s.revert is not None for s in todo):
        from . import revert

        sources = {s.name: revert.resolve(s, req.roots) for s in todo if s.revert is not None}
    for spec in todo:
        named = (spec.revert or {}).get("fix")
        check = sources.get(spec.name, (None, {"ok": True}))[1]
        if not check["ok"] and named in recorded:
            check["detail"] += ("; fix %s is applied by patchkit here, not committed: roll it back "
                                "instead (patchkit rollback %s)" % (named, named))
    keys = [(root, path) for spec in todo for root, path, _op in touched(spec, sources)]
    git_changes = auto.git_changes(keys, req.roots, req.git)
    for key in keys:
        ws.entry(*key)
    # an upgraded fix's files start from its backups, vouched for when it was applied: no
    # git-clean check of the bytes being replaced (with --force, drift being discarded)
    taken_out = {(f["root"], f["path"])
                 for rec in (*upgrades.values(), *left.values()) for f in rec.get("files", [])}
    prepare = _Prepare(req, store, state, ws, sources, git_changes, taken_out)
    for name in lost:  # a lost fix required by another is not there: apply it again first
        prepare.recorded.pop(name, None)
    prepare.prepared.update(s.name for s in req.fixes if s.not_needed)  # satisfy requires
    prepared = prepare.changes(todo)
    if not req.dry_run and prepared:
        _write(req, store, state, ws, prepared, {**left, **upgrades})
    elif not req.dry_run and any(n in lost_records for n, o in outcomes.items()
                                 if o["outcome"] == "not-needed"):
        store.write_state(state)  # only lost records of not-needed fixes to drop
    ws.entries.clear()  # the bytes are written: each fix's result lets its own go (scale)
    for fc in prepared:
        old = upgrades.get(fc.spec.name)
        if old is None:
            outcomes[fc.spec.name] = fix_result(fc, "would-apply" if req.dry_run else "applied",
                                                release=True)
            if fc.spec.name in lost:  # the record of the lost application, replaced
                outcomes[fc.spec.name]["lost"] = lost[fc.spec.name]
        else:
            outcomes[fc.spec.name] = dict(fix_result(fc, "would-upgrade" if req.dry_run else "upgraded"),
                                          from_version=old.get("version"))
    return [outcomes[s.name] for s in req.fixes]


def _sync_skips(req: Request, todo: List[FixSpec], outcomes: Dict[str, Dict[str, Any]],
                upgrades: Set[str]) -> List[FixSpec]:
    """``patchkit sync``: of the fixes to write, leave out those ``status`` would call
    ``not-needed`` (a revert with nothing to revert) or ``present-unrecorded`` (the change is
    in the files already, put there by someone else), each with its outcome saying so."""
    from .observe import unrecorded

    ws, keep = Workspace(req.roots), []
    for spec in todo:
        seen = "" if spec.name in upgrades else unrecorded(ws, spec, req.roots)["state"]
        if seen in ("not-needed", "present-unrecorded"):
            outcomes[spec.name] = {
                "name": spec.name, "version": spec.version, "files": [], "preconditions": [],
                "verification": [], "outcome": seen,
                "detail": "nothing to revert on this target" if seen == "not-needed" else
                "the change is in the files already, not recorded by patchkit: see patchkit status"}
        else:
            keep.append(spec)
    return keep


def _drop_lost(req: Request, state: Dict[str, Any]
               ) -> Tuple[Dict[str, Any], Dict[str, str], Dict[str, Dict[str, Any]]]:
    """The state without the records of requested fixes that are ``lost`` (their installed
    package was reinstalled underneath them, status shows why), each to be applied fresh onto
    the new install, its record replaced when that apply commits; why each lost fix (of the
    request or not) is lost; and the records dropped."""
    from .observe import lost_fixes

    lost = {name: seen["detail"] for name, seen in lost_fixes(req.roots, state).items()}
    if not lost:
        return state, lost, {}
    names = {s.name for s in req.fixes}
    dropped = {f["name"]: f for f in state.get("fixes", []) if f["name"] in names and f["name"] in lost}
    return dict(state, fixes=[f for f in state.get("fixes", []) if f["name"] not in dropped]), lost, dropped


def _left_behind(store: Store, ws: Workspace, dropped: Dict[str, Dict[str, Any]]
                 ) -> Dict[str, Dict[str, Any]]:
    """Of each lost fix applied again, its files the reinstall left as the fix wrote them (a
    file it created: pip removes only what RECORD lists), taken back out in memory like an
    upgrade's, so the fresh apply writes them again instead of refusing a file that exists;
    returned as records restricted to those files."""
    from . import rollback

    left = {}
    for name, rec in dropped.items():
        kept = [f for f in rec.get("files", [])
                if sha256_bytes(ws.entry(f["root"], f["path"]).current) == f.get("after_sha256")]
        if kept:
            left[name] = dict(rec, files=kept)
            rollback.restore_in_memory(store, ws, left[name])
    return left


def _take_out(req: Request, store: Store, state: Dict[str, Any], ws: Workspace,
              upgrades: Dict[str, Dict[str, Any]]) -> None:
    """Roll each upgraded fix's applied version back in memory, so one transaction swaps the
    two versions; refused when its files drifted (unless ``force``) or a later fix, not
    upgraded with it, changed the same files."""
    from . import rollback

    rollback.refuse_later_writers(state, list(upgrades), "upgrade", "roll the later fix back first "
                                  "(patchkit rollback %s), then apply again")
    drift = []
    for name, rec in upgrades.items():
        for f in rec.get("files", []):
            have = sha256_bytes(ws.entry(f["root"], f["path"]).current)
            if have != f.get("after_sha256"):
                drift.append("%s:%s (fix %s v%s): sha256 now %s, recorded %s"
                             % (f["root"], f["path"], name, rec.get("version"), have,
                                f.get("after_sha256")))
    if drift and not req.force:
        raise DriftError(
            "%d file(s) changed since patchkit applied the version now there; upgrading would "
            "discard those changes (nothing was written):\n- %s\nInspect them; upgrade anyway "
            "with --force (the changes are lost), or restore the applied bytes first"
            % (len(drift), "\n- ".join(drift)), drifted=drift)
    for rec in upgrades.values():
        rollback.restore_in_memory(store, ws, rec)


class _Prepare:
    """Each fix of an apply, in request order: its preconditions checked, then its change
    computed on the workspace; every failed precondition is reported together."""

    def __init__(self, req: Request, store: Store, state: Dict[str, Any], ws: Workspace,
                 sources: Sources, git_changes: Dict[str, Any], vouched: Set[Key]) -> None:
        self.req, self.store, self.ws, self.sources = req, store, ws, sources
        self.git_changes = git_changes
        self.recorded = {f["name"]: f for f in state.get("fixes", [])}
        self.after_hashes = {key: {w["after_sha256"]} for key, w in last_writers(state).items()
                             if w["after_sha256"]}  # what patchkit last wrote to each file
        self.done: Set[Key] = set(vouched)  # files with no git-clean check (prepared already)
        self.prepared: Set[str] = set()
        self.releases: Dict[str, Any] = {}
        self.installs = record.installs(req.roots)  # installed roots: RECORD proves them pristine
        self.writable: Dict[str, Optional[str]] = {}  # each directory probed for writing
        self.failures: List[Dict[str, Any]] = []
        self.results: List[Dict[str, Any]] = []

    def changes(self, todo: List[FixSpec]) -> List[FixChange]:
        out = []
        for n, spec in enumerate(todo):
            first_op = {(r, p): op for r, p, op in touched(spec, self.sources)}
            fc = FixChange(spec, self.preconditions(spec, first_op, state_dir=n == 0),
                           keys=list(first_op), source=self.sources.get(spec.name, (None,))[0])
            self.results.append({"name": spec.name, "version": spec.version,
                                 "preconditions": fc.preconditions})
            failed = [dict(r, fix=spec.name) for r in fc.preconditions if not r["ok"]]
            if failed:
                self.failures.extend(failed)
                continue
            fc.snapshot(self.ws, fc.before)
            try:
                (self.place if fc.source is None else self.revert_commit)(fc)
            except ConflictError:
                self.refuse_failed()  # a refused precondition explains more than the conflict
                raise
            fc.snapshot(self.ws, fc.after)
            self.done.update(fc.keys)
            self.prepared.add(spec.name)
            out.append(fc)
        self.refuse_failed()
        return out

    def preconditions(self, spec: FixSpec, first_op: Dict[Key, str],
                      state_dir: bool) -> List[Dict[str, Any]]:
        """The automatic preconditions (docs/design.md), then the fix's own."""
        req, ws = self.req, self.ws
        pre: List[Dict[str, Any]] = []
        if spec.release is not None:
            pre.append(auto.release_check(spec, req.roots, self.releases, req.git))
        pre.extend(auto.requires_check(spec, self.recorded, self.prepared,
                                       {d.name: d for d in req.dependencies}, self.read_any))
        if spec.name in self.sources:
            pre.append(self.sources[spec.name][1])
        for key, op in first_op.items():
            missing = None if op == "revert" else auto.presence_check(ws.entry(*key), op)
            if missing:
                pre.append(missing)
            elif op == "modify" and not req.force:
                dup = auto.duplicate_check(ws.entry(*key), [c for c in spec.files
                                                            if (c.root, c.path) == key])
                if dup:
                    pre.append(dup)
        fresh = [ws.entry(*k) for k in first_op if k not in self.done]
        pre.extend(auto.git_clean_checks(fresh, req.roots, self.after_hashes, self.git_changes,
                                         strict=req.commit))
        pre.extend(record.record_checks(fresh, req.roots, self.installs, self.after_hashes))
        dirs = [(ws.entry(*k).where, os.path.dirname(ws.entry(*k).abs)) for k in first_op]
        if state_dir:
            dirs.append(("state", self.store.dir if self.store.exists() else self.store.root))
        pre.extend(auto.writable_checks(dirs, self.writable))
        ctx = CheckContext(spec.name, req.roots, req.python, spec.scripts, ws.read)
        pre.extend(run_check(check, ctx) for check in spec.preconditions)
        return pre

    def read_any(self, root: str, path: str) -> Optional[bytes]:
        """A dependency may touch a root this target lacks: its files are simply absent."""
        return self.ws.read(root, path) if root in {r.name for r in self.req.roots} else None

    def place(self, fc: FixChange) -> None:
        for change in fc.spec.files:
            key = (change.root, change.path)
            e = self.ws.entry(*key)
            new, placed = apply_change(None if e.current is None else decode(e.current), change)
            e.current = None if new is None else encode(new)
            if new is None or change.mode is not None:
                e.mode = None if new is None else change.mode
            elif e.mode is None:
                e.mode = 0o644
            fc.placements.setdefault(key, []).extend(placed)
            fc.changes.setdefault(key, []).append(change)

    def revert_commit(self, fc: FixChange) -> None:
        from . import revert

        source = fc.source
        assert source is not None
        kept: List[str] = []
        for f in source.files:
            e = self.ws.entry(source.root, f.path)
            e.current = revert.revert_file(fc.spec.name, source, f, e.current)
            e.mode = None if e.current is None else (0o644 if e.mode is None else e.mode)
            kept.extend(c for c in source.checkout.commits_touching(source.sha, f.repo_path) if c not in kept)
        if kept:  # told by the fix's git-revert precondition
            check = self.sources[fc.spec.name][1]
            check["detail"] += "; later commits to its files kept: %s" % "; ".join(kept)

    def refuse_failed(self) -> None:
        if not self.failures:
            return
        if any(f["kind"] == "writable" for f in self.failures):
            raise auto.permission_denied(self.failures, self.results, self.writable, self.req.roots)
        cls = (TargetFileMissing if any(f["kind"] == "file-present" for f in self.failures)
               else PreconditionFailed)
        raise cls("%d precondition(s) failed; nothing was written:\n%s"
                  % (len(self.failures), failure_lines(self.failures)),
                  failures=self.failures, fixes=self.results)


def _write(req: Request, store: Store, state: Dict[str, Any], ws: Workspace,
           prepared: List[FixChange], upgrades: Dict[str, Dict[str, Any]]) -> None:
    """The transaction of an apply; ``upgrades``: the records of the versions taken out."""
    claimed: Set[Tuple[str, str]] = set()
    for fc in prepared:
        for key in fc.keys:
            if fc.after[key][0] is not None and fc.before[key][0] is None:
                for d in missing_dirs(ws.entry(*key).abs):
                    pair = (key[0], req.roots.relative(key[0], d))  # root-relative: trees move
                    if pair not in claimed:
                        claimed.add(pair)
                        fc.created_dirs.append(list(pair))
    backups = {fc.spec.name: [(k[0], k[1], cast(bytes, fc.before[k][0])) for k in fc.keys
                              if fc.before[k][0] is not None] for fc in prepared}

    def verify() -> None:
        failures: List[Dict[str, Any]] = []
        for fc in prepared:
            ctx = CheckContext(fc.spec.name, req.roots, req.python, fc.spec.scripts, req.roots.read)
            fc.verification = [run_check(check, ctx) for check in fc.spec.verification]
            failures.extend(dict(r, fix=fc.spec.name) for r in fc.verification if not r["ok"])
        if failures:
            raise VerificationFailed(
                "%d verification check(s) failed after writing; every file was restored:\n%s"
                % (len(failures), failure_lines(failures)), failures=failures,
                fixes=[{"name": fc.spec.name, "version": fc.spec.version,
                        "verification": fc.verification} for fc in prepared])

    cos, items, entries = _commit_items(req, prepared) if req.commit else ({}, [], [])

    def commit(txn: str) -> Dict[str, Any]:
        if entries:
            from . import gitcommit

            made = gitcommit.make(cos, items, entries, txn)
            for fc in prepared:
                fc.commits = made.get(fc.spec.name, [])
        new_state = dict(state)
        new_state["fixes"] = [f for f in state.get("fixes", []) if f["name"] not in upgrades] + [
            _record(req, fc, txn) for fc in prepared]
        return new_state

    old_dirs = {name: created_dirs(rec, req.roots) for name, rec in upgrades.items()}
    for fc in prepared:  # a directory the old version made is the new one's to remove, if empty
        fc.created_dirs.extend([list(d) for d in old_dirs.get(fc.spec.name, [])
                                if list(d) not in fc.created_dirs])
    run_transaction(store, req.roots, "apply", [fc.spec.name for fc in prepared], ws.changed(), backups,
                    purge=any(fc.spec.purge_pycache for fc in prepared), verify=verify,
                    commit=commit, versions={fc.spec.name: fc.spec.version for fc in prepared},
                    remove_dirs=[d for dirs in old_dirs.values() for d in dirs],
                    journal_extra=dict({"git_commits": entries} if entries else {}, python=req.python))


def _commit_items(req: Request, prepared: List[FixChange]):
    """apply --commit: one commit per fix and git root, holding that fix's bytes."""
    from . import gitcommit

    names = sorted({k[0] for fc in prepared for k in fc.keys})
    cos = gitcommit.checkouts(req.roots, names)
    items: List[gitcommit.Item] = []
    for fc in prepared:
        spec = fc.spec
        extra = ["This reverts commit %s." % fc.source.sha, ""] if fc.source else []
        text = gitcommit.message(spec.title, spec.rationale, spec.name, spec.version, spec.patches,
                                 extra)
        for name in cos:  # the git roots among names, in that order
            root = req.roots.get(name)
            changes = tuple(gitcommit.Change(cos[name].rel(root.mapped(k[1])), *fc.after[k])
                            for k in fc.keys if k[0] == name and fc.after[k] != fc.before[k])
            if changes:
                items.append(gitcommit.Item(spec.name, name, text, changes))
    return cos, items, gitcommit.journal_entries(cos, items)


def _record(req: Request, fc: FixChange, txn: str) -> Dict[str, Any]:
    """The fix's entry of state.json (docs/state.md)."""
    spec = fc.spec
    files = []
    kept = 0  # numbered as _write hands them to run_transaction: the files with before-bytes
    for key in fc.keys:
        (before, mode_before), (after, mode_after) = fc.before[key], fc.after[key]
        files.append({"root": key[0], "path": key[1], "op": file_op(before, after),
                      "before_sha256": sha256_bytes(before), "after_sha256": sha256_bytes(after),
                      "mode_before": mode_before, "mode": mode_after,
                      "backup": backup_name(spec.name, kept) if before is not None else None})
        kept += before is not None
    return {"name": spec.name, "version": spec.version, "title": spec.title,
            "requires": list(spec.requires), "release": spec.release, "applied_at": utc_now(),
            "txn": txn, "patches": [dict(p) for p in spec.patches], "files": files,
            "created_dirs": fc.created_dirs, "verification": fc.verification,
            "backup_dir": ".patchkit/backups/%s" % spec.name,
            "rollback": {"strategy": spec.strategy}, "purge_pycache": spec.purge_pycache,
            "commits": list(fc.commits),
            "revert": ({"root": fc.source.root, "commit": fc.source.sha}
                       if fc.source is not None else None),
            "roots": {r.name: r.path for r in req.roots},
            "installed": _installed(req, fc)}


def _installed(req: Request, fc: FixChange) -> Optional[Dict[str, str]]:
    """The wheel install the fix's files were in (``status`` names it once it is lost)."""
    for name, found in record.installs(req.roots).items():
        if any(k[0] == name for k in fc.keys):
            return {"root": name, "dist": record.DIST, "version": found.version}
    return None
