"""The write transaction (docs/state.md, "The transaction and its commit point"), an object in
StGit's manner with a small vocabulary: back up, write, (the caller) verify, commit the new
state. Used as a context manager: leaving the block before the commit point puts every file
back; a crash is undone or completed by the next run (``recovery``)."""

from __future__ import annotations

import os
import shutil
import stat
from contextlib import suppress
from types import TracebackType
from typing import Any, Dict, List, Optional, Set, Tuple, Type

from ..errors import ConcurrentChange, PatchkitError, PermissionDenied
from . import procs
from .faults import fault
from .fsops import fsync_dir, in_threads, missing_dirs, read_bytes, read_fd, sync_all, temp_of, write_json
from .hunks import sha256_bytes
from .paths import Roots
from .records import (STATE_BEFORE, Intent, Journal, JournalFile, Key, State, backup_name,
                      original_name, staged_backups)
from .recovery import discard, finish, purge_bytecode, restore, undo_point
from .rootfs import RootDirs
from .store import Store, new_txn_id, utc_now, write_details, write_failure
from .workspace import Entry, file_op

FixBackups = Dict[str, List[Tuple[str, str, bytes]]]  # fix -> (root, path, before-bytes)


class Transaction:
    """All-or-nothing writes of one op::

        with Transaction(store, roots, "apply", fixes, versions, python) as t:
            names = t.back_up(writes, fix_backups)  # txn.json, every backup, durable
            t.write(purge=True)                      # journal, the files, bytecode purged
            verify()                                 # the caller's; raising undoes it all
            t.commit(new_state)                      # state.json: the commit point; cleanup
    """

    def __init__(self, store: Store, roots: Roots, op: str, fixes: List[str],
                 versions: Optional[Dict[str, Any]] = None, python: Optional[str] = None,
                 git_commits: Optional[List[Dict[str, Any]]] = None,
                 before: Optional[State] = None) -> None:
        self.store, self.roots, self.op, self.fixes = store, roots, op, list(fixes)
        self.versions, self.python, self.git_commits = dict(versions or {}), python, git_commits
        self.before = before  # the state it replaces: kept for an undo (records.UNDO)
        self.id = new_txn_id()
        self.writes: List[Entry] = []
        self.rels: List[str] = []
        self.journal: Optional[Journal] = None
        self._origs: Dict[Key, str] = {}  # (root, path) -> its original's backup
        self._committed = False  # state.json written
        self._done = False  # and cleaned up
        self._dirs: Optional[RootDirs] = None

    @property
    def keeps_undo_point(self) -> bool:
        """Given the state it replaces and making no git commits (whose undo is a revert)."""
        return self.before is not None and not self.git_commits

    @property
    def dirs(self) -> RootDirs:
        assert self._dirs is not None, "a Transaction is used inside its with block"
        return self._dirs

    # -- the write phase: set up, and torn down again unless committed ----------------------

    def __enter__(self) -> "Transaction":
        self._listing = self.store.listing()
        self.store.begin_writing(self.op)
        txn_dir = self.store.path("txn")
        self._txns_before = set(os.listdir(txn_dir)) if os.path.isdir(txn_dir) else set()
        try:
            self._dirs = RootDirs(self.roots).__enter__()
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        error = exc
        try:
            try:
                if self.journal is not None and not self._committed:
                    restore(self.store, self.journal, self.dirs)  # before the commit point
                    discard(self.store, self.id)
            finally:
                if self._dirs is not None:
                    self._dirs.__exit__(None, None, None)
        except BaseException as failed:  # a failed restore: the journal stays for the next run
            error = failed
        if isinstance(error, OSError):  # e.g. a full disk: the files were put back
            store = self.store
            error = PermissionDenied("%s (%s)" % (write_failure(error, store.root),
                                                  _what_is_left(store)),
                                     **write_details(error, store.root))
        self._tear_down()
        if error is not None and error is not exc:
            raise error from None

    def _tear_down(self) -> None:
        store = self.store
        store.end_writing()
        with suppress(OSError):  # leftovers are harmless scaffolding; the real error matters more
            if not self._done and not os.path.lexists(store.path("journal.json")):
                for name in set(os.listdir(store.path("txn"))) - self._txns_before:
                    shutil.rmtree(store.path("txn", name), ignore_errors=True)  # no file written
                store.undo_setup(self._listing)

    # -- back up -----------------------------------------------------------------------------

    def back_up(self, writes: List[Entry], fix_backups: FixBackups) -> Dict[str, Dict[Key, str]]:
        """Keep the bytes every file of ``writes`` has now, and each fix's before-bytes of its
        files (``fix_backups``), durably, before the journal names them; returns, per fix, the
        backup name of each of its files in ``state.json`` (``backup_name``)."""
        store = self.store
        self.writes = list(writes)
        self.rels = [self.roots.relative(w.root, w.abs) for w in writes]  # as on disk
        tdir = store.path("txn", self.id)
        os.makedirs(tdir)
        intent = os.path.join(tdir, "txn.json")  # made durable with the backups, below
        write_json(intent, Intent(self.id, self.op, self.fixes, utc_now()).to_json(), durable=False)
        made: Set[str] = set()  # the backup directories made so far
        written = [intent] + self._back_up_fixes(fix_backups, made)
        if self.keeps_undo_point and self.before is not None:  # what an undo puts back
            write_json(os.path.join(tdir, STATE_BEFORE), self.before.to_json(), durable=False)
            written.append(os.path.join(tdir, STATE_BEFORE))
        for n, w in enumerate(writes):
            if w.original is not None and (w.root, w.path) not in self._origs:
                fault("backup")  # no fix keeps it (a rollback): the transaction's own copy
                self._origs[(w.root, w.path)] = original_name(self.id, n)
                _keep(self.dirs, w.root, self.rels[n], store.path(original_name(self.id, n)),
                      w.original, made)
                written.append(store.path(original_name(self.id, n)))
        # every backup durable before the journal names it
        sync_all(written, [d for d, _dirs, _files in os.walk(tdir)] + [os.path.dirname(tdir)])
        return {fix: {(root, path): backup_name(fix, i) for i, (root, path, _data) in enumerate(files)}
                for fix, files in fix_backups.items()}

    def _back_up_fixes(self, fix_backups: FixBackups, made: Set[str]) -> List[str]:
        """Per-fix backups, first: the first fix's backup of a file is also the journal's
        original of it (a hard link where it can); a later fix's bytes are a copy."""
        first = {(w.root, w.path): (w, rel) for w, rel in zip(self.writes, self.rels)
                 if w.original is not None}
        written = []
        for fix, files in fix_backups.items():
            for i, (root, path, data) in enumerate(files):
                fault("backup")
                rel = "%s/%d" % (staged_backups(self.id, fix), i)
                dest = self.store.path(rel)
                w, on_disk = first.get((root, path), (None, ""))
                if w is not None and (root, path) not in self._origs and w.original == data:
                    self._origs[(root, path)] = rel
                    _keep(self.dirs, root, on_disk, dest, data, made)
                else:  # bytes an earlier fix of this transaction made: never on disk
                    _copy(dest, data, made)
                written.append(dest)  # a link too: the inode's data may not be on disk yet
        return written

    # -- write -------------------------------------------------------------------------------

    def write(self, purge: bool, remove_dirs: Optional[List[Tuple[str, str]]] = None) -> None:
        """The journal, then every file (a file another process wrote meanwhile stops it all:
        ``ConcurrentChange``), then ``remove_dirs`` (root, dir) if empty, then bytecode, then
        (an apply) the directories its deletes left empty."""
        journal = self._journal()
        fault("journal")
        self.store.write_journal(journal)
        self.journal = journal
        self.store.wrote = True  # from here, a failure puts files back: not "nothing written"
        try:
            _write_files(self.dirs, self.writes, self.rels)
        except _Changed as changed:
            _record_change(self.store, self.journal, changed)
            w = self.writes[changed.index]
            raise ConcurrentChange(
                "%s:%s changed while patchkit was writing the target (another process wrote to "
                "it after patchkit read it); every file was put back as it was before this run, "
                "with that change kept, and nothing was applied. Stop whatever writes to it, "
                "then run again" % (w.root, w.path), root=w.root, path=w.path) from None
        self.journal.written = procs.clock()  # in memory only: the history event's time
        self.dirs.remove_empty_dirs(remove_dirs or [])
        fault("action")
        if purge:
            purge_bytecode(self.dirs, [(f.root, f.rel or f.path) for f in self.journal.files],
                           self.python)
        if self.op == "apply":
            # as git apply: a directory its deletes emptied goes (a restore, a rollback or an
            # undo makes it again for the files it puts back)
            self.dirs.remove_empty_dirs(self._emptied())
        fault("verify")

    def _emptied(self) -> List[Tuple[str, str]]:
        """The (root, directory) above each file this transaction deletes, to its root: those
        left empty are removed (an empty directory imports as a namespace package)."""
        out: Set[Tuple[str, str]] = set()
        for w, rel in zip(self.writes, self.rels):
            if w.current is None and w.original is not None:
                head = rel.rpartition("/")[0]
                while head:
                    out.add((w.root, head))
                    head = head.rpartition("/")[0]
        return sorted(out)

    def _journal(self) -> Journal:
        entries = []
        for n, w in enumerate(self.writes):  # root-relative only: trees move
            entries.append(JournalFile(
                w.root, w.path, self.rels[n], file_op(w.original, w.current),
                w.sha256(w.original), w.sha256(w.current), w.original_mode, w.mode,
                w.owner, self._origs.get((w.root, w.path)) if w.original is not None else None))
        created: List[List[str]] = []
        for w in self.writes:
            for d in missing_dirs(w.abs) if w.current is not None else []:
                pair = [w.root, self.roots.relative(w.root, d)]
                if pair not in created:
                    created.append(pair)
        return Journal(self.id, self.op, self.fixes, self.versions, utc_now(), entries, created,
                       self.git_commits, self.python)

    # -- commit ------------------------------------------------------------------------------

    def commit(self, state: State) -> str:
        """The commit point (``state.json`` naming this transaction), then the cleanup."""
        assert self.journal is not None, "commit() follows write()"
        fault("state")
        state.txn = self.id
        try:
            self.store.write_state(state)
        except BaseException:  # a signal, or a failed fsync of the directory, after the rename
            if self._named():  # is after the commit point: the change stands, nothing is put back
                self._mark_committed()
            raise
        self._mark_committed()
        fault("cleanup")
        finish(self.store, self.journal, recovering=False)
        if self.keeps_undo_point and undo_point(self.store) == self.id:  # kept: say so
            self.store.undo_txn = self.id
        self._done = True
        return self.id

    def _mark_committed(self) -> None:
        self._committed = True
        self.store.committed = self.id

    def _named(self) -> bool:
        """Whether ``state.json`` names this transaction: its rename, the commit point, is done."""
        try:
            return self.store.read_state().txn == self.id
        except (OSError, PatchkitError):
            return False


def _what_is_left(store: Store) -> str:
    """What a write failure left: nothing, or a journal the next run completes or undoes."""
    try:
        journal = store.read_journal()
        if journal is None:
            return "nothing was changed"
        done = store.read_state().txn == journal.txn
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


def _keep(dirs: RootDirs, root: str, rel: str, dest: str, data: bytes,
          made: Optional[Set[str]] = None) -> None:
    """Keep the file's bytes ``data`` at ``dest``: a hard link where safe (docs/state.md,
    "Backups"), else a copy. A file no longer holding ``data`` stops the transaction.
    ``made``: the directories made already (each is made once, not once per file)."""
    _make_parent(dest, made)
    try:
        dirs.link_out(root, rel, dest)
    except OSError:  # another file system, protected_hardlinks, no links: copy
        _copy(dest, data, made)
        return
    fd = os.open(dest, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        same = stat.S_ISREG(st.st_mode) and st.st_size == len(data) and read_fd(fd, st.st_size) == data
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
    _copy(dest, data, made)  # linked elsewhere too: that name could write into the backup


def _make_parent(dest: str, made: Optional[Set[str]]) -> None:
    parent = os.path.dirname(dest)
    if made is None or parent not in made:
        os.makedirs(parent, exist_ok=True)
        if made is not None:
            made.add(parent)


def _copy(dest: str, data: bytes, made: Optional[Set[str]] = None) -> None:
    _make_parent(dest, made)
    with open(dest, "wb") as fh:
        fh.write(data)


def _write_files(dirs: RootDirs, writes: List[Entry], rels: List[str]) -> None:
    """Each file through a temporary sibling and a rename, then all made durable; a replaced
    file's old inode holding other bytes than read raises ``_Changed``. The temporary files
    are made first, several at once (:func:`_make_temps`); the renames follow one by one."""
    _make_temps(dirs.roots, writes, rels)
    written: List[str] = []
    touched: Set[str] = set()
    for n, (w, rel) in enumerate(zip(writes, rels)):
        dirs.close()  # each file walks from its root again: a directory swapped meanwhile is seen
        try:
            if w.current is None:  # a delete: no temporary file, its ``write`` point is here
                fault("write")
            fault("rename")
            if w.current is None:
                old = dirs.open_file(w.root, rel)
                dirs.unlink(w.root, rel)
            else:
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
            raise _named(exc, w) from None
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


def _make_temps(roots: Roots, writes: List[Entry], rels: List[str]) -> None:
    """The temporary sibling of every file written, in a few threads: making a file is most of
    a write's time on some file systems, and they overlap (docs/performance.md). Each thread
    walks from the root for each file, as the renames do; a failure stops them all, and the
    journal's restore removes every temporary file made."""
    made = [n for n, w in enumerate(writes) if w.current is not None]

    def make(i: int) -> None:
        n = made[i]
        w, own = writes[n], RootDirs(roots)
        try:
            fault("write")
            assert w.current is not None
            own.write_temp(w.root, rels[n], w.current, w.mode if w.mode is not None else 0o644,
                           w.owner)
        except OSError as exc:
            raise _named(exc, w) from None
        finally:
            own.close()

    in_threads(len(made), make)


def _named(exc: OSError, w: Entry) -> OSError:
    """``exc`` naming the target file, unless it names an absolute path already."""
    if exc.filename and os.path.isabs(str(exc.filename)):
        return exc
    return OSError(exc.errno, exc.strerror, w.abs)


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


def _record_change(store: Store, journal: Journal, changed: _Changed) -> None:
    """Make the journal restore what another process left in a file; a file that appeared where
    the transaction creates one was not touched and leaves the journal."""
    entry = journal.files[changed.index]
    if not changed.replaced:
        journal.files.pop(changed.index)
    elif changed.now is None:  # deleted meanwhile: restoring means removing what we wrote
        entry.before_sha256, entry.backup = None, None
    else:
        assert entry.backup is not None
        backup = store.path(entry.backup)
        if read_bytes(backup) != changed.now:
            _copy(backup + ".tmp", changed.now)
            os.replace(backup + ".tmp", backup)
            fsync_dir(os.path.dirname(backup))
        entry.before_sha256 = sha256_bytes(changed.now)
    store.write_journal(journal)
