"""Twenty small, deterministic fixes against SGLang 0.5.21 for the rebase benchmark.

A fix is one small edit of the kind a team carries on a serving engine: a constant tweak,
a log level lowered, a log line before a ``raise``, a guarded early return before a loop.
Candidate edits are found by pattern in the 0.5.21 source (the same candidates on every
run, in a hashed but fixed order), then each is classified against 0.5.23 by what a
three-way merge (``git merge-file``) and GNU ``patch`` make of it:

- ``untouched``: the file did not change between the releases;
- ``moved``: the file changed but not near the edit; the edit's lines moved;
- ``context``: a line of the edit's context changed upstream; the 3-way merge is clean
  and GNU ``patch`` fuzzes the hunk into place;
- ``misplaced``: the edit's surroundings changed upstream and GNU ``patch`` applies the
  hunk with fuzz where the 3-way merge disagrees (or conflicts): chosen on purpose, to
  show what fuzz can do;
- ``conflict``: the edited line itself changed upstream; the 3-way merge conflicts.

Each fix touches one file of its own, so the fixes are independent of their order.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common import unified_diff

PLAN = (("untouched", 5), ("moved", 6), ("context", 3), ("misplaced", 2), ("conflict", 4))
SCOPE = "python/sglang/srt/"


@dataclass(frozen=True)
class Fix:
    name: str
    kind: str  # one of PLAN's kinds
    path: str
    line: int  # 1-based line of the edit in 0.5.21
    title: str
    old: bytes  # the file in 0.5.21
    fixed: bytes  # the file in 0.5.21 with the fix
    new: bytes  # the file in 0.5.23
    expected: bytes | None  # the 3-way merge result on 0.5.23; None = it conflicts
    patch: str  # git-style diff of old -> fixed


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True,
                          capture_output=True, text=True).stdout


# -- edits ---------------------------------------------------------------------------------

_CONST = re.compile(r"^([A-Z][A-Z0-9_]{3,})(\s*:\s*int)?\s*=\s*(\d{1,6})\s*$")
_INFO = re.compile(r"^(\s+)logger\.info\(")
_RAISE = re.compile(r"^(\s{8,})raise (\w+(?:Error|Exception))\(")
_LOOP = re.compile(r"^(\s{8,})for (\w+) in (self\.\w+):\s*$")
_DEF = re.compile(r"^\s*def (\w+)\(")


def _func(lines: list[str], i: int) -> str:
    for j in range(i, -1, -1):
        m = _DEF.match(lines[j])
        if m:
            return m.group(1)
    return "module"


def _edits(lines: list[str], has_logger: bool):
    """(index, replacement lines for lines[index], title) for every candidate edit."""
    for i, line in enumerate(lines):
        text = line.rstrip("\n")
        m = _CONST.match(text)
        if m:
            value = int(m.group(3))
            new = str(value * 2 if value else 1)
            yield i, [text[: m.start(3)] + new + text[m.end(3):] + "\n"], \
                f"Raise {m.group(1)} from {value} to {new}"
            continue
        m = _INFO.match(text)
        if m:
            yield i, [line.replace("logger.info(", "logger.debug(", 1)], \
                f"Log {_func(lines, i)}'s message at debug level"
            continue
        m = _RAISE.match(text)
        if m and has_logger:
            ind, func = m.group(1), _func(lines, i)
            yield i, [f'{ind}logger.warning("{func}: raising {m.group(2)}")\n', line], \
                f"Log before {func} raises {m.group(2)}"
            continue
        m = _LOOP.match(text)
        if m:
            ind, seq = m.group(1), m.group(3)
            yield i, [f"{ind}if not {seq}:\n", f"{ind}    return\n", line], \
                f"Return early from {_func(lines, i)} when {seq} is empty"


# -- classification ---------------------------------------------------------------------------


def merge3(ours: bytes, base: bytes, theirs: bytes) -> bytes | None:
    """``git merge-file -p``: the merged text, or None when it conflicts."""
    with tempfile.TemporaryDirectory(prefix="patchkit-bench-merge-") as tmp:
        paths = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = Path(tmp) / name
            p.write_bytes(data)
            paths.append(str(p))
        proc = subprocess.run(["git", "merge-file", "-p", *paths], capture_output=True)
        return proc.stdout if proc.returncode == 0 else None


def gnu_patch(text: bytes, patch: str, path: str) -> tuple[bool, bytes, str]:
    """GNU ``patch -p1`` (default fuzz) of one file: (succeeded, result, its messages)."""
    with tempfile.TemporaryDirectory(prefix="patchkit-bench-patch-") as tmp:
        target = Path(tmp) / path
        target.parent.mkdir(parents=True)
        target.write_bytes(text)
        proc = subprocess.run(["patch", "-p1", "-N", "--no-backup-if-mismatch", "-r", "-"],
                              input=patch.encode(), cwd=tmp, capture_output=True)
        return proc.returncode == 0, target.read_bytes(), proc.stdout.decode(errors="replace")


def _classify(old: bytes, fixed: bytes, new: bytes, patch: str, path: str) -> tuple[str, bytes | None] | None:
    expected = merge3(new, old, fixed)
    if old == new:
        return "untouched", expected
    if expected is None:
        ok, _result, said = gnu_patch(new, patch, path)
        return ("misplaced" if ok else "conflict"), None
    ok, result, said = gnu_patch(new, patch, path)
    if not ok:
        return None
    if "fuzz" in said:
        return ("context" if result == expected else "misplaced"), expected
    if "offset" in said and result == expected:
        return "moved", expected
    return None  # same place, nothing moved: not interesting here


def build_fixes(git_dir: Path, base: str = "v0.5.21", onto: str = "v0.5.23") -> list[Fix]:
    """The benchmark's fixes, read from the upstream repository's two release tags."""
    changed = set(_git(git_dir, "diff", "--name-only", "--diff-filter=M", base, onto).split())
    files = [p for p in _git(git_dir, "ls-tree", "-r", "--name-only", base).split()
             if p.startswith(SCOPE) and p.endswith(".py")]
    # A fixed, hashed order: spread over the tree, the same on every run.
    files.sort(key=lambda p: hashlib.sha256(p.encode()).hexdigest())
    want = dict(PLAN)
    chosen: dict[str, list[Fix]] = {kind: [] for kind in want}
    for path in files:
        if all(len(chosen[k]) >= n for k, n in want.items()):
            break
        untouched = path not in changed
        if untouched and len(chosen["untouched"]) >= want["untouched"]:
            continue
        old = _git_bytes(git_dir, base, path)
        new = old if untouched else _git_bytes(git_dir, onto, path)
        lines = old.decode("utf-8", "surrogateescape").splitlines(keepends=True)
        has_logger = any(line.startswith("logger = ") for line in lines)
        for i, repl, title in _edits(lines, has_logger):
            fixed = "".join(lines[:i] + repl + lines[i + 1:]).encode("utf-8", "surrogateescape")
            patch = unified_diff(old, fixed, path)
            got = _classify(old, fixed, new, patch, path)
            if got is None:
                continue
            kind, expected = got
            if len(chosen[kind]) >= want[kind]:
                continue
            n = sum(len(v) for v in chosen.values()) + 1
            chosen[kind].append(Fix(f"bench-fix-{n:02d}", kind, path, i + 1, title, old, fixed,
                                    new, expected, patch))
            break  # one fix per file
    fixes = [f for kind, _ in PLAN for f in chosen[kind]]
    missing = {k: n - len(chosen[k]) for k, n in want.items() if len(chosen[k]) < n}
    if missing:
        raise SystemExit(f"could not find fixes of every kind in {base}..{onto}: missing {missing}")
    # Number them in a mixed, fixed order so the kinds are interleaved in the series.
    fixes.sort(key=lambda f: hashlib.sha256(f.path.encode()).hexdigest())
    return [Fix(f"bench-fix-{n:02d}", f.kind, f.path, f.line, f.title, f.old, f.fixed, f.new,
                f.expected, f.patch) for n, f in enumerate(fixes, 1)]


def _git_bytes(git_dir: Path, rev: str, path: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "blob", f"{rev}:{path}"],
                          check=True, capture_output=True).stdout
