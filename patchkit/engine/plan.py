"""What apply and rollback share: a fix's change computed in memory before anything is written
(``FixChange``), its entry of the engine result, and the records' rules both ops obey (a fix's
files back to their bytes before it, from its backups; no fix taken out from under a later one
that changed the same files). Apply and rollback are peers over this module."""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ..errors import ConflictError, PreconditionFailed, TargetError
from .fsops import read_bytes
from .hunks import Placement, apply_change, decode, encode, sha256_bytes
from .paths import Roots
from .recordbase import MutableRecord, record_dataclass
from .records import FixRecord, State
from .request import FixSpec
from .store import Store
from .workspace import Key, Workspace, file_op, placed_diff, unified_diff

if TYPE_CHECKING:  # revert is imported only by the ops that use it
    from . import revert
    from .hunks import FileChange

Sources = Dict[str, Tuple[Optional["revert.Source"], Dict[str, Any]]]  # a revert fix's commit
Side = Dict[Key, Tuple[Optional[bytes], Optional[int]]]  # (bytes, mode) of each file


@record_dataclass(frozen=False)
class FixChange(MutableRecord):
    """One fix's change (apply and rollback), computed in memory before anything is written."""

    spec: FixSpec
    preconditions: List[Dict[str, Any]]
    keys: List[Key] = field(default_factory=list)
    before: Side = field(default_factory=dict)
    after: Side = field(default_factory=dict)
    placements: Dict[Key, List[Placement]] = field(default_factory=dict)
    changes: Dict[Key, List[FileChange]] = field(default_factory=dict)  # FILE records applied
    verification: List[Dict[str, Any]] = field(default_factory=list)
    created_dirs: List[List[str]] = field(default_factory=list)  # [root, dir relative to it]
    source: Optional[revert.Source] = None  # the commit a revert fix undoes (git roots)
    commits: List[Dict[str, str]] = field(default_factory=list)  # apply --commit: {root, sha}

    # the workspace the sides were taken from, whose entries hold their digests
    ws: Optional[Workspace] = field(default=None, compare=False, repr=False)

    def snapshot(self, ws: Workspace, side: Side) -> None:
        self.ws = ws
        for key in self.keys:
            e = ws.entry(*key)
            side[key] = (e.current, e.mode)

    def sha256(self, key: Key, data: Optional[bytes]) -> Optional[str]:
        """The digest of one side's bytes of the file, hashed once per version
        (:meth:`Entry.sha256`) while the workspace holds the file. A file the workspace has
        let go (its bytes written) is not read again: the bytes given are hashed."""
        entry = None if self.ws is None else self.ws.entries.get(key)
        return sha256_bytes(data) if entry is None else entry.sha256(data)


def fix_result(fc: FixChange, outcome: str, release: bool = False) -> Dict[str, Any]:
    """The fix's entry of the engine result (docs/design.md, "Engine result"); ``release``: the
    result is the last use of the fix's bytes, let go file by file as its diff is made."""
    files = []
    roots = {r.name: r for r in fc.ws.roots} if fc.ws is not None else {}
    for key in fc.keys:
        before, after = fc.before[key][0], fc.after[key][0]
        if before is None and after is None:
            continue  # no file before nor after (a created file deleted by hand, rolled back)
        # the diff names the file as it lies in its root (an installed package's sglang/x.py),
        # so `git apply` run in the root reads it
        shown = roots[key[0]].mapped(key[1]) if key[0] in roots else key[1]
        if release:
            fc.before[key], fc.after[key] = (None, fc.before[key][1]), (None, fc.after[key][1])
        changes = fc.changes.get(key, [])
        one = changes[0] if len(changes) == 1 else None  # one patch: its hunks, as placed
        if one is not None and one.op == file_op(before, after) and (
                one.op == "modify" or len(one.hunks) == 1):
            diff = placed_diff(shown, one.hunks, [p.line for p in fc.placements[key]], one.op)
        else:  # merged from several patches, reverted, rolled back
            diff = unified_diff(shown, before, after)
        files.append({"root": key[0], "path": key[1], "op": file_op(before, after),
                      "before_sha256": fc.sha256(key, before), "after_sha256": fc.sha256(key, after),
                      "hunks": [p.as_dict() for p in fc.placements.get(key, [])], "diff": diff})
    out = {"name": fc.spec.name, "version": fc.spec.version, "outcome": outcome, "files": files,
           "preconditions": fc.preconditions, "verification": fc.verification}
    if fc.source is not None:
        out["revert"] = {"root": fc.source.root, "commit": fc.source.sha,
                         "title": fc.source.title, "found_by": fc.source.found_by}
    if fc.commits:
        out["commits"] = list(fc.commits)
    return out


def touched(spec: FixSpec, sources: Sources) -> List[Tuple[str, str, str]]:
    """(root, path, first op) of each file the fix changes: a revert's from its commit on a git
    root, else from the FILE records."""
    if spec.name in sources:
        src, check = sources[spec.name]
        if src is not None:
            return [(src.root, f.path, "revert") for f in src.files]
        if not check["ok"]:
            return []
    out: Dict[Key, str] = {}
    for change in spec.files:
        out.setdefault((change.root, change.path), change.op)
    return [(k[0], k[1], op) for k, op in out.items()]


def refuse_later_writers(state: State, names: List[str], action: str, remedy: str, roots: Roots,
                         also: Sequence[str] = ()) -> None:
    """Refuse when a fix applied after one of ``names``, and not among them, changed the same
    files (named as they lie in ``roots``); ``remedy`` gets the fixes to roll back (the later
    ones, then ``also``)."""
    applied = state.fixes
    later: List[Dict[str, Any]] = []
    for i, rec in enumerate(applied):
        if rec.name not in names:
            continue
        mine = {f.key for f in rec.files}
        for other in applied[i + 1:]:
            shared = sorted(mine & {f.key for f in other.files})
            if shared and other.name not in names:
                later.append({"fix": rec.name, "changed_after_by": other.name,
                              "files": [roots.where(*key) for key in shared]})
    if later:
        raise PreconditionFailed("cannot %s: %s; %s" % (
            action, "; ".join("fix %s was applied after %s and also changed %s"
                              % (b["changed_after_by"], b["fix"], ", ".join(b["files"])) for b in later),
            remedy % " ".join(sorted({b["changed_after_by"] for b in later}) + list(also))),
            blockers=later)


def restore_in_memory(store: Store, ws: Workspace, rec: FixRecord) -> None:
    """Each of the fix's files, in ``ws``, back to its bytes and mode before the fix (backups)."""
    for f in rec.files:
        e = ws.entry(f.root, f.path)
        data: Optional[bytes] = None
        if f.before_sha256 is not None:
            data = read_bytes(store.path(f.backup)) if f.backup else None
            if data is None or sha256_bytes(data) != f.before_sha256:
                raise TargetError(
                    "fix %s: the backup of %s (%s) is missing or damaged; roll back with the "
                    "reverse strategy or restore the file from git by hand"
                    % (rec.name, e.where, store.path(f.backup or "backups")),
                    fix=rec.name, path=f.path)
        e.current = data
        e.mode = f.mode_before if data is not None else None


def holds_version(ws: Workspace, spec: FixSpec, rec: FixRecord, seen: Dict[Key, Optional[str]]) -> bool:
    """Whether the files of ``rec``, an applied version of a fix, hold what ``spec``, another
    version of it, makes of their bytes before the fix (``ws`` holds them, restored from the
    backups; ``seen`` has each file's digest on disk): every file is then that version's
    result, edited by hand into it (or refreshed from here), and an upgrade loses nothing.
    A revert fix's result needs the fork's history, and a version with no FILE records (its
    series could not be read: ``request_builder``'s ``unreadable``) has none to compare: never."""
    if spec.revert is not None or not spec.files:
        return False
    result = {f.key: ws.entry(*f.key).current for f in rec.files}
    for change in spec.files:
        key = (change.root, change.path)
        if key not in result:
            continue  # a file only the other version changes: its own checks look at it
        data = result[key]
        try:
            new, _placed = apply_change(None if data is None else decode(data), change)
        except ConflictError:
            return False
        result[key] = None if new is None else encode(new)
    return all(ws.entry(*key).sha256(data) == seen[key] for key, data in result.items())
