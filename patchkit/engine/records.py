"""The engine's records and their JSON forms (docs/state.md, format 1): a fix's file records and
the fix itself as ``state.json`` holds them, the state, and the journal of a transaction in
flight with its files. Every reader goes through ``from_json``, which checks the shape a record
must have (a record of the wrong shape is damaged, as garbage is: ``Damaged``); every writer
through ``to_json``, which gives back the same keys (and any key an earlier or later engine
wrote that this one does not know), so a record read and written again is unchanged.

Only this module knows the keys; the format on disk is the one docs/state.md describes."""

from __future__ import annotations

import re
from dataclasses import field
from typing import Any, Container, Dict, Iterable, List, Optional, Tuple

from .recordbase import MutableRecord, record_dataclass

FORMAT = 1
FIX_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*\Z")
Key = Tuple[str, str]  # (root, path)


class Damaged(ValueError):
    """A record that does not match its schema; the message says where and what."""


def _extra(data: Dict[str, Any], known: Iterable[str]) -> Dict[str, Any]:
    names = set(known)
    return {k: v for k, v in data.items() if k not in names}


def _opt_str(data: Dict[str, Any], key: str, where: str) -> Optional[str]:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise Damaged("%s.%s is %r, not a string" % (where, key, value))
    return value


def _list(data: Dict[str, Any], key: str, where: str) -> List[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise Damaged("%s.%s is %s, not a list" % (where, key, type(value).__name__))
    return list(value)


def _dict(value: Any) -> Dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _object(value: Any, where: str, what: str) -> Dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(value.get(k), str) for k in ("root", "path")):
        raise Damaged("%s is not a %s (root, path)" % (where, what))
    return value


# -- state.json -----------------------------------------------------------------------------

@record_dataclass(frozen=False)
class FileRecord(MutableRecord):
    """One file a fix changed: its bytes' hashes before and after the fix, and its backup (the
    name relative to ``.patchkit/``; readers use it, never a layout)."""

    root: str
    path: str
    op: str = "modify"
    before_sha256: Optional[str] = None
    after_sha256: Optional[str] = None
    mode_before: Optional[int] = None
    mode: Optional[int] = None
    backup: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)  # e.g. ``stat`` of earlier engines

    KEYS = ("root", "path", "op", "before_sha256", "after_sha256", "mode_before", "mode", "backup")

    @property
    def key(self) -> Key:
        return (self.root, self.path)

    def chmodded(self, mode: Optional[int]) -> bool:
        """The file's permission bits ``mode`` are not those this record left (``chmod`` since:
        drift, as a change of its bytes is; a record that kept no mode, none)."""
        return self.mode is not None and mode is not None and mode != self.mode

    @classmethod
    def from_json(cls, data: Any, where: str) -> "FileRecord":
        data = _object(data, where, "file record")
        return cls(root=data["root"], path=data["path"], op=str(data.get("op") or "modify"),
                   before_sha256=_opt_str(data, "before_sha256", where),
                   after_sha256=_opt_str(data, "after_sha256", where),
                   mode_before=data.get("mode_before"), mode=data.get("mode"),
                   backup=_opt_str(data, "backup", where), extra=_extra(data, cls.KEYS))

    def to_json(self) -> Dict[str, Any]:
        return dict(self.extra, root=self.root, path=self.path, op=self.op,
                    before_sha256=self.before_sha256, after_sha256=self.after_sha256,
                    mode_before=self.mode_before, mode=self.mode, backup=self.backup)


@record_dataclass(frozen=False)
class FixRecord(MutableRecord):
    """An applied fix as ``state.json`` records it."""

    name: str
    version: Optional[int] = None
    title: str = ""
    requires: List[str] = field(default_factory=list)
    release: Optional[Dict[str, Any]] = None
    applied_at: Optional[str] = None
    txn: Optional[str] = None
    patches: List[Dict[str, Any]] = field(default_factory=list)
    files: List[FileRecord] = field(default_factory=list)
    # [root, dir relative to it]; an earlier engine wrote absolute paths (see ``created_dirs``)
    created_dirs: List[Any] = field(default_factory=list)
    verification: List[Dict[str, Any]] = field(default_factory=list)
    backup_dir: Optional[str] = None
    rollback: Dict[str, Any] = field(default_factory=dict)
    purge_pycache: bool = True
    roots: Dict[str, str] = field(default_factory=dict)  # the apply's paths, for people only
    commits: List[Dict[str, str]] = field(default_factory=list)  # apply --commit: {root, sha}
    revert: Optional[Dict[str, str]] = None  # {root, commit} a revert fix undid
    installed: Optional[Dict[str, str]] = None  # {root, dist, version} of the wheel install
    extra: Dict[str, Any] = field(default_factory=dict)

    KEYS = ("name", "version", "title", "requires", "release", "applied_at", "txn", "patches",
            "files", "created_dirs", "verification", "backup_dir", "rollback", "purge_pycache",
            "roots", "commits", "revert", "installed")

    @property
    def keys(self) -> List[Key]:
        return [f.key for f in self.files]

    def lacking(self, given: Container[str]) -> List[str]:
        """The roots the fix wrote files on that the request did not give (``given``: the root
        names, or the :class:`Roots`), sorted: such a fix is not looked at, only named
        (status's ``left_out``), nor does it stop an op on the roots given."""
        return sorted({f.root for f in self.files if f.root not in given})

    @property
    def strategy(self) -> str:
        return str(self.rollback.get("strategy") or "restore")

    @property
    def installed_version(self) -> Optional[str]:
        return (self.installed or {}).get("version")

    def restricted(self, files: List[FileRecord]) -> "FixRecord":
        """The same record with only ``files`` (a lost fix's files a reinstall left alone)."""
        out = FixRecord.from_json(self.to_json(), self.name)
        out.files = list(files)
        return out

    def created(self, names: Iterable[str]) -> List[Key]:
        """The (root, dir relative to it) the fix's apply created, of the roots ``names`` (an
        absolute dir, from an earlier engine, is taken relative to the record's ``roots``)."""
        names = set(names)
        out: List[Key] = []
        for d in self.created_dirs:
            if isinstance(d, list) and len(d) == 2:
                if d[0] in names:
                    out.append((str(d[0]), str(d[1])))
                continue
            for name, path in self.roots.items():
                prefix = str(path).rstrip("/") + "/"
                if name in names and isinstance(d, str) and d.startswith(prefix):
                    out.append((name, d[len(prefix):]))
                    break
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> "FixRecord":
        if not isinstance(data, dict):
            raise Damaged("%s is %s, not an object" % (where, type(data).__name__))
        name = data.get("name")
        if not isinstance(name, str) or not FIX_NAME.match(name):
            raise Damaged("%s.name is %r, not a fix name" % (where, name))
        version = data.get("version", 1)
        if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
            raise Damaged("%s.version is %r, not a number" % (where, version))
        lists = {k: _list(data, k, where) for k in ("files", "patches", "requires", "created_dirs",
                                                     "verification", "commits")}
        files = [FileRecord.from_json(f, "%s.files[%d]" % (where, j))
                 for j, f in enumerate(lists.pop("files"))]
        return cls(name=name, version=data.get("version"), title=str(data.get("title") or ""),
                   release=data.get("release"), applied_at=data.get("applied_at"),
                   txn=data.get("txn"), files=files, backup_dir=data.get("backup_dir"),
                   rollback=_dict(data.get("rollback")),
                   purge_pycache=bool(data.get("purge_pycache", True)),
                   roots=_dict(data.get("roots")), revert=data.get("revert"),
                   installed=data.get("installed"), extra=_extra(data, cls.KEYS), **lists)

    def to_json(self) -> Dict[str, Any]:
        return dict(self.extra, name=self.name, version=self.version, title=self.title,
                    requires=list(self.requires), release=self.release,
                    applied_at=self.applied_at, txn=self.txn,
                    patches=[dict(p) for p in self.patches],
                    files=[f.to_json() for f in self.files], created_dirs=list(self.created_dirs),
                    verification=list(self.verification), backup_dir=self.backup_dir,
                    rollback=dict(self.rollback), purge_pycache=self.purge_pycache,
                    roots=dict(self.roots), commits=list(self.commits), revert=self.revert,
                    installed=self.installed)


@record_dataclass(frozen=False)
class State(MutableRecord):
    """``state.json``: what is applied, in application order; ``txn`` is the last committed
    transaction (the commit point of every transaction)."""

    txn: Optional[str] = None
    fixes: List[FixRecord] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)

    def by_name(self) -> Dict[str, FixRecord]:
        return {f.name: f for f in self.fixes}

    def names(self) -> List[str]:
        return [f.name for f in self.fixes]

    def without(self, names: Iterable[str]) -> "State":
        gone = set(names)
        return State(self.txn, [f for f in self.fixes if f.name not in gone], dict(self.extra))

    def requiring(self, name: str) -> List[str]:
        """The applied fixes that require ``name``, however deep, in application order: a
        rollback of ``name`` is refused while they stay applied."""
        found = {name}
        for fix in self.fixes:  # application order: a fix's requirements come before it
            if fix.name not in found and found & set(fix.requires):
                found.add(fix.name)
        return [f.name for f in self.fixes if f.name in found and f.name != name]

    def last_writers(self) -> Dict[Key, Tuple[str, FileRecord]]:
        """For each recorded file, the last applied fix that touched it and what it recorded of
        the file (the hash and mode it left)."""
        out: Dict[Key, Tuple[str, FileRecord]] = {}
        for fix in self.fixes:  # application order
            for f in fix.files:
                out[f.key] = (fix.name, f)
        return out

    @classmethod
    def from_json(cls, data: Any) -> "State":
        if not isinstance(data, dict):
            raise Damaged("the record is %s, not an object" % type(data).__name__)
        fixes = data.get("fixes", [])
        if not isinstance(fixes, list):
            raise Damaged("'fixes' is %s, not a list" % type(fixes).__name__)
        txn = data.get("txn")
        if txn is not None and not isinstance(txn, str):
            raise Damaged("'txn' is %s, not a string" % type(txn).__name__)
        out: List[FixRecord] = []
        for i, fix in enumerate(fixes):
            name = fix.get("name") if isinstance(fix, dict) else None
            if name in {rec.name for rec in out}:
                raise Damaged("fixes[%d]: fix %s is recorded twice" % (i, name))
            out.append(FixRecord.from_json(fix, "fixes[%d]" % i))
        return cls(txn, out, _extra(data, ("format", "txn", "fixes")))

    def to_json(self) -> Dict[str, Any]:
        return dict(self.extra, format=FORMAT, txn=self.txn, fixes=[f.to_json() for f in self.fixes])


def state_problem(data: Any) -> Optional[str]:
    """What in a state record does not match its schema, or None."""
    try:
        State.from_json(data)
    except Damaged as exc:
        return str(exc)
    return None


# -- journal.json ---------------------------------------------------------------------------

@record_dataclass(frozen=False)
class JournalFile(MutableRecord):
    """One file a transaction in flight writes: its hashes before (null: it did not exist) and
    after, how to put it back (``backup``, relative to ``.patchkit/``), ``rel`` as written
    (relative to the root's real directory, in its own layout)."""

    root: str
    path: str
    rel: Optional[str] = None  # an earlier engine's journal: only ``path``
    op: str = "modify"
    before_sha256: Optional[str] = None
    after_sha256: Optional[str] = None
    mode: Optional[int] = None
    mode_after: Optional[int] = None
    owner: Optional[Tuple[int, int]] = None
    backup: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)  # abs, state_root, top: earlier engines

    KEYS = ("root", "path", "rel", "op", "before_sha256", "after_sha256", "mode", "mode_after",
            "owner", "backup")

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "JournalFile":
        owner = data.get("owner")
        return cls(root=str(data["root"]), path=str(data["path"]), rel=data.get("rel"),
                   op=str(data.get("op") or "modify"), before_sha256=data.get("before_sha256"),
                   after_sha256=data.get("after_sha256"), mode=data.get("mode"),
                   mode_after=data.get("mode_after"),
                   owner=(int(owner[0]), int(owner[1])) if owner else None,
                   backup=data.get("backup"), extra=_extra(data, cls.KEYS))

    def to_json(self) -> Dict[str, Any]:
        return dict(self.extra, root=self.root, path=self.path, rel=self.rel, op=self.op,
                    before_sha256=self.before_sha256, after_sha256=self.after_sha256,
                    mode=self.mode, mode_after=self.mode_after,
                    owner=list(self.owner) if self.owner else None, backup=self.backup)


@record_dataclass(frozen=False)
class Journal(MutableRecord):
    """``journal.json``: present only while a transaction is in flight."""

    txn: str
    op: str
    fixes: List[str]
    versions: Dict[str, Any] = field(default_factory=dict)
    started_at: Optional[str] = None
    files: List[JournalFile] = field(default_factory=list)
    created_dirs: List[Any] = field(default_factory=list)  # [root, dir relative to it]
    git_commits: Optional[List[Dict[str, Any]]] = None  # only when the transaction commits to git
    python: Optional[str] = None  # the interpreter whose pycache_prefix is purged
    extra: Dict[str, Any] = field(default_factory=dict)
    written: Optional[Dict[str, Any]] = None  # in memory only: when the files were written

    KEYS = ("format", "txn", "op", "fixes", "versions", "started_at", "files", "created_dirs",
            "git_commits", "python")

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Journal":
        """The journal as written (its shape is not checked as the state's is: only this
        engine's transactions write it, and one of the wrong shape trips the recovery, an
        internal error, rather than being undone on a guess)."""
        git = data.get("git_commits")
        return cls(txn=str(data["txn"]), op=str(data["op"]), fixes=[str(n) for n in data["fixes"]],
                   versions=dict(data.get("versions") or {}), started_at=data.get("started_at"),
                   files=[JournalFile.from_json(f) for f in data.get("files") or []],
                   created_dirs=list(data.get("created_dirs") or []),
                   git_commits=list(git) if git is not None else None,
                   python=data.get("python"), extra=_extra(data, cls.KEYS))

    def to_json(self) -> Dict[str, Any]:
        out = dict(self.extra, format=FORMAT, txn=self.txn, op=self.op, fixes=list(self.fixes),
                   versions=dict(self.versions), started_at=self.started_at,
                   files=[f.to_json() for f in self.files],
                   created_dirs=list(self.created_dirs), python=self.python)
        if self.git_commits is not None:
            out["git_commits"] = list(self.git_commits)
        return out


@record_dataclass(frozen=False)
class Intent(MutableRecord):
    """``txn/<id>/txn.json``: what a transaction set out to do, before its journal exists."""

    txn: str
    op: Optional[str]
    fixes: List[str]
    started_at: Optional[str] = None

    @classmethod
    def from_json(cls, data: Any, txn: str) -> "Intent":
        """Any shape: an unreadable intent only names less in the recovery's report."""
        data = data if isinstance(data, dict) else {}
        fixes = data.get("fixes")
        op = data.get("op")
        return cls(txn, op if isinstance(op, str) else None,
                   [str(n) for n in fixes] if isinstance(fixes, list) else [],
                   data.get("started_at"))

    def to_json(self) -> Dict[str, Any]:
        return {"format": FORMAT, "txn": self.txn, "op": self.op, "fixes": list(self.fixes),
                "started_at": self.started_at}


# -- backups: their names, relative to .patchkit/ (the only place they are spelled) -----------

BACKUPS = "backups"


#: The last change's undo point (docs/state.md, "Undo"): its transaction directory, kept.
UNDO = "undo"
#: In a transaction's directory: the state it replaced (an apply's or a rollback's; an undo
#: puts it back).
STATE_BEFORE = "state-before.json"


def backup_name(fix: str, i: int) -> str:
    """The i-th backup of ``fix`` after the commit: of the i-th of its files that existed."""
    return "%s/%s/%d" % (BACKUPS, fix, i)


def fix_backups(fix: str) -> str:
    """The directory of ``fix``'s backups after the commit."""
    return "%s/%s" % (BACKUPS, fix)


def staged_backups(txn: str, fix: str) -> str:
    """The directory of ``fix``'s backups while ``txn`` is in flight; it becomes
    ``fix_backups(fix)`` at the cleanup (one rename)."""
    return "txn/%s/fixes/%s" % (txn, fix)


def original_name(txn: str, n: int) -> str:
    """The bytes of the n-th file of ``txn``'s journal that no fix's backup holds (a rollback)."""
    return "txn/%s/orig/%d" % (txn, n)
