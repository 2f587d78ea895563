"""The workload of bench/perf.py: the 0.5.22 -> 0.5.23 drift and a 20-fix local series.

Built once into a work directory (reused by later runs when it is already there):

    base/              SGLang 0.5.22 as a git checkout (``patchkit upstream checkout``)
    catalog/           manifests/ and patches/: fix ``drift-0.5.23`` (one patch per changed
                       file) and fixes ``local-01`` .. ``local-20`` (one small patch each)
    series/<name>/     the same patches for the other tools: ``series`` (quilt's list),
                       ``mails/`` (git am, one mail per patch), ``files.txt`` (the patch files, in order)
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from common import Version, cli, unified_diff

OLD, NEW = "0.5.22", "0.5.23"
DRIFT = "drift-0.5.23"
LOCAL = [f"local-{i:02d}" for i in range(1, 21)]
MAIL_HEAD = ("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
             "From: Bench <bench@patchkit.invalid>\nDate: Sun, 29 Nov 2026 00:00:00 +0000\n"
             "Subject: [PATCH] {subject}\n\n{subject}\n---\n")


@dataclass(frozen=True)
class Workload:
    base: Path  # the 0.5.22 checkout every run copies
    catalog: Path
    series: dict[str, Path]  # "drift" / "local" -> directory with series, all.mbox, files.txt
    drift_files: int
    drift_bytes: int


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True, errors="surrogateescape").stdout


def _slug(path: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", path.lower().removeprefix("python/sglang/"))[-60:].strip("-.")


def _manifest(name: str, title: str, patches: list[str], pre: str = "", ver: str = "",
              releases: tuple[str, ...] = (OLD,)) -> str:
    entries = "".join(f'\n[[patches]]\nfile = "{p}"\nroot = "sglang"\n' for p in patches)
    return (f'format = 1\nname = "{name}"\nversion = 1\ntitle = "{title}"\nstatus = "active"\n'
            f'rationale = """{title}."""\n\n[upstream]\nproject = "sglang"\n'
            f'base_release = "{OLD}"\nreleases = {_toml_list(releases)}\nroot = "sglang"\n{entries}{pre}{ver}')


def _toml_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def _split_diff(text: str) -> list[tuple[str, str]]:
    """(path, git diff of that file) for each file of a whole-tree ``git diff``."""
    out = []
    for chunk in re.split(r"(?m)^(?=diff --git )", text):
        if chunk.startswith("diff --git "):
            path = chunk.split("\n", 1)[0].split(" b/", 1)[1]
            out.append((path, chunk))
    return out


def _local_edit(text: str, n: int) -> tuple[str, str] | None:
    """A small real-looking fix: name a returned value before returning it (3 lines)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"^(\s+)return (\S.*)$", line)
        if not m or line.rstrip().endswith(("\\", ",", "(", "[", "{")) or "#" in line:
            continue
        ind, expr = m.groups()
        new = [f"{ind}# local fix {n:02d}: keep the value explicit for the serving fork",
               f"{ind}result = {expr}", f"{ind}return result"]
        edited = "\n".join(lines[:i] + new + lines[i + 1:])
        try:
            ast.parse(edited)
        except SyntaxError:
            continue
        return edited, line.strip()
    return None


def _tool_series(dest: Path, patches: list[Path], subjects: list[str]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "series").write_text("".join(f"{p}\n" for p in patches))  # absolute: QUILT_PATCHES=/
    (dest / "files.txt").write_text("".join(f"{p}\n" for p in patches))
    # One mail per file, as git format-patch writes them (one big mbox loses CRs in mailsplit).
    (dest / "mails").mkdir(exist_ok=True)
    for i, (patch, subject) in enumerate(zip(patches, subjects), 1):
        mail = (MAIL_HEAD.format(subject=subject).encode() + patch.read_bytes()
                + b"-- \n2.39.5\n\n")
        (dest / "mails" / f"{i:04d}.patch").write_bytes(mail)


def build(workdir: Path, version: Version, say=print) -> Workload:
    """Make (or reuse) the workload in ``workdir``, the releases fetched by ``version``'s CLI."""
    base, catalog = workdir / "base", workdir / "catalog"
    series = {"drift": workdir / "series" / "drift", "local": workdir / "series" / "local"}
    done = workdir / ".built"
    if not done.exists():
        say(f"fetching SGLang {OLD} and {NEW}")
        cli(version, "upstream", "fetch", OLD, NEW)
        shutil.rmtree(workdir, ignore_errors=True)
        cli(version, "upstream", "checkout", OLD, str(base))
        say(f"diffing {OLD}..{NEW}, one patch per file")
        drift = _split_diff(subprocess.run(  # the checkout is a clone: it has both tags
            ["git", "diff", "--no-renames", f"v{OLD}", f"v{NEW}"], cwd=base,
            check=True, capture_output=True).stdout.decode("utf-8", "surrogateescape"))
        pdir = catalog / "patches" / DRIFT
        pdir.mkdir(parents=True)
        (catalog / "manifests").mkdir()
        names, paths = [], []
        for i, (path, chunk) in enumerate(drift, 1):
            name = f"{i:04d}-{_slug(path)}.patch"
            (pdir / name).write_bytes(chunk.encode("utf-8", "surrogateescape"))
            names.append(name)
            paths.append(pdir / name)
        (catalog / "manifests" / f"{DRIFT}.toml").write_text(
            _manifest(DRIFT, f"SGLang {NEW}'s changes to {OLD}, one patch per file", names))
        _tool_series(series["drift"], paths, [f"drift: {p}" for p, _ in drift])
        changed = {p for p, _ in drift}
        candidates = [p for p in git(base, "ls-files", "python/sglang/srt").splitlines()
                      if p.endswith(".py") and p not in changed]
        local_paths, subjects = [], []
        for path in candidates:
            if len(local_paths) == len(LOCAL):
                break
            n = len(local_paths) + 1
            original = (base / path).read_text(encoding="utf-8")
            edit = _local_edit(original, n)
            if edit is None:
                continue
            name = LOCAL[n - 1]
            pfile = catalog / "patches" / name / f"0001-{_slug(path)}.patch"
            pfile.parent.mkdir(parents=True)
            pfile.write_text(unified_diff(original.encode(), edit[0].encode(), path))
            pattern = edit[1].replace("\\", "\\\\").replace('"', '\\"')
            pre = (f'\n[[preconditions]]\nkind = "grep"\nroot = "sglang"\npath = "{path}"\n'
                   f'pattern = "{pattern}"\npresent = true\n')
            ver = (f'\n[[verification]]\nkind = "python-syntax"\nroot = "sglang"\n'
                   f'path = "{path}"\n')
            (catalog / "manifests" / f"{name}.toml").write_text(
                _manifest(name, f"local fix {n:02d} in {Path(path).name}", [pfile.name], pre, ver,
                          releases=(OLD, NEW)))
            local_paths.append(pfile)
            subjects.append(f"local fix {n:02d}: {path}")
        _tool_series(series["local"], local_paths, subjects)
        done.write_text("ok\n")
    files = [Path(p) for p in (series["drift"] / "files.txt").read_text().splitlines()]
    return Workload(base, catalog, series, len(files), sum(p.stat().st_size for p in files))
