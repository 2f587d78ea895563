"""The apply op: prepare every fix's change in memory, check every precondition, then write
them all in one transaction."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple, cast

from ..errors import (ConflictError, DriftError, PatchkitError, PreconditionFailed,
                      TargetFileMissing, UsageError, VerificationFailed, VersionMismatch)
from . import auto, record
from .checks import CONTENT_KINDS, PROCESS_KINDS, CheckContext, failure_lines, result, run_checks
from .fsops import missing_dirs, sha256_of
from .hunks import FileChange, apply_change, decode, encode, of_fix, without_stale_advice
from .plan import (FixChange, Sources, fix_result, holds_version, refuse_later_writers,
                   restore_in_memory, touched)
from .records import FileRecord, FixRecord, State, fix_backups
from .recovery import drop_undo_point
from .request import FixSpec, Request, check_file_modes, check_patch_paths
from .store import Store, utc_now
from .txn import Transaction
from .workspace import Entry, Key, Workspace, file_op

if TYPE_CHECKING:  # gitcommit is imported only by the applies that use it
    from . import gitcommit

def apply(req: Request, store: Store) -> List[Dict[str, Any]]:
    read = store.read_state()  # as it is: what an undo puts back (lost records included)
    state, lost, lost_records, owned = _drop_lost(req, read)
    state, taken = _drop_taken(req, state)
    from .observe import take_renamed  # a fix renamed in the catalog: its record taken over

    state, renamed = take_renamed(req, state)
    outcomes: Dict[str, Dict[str, Any]] = {}
    todo, upgrades = _sort_out(req, state, lost, lost_records, outcomes)
    for now, was in renamed.items():  # taken over: already applied, under the new name
        if outcomes.get(now, {}).get("outcome") == "already-applied":
            outcomes[now]["detail"] = (
                "recorded as %s, whose manifest the catalog no longer has, with this series: "
                "%s its record is %s's now (a fix renamed in the catalog), no file written"
                % (was, "when applied," if req.dry_run else "", now)).replace("  ", " ")
    put_back = _put_back(req, state, todo, upgrades, outcomes) if upgrades else {}
    if taken:  # the release took them: their records go, nothing written
        from .observe import held_upstream

        for spec in req.fixes:
            if spec.name in taken:
                outcomes[spec.name]["detail"] = held_upstream(
                    spec, taken[spec.name], "would be forgotten" if req.dry_run else "forgotten")
    if not req.git and req.commit:
        raise UsageError("--commit needs git, and --no-git was given; drop one of them")
    check_patch_paths(req.roots, list(todo) + list(req.dependencies))
    if req.sync:  # before the refusal below: a revert with nothing to revert is left out
        todo = _sync_skips(req, store, state, todo, outcomes, set(upgrades),
                           {f.name for f in read.fixes})
    if not req.git and any(s.revert is not None for s in todo):
        raise UsageError("a revert fix (%s) needs git, and --no-git was given; drop --no-git, "
                         "or apply the other fixes without it"
                         % ", ".join(s.name for s in todo if s.revert))
    check_file_modes(todo)  # dependencies are looked for, never written
    ws = Workspace(req.roots)
    held = _take_out(req, store, state, ws, upgrades, owned) if upgrades else {}
    left = _left_behind(store, ws, {n: r for n, r in lost_records.items() if n in {t.name for t in todo}},
                        owned)
    sources = _sources(req, todo, state.by_name())
    keys = [(root, path) for spec in todo for root, path, _op in touched(spec, sources)]
    installs = record.installs(req.roots)  # installed roots: RECORD proves them pristine
    committed = sorted({root for root, _path in keys} & set(installs)) if req.commit else []
    if committed:
        raise UsageError(
            "--commit records each fix as a commit of its root's git checkout, and root %s (%s) "
            "is an installed package: the git work tree around it, if any, is another project's, "
            "not its history, and a commit there would put one site-packages file in that "
            "project. Apply without --commit (its record and `rollback` undo it)"
            % (committed[0], req.roots.get(committed[0]).path), root=committed[0])
    git_changes = auto.git_changes(keys, req.roots, req.git, set(installs))
    for key in keys:
        ws.entry(*key)
    # an upgraded fix's files start from its backups, vouched for when it was applied: no
    # git-clean check of the bytes being replaced (with --force, drift being discarded)
    taken_out = {f.key for rec in (*upgrades.values(), *left.values()) for f in rec.files}
    prepare = _Prepare(req, store, state, ws, sources, git_changes, taken_out, installs)
    for name in lost:  # a lost fix required by another is not there: apply it again first
        prepare.recorded.pop(name, None)
    prepare.lost = lost
    prepare.prepared.update(s.name for s in req.fixes if s.not_needed)  # satisfy requires
    prepare.put_back = put_back
    prepared = prepare.changes(todo)
    outcomes.update(prepare.present_unrecorded)
    forgotten = {**taken, **lost_records}
    for name, o in outcomes.items():  # a stale record this run drops, writing no file
        if o["outcome"] == "not-needed" and name in forgotten:
            o["forgets"] = forgotten[name].version  # a fleet's preflight sees a change to make
    if req.dry_run and prepared:
        _verify(req, prepared, ws)
    if renamed and not req.dry_run:  # before any state names them
        store.adopt_backups(renamed)
    if not req.dry_run and prepared:
        try:
            _write(req, store, state, ws, prepared, {**left, **upgrades}, read)
        except BaseException:
            if renamed:
                store.unadopt(renamed)
            raise
    elif not req.dry_run and any("forgets" in o for o in outcomes.values()):
        store.write_state(state)  # only records of not-needed fixes to drop
        drop_undo_point(store)  # the state it would put back is not the state before this
    elif not req.dry_run and renamed:  # only records to rename: the undo point still holds,
        store.write_state(state)  # and names the old folder's files: it stays (hard links)
        store.append_history({"event": "rename", "outcome": "completed", "files": [],
                              "fixes": [{"name": new, "was": old} for new, old in renamed.items()]})
    if renamed and not req.dry_run and prepared:  # the undo point is this run's now
        store.drop_adopted(renamed)
    last = {key: fc for fc in prepared for key in fc.keys}  # the last fix to change each file
    for fc in prepared:  # the bytes are written: each fix's result lets its own go
        old = upgrades.get(fc.spec.name)
        if fc.spec.name in put_back:  # the same version, taken out and applied again
            outcomes[fc.spec.name] = dict(fix_result(fc, "would-apply" if req.dry_run else "applied"),
                                          detail=_put_back_detail(fc.spec, put_back[fc.spec.name],
                                                                  {s.name: s for s in req.fixes}))
        elif old is None:
            outcomes[fc.spec.name] = fix_result(fc, "would-apply" if req.dry_run else "applied",
                                                release=True)
            if fc.spec.name in lost:  # the record of the lost application, replaced
                outcomes[fc.spec.name]["lost"] = lost[fc.spec.name]
        else:
            outcomes[fc.spec.name] = dict(fix_result(fc, "would-upgrade" if req.dry_run else "upgraded"),
                                          from_version=old.version)
            if fc.spec.name in held:
                outcomes[fc.spec.name]["detail"] = held[fc.spec.name]
        for key in fc.keys:  # a file no later result names: its bytes and digests go
            if last[key] is fc:
                ws.entries.pop(key, None)
    ws.entries.clear()
    return [outcomes[s.name] for s in req.fixes]


def _sort_out(req: Request, state: State, lost: Dict[str, str], lost_records: Dict[str, FixRecord],
              outcomes: Dict[str, Dict[str, Any]]) -> Tuple[List[FixSpec], Dict[str, FixRecord]]:
    """The fixes to write (the upgrades among them, with the record of the version applied
    now); the outcome of each of the others (not needed, already applied)."""
    recorded = state.by_name()
    todo: List[FixSpec] = []
    upgrades: Dict[str, FixRecord] = {}
    for spec in req.fixes:
        rec = recorded.get(spec.name)
        if spec.not_needed and (rec is None or spec.name in lost_records):
            # upstream holds the change in this release: nothing to write; a record the
            # upgrade made lost is dropped (docs/manifest.md, "Upstream since R")
            outcomes[spec.name] = {"name": spec.name, "version": spec.version, "outcome": "not-needed",
                                   "detail": spec.not_needed, "files": [], "preconditions": [],
                                   "verification": []}
            if spec.name in lost_records:  # forgotten, not applied again: no ``lost`` outcome
                from .observe import held_upstream

                outcomes[spec.name]["detail"] = held_upstream(
                    spec, lost_records[spec.name], "would be forgotten" if req.dry_run
                    else "forgotten", lost=lost[spec.name])
        elif rec is None:
            todo.append(spec)
        elif int(rec.version or 0) == spec.version:
            from .observe import drift_todo, drifted_files, refuse_changed_series

            refuse_changed_series(spec, rec)  # the catalog's version is what was applied?

            drifted = drifted_files(req.roots, state, rec)
            outcomes[spec.name] = {"name": spec.name, "version": spec.version, "outcome": "already-applied",
                                   "files": [], "preconditions": [], "verification": [],
                                   "drifted": drifted}
            if drifted:  # what to do, as verify's drift check says it
                outcomes[spec.name]["detail"] = drift_todo(spec.name, drifted, state, req.roots)
        elif rec.commits:
            raise VersionMismatch(
                "fix %s version %s is applied in %s with --commit, and this is version %d; roll "
                "it back first (patchkit rollback %s: a revert commit) and apply again, or keep "
                "the applied version"
                % (spec.name, rec.version, req.state_root.path, spec.version, spec.name),
                fix=spec.name, applied_version=rec.version, version=spec.version)
        else:  # an upgrade: the old version out and this one in, in one transaction
            upgrades[spec.name] = rec
            todo.append(spec)
    return todo, upgrades


def _put_back(req: Request, state: State, todo: List[FixSpec], upgrades: Dict[str, FixRecord],
              outcomes: Dict[str, Dict[str, Any]]) -> Dict[str, List[str]]:
    """Fixes of the request applied at the catalog's version after a fix being upgraded, on a
    file it (or another such fix) changed: a stack whose earlier fix alone is outdated. Each is
    moved from ``already-applied`` to ``todo`` and ``upgrades`` (its record, to take it out),
    so the one transaction takes the stack out, newest first, and applies it again, each in
    the order it was applied; returned with the upgraded fixes under each. One applied with
    ``--commit`` is not taken out: the refusal of later writers names it."""
    files: Dict[str, Set[Key]] = {}  # the files the moving part of the stack changed
    under: Dict[str, List[str]] = {}
    specs = {s.name: s for s in req.fixes}
    for rec in state.fixes:  # application order: a fix after those it lies on
        mine = {f.key for f in rec.files}
        if rec.name in upgrades:
            files[rec.name] = mine
            continue
        below = [n for n, keys in files.items() if keys & mine]
        if not below or rec.commits or outcomes.get(rec.name, {}).get("outcome") != "already-applied":
            continue
        outcomes.pop(rec.name)
        files[rec.name] = mine
        under[rec.name] = sorted({u for n in below for u in (under.get(n) or [n])})
        upgrades[rec.name] = rec
        todo.append(specs[rec.name])
    if under:  # the stack in application order, in the places its fixes hold in ``todo``
        order = {rec.name: i for i, rec in enumerate(state.fixes)}
        spots = [i for i, s in enumerate(todo) if s.name in upgrades]
        stack = sorted((todo[i] for i in spots), key=lambda s: order[s.name])
        for i, spec in zip(spots, stack):
            todo[i] = spec
    return under


def _put_back_detail(spec: FixSpec, under: List[str], specs: Dict[str, FixSpec]) -> str:
    """What a fix put back on the upgraded fixes under it says of it."""
    return ("put back on %s: taken out to upgrade %s under it, and applied again as it was "
            "(v%d)" % (", ".join("%s v%d" % (u, specs[u].version) for u in under),
                       " and ".join(under), spec.version))


def _sources(req: Request, todo: List[FixSpec], recorded: Dict[str, FixRecord]) -> Sources:
    """The commit each revert fix undoes (with its precondition's result)."""
    sources: Sources = {}
    if any(s.revert is not None for s in todo):
        from . import revert

        sources = {s.name: revert.resolve(s, req.roots) for s in todo if s.revert is not None}
    for spec in todo:
        named = (spec.revert or {}).get("fix")
        if spec.name not in sources or named not in recorded:
            continue
        # the fix it reverts is patchkit's own here: its rollback puts back its files and its
        # record; a revert would leave the record saying it is applied (docs/git.md)
        check = sources[spec.name][1]
        how = "applied by patchkit here" + ("" if recorded[named].commits else ", not committed")
        sources[spec.name] = (None, dict(check, ok=False, detail=(
            "%sfix %s is %s: roll it back instead (patchkit rollback %s), which puts back its "
            "files and drops its record; a revert fix is for a change patchkit did not apply "
            "(a fork's commit, a build's files)"
            % ("%s; " % check["detail"] if not check["ok"] else "", named, how, named))))
    return sources


def _sync_skips(req: Request, store: Store, state: State, todo: List[FixSpec],
                outcomes: Dict[str, Dict[str, Any]], upgrades: Set[str],
                recorded: Set[str]) -> List[FixSpec]:
    """``patchkit sync``: of the fixes to write, leave out those ``status`` would call
    ``not-needed`` (a revert with nothing to revert) or ``present-unrecorded`` (the change is
    in the files already, put there by someone else), and a shipped fix the target does not
    record (``if_recorded``: no fix of the user's needs it), each with its outcome saying so;
    ``recorded``: the fixes the target records, lost ones too."""
    from .observe import beneath_records, unrecorded

    ws, keep = Workspace(req.roots), []
    beneath = beneath_records(store, state, ws)  # a fix recorded on top of an unrecorded one
    for spec in todo:
        # what status says of it first (not-needed, present-unrecorded), shipped or not
        seen = "" if spec.name in upgrades else unrecorded(
            ws, spec, req.roots, req.git, beneath and beneath(spec.name), recorded)["state"]
        if spec.if_recorded and spec.name not in recorded and seen not in (
                "not-needed", "present-unrecorded"):
            outcomes[spec.name] = {
                "name": spec.name, "version": spec.version, "files": [], "preconditions": [],
                "verification": [], "outcome": "not-applied",
                "detail": "shipped with patchkit, and never applied here: sync keeps a shipped "
                          "fix current where it was applied, and brings it where a fix of yours "
                          "depends on it; to have it here, patchkit apply %s" % spec.name}
            continue
        if seen in ("not-needed", "present-unrecorded"):
            outcomes[spec.name] = {
                "name": spec.name, "version": spec.version, "files": [], "preconditions": [],
                "verification": [], "outcome": seen,
                "detail": ("nothing to revert on this target" if req.git else
                           "nothing to revert on this target: the files are as the revert "
                           "leaves them (not checked against git history: --no-git)")
                if seen == "not-needed" else
                "the change is in the files already, not recorded by patchkit: see patchkit status"}
        else:
            keep.append(spec)
    return keep


def _drop_lost(req: Request, state: State
               ) -> Tuple[State, Dict[str, str], Dict[str, FixRecord], Dict[str, Set[Key]]]:
    """The state without the records of requested fixes that are ``lost`` (their installed
    package was reinstalled, or their checkout moved to another release, underneath them:
    status shows why), each to be applied fresh onto the new files, its record replaced when
    that apply commits; why each lost fix (of the request or not) is lost; the records
    dropped; and, of each fix the tree moved under, its files the new release holds as the
    fix wrote them (``observe.release_owned``): never taken out to the old release's bytes."""
    from .observe import moved_under

    moved = moved_under(req.roots, state, git=req.git)
    owned = {name: {(r, p) for r, p in seen.get("release_files") or ()}
             for name, seen in moved.items()}
    lost = {name: seen["lost"] for name, seen in moved.items() if seen["state"] == "lost"}
    if not lost:
        return state, lost, {}, owned
    names = {s.name for s in req.fixes}
    dropped = {f.name: f for f in state.fixes if f.name in names and f.name in lost}
    return state.without(dropped), lost, dropped, owned


def _drop_taken(req: Request, state: State) -> Tuple[State, Dict[str, FixRecord]]:
    """The state without the records of requested fixes the release the target runs holds
    upstream (``not_needed``) whose files still hold what they wrote (the host moved to the
    release that took the change, and its files are the fix's result): nothing to write,
    nothing to keep; and those records. A drifted one stays, for status and rollback."""
    from .observe import drifted_files

    recorded = state.by_name()
    taken = {s.name: recorded[s.name] for s in req.fixes if s.not_needed and s.name in recorded
             and not drifted_files(req.roots, state, recorded[s.name])}
    return (state.without(taken), taken) if taken else (state, {})


def _left_behind(store: Store, ws: Workspace, dropped: Dict[str, FixRecord],
                 owned: Dict[str, Set[Key]]) -> Dict[str, FixRecord]:
    """Of each lost fix applied again, its files the reinstall left as the fix wrote them (a
    file it created: pip removes only what RECORD lists), taken back out in memory like an
    upgrade's, so the fresh apply writes them again instead of refusing a file that exists;
    returned as records restricted to those files. A file the new release holds as the fix
    wrote it (``owned``) is the release's: it stays."""
    left = {}
    for name, rec in dropped.items():
        kept = [f for f in rec.files if ws.sha256(*f.key) == f.after_sha256
                and f.key not in owned.get(name, set())]
        if kept:
            left[name] = rec.restricted(kept)
            restore_in_memory(store, ws, left[name])
    return left


def _take_out(req: Request, store: Store, state: State, ws: Workspace,
              upgrades: Dict[str, FixRecord], owned: Dict[str, Set[Key]]) -> Dict[str, str]:
    """Roll each upgraded fix's applied version back in memory, so one transaction swaps the
    two versions; refused when a later fix, not upgraded with it, changed the same files, or
    when its files drifted (unless ``force``) other than into the new version's result: the
    fixes whose files hold that already are returned, with what their outcome says. A file
    the release the tree moved to holds as the old version wrote it (``owned``) is not taken
    out: its backup is the old release's bytes, and the new version applies onto it."""
    refuse_later_writers(state, list(upgrades), "upgrade", "roll the later fix back first "
                         "(patchkit rollback %s), then apply again; or name it in this apply "
                         "too (patchkit sync names every fix): it is then taken out and put "
                         "back on the new version", req.roots)
    # application order: a file several upgraded fixes wrote (a stack: one depending on
    # another) holds what the last of them wrote, and goes back through each, newest first
    stack = [rec for rec in state.fixes if rec.name in upgrades]
    last: Dict[Key, Tuple[str, FileRecord]] = {f.key: (rec.name, f) for rec in stack for f in rec.files}
    drift: Dict[str, List[str]] = {}
    seen: Dict[Key, Optional[str]] = {}
    for key, (name, f) in last.items():
        seen[key] = have = ws.sha256(*key)
        if have != f.after_sha256:
            drift.setdefault(name, []).append(
                "%s (fix %s v%s): sha256 now %s, recorded %s"
                % (ws.entry(*key).where, name, upgrades[name].version, have, f.after_sha256))
    for rec in reversed(stack):
        mine = owned.get(rec.name, set())
        restore_in_memory(store, ws, rec.restricted([f for f in rec.files if f.key not in mine])
                          if mine else rec)
    specs = {s.name: s for s in req.fixes}
    held = {name: "the files held v%d's change already (edited by hand, or refreshed from "
            "here): recorded as v%d, nothing written over" % (specs[name].version, specs[name].version)
            for name in drift if holds_version(ws, specs[name], upgrades[name], seen)}
    lost = [line for name, lines in drift.items() if name not in held for line in lines]
    if lost and not req.force:
        raise DriftError(
            "%d file(s) changed since patchkit applied the version now there; upgrading would "
            "discard those changes (nothing was written):\n- %s\nInspect them; upgrade anyway "
            "with --force (the changes are lost), or restore the applied bytes first"
            % (len(lost), "\n- ".join(lost)), drifted=lost)
    return held


class _Prepare:
    """Each fix of an apply, in request order: its preconditions checked, then its change
    computed on the workspace; every failed precondition is reported together."""

    def __init__(self, req: Request, store: Store, state: State, ws: Workspace,
                 sources: Sources, git_changes: Dict[str, Any], vouched: Set[Key],
                 installs: Dict[str, record.Installed]) -> None:
        self.req, self.store, self.ws, self.sources = req, store, ws, sources
        self.git_changes = git_changes
        self.state, self.recorded = state, state.by_name()
        self._beneath: Any = False  # beneath(), made once
        self.after_hashes = {key: {f.after_sha256} for key, (_fix, f) in state.last_writers().items()
                             if f.after_sha256}  # what patchkit last wrote to each file
        self.done: Set[Key] = set(vouched)  # files with no git-clean check (prepared already)
        self.prepared: Set[str] = set()
        self.releases: Dict[str, Any] = {}
        self.installs = installs
        self.applied_on: Dict[str, List[str]] = {}  # each root's recorded fixes (what a reinstall loses)
        for applied in state.fixes:
            for root in dict.fromkeys(f.root for f in applied.files):
                self.applied_on.setdefault(root, []).append(applied.name)
        self.writable: Dict[str, Optional[str]] = {}  # each directory probed for writing
        self.failures: List[Dict[str, Any]] = []
        self.results: List[Dict[str, Any]] = []
        # the fix being prepared: each file's first FILE record with its placement (or its
        # conflict), made by the not-already-added check, until place() writes it
        self.placed: Dict[Key, Tuple[FileChange, Any]] = {}
        self.present_unrecorded: Dict[str, Dict[str, Any]] = {}  # fixes left out: in the files
        self.lost: Dict[str, str] = {}  # recorded fixes a reinstall took away: why
        self.put_back: Dict[str, List[str]] = {}  # fixes put back: the upgraded ones under each

    def changes(self, todo: List[FixSpec]) -> List[FixChange]:
        out: List[FixChange] = []
        for n, spec in enumerate(todo):
            first_op = {(r, p): op for r, p, op in touched(spec, self.sources)}
            fc = FixChange(spec, self.preconditions(spec, first_op, state_dir=n == 0),
                           keys=list(first_op), source=self.sources.get(spec.name, (None,))[0])
            self.results.append({"name": spec.name, "version": spec.version,
                                 "preconditions": fc.preconditions})
            failed = [dict(r, fix=spec.name) for r in fc.preconditions if not r["ok"]]
            if failed and fc.source is None and self.present(fc):
                continue  # its preconditions describe the files without its change
            if failed:
                self.failures.extend(failed)
                self.placed = {}
                continue
            fc.snapshot(self.ws, fc.before)
            try:
                (self.place if fc.source is None else self.revert_commit)(fc)
            except ConflictError as exc:
                if fc.source is None and self.present(fc):
                    continue
                key = (exc.details.get("root"), exc.details.get("patch_path"))
                others = [f.spec.name for f in out if key in f.keys] + [
                    name for name, rec in self.recorded.items() if name != spec.name
                    and name not in self.prepared and any(f.key == key for f in rec.files)]
                self.refuse_failed()  # a refused precondition explains more than the conflict
                if spec.name in self.put_back:
                    raise self.not_put_back(exc, spec) from None
                raise of_fix(exc, spec.name, others, dependents=self.state.requiring(spec.name) + [
                    f.spec.name for f in out if spec.name in f.spec.requires]) from None
            fc.snapshot(self.ws, fc.after)
            self.placed = {}
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
            pre.append(auto.release_check(spec, req.roots, self.releases, req.git, None
                                          if spec.name in self.lost else self.recorded.get(spec.name)))
        # every copy the request carries is looked for in the files: a dependency, or a fix
        # of the request left out (sync: present unrecorded), as `apply FIX` looks for it
        copies = {d.name: d for d in (*req.fixes, *req.dependencies)}
        pre.extend(auto.requires_check(spec, self.recorded, self.prepared, copies, self.read_any,
                                       sync=req.sync, lost=self.lost, named=[f.name for f in req.fixes],
                                       beneath=self.beneath(any_root=True), dry_run=req.dry_run))
        if spec.name in self.sources:
            pre.append(self.sources[spec.name][1])
        by_key: Dict[Key, List[FileChange]] = {}
        for change in spec.files:
            by_key.setdefault((change.root, change.path), []).append(change)
        self.placed = {}  # another fix's first placements are not this one's
        for key, op in first_op.items():
            missing = None if op == "revert" else auto.presence_check(ws.entry(*key), op)
            if missing:
                pre.append(missing)
            elif op == "modify" and not req.force:
                dup, placed = auto.duplicate_check(ws.entry(*key), by_key[key])
                if placed is not None:  # the file's first record, placed by the check
                    if not isinstance(placed, ConflictError):  # held as bytes, as written
                        placed = (None if placed[0] is None else encode(placed[0]), placed[1])
                    self.placed[key] = (by_key[key][0], placed)
                if dup:
                    pre.append(dup)
        fresh = [ws.entry(*k) for k in first_op if k not in self.done]
        pre.extend(auto.git_clean_checks(fresh, req.roots, self.after_hashes, self.git_changes,
                                         strict=req.commit))
        pre.extend(record.record_checks(fresh, req.roots, self.installs, self.after_hashes,
                                        self.applied_on))
        dirs = [(ws.entry(*k).where, os.path.dirname(ws.entry(*k).abs)) for k in first_op]
        if state_dir:
            dirs.append(("state", self.store.dir if self.store.exists() else self.store.root))
        pre.extend(auto.writable_checks(dirs, self.writable))
        ctx = CheckContext(spec.name, req.roots, req.python, spec.scripts, ws.read)
        pre.extend(run_checks([(check, ctx) for check in spec.preconditions]))
        return pre

    def present(self, fc: FixChange) -> bool:
        """Whether a fix refused by its preconditions or a conflict is in the files already,
        unrecorded (the fork carries it as a commit, or someone applied it by hand: status'
        ``present-unrecorded``). Then it is left out with that outcome, as ``sync`` leaves it
        out, instead of its refusal; the workspace is put back as before the fix."""
        from .observe import unrecorded

        for key, (data, mode) in fc.before.items():
            e = self.ws.entry(*key)
            e.current, e.mode = data, mode
        self.placed = {}
        beneath = self.beneath()
        if unrecorded(self.ws, fc.spec, self.req.roots,
                      beneath=beneath and beneath(fc.spec.name))["state"] != "present-unrecorded":
            return False
        self.present_unrecorded[fc.spec.name] = {
            "name": fc.spec.name, "version": fc.spec.version, "files": [],  # as sync says it:
            "preconditions": [], "verification": [], "outcome": "present-unrecorded",  # no ✗
            "detail": _unlisted_release(self.req, fc.spec) or (
                "the change is in the files already, not recorded by patchkit (a commit of "
                "the fork, or applied by hand): nothing to apply; see patchkit status")}
        self.prepared.add(fc.spec.name)  # a fix requiring it finds it there
        return True

    def beneath(self, any_root: bool = False) -> Optional[Callable[[str], Optional[Callable[[str, str], Optional[bytes]]]]]:
        """For a fix with no record, by name: the files as they were before the recorded fixes
        building on it (``beneath_records``), for its presence check: such a fix on top of it
        may hide it. ``any_root``: a dependency's file on a root the target lacks is absent
        (``read_any``)."""
        from .observe import beneath_records

        if self._beneath is False:
            self._beneath = beneath_records(self.store, self.state, self.ws)  # reads ws as it is
        of = cast(Optional[Callable[[str], Optional[Callable[[str, str], Optional[bytes]]]]],
                  self._beneath)
        if of is None or not any_root:
            return of
        given = {r.name for r in self.req.roots}

        def on_given(name: str) -> Optional[Callable[[str, str], Optional[bytes]]]:
            read = of(name)
            if read is None:
                return None
            return lambda root, path: read(root, path) if root in given else None

        return on_given

    def read_any(self, root: str, path: str) -> Optional[bytes]:
        """A dependency may touch a root this target lacks: its files are simply absent."""
        return self.ws.read(root, path) if root in {r.name for r in self.req.roots} else None

    def place(self, fc: FixChange) -> None:
        """Each FILE record applied to the workspace, in order; a file's first record the
        not-already-added check placed already (on these same bytes) is not placed again."""
        for change in fc.spec.files:
            key = (change.root, change.path)
            e = self.ws.entry(*key)
            early = self.placed.pop(key, None)
            if early is not None and early[0] is change:
                if isinstance(early[1], ConflictError):
                    raise early[1]
                e.current, placed = early[1]
            else:
                new, placed = apply_change(None if e.current is None else decode(e.current), change)
                e.current = None if new is None else encode(new)
            if e.current is None or change.mode is not None:
                e.mode = None if e.current is None else change.mode
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

    def not_put_back(self, exc: ConflictError, spec: FixSpec) -> ConflictError:
        """The conflict of a fix put back on the new versions of the fixes under it: its
        version no longer applies on theirs, which a new version of it, or its rollback, solves
        (it builds on them already: no advice to depend on them)."""
        exc = without_stale_advice(of_fix(exc, spec.name))  # the patch is not stale here
        under = self.put_back[spec.name]
        names = " and ".join(under)
        versions = {s.name: s.version for s in self.req.fixes}
        new = " and ".join("%s v%d" % (u, versions[u]) for u in under)
        exc.message += (
            "; %s v%d is applied on top of %s, and this run takes it out to upgrade %s, then puts "
            "it back: %s v%d does not apply on %s. Make a version of %s that does (patchkit "
            "refresh %s --from a checkout where %s is applied, docs/authoring.md; patchkit matrix "
            "shows which fixes break), or roll it back first (patchkit rollback %s; then patchkit "
            "apply %s upgrades without it); nothing was written"
            % (spec.name, spec.version, names, names, spec.name, spec.version, new, spec.name,
               spec.name, new, spec.name, " ".join(under)))
        exc.details["put_back_on"] = list(under)
        exc.args = (exc.message,)
        return exc

    def refuse_failed(self) -> None:
        if not self.failures:
            return
        if any(f["kind"] == "writable" for f in self.failures):
            raise auto.permission_denied(self.failures, self.results, self.writable, self.req.roots)
        cls = (TargetFileMissing if any(f["kind"] == "file-present" for f in self.failures)
               else PreconditionFailed)
        back = sorted({f["fix"] for f in self.failures if f.get("fix") in self.put_back})
        note = "".join(
            "\nfix %s is applied on top of %s, which this run upgrades: it was taken out to be put "
            "back as it was, and its preconditions fail on the new version%s; make a version of %s "
            "that passes them (patchkit refresh %s), or roll it back first (patchkit rollback %s)"
            % (name, " and ".join(self.put_back[name]),
               "s" if len(self.put_back[name]) > 1 else "", name, name, name) for name in back)
        raise cls("%d precondition(s) failed; nothing was written:\n%s%s"
                  % (len(self.failures), failure_lines(self.failures), note),
                  failures=self.failures, fixes=self.results)


def _write(req: Request, store: Store, state: State, ws: Workspace,
           prepared: List[FixChange], upgrades: Dict[str, FixRecord], read: State) -> None:
    """The transaction of an apply; ``upgrades``: the records of the versions taken out;
    ``read``: the state as read, which the undo point keeps."""
    _claim_dirs(req, ws, prepared)
    backups = {fc.spec.name: [(k[0], k[1], cast(bytes, fc.before[k][0])) for k in fc.keys
                              if fc.before[k][0] is not None] for fc in prepared}
    cos, items, entries = _commit_items(req, prepared) if req.commit else ({}, [], [])
    old_dirs = {name: rec.created(r.name for r in req.roots) for name, rec in upgrades.items()}
    for fc in prepared:  # a directory the old version made is the new one's to remove, if empty
        fc.created_dirs.extend([list(d) for d in old_dirs.get(fc.spec.name, [])
                                if list(d) not in fc.created_dirs])
    with Transaction(store, req.roots, "apply", [fc.spec.name for fc in prepared],
                     {fc.spec.name: fc.spec.version for fc in prepared}, req.python,
                     entries or None, before=read) as txn:
        names = txn.back_up(ws.changed(), backups)
        txn.write(purge=any(fc.spec.purge_pycache for fc in prepared),
                  remove_dirs=[d for dirs in old_dirs.values() for d in dirs])
        seen = _before_checks(req, state, txn.writes, prepared)
        _verify(req, prepared)
        _unchanged_by_checks(txn.writes, seen, prepared)
        if entries:
            from . import gitcommit

            made = gitcommit.make(cos, items, entries, txn.id)
            for fc in prepared:
                fc.commits = made.get(fc.spec.name, [])
        kept = [f for f in state.fixes if f.name not in upgrades]
        txn.commit(State(state.txn, kept + [_record(req, fc, txn.id, names.get(fc.spec.name, {}))
                                            for fc in prepared], state.extra))


def _claim_dirs(req: Request, ws: Workspace, prepared: List[FixChange]) -> None:
    """Each directory a new file needs, as the first fix creating a file in it made it."""
    claimed: Set[Tuple[str, str]] = set()
    for fc in prepared:
        for key in fc.keys:
            if fc.after[key][0] is not None and fc.before[key][0] is None:
                for d in missing_dirs(ws.entry(*key).abs):
                    pair = (key[0], req.roots.relative(key[0], d))  # root-relative: trees move
                    if pair not in claimed:
                        claimed.add(pair)
                        fc.created_dirs.append(list(pair))


def _verify(req: Request, prepared: List[FixChange], ws: Optional[Workspace] = None) -> None:
    """The fixes' verification, on the files as written; a failure undoes the transaction.
    With ``ws`` (a dry run): only the checks that read a file (``CONTENT_KINDS``), asked of the
    files as this apply would write them (``ws``), so a dry run (a fleet's preflight, `matrix`)
    fails where the apply would; a check that runs a process needs the files on the disk, and
    runs only when they are."""
    after = {} if ws is None else {e.abs: e.current for e in ws.entries.values()}

    def read(root: str, rel: str) -> Optional[bytes]:
        if not after:
            return req.roots.read(root, rel)
        path = req.roots.resolve(root, rel)
        return after[path] if path in after else req.roots.read(root, rel)

    asked = {fc.spec.name: [c for c in fc.spec.verification
                            if ws is None or c.get("kind") in CONTENT_KINDS] for fc in prepared}
    jobs = [(check, CheckContext(fc.spec.name, req.roots, req.python, fc.spec.scripts, read))
            for fc in prepared for check in asked[fc.spec.name]]
    results = iter(run_checks(jobs))  # every fix's at once: a script overlaps the greps
    failures: List[Dict[str, Any]] = []
    for fc in prepared:
        fc.verification = [next(results) for _ in asked[fc.spec.name]]
        failures.extend(dict(r, fix=fc.spec.name) for r in fc.verification if not r["ok"])
    _name_writers(req, prepared, failures)
    if failures:
        said = ("failed after writing; every file was restored" if ws is None else
                "would fail on the files as this apply would write them; nothing was written")
        raise VerificationFailed(
            "%d verification check(s) %s:\n%s" % (len(failures), said, failure_lines(failures)),
            failures=failures, fixes=[{"name": fc.spec.name, "version": fc.spec.version,
                                       "verification": fc.verification} for fc in prepared])


def _unlisted_release(req: Request, spec: FixSpec) -> str:
    """A present-unrecorded fix's detail when the target runs a release this version of the
    fix is not for: that release's own files may hold the change (upstream took it), which
    ``upstream check`` tells; "" otherwise (a fork's commit or a hand edit, as said)."""
    from .variants import release_of

    rel = spec.release or {}
    versions = [str(v) for v in rel.get("versions") or ()]
    found = release_of(req.roots, str(rel.get("root") or "sglang"), {}, req.git) \
        if versions else None
    if found is None or found in versions:
        return ""
    return ("the change is in the files already, not recorded by patchkit, on sglang %s, a "
            "release %s v%d is not for (it serves %s): %s's own files may hold it (upstream took "
            "it); `patchkit upstream check %s --release %s` tells, and its --mark records it; "
            "else it is a commit of the fork or a hand edit: nothing to apply; see patchkit "
            "status" % (found, spec.name, spec.version, ", ".join(versions), found, spec.name, found))


def _name_writers(req: Request, prepared: List[FixChange], failures: List[Dict[str, Any]]) -> None:
    """A failed check of a file other fixes of this run changed too says which: two fixes
    adding the same line fail a ``count = 1`` grep, and the one whose check fails is not
    alone to blame (a sync of both: a trial)."""
    if not failures:
        return
    writers: Dict[str, List[str]] = {}
    for fc in prepared:
        for key in fc.keys:
            writers.setdefault(req.roots.where(*key), []).append(fc.spec.name)
    for f in failures:
        others = [n for n in writers.get(str(f.get("where")), []) if n != f.get("fix")]
        if others:
            f["detail"] = "%s (this run's %s changed %s too)" % (
                f["detail"], " and ".join(others), f["where"])


#: What a check could change of a file without its bytes: (size, mtime_ns, inode, mode).
Stat = Optional[Tuple[int, int, int, int]]


def _stat(path: str) -> Stat:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode


def _before_checks(req: Request, state: State, writes: List[Entry],
                   prepared: List[FixChange]) -> Optional[Dict[str, Tuple[str, str, Stat]]]:
    """Before the verification, when a check runs a process (only such a check can write): the
    files it must leave alone, by ``root:path``: (path, whose, stat). Those this apply wrote
    (whose: "") and those of each fix applied before it, on the roots given (whose: its name)."""
    if not any(c.get("kind") in PROCESS_KINDS for fc in prepared for c in fc.spec.verification):
        return None
    files = {w.where: (w.abs, "") for w in writes}
    mine, given = {fc.spec.name for fc in prepared}, {r.name for r in req.roots}
    for rec in state.fixes:
        for f in rec.files if rec.name not in mine else ():
            where = req.roots.where(f.root, f.path)
            if where not in files and f.root in given:
                try:
                    files[where] = (req.roots.resolve(f.root, f.path), rec.name)
                except PatchkitError:  # unsafe now: status says so; nothing here to compare
                    continue
    return {where: (path, whose, _stat(path)) for where, (path, whose) in files.items()}


def _unchanged_by_checks(writes: List[Entry], seen: Optional[Dict[str, Tuple[str, str, Stat]]],
                         prepared: List[FixChange]) -> None:
    """Checks only read the target (docs/manifest.md): a verification command that changed a
    file the apply wrote (its bytes or its mode), or one of a fix applied before, would leave a
    success already drifted, so it undoes the apply, naming the file. ``seen``: the files as
    :func:`_before_checks` found them (None: no check ran a process; nothing is read again)."""
    if seen is None:
        return
    changed = []
    for w in writes:
        was, now = seen[w.where][2], _stat(w.abs)
        if sha256_of(w.abs) != w.sha256(w.current):
            changed.append((w.where, "%s, which this apply wrote" % w.where))
        elif was is not None and now is not None and now[3] != was[3]:
            changed.append((w.where, "the mode of %s (%o, was %o), which this apply wrote"
                            % (w.where, now[3] & 0o7777, was[3] & 0o7777)))
    changed += [(where, "%s, a file of fix %s applied before (not this apply's to put back: "
                 "see patchkit status)" % (where, whose))
                for where, (path, whose, was) in seen.items() if whose and _stat(path) != was]
    if changed:
        failures = [dict(result("verification", "the files as written", False,
                                "a verification check changed %s" % what, where),
                         fix=", ".join(fc.spec.name for fc in prepared))
                    for where, what in changed]
        raise VerificationFailed(
            "a verification check changed %s; a check must only read the target "
            "(docs/manifest.md), so every file this apply wrote was restored and nothing was "
            "recorded. Make the check write elsewhere (a temporary directory)"
            % "; ".join(what for _where, what in changed),
            failures=failures, fixes=[{"name": fc.spec.name, "version": fc.spec.version,
                                       "verification": fc.verification} for fc in prepared])


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


def _record(req: Request, fc: FixChange, txn: str, backups: Dict[Key, str]) -> FixRecord:
    """The fix's entry of state.json (docs/state.md); ``backups``: the transaction's name of the
    backup of each of its files that existed."""
    spec = fc.spec
    files = []
    for key in fc.keys:
        (before, mode_before), (after, mode_after) = fc.before[key], fc.after[key]
        files.append(FileRecord(key[0], key[1], file_op(before, after), fc.sha256(key, before),
                                fc.sha256(key, after), mode_before, mode_after,
                                backups[key] if before is not None else None))
    return FixRecord(
        name=spec.name, version=spec.version, title=spec.title, requires=list(spec.requires),
        release=spec.release, applied_at=utc_now(), txn=txn,
        patches=[dict(p) for p in spec.patches], files=files, created_dirs=fc.created_dirs,
        verification=fc.verification, backup_dir=".patchkit/%s" % fix_backups(spec.name),
        rollback={"strategy": spec.strategy}, purge_pycache=spec.purge_pycache,
        roots={r.name: r.path for r in req.roots}, commits=list(fc.commits),
        revert=({"root": fc.source.root, "commit": fc.source.sha} if fc.source is not None else None),
        installed=_installed(req, fc))


def _installed(req: Request, fc: FixChange) -> Optional[Dict[str, str]]:
    """The wheel install the fix's files were in (``status`` names it once it is lost)."""
    for name, found in record.installs(req.roots).items():
        if any(k[0] == name for k in fc.keys):
            return {"root": name, "dist": record.DIST, "version": found.version,
                    "record_stamp": found.stamp}
    return None
