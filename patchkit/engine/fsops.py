"""File operations of the engine. A file is written to a temporary sibling with a fixed name
(recovery finds a crash's leftover) and renamed over the original: never a torn file."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from contextlib import suppress
from typing import Any, Callable, Dict, List, Optional, Tuple


def read_bytes(path: str) -> Optional[bytes]:
    """The file's bytes, or None when there is no file."""
    return read_with_stat(path)[0]


def read_with_stat(path: str) -> Tuple[Optional[bytes], Optional[os.stat_result]]:
    """The file's bytes and its stat from one open (None, None when there is no file)."""
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return None, None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return None, None
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read, a device never end
            raise NotRegular(path, "is %s, not a regular file" % kind_of(st.st_mode))
        return read_fd(fd, st.st_size), st
    finally:
        os.close(fd)


def sha256_of(path: str) -> Optional[str]:
    """The sha256 of the file ``path`` as :func:`read_with_stat` would read it (None when it
    gives no bytes), read in blocks and not kept."""
    held = held_of(path)
    return None if held is None else held[0]


def held_of(path: str) -> Optional[Tuple[str, int]]:
    """The sha256 and permission bits of the file ``path`` (:func:`sha256_of`), or None."""
    import hashlib

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return None
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, "is %s, not a regular file" % kind_of(st.st_mode))
        digest = hashlib.sha256()
        block = os.read(fd, 1 << 20)
        while block:
            digest.update(block)
            block = os.read(fd, 1 << 20)
        return digest.hexdigest(), stat.S_IMODE(st.st_mode)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """fsync a directory (its entries durable) -- or a file: opened read-only either way."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_of(name: str) -> str:
    """The temporary sibling of file ``name``."""
    return ".%s.patchkit-tmp" % name


def failed_file(exc: OSError, default: str) -> str:
    """The file a failed write was writing: a rename's destination, and never the temporary
    sibling (``temp_of``) it writes first, which is patchkit's own business; ``default`` when
    the error names none (an fsync, a write to a descriptor)."""
    name = exc.filename2 or exc.filename
    if not name:
        return default
    head, tail = os.path.split(os.fsdecode(name))
    if tail.startswith(".") and tail.endswith(".patchkit-tmp") and len(tail) > len(temp_of("")):
        tail = tail[1:-len(".patchkit-tmp")]
    return os.path.join(head, tail)


def fill_fd(fd: int, data: bytes, mode: int, owner: Optional[Tuple[int, int]]) -> None:
    """Write all of ``data`` to a new file's ``fd``, then give it ``owner`` and ``mode``
    (owner first: a chown clears setuid and setgid)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    if owner is not None:
        with suppress(OSError):
            os.fchown(fd, owner[0], owner[1])
    os.fchmod(fd, mode)


#: File-system calls in flight at once: most of a file's creation or fsync is a wait on
#: the disk, which the file system overlaps (docs/performance.md, "The drift apply").
THREADS = 8


def in_threads(count: int, work: Callable[[int], None]) -> None:
    """``work(i)`` for each ``i`` below ``count``, in up to :data:`THREADS` threads. After a
    failure no further ``i`` is begun, and the failure of the lowest ``i`` is raised. Returns
    only when no thread runs ``work`` any more, an exception in the wait (a signal) included:
    nothing still writes when the caller puts things back.

    Each thread says it ended by an event of its own, not by ``Thread.join``: a join cut short
    by a signal can take a running thread for ended (Python 3.11's handling of bpo-45274).
    After a signal only the threads that had begun are waited for; the check that lets one
    begin and the failure that stops the rest are made under one lock."""
    failed: Dict[int, BaseException] = {}
    lock = threading.Lock()
    ended = [threading.Event() for _ in range(min(THREADS, count))]
    begun: List[int] = []

    def run(first: int) -> None:
        try:
            with lock:
                if failed:
                    return
                begun.append(first)
            for i in range(first, count, THREADS):
                if failed:
                    return
                try:
                    work(i)
                except BaseException as exc:  # raised by the caller's thread, below
                    failed[i] = exc
                    return
        finally:
            ended[first].set()

    cut: Optional[BaseException] = None
    try:
        for n in range(len(ended)):
            threading.Thread(target=run, args=(n,), daemon=True).start()
    except BaseException as exc:  # a signal while they start
        cut = exc
    while True:
        try:
            waiting = list(range(len(ended)))
            if cut is not None:
                with lock:
                    failed.setdefault(-1, cut)
                    waiting = list(begun)
            for n in waiting:
                ended[n].wait()
            break
        except BaseException as exc:  # a signal while they run: they begin nothing more
            cut = cut or exc
    if cut is not None:
        raise cut
    if failed:
        raise failed[min(failed)]


def sync_all(files: List[str], dirs: List[str]) -> None:
    """fsync ``files`` and ``dirs``, in a few threads so the file system commits them together;
    the first failure is raised."""
    paths = list(files) + list(dirs)
    in_threads(len(paths), lambda i: fsync_dir(paths[i]))


class NotRegular(Exception):
    """A file patchkit reads is not a regular file (a FIFO, a device...) or is over its bound."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__("%s %s" % (path, what))
        self.path, self.what = path, what


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, as a message names it."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (a symlink to one is followed), at most ``limit``;
    NotRegular when it is something else (opening a FIFO does not wait for a writer) or larger.
    FileNotFoundError when there is nothing."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, "is %s, not a regular file" % kind_of(st.st_mode))
        if st.st_size > limit:
            raise NotRegular(path, "is %d bytes, over the %d bytes patchkit reads of such a "
                             "file" % (st.st_size, limit))
        with open(fd, "rb", closefd=False) as fh:  # sized by the file: read(n) allocates n
            data = fh.read(min(limit, st.st_size) + 1)
            if len(data) > st.st_size and len(data) <= limit:  # grew while read: the rest too
                data += fh.read(limit + 1 - len(data))
        if len(data) > limit:  # grew while read
            raise NotRegular(path, "grew past the %d bytes patchkit reads of such a file" % limit)
        return data
    finally:
        os.close(fd)


def read_fd(fd: int, size: Optional[int] = None) -> bytes:
    """Everything left to read from ``fd`` (which stays open); ``size``: its ``st_size``, when
    the caller has it. Read in one ``read`` of the size and a second that finds the end (a
    file object would also ask the terminal and seek twice: the engine reads each file it
    writes two or three times)."""
    if size is None:
        size = os.fstat(fd).st_size
    data = os.read(fd, size + 1)
    if not data:
        return data
    parts = [data]
    while True:  # grown meanwhile, or more than one read returns
        block = os.read(fd, max(size + 1, 1 << 16))
        if not block:
            return data if len(parts) == 1 else b"".join(parts)
        parts.append(block)


def write_json(path: str, data: Any, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` as compact JSON; ``durable``: fsync it and its directory."""
    head, tail = os.path.split(path)
    tmp = os.path.join(head, temp_of(tail))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            fill_fd(fd, (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode(),
                    0o644, None)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:  # the temporary file goes, and the error names the file, not a descriptor
        with suppress(OSError):
            os.unlink(tmp)
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror, path) from None
    if durable:
        fsync_dir(os.path.dirname(path))


def nearest_existing_dir(path: str) -> str:
    cur = path
    while not os.path.isdir(cur):
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    return cur


def missing_dirs(path: str) -> List[str]:
    """The directories to make for file ``path``, outermost first."""
    top, cur, out = nearest_existing_dir(os.path.dirname(path)), os.path.dirname(path), []
    while cur != top:
        out.append(cur)
        cur = os.path.dirname(cur)
    return out[::-1]


def probe_writable(directory: str) -> Optional[str]:
    """None if files can be created in ``directory``, else why not. An unnamed ``O_TMPFILE``
    file is opened (``os.access`` passes root on a read-only mount); where that is not
    supported, ``os.access`` and the mount's read-only flag answer."""
    if not os.access(directory, os.W_OK | os.X_OK):
        return "no write permission on %s" % directory
    flag = getattr(os, "O_TMPFILE", 0)
    if flag:
        try:
            os.close(os.open(directory, flag | os.O_WRONLY, 0o600))
            return None
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                reasons: Dict[Optional[int], Optional[str]] = {
                    errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                    errno.EPERM: "operation not permitted (immutable?)"}
                reason = reasons.get(exc.errno, exc.strerror)
                return "cannot create a file in %s: %s" % (directory, reason)
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "cannot create a file in %s: read-only file system" % directory
    except OSError as exc:
        return "cannot inspect %s: %s" % (directory, exc.strerror)
    return None
