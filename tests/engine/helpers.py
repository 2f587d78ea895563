"""Builders for engine tests: small SGLang-like trees, FILE records, requests, tree snapshots."""

from __future__ import annotations

import difflib
import hashlib
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from patchkit.engine.hunks import split_lines

MOD = "python/sglang/srt/mod.py"
SCRIPT = "scripts/launch.sh"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def module_text(n: int = 40) -> str:
    return "".join("def f%d(x):\n    return x + %d\n\n" % (i, i) for i in range(n))


def make_checkout(base: Path, release: str = "0.5.21", name: str = "sglang", git_repo: bool = True) -> Path:
    """A checkout-layout root: python/sglang with a _version.py like setuptools-scm writes."""
    root = base / name
    pkg = root / "python" / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text("version: str\n__version__ = version = '%s'\n" % release)
    (pkg / "srt" / "__init__.py").write_text("")
    (pkg / "srt" / "mod.py").write_text(module_text())
    (root / "scripts").mkdir()
    (root / SCRIPT).write_text("#!/bin/bash\nset -e\necho launching\nexec python -m sglang\n")
    os.chmod(root / SCRIPT, 0o755)
    if git_repo:
        git(root, "init", "-q")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "release %s" % release)
    return root


def hunks_from(before: str, after: str, context: int = 3) -> List[Dict[str, Any]]:
    """Hunks of a unified diff (what patchkit.catalog.series would produce from a patch file)."""
    a, b = split_lines(before), split_lines(after)
    out = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        lines: List[List[str]] = []
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines += [[" ", t] for t in a[a1:a2]]
            else:
                lines += [["-", t] for t in a[a1:a2]] + [["+", t] for t in b[b1:b2]]
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        oc, nc = i2 - i1, j2 - j1
        out.append({"old_start": i1 + 1 if oc else i1, "old_count": oc,
                    "new_start": j1 + 1 if nc else j1, "new_count": nc, "lines": lines})
    return out


def file_record(path: str, before: Optional[str], after: Optional[str], patch: str = "0001-a.patch",
                root: str = "sglang", mode: Any = None) -> Dict[str, Any]:
    op = "create" if before is None else "delete" if after is None else "modify"
    return {"root": root, "path": path, "patch": patch, "op": op, "mode": mode,
            "hunks": hunks_from(before or "", after or "")}


def compact(record: Dict[str, Any]) -> Dict[str, Any]:
    """The record with each hunk's lines as one ``body``: the form patchkit.request_builder sends."""
    from patchkit.engine.hunks import hunk_body

    out = {k: v for k, v in record.items() if k != "hunks"}
    out["hunks"] = [{k: v for k, v in h.items() if k != "lines"} for h in record["hunks"]]
    for hunk, orig in zip(out["hunks"], record["hunks"]):
        hunk["body"] = hunk_body(orig["lines"])
    return out


def fix(name: str, files: List[Dict[str, Any]], version: int = 1, **extra: Any) -> Dict[str, Any]:
    data = {"name": name, "version": version, "title": "fix %s" % name, "requires": [],
            "release": {"root": "sglang", "versions": ["0.5.21"]},
            "patches": [{"file": "0001-a.patch", "sha256": "0" * 64}], "files": files,
            "preconditions": [], "verification": [], "actions": {"purge_pycache": True},
            "scripts": {}, "rollback": {"strategy": "restore"}}
    data.update(extra)
    return data


def request(op: str, roots: Dict[str, Path], fixes: List[Dict[str, Any]], **extra: Any) -> Dict[str, Any]:
    data = {"format": 1, "op": op, "dry_run": False, "force": False,
            "roots": {k: str(v) for k, v in roots.items()}, "state_root": "sglang", "python": None,
            "lock_timeout": 5.0, "fixes": fixes}
    data.update(extra)
    return data


def snapshot(root: Path, skip_git: bool = True, skip_state: bool = True) -> Dict[str, Any]:
    """Every path under root with its type, mode, bytes hash and (for files) mtime.

    patchkit's own ``.patchkit/`` (lock, state) is left out unless ``skip_state`` is false.
    """
    out: Dict[str, Any] = {}
    for dirpath, dirs, files in os.walk(root):
        if skip_git and ".git" in dirs:
            dirs.remove(".git")
        if skip_state and dirpath == str(root) and ".patchkit" in dirs:
            dirs.remove(".patchkit")
        for d in dirs:
            p = os.path.join(dirpath, d)
            out[os.path.relpath(p, root)] = ("dir", os.lstat(p).st_mode)
        for f in files:
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            if os.path.islink(p):
                out[os.path.relpath(p, root)] = ("link", os.readlink(p))
            else:
                digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
                out[os.path.relpath(p, root)] = ("file", st.st_mode, digest, st.st_mtime_ns)
    return out


def content_snapshot(root: Path) -> Dict[str, Any]:
    """Like snapshot but without mtimes and without patchkit's own directory."""
    return {k: v[:3] if v[0] == "file" else v for k, v in snapshot(root).items()}


def full_snapshot(root: Path) -> Dict[str, Any]:
    """Everything under root, ``.git`` and ``.patchkit`` included, directories with their mtimes:
    what "the run left the target byte-identical" means."""
    out = snapshot(root, skip_git=False, skip_state=False)
    for rel, value in list(out.items()):
        if value[0] == "dir":
            out[rel] = value + (os.lstat(os.path.join(root, rel)).st_mtime_ns,)
    out["."] = ("dir", os.lstat(root).st_mode, os.lstat(root).st_mtime_ns)
    return out


HOLD_LOCK = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
             "fcntl.flock(fd, fcntl.LOCK_EX)\n"
             "print('held', flush=True)\n"
             "sys.stdin.read()\n")


@contextmanager
def lock_held_elsewhere(root: Path) -> Iterator[int]:
    """Another process holds the target's lock (an flock on the state root) for the block."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc.pid
    finally:
        proc.communicate(input="", timeout=60)
