"""The git questions and object writes of revert fixes, git checks and ``--commit``, through
the host's ``git`` CLI; reads never touch a work tree."""

from __future__ import annotations

import os
import re
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import TargetError
from . import gitcli
from .hunks import split_lines
from .paths import dot_git_top
from .recordbase import Record, record_dataclass

#: Used for commits when the repository (and the environment) configure no identity.
FALLBACK_NAME = "patchkit"
FALLBACK_EMAIL = "patchkit@localhost"


@record_dataclass(frozen=True)
class Checkout(Record):
    """A root inside a git work tree: where the tree's top is and the root's place in it."""

    top: str  # the work tree's top (real path)
    prefix: str  # the root's path inside the work tree, "" or ending in "/"

    def rel(self, root_rel: str) -> str:
        """A root-relative path as git names it (relative to the work tree's top)."""
        return self.prefix + root_rel

    def run(self, args: List[str], stdin: Optional[bytes] = None,
            env: Optional[Dict[str, str]] = None) -> bytes:
        proc = gitcli.run(self.top, args, stdin=stdin, env=env)
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
        proc = gitcli.run(self.top, args)
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

    def blobs(self, specs: Sequence[Tuple[str, str]]) -> List[Optional[bytes]]:
        """The bytes of each ``(rev, repo_path)``, None where the commit lacks the file: one
        ``git cat-file --batch`` (a path with a newline, which it cannot name, asks alone)."""
        if any("\n" in path for _rev, path in specs):
            return [self.output(["cat-file", "blob", "%s:%s" % spec]) for spec in specs]
        query = "".join("%s:%s\n" % spec for spec in specs).encode("utf-8", "surrogateescape")
        out = self.run(["cat-file", "--batch"], stdin=query) if specs else b""
        found: List[Optional[bytes]] = []
        at = 0
        for _spec in specs:  # "<oid> <type> <size>\n<bytes>\n", or "<name> missing\n"
            end = out.index(b"\n", at)
            head, at = out[at:end].split(), end + 1
            if len(head) == 3 and head[2].isdigit():
                size = int(head[2])
                found.append(out[at:at + size] if head[1] == b"blob" else None)
                at += size + 1
            else:
                found.append(None)
        return found

    def describe(self, sha: str) -> str:
        """``abbrev subject`` of a commit, for messages."""
        return self.run(["log", "-1", "--format=%h %s", sha, "--"]).decode("utf-8", "replace").strip()

    def commits(self, shas: Sequence[str]) -> List[Commit]:
        """Each commit's parents, title and changed files, in one ``git log``."""
        if not shas:
            return []
        out = self.run(["log", "--no-walk=unsorted", "--root", "-z", "--name-status", "--no-renames",
                        "--format=%x01%H%x00%P%x00%h %s"] + list(shas) + ["--"])
        found: List[Commit] = []
        for record in out.decode("utf-8", "surrogateescape").split("\x01")[1:]:
            fields = record.split("\0")
            sha, parents, title = fields[:3]
            files = tuple((fields[i].strip()[:1], fields[i + 1]) for i in range(3, len(fields) - 1, 2))
            found.append(Commit(sha, tuple(parents.split()), title, files))
        return found

    def commits_touching(self, since: str, repo_path: str) -> List[str]:
        """``abbrev subject`` of every commit after ``since`` up to HEAD that changed the file."""
        out = self.run(["log", "--format=%h %s", "%s..HEAD" % since, "--", repo_path])
        return [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]

    def find_by_patch_id(self, series: str, repo_paths: Sequence[str]) -> Tuple[Optional[str], List[Commit]]:
        """The patch-id of ``series`` (a fix's patch files joined) and the commits of HEAD's
        history (newest first) whose whole change has it: those touching ``repo_paths`` are
        diffed there, and one ``git patch-id`` hashes them and the series together."""
        log = self.run(["log", "-p", "--root", "--no-color", "--no-renames", "--format=commit %H",
                        "HEAD", "--"] + list(repo_paths)) if repo_paths else b""
        data = ("commit %s\n\n%s" % ("0" * 40, series_diff(series))).encode("utf-8", "surrogateescape")
        ids = self.run(["patch-id", "--stable"], stdin=data + log).decode().split()
        by_commit = dict(zip(ids[1::2], ids[0::2]))
        pid = by_commit.pop("0" * 40, None)
        same = [sha for sha, other in by_commit.items() if other == pid]
        # a commit that also changed other files does not hold the series alone
        return pid, [c for c in self.commits(same) if {p for _s, p in c.files} <= set(repo_paths)]


@record_dataclass(frozen=True)
class Commit(Record):
    """One commit as ``commits`` lists it."""

    sha: str
    parents: Tuple[str, ...]
    title: str  # "abbrev subject"
    files: Tuple[Tuple[str, str], ...]  # (status letter, repo path) against its first parent


_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def series_diff(text: str) -> str:
    """The diffs of patch files (several joined) without the mail headers, diffstats and
    signatures between them (``git patch-id`` would stop there), so a series hashes as one
    commit: the one rule of a series' patch-id, here and in the client's ``gitrepo``."""
    kept: List[str] = []
    state, old, new = "out", 0, 0
    for line in split_lines(text):
        if old > 0 or new > 0:
            old -= line[:1] in " -"
            new -= line[:1] in " +"
        elif line.startswith("diff "):
            state = "header"
        elif state != "out":
            m = _HUNK.match(line)
            if m:
                state, old, new = "hunks", int(m.group(1) or 1), int(m.group(2) or 1)
            elif state == "hunks" and not line.startswith("\\"):
                state = "out"
        if state != "out":
            kept.append(line if line.endswith("\n") else line + "\n")
    return "".join(kept)


def checkout_of(root_path: str) -> Optional[Checkout]:
    """The git checkout a root is in, or None (no ``.git`` upwards, or git cannot read it)."""
    return checkout_and_head(root_path, head=False)[0]


def checkout_and_head(root_path: str, head: bool = True) -> Tuple[Optional[Checkout], Optional[str]]:
    """:func:`checkout_of` and, with ``head``, the commit at HEAD (None when unborn), from one
    ``git rev-parse`` (it prints the top, then the commit; an unborn HEAD exits 1)."""
    if dot_git_top(root_path) is None:
        return None, None
    args = ["rev-parse", "--show-toplevel"] + (["--verify", "--quiet", "HEAD^{commit}"] if head else [])
    proc = gitcli.run(root_path, args)
    lines = [] if proc is None else proc.stdout.decode("utf-8", "surrogateescape").splitlines()
    if proc is None or proc.returncode not in ((0, 1) if head else (0,)) or not lines:
        return None, None
    top = os.path.realpath(lines[0].strip())
    prefix = os.path.relpath(os.path.realpath(root_path), top)
    sha = lines[1].strip() if head and proc.returncode == 0 and len(lines) > 1 else None
    return Checkout(top, "" if prefix == "." else prefix + "/"), sha or None


def merge_file(ours: bytes, base: bytes, theirs: bytes,
               labels: Tuple[str, str, str] = ("ours", "base", "theirs")) -> Tuple[bytes, int]:
    """``git merge-file -p --diff3``: the merged bytes and the number of conflicts (the
    client's rebase merges with this one too)."""
    with tempfile.TemporaryDirectory(prefix="patchkit-merge-") as tmp:
        names = [os.path.join(tmp, name) for name in ("ours", "base", "theirs")]
        for path, data in zip(names, (ours, base, theirs)):
            with open(path, "wb") as fh:
                fh.write(data)
        labelled = [arg for label in labels for arg in ("-L", label)]
        proc = gitcli.run(tmp, ["merge-file", "-p", "--diff3"] + labelled + names)
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
