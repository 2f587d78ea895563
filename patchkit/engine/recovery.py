"""Putting a journal's files back, and finishing a transaction after its commit point: what a
failed transaction does before it raises, and what the next run does after a crash
(docs/state.md, "Recovery"). Nothing here writes a target file but through its backup."""

from __future__ import annotations

import errno
import json
import os
import shutil
from contextlib import suppress
from typing import Any, Dict, List, Optional, Set, Tuple

from ..errors import PatchkitError, TargetError
from . import procs
from .fsops import fsync_dir, read_bytes
from .hunks import sha256_bytes
from .paths import Roots
from .pycache import purge_prefixed
from .records import (BACKUPS, STATE_BEFORE, UNDO, Intent, Journal, JournalFile, fix_backups,
                      staged_backups)
from .rootfs import RootDirs
from .store import HOLDER, Store


def on_disk(f: JournalFile, roots: Roots) -> str:
    """A journal file's path relative to its root on disk (older journals: only ``path``)."""
    if f.rel:
        return f.rel
    return roots.relative(f.root, roots.resolve(f.root, f.path))


def purge_bytecode(dirs: RootDirs, files: List[Tuple[str, str]], python: Optional[str]) -> None:
    """The ``__pycache__`` beside each changed file, and its ``.pyc`` under every
    ``pycache_prefix`` in use (the interpreter's, the running processes'; ``pycache``)."""
    dirs.purge_pycache(files)
    wanted = [(r, p) for r, p in files if p.endswith(".py")]
    if wanted:
        with suppress(OSError):
            purge_prefixed(dirs.roots, wanted, procs.prefixes_in_use(dirs.roots, python))


def restore(store: Store, journal: Journal, dirs: RootDirs) -> None:
    """Put every file the journal lists back to its ``before`` bytes (or absence), and HEAD of
    each git root where it was; a backup is renamed back into place (no free space needed)."""
    roots = dirs.roots
    if journal.git_commits:
        from . import gitcommit  # only a transaction that committed to git needs it

        gitcommit.undo(journal.to_json(), roots)
    touched: Set[Tuple[str, str]] = set()
    failed: List[BaseException] = []
    for f in journal.files:
        dirs.close()  # each file walks from its root again (rootfs)
        try:
            _restore_file(store, dirs, f, touched)
        except (OSError, PatchkitError) as exc:  # the others are still put back; the journal stays
            failed.append(exc)
    dirs.remove_empty_dirs([(str(d[0]), str(d[1])) for d in journal.created_dirs
                            if isinstance(d, list) and len(d) == 2])
    for root, rel_dir in sorted(touched):
        with suppress(OSError, PatchkitError):  # removed again with the directories the transaction created
            dirs.fsync_dir(root, rel_dir)
    purge_bytecode(dirs, [(f.root, on_disk(f, roots)) for f in journal.files], journal.python)
    if failed:
        raise failed[0]


def _restore_file(store: Store, dirs: RootDirs, f: JournalFile,
                  touched: Set[Tuple[str, str]]) -> None:
    root, rel = f.root, on_disk(f, dirs.roots)
    dirs.unlink(root, rel, temp=True)
    current = dirs.read(root, rel)
    touched.add((root, rel.rpartition("/")[0]))
    if f.before_sha256 is None:
        if current is not None and sha256_bytes(current) == f.after_sha256:
            dirs.unlink(root, rel)
        return
    mode = f.mode if f.mode is not None else 0o644
    if current is not None and sha256_bytes(current) == f.before_sha256:
        dirs.chmod_chown(root, rel, mode, None)
        return
    backup = store.path(f.backup) if f.backup else None
    data = read_bytes(backup) if backup else None
    if backup is None or data is None or sha256_bytes(data) != f.before_sha256:
        raise TargetError("cannot restore %s:%s: its backup %s is missing or damaged; the "
                          "journal %s lists the original sha256 %s. Restore the file by hand "
                          "(e.g. from git), then remove the journal"
                          % (root, f.path, backup, store.path("journal.json"),
                             f.before_sha256), path=f.path)
    dirs.parent(root, rel, create=True)
    try:
        dirs.rename_in(backup, root, rel)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        dirs.write_temp(root, rel, data, mode, f.owner)  # another file system: a copy
        dirs.commit_temp(root, rel)
    dirs.chmod_chown(root, rel, mode, f.owner)


def belongs(store: Store, journal: Journal, roots: Roots) -> None:
    """Refuse to undo a journal naming a root this run lacks, or a file at neither its before
    nor its after bytes."""
    names = {r.name for r in roots}
    wanted = sorted({f.root for f in journal.files} - names)
    if wanted:
        raise TargetError(
            "the journal %s of an interrupted %s lists files of root %s, which this run does not "
            "name; nothing was changed. Run again with that root (--root %s=PATH) so the "
            "interrupted run can be undone" % (store.path("journal.json"), journal.op,
                                                ", ".join(wanted), wanted[0]),
            path=store.path("journal.json"), roots=wanted)
    odd = []
    with RootDirs(roots) as dirs:
        for f in journal.files:
            have = sha256_bytes(dirs.read(f.root, on_disk(f, roots)))
            if have not in (f.before_sha256, f.after_sha256):
                odd.append("%s:%s holds %s; the interrupted run left it at %s (before) or %s "
                           "(after)" % (f.root, f.path, have or "nothing",
                                        f.before_sha256 or "nothing", f.after_sha256 or "nothing"))
    if odd:
        raise TargetError(
            "the journal %s of an interrupted %s (transaction %s) does not match this target; "
            "nothing was changed:\n- %s\nThe journal came with a copy of another tree, or these "
            "files were changed after the crash. Put each back to one of those states and run "
            "again, or, if you are sure, remove the journal (its automatic undo is then lost)"
            % (store.path("journal.json"), journal.op, journal.txn, "\n- ".join(odd)),
            path=store.path("journal.json"), files=odd)


def discard(store: Store, txn: str) -> None:
    """The transaction's scratch, then the journal."""
    shutil.rmtree(store.path("txn", txn), ignore_errors=True)
    store.remove_journal()


def finish(store: Store, journal: Journal, recovering: bool = True) -> None:
    """After the commit point: record history (unless done), keep or drop backups, drop the journal."""
    txn = journal.txn
    if not recovering or txn not in store.history_txns():
        versions = journal.versions
        _history(store, dict({"event": journal.op, "txn": txn, "outcome": "committed",
                              "fixes": [{"name": n, "version": versions.get(n)} for n in journal.fixes],
                              "files": [[f.root, f.path] for f in journal.files]},
                             **(journal.written or procs.clock())),  # restart pending
                 best_effort=recovering)
    recorded = set(store.read_state().names()) if journal.op != "apply" else set()
    tdir, point = store.path("txn", txn), store.path(UNDO)
    # the backups this transaction ends go to its undo point, when it keeps one
    keep = journal.op in UNDOABLE and os.path.isfile(os.path.join(tdir, STATE_BEFORE))
    for fix in journal.fixes:
        dest = store.path(fix_backups(fix))
        if journal.op == "apply":
            src = store.path(staged_backups(txn, fix))
            if os.path.isdir(src):
                if os.path.isdir(dest):  # the backups it replaces: the undo point keeps them
                    _set_aside(dest, tdir, fix)
                os.makedirs(store.path(BACKUPS), exist_ok=True)
                os.replace(src, dest)
            elif not os.path.isdir(dest):
                os.makedirs(os.path.join(dest, "files"))
        elif journal.op == "undo":  # the undone apply's fixes get their backups back
            prev = os.path.join(point, "prev", fix)
            if os.path.isdir(prev):
                shutil.rmtree(dest, ignore_errors=True)
                os.replace(prev, dest)
            elif fix not in recorded:
                shutil.rmtree(dest, ignore_errors=True)
        elif fix not in recorded and keep and os.path.isdir(dest):
            _set_aside(dest, tdir, fix)
        elif fix not in recorded:
            shutil.rmtree(dest, ignore_errors=True)
    if os.path.isdir(store.path(BACKUPS)):
        fsync_dir(store.path(BACKUPS))
    _keep_undo_point(store, journal)
    discard(store, txn)


def _set_aside(dest: str, tdir: str, fix: str) -> None:
    """Move a fix's backups the transaction replaces or ends into its directory (``prev/``),
    which becomes the undo point."""
    os.makedirs(os.path.join(tdir, "prev"), exist_ok=True)
    os.replace(dest, os.path.join(tdir, "prev", fix))


#: The ops whose transaction keeps an undo point (docs/state.md, "Undo").
UNDOABLE = ("apply", "rollback")


def _keep_undo_point(store: Store, journal: Journal) -> None:
    """An apply's or rollback's transaction directory (its originals, the backups it replaced
    or ended, the state before it) becomes the undo point, its journal moved in last; any
    other commit ends the last one (docs/state.md, "Undo"). Renames only, so a recovery on a
    full disk does it too; it may run again after a crash. The point is a convenience:
    failing to keep it drops it."""
    tdir, point = store.path("txn", journal.txn), store.path(UNDO)
    try:
        if journal.op in UNDOABLE:
            if os.path.isfile(os.path.join(tdir, STATE_BEFORE)):
                shutil.rmtree(point, ignore_errors=True)
                os.replace(tdir, point)
            if _txn_of(os.path.join(point, "txn.json")) == journal.txn:
                if os.path.exists(store.path("journal.json")):
                    os.replace(store.path("journal.json"), os.path.join(point, "journal.json"))
                    fsync_dir(store.dir)
                return
    except OSError:
        pass
    shutil.rmtree(point, ignore_errors=True)


def drop_undo_point(store: Store) -> None:
    """End the undo point: the state changed without a transaction (a lost record dropped)."""
    shutil.rmtree(store.path(UNDO), ignore_errors=True)


def undo_point(store: Store) -> Optional[str]:
    """The transaction the undo point can undo (None: there is none, or only part of one:
    its journal, moved in last, is not there yet). Read from its small intent, ``txn.json``."""
    if not os.path.isfile(store.path(UNDO, "journal.json")):
        return None
    return _txn_of(store.path(UNDO, "txn.json"))


def _txn_of(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as fh:
            txn = json.loads(fh.read()).get("txn")
    except (OSError, ValueError, AttributeError):
        return None
    return str(txn) if txn else None


def _history(store: Store, event: Dict[str, Any], best_effort: bool) -> None:
    """Append a history line; ``best_effort``: skipped on a full disk (a recovery)."""
    try:
        store.append_history(event)
    except OSError as exc:
        if not best_effort or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise


def recover(store: Store, roots: Roots) -> List[Dict[str, Any]]:
    """Finish or undo whatever a killed run left; returns the ``recovered`` entries."""
    out: List[Dict[str, Any]] = []
    journal = store.read_journal()
    committed = journal is not None and store.read_state().txn == journal.txn
    if journal is not None and not committed:
        belongs(store, journal, roots)  # before anything is touched, .patchkit/ included
    if os.path.exists(store.path(HOLDER)):
        store.end_writing()  # we hold the lock, so the run it names is gone
    if journal is not None:
        if committed:
            finish(store, journal)
        else:
            with RootDirs(roots) as dirs:
                restore(store, journal, dirs)
            _history(store, {"event": "recovered", "txn": journal.txn, "op": journal.op,
                             "outcome": "rolled-back",
                             "fixes": [{"name": n} for n in journal.fixes]}, best_effort=True)
            discard(store, journal.txn)
        out.append({"txn": journal.txn, "op": journal.op, "fixes": list(journal.fixes),
                    "outcome": "completed" if committed else "rolled-back"})
    txn_root = store.path("txn")
    for name in sorted(os.listdir(txn_root)) if os.path.isdir(txn_root) else []:
        try:  # a crash before the journal: no target file was written
            data = json.loads(read_bytes(os.path.join(txn_root, name, "txn.json")) or b"{}")
        except (OSError, ValueError):
            data = {}
        intent = Intent.from_json(data, name)
        shutil.rmtree(os.path.join(txn_root, name), ignore_errors=True)
        _history(store, {"event": "recovered", "txn": name, "op": intent.op,
                         "outcome": "rolled-back", "note": "no file had been written",
                         "fixes": [{"name": n} for n in intent.fixes]}, best_effort=True)
        out.append({"txn": name, "op": intent.op or "unknown", "fixes": intent.fixes,
                    "outcome": "rolled-back"})
    return out
