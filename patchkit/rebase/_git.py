"""The git calls of a rebase, through plain ``git`` processes (no GitPython).

A ``--skip`` or ``--continue`` is a short process: importing GitPython and spawning its
helper processes for every blob cost more than the work. One ``git cat-file --batch``
serves every blob read of a run; merges go through ``git merge-file``; upstream commits
are matched by ``git patch-id --stable``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import TargetError


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
    """Blob reads of one run through one ``git cat-file --batch`` process (started lazily)."""

    def __init__(self, git_dir: Path | str) -> None:
        self.git_dir = Path(git_dir)
        self._proc: subprocess.Popen[bytes] | None = None
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
        if self._proc is None:
            self._proc = subprocess.Popen(
                ["git", "-C", os.fspath(self.git_dir), "cat-file", "--batch"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(spec.encode("utf-8", "surrogateescape") + b"\n")
        self._proc.stdin.flush()
        header = self._proc.stdout.readline()
        if not header:
            raise TargetError(f"git cat-file --batch in {self.git_dir} stopped answering "
                              f"(asked for {spec}); is the repository readable?")
        parts = header.split()
        if len(parts) != 3:  # "<spec> missing" / "ambiguous"
            return None
        data = self._proc.stdout.read(int(parts[2]))
        self._proc.stdout.read(1)
        return data if parts[1] == b"blob" else None

    def close(self) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.close()
            self._proc.wait()
            self._proc.stdout.close()
            self._proc = None


def merge_file(ours: bytes, base: bytes, theirs: bytes, *,
               labels: tuple[str, str, str]) -> tuple[bytes, int]:
    """git's three-way file merge (``git merge-file -p --diff3``): result, conflicted regions."""
    with tempfile.TemporaryDirectory(prefix="patchkit-merge-") as tmp:
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = Path(tmp) / name
            p.write_bytes(data)
            names.append(str(p))
        cmd = ["git", "merge-file", "-p", "--diff3"]
        for label in labels:
            cmd += ["-L", label]
        proc = subprocess.run([*cmd, *names], capture_output=True, stdin=subprocess.DEVNULL)
    if proc.returncode < 0 or proc.returncode > 127:
        raise TargetError(f"git merge-file failed (exit {proc.returncode}): "
                          f"{proc.stderr.decode(errors='replace').strip()}", command=cmd)
    return proc.stdout, proc.returncode


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
