"""The apply op: plan every fix in memory, check every precondition, then one transaction."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from ..errors import (ConflictError, DriftError, PreconditionFailed, TargetFileMissing,
                      VerificationFailed, VersionMismatch)
from . import auto
from .checks import CheckContext, SyntaxCache, failure_lines, run_check
from .fsops import read_bytes
from .hunks import FileChange, Placement, apply_change, decode, encode, sha256_bytes
from .paths import Roots
from .request import FixSpec, Request, check_file_modes, check_patch_paths
from .store import Store, created_dirs, last_writers, utc_now
from .txn import FileWrite, backup_name, missing_dirs, run_transaction
from .workspace import Key, Workspace, placed_diff, unified_diff

if TYPE_CHECKING:  # revert and gitcommit are imported only by the applies that use them
    from . import gitcommit, revert


@dataclass
class FixPlan:
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


def file_op(before: Optional[bytes], after: Optional[bytes]) -> str:
    if before is None:
        return "create"
    return "delete" if after is None else "modify"


def fix_result(plan: FixPlan, outcome: str) -> Dict[str, Any]:
    files = []
    for key in plan.keys:
        before, after = plan.before[key][0], plan.after[key][0]
        changes = plan.changes.get(key, [])
        if len(changes) == 1 and changes[0].op == "modify" and None not in (before, after):
            diff = placed_diff(key[1], changes[0].hunks, [p.line for p in plan.placements[key]])
        else:  # merged from several patches, reverted, rolled back, created or deleted
            diff = unified_diff(key[1], before, after)
        files.append({"root": key[0], "path": key[1], "op": file_op(before, after),
                      "before_sha256": sha256_bytes(before), "after_sha256": sha256_bytes(after),
                      "hunks": [p.to_dict() for p in plan.placements.get(key, [])],
                      "diff": diff})
    out = {"name": plan.spec.name, "version": plan.spec.version, "outcome": outcome, "files": files,
           "preconditions": plan.preconditions, "verification": plan.verification}
    if plan.source is not None:
        out["revert"] = {"root": plan.source.root, "commit": plan.source.sha,
                         "title": plan.source.title, "found_by": plan.source.found_by}
    if plan.commits:
        out["commits"] = list(plan.commits)
    return out


Sources = Dict[str, Tuple[Optional["revert.Source"], Dict[str, Any]]]


def touched(spec: FixSpec, sources: Sources) -> List[Tuple[str, str, str]]:
    """(root, path, first op) of each file the fix changes: a revert's from its commit on a git
    root, else the request's FILE records (for a revert: the fallback series)."""
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


def raise_preconditions(failures: List[Dict[str, Any]], results: List[Dict[str, Any]],
                        probed: Dict[str, Optional[str]], roots: Roots) -> None:
    """Raise the error of a refused plan; ``probed`` is each directory probed for writing."""
    if any(f["kind"] == "writable" for f in failures):
        raise auto.permission_denied(failures, results, probed, roots)
    cls = TargetFileMissing if any(f["kind"] == "file-present" for f in failures) else PreconditionFailed
    raise cls("%d precondition(s) failed; nothing was written:\n%s"
              % (len(failures), failure_lines(failures)), failures=failures, fixes=results)


def recorded_after_hashes(state: Dict[str, Any]) -> Dict[Key, Set[str]]:
    """The bytes patchkit last wrote to each recorded file (by the last fix touching it)."""
    return {key: {w["after_sha256"]} for key, w in last_writers(state).items() if w["after_sha256"]}


def apply(req: Request, store: Store, syntax: Optional[SyntaxCache] = None) -> List[Dict[str, Any]]:
    """``syntax``: python-syntax results known by content (a local target's user cache)."""
    state = store.read_state()
    recorded = {f["name"]: f for f in state.get("fixes", [])}
    outcomes: Dict[str, Dict[str, Any]] = {}
    todo: List[FixSpec] = []
    upgrades: Dict[str, Dict[str, Any]] = {}  # name -> the record of the version applied now
    for spec in req.fixes:
        rec = recorded.get(spec.name)
        if rec is None:
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
    check_patch_paths(req.roots, list(todo) + list(req.dependencies))
    check_file_modes(todo)  # dependencies are looked for, never written
    ws = Workspace(req.roots)
    if upgrades:
        _take_out(req, store, state, ws, upgrades)
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
    changes = auto.git_changes(keys, req.roots)  # git runs while the files are read
    for key in keys:
        ws.entry(*key)
    # an upgraded fix's files start from its backups, vouched for when it was applied: no
    # git-clean check of the bytes being replaced (with --force, drift being discarded)
    taken_out = {(f["root"], f["path"]) for rec in upgrades.values() for f in rec.get("files", [])}
    plans = _plan(req, store, state, ws, todo, sources, changes(), syntax, taken_out)
    if not req.dry_run and plans:
        _write(req, store, state, ws, plans, syntax, upgrades)
    for plan in plans:
        old = upgrades.get(plan.spec.name)
        if old is None:
            outcomes[plan.spec.name] = fix_result(plan, "would-apply" if req.dry_run else "applied")
        else:
            outcomes[plan.spec.name] = dict(
                fix_result(plan, "would-upgrade" if req.dry_run else "upgraded"),
                from_version=old.get("version"))
    return [outcomes[s.name] for s in req.fixes]


def _take_out(req: Request, store: Store, state: Dict[str, Any], ws: Workspace,
              upgrades: Dict[str, Dict[str, Any]]) -> None:
    """Roll each upgraded fix's applied version back in memory: its files get the bytes they
    had before it (from its backups), so the new version is planned on those, its backups
    keep them, and one transaction takes the old version out and puts the new one in.

    Refused, before anything is written, when the old version's files drifted (unless
    ``force``: the changes are lost as with ``rollback --force``) or a fix applied after it,
    not upgraded with it, changed the same files (its change would be lost)."""
    from . import rollback

    later = [b for b in rollback.later_writers(state, list(upgrades))]
    if later:
        raise PreconditionFailed(
            "cannot upgrade: %s; roll the later fix back first (patchkit rollback %s), then apply "
            "again" % ("; ".join("fix %s was applied after %s and also changed %s"
                                 % (b["changed_after_by"], b["fix"], ", ".join(b["files"]))
                                 for b in later),
                       " ".join(sorted({b["changed_after_by"] for b in later}))), blockers=later)
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


def _plan(req: Request, store: Store, state: Dict[str, Any], ws: Workspace,
          todo: List[FixSpec], sources: Sources, changes: Dict[str, Any],
          syntax: Optional[SyntaxCache] = None,
          vouched: Optional[Set[Key]] = None) -> List[FixPlan]:
    """``vouched``: files whose git-clean check is not needed (see ``apply``)."""
    recorded = {f["name"]: f for f in state.get("fixes", [])}
    planned: Set[str] = set()
    dependencies = {d.name: d for d in req.dependencies}
    root_names = {r.name for r in req.roots}

    def read_any(root: str, path: str) -> Optional[bytes]:
        """A dependency may touch a root this target lacks: its files are simply absent."""
        return ws.read(root, path) if root in root_names else None

    after_hashes = recorded_after_hashes(state)
    release_cache: Dict[str, Any] = {}
    writable: Dict[str, Optional[str]] = {}
    done: Set[Key] = set(vouched or ())  # files with no git-clean check (planned already)
    failures: List[Dict[str, Any]] = []
    results: List[Dict[str, Any]] = []
    plans: List[FixPlan] = []
    for n, spec in enumerate(todo):
        pre: List[Dict[str, Any]] = []
        if spec.release is not None:
            pre.append(auto.release_check(spec, req.roots, release_cache))
        pre.extend(auto.requires_check(spec, recorded, planned, dependencies, read_any))
        source = sources[spec.name][0] if spec.name in sources else None
        if spec.name in sources:
            pre.append(sources[spec.name][1])
        first_op = {(r, p): op for r, p, op in touched(spec, sources)}
        keys = list(first_op)
        for key in keys:
            missing = None if first_op[key] == "revert" else auto.presence_check(ws.entry(*key), first_op[key])
            if missing:
                pre.append(missing)
        fresh = [ws.entry(*k) for k in keys if k not in done]
        pre.extend(auto.git_clean_checks(fresh, req.roots, after_hashes, changes, strict=req.commit))
        dirs = [(ws.entry(*k).where, os.path.dirname(ws.entry(*k).abs)) for k in keys]
        if n == 0:
            dirs.append(("state", store.dir if store.exists() else store.root))
        pre.extend(auto.writable_checks(dirs, writable))
        ctx = CheckContext(spec.name, req.roots, req.python, spec.scripts, ws.read, syntax)
        pre.extend(run_check(check, ctx) for check in spec.preconditions)
        plan = FixPlan(spec, pre, keys=keys, source=source)
        failed = [dict(r, fix=spec.name) for r in pre if not r["ok"]]
        results.append({"name": spec.name, "version": spec.version, "preconditions": pre})
        if failed:
            failures.extend(failed)
            continue
        for key in keys:
            e = ws.entry(*key)
            plan.before[key] = (e.current, e.mode)
        try:
            if source is not None:
                _revert(plan, source, ws)
        except ConflictError:
            if failures:
                raise_preconditions(failures, results, writable, req.roots)
            raise
        for change in spec.files if source is None else ():
            e = ws.entry(change.root, change.path)
            try:
                new, placed = apply_change(None if e.current is None else decode(e.current), change)
            except ConflictError:
                if failures:
                    raise_preconditions(failures, results, writable, req.roots)
                raise
            e.current = None if new is None else encode(new)
            new = e.current
            if new is None:
                e.mode = None
            elif change.mode is not None:
                e.mode = change.mode
            elif e.mode is None:
                e.mode = 0o644
            plan.placements.setdefault((change.root, change.path), []).extend(placed)
            plan.changes.setdefault((change.root, change.path), []).append(change)
        for k in keys:
            e = ws.entry(*k)
            plan.after[k] = (e.current, e.mode)
        done.update(keys)
        planned.add(spec.name)
        plans.append(plan)
    if failures:
        raise_preconditions(failures, results, writable, req.roots)
    return plans


def _revert(plan: FixPlan, source: revert.Source, ws: Workspace) -> None:
    """Undo the commit's change in memory, file by file; say which later commits were kept."""
    from . import revert

    kept: List[str] = []
    for f in source.files:
        e = ws.entry(source.root, f.path)
        new = revert.revert_file(plan.spec.name, source, f, e.current)
        e.current = new
        if new is None:
            e.mode = None
        elif e.mode is None:
            e.mode = 0o644
        kept.extend(c for c in source.checkout.commits_touching(source.sha, f.repo_path) if c not in kept)
    if kept:
        check = plan.preconditions[-1] if plan.preconditions else None
        for res in plan.preconditions:
            if res["kind"] == "git-revert":
                check = res
        if check is not None:
            check["detail"] += "; later commits to its files kept: %s" % "; ".join(kept)


def _write(req: Request, store: Store, state: Dict[str, Any], ws: Workspace, plans: List[FixPlan],
           syntax: Optional[SyntaxCache] = None,
           upgrades: Optional[Dict[str, Dict[str, Any]]] = None) -> None:
    """``upgrades``: the records of the versions taken out (``_take_out``)."""
    upgrades = upgrades or {}
    claimed: Set[Tuple[str, str]] = set()
    for plan in plans:
        for key in plan.keys:
            if plan.after[key][0] is not None and plan.before[key][0] is None:
                for d in missing_dirs(ws.entry(*key).abs):
                    pair = (key[0], req.roots.relative(key[0], d))  # root-relative: trees move
                    if pair not in claimed:
                        claimed.add(pair)
                        plan.created_dirs.append(list(pair))
    writes = [FileWrite(e.root, e.path, e.abs, e.original, e.current, e.original_mode, e.mode, e.owner)
              for e in ws.changed()]
    backups = {p.spec.name: [(k[0], k[1], p.before[k][0]) for k in p.keys if p.before[k][0] is not None]
               for p in plans}

    def disk(root: str, path: str) -> Optional[bytes]:
        return read_bytes(req.roots.resolve(root, path))

    def verify() -> None:
        failures = []
        for plan in plans:
            ctx = CheckContext(plan.spec.name, req.roots, req.python, plan.spec.scripts, disk, syntax)
            plan.verification = [run_check(check, ctx) for check in plan.spec.verification]
            failures.extend(dict(r, fix=plan.spec.name) for r in plan.verification if not r["ok"])
        if failures:
            raise VerificationFailed(
                "%d verification check(s) failed after writing; every file was restored:\n%s"
                % (len(failures), failure_lines(failures)), failures=failures,
                fixes=[{"name": p.spec.name, "version": p.spec.version, "verification": p.verification}
                       for p in plans])

    cos, items, entries = _commit_items(req, plans) if req.commit else ({}, [], [])

    def commit(txn: str) -> Dict[str, Any]:
        if entries:
            from . import gitcommit

            made = gitcommit.make(cos, items, entries, txn)
            for plan in plans:
                plan.commits = made.get(plan.spec.name, [])
        new_state = dict(state)
        new_state["fixes"] = [f for f in state.get("fixes", []) if f["name"] not in upgrades] + [
            _record(req, p, txn) for p in plans]
        return new_state

    old_dirs = {name: created_dirs(rec, req.roots) for name, rec in upgrades.items()}
    for plan in plans:  # a directory the old version made is the new one's to remove, if empty
        plan.created_dirs.extend([list(d) for d in old_dirs.get(plan.spec.name, [])
                                  if list(d) not in plan.created_dirs])
    run_transaction(store, req.roots, "apply", [p.spec.name for p in plans], writes, backups,
                    purge=any(p.spec.purge_pycache for p in plans), verify=verify, commit=commit,
                    versions={p.spec.name: p.spec.version for p in plans},
                    remove_dirs=[d for dirs in old_dirs.values() for d in dirs],
                    journal_extra={"git_commits": entries} if entries else None)


def _commit_items(req: Request, plans: List[FixPlan]):
    """apply --commit: one commit per fix and git root, holding that fix's bytes."""
    from . import gitcommit

    names = sorted({k[0] for p in plans for k in p.keys})
    cos = gitcommit.checkouts(req.roots, names)
    items: List[gitcommit.Item] = []
    for plan in plans:
        spec = plan.spec
        extra = ["This reverts commit %s." % plan.source.sha, ""] if plan.source else []
        text = gitcommit.message(spec.title, spec.rationale, spec.name, spec.version, spec.patches,
                                 extra)
        for name in names:
            if name not in cos:
                continue
            root = req.roots.get(name)
            changes = tuple(gitcommit.Change(cos[name].rel(root.mapped(k[1])), *plan.after[k])
                            for k in plan.keys if k[0] == name and plan.after[k] != plan.before[k])
            if changes:
                items.append(gitcommit.Item(spec.name, name, text, changes))
    return cos, items, gitcommit.journal_entries(cos, items)


def _record(req: Request, plan: FixPlan, txn: str) -> Dict[str, Any]:
    """The fix's entry of state.json."""
    spec = plan.spec
    files = []
    kept = 0  # numbered as _write hands them to run_transaction: the files with before-bytes
    for key in plan.keys:
        (before, mode_before), (after, mode_after) = plan.before[key], plan.after[key]
        files.append({"root": key[0], "path": key[1], "op": file_op(before, after),
                      "before_sha256": sha256_bytes(before), "after_sha256": sha256_bytes(after),
                      "mode_before": mode_before, "mode": mode_after,
                      "backup": backup_name(spec.name, kept) if before is not None else None})
        kept += before is not None
    return {"name": spec.name, "version": spec.version, "title": spec.title,
            "requires": list(spec.requires), "release": spec.release, "applied_at": utc_now(),
            "txn": txn, "patches": [dict(p) for p in spec.patches], "files": files,
            "created_dirs": plan.created_dirs, "verification": plan.verification,
            "backup_dir": ".patchkit/backups/%s" % spec.name,
            "rollback": {"strategy": spec.strategy}, "purge_pycache": spec.purge_pycache,
            "commits": list(plan.commits),
            "revert": ({"root": plan.source.root, "commit": plan.source.sha}
                       if plan.source is not None else None),
            "roots": {r.name: r.path for r in req.roots}}
