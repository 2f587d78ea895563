"""Upstream commits that already hold a fix, found by ``git patch-id --stable``: the first
test of "does this release hold the fix" (:mod:`patchkit.rebase.contains`), for ``patchkit rebase``
and ``patchkit upstream check`` alike."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import gitrepo
from ..catalog.model import Fix
from .classify import Series, changes

_PR = re.compile(r"\s*\(#\d+\)")  # a pull request number in a squash commit's subject
_TAGS = re.compile(r"^(\s*\[[^\]]*\])+")  # "[AMD] [Fix] " before a subject
#: (sha, subject) of the commit holding the whole series, or None and, per patch file, the
#: commit holding that patch
Match = tuple[tuple[str, str] | None, dict[str, tuple[str, str]]]


class UpstreamMatches:
    """The upstream commits between each fix's base and the target holding its series or
    single patches; many fixes at once take one ``git log -p`` and one ``git patch-id``."""

    def __init__(self, git_dir: Path | str, onto_rev: str, base_rev: Callable[[Fix], str],
                 patch_dir: Callable[[Fix], Path] | None = None) -> None:
        """Commits of ``base_rev(fix)..onto_rev`` in ``git_dir``; ``patch_dir``: where a fix's
        series files are named from in parse errors (default: the fix's own directory)."""
        self.git_dir, self.onto_rev, self.base_rev = git_dir, onto_rev, base_rev
        self.patch_dir = patch_dir or (lambda fix: fix.patch_dir)
        self._logs: dict[tuple[str, ...], list[tuple[str, str, dict[str, str]]]] = {}
        self._found: dict[str, Match] = {}
        self._reverts: dict[str, dict[str, tuple[str, str]]] = {}  # fix -> sha -> its revert

    def _candidates(self, fix: Fix, paths: list[str], every: list[str]
                    ) -> list[tuple[str, str, str]]:
        """(sha, subject, its diff of the fix's files) of the commits touching them."""
        key = (self.base_rev(fix), *every)
        if key not in self._logs:
            self._logs[key] = gitrepo.commit_diffs(self.git_dir, key[0], self.onto_rev, every)
        commits = [(sha, subject, "".join(d for p, d in sorted(files.items()) if p in paths))
                   for sha, subject, files in self._logs[key]]
        return [c for c in commits if c[2]]

    def match(self, fixes: Sequence[tuple[Fix, Series]]) -> None:
        """Find the commits of each (fix, old series): by the series' patch-id, else each patch's."""
        files = {fix.name: sorted({c.path for _f, chs in changes(
            fix, old, self.patch_dir(fix)) for c in chs})
            for fix, old in fixes}
        every = sorted({p for paths in files.values() for p in paths})
        asked: list[str] = []
        slots = []
        for fix, old in fixes:
            commits = self._candidates(fix, files[fix.name], every)
            if not commits:
                self._found[fix.name] = (None, {})
                continue
            slots.append((fix, old, commits, len(asked)))
            asked += ["".join(t for _f, t in old), *(t for _f, t in old), *(c[2] for c in commits)]
        ids = gitrepo.patch_ids(asked) if asked else []
        for fix, old, commits, at in slots:
            mine = ids[at:at + 1 + len(old) + len(commits)]
            by_id = {pid: (sha, subject) for (sha, subject, _d), pid
                     in zip(commits, mine[1 + len(old):]) if pid}
            if mine[0] in by_id:
                self._found[fix.name] = (by_id[mine[0]], {})
            else:
                self._found[fix.name] = (None, {f: by_id[pid] for (f, _t), pid
                                                in zip(old, mine[1:1 + len(old)]) if pid in by_id})
        self._find_reverts(slots)

    def _find_reverts(self, slots: list[tuple[Fix, Series, list[tuple[str, str, str]], int]]
                      ) -> None:
        """For each commit found holding a fix, a later commit of the range undoing it: its
        diff has the patch-id of the fix's change reversed, or its subject is git revert's
        ``Revert "<subject>"``."""
        asked: list[str] = []
        todo = []
        for fix, old, commits, _at in slots:
            whole, per_patch = self._found[fix.name]
            hits = [whole] if whole else list(per_patch.values())
            if not hits:
                continue
            texts = ["".join(t for _f, t in old)] if whole else [
                t for f, t in old if f in per_patch]
            todo.append((fix, commits, hits, len(asked), len(texts)))
            asked += [reverse_diff(t) for t in texts]
        ids = gitrepo.patch_ids(asked) if asked else []
        for fix, commits, hits, at, n in todo:
            undo = set(filter(None, ids[at:at + n]))
            newer_ids = gitrepo.patch_ids([c[2] for c in commits]) if undo else []
            found: dict[str, tuple[str, str]] = {}
            for sha, subject in hits:
                index = next((i for i, c in enumerate(commits) if c[0] == sha), len(commits))
                title = _TAGS.sub("", _PR.sub("", subject)).strip()
                for i in range(index - 1, -1, -1):  # git log lists the newest first
                    c = commits[i]
                    if (newer_ids and newer_ids[i] in undo) or sha in c[1] or \
                            (len(title) > 8 and c[1].startswith("Revert") and title in c[1]):
                        found[sha] = (c[0], c[1])
                        break
            self._reverts[fix.name] = found

    def reverted(self, fix: Fix, hit: tuple[str, str] | None) -> tuple[str, str] | None:
        """The later upstream commit reverting ``hit`` (a commit found holding ``fix``)."""
        return self._reverts.get(fix.name, {}).get(hit[0]) if hit else None

    def of(self, fix: Fix, old: Series) -> Match:
        if fix.name not in self._found:
            self.match([(fix, old)])
        return self._found[fix.name]


def reverse_diff(text: str) -> str:
    """A unified diff turned around (what ``git revert`` of it commits), for its patch-id:
    each run of changed lines lists the lines it now removes first."""
    out: list[str] = []
    run_minus: list[str] = []
    run_plus: list[str] = []

    def flush() -> None:
        out.extend(run_minus)
        out.extend(run_plus)
        run_minus.clear()
        run_plus.clear()

    in_hunk = False
    for line in text.split("\n"):
        if line.startswith("@@"):
            flush()
            in_hunk = True
            out.append(line)
        elif line.startswith("diff --git "):
            flush()
            in_hunk = False
            out.append(line)
        elif in_hunk and line.startswith("+"):
            run_minus.append("-" + line[1:])
        elif in_hunk and line.startswith("-"):
            run_plus.append("+" + line[1:])
        else:
            flush()
            out.append(line)
    flush()
    return "\n".join(out)
