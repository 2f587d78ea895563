"""The few questions the engine asks git, through the ``git`` CLI (hosts have no GitPython);
none for a root outside a work tree (no ``.git`` upwards)."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import field
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

from .paths import dot_git_top
from .recordbase import Record, record_dataclass

if TYPE_CHECKING:
    import subprocess

TIMEOUT = 120.0  # each git command, outside a ``deadline``
# Above this many paths one ``git status`` of the whole root is cheaper than one limited to
# them: git matches each index entry against every pathspec (SGLang's checkout, 5,278 files:
# 2,152 pathspecs took 0.25 to 0.4 s, the whole root 0.06 s; 100 took 0.01 s).
MANY_PATHS = 400
_deadline = threading.local()


class DeadlinePassed(Exception):
    """A git command ran past the ``deadline`` of what ran it (a git check's time limit)."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every git command of the block is killed ``seconds`` after its start (``DeadlinePassed``)."""
    _deadline.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _deadline.at = None


# Variables that would point git at another repository than the one the root is in.
_REPO_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_NAMESPACE")


def run(root: str, args: List[str], stdin: Optional[bytes] = None,
         env: Optional[Dict[str, str]] = None) -> Optional[subprocess.CompletedProcess]:
    """Run git in ``root`` (None if it cannot start, or ran past ``TIMEOUT``)."""
    import subprocess  # here: a command that runs no process (a status) does not load it

    full = {k: v for k, v in os.environ.items() if k not in _REPO_VARS and k != "PATCHKIT_FAULT"}
    full["GIT_OPTIONAL_LOCKS"] = "0"  # never rewrite the index of the target while looking
    full.update(env or {})
    end = getattr(_deadline, "at", None)
    try:
        return subprocess.run(["git", "-C", root] + args, input=stdin,
                              stdin=None if stdin is not None else subprocess.DEVNULL,
                              capture_output=True, env=full, timeout=TIMEOUT if end is None
                              else max(0.0, end - time.monotonic()))
    except OSError:
        return None
    except subprocess.TimeoutExpired:
        if end is not None:
            raise DeadlinePassed() from None
        return None


def describe_tag(root: str) -> Optional[str]:
    """The tag HEAD sits exactly on, without a leading "v", or None."""
    if dot_git_top(root) is None:
        return None
    proc = run(root, ["describe", "--tags", "--exact-match"])
    if proc is None or proc.returncode != 0:
        return None
    tag = proc.stdout.decode("utf-8", "replace").strip()
    return tag[1:] if tag.startswith("v") else tag or None


@record_dataclass(frozen=True)
class Changes(Record):
    """What one ``git status`` said about some paths of a root."""

    checkout: bool  # the root is inside a git work tree
    changed: Dict[str, str] = field(default_factory=dict)  # root-relative path -> XY status
    error: str = ""  # why git could not answer for a checkout ("" when it did)


def changed_paths(root: str, rels: List[str]) -> Changes:
    """Which of ``rels`` (root-relative) differ from HEAD: one ``git status`` for all of them."""
    top = dot_git_top(root)
    if top is None:
        return Changes(False)
    if not rels:
        return Changes(True)
    # porcelain paths are relative to the work tree's top, whatever the cwd
    prefix = os.path.relpath(os.path.realpath(root), top)
    prefix = "" if prefix == "." else prefix + "/"
    # --no-renames: a path's code is its own (a staged rename's two sides: "D " and "A "),
    # whichever other paths are asked about
    args = ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--"]
    # git matches every index entry against every pathspec: for many, the root's status is less work
    proc = run(root, args + (rels if len(rels) <= MANY_PATHS else ["."]))
    if proc is None:
        return Changes(True, error="git did not run (is it installed?)")
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        if "not a git repository" in err:
            return Changes(False)
        return Changes(True, error="git status failed: %s" % err)
    out: Dict[str, str] = {}
    for code, path, source in parse_porcelain_z(proc.stdout.decode("utf-8", "surrogateescape")):
        for name in (path, source):  # a renamed file's old path is changed too (deleted)
            if name is not None and name.startswith(prefix):
                out.setdefault(name[len(prefix):], code)
    if len(rels) > MANY_PATHS:
        wanted = set(rels)
        out = {rel: code for rel, code in out.items() if rel in wanted}
    return Changes(True, out)


def parse_porcelain_z(text: str) -> List[Tuple[str, str, Optional[str]]]:
    """``git status --porcelain=v1 -z`` output as (code, path, rename source or None)."""
    out: List[Tuple[str, str, Optional[str]]] = []
    entries = iter(text.split("\0"))
    for entry in entries:
        if len(entry) >= 4:  # a rename's or copy's source path follows it
            out.append((entry[:2], entry[3:], next(entries, None) if entry[0] in "RC" else None))
    return out
