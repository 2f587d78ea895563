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

Key = Tuple[str, str]  # (root, path)


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


def pyc_files(roots: Roots, files: Iterable[Key], prefixes: Sequence[str]) -> Dict[Key, List[str]]:
    """Every ``.pyc`` Python may serve for each (root, path) of ``files`` ending in ``.py``:
    ``__pycache__`` beside it and, per prefix, the mirror of its directory (as the root is
    spelled and as it resolves). Each directory is listed once, however many of the files
    lie in it (a drift series changes thousands of files in a few hundred directories)."""
    listed: Dict[Key, List[Dict[str, List[str]]]] = {}  # (root, dir) -> its places' listings
    out: Dict[Key, List[str]] = {}
    for root, path in files:
        if not path.endswith(".py"):
            continue
        r = roots.get(root)
        rel_dir, _, name = r.mapped(path).rpartition("/")
        places = listed.get((root, rel_dir))
        if places is None:
            heads = [os.path.join(top, rel_dir) for top in dict.fromkeys((os.path.normpath(r.path), r.real))]
            places = listed[(root, rel_dir)] = [_pycs_in(place) for place in dict.fromkeys(
                [os.path.join(head, "__pycache__") for head in heads]
                + [os.path.join(prefix, head.lstrip("/")) for head in heads for prefix in prefixes])]
        out[(root, path)] = sorted({pyc for by_stem in places for pyc in by_stem.get(name[:-3], ())})
    return out


def _pycs_in(place: str) -> Dict[str, List[str]]:
    """The bytecode files in directory ``place`` by stem (nothing if it cannot be read):
    ``STEM.TAG.pyc``, and ``STEM.TAG.opt-N.pyc`` that ``python -O`` reads."""
    by_stem: Dict[str, List[str]] = {}
    with suppress(OSError):
        for entry in os.scandir(place):
            parts = entry.name.split(".")
            if parts[-1] == "pyc" and (len(parts) == 3 or len(parts) == 4 and parts[2].startswith("opt-")) \
                    and entry.is_file(follow_symlinks=False):
                by_stem.setdefault(parts[0], []).append(entry.path)
    return by_stem


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
    found = pyc_files(roots, [(root, path) for root, path in files if root in names], prefixes)
    for (root, path), pycs in found.items():
        source = os.path.join(roots.get(root).path, roots.get(root).mapped(path))
        for pyc in pycs:
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
    for pycs in pyc_files(roots, files, prefixes).values():
        for pyc in pycs:
            if "/__pycache__/" in pyc:
                continue  # the sibling __pycache__ is the transaction's, removed through its root
            with suppress(OSError):
                if stat.S_ISREG(os.lstat(pyc).st_mode):
                    os.unlink(pyc)
                    removed.append(pyc)
    return removed
