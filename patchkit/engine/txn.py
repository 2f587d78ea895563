"""The write transaction: backups, journal, atomic writes, actions, verification, commit.

Order (see docs/state.md): intent file and backups in ``.patchkit/txn/<id>/`` -> journal ->
file writes -> post-apply actions -> verification -> ``state.json`` (the commit point) ->
history -> cleanup. A failure before the commit point restores every file from its backup;
a crash before it is undone by the next run (``recover``), a crash after it is completed.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ..errors import PermissionDenied, TargetError
from .faults import fault
from .fsops import (atomic_write, file_mode, fsync_dir, keep_backup, make_dirs, purge_pycache,
                    read_bytes, remove_empty_dirs, remove_file, sync_all, temp_name, write_json,
                    write_temp)
from .hunks import sha256_bytes
from .store import FORMAT, HOLDER, Store, new_txn_id, utc_now, write_remedy


class FileWrite:
    """One file a transaction writes (a plain class with slots: cheaper to define than a
    dataclass, and built once per file)."""

    __slots__ = ("root", "path", "abs", "before", "after", "mode_before", "mode_after", "owner")

    def __init__(self, root: str, path: str, abs: str, before: Optional[bytes],
                 after: Optional[bytes], mode_before: Optional[int], mode_after: Optional[int],
                 owner: Optional[Tuple[int, int]]) -> None:
        self.root, self.path, self.abs = root, path, abs
        self.before, self.after = before, after
        self.mode_before, self.mode_after, self.owner = mode_before, mode_after, owner

    @property
    def op(self) -> str:
        if self.before is None:
            return "create"
        return "delete" if self.after is None else "modify"


def missing_dirs(path: str, known: Optional[Set[str]] = None) -> List[str]:
    """The directories to make for ``path``, outermost first; ``known``: directories already
    found to exist (grown by this call), so many files of one directory cost one ``stat``."""
    out = []
    cur = os.path.dirname(path)
    while not (known is not None and cur in known) and not os.path.isdir(cur):
        out.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    if known is not None and not out:
        known.add(cur)
    return list(reversed(out))


def backup_name(fix: str, i: int) -> str:
    """Where the i-th per-fix backup of ``fix`` lives after the commit, relative to
    ``.patchkit/`` (flat; a state of an earlier engine may name backups/<fix>/files/<root>/<path>)."""
    return "backups/%s/%d" % (fix, i)


def _tree_dirs(top: str) -> List[str]:
    return [dirpath for dirpath, _dirs, _files in os.walk(top)] + [os.path.dirname(top)]


def run_transaction(store: Store, op: str, fixes: List[str], writes: List[FileWrite],
                    fix_backups: Dict[str, List[Tuple[str, str, bytes]]],
                    purge: bool, verify: Callable[[], None],
                    commit: Callable[[str], Dict[str, Any]],
                    versions: Optional[Dict[str, int]] = None,
                    remove_dirs: Optional[List[str]] = None,
                    journal_extra: Optional[Dict[str, Any]] = None) -> str:
    """Write ``writes`` all-or-nothing; ``commit(txn_id)`` returns the new state to record.

    ``fix_backups[fix][i]`` (root, path, before-bytes) is kept as ``backups/<fix>/<i>`` after
    the commit (``backup_name``).

    A failure before the commit point leaves ``.patchkit/`` as it found it (none, if there was
    none): a failed attempt is not a transaction worth a trace in the target.
    """
    before = store.listing()
    store.begin_writing(op)
    txns_before = set(os.listdir(store.path("txn"))) if os.path.isdir(store.path("txn")) else set()
    committed = False
    try:
        txn = _transaction(store, op, fixes, writes, fix_backups, purge, verify, commit,
                           versions, remove_dirs, journal_extra or {})
        committed = True
        return txn
    except OSError as exc:  # e.g. a full disk while writing backups: the files are as they were
        left = ("the journal %s is kept and the next run restores the files"
                % store.path("journal.json") if os.path.lexists(store.path("journal.json"))
                else "nothing was changed")
        raise PermissionDenied("cannot write %s: %s; %s (%s)"
                               % (exc.filename or store.root, exc.strerror or exc, write_remedy(exc), left),
                               path=exc.filename or store.root) from None
    finally:
        store.end_writing()
        if not committed:
            try:
                if not os.path.lexists(store.path("journal.json")):  # no target file was written:
                    for name in set(os.listdir(store.path("txn"))) - txns_before:  # drop the scratch
                        shutil.rmtree(store.path("txn", name), ignore_errors=True)
                store.undo_setup(before)
            except OSError:
                pass  # leftovers are harmless scaffolding; the real error matters more


def _transaction(store: Store, op: str, fixes: List[str], writes: List[FileWrite],
                 fix_backups: Dict[str, List[Tuple[str, str, bytes]]], purge: bool,
                 verify: Callable[[], None], commit: Callable[[str], Dict[str, Any]],
                 versions: Optional[Dict[str, int]], remove_dirs: Optional[List[str]],
                 journal_extra: Dict[str, Any]) -> str:
    txn = new_txn_id()
    tdir = store.path("txn", txn)
    os.makedirs(tdir)
    intent = os.path.join(tdir, "txn.json")  # made durable with the backups, below
    write_json(intent, {"format": FORMAT, "txn": txn, "op": op, "fixes": fixes,
                        "started_at": utc_now()}, durable=False)
    written: List[str] = [intent]
    # Per-fix backups first: the one holding a file's bytes from before this transaction (the
    # first fix to change it) is also the journal's backup of that file, one name for both.
    first = {(w.root, w.path): w for w in writes if w.before is not None}
    origs: Dict[Tuple[str, str], str] = {}  # (root, path) -> backup, relative to .patchkit/
    for fix, files in fix_backups.items():
        for i, (root, path, data) in enumerate(files):
            fault("backup")
            # flat, the i-th file of the fix: one directory per fix, not a tree per file
            rel = "txn/%s/fixes/%s/%d" % (txn, fix, i)
            w = first.get((root, path))
            original = w is not None and (root, path) not in origs and (w.before is data or w.before == data)
            dest = store.path(rel)
            if not original:  # bytes a fix of this transaction planned: never on disk, a copy
                keep_backup(dest, data, None)
                written.append(dest)
                continue
            origs[(root, path)] = rel
            keep_backup(dest, data, w.abs)  # type: ignore[union-attr]  # a hard link where it can
            written.append(dest)  # a link too: the original inode's data may not be on disk yet
    entries = []
    for n, w in enumerate(writes):
        rel = origs.get((w.root, w.path))
        if w.before is not None and rel is None:  # no fix keeps it (a rollback): its own
            fault("backup")
            rel = "txn/%s/orig/%d" % (txn, n)  # flat: no directory tree to make and drop
            keep_backup(store.path(rel), w.before, w.abs)  # a hard link where it can
            written.append(store.path(rel))
        entries.append({"root": w.root, "path": w.path, "abs": w.abs, "op": w.op,
                        "before_sha256": sha256_bytes(w.before), "after_sha256": sha256_bytes(w.after),
                        "mode": w.mode_before, "mode_after": w.mode_after,
                        "owner": list(w.owner) if w.owner else None,
                        "backup": rel if w.before is not None else None})
    sync_all(written, _tree_dirs(tdir))  # every backup durable before the journal names it
    created: List[str] = []
    known: Set[str] = set()
    for w in writes:
        if w.after is not None:
            created.extend(d for d in missing_dirs(w.abs, known) if d not in created)
    journal = {"format": FORMAT, "txn": txn, "op": op, "fixes": fixes, "versions": versions or {},
               "started_at": utc_now(),
               "state_root": store.root, "files": entries, "created_dirs": created}
    journal.update(journal_extra)  # e.g. git_commits: HEAD of each root before apply --commit
    fault("journal")
    store.write_journal(journal)
    try:
        _write_files(writes)
        remove_empty_dirs(list(remove_dirs or []))
        fault("action")
        if purge:
            purge_pycache([w.abs for w in writes])
        fault("verify")
        verify()
        state = commit(txn)
        fault("state")
        state["txn"] = txn
        store.write_state(state)
    except BaseException:
        restore(store, journal)
        _discard(store, txn)
        raise
    fault("cleanup")
    finish(store, journal, recovering=False)
    return txn


def _write_files(writes: List[FileWrite]) -> None:
    """Each file through a temporary sibling and ``os.replace``, in order; then every new file
    and every touched directory made durable together (``sync_all``: one syncfs, or fsyncs
    in a few threads). That is before verification and the commit point; a crash earlier is
    rolled back from the (already durable) backups."""
    written: List[str] = []
    dirs: List[str] = []
    there: Set[str] = set()  # directories known to exist
    for w in writes:
        fault("write")
        if w.after is None:
            fault("rename")
            remove_file(w.abs, sync=False)
            dirs.append(os.path.dirname(w.abs))
            continue
        parent = os.path.dirname(w.abs)
        if parent not in there:
            for d in make_dirs(parent, sync=False):
                dirs.append(os.path.dirname(d))
            there.add(parent)
        mode = w.mode_after if w.mode_after is not None else 0o644
        tmp = write_temp(w.abs, w.after, mode, owner=w.owner, sync=False)
        fault("rename")
        os.replace(tmp, w.abs)
        written.append(w.abs)
    dirs.extend(os.path.dirname(p) for p in written)
    sync_all(written, sorted(set(dirs)))


def restore(store: Store, journal: Dict[str, Any]) -> None:
    """Put every file the journal lists back to its ``before`` bytes (or absence), and HEAD of
    each git root back where it was if this transaction committed there."""
    if journal.get("git_commits"):
        from . import gitcommit  # only a transaction that committed to git needs it

        gitcommit.undo(journal)
    for f in journal.get("files", []):
        path = f["abs"]
        tmp = temp_name(path)
        if os.path.lexists(tmp):
            os.unlink(tmp)
        if f.get("before_sha256") is None:
            if os.path.isfile(path) or os.path.islink(path):
                remove_file(path)
            continue
        mode = f.get("mode") if f.get("mode") is not None else 0o644
        current = read_bytes(path)
        if sha256_bytes(current) == f["before_sha256"]:
            if file_mode(path) != mode:
                os.chmod(path, mode)
            continue
        data = read_bytes(store.path(f["backup"])) if f.get("backup") else None
        if data is None or sha256_bytes(data) != f["before_sha256"]:
            raise TargetError("cannot restore %s: its backup %s is missing or damaged; the journal "
                              "%s lists the original sha256 %s. Restore the file by hand (e.g. from "
                              "git), then remove the journal" % (path, f.get("backup"),
                                                                 store.path("journal.json"),
                                                                 f["before_sha256"]), path=path)
        make_dirs(os.path.dirname(path))
        owner = tuple(f["owner"]) if f.get("owner") else None
        atomic_write(path, data, mode, owner=owner)  # type: ignore[arg-type]
    remove_empty_dirs(list(journal.get("created_dirs") or []))
    purge_pycache([f["abs"] for f in journal.get("files", [])])


def _discard(store: Store, txn: str) -> None:
    shutil.rmtree(store.path("txn", txn), ignore_errors=True)
    store.remove_journal()


def finish(store: Store, journal: Dict[str, Any], recovering: bool = True) -> None:
    """After the commit point: record history, keep or drop backups, drop the journal.

    ``recovering``: a crash may have come after the history line, so the history is read
    first (not needed right after the commit, when nothing was logged yet)."""
    txn = journal["txn"]
    if not recovering or txn not in store.history_txns():
        versions = journal.get("versions") or {}
        store.append_history({"event": journal["op"], "txn": txn, "outcome": "committed",
                              "fixes": [{"name": n, "version": versions.get(n)} for n in journal["fixes"]]})
    tdir = store.path("txn", txn)
    recorded = ({f["name"] for f in store.read_state().get("fixes", [])}
                if journal["op"] != "apply" else set())
    for fix in journal["fixes"]:
        dest = store.path("backups", fix)
        if journal["op"] == "apply":
            src = os.path.join(tdir, "fixes", fix)
            if os.path.isdir(src):
                shutil.rmtree(dest, ignore_errors=True)
                os.makedirs(store.path("backups"), exist_ok=True)
                os.replace(src, dest)
            elif not os.path.isdir(dest):
                os.makedirs(os.path.join(dest, "files"))
        elif fix not in recorded:
            shutil.rmtree(dest, ignore_errors=True)
    if os.path.isdir(store.path("backups")):
        fsync_dir(store.path("backups"))
    _discard(store, txn)


def recover(store: Store) -> List[Dict[str, Any]]:
    """Finish or undo whatever a killed run left; returns the ``recovered`` entries."""
    out: List[Dict[str, Any]] = []
    if os.path.exists(store.path(HOLDER)):
        store.end_writing()  # we hold the lock, so the run it names is gone
    journal = store.read_journal()
    if journal is not None:
        committed = store.read_state().get("txn") == journal["txn"]
        if committed:
            finish(store, journal)
        else:
            restore(store, journal)
            store.append_history({"event": "recovered", "txn": journal["txn"], "op": journal["op"],
                                  "outcome": "rolled-back",
                                  "fixes": [{"name": n} for n in journal["fixes"]]})
            _discard(store, journal["txn"])
        out.append({"txn": journal["txn"], "op": journal["op"], "fixes": list(journal["fixes"]),
                    "outcome": "completed" if committed else "rolled-back"})
    txn_root = store.path("txn")
    for name in sorted(os.listdir(txn_root)) if os.path.isdir(txn_root) else []:
        intent = {}
        try:
            with open(os.path.join(txn_root, name, "txn.json"), "rb") as fh:
                intent = json.loads(fh.read().decode("utf-8"))
        except (OSError, ValueError):
            pass
        shutil.rmtree(os.path.join(txn_root, name), ignore_errors=True)
        store.append_history({"event": "recovered", "txn": name, "op": intent.get("op"),
                              "outcome": "rolled-back", "note": "no file had been written",
                              "fixes": [{"name": n} for n in intent.get("fixes", [])]})
        out.append({"txn": name, "op": intent.get("op", "unknown"), "fixes": list(intent.get("fixes", [])),
                    "outcome": "rolled-back"})
    return out
