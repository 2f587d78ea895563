"""``.patchkit/`` in the state root (formats in docs/state.md), created only when a transaction
starts writing, and the lock: an flock on the state root directory itself."""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import re
import stat
import time
from contextlib import contextmanager, suppress
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Tuple

from ..errors import LockBusy, PermissionDenied, TargetError
from .fsops import fsync_dir, read_bytes, temp_of, write_json
from .paths import Roots

FORMAT = 1
DIRNAME = ".patchkit"
HOLDER = "lock-holder.json"


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

    def path(self, *parts: str) -> str:
        return os.path.join(self.dir, *parts)

    def exists(self) -> bool:
        return os.path.isdir(self.dir)

    def check(self) -> None:
        """Refuse a ``.patchkit`` (or its ``txn``/``backups``) that is a symlink or not a directory."""
        for name in ("", "txn", "backups"):
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
            raise PermissionDenied("cannot create %s: %s; %s" % (self.dir, exc.strerror, write_remedy(exc)),
                                   path=self.dir) from None

    # -- lock ------------------------------------------------------------------------------

    @contextmanager
    def locked(self, timeout: float, write: bool) -> Iterator[bool]:
        """Hold an exclusive flock on the state root for the block; yields whether it is held (a
        read-only run that cannot open or lock the directory goes on without it)."""
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
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = self.lock_holder()
                    raise LockBusy("another patchkit run (%s) holds the lock on %s; waited %.1fs. "
                                   "Wait for it to finish, or wait longer with --lock-timeout SECONDS"
                                   % (describe_holder(holder), self.root, timeout),
                                   lock=self.root, pid=holder.get("pid"), holder=holder) from None
                time.sleep(0.05)
            except OSError as exc:  # a file system without flock (some network mounts)
                if write:
                    raise TargetError("cannot lock the state root %s: %s; keep .patchkit's root on "
                                      "a local file system" % (self.root, exc.strerror),
                                      path=self.root) from None
                return False

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
                raise PermissionDenied("cannot write %s: %s; %s" % (
                    self.path(HOLDER), exc.strerror, write_remedy(exc)), path=self.dir) from None
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

    def read_state(self) -> Dict[str, Any]:
        state = self._load("state.json")
        if state is None:
            return {"format": FORMAT, "txn": None, "fixes": []}
        problem = state_problem(state)
        if problem:
            raise TargetError("%s is damaged (%s); keep a copy, then repair or remove it after "
                              "checking the files it lists" % (self.path("state.json"), problem),
                              path=self.path("state.json"))
        return state

    def write_state(self, state: Dict[str, Any]) -> None:
        write_json(self.path("state.json"), state)

    def left_behind(self) -> bool:
        """Whether a killed run left a lock-holder record, a journal or transaction scratch."""
        if os.path.lexists(self.path(HOLDER)) or os.path.lexists(self.path("journal.json")):
            return True
        try:
            return bool(os.listdir(self.path("txn")))
        except OSError:
            return False

    def read_journal(self) -> Optional[Dict[str, Any]]:
        return self._load("journal.json")

    def write_journal(self, journal: Dict[str, Any]) -> None:
        write_json(self.path("journal.json"), journal)

    def remove_journal(self) -> None:
        self._remove("journal.json")

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


def last_writers(state: Dict[str, Any]) -> Dict[Tuple[str, str], Dict[str, Any]]:
    """For each recorded file, the last applied fix that touched it and its after-hash."""
    out: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for fix in state.get("fixes", []):  # application order
        for f in fix.get("files", []):
            out[(f["root"], f["path"])] = {"fix": fix["name"], "after_sha256": f.get("after_sha256")}
    return out


def created_dirs(rec: Dict[str, Any], roots: Roots) -> List[Tuple[str, str]]:
    """The (root, dir relative to it) a fix's apply created (absolute ones, from an earlier
    engine, are taken relative to the record's ``roots``)."""
    out: List[Tuple[str, str]] = []
    names = {r.name for r in roots}
    for d in rec.get("created_dirs") or []:
        if isinstance(d, list) and len(d) == 2:
            if d[0] in names:
                out.append((str(d[0]), str(d[1])))
            continue
        for name, path in (rec.get("roots") or {}).items():
            prefix = str(path).rstrip("/") + "/"
            if name in names and isinstance(d, str) and d.startswith(prefix):
                out.append((name, d[len(prefix):]))
                break
    return out


def describe_holder(holder: Dict[str, Any]) -> str:
    if not holder.get("pid"):
        return "another process; its pid is not known"
    text = "pid %s on %s" % (holder["pid"], holder.get("host") or "this host")
    if holder.get("op"):
        text += ", %s since %s" % (holder["op"], holder.get("since"))
    return text if holder.get("verified") else "last recorded: " + text


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


def write_remedy(exc: OSError) -> str:
    """What to do about a failed write in the state root."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free space on the target's file system, then run again"
    return "make the state root writable (or run as its owner)"


def state_problem(state: Dict[str, Any]) -> Optional[str]:
    """What in a state record does not match its schema (docs/state.md), or None: the keys every
    reader relies on, with their types. A record of the wrong shape is damaged, as garbage is."""
    fixes = state.get("fixes", [])
    if not isinstance(fixes, list):
        return "'fixes' is %s, not a list" % type(fixes).__name__
    if state.get("txn") is not None and not isinstance(state.get("txn"), str):
        return "'txn' is %s, not a string" % type(state.get("txn")).__name__
    seen = set()
    for i, fix in enumerate(fixes):
        where = "fixes[%d]" % i
        if not isinstance(fix, dict):
            return "%s is %s, not an object" % (where, type(fix).__name__)
        name = fix.get("name")
        if not isinstance(name, str) or not re.match(r"[a-z0-9][a-z0-9.-]*\Z", name):
            return "%s.name is %r, not a fix name" % (where, name)
        if name in seen:
            return "%s: fix %s is recorded twice" % (where, name)
        seen.add(name)
        version = fix.get("version", 1)
        if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
            return "%s.version is %r, not a number" % (where, version)
        for key in ("files", "patches", "requires", "created_dirs", "verification", "commits"):
            if key in fix and not isinstance(fix[key], list):
                return "%s.%s is %s, not a list" % (where, key, type(fix[key]).__name__)
        for j, rec in enumerate(fix.get("files", [])):
            if not isinstance(rec, dict) or not all(
                    isinstance(rec.get(k), str) for k in ("root", "path")):
                return "%s.files[%d] is not a file record (root, path)" % (where, j)
            for key in ("before_sha256", "after_sha256", "backup"):
                if rec.get(key) is not None and not isinstance(rec.get(key), str):
                    return "%s.files[%d].%s is %r, not a string" % (where, j, key, rec[key])
    return None
