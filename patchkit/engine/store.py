"""``.patchkit/`` in the state root (formats in docs/state.md), created only when a transaction
starts writing, and the lock: an flock on the state root directory itself."""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import stat
import time
from contextlib import contextmanager, suppress
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Tuple, TypeVar

from ..errors import LockBusy, PermissionDenied, TargetError
from .fsops import failed_file, fsync_dir, read_bytes, temp_of, write_json
from .records import FORMAT, Damaged, Journal, State

T = TypeVar("T")
DIRNAME = ".patchkit"
HOLDER = "lock-holder.json"
#: the phase ``lock-holder.json`` names while a run's hooks run (docs/state.md, "Lock")
HOOKS = "hooks"
#: the state roots (device, inode) whose lock this process holds across several runs
#: (:meth:`Store.hold`): a run on one of them takes no lock of its own
_HELD: Dict[Tuple[int, int], str] = {}
#: who hears that a run of this process waits for a lock (:meth:`Store.telling`), innermost last
_ON_WAIT: List[Callable[[str], None]] = []


def hostname() -> str:
    return os.uname().nodename


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace(
        "+00:00", "Z")


def new_txn_id() -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return "%s-%s" % (stamp, os.urandom(4).hex())


class Store:
    def __init__(self, root_path: str) -> None:
        self.root = root_path
        self.dir = os.path.join(root_path, DIRNAME)
        self.undo_txn: Optional[str] = None  # this run's transaction, when it kept an undo point
        self.undoes: Optional[str] = None  # an undo's: the transaction it puts back (or would)
        self.wrote = False  # a transaction began writing the target (its failure undid that)
        self.committed: Optional[str] = None  # a transaction of this run reached its commit point

    def path(self, *parts: str) -> str:
        return os.path.join(self.dir, *parts)

    def exists(self) -> bool:
        return os.path.isdir(self.dir)

    def check(self) -> None:
        """Refuse a ``.patchkit`` (or its ``txn``/``backups``) that is a symlink or not a directory."""
        for name in ("", "txn", "backups", "undo"):
            path = self.path(name) if name else self.dir
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                if not name:
                    return
                continue
            except OSError as exc:
                raise TargetError("cannot look at %s: %s" % (path, exc.strerror), path=path) from None
            if stat.S_ISLNK(st.st_mode):
                raise TargetError(
                    "%s is a symlink (to %s); patchkit keeps its state, history and backups "
                    "inside the target and will not follow it. Remove the link (if it points at "
                    "patchkit state, move that back as a real directory) and run again"
                    % (path, os.readlink(path)), path=path)
            if not stat.S_ISDIR(st.st_mode):
                raise TargetError(
                    "%s is not a directory; patchkit keeps its state there. Move it aside "
                    "(e.g. mv %s %s.bak) and run again" % (path, path, path), path=path)

    def ensure(self) -> None:
        """Create ``.patchkit/`` with its ``.gitignore``; refuse clearly if the root is read-only."""
        try:
            if not os.path.isdir(self.dir):
                os.mkdir(self.dir, 0o755)
                fsync_dir(self.root)
            ignore = self.path(".gitignore")
            if not os.path.exists(ignore):
                with open(ignore, "w") as fh:
                    fh.write("*\n")
                    fh.flush()
                    os.fsync(fh.fileno())
        except OSError as exc:
            raise PermissionDenied(write_failure(exc, self.dir), **write_details(exc, self.dir)) from None

    # -- lock ------------------------------------------------------------------------------

    @staticmethod
    @contextmanager
    def telling(on_wait: Callable[[str], None]) -> Iterator[None]:
        """Within the block, a run of this process that has to wait for a target's lock first
        calls ``on_wait`` with what it waits for (the CLI's progress line): the engine itself
        prints nothing."""
        _ON_WAIT.append(on_wait)
        try:
            yield
        finally:
            _ON_WAIT.pop()

    @staticmethod
    def listener() -> Optional[Callable[[str], None]]:
        """Who hears of a wait now (the innermost :meth:`telling`'s ``on_wait``), else None: an
        ``ssh://`` session passes on what the engine on the host says of its wait."""
        return _ON_WAIT[-1] if _ON_WAIT else None

    @contextmanager
    def locked(self, timeout: float, write: bool) -> Iterator[bool]:
        """Hold an exclusive flock on the state root for the block; yields whether it is held (a
        read-only run that cannot open or lock the directory goes on without it, and so does
        one that finds the holder running its hooks). Within :meth:`hold`, the lock is held."""
        if self._key() in _HELD:
            yield True
            return
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            if write:
                raise PermissionDenied("cannot open the state root %s to lock it: %s; make it "
                                       "readable (or run as its owner)" % (self.root, exc.strerror),
                                       path=self.root) from None
            fd = -1
        try:  # closing the descriptor releases the lock
            yield fd >= 0 and self._acquire(fd, timeout, write)
        finally:
            if fd >= 0:
                os.close(fd)

    def _acquire(self, fd: int, timeout: float, write: bool) -> bool:
        deadline = time.monotonic() + max(0.0, float(timeout))
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                holder = self.lock_holder()
                in_hooks = holder.get("phase") == HOOKS and holder.get("verified")
                if in_hooks and not write:  # its change is made: a reader does not wait
                    return False
                if in_hooks and _is_ancestor(str(holder.get("pid"))):
                    raise LockBusy(
                        "this run was started by the --after-cmd or --health-cmd of patchkit "
                        "run %s, which holds the lock on %s until its hooks and any undo are "
                        "done: a hook cannot change the target it follows (read-only runs, "
                        "such as patchkit status, work). Change it after that run ends"
                        % (holder.get("pid"), self.root),
                        lock=self.root, pid=holder.get("pid"), holder=holder)
                if time.monotonic() >= deadline:
                    raise LockBusy("another patchkit run (%s) holds the lock on %s; waited %.1fs. "
                                   "Wait for it to finish, or wait longer with --lock-timeout SECONDS"
                                   % (describe_holder(holder), self.root, timeout),
                                   lock=self.root, pid=holder.get("pid"), holder=holder) from None
                if not told and _ON_WAIT:  # what the caller shows while this run waits
                    told = True
                    _ON_WAIT[-1]("waiting for the lock on %s: another patchkit run (%s) holds "
                                 "it; waiting up to %gs (--lock-timeout)"
                                 % (self.root, describe_holder(holder), timeout))
                time.sleep(0.05)
            except OSError as exc:  # a file system without flock (some network mounts)
                if write:
                    raise TargetError("cannot lock the state root %s: %s; keep .patchkit's root on "
                                      "a local file system" % (self.root, exc.strerror),
                                      path=self.root) from None
                return False

    def _key(self) -> Optional[Tuple[int, int]]:
        try:
            st = os.stat(self.root)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    @contextmanager
    def hold(self, timeout: float, op: str) -> Iterator[bool]:
        """Hold the lock across several runs in this process (a change, its hooks, their undo):
        each run's own :meth:`locked` then takes none. Yields whether it is held: a state root
        that cannot be opened is left to the first run to refuse."""
        key = self._key()
        if key is None or key in _HELD:
            yield key is not None
            return
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            yield False
            return
        try:  # closing the descriptor releases the lock
            try:
                self._acquire(fd, timeout, write=True)
            except TargetError:  # no flock here: each run says so itself
                yield False
                return
            _HELD[key] = op
            try:
                yield True
            finally:
                del _HELD[key]
                self.end_hooks()
        finally:
            os.close(fd)

    def begin_hooks(self) -> None:
        """Say in ``lock-holder.json`` that the lock's holder runs its hooks, the change made and
        nothing being written: a read-only run then reads without waiting (best effort: with no
        ``.patchkit/``, readers wait)."""
        op = _HELD.get(self._key() or (-1, -1))
        if op is None or not os.path.isdir(self.dir):
            return
        with suppress(OSError):
            write_json(self.path(HOLDER), {"format": FORMAT, "pid": os.getpid(), "host": hostname(),
                                           "op": op, "since": utc_now(), "phase": HOOKS},
                       durable=False)

    def end_hooks(self) -> None:
        """Before the undo writes (or at the end): readers wait again."""
        if os.path.isdir(self.dir):
            with suppress(OSError):
                self.end_writing()

    def lock_holder(self) -> Dict[str, Any]:
        """Who holds the lock: the pid from ``/proc/locks``, with ``lock-holder.json``'s details
        when that file names the same process."""
        pid = _flock_pid(self.root)
        try:
            recorded = self._load(HOLDER)
        except (OSError, TargetError):
            recorded = None
        if recorded and (pid is None or str(recorded.get("pid")) == pid):
            out = {k: v for k, v in recorded.items() if k != "format"}
            out.update(pid=str(recorded.get("pid")), verified=pid is not None)
            return out
        return {"pid": pid, "host": hostname(), "verified": True} if pid else {}

    def begin_writing(self, op: str) -> None:
        """Create ``.patchkit/`` and ``lock-holder.json`` naming this run (not fsynced); on
        failure what this created is removed again."""
        before = self.listing()
        try:
            self.ensure()
            write_json(self.path(HOLDER), {"format": FORMAT, "pid": os.getpid(),
                                           "host": hostname(), "op": op, "since": utc_now()},
                       durable=False)
        except BaseException as exc:
            with suppress(OSError):  # best effort: the error that brought us here is the one to report
                self.end_writing()
                self.undo_setup(before)
            if isinstance(exc, OSError):
                raise PermissionDenied(write_failure(exc, self.path(HOLDER)),
                                       **write_details(exc, self.path(HOLDER))) from None
            raise

    def end_writing(self) -> None:
        for name in (HOLDER, temp_of(HOLDER)):
            with suppress(FileNotFoundError):
                os.unlink(self.path(name))

    def listing(self) -> Optional[FrozenSet[str]]:
        """The names in ``.patchkit/`` (None: there is none), to undo a failed write phase."""
        try:
            return frozenset(os.listdir(self.dir))
        except FileNotFoundError:
            return None

    def undo_setup(self, before: Optional[FrozenSet[str]]) -> None:
        """After a write phase that committed nothing, remove the empty scaffolding it created."""
        if ((before is not None and {"txn", ".gitignore"} <= before) or not os.path.isdir(self.dir)
                or os.path.lexists(self.path("journal.json"))):
            return
        txn = self.path("txn")
        if (before is None or "txn" not in before) and os.path.isdir(txn) and not os.listdir(txn):
            os.rmdir(txn)
        if before is not None:
            if ".gitignore" not in before:
                self._remove(".gitignore")
            return
        if set(os.listdir(self.dir)) <= {".gitignore"}:
            self._remove(".gitignore")
            os.rmdir(self.dir)
            fsync_dir(self.root)

    def _remove(self, name: str) -> None:
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            return
        fsync_dir(self.dir)

    # -- state -----------------------------------------------------------------------------

    def _load(self, name: str) -> Optional[Dict[str, Any]]:
        path = self.path(name)
        try:
            with open(path, "rb") as fh:
                data = json.loads(fh.read().decode("utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError) as exc:
            raise TargetError("%s is damaged (%s); keep a copy, then repair or remove it after "
                              "checking the files it lists" % (path, exc), path=path) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise TargetError("%s has format %r; this patchkit reads format %d (upgrade patchkit)"
                              % (path, data.get("format") if isinstance(data, dict) else None, FORMAT),
                              path=path)
        return data

    def read_state(self) -> State:
        data = self._load("state.json")
        return State() if data is None else self._typed("state.json", State.from_json, data)

    def _typed(self, name: str, reader: Callable[[Any], T], data: Any) -> T:
        """The record of ``name`` read by ``reader``; a record of the wrong shape is damaged."""
        try:
            return reader(data)
        except Damaged as exc:
            raise TargetError("%s is damaged (%s); keep a copy, then repair or remove it after "
                              "checking the files it lists" % (self.path(name), exc),
                              path=self.path(name)) from None

    def write_state(self, state: State) -> None:
        write_json(self.path("state.json"), state.to_json())

    def left_behind(self) -> bool:
        """Whether a killed run left a lock-holder record, a journal or transaction scratch."""
        if os.path.lexists(self.path(HOLDER)) or os.path.lexists(self.path("journal.json")):
            return True
        try:
            return bool(os.listdir(self.path("txn")))
        except OSError:
            return False

    def read_journal(self) -> Optional[Journal]:
        data = self._load("journal.json")
        return None if data is None else Journal.from_json(data)

    def write_journal(self, journal: Journal) -> None:
        write_json(self.path("journal.json"), journal.to_json())

    def remove_journal(self) -> None:
        self._remove("journal.json")

    # -- a fix renamed in the catalog ---------------------------------------------------------

    def adopt_backups(self, renamed: Dict[str, str]) -> None:
        """The backups of each record taken over by a renamed fix (new name -> old), as the
        new name's: the old folder's files hard-linked (else copied) under the new one and
        made durable, before the state names them; :meth:`drop_adopted` removes the old
        folder after. A crash between leaves a folder no record names: garbage, never a
        record without its backups."""
        import shutil

        from .fsops import sync_all
        from .records import fix_backups

        for new, old in renamed.items():
            src, dst = self.path(fix_backups(old)), self.path(fix_backups(new))
            if not os.path.isdir(src):
                continue
            shutil.rmtree(dst, ignore_errors=True)  # no record names it: the new name had none

            def link(a: str, b: str) -> None:
                try:
                    os.link(a, b)
                except OSError:
                    shutil.copy2(a, b)

            shutil.copytree(src, dst, copy_function=link)
            sync_all([os.path.join(d, f) for d, _ds, fs in os.walk(dst) for f in fs],
                     [d for d, _ds, _fs in os.walk(dst)] + [os.path.dirname(dst)])

    def unadopt(self, renamed: Dict[str, str]) -> None:
        """After a run that failed: the new folders :meth:`adopt_backups` made that the state
        does not name (nothing was committed), removed; the old ones stay, named."""
        import shutil

        from .records import fix_backups

        named = set(self.read_state().names())
        for new in renamed:
            if new not in named:
                shutil.rmtree(self.path(fix_backups(new)), ignore_errors=True)

    def drop_adopted(self, renamed: Dict[str, str]) -> None:
        """The old backup folders of records taken over, once the state names the new ones."""
        import shutil

        from .records import fix_backups

        for old in renamed.values():
            shutil.rmtree(self.path(fix_backups(old)), ignore_errors=True)

    # -- history ---------------------------------------------------------------------------

    def append_history(self, event: Dict[str, Any]) -> None:
        line = json.dumps(dict(event, format=FORMAT, at=utc_now(), host=hostname(),
                               pid=os.getpid()), sort_keys=True) + "\n"
        fd = os.open(self.path("history.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def history_txns(self) -> List[str]:
        out = []
        text = (read_bytes(self.path("history.jsonl")) or b"").decode("utf-8", "replace")
        for line in text.splitlines():
            try:
                out.append(str(json.loads(line).get("txn")))
            except ValueError:
                continue
        return out


def describe_holder(holder: Dict[str, Any]) -> str:
    if not holder.get("pid"):
        return "another process; its pid is not known"
    text = "pid %s on %s" % (holder["pid"], holder.get("host") or "this host")
    if holder.get("op"):
        text += ", %s since %s" % (holder["op"], holder.get("since"))
    if holder.get("phase") == HOOKS:
        text += ", running its --after-cmd/--health-cmd"
    return text if holder.get("verified") else "last recorded: " + text


def _is_ancestor(pid: str) -> bool:
    """Whether ``pid`` started this process, directly or not (a hook's own patchkit run)."""
    from .procs import ancestors  # only when the lock is busy in its holder's hooks

    return pid.isdigit() and int(pid) in ancestors(os.getppid())


def _flock_pid(directory: str) -> Optional[str]:
    """The pid holding an exclusive flock on ``directory``, read from Linux's /proc/locks."""
    try:
        st = os.stat(directory)
        with open("/proc/locks", "r") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    inode = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6:
            continue  # a waiter, not the holder
        if fields[1] == "FLOCK" and fields[3] == "WRITE" and fields[5] == inode:
            return fields[4] if fields[4] != "0" else None  # 0: outside our pid namespace
    return None


def write_failure(exc: OSError, default: str) -> str:
    """``cannot write FILE: the OS error (ENAME); what to do`` of a failed write in the state
    root: the file it was writing (``default`` when the error names none), as
    ``fsops.failed_file`` finds it."""
    name = errno.errorcode.get(exc.errno or 0)
    return "cannot write %s: %s%s; %s" % (failed_file(exc, default), exc.strerror or exc,
                                          " (%s)" % name if name else "", _write_remedy(exc))


def write_details(exc: OSError, default: str) -> Dict[str, Any]:
    """The details of :func:`write_failure`'s error: ``path`` (the file), ``errno`` (its name)."""
    return {"path": failed_file(exc, default), "errno": errno.errorcode.get(exc.errno or 0)}


def _write_remedy(exc: OSError) -> str:
    """What to do about a failed write in the state root, by what the OS said."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free space on the target's file system, then run again"
    if exc.errno == errno.EROFS:
        return "its file system is mounted read-only: remount it read-write, then run again"
    if exc.errno == errno.EPERM:
        return ("it or its directory is immutable or append-only (lsattr shows the flag): "
                "clear it (chattr -i, chattr -a), then run again")
    if exc.errno == errno.EXDEV:
        return "keep .patchkit/ on one file system (nothing mounted inside it), then run again"
    if exc.errno == errno.EACCES:
        return "give this user write permission there (or run as its owner), then run again"
    if exc.errno == errno.EFBIG:
        return ("the file size limit is under what it needs (ulimit -f; or the file system's "
                "own): raise it, then run again")
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return "too many files open (ulimit -n): raise the limit, then run again"
    if exc.errno == errno.EIO:
        return "the disk reported an I/O error: check it (dmesg), then run again"
    return "make it writable, then run again"
