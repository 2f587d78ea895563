"""The ``.patchkit/`` directory in the state root: lock, state, journal, history, backups.

Formats are versioned (``"format": 1``) and written down in docs/state.md. The directory holds a
``.gitignore`` of ``*`` so a git checkout's ``git status`` stays clean.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional

from ..errors import LockBusy, PermissionDenied, TargetError
from .fsops import fsync_dir, write_json

FORMAT = 1
DIRNAME = ".patchkit"


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
            raise PermissionDenied("cannot create %s: %s; make the state root writable (or run as "
                                   "its owner)" % (self.dir, exc.strerror), path=self.dir) from None

    # -- lock ------------------------------------------------------------------------------

    @contextmanager
    def locked(self, timeout: float, create: bool) -> Iterator[bool]:
        """Hold ``.patchkit/lock`` (flock) for the block; yields whether a lock is held.

        Read-only operations pass ``create=False``: on a target patchkit never touched there is
        nothing to protect, and they must not write anything.
        """
        if create:
            self.ensure()
        elif not self.exists():
            yield False
            return
        lock = self.path("lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            writable = True
        except OSError:
            if create or not os.path.exists(lock):
                if create:
                    raise PermissionDenied("cannot open the lock %s; make the state root writable"
                                           % lock, path=lock) from None
                yield False
                return
            fd, writable = os.open(lock, os.O_RDONLY), False
        try:
            deadline = time.monotonic() + max(0.0, float(timeout))
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except (BlockingIOError, PermissionError):
                    if time.monotonic() >= deadline:
                        holder = _read_pid(lock)
                        who = "pid %s" % holder if holder else "another process (pid not recorded)"
                        raise LockBusy("another patchkit run (%s) holds the lock %s; waited %.1fs. Wait "
                                       "for it to finish, or raise the lock timeout" % (who, lock, timeout),
                                       lock=lock, pid=holder) from None
                    time.sleep(0.05)
            if writable:
                os.ftruncate(fd, 0)
                os.pwrite(fd, ("%d %s\n" % (os.getpid(), socket.gethostname())).encode(), 0)
            try:
                yield True
            finally:
                if writable:
                    os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

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
        return state if state is not None else {"format": FORMAT, "txn": None, "fixes": []}

    def write_state(self, state: Dict[str, Any]) -> None:
        write_json(self.path("state.json"), state)

    def read_journal(self) -> Optional[Dict[str, Any]]:
        return self._load("journal.json")

    def write_journal(self, journal: Dict[str, Any]) -> None:
        write_json(self.path("journal.json"), journal)

    def remove_journal(self) -> None:
        try:
            os.unlink(self.path("journal.json"))
        except FileNotFoundError:
            return
        fsync_dir(self.dir)

    # -- history ---------------------------------------------------------------------------

    def append_history(self, event: Dict[str, Any]) -> None:
        line = json.dumps(dict(event, format=FORMAT, at=utc_now(), host=socket.gethostname(),
                               pid=os.getpid()), sort_keys=True) + "\n"
        fd = os.open(self.path("history.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def history_txns(self) -> List[str]:
        try:
            with open(self.path("history.jsonl"), "rb") as fh:
                lines = fh.read().decode("utf-8", "replace").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(str(json.loads(line).get("txn")))
            except ValueError:
                continue
        return out


def _read_pid(lock: str) -> Optional[str]:
    try:
        with open(lock, "r") as fh:
            first = fh.read().split()
    except OSError:
        return None
    return first[0] if first else None
