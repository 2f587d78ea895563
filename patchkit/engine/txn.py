"""The write transaction (docs/state.md). A failure before the commit point (``state.json``)
puts every file back; the next run (``recover``) undoes a crash before it and completes one after."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from contextlib import suppress
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, cast

from ..errors import ConcurrentChange, PatchkitError, PermissionDenied, TargetError
from . import procs
from .faults import fault
from .fsops import fsync_dir, missing_dirs, read_bytes, read_fd, sync_all, temp_of, write_json
from .hunks import sha256_bytes
from .paths import Roots
from .rootfs import RootDirs
from .store import FORMAT, HOLDER, Store, new_txn_id, utc_now, write_remedy
from .workspace import Entry, file_op


def backup_name(fix: str, i: int) -> str:
    """The i-th per-fix backup of ``fix`` after the commit, relative to ``.patchkit/``."""
    return "backups/%s/%d" % (fix, i)


def run_transaction(store: Store, roots: Roots, op: str, fixes: List[str], writes: List[Entry],
                    fix_backups: Dict[str, List[Tuple[str, str, bytes]]],
                    purge: bool, verify: Callable[[], None],
                    commit: Callable[[str], Dict[str, Any]],
                    versions: Optional[Dict[str, int]] = None,
                    remove_dirs: Optional[List[Tuple[str, str]]] = None,
                    journal_extra: Optional[Dict[str, Any]] = None) -> str:
    """Write ``writes`` all-or-nothing; ``commit(txn_id)`` returns the new state to record.
    ``fix_backups[fix][i]`` (root, path, before-bytes) is kept as ``backups/<fix>/<i>``;
    ``remove_dirs``: (root, dir relative to it) to remove if empty once the files are written."""
    before = store.listing()
    store.begin_writing(op)
    txns_before = set(os.listdir(store.path("txn"))) if os.path.isdir(store.path("txn")) else set()
    committed = False
    try:
        with RootDirs(roots) as dirs:
            txn = _transaction(store, dirs, op, fixes, writes, fix_backups, purge, verify, commit,
                               versions, remove_dirs or [], journal_extra or {})
        committed = True
        return txn
    except OSError as exc:  # e.g. a full disk: the files were put back (or a journal is kept)
        left = _what_is_left(store)
        raise PermissionDenied("cannot write %s: %s; %s (%s)"
                               % (exc.filename or store.root, exc.strerror or exc, write_remedy(exc), left),
                               path=exc.filename or store.root) from None
    finally:
        store.end_writing()
        with suppress(OSError):  # leftovers are harmless scaffolding; the real error matters more
            if not committed and not os.path.lexists(store.path("journal.json")):
                for name in set(os.listdir(store.path("txn"))) - txns_before:  # no file written
                    shutil.rmtree(store.path("txn", name), ignore_errors=True)
                store.undo_setup(before)


def _what_is_left(store: Store) -> str:
    """What a write failure left: nothing, or a journal the next run completes or undoes."""
    try:
        journal = store.read_journal()
        if journal is None:
            return "nothing was changed"
        done = store.read_state().get("txn") == journal.get("txn")
    except (OSError, PatchkitError):
        return "the journal %s is kept for the next run" % store.path("journal.json")
    return "the journal %s is kept and the next run %s" % (
        store.path("journal.json"), "completes the change (it was committed)" if done
        else "restores the files")


class _Changed(Exception):
    """A file did not hold the bytes read before when patchkit replaced it (``now``)."""

    def __init__(self, index: int, now: Optional[bytes], replaced: bool) -> None:
        super().__init__(index)
        self.index, self.now, self.replaced = index, now, replaced


def _transaction(store: Store, dirs: RootDirs, op: str, fixes: List[str], writes: List[Entry],
                 fix_backups: Dict[str, List[Tuple[str, str, bytes]]], purge: bool,
                 verify: Callable[[], None], commit: Callable[[str], Dict[str, Any]],
                 versions: Optional[Dict[str, int]], remove_dirs: List[Tuple[str, str]],
                 journal_extra: Dict[str, Any]) -> str:
    roots = dirs.roots
    rels = [roots.relative(w.root, w.abs) for w in writes]  # as on disk, from the root
    rel_of = {(w.root, w.path): rel for w, rel in zip(writes, rels)}
    txn = new_txn_id()
    tdir = store.path("txn", txn)
    os.makedirs(tdir)
    intent = os.path.join(tdir, "txn.json")  # made durable with the backups, below
    write_json(intent, {"format": FORMAT, "txn": txn, "op": op, "fixes": fixes,
                        "started_at": utc_now()}, durable=False)
    written: List[str] = [intent]
    # Per-fix backups first: the first fix's backup of a file is also the journal's
    first = {(w.root, w.path): w for w in writes if w.original is not None}
    origs: Dict[Tuple[str, str], str] = {}  # (root, path) -> backup, relative to .patchkit/
    for fix, files in fix_backups.items():
        for i, (root, path, data) in enumerate(files):
            fault("backup")
            rel = "txn/%s/fixes/%s/%d" % (txn, fix, i)
            w = first.get((root, path))
            original = w is not None and (root, path) not in origs and w.original == data
            dest = store.path(rel)
            if original:
                origs[(root, path)] = rel
                _keep(dirs, root, rel_of[(root, path)], dest, data)  # a hard link where it can
            else:  # bytes an earlier fix of this transaction made: never on disk, a copy
                _copy(dest, data)
            written.append(dest)  # a link too: the inode's data may not be on disk yet
    entries: List[Dict[str, Any]] = []
    for n, w in enumerate(writes):
        backup_rel = origs.get((w.root, w.path))
        if w.original is not None and backup_rel is None:  # no fix keeps it (a rollback): its own
            fault("backup")
            backup_rel = "txn/%s/orig/%d" % (txn, n)
            _keep(dirs, w.root, rels[n], store.path(backup_rel), w.original)
            written.append(store.path(backup_rel))
        # root-relative only: the journal must still name the right files after the tree moved
        entries.append({"root": w.root, "path": w.path, "rel": rels[n], "op": file_op(w.original, w.current),
                        "before_sha256": sha256_bytes(w.original), "after_sha256": sha256_bytes(w.current),
                        "mode": w.original_mode, "mode_after": w.mode,
                        "owner": list(w.owner) if w.owner else None,
                        "backup": backup_rel if w.original is not None else None})
    # every backup durable before the journal names it
    sync_all(written, [d for d, _dirs, _files in os.walk(tdir)] + [os.path.dirname(tdir)])
    created: List[List[str]] = []
    for w in writes:
        if w.current is not None:
            for d in missing_dirs(w.abs):
                pair = [w.root, roots.relative(w.root, d)]
                if pair not in created:
                    created.append(pair)
    journal: Dict[str, Any] = {"format": FORMAT, "txn": txn, "op": op, "fixes": fixes,
                               "versions": versions or {}, "started_at": utc_now(),
                               "files": entries, "created_dirs": created}
    journal.update(journal_extra)  # e.g. git_commits: HEAD of each root before apply --commit
    fault("journal")
    store.write_journal(journal)
    try:
        try:
            _write_files(dirs, writes, rels)
        except _Changed as changed:
            _record_change(store, journal, changed)
            w = writes[changed.index]
            raise ConcurrentChange(
                "%s:%s changed while patchkit was writing the target (another process wrote to "
                "it after patchkit read it); every file was put back as it was before this run, "
                "with that change kept, and nothing was applied. Stop whatever writes to it, "
                "then run again" % (w.root, w.path), root=w.root, path=w.path) from None
        journal["written"] = procs.clock()  # in memory only: the history event's time
        dirs.remove_empty_dirs(remove_dirs)
        fault("action")
        if purge:
            purge_bytecode(dirs, [(f["root"], f["rel"]) for f in entries], journal.get("python"))
        fault("verify")
        verify()
        state = commit(txn)
        fault("state")
        state["txn"] = txn
        store.write_state(state)
    except BaseException:
        restore(store, journal, dirs)
        _discard(store, txn)
        raise
    fault("cleanup")
    finish(store, journal, recovering=False)
    return txn


def _keep(dirs: RootDirs, root: str, rel: str, dest: str, data: bytes) -> None:
    """Keep the file's bytes ``data`` at ``dest``: a hard link where safe (docs/state.md,
    "Backups"), else a copy. A file no longer holding ``data`` stops the transaction."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    try:
        dirs.link_out(root, rel, dest)
    except OSError:  # another file system, protected_hardlinks, no links: copy
        _copy(dest, data)
        return
    fd = os.open(dest, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        same = stat.S_ISREG(st.st_mode) and st.st_size == len(data) and read_fd(fd) == data
    finally:
        os.close(fd)
    if same and st.st_nlink == 2:
        return
    os.unlink(dest)
    if not same:
        raise ConcurrentChange(
            "%s:%s changed since patchkit read it (another process is writing to it); nothing "
            "was written. Stop whatever writes to it, then run again" % (root, rel),
            root=root, path=rel)
    _copy(dest, data)  # linked elsewhere too: that name could write into the backup


def _copy(dest: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "wb") as fh:
        fh.write(data)


def _write_files(dirs: RootDirs, writes: List[Entry], rels: List[str]) -> None:
    """Each file through a temporary sibling and a rename, then all made durable; a replaced
    file's old inode holding other bytes than read raises ``_Changed``."""
    written: List[str] = []
    touched: Set[str] = set()
    for n, (w, rel) in enumerate(zip(writes, rels)):
        fault("write")
        dirs.close()  # each file walks from its root again: a directory swapped meanwhile is seen
        try:
            if w.current is None:
                fault("rename")
                old = dirs.open_file(w.root, rel)
                dirs.unlink(w.root, rel)
            else:
                mode = w.mode if w.mode is not None else 0o644
                dirs.write_temp(w.root, rel, w.current, mode, w.owner)
                fault("rename")
                if w.original is None:
                    old = None
                    if not _create(dirs, w.root, rel):
                        dirs.unlink(w.root, rel, temp=True)
                        raise _Changed(n, b"", replaced=False)
                else:
                    old = dirs.open_file(w.root, rel)
                    dirs.commit_temp(w.root, rel)
                written.append(w.abs)
        except OSError as exc:
            if exc.filename and os.path.isabs(str(exc.filename)):
                raise
            raise OSError(exc.errno, exc.strerror, w.abs) from None
        touched.add(os.path.dirname(w.abs))
        if w.original is not None:
            now = None
            if old is not None:
                try:
                    now = read_fd(old)
                finally:
                    os.close(old)
            if now != w.original:
                raise _Changed(n, now, replaced=True)
    sync_all(written, sorted(touched))


def _create(dirs: RootDirs, root: str, rel: str) -> bool:
    """Put the temporary file at ``rel`` only if nothing is there (False: something is)."""
    dfd, name = dirs.parent(root, rel)
    try:
        os.link(temp_of(name), name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links
        try:
            os.stat(name, dir_fd=dfd, follow_symlinks=False)
            return False
        except FileNotFoundError:
            os.replace(temp_of(name), name, src_dir_fd=dfd, dst_dir_fd=dfd)
            return True
    os.unlink(temp_of(name), dir_fd=dfd)
    return True


def _record_change(store: Store, journal: Dict[str, Any], changed: _Changed) -> None:
    """Make the journal restore what another process left in a file; a file that appeared where
    the transaction creates one was not touched and leaves the journal."""
    entry = journal["files"][changed.index]
    if not changed.replaced:
        journal["files"].pop(changed.index)
    elif changed.now is None:  # deleted meanwhile: restoring means removing what we wrote
        entry["before_sha256"], entry["backup"] = None, None
    else:
        backup = store.path(entry["backup"])
        if read_bytes(backup) != changed.now:
            _copy(backup + ".tmp", changed.now)
            os.replace(backup + ".tmp", backup)
            fsync_dir(os.path.dirname(backup))
        entry["before_sha256"] = sha256_bytes(changed.now)
    store.write_journal(journal)


def _rel(f: Dict[str, Any], roots: Roots) -> str:
    """A journal file's path relative to its root on disk (older journals: only ``path``)."""
    if f.get("rel"):
        return str(f["rel"])
    return roots.relative(f["root"], roots.resolve(f["root"], f["path"]))


def purge_bytecode(dirs: RootDirs, files: List[Tuple[str, str]], python: Optional[str]) -> None:
    """The ``__pycache__`` beside each changed file, and its ``.pyc`` under every
    ``pycache_prefix`` in use (the interpreter's, the running processes'; ``procs``)."""
    dirs.purge_pycache(files)
    with suppress(OSError):
        procs.purge_prefixed(dirs.roots, files, python)


def restore(store: Store, journal: Dict[str, Any], dirs: RootDirs) -> None:
    """Put every file the journal lists back to its ``before`` bytes (or absence), and HEAD of
    each git root where it was; a backup is renamed back into place (no free space needed)."""
    roots = dirs.roots
    if journal.get("git_commits"):
        from . import gitcommit  # only a transaction that committed to git needs it

        gitcommit.undo(journal, roots)
    touched: Set[Tuple[str, str]] = set()
    failed: List[BaseException] = []
    for f in journal.get("files", []):
        dirs.close()  # each file walks from its root again (rootfs)
        try:
            _restore_file(store, dirs, f, touched)
        except (OSError, PatchkitError) as exc:  # the others are still put back; the journal stays
            failed.append(exc)
    dirs.remove_empty_dirs(journal.get("created_dirs") or [])
    for root, rel_dir in sorted(touched):
        with suppress(OSError, PatchkitError):  # removed again with the directories the transaction created
            dirs.fsync_dir(root, rel_dir)
    purge_bytecode(dirs, [(f["root"], _rel(f, roots)) for f in journal.get("files", [])],
                   journal.get("python"))
    if failed:
        raise failed[0]


def _restore_file(store: Store, dirs: RootDirs, f: Dict[str, Any],
                  touched: Set[Tuple[str, str]]) -> None:
    root, rel = f["root"], _rel(f, dirs.roots)
    dirs.unlink(root, rel, temp=True)
    current = dirs.read(root, rel)
    touched.add((root, rel.rpartition("/")[0]))
    if f.get("before_sha256") is None:
        if current is not None and sha256_bytes(current) == f.get("after_sha256"):
            dirs.unlink(root, rel)
        return
    mode = cast(int, f.get("mode")) if f.get("mode") is not None else 0o644
    owner = tuple(f["owner"]) if f.get("owner") else None
    if current is not None and sha256_bytes(current) == f["before_sha256"]:
        dirs.chmod_chown(root, rel, mode, None)
        return
    backup = store.path(f["backup"]) if f.get("backup") else None
    data = read_bytes(backup) if backup else None
    if data is None or sha256_bytes(data) != f["before_sha256"]:
        raise TargetError("cannot restore %s:%s: its backup %s is missing or damaged; the "
                          "journal %s lists the original sha256 %s. Restore the file by hand "
                          "(e.g. from git), then remove the journal"
                          % (root, f.get("path"), backup, store.path("journal.json"),
                             f["before_sha256"]), path=f.get("path"))
    dirs.parent(root, rel, create=True)
    try:
        dirs.rename_in(backup, root, rel)  # type: ignore[arg-type]
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        dirs.write_temp(root, rel, data, mode, owner)  # another file system: a copy
        dirs.commit_temp(root, rel)
    dirs.chmod_chown(root, rel, mode, owner)  # type: ignore[arg-type]


def belongs(store: Store, journal: Dict[str, Any], roots: Roots) -> None:
    """Refuse to undo a journal naming a root this run lacks, or a file at neither its before
    nor its after bytes."""
    names = {r.name for r in roots}
    wanted = sorted({f["root"] for f in journal.get("files", [])} - names)
    if wanted:
        raise TargetError(
            "the journal %s of an interrupted %s lists files of root %s, which this run does not "
            "name; nothing was changed. Run again with that root (--root %s=PATH) so the "
            "interrupted run can be undone" % (store.path("journal.json"), journal.get("op"),
                                                ", ".join(wanted), wanted[0]),
            path=store.path("journal.json"), roots=wanted)
    odd = []
    with RootDirs(roots) as dirs:
        for f in journal.get("files", []):
            current = dirs.read(f["root"], _rel(f, roots))
            have = sha256_bytes(current)
            if have not in (f.get("before_sha256"), f.get("after_sha256")):
                odd.append("%s:%s holds %s; the interrupted run left it at %s (before) or %s "
                           "(after)" % (f["root"], f.get("path"), have or "nothing",
                                        f.get("before_sha256") or "nothing",
                                        f.get("after_sha256") or "nothing"))
    if odd:
        raise TargetError(
            "the journal %s of an interrupted %s (transaction %s) does not match this target; "
            "nothing was changed:\n- %s\nThe journal came with a copy of another tree, or these "
            "files were changed after the crash. Put each back to one of those states and run "
            "again, or, if you are sure, remove the journal (its automatic undo is then lost)"
            % (store.path("journal.json"), journal.get("op"), journal.get("txn"), "\n- ".join(odd)),
            path=store.path("journal.json"), files=odd)


def _discard(store: Store, txn: str) -> None:
    shutil.rmtree(store.path("txn", txn), ignore_errors=True)
    store.remove_journal()


def finish(store: Store, journal: Dict[str, Any], recovering: bool = True) -> None:
    """After the commit point: record history (unless done), keep or drop backups, drop the journal."""
    txn = journal["txn"]
    if not recovering or txn not in store.history_txns():
        versions = journal.get("versions") or {}
        _history(store, dict({"event": journal["op"], "txn": txn, "outcome": "committed",
                              "fixes": [{"name": n, "version": versions.get(n)} for n in journal["fixes"]],
                              "files": [[f["root"], f["path"]] for f in journal.get("files", [])]},
                             **(journal.get("written") or procs.clock())),  # restart pending
                 best_effort=recovering)
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
    committed = journal is not None and store.read_state().get("txn") == journal["txn"]
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
            _history(store, {"event": "recovered", "txn": journal["txn"], "op": journal["op"],
                             "outcome": "rolled-back",
                             "fixes": [{"name": n} for n in journal["fixes"]]}, best_effort=True)
            _discard(store, journal["txn"])
        out.append({"txn": journal["txn"], "op": journal["op"], "fixes": list(journal["fixes"]),
                    "outcome": "completed" if committed else "rolled-back"})
    txn_root = store.path("txn")
    for name in sorted(os.listdir(txn_root)) if os.path.isdir(txn_root) else []:
        try:  # a crash before the journal: no target file was written
            intent = json.loads(read_bytes(os.path.join(txn_root, name, "txn.json")) or b"{}")
        except (OSError, ValueError):
            intent = {}
        shutil.rmtree(os.path.join(txn_root, name), ignore_errors=True)
        fixes = list(intent.get("fixes", []))
        _history(store, {"event": "recovered", "txn": name, "op": intent.get("op"),
                         "outcome": "rolled-back", "note": "no file had been written",
                         "fixes": [{"name": n} for n in fixes]}, best_effort=True)
        out.append({"txn": name, "op": intent.get("op", "unknown"), "fixes": fixes,
                    "outcome": "rolled-back"})
    return out
