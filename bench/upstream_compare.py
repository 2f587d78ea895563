"""patchkit's "already upstream" classification against `git rebase` and `git am -3`, side by
side in one run on the corpus of real SGLang commits (tests/upstream_corpus/, issue 23):

    python bench/upstream_compare.py [--onto 0.5.16,0.5.17,0.5.18]

The release-only upstream is built from the PyPI wheels (cached in PATCHKIT_TEST_CACHE's
``wheels/``, else downloaded). For each release and each corpus commit it records what each
tool says, against the true answer from the real history:

- patchkit: ``rebase --dry-run`` of the whole corpus catalog (one run per release);
- git rebase: each commit on a branch from v0.5.15, ``git rebase --onto v<release>``: the
  commit dropped (already upstream: its change is empty there), kept (applied), or a conflict;
- git am -3: that commit, exported with ``git format-patch`` (its index lines name the base's
  blobs, so the three-way fallback can run), applied with ``git am -3`` on v<release>:
  empty (already there: "No changes"), applied, or a conflict.

The git tools run in a clone whose releases hold only the files the corpus touches (their
outcome for a commit depends on those alone); patchkit runs on the full release store.

It prints a table (outcome per tool, and how often each is right) and the time each took.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patchkit import rebase
from patchkit.catalog import Catalog
from patchkit.upstream import UpstreamRepo
from tests.fixtures.upstream_corpus import BASE, RELEASES, entries, write_catalog

ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
       "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, **ENV})


def git_rebase(work: Path, patch: Path, onto: str) -> str:
    git(work, "checkout", "-q", "-f", "-B", "fix", f"v{BASE}")
    if git(work, "am", "-q", "-3", str(patch)).returncode:
        git(work, "am", "--abort")
        return "no-base"
    # the fix as a fork carries it: a commit on the base, its index lines naming base blobs
    (work.parent / "fix.patch").write_text(git(work, "format-patch", "-1", "--stdout",
                                               "fix").stdout)
    before = git(work, "rev-list", "--count", f"v{onto}..fix").stdout.strip()
    done = git(work, "rebase", "-q", "--onto", f"v{onto}", f"v{BASE}", "fix")
    if done.returncode:
        git(work, "rebase", "--abort")
        return "conflict"
    after = git(work, "rev-list", "--count", f"v{onto}..fix").stdout.strip()
    return "dropped" if after == "0" and before != "0" else "kept"


def git_am(work: Path, patch: Path, onto: str) -> str:
    git(work, "checkout", "-q", "-f", "-B", "am", f"v{onto}")
    head = git(work, "rev-parse", "HEAD").stdout
    done = git(work, "am", "-3", str(patch))
    said = done.stdout + done.stderr
    if done.returncode:
        git(work, "am", "--abort")
        return "empty" if "No changes" in said or "empty" in said else "conflict"
    # "No changes -- Patch already applied.": git am goes on without a commit
    return "empty" if git(work, "rev-parse", "HEAD").stdout == head else "applied"


def reduced(up: UpstreamRepo, corpus: list, work: Path) -> Path:
    """A clone of the release-only upstream whose releases hold only the files the corpus
    touches (git's outcome for a commit depends on those alone), so the git tools do not
    check out 5000 files per commit: v0.5.15 .. v0.5.18 as a line of commits."""
    paths = sorted({line[6:] for e in corpus for line in e.patch.read_text(
        encoding="utf-8", errors="replace").splitlines() if line.startswith("--- a/")})
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    git(work, "fetch", "-q", "--no-tags", str(up.git_dir), "refs/tags/*:refs/release/*")
    index = {"GIT_INDEX_FILE": str(work / ".git" / "bench-index")}
    parent: list[str] = []
    for v in (BASE, *RELEASES):
        listing = git(work, "ls-tree", "-r", f"refs/release/v{v}", "--", *paths).stdout
        subprocess.run(["git", "read-tree", "--empty"], cwd=work, check=True,
                       env={**os.environ, **index})
        subprocess.run(["git", "update-index", "--index-info"], cwd=work, input=listing,
                       text=True, check=True, env={**os.environ, **index})
        tree = subprocess.run(["git", "write-tree"], cwd=work, capture_output=True, text=True,
                              check=True, env={**os.environ, **index}).stdout.strip()
        sha = git(work, "commit-tree", tree, *parent, "-m", f"SGLang {v}").stdout.strip()
        git(work, "tag", f"v{v}", sha)
        parent = ["-p", sha]
    git(work, "checkout", "-q", f"v{BASE}")
    return work


def right(answer: str, said: str) -> bool:
    """Whether an outcome is right for the true answer: "upstream" must be recognised as
    such, a still-needed fix applied, anything else (reverted, removed, ambiguous) must
    at least not be applied blindly nor called upstream when it is not."""
    held = said in ("upstream", "dropped", "empty")
    applied = said in ("unchanged", "offset", "merged", "kept", "applied", "reverted-upstream")
    if answer == "upstream":
        return held
    if answer == "still-needed" or answer.startswith("reverted"):
        return applied
    return not applied  # removed upstream, ambiguous: a human decides


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onto", default=",".join(RELEASES))
    a = ap.parse_args()
    cache = Path(os.environ.get("PATCHKIT_TEST_CACHE", Path.home() / ".cache/patchkit/upstream"))
    tmp = Path(tempfile.mkdtemp(prefix="upstream-compare-"))
    try:
        up = UpstreamRepo(tmp / "up", wheels=cache / "wheels")
        for v in (BASE, *RELEASES):
            up.fetch(v)
        corpus = entries()
        work = reduced(up, corpus, tmp / "work")
        rows, times = [], {"patchkit": 0.0, "git rebase": 0.0, "git am -3": 0.0}
        for onto in a.onto.split(","):
            cat = Catalog(write_catalog(tmp / f"cat-{onto}"))
            t = time.perf_counter()
            report = rebase.start(cat, onto, upstream=up, dry_run=True)
            times["patchkit"] += time.perf_counter() - t
            pk = {f.name: (f.patches[-1].classification if f.patches else f.outcome)
                  for f in report.fixes}
            for e in corpus:
                t = time.perf_counter()
                gr = git_rebase(work, e.patch, onto)
                times["git rebase"] += time.perf_counter() - t
                t = time.perf_counter()
                am = git_am(work, tmp / "fix.patch", onto) if gr != "no-base" else "no-base"
                times["git am -3"] += time.perf_counter() - t
                rows.append((onto, e.name, e.answers[onto], pk[e.name], gr, am))
        print(f"{'release':8} {'fix':16} {'true answer':34} {'patchkit':18} {'git rebase':10} "
              "git am -3")
        for r in rows:
            print(f"{r[0]:8} {r[1]:16} {r[2]:34} {r[3]:18} {r[4]:10} {r[5]}")
        print()
        for i, tool in enumerate(("patchkit", "git rebase", "git am -3")):
            ok = sum(right(r[2], r[3 + i]) for r in rows)
            ups = [r for r in rows if r[2] == "upstream"]
            found = sum(right(r[2], r[3 + i]) for r in ups)
            wrong_apply = sum(1 for r in rows if r[2] in ("upstream", "removed-upstream",
                                                          "ambiguous")
                              and r[3 + i] in ("unchanged", "offset", "merged", "kept",
                                               "applied"))
            print(f"{tool:10}  right {ok}/{len(rows)}  upstream found {found}/{len(ups)}  "
                  f"applied where it duplicates or re-adds {wrong_apply}  "
                  f"time {times[tool]:.1f}s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
