"""The rollback op: the apply transaction run in the other direction, drift refused unless
``force``. Each fix's originals come from one strategy: its backups (``restore``), its series
reversed (``reverse``), a revert of the commits ``apply --commit`` made, or, for a fix a
reinstall made lost, its backups of only the files the reinstall left as the fix wrote them."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ..errors import ConflictError, DriftError, PreconditionFailed, TargetError, VersionMismatch
from . import auto, gitcli, gitcommit, revert
from .hunks import apply_change, decode, encode, of_fix
from .observe import chmods, mode_drift
from .paths import Roots
from .plan import FixChange, fix_result, refuse_later_writers, restore_in_memory
from .records import FixRecord, State
from .request import Request, check_patch_paths
from .store import Store
from .txn import Transaction
from .workspace import Key, Workspace

Recorded = Dict[str, FixRecord]


def rollback(req: Request, store: Store) -> List[Dict[str, Any]]:
    from .observe import take_renamed

    state, renamed = take_renamed(req, store.read_state())  # a fix renamed in the catalog
    if renamed and not req.dry_run:
        store.adopt_backups(renamed)
    recorded = state.by_name()
    asked = [s.name for s in req.fixes]
    # Convergent, as apply of an applied fix is: a fix with no record is already rolled back
    absent = {s.name: not_applied(s.name, s.version, req.state_root.path)
              for s in req.fixes if s.name not in recorded}
    if absent:
        req = dataclasses.replace(req, fixes=tuple(s for s in req.fixes if s.name in recorded))
        if not req.fixes:
            return [absent[n] for n in asked]
    try:
        done = _rollback(req, store, state, recorded)
    except BaseException:
        if renamed and not req.dry_run:
            store.unadopt(renamed)
        raise
    if renamed and not req.dry_run:
        store.drop_adopted(renamed)
    for now, was in renamed.items():
        if now in done:
            done[now].setdefault("detail", "recorded as %s, whose manifest the catalog no longer "
                                 "has, with this series (renamed in the catalog)" % was)
    return [absent[n] if n in absent else done[n] for n in asked]


def not_applied(name: str, version: int, where: str) -> Dict[str, Any]:
    """The result entry of a fix rollback finds no record of: nothing to do."""
    return {"name": name, "version": version, "outcome": "not-applied", "files": [],
            "preconditions": [], "verification": [],
            "detail": "no record in %s/.patchkit/state.json: nothing to roll back" % where}


def _rollback(req: Request, store: Store, state: State, recorded: Recorded) -> Dict[str, Dict[str, Any]]:
    names = [s.name for s in req.fixes]
    _refuse_blocked(state, names, req.roots)
    check_patch_paths(req.roots, req.fixes)
    ws = Workspace(req.roots)
    from .observe import moved_under, replaced_files

    # a lost fix's files hold the new install's or release's bytes: they stay, not drift
    seen_moved = moved_under(req.roots, state, ws, req.git)
    lost = {name: seen for name, seen in seen_moved.items() if seen["state"] == "lost"}
    gone = {name: set(replaced_files(seen)) for name, seen in lost.items()}
    lost_why = {name: "its checkout moved to another release" if seen.get("moved")
                else "its commit is not in the history of HEAD" if seen.get("commits_gone")
                else "its package was reinstalled" for name, seen in lost.items()}
    drift: List[Dict[str, Any]] = []
    prepared: List[FixChange] = []
    reverts: List[Tuple[FixChange, List[revert.Source]]] = []
    order = {name: i for i, name in enumerate(state.names())}
    # newest first: each fix then finds its files as it left them, once the later fixes of
    # this request that touched the same files are (in memory) rolled back
    for spec in sorted(req.fixes, key=lambda s: -order[s.name]):
        rec, fc = recorded[spec.name], FixChange(spec, [])
        _refuse_elsewhere(req, ws, rec)
        sources = _committed(req, rec, spec.name in lost)
        drifted = _take_stock(req, ws, fc, rec, sources, gone.get(spec.name, set()))
        if spec.not_needed and not drifted and spec.name not in gone and not req.force:
            raise PreconditionFailed(
                "fix %s is %s: its files hold the change as the release has it, and rolling it "
                "back would put the bytes from before it (from an older release) into them; "
                "patchkit sync (or patchkit apply %s) forgets its record, writing nothing; "
                "--force rolls it back anyway" % (spec.name, spec.not_needed, spec.name),
                fix=spec.name)
        held = (seen_moved.get(spec.name) or {}).get("held")
        if held and not drifted and not req.force:
            raise PreconditionFailed(
                "fix %s v%s was applied on sglang %s, and the tree moved to %s, whose own files "
                "hold its change as v%s wrote it: rolling it back would put the bytes of %s (its "
                "backups) into them. patchkit upstream check %s --release %s tells whether %s "
                "holds the change, and marks it so with --mark (or patchkit rebase %s --onto %s "
                "does); patchkit sync then forgets the record, writing nothing. --force rolls it "
                "back anyway"
                % (spec.name, rec.version, held["from"], held["to"], rec.version, held["from"],
                   spec.name, held["to"], held["to"], spec.name, held["to"]),
                fix=spec.name, held=held)
        drift.extend(drifted)
        strategy = _strategy(fc, rec, sources, spec.name in gone, bool(drifted) and req.force)
        try:
            strategy(store, ws, fc, rec, sources, gone.get(spec.name, set()))
        except ConflictError as exc:
            if strategy is _by_reverse and drift and not req.force:
                break
            raise of_fix(exc, spec.name) from None
        left = gone.get(spec.name, set())
        if left:  # the reinstall's files: not the rollback's to write, nor to report
            fc.keys = [k for k in fc.keys if k not in left]
            fc.before = {k: v for k, v in fc.before.items() if k not in left}
        fc.snapshot(ws, fc.after)
        prepared.append(fc)
        if sources:
            reverts.append((fc, sources))
    _refuse_drift(drift, req.force, req.roots)
    checks = _writable(req, store, ws, names, recorded)
    for fc in prepared:  # each fix lists the directories of its own files, and the state's
        own = {ws.entry(*k).where for k in fc.keys} | {"state"}
        fc.preconditions = [c for c in checks if c["where"] in own]
    if not req.dry_run:
        _write(req, store, state, ws, recorded, reverts)
    outcome = "would-roll-back" if req.dry_run else "rolled-back"
    out = {fc.spec.name: dict(fix_result(fc, outcome), version=recorded[fc.spec.name].version)
           for fc in prepared}
    for name, left in gone.items():
        if name in out:
            out[name]["detail"] = (
                "lost (%s): its record forgotten, the %d replaced file(s) left as they are%s"
                % (lost_why[name], len(left), "; the files the replacement left as it wrote "
                   "them restored" if out[name]["files"] else ""))
    return out


def _refuse_elsewhere(req: Request, ws: Workspace, rec: FixRecord) -> None:
    """A root given at another directory than the fix was applied with, none of its files
    there: the backups would be written into the wrong tree, so not even --force does."""
    from .observe import root_elsewhere

    missing = {f.key for f in rec.files if ws.entry(*f.key).current is None}
    why = root_elsewhere(req.roots, rec, missing) if missing else None
    if why:
        raise TargetError("refusing to roll back %s: %s (--force does not write its backups "
                          "into another tree)" % (rec.name, why), fix=rec.name)


def _take_stock(req: Request, ws: Workspace, fc: FixChange, rec: FixRecord,
                sources: List[revert.Source], gone: Set[Key]) -> List[Dict[str, Any]]:
    """Each recorded file as it is now (the fix's ``before``); those that drifted: changed
    since the fix wrote them (a committed file, only by uncommitted changes; a reinstalled one
    of a lost fix never)."""
    git_roots = {src.root for src in sources}
    dirty = _uncommitted(req, rec, git_roots)
    drift = []
    for f in rec.files:
        e = ws.entry(*f.key)
        fc.keys.append(f.key)
        fc.before[f.key] = (e.current, e.mode)
        have = e.sha256(e.current)
        # a committed file may have moved on with later commits (the revert keeps them)
        chmodded = mode_drift(f, e.mode) if e.current is not None else {}
        moved = f.key in dirty if f.root in git_roots else have != f.after_sha256 or bool(chmodded)
        if moved and f.key not in gone:
            drift.append(ws.roots.file(f.root, f.path, fix=rec.name, recorded_sha256=f.after_sha256,
                                       current_sha256=have, **chmodded))
    return drift


Strategy = Callable[[Store, Workspace, FixChange, FixRecord, List[revert.Source], Set[Key]], None]


def _strategy(fc: FixChange, rec: FixRecord, sources: List[revert.Source], lost: bool,
              discard: bool) -> Strategy:
    """How the fix's files get their bytes before it back: the recorded commits reverted, a
    lost fix's remaining backups, its series reversed, or its backups. ``discard``: its files
    drifted and ``--force`` discards the edits, so its backups, whatever its strategy (a
    series reversed would keep an edit, or not apply over one)."""
    if sources:
        return _by_revert
    if lost:
        return _lost
    return _by_reverse if fc.spec.strategy == "reverse" and not discard else _by_restore


def _by_revert(store: Store, ws: Workspace, fc: FixChange, rec: FixRecord,
               sources: List[revert.Source], gone: Set[Key]) -> None:
    """Revert the commits ``apply --commit`` made (later commits to the files are kept); the
    fix's files in other roots come from its backups."""
    for src in sources:
        for rf in src.files:
            key = (src.root, rf.path)
            e = ws.entry(*key)
            if key not in fc.keys:
                fc.keys.append(key)
                fc.before[key] = (e.current, e.mode)
            e.current = revert.revert_file(fc.spec.name, src, rf, e.current)
            e.mode = None if e.current is None else (e.mode or 0o644)
    git_roots = {src.root for src in sources}
    restore_in_memory(store, ws, rec.restricted([f for f in rec.files if f.root not in git_roots]))
    fc.source = sources[0]


def _lost(store: Store, ws: Workspace, fc: FixChange, rec: FixRecord,
          sources: List[revert.Source], gone: Set[Key]) -> None:
    """A lost fix: only the files the reinstall left as the fix wrote them, from its backups."""
    restore_in_memory(store, ws, rec.restricted([f for f in rec.files if f.key not in gone]))


def _by_restore(store: Store, ws: Workspace, fc: FixChange, rec: FixRecord,
                sources: List[revert.Source], gone: Set[Key]) -> None:
    """Every file of the fix from its backups."""
    restore_in_memory(store, ws, rec)


def _by_reverse(store: Store, ws: Workspace, fc: FixChange, rec: FixRecord,
                sources: List[revert.Source], gone: Set[Key]) -> None:
    """The fix's series reversed, last change first (the applied version's series only)."""
    spec = fc.spec
    if int(rec.version or 0) != spec.version:
        raise VersionMismatch(
            "fix %s version %s is applied but the catalog has version %d; reverse rollback "
            "needs the applied series: use the restore strategy, or check out the catalog "
            "version that was applied" % (spec.name, rec.version, spec.version), fix=spec.name)
    for change in reversed(spec.files):
        e = ws.entry(change.root, change.path)
        new, placed = apply_change(None if e.current is None else decode(e.current), change.reversed())
        e.current = None if new is None else encode(new)
        e.mode = None if new is None else (0o644 if e.mode is None else e.mode)
        fc.placements.setdefault((change.root, change.path), []).extend(placed)


def _refuse_drift(drift: List[Dict[str, Any]], force: bool, roots: Roots) -> None:
    if drift and not force:
        modes_only = all(d.get("recorded_mode") and d["current_sha256"] == d["recorded_sha256"]
                         for d in drift)
        back = ("put the modes back first (%s)" % chmods(drift, roots) if modes_only
                else "restore the applied bytes first")
        raise DriftError(
            "%d file(s) changed since patchkit applied them; rolling back would discard those "
            "changes:\n%s\nInspect them; roll back anyway with --force (restores the originals and "
            "loses the changes), or %s"
            % (len(drift), "\n".join("- %s (fix %s): %s" % (d.get("where") or "%s:%s" % (
                d["root"], d["path"]), d["fix"], _changed(d)) for d in drift), back), drifted=drift)


def _changed(d: Dict[str, Any]) -> str:
    """How a drifted file differs from what the fix wrote: gone, its bytes, its mode."""
    if d["current_sha256"] is None:
        return "missing now (deleted since), recorded sha256 %s" % d["recorded_sha256"]
    mode = ("mode now %s, recorded %s" % (d["mode"], d["recorded_mode"])
            if d.get("recorded_mode") else "")
    if d["current_sha256"] != d["recorded_sha256"]:
        return "sha256 now %s, recorded %s%s" % (d["current_sha256"], d["recorded_sha256"],
                                                 "; " + mode if mode else "")
    return "%s (chmod since; its bytes are as written)" % mode


def _writable(req: Request, store: Store, ws: Workspace, names: List[str],
              recorded: Recorded) -> List[Dict[str, Any]]:
    """Every directory the rollback writes in, probed; refused together when one is not."""
    dirs = [(e.where, os.path.dirname(e.abs)) for e in ws.changed()] + [("state", store.dir)]
    probed: Dict[str, Optional[str]] = {}
    checks = auto.writable_checks(dirs, probed)
    failed = [dict(r, fix=",".join(names)) for r in checks if not r["ok"]]
    if failed:
        raise auto.permission_denied(failed, [{"name": n, "version": recorded[n].version,
                                               "preconditions": checks} for n in names],
                                     probed, req.roots)
    return checks


def _write(req: Request, store: Store, state: State, ws: Workspace, recorded: Recorded,
           reverts: List[Tuple[FixChange, List[revert.Source]]]) -> None:
    """The transaction of a rollback: the files, a revert commit per committed fix, the state
    without the fixes."""
    names = [s.name for s in req.fixes]
    cos, items = _revert_items(req, recorded, reverts)
    entries = gitcommit.journal_entries(cos, items)
    purge = any(spec.purge_pycache or recorded[spec.name].purge_pycache for spec in req.fixes)
    root_names = [r.name for r in req.roots]
    with Transaction(store, req.roots, "rollback", names, {n: recorded[n].version for n in names},
                     req.python, entries or None, before=state) as txn:
        txn.back_up(ws.changed(), {})
        txn.write(purge, remove_dirs=[d for n in names for d in recorded[n].created(root_names)])
        if entries:
            made = gitcommit.make(cos, items, entries, txn.id)
            for fc, _ in reverts:
                fc.commits = made.get(fc.spec.name, [])
        txn.commit(state.without(names))


def _committed(req: Request, rec: FixRecord, lost: bool = False) -> List[revert.Source]:
    """The commits ``apply --commit`` made for a fix, as sources to revert (with ``force``, or
    of a ``lost`` fix, whose files hold what HEAD or the new release has, one no longer in
    HEAD's history is passed over: nothing of it is there to revert)."""
    commits = rec.commits
    cos = gitcommit.checkouts(req.roots, [c["root"] for c in commits if c["root"] in
                                          {r.name for r in req.roots}])
    if not req.force and not lost:
        gitcommit.refuse_unrecorded(rec.name, commits, cos)
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


def _uncommitted(req: Request, rec: FixRecord, git_roots: Set[str]) -> Set[Key]:
    """The fix's files in committed roots that have uncommitted changes (one git status each)."""
    out: Set[Tuple[str, str]] = set()
    for name in git_roots:
        root = req.roots.get(name)
        paths = {root.mapped(f.path): f.path for f in rec.files if f.root == name}
        found = gitcli.changed_paths(root.path, list(paths))
        out.update((name, paths[rel]) for rel in found.changed if rel in paths)
    return out


def _revert_items(req: Request, recorded: Recorded,
                  reverts: List[Tuple[FixChange, List[revert.Source]]]):
    """One revert commit per committed fix and root, like ``git revert --no-edit``."""
    cos = {src.root: src.checkout for _, sources in reverts for src in sources}
    items: List[gitcommit.Item] = []
    for fc, sources in reverts:
        rec = recorded[fc.spec.name]
        for src in sources:
            subject = src.title.split(" ", 1)[1] if " " in src.title else src.title
            text = gitcommit.message('Revert "%s"' % subject, "This reverts commit %s." % src.sha,
                                     rec.name, int(rec.version or 0), rec.patches,
                                     ["Patchkit-Rollback: yes"])
            changes = tuple(gitcommit.Change(rf.repo_path, *fc.after[(src.root, rf.path)])
                            for rf in src.files)
            items.append(gitcommit.Item(rec.name, src.root, text, changes))
    return cos, items


def _refuse_blocked(state: State, names: List[str], roots: Roots) -> None:
    """Refuse to roll back a fix that a later applied fix, not rolled back with it, requires
    or changed the same files after."""
    blockers = [(other.name, name) for name in names for other in state.fixes
                if other.name not in names and name in other.requires]
    if blockers:
        raise PreconditionFailed(
            "cannot roll back: %s; roll back the dependent fix first (patchkit rollback %s) or "
            "both together" % ("; ".join("applied fix %s requires %s" % b for b in blockers),
                               " ".join(sorted({b[0] for b in blockers}))),
            blockers=[{"fix": b[1], "required_by": b[0]} for b in blockers])
    refuse_later_writers(state, names, "roll back", "roll the later fix back first or together "
                         "with it (patchkit rollback %s)", roots, also=names)
