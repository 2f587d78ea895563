"""The git calls of a rebase: GitPython's command layer over the upstream history.

Merges are git's own (``git merge-file`` through :class:`git.cmd.Git`), blobs come from
GitPython's persistent ``git cat-file --batch`` process (one per run, not one per blob), and
upstream commits are matched by ``git patch-id --stable``. GitPython is imported on the first
merge or blob read, not at module import: a ``--skip`` or ``--continue`` that only writes
what the start already classified is a short process and never pays for it. The cheap
lookups (rev-parse, log, patch-id) stay plain ``git`` processes for the same reason.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import TargetError


def _gitpython(working_dir: Path | str | None) -> Any:
    """A GitPython command runner (``git.cmd.Git``), imported on first use."""
    from git.cmd import Git

    return Git(os.fspath(working_dir) if working_dir is not None else None)


def _git(git_dir: Path | str, args: Sequence[str], *, data: bytes | None = None,
         ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[bytes]:
    cmd = ["git", "-C", os.fspath(git_dir), *args]
    try:
        proc = subprocess.run(cmd, input=data, capture_output=True,
                              stdin=None if data is not None else subprocess.DEVNULL)
    except OSError as exc:
        raise TargetError(f"cannot run git: {exc}", command=cmd) from None
    if proc.returncode not in ok:
        raise TargetError(f"git {' '.join(args[:2])} failed in {git_dir} (exit {proc.returncode}): "
                          f"{proc.stderr.decode(errors='replace').strip() or 'no output'}",
                          command=cmd, exit=proc.returncode)
    return proc


def rev_parse(git_dir: Path | str, rev: str) -> str | None:
    """The commit ``rev`` names in ``git_dir`` (tags peeled), or None."""
    proc = _git(git_dir, ["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], ok=(0, 1, 128))
    out = proc.stdout.decode().strip()
    return out if proc.returncode == 0 and out else None


class Blobs:
    """Blob reads of one run through GitPython's persistent ``git cat-file --batch``."""

    def __init__(self, git_dir: Path | str) -> None:
        self.git_dir = Path(git_dir)
        self._cmd: Any = None
        self._seen: dict[tuple[str, str], bytes | None] = {}

    def read(self, rev: str, path: str) -> bytes | None:
        """The bytes of ``path`` in commit ``rev``; None when the commit has no such file."""
        key = (rev, path)
        if key not in self._seen:
            self._seen[key] = self._ask(f"{rev}:{path}")
        return self._seen[key]

    def _ask(self, spec: str) -> bytes | None:
        if "\n" in spec:
            return None
        if self._cmd is None:
            self._cmd = _gitpython(self.git_dir)
        try:
            _sha, kind, _size, data = self._cmd.get_object_data(spec)
        except ValueError:  # cat-file's "<spec> missing": no such file in that commit
            return None
        except OSError as exc:
            raise TargetError(f"git cat-file --batch in {self.git_dir} stopped answering "
                              f"(asked for {spec}): {exc}; is the repository readable?") from None
        return data if kind in (b"blob", "blob") else None  # GitPython gives bytes here

    def close(self) -> None:
        if self._cmd is not None:
            self._cmd.clear_cache()  # ends the persistent cat-file process
            self._cmd = None


def merge_file(ours: bytes, base: bytes, theirs: bytes, *,
               labels: tuple[str, str, str]) -> tuple[bytes, int]:
    """git's three-way file merge (:func:`patchkit.gitrepo.merge_file`, GitPython's command
    layer), imported on the first merge so a run that merges nothing never loads GitPython."""
    from ..gitrepo import merge_file as merge

    return merge(ours, base, theirs, labels=labels)


def _diff_only(text: str) -> str:
    """A patch file's diffs without its mail header (what patch-id hashes)."""
    cut = text.find("diff --git ")
    return text[cut:] if cut >= 0 else ""


def patch_ids(diffs: Sequence[str]) -> list[str | None]:
    """``git patch-id --stable`` of each diff, in one process; None for an empty diff."""
    chunks = []
    for i, diff in enumerate(diffs):
        chunks.append(f"commit {i + 1:040x}\n\n{_diff_only(diff)}")
    proc = _git(tempfile.gettempdir(), ["patch-id", "--stable"],
                data="".join(c if c.endswith("\n") else c + "\n" for c in chunks)
                .encode("utf-8", "surrogateescape"))
    found: dict[int, str] = {}
    for line in proc.stdout.decode().splitlines():
        pid, _, cid = line.partition(" ")
        found[int(cid, 16) - 1] = pid
    return [found.get(i) for i in range(len(diffs))]


def upstream_changes(git_dir: Path | str, base: str, onto: str, paths: Iterable[str]
                     ) -> list[tuple[str, str, dict[str, str]]]:
    """The commits of ``base..onto`` touching ``paths``: (sha, subject, {path: its diff}).

    One ``git log -p``; each commit's diff is split per file so a fix's files can be
    matched even when the upstream commit also changed other files.
    """
    wanted = sorted(set(paths))
    if not wanted:
        return []
    proc = _git(git_dir, ["-c", "core.quotePath=false", "log", "-p", "--no-renames",
                          "--no-color", "--no-ext-diff", "--format=%x1e%H %s",
                          f"{base}..{onto}", "--", *wanted])
    out = []
    for record in proc.stdout.decode("utf-8", "surrogateescape").split("\x1e")[1:]:
        head, _, body = record.partition("\n")
        sha, _, subject = head.partition(" ")
        files: dict[str, str] = {}
        for part in body.split("\ndiff --git ")[0:]:
            part = part if part.startswith("diff --git ") else "diff --git " + part.lstrip("\n")
            if not part.startswith("diff --git a/"):
                continue
            first = part.split("\n", 1)[0]
            name = first[len("diff --git a/"):].split(" b/", 1)[0]
            files[name] = part if part.endswith("\n") else part + "\n"
        out.append((sha, subject, files))
    return out
