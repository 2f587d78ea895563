"""Apply, check and status of patchkit against git apply, GNU patch, git am and quilt.

Workload (bench/perf_workload.py): the real upstream drift from SGLang 0.5.22 to 0.5.23 as one
catalog fix with one patch per changed file, and 20 small local fixes (one patch each) against
0.5.22. Every tool and every patchkit version runs on a fresh copy of the same 0.5.22 checkout
(index refreshed, flushed to disk untimed), interleaved; wall time and peak RSS (GNU time's
``%M``: the largest process of the command) per run.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
from pathlib import Path

from common import Sample, Version, empty_cache, fmt, measure, say, with_cache
from perf_workload import DRIFT, LOCAL, NEW, OLD, Workload, build

SECTION = "## Apply, check and status"


class Trees:
    """Fresh copies of the base checkout, made untimed before each run."""

    def __init__(self, work: Workload, scratch: Path) -> None:
        self.work, self.scratch, self.n = work, scratch, 0

    def fresh(self) -> Path:
        self.n += 1
        dest = self.scratch / f"tree-{self.n}"
        subprocess.run(["cp", "-a", str(self.work.base), str(dest)], check=True)
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=dest, capture_output=True)
        # Flushed before the timed run, as a deployed tree has long been on disk: else the
        # first tool that makes its writes durable would also pay for writing out this copy.
        os.sync()
        return dest


def cases(work: Workload, versions: list[Version], quick: bool):
    """Comparison -> [(row label, run(tree) -> Sample)], in table order."""
    cat = str(work.catalog)

    def patchkit(v: Version, names: list[str], *extra: str, cold: bool = False):
        def run(tree: Path) -> Sample:
            if cold:
                empty_cache(v)
            return measure([v.patchkit, "--catalog", cat, "apply", *names, "--target", str(tree),
                            *extra], tree, v.env)
        return run

    def files(kind: str) -> list[str]:
        return (work.series[kind] / "files.txt").read_text().splitlines()

    def git_apply(kind: str, *extra: str):
        return lambda tree: measure(["git", "apply", *extra, *files(kind)], tree)

    def patch_each(kind: str):
        script = 'while read -r p; do patch -p1 -s -N -i "$p" || exit 1; done'
        return lambda tree: measure(["bash", "-c", script], tree,
                                    stdin=str(work.series[kind] / "files.txt"))

    def quilt(kind: str):
        env = {"QUILT_PATCHES": "/", "QUILT_SERIES": str(work.series[kind] / "series"),
               "QUILTRC": "/dev/null"}
        return lambda tree: measure(["quilt", "push", "-a", "-q"], tree, env)

    def git_am(kind: str):
        mails = sorted(str(p) for p in (work.series[kind] / "mails").iterdir())
        return lambda tree: measure(["git", "am", "-q", "--keep-cr", *mails], tree)

    def tools(kind: str, slow: bool):
        rows = [("`git apply` (one call, all patches)", git_apply(kind))]
        if not slow:
            rows += [("GNU `patch -p1` per file", patch_each(kind)),
                     ("`git am --keep-cr` (one mail per patch)", git_am(kind)),
                     ("`quilt push -a`", quilt(kind))]
        return rows

    return {
        "drift": [row for v in versions for row in (
            (f"patchkit ({v.label}) apply, all checks, first run (user cache empty)",
             patchkit(v, [DRIFT], cold=True)),
            (f"patchkit ({v.label}) apply, all checks, repeat run", patchkit(v, [DRIFT])))]
        + tools("drift", quick),
        "drift-check": [(f"patchkit ({v.label}) apply --dry-run, repeat run",
                         patchkit(v, [DRIFT], "--dry-run")) for v in versions]
        + [("`git apply --check`", git_apply("drift", "--check"))],
        "local": [row for v in versions for row in (
            (f"patchkit ({v.label}) apply of the 20 fixes, first run (user cache empty)",
             patchkit(v, LOCAL, cold=True)),
            (f"patchkit ({v.label}) apply of the 20 fixes, repeat run", patchkit(v, LOCAL)))]
        + tools("local", False),
    }


def status_cases(work: Workload, versions: list[Version], trees: Trees):
    """Status of a checkout where each version applied the drift and the 20 fixes (untimed)."""
    rows = []
    for v in (with_cache(v, "cache-status") for v in versions):
        tree = trees.fresh()
        for names in ([DRIFT], LOCAL):
            measure([v.patchkit, "--catalog", str(work.catalog), "apply", *names, "--target",
                     str(tree)], tree, v.env)

        def status(t: Path, v: Version = v, cold: bool = False) -> Sample:
            if cold:  # a cache of its own, emptied: the warm rows keep theirs
                v = with_cache(v, "cache-cold")
                empty_cache(v)
            return measure([v.patchkit, "--catalog", str(work.catalog), "status", "--target", str(t)],
                           t, v.env)
        rows += [((f"`patchkit status` ({v.label}; {DRIFT} and the 20 fixes applied, every "
                   "fix of the catalog)"), tree, status),
                 (f"`patchkit status` ({v.label}), user cache emptied first", tree,
                  lambda t, status=status: status(t, cold=True))]
    rows.append(("`git status --porcelain`", rows[0][1],
                 lambda t: measure(["git", "status", "--porcelain"], t)))
    return rows


def run(versions: list[Version], repeat: int, quick: bool, workdir: Path):
    """Measure; returns (the section, the before/after rows)."""
    work = build(workdir / "workload", versions[-1], say=say)
    scratch = workdir / "runs"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    trees = Trees(work, scratch)
    table = cases(work, versions, quick)
    out: dict[str, dict[str, list[Sample]]] = {k: {label: [] for label, _ in v} for k, v in table.items()}
    status = status_cases(work, versions, trees)
    out["status"] = {label: [] for label, _, _ in status}
    n_files = subprocess.run(["git", "ls-files"], cwd=status[0][1], capture_output=True, text=True,
                             check=True).stdout.count("\n")
    for i in range(repeat):
        for kind, rows in table.items():
            for label, measured in rows:
                tree = trees.fresh()
                sample = measured(tree)
                out[kind][label].append(sample)
                say(f"#{i + 1} {kind}: {label}: {fmt(sample.seconds)}, {sample.rss_kb / 1024:.0f} MB")
                shutil.rmtree(tree)
        for label, tree, measured in status:
            sample = measured(tree)
            out["status"][label].append(sample)
            say(f"#{i + 1} status: {label}: {fmt(sample.seconds)}")
    return report(out, work, repeat, n_files, quick), summary(out, versions)


def report(results, work: Workload, repeat: int, n_files: int, quick: bool) -> str:
    titles = {
        "drift": f"Apply the drift series ({work.drift_files} patches, "
                 f"{work.drift_bytes / 1e6:.1f} MB: SGLang {OLD} -> {NEW}, one patch per file)",
        "drift-check": "Check the drift series without writing",
        "local": "Apply the 20-fix local series (one small patch per fix)",
        "status": f"Status of a full checkout ({n_files} files)",
    }
    lines = [SECTION, "",
             f"Every tool and every patchkit version on a fresh copy of the same SGLang {OLD} "
             f"checkout (index refreshed, flushed to disk untimed), N = {repeat} each, interleaved. "
             "Wall time is the whole command (patchkit: the `patchkit` command of its own "
             "virtualenv, Python start-up included). Peak RSS is GNU time's `%M`: the largest "
             "process of the command (for the per-file loops that is one `patch` or `bash`). "
             "patchkit runs with all its checks: release, touched files present and clean against "
             "git, writable, the manifests' checks, all-or-nothing transaction with backups and "
             "fsync, verification, state record. \"User cache emptied\" empties that version's "
             "own cache directory before the run."
             + (" A quick run (`--quick`) leaves out GNU patch, git am and quilt on the drift." if quick else ""),
             ""]
    for kind, title in titles.items():
        lines += [f"### {title}", "", "| tool | median | min | peak RSS | vs. the first row |",
                  "|---|---|---|---|---|"]
        first = None
        for label, samples in results[kind].items():
            med = statistics.median(s.seconds for s in samples)
            first = first or med
            lines.append(f"| {label} | {fmt(med)} | {fmt(min(s.seconds for s in samples))} | "
                         f"{max(s.rss_kb for s in samples) / 1024:.0f} MB | {med / first:.2f}x |")
        lines.append("")
    return "\n".join(lines)


def summary(results, versions: list[Version]):
    def pick(kind: str, needle: str) -> dict[str, list[Sample]]:
        return {v.label: next(s for label, s in results[kind].items()
                              if label.startswith(f"patchkit ({v.label}") or
                              label.startswith(f"`patchkit status` ({v.label}")
                              if needle in label) for v in versions}

    return [
        ("20-fix apply, first run (user cache empty)", pick("local", "first run"), None, None),
        ("20-fix apply, repeat run", pick("local", "repeat run"), None, None),
        ("`status` of a full checkout (drift and 20 fixes applied)", pick("status", "every fix"), None, None),
        ("`status`, user cache emptied first", pick("status", "emptied"), None, None),
        ("drift apply (2,000-patch scale test), first run", pick("drift", "first run"), None, None),
        ("drift apply, repeat run", pick("drift", "repeat run"), None, None),
        ("drift `apply --dry-run`", pick("drift-check", "dry-run"), None, None),
    ]
