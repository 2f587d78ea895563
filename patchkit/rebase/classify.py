"""How one patch of a fix lands on the new upstream, in memory on the upstream's blobs:
the engine's placement (zero fuzz), else git's three-way merge."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..catalog import patchmail, series
from ..engine import hunks, presence
from ..errors import ConflictError
from ..catalog.model import Fix
from ..engine.gitops import merge_file
from ..gitrepo import Blobs

CLEAN = ("unchanged", "offset", "merged", "resolved", "upstream", "reverted-upstream")


@dataclass(frozen=True)
class PatchReport:
    file: str
    classification: str
    detail: str
    offsets: tuple[int, ...] = ()
    paths: tuple[str, ...] = ()
    commit: str = ""  # the upstream commit holding the patch (patch-id), when one was found

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def patch_from_json(d: dict[str, Any]) -> PatchReport:
    return PatchReport(d["file"], d["classification"], d["detail"], tuple(d["offsets"]),
                       tuple(d["paths"]), d.get("commit", ""))


class Tree:
    """Files of one upstream commit, changed in memory by applied series."""

    def __init__(self, blobs: Blobs, rev: str) -> None:
        self.blobs, self.rev = blobs, rev
        self.files: dict[str, str | None] = {}

    def get(self, path: str) -> str | None:
        if path not in self.files:
            data = self.blobs.read(self.rev, path)
            self.files[path] = None if data is None else hunks.decode(data)
        return self.files[path]

    @classmethod
    def of(cls, tree: Tree, files: dict[str, str | None]) -> Tree:
        """A tree like ``tree`` with ``files`` as they are given."""
        out = cls(tree.blobs, tree.rev)
        out.files = dict(files)
        return out

    def only(self, paths: Sequence[str]) -> Tree:
        """A copy holding ``paths`` alone, as they are here."""
        tree = Tree(self.blobs, self.rev)
        tree.files = {p: self.get(p) for p in paths}
        return tree


Series = list[tuple[str, str]]  # (patch file, its text) in series order


def changes(fix: Fix, texts: Series, patch_dir: Path) -> list[tuple[str, list[hunks.FileChange]]]:
    """(patch file, its FILE records) of a series given as texts."""
    out = []
    for file, text in texts:
        recs = series.parse_patch(patch_dir / file, fix.upstream.root,
                                  data=text.encode("utf-8", "surrogateescape"))
        out.append((file, [hunks.FileChange.from_dict(r, fix.name) for r in recs]))
    return out


def apply_all(tree: Tree, chs: list[hunks.FileChange]) -> list[int]:
    offsets: list[int] = []
    new: dict[str, str | None] = {}
    for ch in chs:
        text = new[ch.path] if ch.path in new else tree.get(ch.path)
        new[ch.path], placements = hunks.apply_change(text, ch)
        offsets += [p.offset for p in placements]
    tree.files.update(new)
    return offsets


def anchors_gone(fix: Fix, tree: Tree) -> list[str]:
    """The fix's grep preconditions on the release's root (on any file) no longer matching."""
    gone = []
    for check in fix.preconditions:
        if check.kind != "grep" or check.get("present") is False or check.get("count") == 0:
            continue
        if (check.get("root") or fix.upstream.root) != fix.upstream.root:
            continue  # another root (a serve script, say): not in the release
        pattern, want = check.get("pattern"), check.get("count")
        hits = sum(1 for line in (tree.get(check.get("path")) or "").split("\n")
                   if (re.search(pattern, line) if check.get("regex") else pattern in line))
        if (want is None and hits == 0) or (want is not None and hits != want):
            gone.append(check.describe())
    return gone


@dataclass(frozen=True)
class Held:
    """Why an upstream tree already holds a patch (or a series): the test that said so."""

    test: str  # "patch-id" | "reverse-apply" | "post-image" | "merge"
    commit: str = ""  # patch-id: the upstream commit with the same patch-id
    subject: str = ""
    hunks: str = ""  # post-image: how each hunk was decided

    def detail(self, onto: str) -> str:
        if self.test == "patch-id":
            return (f"{onto} already holds this change: upstream commit {self.commit[:12]} "
                    f"({self.subject}) has its patch-id")
        if self.test == "post-image":
            return f"{onto} already holds this change (hunk by hunk: {self.hunks})"
        if self.test == "merge":
            return (f"{onto} already holds this change: the three-way merge of the patch gives "
                    f"{onto}'s files unchanged")
        return f"{onto} already holds this change (its reversed hunks apply)"


@dataclass(frozen=True)
class Decision:
    """What an upstream tree says of one patch: ``kind`` is ``held`` (with ``held``),
    ``ambiguous`` (both directions apply, or a block it adds is already there), ``reverted``
    (an upstream commit had its patch-id and a later one reverted it), ``removed`` (an upstream
    commit had its patch-id, the change is gone again) or ``absent`` (not there)."""

    kind: str
    held: Held | None = None
    detail: str = ""
    commit: str = ""  # reverted/removed: the commit that took the change out, if known
    applies: bool = False  # absent: the patch applies with zero fuzz (it would add its code)


def _tries(tree: Tree, chs: list[hunks.FileChange]) -> tuple[bool, bool]:
    paths = list(dict.fromkeys(c.path for c in chs))
    fwd = rev = True
    try:
        apply_all(tree.only(paths), chs)
    except ConflictError:
        fwd = False
    try:
        apply_all(tree.only(paths), [c.reversed() for c in reversed(chs)])
    except ConflictError:
        rev = False
    return fwd, rev


def _post_image(lines: list[str], hunk: hunks.Hunk) -> str:
    """How one hunk is found already applied in ``lines``: "reverse-applies" (its new side is
    there, its old side is not), "post-image" (each block it adds stands there in order, near
    each other, and the lines it removes are gone from around them), else ""."""
    old_at = hunks.locate(lines, hunk.old, max(hunk.expected_index, 0)) if hunk.old else None
    if hunk.new and old_at is None and \
            hunks.locate(lines, hunk.new, max(hunk.new_start - 1, 0)) is not None:
        return "reverse-applies"
    if old_at is not None:
        return ""
    blocks = presence.added_blocks(hunk)
    kept = set(hunk.new)
    removed = [t for k, t in hunk.lines if k == "-" and t.strip() and t not in kept]
    if not blocks:  # it only removes lines: gone from the file, its context still there
        context = [t for k, t in hunk.lines if k == " " and len(t.strip()) >= 8]
        if removed and context and all(t not in lines for t in removed) and \
                sum(t in lines for t in context) * 2 >= len(context):
            return "post-image"
        return ""
    span = len(hunk.lines) + 2 * presence.NEAR
    at, first = 0, None
    for block in blocks:
        i = hunks.locate(lines, block, max(hunk.new_start - 1, at), at)
        if i is None:  # upstream put lines between: the block's lines in order, close together
            i, end = _in_order(lines, block, max(hunk.new_start - 1, at), at)
        else:
            end = i + len(block)
        if i is None or (first is not None and i - first > span):
            return ""
        first = i if first is None else first
        at = end
    assert first is not None
    region = lines[max(0, first - presence.NEAR):at + presence.NEAR]
    if any(t in region for t in removed):
        return ""
    return "post-image"


def _in_order(lines: list[str], block: list[str], near: int, lo: int
              ) -> tuple[int | None, int]:
    """(start, end) of ``block``'s lines found in order with at most a few lines between
    each (upstream's own additions), the start nearest ``near``; (None, 0) if not found."""
    starts = [i for i in range(lo, len(lines)) if lines[i] == block[0]]
    for i in sorted(starts, key=lambda i: abs(i - near)):
        at, ok = i + 1, True
        for want in block[1:]:
            j = next((j for j in range(at, min(len(lines), at + 4)) if lines[j] == want), None)
            if j is None:
                ok = False
                break
            at = j + 1
        if ok:
            return i, at
    return None, 0


def _by_hunk(tree: Tree, chs: list[hunks.FileChange]) -> str:
    """Each hunk decided on its own (:func:`_post_image`): their description, or "" when one
    hunk is not found applied."""
    said = []
    for ch in chs:
        text = tree.get(ch.path)
        if text is None or ch.op != "modify":
            return ""
        lines = hunks.split_lines(text)
        for h in ch.hunks:
            how = _post_image(lines, h)
            if not how:
                return ""
            said.append(f"{ch.path} hunk {h.index} {how}")
    return ", ".join(said)


def _near_copy(tree: Tree, chs: list[hunks.FileChange]) -> str:
    """Where a block the patch adds already stands next to where it would go, or ""."""
    for ch in chs:
        found = presence.duplicates(tree.get(ch.path), ch)
        if found is not None:
            line, hunk, _block = found
            return (f"hunk {hunk.index} adds lines that are already in {ch.path} at line "
                    f"{line}")
    return ""


def decide(tree: Tree, chs: list[hunks.FileChange], found: tuple[str, str] | None,
           reverted: tuple[str, str] | None = None, base: Tree | None = None) -> Decision:
    """Whether ``tree`` (an upstream release or commit) already holds one patch, the decision
    ``patchkit rebase`` and ``patchkit upstream check`` share (docs/upstream.md):

    ``found``: an upstream commit with the patch's patch-id (:mod:`.matching`) and
    ``reverted``: a later one reverting it; else the patch and its reverse tried with zero
    fuzz, each hunk's post-image looked for, and with ``base`` (the tree the patch was written
    on) git's three-way merge: a merge giving the tree's files unchanged holds it."""
    fwd, rev = _tries(tree, chs)
    if found and reverted:
        return Decision("reverted", None, f"upstream commit {found[0][:12]} ({found[1]}) had its "
                        f"patch-id, and {reverted[0][:12]} ({reverted[1]}) reverted it",
                        reverted[0])
    if found and fwd and not rev:
        return Decision("removed", None, f"upstream commit {found[0][:12]} ({found[1]}) had its "
                        "patch-id, but the change is no longer there: the patch applies again")
    if found:
        return Decision("held", Held("patch-id", found[0], found[1]))
    if fwd and rev:
        return Decision("ambiguous", None, "both the patch and its reverse apply with zero fuzz: "
                        "the change, or code just like it, is already there")
    if fwd:
        copy = _near_copy(tree, chs)
        return Decision("ambiguous", None, copy) if copy else Decision("absent", applies=True)
    if rev:
        return Decision("held", Held("reverse-apply"))
    how = _by_hunk(tree, chs)
    if how:
        return Decision("held", Held("post-image", hunks=how))
    if base is not None and _merge_holds(tree, chs, base):
        return Decision("held", Held("merge"))
    return Decision("absent")


def _merge_holds(tree: Tree, chs: list[hunks.FileChange], base: Tree) -> bool:
    """Whether git's three-way merge of the patch (``base`` -> base+patch) into ``tree`` is
    clean and leaves ``tree``'s files as they are."""
    paths = list(dict.fromkeys(c.path for c in chs))
    after = base.only(paths)
    try:
        apply_all(after, chs)
    except ConflictError:
        return False
    for path in paths:
        ours, old, theirs = tree.get(path), base.get(path), after.get(path)
        if ours is None or old is None or theirs is None:
            return False
        out, n = merge_file(hunks.encode(ours), hunks.encode(old), hunks.encode(theirs))
        if n or hunks.decode(out) != ours:
            return False
    return True


def held_upstream(tree: Tree, chs: list[hunks.FileChange], found: tuple[str, str] | None
                  ) -> Held | None:
    """:func:`decide`, held or not (None)."""
    return decide(tree, chs, found).held


def missing_on(tree: Tree, pre_old: dict[str, str | None], old_tree: Tree) -> list[str]:
    """The paths a patch changes (its base has them, and keeps them) that ``tree``, the new
    release, has not: upstream removed or renamed them, so there is nothing to merge into,
    and taking the old file as it is would make the patch create the whole file."""
    return [p for p, old in pre_old.items()
            if old is not None and tree.get(p) is None and old_tree.get(p) is not None]


def missing_why(base: str | None, onto: str | None) -> str:
    """Why the release a rebase goes onto lacks a file the patch changes: one older than the
    fix's ``base`` (a backport) never had it; a newer one removed or renamed it."""
    from ..engine.variants import release_key

    try:
        older = base is not None and onto is not None and release_key(onto) < release_key(base)
    except ValueError:  # onto a commit that is no release
        older = False
    return f"added after {onto}: {base} has it" if older else "removed or renamed upstream"


def classify(fix: Fix, file: str, chs: list[hunks.FileChange], tree: Tree,
             pre_old: dict[str, str | None], old_tree: Tree, onto: str
             ) -> tuple[PatchReport, dict[str, str | None], list[str]]:
    """One patch on ``tree`` (the new upstream so far) that :func:`held_upstream` found not
    held: its report, the files it leaves, the paths in conflict. ``pre_old``/``old_tree``:
    the base side before/after the patch."""
    paths = tuple(dict.fromkeys(c.path for c in chs))
    trial = tree.only(paths)
    gone_elsewhere = anchors_gone(fix, tree)  # the tree before this patch, as apply checks it
    try:
        offsets = apply_all(trial, chs)
        kind = "offset" if any(offsets) else "unchanged"
        detail = "applies at its lines" if kind == "unchanged" else \
            "applies at an offset: " + ", ".join(f"{o:+d}" for o in offsets if o)
        if gone_elsewhere:  # the hunks land, but the fix would be refused on the release
            return (PatchReport(file, "anchor-gone", f"{detail}, but a precondition no longer "
                                f"matches {onto}: " + "; ".join(gone_elsewhere), tuple(offsets),
                                paths), trial.files, list(paths))
        return PatchReport(file, kind, detail, tuple(offsets), paths), trial.files, []
    except ConflictError as exc:
        first_failure = str(exc)
    merged: dict[str, str | None] = {}
    conflicted: list[str] = []
    n: int  # a bool (changed?) or merge_file's conflict count
    for path in paths:
        ours, base_t, theirs = tree.get(path), pre_old[path], old_tree.get(path)
        if ours is None or base_t is None or theirs is None:  # created or deleted: no merge
            merged[path], n = (ours if theirs is None else theirs), ours != base_t
        else:
            out, n = merge_file(hunks.encode(ours), hunks.encode(base_t), hunks.encode(theirs),
                                labels=(onto, fix.upstream.base_release, f"{fix.name} {file}"))
            merged[path] = hunks.decode(out)
        if n:
            conflicted.append(path)
    if gone_elsewhere:
        return (PatchReport(file, "anchor-gone", f"precondition no longer matches {onto}: "
                            + "; ".join(gone_elsewhere), (), paths), merged, conflicted or list(paths))
    missing = missing_on(tree, pre_old, old_tree)
    if missing:
        others = [p for p in conflicted if p not in missing]
        why = missing_why(fix.upstream.base_release, onto)
        return (PatchReport(file, "conflict", f"{onto} has no {', '.join(missing)} ({why}), "
                            "which the patch changes: nothing to merge into"
                            + (f"; three-way merge conflicts in {', '.join(others)}"
                               if others else ""), (), paths), merged, conflicted)
    if conflicted:
        return (PatchReport(file, "conflict", "three-way merge conflicts in "
                            + ", ".join(conflicted) + f" ({first_failure.split(';')[0]})",
                            (), paths), merged, conflicted)
    return PatchReport(file, "merged", "three-way merge with git, no conflicts", (), paths), \
        merged, []


def series_text(old_text: str, pre: dict[str, str | None], post: dict[str, str | None]) -> str:
    """The patch file refreshed: its mail header and format-patch signature kept, its diffs
    made from the new texts (naming each hunk's function where the old diffs did)."""
    header, _diffs = patchmail.split(old_text)
    labels = series.has_labels(old_text)
    out = []
    for path, old in pre.items():
        diff = _diff(old, post.get(path), path)
        out.append(series.labelled(diff, hunks.encode(old)) if labels and old is not None else diff)
    return header + "".join(out) + patchmail.signature(old_text)


_HUNK = re.compile(r"^@@ -(\d+)((?:,\d+)?) \+(\d+)((?:,\d+)?) @@", re.M)
_SLIDE = 20  # lines of room on each side of a change's window (:func:`_diff`)


def _diff(old: str | None, new: str | None, path: str) -> str:
    """series.diff_files of two texts, run only between their common head and tail."""
    if old is None or new is None or old == new:
        return series.diff_files(None if old is None else hunks.encode(old),
                                 None if new is None else hunks.encode(new), path)
    a, b = hunks.split_lines(old), hunks.split_lines(new)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    # the window keeps room around the change: within a run of equal lines (blank lines
    # between methods) difflib may place a change a few lines off where head and tail put
    # it, and a window ending 3 lines from it cut that hunk's context to 2 (a zero-fuzz
    # GNU patch then refuses the series)
    start, keep = max(0, head - 3 - _SLIDE), max(0, tail - 3 - _SLIDE)
    text = series.diff_files(hunks.encode("".join(a[start:len(a) - keep])),
                             hunks.encode("".join(b[start:len(b) - keep])), path)
    if not start:
        return text
    return _HUNK.sub(lambda m: f"@@ -{int(m[1]) + start}{m[2]} +{int(m[3]) + start}{m[4]} @@",
                     text)
