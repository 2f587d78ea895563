"""The git questions and object writes of revert fixes, git checks and ``--commit``, through
the host's ``git`` CLI; reads never touch a work tree."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import TargetError
from . import gitcli

#: Used for commits when the repository (and the environment) configure no identity.
FALLBACK_NAME = "patchkit"
FALLBACK_EMAIL = "patchkit@localhost"


@dataclass(frozen=True)
class Checkout:
    """A root inside a git work tree: where the tree's top is and the root's place in it."""

    top: str  # the work tree's top (real path)
    prefix: str  # the root's path inside the work tree, "" or ending in "/"

    def rel(self, root_rel: str) -> str:
        """A root-relative path as git names it (relative to the work tree's top)."""
        return self.prefix + root_rel

    def run(self, args: List[str], stdin: Optional[bytes] = None,
            env: Optional[Dict[str, str]] = None) -> bytes:
        proc = gitcli._git(self.top, args, stdin=stdin, env=env)
        if proc is None:
            raise TargetError("git did not run in %s (is git installed on the target?)" % self.top,
                              command=["git"] + args)
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip()
            raise TargetError("git %s failed in %s (exit %d): %s"
                              % (" ".join(args[:3]), self.top, proc.returncode, err or "no output"),
                              command=["git"] + args, cwd=self.top, exit=proc.returncode, stderr=err)
        return proc.stdout

    def output(self, args: List[str]) -> Optional[bytes]:
        """What git printed, or None when it failed (for questions a failure answers)."""
        proc = gitcli._git(self.top, args)
        return proc.stdout if proc is not None and proc.returncode == 0 else None

    def ok(self, args: List[str]) -> bool:
        return self.output(args) is not None

    def rev(self, rev: str) -> Optional[str]:
        """The commit ``rev`` names (tags peeled), or None."""
        out = self.output(["rev-parse", "--verify", "--quiet", rev + "^{commit}"])
        return (out or b"").decode().strip() or None

    def head(self) -> Optional[str]:
        return self.rev("HEAD")

    def is_ancestor(self, ancestor: str, of: str = "HEAD") -> bool:
        return self.ok(["merge-base", "--is-ancestor", ancestor, of])

    def blob(self, rev: str, repo_path: str) -> Optional[bytes]:
        """The bytes of ``repo_path`` at ``rev``, or None when the commit lacks it."""
        return self.output(["cat-file", "blob", "%s:%s" % (rev, repo_path)])

    def describe(self, sha: str) -> str:
        """``abbrev subject`` of a commit, for messages."""
        return self.run(["log", "-1", "--format=%h %s", sha, "--"]).decode("utf-8", "replace").strip()

    def parents(self, sha: str) -> List[str]:
        return self.run(["rev-list", "--parents", "-n", "1", sha, "--"]).decode().split()[1:]

    def commits_touching(self, since: str, repo_path: str) -> List[str]:
        """``abbrev subject`` of every commit after ``since`` up to HEAD that changed the file."""
        out = self.run(["log", "--format=%h %s", "%s..HEAD" % since, "--", repo_path])
        return [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]

    def changed_files(self, sha: str, parent: str, repo_paths: Sequence[str]) -> List[Tuple[str, str]]:
        """(status letter, repo path) of each file ``sha`` changed against ``parent``."""
        args = ["diff-tree", "-r", "--no-renames", "--name-status", "-z", parent, sha, "--"]
        fields = self.run(args + list(repo_paths)).decode("utf-8", "surrogateescape").split("\0")
        return [(fields[i][:1], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]

    def find_by_patch_id(self, patch_ids: Sequence[str], repo_paths: Sequence[str]) -> List[str]:
        """Commits of HEAD's history (newest first) whose whole change has one of the patch-ids;
        only those touching nothing but ``repo_paths`` are diffed."""
        if not patch_ids or not repo_paths:
            return []
        listing = self.run(["log", "-z", "--full-diff", "--name-only", "--no-renames",
                            "--format=%x01%H", "HEAD", "--"] + list(repo_paths))
        commits: Dict[str, set] = {}  # sha -> the files it touched, in log order
        for token in listing.decode("utf-8", "surrogateescape").split("\0"):
            if token.startswith("\x01"):
                files = commits.setdefault(token[1:].strip(), set())
            elif token.lstrip("\n"):
                files.add(token.lstrip("\n"))
        candidates = [sha for sha, files in commits.items() if files and files <= set(repo_paths)]
        if not candidates:
            return []
        log = self.run(["log", "--no-walk=unsorted", "-p", "--no-color", "--no-renames",
                        "--format=commit %H"] + candidates)
        ids = self.run(["patch-id", "--stable"], stdin=log).decode().split()
        wanted = set(patch_ids)
        found = {ids[i + 1] for i in range(0, len(ids) - 1, 2) if ids[i] in wanted}
        return [c for c in candidates if c in found]


def checkout_of(root_path: str) -> Optional[Checkout]:
    """The git checkout a root is in, or None (no ``.git`` upwards, or git cannot read it)."""
    top = gitcli.work_tree_top(root_path)
    if top is None:
        return None
    proc = gitcli._git(root_path, ["rev-parse", "--show-toplevel"])
    if proc is None or proc.returncode != 0:
        return None
    top = os.path.realpath(proc.stdout.decode("utf-8", "surrogateescape").strip())
    prefix = os.path.relpath(os.path.realpath(root_path), top)
    return Checkout(top, "" if prefix == "." else prefix + "/")


def merge_file(ours: bytes, base: bytes, theirs: bytes, labels: Tuple[str, str, str]) -> Tuple[bytes, int]:
    """``git merge-file -p --diff3``: the merged bytes and the number of conflicts."""
    with tempfile.TemporaryDirectory(prefix="patchkit-merge-") as tmp:
        names = [os.path.join(tmp, name) for name in ("ours", "base", "theirs")]
        for path, data in zip(names, (ours, base, theirs)):
            with open(path, "wb") as fh:
                fh.write(data)
        labelled = [arg for label in labels for arg in ("-L", label)]
        proc = gitcli._git(tmp, ["merge-file", "-p", "--diff3"] + labelled + names)
    if proc is None:
        raise TargetError("git merge-file did not run (is git installed on the target?)")
    if proc.returncode < 0 or proc.returncode > 127:
        raise TargetError("git merge-file failed (exit %d): %s"
                          % (proc.returncode, proc.stderr.decode("utf-8", "replace").strip()))
    return proc.stdout, proc.returncode


def identity_env(checkout: Checkout) -> Dict[str, str]:
    """Environment for a commit: the repository's configured identity, else the environment's,
    else ``patchkit <patchkit@localhost>``."""
    env: Dict[str, str] = {}
    for role in ("AUTHOR", "COMMITTER"):
        if os.environ.get("GIT_%s_NAME" % role) and os.environ.get("GIT_%s_EMAIL" % role):
            continue
        if not (checkout.ok(["config", "user.name"]) and checkout.ok(["config", "user.email"])):
            env["GIT_%s_NAME" % role] = FALLBACK_NAME
            env["GIT_%s_EMAIL" % role] = FALLBACK_EMAIL
    return env
