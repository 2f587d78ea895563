"""The undo op: put the target back exactly as it was before the last apply, sync or rollback
(docs/state.md, "Undo"), as a failed ``--health-cmd`` or ``--after-cmd`` asks for. Undoing an
apply by a rollback restores each fix's files to before *the fix*: after an upgrade that drops
the old version too, and a lost fix applied again leaves no record of having been lost; undoing
a rollback by an apply takes the catalog's version. The undo point is the change's own
transaction directory, kept after its commit: the files' bytes before it, the backups it
replaced or ended, and the state before it. The undo is a transaction of its own."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Set

from ..errors import ConcurrentChange, PreconditionFailed, TargetError
from .contract import UNDONE, WOULD_UNDO
from .fsops import read_bytes
from .hunks import sha256_bytes
from .records import STATE_BEFORE, UNDO, Journal, JournalFile, State, fix_backups, staged_backups
from .recovery import undo_point
from .request import Request
from .store import Store
from .txn import Transaction
from .workspace import Workspace, file_op


def _instead(journal: Journal) -> str:
    """What takes a change's fixes out when its undo is refused for an edited file."""
    names = " ".join(journal.fixes)
    if journal.op == "rollback":
        return "leave the fixes rolled back (patchkit apply %s applies them again)" % names
    return "roll the fixes back with patchkit rollback --force %s" % names


def undo(req: Request, store: Store) -> List[Dict[str, Any]]:
    """``req.txn``: the change to undo (None: the last change, if it kept an undo point)."""
    point = undo_point(store)
    state = store.read_state()
    txn = req.txn or (point if point is not None and point == state.txn else None)
    if txn is None:
        raise PreconditionFailed(
            "nothing to undo on %s: its last change is not an apply, sync or rollback that kept "
            "an undo point (only the last change keeps one, an undo uses it up, and apply "
            "--commit keeps none); nothing was written. See patchkit status"
            % req.state_root.path)
    if point != txn or state.txn != txn:
        why = ("it is not the last change there (the last is %s)" % state.txn
               if state.txn != txn else "its undo point is gone (it was undone already)")
        raise PreconditionFailed("cannot undo transaction %s on %s: %s; nothing was written. See "
                                 "patchkit status" % (txn, req.state_root.path, why), txn=txn)
    store.undoes = txn
    journal = Journal.from_json(_json(store, "journal.json", txn))
    before = State.from_json(_json(store, STATE_BEFORE, txn))
    lacking = sorted({f.root for f in journal.files if f.root not in req.roots})
    if lacking:  # the change wrote there: an undo without that root would be half an undo
        raise PreconditionFailed(
            "cannot undo transaction %s (%s of %s) on %s: it wrote files on root %s, which this "
            "run was not given; nothing was written. Give %s and run patchkit undo again"
            % (txn, journal.op, ", ".join(journal.fixes), req.state_root.path, ", ".join(lacking),
               " ".join("--root %s=PATH" % r for r in lacking)), txn=txn, roots=lacking)
    ws = Workspace(req.roots)
    for f in journal.files:
        entry = ws.entry(f.root, f.path)
        if entry.sha256(entry.current) != f.after_sha256:
            raise ConcurrentChange(
                "%s changed since the change being undone wrote it (transaction %s); the undo "
                "wrote nothing. Put the file back as patchkit wrote it (patchkit status shows "
                "it drifted), then patchkit undo; or keep the edit and %s"
                % (entry.where, journal.txn, _instead(journal)), root=f.root, path=f.path)
        entry.current = None if f.before_sha256 is None else _original(store, journal, f)
        entry.mode = f.mode
    was, after = before.by_name(), state.by_name()
    back = _not_holding(journal, before, ws)
    # and each record the change dropped or made with no file written (a stale record a sync
    # forgot): the undo puts it back too, and says so
    names = list(journal.fixes) + [n for n in (*was, *after) if n not in journal.fixes
                                   and was.get(n) != after.get(n)]
    names = list(dict.fromkeys(names))
    if req.dry_run:
        return [_undone(name, journal, after.get(name), was.get(name), WOULD_UNDO, back)
                for name in names]
    ws_roots = {f.root for f in journal.files}
    with Transaction(store, req.roots, "undo", journal.fixes, dict(journal.versions), req.python) as t:
        t.back_up(ws.changed(), {})
        t.write(purge=True, remove_dirs=[(str(d[0]), str(d[1])) for d in journal.created_dirs
                                           if isinstance(d, list) and len(d) == 2
                                           and d[0] in ws_roots])
        t.commit(before)
    return [_undone(name, journal, after.get(name), was.get(name), UNDONE, back)
            for name in names]


def _not_holding(journal: Journal, before: State, ws: Workspace) -> Set[str]:
    """The fixes of the state the undo puts back whose files, as the undo puts them back, do
    not hold what the record says the fix wrote: lost or drifted then, and so again. A file
    the undone change did not write is as it is now (the rollback of a lost fix forgot its
    record and left its files as the reinstall or the move made them)."""
    journaled = {(f.root, f.path): f.before_sha256 for f in journal.files}
    out = set()
    for key, (name, wrote) in before.last_writers().items():
        if name not in journal.fixes or name in out:
            continue
        if key in journaled:  # before_sha256: the bytes the undo puts back
            held = journaled[key]
        elif key[0] in ws.roots:
            entry = ws.entry(*key)
            held = entry.sha256(entry.current)
        else:
            continue
        if held != wrote.after_sha256:
            out.add(name)
    return out


def _json(store: Store, name: str, txn: str) -> Any:
    data = read_bytes(store.path(UNDO, name))
    try:
        return json.loads(data or b"")
    except ValueError:
        raise TargetError("cannot undo transaction %s: its undo point's %s is missing or damaged; "
                          "nothing was written. See patchkit status"
                          % (txn, store.path(UNDO, name)), path=store.path(UNDO, name)) from None


def _original(store: Store, journal: Journal, f: JournalFile) -> bytes:
    """A file's bytes before the undone change, from the undo point or the fix's backups."""
    ref = f.backup or ""
    prefix = "txn/%s/" % journal.txn
    for fix in journal.fixes:  # a fix's own backup of the file: now under backups/FIX
        staged = staged_backups(journal.txn, fix) + "/"
        if ref.startswith(staged):
            ref = fix_backups(fix) + "/" + ref[len(staged):]
            break
    else:
        if ref.startswith(prefix):
            ref = UNDO + "/" + ref[len(prefix):]
    data: Optional[bytes] = None
    try:
        data = read_bytes(store.path(ref)) if ref else None
    except OSError:
        pass
    if data is None or sha256_bytes(data) != f.before_sha256:
        raise TargetError(
            "cannot undo transaction %s: the undo point's copy of %s:%s is missing or damaged "
            "(%s); nothing was written. See patchkit status"
            % (journal.txn, f.root, f.path, store.path(ref) if ref else "no copy"),
            path=f.path)
    return data


def _undone(name: str, journal: Journal, after: Any, was: Any, outcome: str,
            not_holding: Set[str]) -> Dict[str, Any]:
    """The result entry of a fix the undo put back: ``after`` its record the undo dropped,
    ``was`` the one it put back (None: it had none); ``not_holding``: the fixes put back with
    files that do not hold their change (:func:`_not_holding`)."""
    mine = {(r.root, r.path) for rec in (after, was) if rec is not None for r in rec.files}
    files = [{"root": f.root, "path": f.path, "op": file_op(
        b"" if f.after_sha256 is not None else None, b"" if f.before_sha256 is not None else None),
        "before_sha256": f.after_sha256, "after_sha256": f.before_sha256}
        for f in journal.files if (f.root, f.path) in mine]
    would = outcome == WOULD_UNDO
    put = "would be put back" if would else "put back"
    detail = ("its record and files %s as they were (v%s)" % (put, was.version)
              if was is not None else "its files %s as they were; not applied, as before" % put)
    if not files and name not in journal.fixes:  # a record alone: no file of it was written
        detail = ("its record %s as it was (v%s), no file of it written" % (put, was.version)
                  if was is not None else "its record %s: not recorded, as before"
                  % ("would be dropped" if would else "dropped"))
    holding = not (was is not None and name in not_holding)
    if not holding:
        detail += ("; its files did not hold v%s's change then, and %s not: lost or drifted, as "
                   "before (patchkit status says which)" % (was.version, "would" if would else "do"))
    out = {"name": name, "version": was.version if was is not None else None,
           "from_version": after.version if after is not None else None,
           "outcome": outcome, "files": files,
           "preconditions": [], "verification": [], "detail": detail}
    if not holding:  # a fleet's undo says so in its change, not "v4 -> v3" alone
        out["not_holding"] = True
    return out
