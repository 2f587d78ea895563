"""The rollback op: the apply transaction run in the other direction, drift refused unless
``force``. Originals come from the backups (strategy ``restore``), the reversed series
(``reverse``), or a revert of the commits ``apply --commit`` made."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, cast

from ..errors import (ConflictError, DriftError, PreconditionFailed, TargetError,
                      VersionMismatch)
from . import auto, gitcli, gitcommit, revert
from .apply import FixChange, fix_result
from .fsops import read_bytes
from .hunks import apply_change, decode, encode, sha256_bytes
from .request import Request, check_patch_paths
from .store import Store, created_dirs
from .txn import run_transaction
from .workspace import Workspace


def rollback(req: Request, store: Store) -> List[Dict[str, Any]]:
    state = store.read_state()
    recorded = {f["name"]: f for f in state.get("fixes", [])}
    asked = [s.name for s in req.fixes]
    # Convergent, as apply of an applied fix is: a fix with no record is already rolled back
    absent = {s.name: not_applied(s.name, s.version, req.state_root.path)
              for s in req.fixes if s.name not in recorded}
    if absent:
        req = dataclasses.replace(req, fixes=tuple(s for s in req.fixes if s.name in recorded))
        if not req.fixes:
            return [absent[n] for n in asked]
    done = _rollback(req, store, state, recorded)
    return [absent[n] if n in absent else done[n] for n in asked]


def not_applied(name: str, version: int, where: str) -> Dict[str, Any]:
    """The result entry of a fix rollback finds no record of: nothing to do."""
    return {"name": name, "version": version, "outcome": "not-applied", "files": [],
            "preconditions": [], "verification": [],
            "detail": "no record in %s/.patchkit/state.json: nothing to roll back" % where}


def _rollback(req: Request, store: Store, state: Dict[str, Any],
              recorded: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    names = [s.name for s in req.fixes]
    _refuse_blocked(state, names)
    check_patch_paths(req.roots, req.fixes)
    ws = Workspace(req.roots)
    from .observe import lost_fixes, reinstalled

    # a lost fix's reinstalled files hold the new install's bytes: they stay, not drift
    gone = {name: set(reinstalled(seen)) for name, seen in lost_fixes(req.roots, state, ws).items()}
    drift: List[Dict[str, Any]] = []
    prepared: List[FixChange] = []
    reverts: List[Tuple[FixChange, List[revert.Source]]] = []
    order = {f["name"]: i for i, f in enumerate(state.get("fixes", []))}
    # newest first: each fix then finds its files as it left them, once the later fixes of
    # this request that touched the same files are (in memory) rolled back
    for spec in sorted(req.fixes, key=lambda s: -order[s.name]):
        rec = recorded[spec.name]
        fc = FixChange(spec, [])
        sources = _committed(req, rec)
        git_roots = {src.root for src in sources}
        dirty = _uncommitted(req, rec, git_roots)
        for f in rec.get("files", []):
            key = (f["root"], f["path"])
            e = ws.entry(*key)
            fc.keys.append(key)
            fc.before[key] = (e.current, e.mode)
            have = sha256_bytes(e.current)
            # a committed file may have moved on with later commits (the revert keeps them);
            # only uncommitted changes to it are drift
            moved = key in dirty if key[0] in git_roots else have != f.get("after_sha256")
            moved = moved and key not in gone.get(spec.name, ())
            if moved:
                drift.append({"fix": spec.name, "root": key[0], "path": key[1],
                              "recorded_sha256": f.get("after_sha256"), "current_sha256": have})
        if sources:
            for src in sources:
                for rf in src.files:
                    e = ws.entry(src.root, rf.path)
                    if (src.root, rf.path) not in fc.keys:
                        fc.keys.append((src.root, rf.path))
                        fc.before[(src.root, rf.path)] = (e.current, e.mode)
                    e.current = revert.revert_file(spec.name, src, rf, e.current)
                    e.mode = None if e.current is None else (e.mode or 0o644)
            restore_in_memory(store, ws, dict(rec, files=[f for f in rec.get("files", [])
                                                 if f["root"] not in git_roots]))
            fc.source = sources[0]
            reverts.append((fc, sources))
        elif spec.name in gone:  # only the files the reinstall left as the fix wrote them
            restore_in_memory(store, ws, dict(rec, files=[
                f for f in rec.get("files", []) if (f["root"], f["path"]) not in gone[spec.name]]))
        elif spec.strategy == "reverse":
            if int(rec.get("version", 0)) != spec.version:
                raise VersionMismatch(
                    "fix %s version %s is applied but the catalog has version %d; reverse rollback "
                    "needs the applied series: use the restore strategy, or check out the catalog "
                    "version that was applied" % (spec.name, rec.get("version"), spec.version),
                    fix=spec.name)
            try:
                _reverse(ws, fc)
            except ConflictError:
                if drift and not req.force:
                    break
                raise
        else:
            restore_in_memory(store, ws, rec)
        fc.snapshot(ws, fc.after)
        prepared.append(fc)
    if drift and not req.force:
        raise DriftError(
            "%d file(s) changed since patchkit applied them; rolling back would discard those "
            "changes:\n%s\nInspect them; roll back anyway with --force (restores the originals and "
            "loses the changes), or restore the applied bytes first"
            % (len(drift), "\n".join("- %s:%s (fix %s): sha256 now %s, recorded %s"
                                     % (d["root"], d["path"], d["fix"], d["current_sha256"],
                                        d["recorded_sha256"]) for d in drift)), drifted=drift)
    dirs = [(e.where, os.path.dirname(e.abs)) for e in ws.changed()] + [("state", store.dir)]
    probed: Dict[str, Optional[str]] = {}
    checks = auto.writable_checks(dirs, probed)
    failed = [dict(r, fix=",".join(names)) for r in checks if not r["ok"]]
    if failed:
        raise auto.permission_denied(failed, [{"name": n, "version": recorded[n].get("version"),
                                       "preconditions": checks} for n in names],
                                     probed, req.roots)
    for fc in prepared:
        fc.preconditions = list(checks)
    if not req.dry_run:
        cos, items = _revert_items(req, recorded, reverts)
        entries = gitcommit.journal_entries(cos, items)

        def commit(txn: str) -> Dict[str, Any]:
            if entries:
                made = gitcommit.make(cos, items, entries, txn)
                for fc, _ in reverts:
                    fc.commits = made.get(fc.spec.name, [])
            return dict(state, fixes=[f for f in state.get("fixes", []) if f["name"] not in names])

        purge = any(spec.purge_pycache or recorded[spec.name].get("purge_pycache", True)
                    for spec in req.fixes)
        run_transaction(store, req.roots, "rollback", names, ws.changed(), {}, purge=purge,
                        verify=lambda: None, commit=commit,
                        versions={n: cast(int, recorded[n].get("version")) for n in names},
                        remove_dirs=[d for n in names for d in created_dirs(recorded[n], req.roots)],
                        journal_extra=dict({"git_commits": entries} if entries else {}, python=req.python))
    outcome = "would-roll-back" if req.dry_run else "rolled-back"
    return {fc.spec.name: dict(fix_result(fc, outcome), version=recorded[fc.spec.name].get("version"))
            for fc in prepared}


def _committed(req: Request, rec: Dict[str, Any]) -> List[revert.Source]:
    """The commits ``apply --commit`` made for a fix, as sources to revert (with ``force``, one
    no longer in HEAD's history is passed over: its backups are restored instead)."""
    commits = rec.get("commits") or []
    cos = gitcommit.checkouts(req.roots, [c["root"] for c in commits if c["root"] in
                                          {r.name for r in req.roots}])
    if not req.force:
        gitcommit.refuse_unrecorded(rec["name"], commits, cos)
    out = []
    for c in commits:
        co = cos.get(c["root"])
        if co is None or not co.is_ancestor(c["sha"]):
            continue
        commit = co.commits([c["sha"]])[0]
        root = req.roots.get(c["root"])
        files = tuple(revert.RevertFile(status if status in "AD" else "M", path,
                                        root.unmapped(path[len(co.prefix):]))
                      for status, path in commit.files if revert.within(path, [co.prefix]))
        out.append(revert.Source(c["root"], co, c["sha"], commit.parents[0], commit.title,
                                 "recorded by apply --commit", files))
    return out


def _uncommitted(req: Request, rec: Dict[str, Any], git_roots: Set[str]) -> Set[Tuple[str, str]]:
    """The fix's files in committed roots that have uncommitted changes (one git status each)."""
    out: Set[Tuple[str, str]] = set()
    for name in git_roots:
        root = req.roots.get(name)
        paths = {root.mapped(f["path"]): f["path"] for f in rec.get("files", []) if f["root"] == name}
        found = gitcli.changed_paths(root.path, list(paths))
        out.update((name, paths[rel]) for rel in found.changed if rel in paths)
    return out


def _revert_items(req: Request, recorded: Dict[str, Dict[str, Any]],
                  reverts: List[Tuple[FixChange, List[revert.Source]]]):
    """One revert commit per committed fix and root, like ``git revert --no-edit``."""
    cos = {src.root: src.checkout for _, sources in reverts for src in sources}
    items: List[gitcommit.Item] = []
    for fc, sources in reverts:
        rec = recorded[fc.spec.name]
        for src in sources:
            subject = src.title.split(" ", 1)[1] if " " in src.title else src.title
            text = gitcommit.message('Revert "%s"' % subject, "This reverts commit %s." % src.sha,
                                     rec["name"], int(rec.get("version") or 0),
                                     rec.get("patches") or [], ["Patchkit-Rollback: yes"])
            changes = tuple(gitcommit.Change(rf.repo_path, *fc.after[(src.root, rf.path)])
                            for rf in src.files)
            items.append(gitcommit.Item(rec["name"], src.root, text, changes))
    return cos, items


def _refuse_blocked(state: Dict[str, Any], names: List[str]) -> None:
    """Refuse to roll back a fix that a later applied fix, not rolled back with it, requires
    or changed the same files after."""
    blockers = [(other["name"], name) for name in names for other in state.get("fixes", [])
                if other["name"] not in names and name in (other.get("requires") or [])]
    if blockers:
        raise PreconditionFailed(
            "cannot roll back: %s; roll back the dependent fix first (patchkit rollback %s) or "
            "both together" % ("; ".join("applied fix %s requires %s" % b for b in blockers),
                               " ".join(sorted({b[0] for b in blockers}))),
            blockers=[{"fix": b[1], "required_by": b[0]} for b in blockers])
    refuse_later_writers(state, names, "roll back", "roll the later fix back first or together "
                         "with it (patchkit rollback %s)", also=names)


def refuse_later_writers(state: Dict[str, Any], names: List[str], action: str, remedy: str,
                         also: Sequence[str] = ()) -> None:
    """Refuse when a fix applied after one of ``names``, and not among them, changed the same
    files; ``remedy`` gets the fixes to roll back (the later ones, then ``also``)."""
    applied = list(state.get("fixes", []))
    later = []
    for i, rec in enumerate(applied):
        if rec["name"] not in names:
            continue
        mine = {"%s:%s" % (f["root"], f["path"]) for f in rec.get("files", [])}
        for other in applied[i + 1:]:
            shared = sorted(mine & {"%s:%s" % (f["root"], f["path"]) for f in other.get("files", [])})
            if shared and other["name"] not in names:
                later.append({"fix": rec["name"], "changed_after_by": other["name"], "files": shared})
    if later:
        raise PreconditionFailed("cannot %s: %s; %s" % (
            action, "; ".join("fix %s was applied after %s and also changed %s"
                              % (b["changed_after_by"], b["fix"], ", ".join(b["files"])) for b in later),
            remedy % " ".join(sorted({b["changed_after_by"] for b in later}) + list(also))),
            blockers=later)


def restore_in_memory(store: Store, ws: Workspace, rec: Dict[str, Any]) -> None:
    """Each of the fix's files, in ``ws``, back to its bytes and mode before the fix (backups)."""
    for f in rec.get("files", []):
        e = ws.entry(f["root"], f["path"])
        data: Optional[bytes] = None
        if f.get("before_sha256") is not None:
            data = read_bytes(store.path(f["backup"])) if f.get("backup") else None
            if data is None or sha256_bytes(data) != f["before_sha256"]:
                raise TargetError(
                    "fix %s: the backup of %s:%s (%s) is missing or damaged; roll back with the "
                    "reverse strategy or restore the file from git by hand"
                    % (rec["name"], f["root"], f["path"], store.path(f.get("backup") or "backups")),
                    fix=rec["name"], path=f["path"])
        e.current = data
        e.mode = f.get("mode_before") if data is not None else None


def _reverse(ws: Workspace, fc: FixChange) -> None:
    for change in reversed(fc.spec.files):
        e = ws.entry(change.root, change.path)
        new, placed = apply_change(None if e.current is None else decode(e.current), change.reversed())
        e.current = None if new is None else encode(new)
        e.mode = None if new is None else (0o644 if e.mode is None else e.mode)
        fc.placements.setdefault((change.root, change.path), []).extend(placed)
