"""Python's bytecode of the files patchkit changes wherever Python keeps it (docs/state.md,
"Bytecode wherever Python keeps it"): the ``.pyc`` files beside a source and under each
``pycache_prefix``, which of them Python would still serve stale, and their removal. Which
prefixes are in use is the processes' business (``procs``)."""

from __future__ import annotations

import os
import stat
import sys
from contextlib import suppress
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .paths import Roots


def interpreter_prefix(python: Optional[str]) -> Optional[str]:
    """``sys.pycache_prefix`` of the target's interpreter (this one when None)."""
    if not python or os.path.realpath(python) == os.path.realpath(sys.executable):
        return sys.pycache_prefix
    import subprocess  # here: a command that runs no process (a status) does not load it

    try:
        done = subprocess.run([python, "-c", "import sys; print(sys.pycache_prefix or '')"],
                              capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "surrogateescape").strip() or None


def pyc_files(roots: Roots, root: str, path: str, prefixes: Sequence[str]) -> List[str]:
    """Every ``.pyc`` Python may serve for ``root:path``: ``__pycache__`` beside it and, per
    prefix, the mirror of the directory (as the root is spelled and as it resolves)."""
    if not path.endswith(".py"):
        return []
    r = roots.get(root)
    rel = r.mapped(path)
    out = []
    for top in dict.fromkeys((os.path.normpath(r.path), r.real)):
        head, name = os.path.split(os.path.join(top, rel))
        stem = name[:-3]
        places = [os.path.join(head, "__pycache__")] + [
            os.path.join(prefix, head.lstrip("/")) for prefix in prefixes]
        for place in places:
            with suppress(OSError):
                for entry in os.scandir(place):
                    if entry.name.startswith(stem + ".") and entry.name.endswith(".pyc") \
                            and entry.name.count(".") == 2 and entry.is_file(follow_symlinks=False):
                        out.append(entry.path)
    return sorted(set(out))


def stale(pyc: str, source: str) -> Optional[str]:
    """Why Python would serve ``pyc`` for ``source`` although it holds older code, or None."""
    try:
        with open(pyc, "rb") as fh:
            head = fh.read(16)
        src, st_pyc = os.stat(source), os.stat(pyc)
    except OSError:
        return None
    if len(head) < 16:
        return None
    flags = int.from_bytes(head[4:8], "little")
    older = st_pyc.st_mtime_ns < src.st_mtime_ns
    if flags & 1:  # hash-based (PEP 552)
        if flags & 2:
            return None  # checked: Python compares the source's hash and recompiles
        import importlib.util

        if head[:4] == importlib.util.MAGIC_NUMBER:
            with open(source, "rb") as fh:
                same = importlib.util.source_hash(fh.read()) == head[8:16]
            return None if same else "unchecked hash-based .pyc of other source bytes: served without a check"
        return "unchecked hash-based .pyc written before the source changed: served without a check" if older else None
    mtime, size = int.from_bytes(head[8:12], "little"), int.from_bytes(head[12:16], "little")
    if older and mtime == int(src.st_mtime) & 0xFFFFFFFF and size == src.st_size & 0xFFFFFFFF:
        return ".pyc written before the change but with the source's current mtime and size: served"
    return None


def stale_pycs(roots: Roots, files: Iterable[Tuple[str, str]], prefixes: Sequence[str]
               ) -> List[Dict[str, str]]:
    out = []
    names = {r.name for r in roots}
    for root, path in files:
        if root not in names:
            continue
        source = os.path.join(roots.get(root).path, roots.get(root).mapped(path))
        for pyc in pyc_files(roots, root, path, prefixes):
            why = stale(pyc, source)
            if why:
                out.append({"pyc": pyc, "source": roots.where(root, path), "why": why})
    return out


def purge_prefixed(roots: Roots, files: Iterable[Tuple[str, str]], prefixes: Sequence[str]) -> List[str]:
    """Remove the ``.pyc`` of each changed (root, path) under every prefix of ``prefixes`` (the
    ``pycache_prefix`` values in use: ``procs.prefixes_in_use``); returns them."""
    removed: List[str] = []
    if not prefixes:
        return removed
    for root, path in files:
        for pyc in pyc_files(roots, root, path, prefixes):
            if "/__pycache__/" in pyc:
                continue  # the sibling __pycache__ is the transaction's, removed through its root
            with suppress(OSError):
                if stat.S_ISREG(os.lstat(pyc).st_mode):
                    os.unlink(pyc)
                    removed.append(pyc)
    return removed
