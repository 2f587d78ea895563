"""patchkit's "already upstream" classification against `git rebase` and `git am -3`, side by
side in one run on the corpus of real SGLang commits (tests/upstream_corpus/, issue 23):

    python bench/upstream_compare.py [--onto 0.5.16,0.5.17,0.5.18]

The release-only upstream is built from the PyPI wheels (cached in PATCHKIT_TEST_CACHE's
``wheels/``, else downloaded). For each release and each corpus commit it records what each
tool says, against the true answer from the real history:

- patchkit: ``rebase --dry-run`` of the whole corpus catalog (one run per release);
- git rebase: each commit on a branch from v0.5.15, ``git rebase --onto v<release>``: the
  commit dropped (already upstream: its change is empty there), kept (applied), or a conflict;
- git am -3: the patch applied with ``git am -3`` on v<release>: empty (already there:
  "No changes"), applied, or a conflict.

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
    before = git(work, "rev-list", "--count", f"v{onto}..fix").stdout.strip()
    done = git(work, "rebase", "-q", "--onto", f"v{onto}", f"v{BASE}", "fix")
    if done.returncode:
        git(work, "rebase", "--abort")
        return "conflict"
    after = git(work, "rev-list", "--count", f"v{onto}..fix").stdout.strip()
    return "dropped" if after == "0" and before != "0" else "kept"


def git_am(work: Path, patch: Path, onto: str) -> str:
    git(work, "checkout", "-q", "-f", "-B", "am", f"v{onto}")
    done = git(work, "am", "-q", "-3", str(patch))
    if done.returncode:
        empty = "No changes" in done.stdout + done.stderr or "empty" in done.stdout + done.stderr
        git(work, "am", "--abort")
        return "empty" if empty else "conflict"
    return "applied"


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
        work = tmp / "work"
        subprocess.run(["git", "clone", "-q", str(up.git_dir), str(work)], check=True)
        corpus = entries()
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
                am = git_am(work, e.patch, onto)
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
