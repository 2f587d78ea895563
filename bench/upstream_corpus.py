"""Regenerate tests/upstream_corpus/ from an SGLang clone that keeps the release tags.

    python bench/upstream_corpus.py GIT_DIR [--out tests/upstream_corpus] [--max 30]

Each corpus entry is a real upstream squash commit of sgl-project/sglang, exported with
``git format-patch`` restricted to ``python/sglang/`` and carried as a fix based on
``BASE`` (0.5.15). Its true answer on each of the next three releases comes from the real
history, not from patchkit:

- ``upstream``: the commit (or its cherry-pick onto the release branch, same PR number) is
  in the release's history, no revert of it is, and the code it adds is still there;
- ``reverted-upstream-in <sha>``: it is in the history and so is a ``Revert`` commit naming
  it (its PR number or its subject);
- ``removed-upstream``: it landed in an earlier release of the three, not reverted, and the
  lines it adds are gone from this release's files (a later commit removed the code);
- ``still-needed``: it is not in the release's history;
- ``ambiguous``: in the history, and both the patch and its reverse apply to the release
  (``git apply --check``): the release's text cannot tell.

Only small commits are chosen (few files, few hunks, applying to the base with
``git apply --check``). The revert commits of the chosen reverted commits are exported too
(``history/``): the test builds its stand-in clone from the release trees plus these commits
in their real order (docs/performance.md, "Already upstream").
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BASE = "0.5.15"
NEXT = ("0.5.16", "0.5.17", "0.5.18")
ROOT = "python/sglang/"
_PR = re.compile(r"\(#(\d+)\)")


def git(gd: str, *args: str, input: str | None = None, env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "--git-dir", gd, *args], input=input, text=True,
                          capture_output=True, check=check,
                          env={**os.environ, **(env or {})}, errors="surrogateescape")


def applies(gd: str, rev: str, patch: str, *, reverse: bool = False) -> bool:
    """``git apply --check`` (zero fuzz, offsets allowed) of ``patch`` on ``rev``'s tree."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(gd, "read-tree", rev, env=env)
        args = ["apply", "--cached", "--check", *(["-R"] if reverse else []), "-"]
        return git(gd, *args, input=patch, env=env, check=False).returncode == 0


def export(gd: str, sha: str) -> str:
    # a range, not -1: `-1 SHA -- PATH` would take the newest commit under SHA touching PATH
    return git(gd, "format-patch", "--stdout", "--no-signature", "--no-stat", f"{sha}^!",
               "--", ROOT).stdout


def stats(patch: str) -> tuple[int, int, int, bool]:
    """(files, hunks, changed lines, whether it creates, deletes or renames a file)."""
    files = patch.count("\ndiff --git ")
    hunk_count = len(re.findall(r"^@@ ", patch, re.MULTILINE))
    body = patch[patch.find("\ndiff --git "):]
    changed = len([x for x in body.split("\n") if x[:1] in "+-" and x[:3] not in ("+++", "---")])
    odd = bool(re.search(r"^(new file|deleted file|rename from|similarity index)", patch, re.MULTILINE))
    return files, hunk_count, changed, odd


def added_lines(patch: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    path = ""
    for line in patch.split("\n"):
        if line.startswith("+++ b/"):
            path = line[6:]
        elif line.startswith("+") and not line.startswith("+++") and line[1:].strip():
            out.setdefault(path, []).append(line[1:])
    return out


def present(gd: str, rev: str, patch: str) -> float:
    """The share of the patch's (non-blank) added lines found in ``rev``'s files."""
    want = added_lines(patch)
    total = sum(len(v) for v in want.values()) or 1
    hits = 0
    for path, lines in want.items():
        text = git(gd, "show", f"{rev}:{path}", check=False).stdout
        have = set(text.split("\n"))
        hits += sum(1 for x in lines if x in have)
    return hits / total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("git_dir")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests"
                                         / "upstream_corpus"))
    ap.add_argument("--max", type=int, default=32)
    a = ap.parse_args()
    gd, out = a.git_dir, Path(a.out)
    base = f"v{BASE}"
    ranges = {}
    seen = git(gd, "rev-list", base).stdout.split()
    seen_set = set(seen)
    for v in NEXT:
        ranges[v] = [ln.split("\0") for ln in git(
            gd, "log", "--no-merges", "--format=%H%x00%s", f"{base}..v{v}").stdout.splitlines()]
    subjects = {sha: s for v in NEXT for sha, s in ranges[v]}
    reverts = [(sha, s) for sha, s in subjects.items() if s.startswith("Revert")]

    def pr(subject: str) -> str | None:
        found = _PR.findall(subject)
        return found[0] if found else None

    def landed(sha: str, v: str) -> bool:
        if git(gd, "merge-base", "--is-ancestor", sha, f"v{v}", check=False).returncode == 0:
            return True
        num = pr(subjects[sha])
        return bool(num) and any(f"(#{num})" in s and not s.startswith("Revert")
                                 for _h, s in ranges[v])

    def reverted_by(sha: str, v: str) -> str | None:
        subject, num = subjects[sha], pr(subjects[sha])
        title = _PR.sub("", subject).strip()
        in_range = {h for h, _s in ranges[v]}
        for rsha, rs in reverts:
            if rsha in in_range and rsha != sha and (
                    (num and f"#{num}" in rs) or (len(title) > 12 and title in rs)):
                return rsha
        return None

    picked: list[tuple[str, str, dict[str, str], dict[str, str]]] = []
    candidates = [sha for v in NEXT for sha, _s in ranges[v]]
    reverted_first = [sha for sha in candidates if any(reverted_by(sha, v) for v in NEXT[-1:])]
    order = list(dict.fromkeys([*reverted_first, *candidates]))
    kinds: dict[str, int] = {}
    for sha in order:
        if len(picked) >= a.max or sha in seen_set:
            continue
        subject = subjects[sha]
        if subject.startswith("Revert"):
            continue
        patch = export(gd, sha)
        if "diff --git " not in patch:
            continue
        files, nh, changed, odd = stats(patch)
        # reverted commits are rare: a larger one is taken (still a few files, no renames)
        big = (3, 12, 80, 8000) if sha in reverted_first else (2, 3, 40, 6000)
        if odd or files > big[0] or nh > big[1] or changed > big[2] or len(patch) > big[3]:
            continue
        if not applies(gd, base, patch):
            continue
        answers, how = {}, {}
        landed_at = None
        for v in NEXT:
            rev = f"v{v}"
            r = reverted_by(sha, v)
            if landed(sha, v) and r:
                answers[v], how[v] = f"reverted-upstream-in {r[:12]}", \
                    f"in v{v}'s history, and so is {r[:12]} ({subjects[r][:60]})"
                continue
            if not landed(sha, v):
                answers[v], how[v] = "still-needed", f"not in v{v}'s history"
                continue
            fwd, rev_ok = applies(gd, rev, patch), applies(gd, rev, patch, reverse=True)
            share = present(gd, rev, patch)
            if landed_at is None:
                landed_at = v
            if fwd and rev_ok:
                answers[v], how[v] = "ambiguous", f"in v{v}'s history; patch and reverse apply"
            elif landed_at != v and share < 0.5 and present(gd, f"v{landed_at}", patch) >= 0.9:
                answers[v], how[v] = "removed-upstream", \
                    f"landed in {landed_at}; {share:.0%} of its added lines left in v{v}"
            else:
                answers[v] = "upstream"
                how[v] = f"in v{v}'s history" + ("" if rev_ok else
                                                 "; upstream changed its lines since")
        key = "/".join(answers.values())
        if kinds.get(key, 0) >= 4:  # keep the corpus varied
            continue
        kinds[key] = kinds.get(key, 0) + 1
        picked.append((sha, patch, answers, how))
        print(f"{sha[:12]} {key} {subject[:70]}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.patch"):
        old.unlink()
    (out / "history").mkdir(exist_ok=True)
    for old in (out / "history").glob("*.patch"):
        old.unlink()
    lines = ["# True answers of the corpus, from the real SGLang history (bench/upstream_corpus.py)",
             f'base = "{BASE}"', f"releases = {list(NEXT)!r}".replace("'", '"'), ""]
    history: dict[str, str] = {}
    for i, (sha, patch, answers, how) in enumerate(picked, 1):
        name = f"c{i:02d}-{sha[:10]}"
        (out / f"{name}.patch").write_text(patch, encoding="utf-8", errors="surrogateescape")
        where = {v: ("in" if landed(sha, v) else "out") for v in NEXT}
        lines += [f"[{name}]", f'commit = "{sha}"',
                  'subject = "' + subjects[sha].replace("\\", "\\\\").replace('"', '\\"') + '"',
                  "date = \"" + git(gd, "log", "-1", "--format=%cI", sha).stdout.strip() + '"']
        for v in NEXT:
            lines.append(f'"{v}" = "{answers[v]}"')
        for v in NEXT:
            lines.append(f'"how-{v}" = "' + how[v].replace('"', "'") + '"')
        for v in NEXT:
            r = answers[v].split()[-1] if answers[v].startswith("reverted") else None
            if r:
                history[r] = v
        lines.append(f"landed = {[v for v in NEXT if where[v] == 'in']!r}".replace("'", '"'))
        lines.append("")
    for r in history:
        full = git(gd, "rev-parse", r).stdout.strip()
        (out / "history" / f"{full[:10]}.patch").write_text(export(gd, full), encoding="utf-8",
                                                             errors="surrogateescape")
    (out / "answers.toml").write_text("\n".join(lines), encoding="utf-8")
    print(f"{len(picked)} commits, {len(history)} revert commits -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
