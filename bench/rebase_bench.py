"""Rebase twenty small fixes from SGLang 0.5.21 onto 0.5.23: patchkit against git, GNU patch, quilt.

The fixes (``bench/rebase_fixes.py``) are written against 0.5.21 as a patchkit catalog
(manifests + series) and as commits on a branch from ``v0.5.21``. Each repetition runs, each
approach on a fresh copy, interleaved:

- ``patchkit rebase --all --onto 0.5.23 --json`` on the generated catalog (every version),
  then ``patchkit rebase --skip --json`` at each stop;
- ``git rebase --onto v0.5.23 v0.5.21 fixes``, ``git rebase --skip`` on every conflict;
- a ``git cherry-pick`` loop onto ``v0.5.23``, ``git cherry-pick --skip`` on every conflict;
- GNU ``patch -p1`` of each fix on a 0.5.23 tree (default fuzz), its messages recorded;
- ``quilt push -a`` on a 0.5.23 tree; where it stops, the failing patch is dropped from
  the series (``quilt delete -n``) and the push goes on.

Each fix's file after the run is compared with the three-way merge (``git merge-file``)
of the fix onto 0.5.23: equal is a correct landing, unchanged is a skipped fix, anything
else is a fix landed in the wrong place (or landed where the 3-way merge conflicts).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from common import GIT_ENV, REPO, Sample, Version, cli, fmt, say
from rebase_fixes import PLAN, Fix, build_fixes

SECTION = "## Rebase onto a new release"
BASE, ONTO = "0.5.21", "0.5.23"
HUNK = re.compile(r"^Hunk #(\d+) (succeeded|FAILED) at (\d+)(?: with fuzz (\d+))?(?: \(offset (-?\d+) lines?\))?",
                  re.M)
OTHERS = ("git rebase", "git cherry-pick", "GNU patch", "quilt")


@dataclass
class Run:
    seconds: float
    through: int = 0  # fixes the tool reported as applied / picked
    conflicts: int = 0  # fixes it stopped on (skipped)
    fuzzed: int = 0  # hunks it placed with fuzz
    outcomes: dict[str, str] = field(default_factory=dict)  # fix -> correct | skipped | wrong
    notes: list[str] = field(default_factory=list)
    detail: dict[str, str] = field(default_factory=dict)  # fix -> how it was placed


def sh(argv: list[str], cwd: Path, check: bool = True, env: dict[str, str] | None = None,
       ) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True,
                          env={**os.environ, **GIT_ENV, "HOME": "", **(env or {})})
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed in {cwd} ({proc.returncode}):\n"
                         f"{proc.stderr.decode(errors='replace')}{proc.stdout.decode(errors='replace')}")
    return proc


def user_upstream() -> Path:
    """The user's upstream cache (``patchkit upstream``'s default), for the measured runs,
    whose own cache directories are empty."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(os.environ.get("PATCHKIT_UPSTREAM") or Path(cache) / "patchkit" / "upstream")


# -- setup (untimed) ------------------------------------------------------------------------


def write_catalog(fixes: list[Fix], dest: Path) -> None:
    (dest / "manifests").mkdir(parents=True)
    for fix in fixes:
        patch = f"0001-{fix.name}.patch"
        (dest / "patches" / fix.name).mkdir(parents=True)
        (dest / "patches" / fix.name / patch).write_text(fix.patch)
        (dest / "manifests" / f"{fix.name}.toml").write_text(
            f'format = 1\nname = "{fix.name}"\nversion = 1\ntitle = "{fix.title}"\nstatus = "active"\n'
            f'rationale = """Benchmark fix ({fix.kind}): {fix.title} in {fix.path}, line {fix.line} of {BASE}."""\n'
            f'depends_on = []\n\n[upstream]\nproject = "sglang"\nbase_release = "{BASE}"\n'
            f'releases = ["{BASE}"]\nroot = "sglang"\n\n[[patches]]\nfile = "{patch}"\nroot = "sglang"\n\n'
            f'[[changelog]]\nversion = 1\ndate = "2026-11-01"\nbase_release = "{BASE}"\n'
            'summary = "First version."\n')


def make_branch(upstream: Path, fixes: list[Fix], dest: Path) -> None:
    """A clone of the upstream checkout with branch ``fixes``: v0.5.21 + one commit per fix."""
    sh(["git", "clone", "-q", "--shared", "--no-checkout", str(upstream), str(dest)], REPO)
    sh(["git", "checkout", "-q", "-b", "fixes", f"v{BASE}"], dest)
    for fix in fixes:
        (dest / fix.path).write_bytes(fix.fixed)
        sh(["git", "commit", "-q", "-m", f"{fix.title}\n\n{fix.name}", "--", fix.path], dest)


def fresh_clone(branch_repo: Path, dest: Path, rev: str) -> None:
    sh(["git", "clone", "-q", "--shared", "--no-checkout", str(branch_repo), str(dest)], REPO)
    sh(["git", "checkout", "-q", "--detach", rev], dest)


# -- the approaches -------------------------------------------------------------------------------


def run_patchkit(version: Version, catalog: Path) -> Run:
    argv = [version.patchkit, "--catalog", str(catalog), "rebase"]
    env = {**os.environ, **version.env, "PATCHKIT_UPSTREAM": str(user_upstream())}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed patchkit has its bytecode compiled
    start = time.perf_counter()
    report = {"done": False}
    args = ["--all", "--onto", ONTO, "--json"]
    while not report.get("done", True):
        proc = subprocess.run([*argv, *args], capture_output=True, text=True, env=env, cwd=catalog)
        if not proc.stdout.strip():
            raise SystemExit(f"patchkit rebase {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        report = json.loads(proc.stdout)
        args = ["--skip", "--json"]
    run = Run(time.perf_counter() - start)
    for fix in report["fixes"]:
        if fix["outcome"] in ("rebased", "extended", "upstreamed"):
            run.through += 1
        else:
            run.conflicts += 1
        run.detail[fix["name"]] = ", ".join(p["classification"] for p in fix["patches"])
    judge_catalog(run, catalog, report)
    return run


def run_git_rebase(repo: Path) -> Run:
    sh(["git", "checkout", "-q", "-B", "fixes", "origin/fixes"], repo)
    start = time.perf_counter()
    proc = sh(["git", "rebase", "-q", "--onto", f"v{ONTO}", f"v{BASE}", "fixes"], repo, check=False)
    conflicts = 0
    while proc.returncode != 0:
        if not (repo / ".git" / "rebase-merge").exists() and not (repo / ".git" / "rebase-apply").exists():
            raise SystemExit(f"git rebase failed:\n{proc.stderr.decode(errors='replace')}")
        conflicts += 1
        proc = sh(["git", "rebase", "--skip"], repo, check=False)
    seconds = time.perf_counter() - start
    picked = int(sh(["git", "rev-list", "--count", f"v{ONTO}..HEAD"], repo).stdout)
    return Run(seconds, through=picked, conflicts=conflicts)


def run_cherry_pick(repo: Path) -> Run:
    commits = sh(["git", "rev-list", "--reverse", f"v{BASE}..origin/fixes"], repo).stdout.decode().split()
    sh(["git", "checkout", "-q", "-B", "picked", f"v{ONTO}"], repo)
    start = time.perf_counter()
    through = conflicts = 0
    for commit in commits:
        if sh(["git", "cherry-pick", commit], repo, check=False).returncode == 0:
            through += 1
        else:
            conflicts += 1
            sh(["git", "cherry-pick", "--skip"], repo)
    return Run(time.perf_counter() - start, through=through, conflicts=conflicts)


def _hunk_messages(text: str, run: Run, label: str) -> None:
    for m in HUNK.finditer(text):
        if m.group(2) != "succeeded" or not (m.group(4) or m.group(5)):
            continue
        run.detail[label] = ", ".join(
            [f"fuzz {m.group(4)}"] * bool(m.group(4)) + [f"offset {m.group(5)}"] * bool(m.group(5)))
        if m.group(4):
            run.fuzzed += 1
            run.notes.append(f"{label}: hunk #{m.group(1)} with fuzz {m.group(4)}"
                             + (f", offset {m.group(5)}" if m.group(5) else ""))


def run_gnu_patch(tree: Path, fixes: list[Fix], patches: Path) -> Run:
    start = time.perf_counter()
    outputs = [(fix, sh(["patch", "-p1", "-N", "--no-backup-if-mismatch", "-r", "-", "-i",
                         str(patches / f"{fix.name}.patch")], tree, check=False)) for fix in fixes]
    run = Run(time.perf_counter() - start)
    for fix, proc in outputs:
        run.through += proc.returncode == 0
        run.conflicts += proc.returncode != 0
        _hunk_messages(proc.stdout.decode(errors="replace"), run, fix.name)
    return run


def run_quilt(tree: Path, fixes: list[Fix], patches: Path) -> Run:
    (tree / "patches").mkdir()
    for fix in fixes:
        shutil.copy2(patches / f"{fix.name}.patch", tree / "patches" / f"{fix.name}.patch")
    (tree / "patches" / "series").write_text("".join(f"{f.name}.patch\n" for f in fixes))
    quilt, env = ["quilt", "--quiltrc", "-"], {"QUILT_PATCHES": "patches"}
    start = time.perf_counter()
    said, stops = [], []
    while True:
        proc = sh([*quilt, "push", "-a"], tree, check=False, env=env)
        said.append(proc.stdout.decode(errors="replace"))
        if proc.returncode in (0, 2):  # 2: nothing (more) to push
            break
        stops.append(Path(sh([*quilt, "next"], tree, check=False, env=env).stdout.decode().strip()).stem)
        sh([*quilt, "delete", "-n"], tree, env=env)
    run = Run(time.perf_counter() - start, conflicts=len(stops))
    run.through = len(sh([*quilt, "applied"], tree, check=False, env=env).stdout.decode().split())
    for block in re.split(r"^Applying patch ", "\n".join(said), flags=re.M)[1:]:
        _hunk_messages(block, run, block.split("\n", 1)[0].strip().removesuffix(".patch").split("/")[-1])
    if stops:
        run.notes.append("stopped on " + ", ".join(stops))
    return run


# -- what landed where ----------------------------------------------------------------------------


def judge(fix: Fix, result: bytes | None) -> str:
    """correct (the 3-way merge's result) | skipped (file as 0.5.23 has it) | wrong."""
    if result == fix.new:
        return "skipped"
    return "correct" if fix.expected is not None and result == fix.expected else "wrong"


def judge_tree(run: Run, tree: Path, fixes: list[Fix]) -> None:
    for fix in fixes:
        path = tree / fix.path
        run.outcomes[fix.name] = judge(fix, path.read_bytes() if path.exists() else None)


def judge_catalog(run: Run, catalog: Path, report: dict) -> None:
    """Apply each fix's series as patchkit left it to 0.5.23 with ``git apply`` (no fuzz,
    as patchkit places) and judge that."""
    outcomes = {f["name"]: f["outcome"] for f in report["fixes"]}
    for fix in FIXES:
        if outcomes.get(fix.name) not in ("rebased", "extended"):
            run.outcomes[fix.name] = "skipped"
            continue
        manifest = tomllib.loads((catalog / "manifests" / f"{fix.name}.toml").read_text())
        tree = catalog.parent / "judge"
        shutil.rmtree(tree, ignore_errors=True)
        (tree / fix.path).parent.mkdir(parents=True)
        (tree / fix.path).write_bytes(fix.new)
        sh(["git", "init", "-q"], tree)
        ok = all(sh(["git", "apply", str(catalog / "patches" / fix.name / p["file"])], tree,
                    check=False).returncode == 0 for p in manifest["patches"])
        run.outcomes[fix.name] = judge(fix, (tree / fix.path).read_bytes()) if ok else "wrong"
        if not ok:
            run.notes.append(f"{fix.name}: its rebased series does not apply to {ONTO}")
        shutil.rmtree(tree)


FIXES: list[Fix] = []


def run(versions: list[Version], repeat: int, quick: bool, workdir: Path):
    """Measure; returns (the section, the before/after rows)."""
    cli(versions[-1], "upstream", "fetch", BASE, ONTO)
    upstream = workdir / "upstream"
    shutil.rmtree(workdir, ignore_errors=True)
    cli(versions[-1], "upstream", "checkout", BASE, str(upstream))  # a clone: both tags
    say("generating the fixes")
    FIXES[:] = build_fixes(upstream / ".git", f"v{BASE}", f"v{ONTO}")
    catalog, patches, branch = workdir / "catalog", workdir / "patches", workdir / "branch"
    write_catalog(FIXES, catalog)
    patches.mkdir()
    for fix in FIXES:
        (patches / f"{fix.name}.patch").write_text(fix.patch)
    make_branch(upstream, FIXES, branch)
    tools = [f"patchkit ({v.label})" for v in versions] + list(OTHERS)
    results: dict[str, list[Run]] = {tool: [] for tool in tools}
    for i in range(repeat):
        for tool in tools:
            here = workdir / "runs" / f"{i}-{tool.replace(' ', '-')}"
            if tool.startswith("patchkit"):
                shutil.copytree(catalog, here / "catalog")
                result = run_patchkit(versions[tools.index(tool)], here / "catalog")
            else:
                tree = here / "sglang"
                fresh_clone(branch, tree, f"v{ONTO}" if tool != "git rebase" else "origin/fixes")
                result = {"git rebase": lambda: run_git_rebase(tree),
                          "git cherry-pick": lambda: run_cherry_pick(tree),
                          "GNU patch": lambda: run_gnu_patch(tree, FIXES, patches),
                          "quilt": lambda: run_quilt(tree, FIXES, patches)}[tool]()
                judge_tree(result, tree, FIXES)
            results[tool].append(result)
            say(f"rebase #{i + 1} {tool}: {fmt(result.seconds)}, {result.through} through, "
                f"{result.conflicts} stopped, {result.fuzzed} fuzzed, "
                f"{sum(o == 'wrong' for o in result.outcomes.values())} wrong")
            shutil.rmtree(here)
    summary = [("rebase of 20 fixes onto a new release (every process)",
                {v.label: [Sample(r.seconds, 0) for r in results[f"patchkit ({v.label})"]]
                 for v in versions}, None, None)]
    return report(FIXES, results, repeat), summary


def _same(values: list[object]) -> str:
    return " or ".join(str(v) for v in sorted(set(values), key=str))


def report(fixes: list[Fix], results: dict[str, list[Run]], repeat: int) -> str:
    kinds = {kind: sum(f.kind == kind for f in fixes) for kind, _ in PLAN}
    tools = list(results)
    git_median = statistics.median(r.seconds for r in results["git rebase"])
    rows = []
    for tool in tools:
        runs = results[tool]
        med, first = statistics.median(r.seconds for r in runs), runs[0]
        wrong = sorted(n for n, o in first.outcomes.items() if o == "wrong")
        stable = all(r.outcomes == first.outcomes for r in runs)
        rows.append(
            f"| {tool} | {fmt(med)} | {fmt(min(r.seconds for r in runs))} | {med / git_median:.2f}x | "
            f"{_same([r.through for r in runs])} of {len(fixes)} | {_same([r.conflicts for r in runs])} | "
            f"{_same([r.fuzzed for r in runs])} | {sum(o == 'correct' for o in first.outcomes.values())} | "
            f"{len(wrong)}{' (' + ', '.join(wrong) + ')' if wrong else ''}"
            f"{'' if stable else ' (differed between repetitions)'} |")
    per_fix = [f"| # | kind | file ({BASE} line) | edit | " + " | ".join(tools) + " |",
               "|---|---|---|---|" + "---|" * len(tools)]
    for fix in fixes:
        cells = [results[t][0].outcomes[fix.name]
                 + (f" ({results[t][0].detail[fix.name]})" if fix.name in results[t][0].detail else "")
                 for t in tools]
        per_fix.append(f"| {fix.name[-2:]} | {fix.kind} | `{fix.path.removeprefix('python/sglang/srt/')}` "
                       f"({fix.line}) | {fix.title} | " + " | ".join(cells) + " |")
    notes = sorted({n for r in results["GNU patch"] + results["quilt"] for n in r.notes})
    return "\n".join([
        SECTION, "",
        f"{len(fixes)} small fixes written against SGLang {BASE} (`bench/rebase_fixes.py`: constant "
        "tweaks, log levels lowered, log lines before a `raise`, early returns; one file each) "
        f"moved onto {ONTO}, each approach on a fresh copy, N = {repeat}, interleaved. Wall time is "
        "the whole rebase as a user runs it, every process included: patchkit is `patchkit "
        f"rebase --all --onto {ONTO} --json`, then `patchkit rebase --skip --json` at each stop, "
        "on the releases' blobs in its upstream repository (no work tree); `git rebase` includes "
        f"switching the work tree from {BASE} to {ONTO}; the cherry-pick loop, GNU patch and "
        f"quilt start from a {ONTO} work tree made untimed.", "",
        f"The fixes, by what the 3-way merge (`git merge-file`) of each onto {ONTO} says: "
        f"{kinds['untouched']} in files {ONTO} left alone; {kinds['moved']} whose lines moved; "
        f"{kinds['context']} whose context changed slightly (the merge is clean; GNU patch fuzzes "
        f"them into place); {kinds['misplaced']} whose surroundings changed so that GNU patch applies "
        "them with fuzz where the merge disagrees (chosen on purpose, to show what fuzz can do); "
        f"{kinds['conflict']} whose edited line changed upstream (the merge conflicts). A fix's file "
        "after each run is judged against the merge: **correct** (the merge's result), "
        f"**skipped** ({ONTO} as released), **wrong** (anything else). For patchkit the rebased "
        f"series it wrote is applied to {ONTO} with `git apply` (no fuzz) and judged the same way.", "",
        "| approach | wall time, median | min | vs. `git rebase` | through | stopped (skipped) "
        "| hunks fuzzed | correct | wrong |",
        "|---|---|---|---|---|---|---|---|---|", *rows, "",
        "Per fix (first repetition; every repetition gave the same outcome unless the table says otherwise):",
        "", *per_fix, "",
        "Fuzz and offset messages of GNU patch and quilt: " + ("; ".join(notes) if notes else "none") + ".",
        ""])
