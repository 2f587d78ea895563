"""Durable file operations: atomic replace, directory fsync, cache purge, writability probe.

Every write to a target file goes to a temporary file in the same directory, is fsynced, and
replaces the original with ``os.replace`` followed by an fsync of the directory, so a crash
leaves either the old or the new bytes, never a torn file. The temporary name is fixed
(``.<name>.patchkit-tmp``) so recovery can find and remove one left by a crash.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from typing import Any, List, Optional, Tuple

from .faults import fault


def read_bytes(path: str) -> Optional[bytes]:
    """The file's bytes, or None when there is no file."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return None


def file_mode(path: str) -> Optional[int]:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, ".%s.patchkit-tmp" % tail)


def atomic_write(path: str, data: bytes, mode: int, faults: bool = False,
                 owner: Optional[Tuple[int, int]] = None, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` (mode ``mode``) so a crash leaves old or new, never half.

    ``sync_dir=False``: the caller fsyncs the directory itself (once for many files) before it
    relies on the rename being durable.
    """
    if faults:
        fault("write")
    tmp = write_temp(path, data, mode, owner)
    if faults:
        fault("rename")
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(os.path.dirname(path))


def write_temp(path: str, data: bytes, mode: int, owner: Optional[Tuple[int, int]] = None,
               sync: bool = True) -> str:
    """Write ``data`` to ``path``'s temporary sibling (fsynced unless ``sync`` is false: the
    caller then fsyncs it before the rename) and return that name."""
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        if owner is not None:
            try:
                os.fchown(fd, owner[0], owner[1])
            except OSError:
                pass
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def fsync_paths(paths: List[str], dirs: bool = False) -> None:
    """fsync many files (or directories) at once: the calls run in a few threads, so the file
    system can commit them together instead of one journal flush per file. Returns when every
    one is durable; the first failure is raised."""
    def one(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    if len(paths) < 8:
        for path in paths:
            one(path)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in pool.map(one, paths):
            pass


def write_json(path: str, data: Any) -> None:
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    atomic_write(path, text.encode("utf-8"), 0o644)


def remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    fsync_dir(os.path.dirname(path))


def make_dirs(path: str) -> List[str]:
    """Create ``path`` and missing parents; return the directories created, outermost first."""
    missing: List[str] = []
    cur = path
    while not os.path.isdir(cur):
        missing.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    missing.reverse()
    for d in missing:
        os.mkdir(d, 0o755)
        fsync_dir(os.path.dirname(d))
    return missing


def remove_empty_dirs(dirs: List[str]) -> None:
    """Remove directories a transaction created, innermost first, if they are empty again."""
    for d in sorted(dirs, key=len, reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass


def purge_pycache(py_files: List[str]) -> List[str]:
    """Delete the ``__pycache__`` next to each touched .py file so no stale bytecode runs."""
    purged: List[str] = []
    for d in sorted({os.path.join(os.path.dirname(p), "__pycache__") for p in py_files
                     if p.endswith(".py")}):
        if os.path.isdir(d) and not os.path.islink(d):
            shutil.rmtree(d, ignore_errors=True)
            purged.append(d)
    return purged


def nearest_existing_dir(path: str) -> str:
    cur = path
    while not os.path.isdir(cur):
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    return cur


def probe_writable(directory: str) -> Optional[str]:
    """None if files can be created in ``directory``, else why not.

    ``os.access`` alone is not enough: root passes it on a read-only mount or an immutable
    directory. So a probe file is created and removed, and the directory's times are put back.
    """
    if not os.access(directory, os.W_OK | os.X_OK):
        return "no write permission on %s" % directory
    try:
        st = os.stat(directory)
    except OSError as exc:
        return "cannot stat %s: %s" % (directory, exc.strerror)
    probe = os.path.join(directory, ".patchkit-probe-%d" % os.getpid())
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                  errno.EPERM: "operation not permitted (immutable?)"}.get(exc.errno, exc.strerror)
        return "cannot create a file in %s: %s" % (directory, reason)
    try:
        os.utime(directory, ns=(st.st_atime_ns, st.st_mtime_ns))
    except OSError:
        pass
    return None
