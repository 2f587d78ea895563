"""Writing inside a root without following a symlink (docs/state.md, "Writes never follow a
symlink"): names relative to directory descriptors opened from the root down with
``O_NOFOLLOW``. Paths are relative to the root's real directory (``Roots.relative``)."""

from __future__ import annotations

import errno
import os
import stat
from contextlib import suppress
from typing import Dict, List, Optional, Tuple

from ..errors import UnsafePathError
from .fsops import fill_fd, read_fd, temp_of
from .paths import Roots

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_MAX_OPEN = 128  # directory descriptors kept open at once


class RootDirs:
    """Directory descriptors of the roots of one transaction; ``close`` when done."""

    def __init__(self, roots: Roots) -> None:
        self.roots = roots
        self._fds: Dict[Tuple[str, str], int] = {}

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> "RootDirs":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def directory(self, root: str, rel_dir: str, create: bool = False) -> int:
        """The descriptor of directory ``rel_dir`` of ``root`` ("": the root); ``create``: make
        missing ones."""
        key = (root, rel_dir)
        fd = self._fds.get(key)
        if fd is not None:
            return fd
        if not rel_dir:
            fd = os.open(self.roots.get(root).real, os.O_RDONLY | os.O_DIRECTORY)
        else:
            head, _sep, name = rel_dir.rpartition("/")
            parent = self.directory(root, head, create)
            try:
                fd = os.open(name, _DIR, dir_fd=parent)
            except FileNotFoundError:
                if not create:
                    raise
                with suppress(FileExistsError):  # made meanwhile (by a thread beside this one)
                    os.mkdir(name, 0o755, dir_fd=parent)
                fd = os.open(name, _DIR, dir_fd=parent)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise self._unsafe(root, rel_dir) from None
                raise
        if len(self._fds) >= _MAX_OPEN:
            self.close()
        self._fds[key] = fd
        return fd

    def parent(self, root: str, rel: str, create: bool = False) -> Tuple[int, str]:
        head, _sep, name = rel.rpartition("/")
        return self.directory(root, head, create), name

    def _unsafe(self, root: str, rel_dir: str) -> UnsafePathError:
        full = os.path.join(self.roots.get(root).real, rel_dir)
        what = "a symlink (to %s)" % os.readlink(full) if os.path.islink(full) else "not a directory"
        return UnsafePathError(
            "%s:%s is now %s: it changed while patchkit was working; refusing to write through "
            "it. Put the directory back, then run again (the next run restores whatever this one "
            "left)" % (root, rel_dir, what), root=root, path=rel_dir)

    def open_file(self, root: str, rel: str) -> Optional[int]:
        """A read-only descriptor of file ``rel`` (None: no file there)."""
        try:
            dfd, name = self.parent(root, rel)
            return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._unsafe(root, rel) from None
            raise

    def read(self, root: str, rel: str) -> Optional[bytes]:
        fd = self.open_file(root, rel)
        if fd is None:
            return None
        try:
            return read_fd(fd)
        finally:
            os.close(fd)

    def write_temp(self, root: str, rel: str, data: bytes, mode: int,
                   owner: Optional[Tuple[int, int]]) -> None:
        """Write ``data`` to the temporary sibling of ``rel`` (not fsynced: the caller syncs)."""
        dfd, name = self.parent(root, rel, create=True)
        tmp = temp_of(name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        try:  # O_EXCL: a crash's leftover (or a planted link) is never opened...
            fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
        except FileExistsError:  # ...but removed, and the file made anew
            os.unlink(tmp, dir_fd=dfd)
            fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
        try:
            fill_fd(fd, data, mode, owner)
        finally:
            os.close(fd)

    def commit_temp(self, root: str, rel: str) -> None:
        dfd, name = self.parent(root, rel)
        os.replace(temp_of(name), name, src_dir_fd=dfd, dst_dir_fd=dfd)

    def unlink(self, root: str, rel: str, temp: bool = False) -> None:
        """Remove file ``rel`` (``temp``: its temporary sibling) if it is there."""
        with suppress(FileNotFoundError):
            dfd, name = self.parent(root, rel)
            os.unlink(temp_of(name) if temp else name, dir_fd=dfd)

    def link_out(self, root: str, rel: str, dest: str) -> None:
        """Hard-link file ``rel`` (not a symlink there) to the absolute path ``dest``."""
        dfd, name = self.parent(root, rel)
        os.link(name, dest, src_dir_fd=dfd, follow_symlinks=False)

    def rename_in(self, source: str, root: str, rel: str) -> None:
        """Move the file at absolute path ``source`` (a backup) to ``rel``: needs no space."""
        dfd, name = self.parent(root, rel)
        os.rename(source, name, dst_dir_fd=dfd)

    def chmod_chown(self, root: str, rel: str, mode: Optional[int],
                    owner: Optional[Tuple[int, int]]) -> None:
        fd = self.open_file(root, rel)
        if fd is None:
            return
        try:
            st = os.fstat(fd)
            if owner is not None and (st.st_uid, st.st_gid) != tuple(owner):
                with suppress(OSError):  # before the mode: a chown clears setuid and setgid
                    os.fchown(fd, owner[0], owner[1])
                st = os.fstat(fd)
            if mode is not None and stat.S_IMODE(st.st_mode) != mode:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def fsync_dir(self, root: str, rel_dir: str) -> None:
        os.fsync(self.directory(root, rel_dir))

    def remove_empty_dirs(self, pairs: List[Tuple[str, str]]) -> None:
        """Remove the (root, directory) a transaction created, innermost first, if empty."""
        names = {r.name for r in self.roots}
        for root, rel in sorted(pairs, key=lambda p: len(p[1]), reverse=True):
            if root not in names:
                continue
            with suppress(OSError, UnsafePathError):
                dfd, name = self.parent(root, rel)
                stale = self._fds.pop((root, rel), None)
                if stale is not None:
                    os.close(stale)
                os.rmdir(name, dir_fd=dfd)

    def purge_pycache(self, files: List[Tuple[str, str]]) -> None:
        """Remove the ``__pycache__`` directory beside each (root, file) ending in ``.py``."""
        for root, rel in sorted({(r, f.rpartition("/")[0]) for r, f in files if f.endswith(".py")}):
            try:
                dfd = self.directory(root, rel)
            except (OSError, UnsafePathError):
                continue
            try:
                st = os.stat("__pycache__", dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                _rmtree_at(dfd, "__pycache__")


def _rmtree_at(parent: int, name: str) -> None:
    """``rm -r`` of directory ``name`` in ``parent``, never following a symlink."""
    try:
        fd = os.open(name, _DIR, dir_fd=parent)
    except OSError:
        return
    try:
        for entry in list(os.scandir(fd)):
            if entry.is_dir(follow_symlinks=False):
                _rmtree_at(fd, entry.name)
            else:
                with suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    with suppress(OSError):
        os.rmdir(name, dir_fd=parent)
