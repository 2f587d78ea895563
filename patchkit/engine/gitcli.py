"""The few questions the engine asks git, through the ``git`` CLI (hosts have no GitPython)."""

from __future__ import annotations

import os
import subprocess
from typing import Dict, List, Optional

TIMEOUT = 120.0


def _git(root: str, args: List[str]) -> Optional[subprocess.CompletedProcess]:
    env = dict(os.environ)
    env["GIT_OPTIONAL_LOCKS"] = "0"  # never rewrite the index of the target while looking
    env.pop("PATCHKIT_FAULT", None)
    try:
        return subprocess.run(["git", "-C", root] + args, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None


def is_checkout(root: str) -> bool:
    proc = _git(root, ["rev-parse", "--is-inside-work-tree"])
    return proc is not None and proc.returncode == 0 and proc.stdout.strip() == b"true"


def describe_tag(root: str) -> Optional[str]:
    """The tag HEAD sits exactly on, without a leading "v", or None."""
    proc = _git(root, ["describe", "--tags", "--exact-match"])
    if proc is None or proc.returncode != 0:
        return None
    tag = proc.stdout.decode("utf-8", "replace").strip()
    return tag[1:] if tag.startswith("v") else tag or None


def changed_paths(root: str, rels: List[str]) -> Dict[str, str]:
    """Root-relative paths among ``rels`` that differ from HEAD, with git's two-letter status."""
    if not rels:
        return {}
    prefix_proc = _git(root, ["rev-parse", "--show-prefix"])
    prefix = prefix_proc.stdout.decode("utf-8", "surrogateescape").strip() if prefix_proc else ""
    proc = _git(root, ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--"] + rels)
    if proc is None or proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip() if proc else "git did not run"
        return {rel: "git status failed: %s" % err for rel in rels}
    out: Dict[str, str] = {}
    entries = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            i += 1  # the rename's source path follows
        if path.startswith(prefix):
            out[path[len(prefix):]] = code
    return out
