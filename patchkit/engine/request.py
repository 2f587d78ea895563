"""The engine request (format 1 of docs/design.md), checked and turned into records."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import TargetError, UnsafePathError, UsageError
from .contract import FORMAT, OPS, PRIMARY_ROOT, STRATEGIES
from .hunks import FileChange
from .paths import Root, Roots
from .recordbase import MutableRecord, Record, record_dataclass


@record_dataclass(frozen=False)
class FixSpec(MutableRecord):
    """One fix of a request (``parse_fix``); not frozen, as ``check_patch_paths`` edits ``files``."""

    name: str
    version: int
    title: str
    requires: Tuple[str, ...]
    release: Optional[Dict[str, Any]]
    patches: Sequence[Dict[str, Any]]
    files: Sequence[FileChange]  # a status: :class:`Changes`, turned into records when first used
    preconditions: Tuple[Dict[str, Any], ...]
    verification: Tuple[Dict[str, Any], ...]
    purge_pycache: bool
    scripts: Dict[str, str]
    strategy: str
    rationale: str = ""  # the commit message body of apply --commit
    revert: Optional[Dict[str, Any]] = None  # a revert fix: {root, commit, fix, series, ...}
    # the manifest allows files setuid, setgid, sticky or world-writable (check_file_modes)
    allow_special_modes: bool = False
    # docs/manifest.md, [[variants]]: (version, releases) of every variant the fix has, and
    # why the fix is not needed on this target (upstream holds it), set by variants.choose
    variants_known: Tuple[Tuple[Any, Tuple[str, ...]], ...] = ()
    not_needed: str = ""
    # a fix the target records whose manifest left the catalog: name and version only, answered
    # from its record (a rollback restores its backups, a verify checks its files' hashes)
    recorded_only: bool = False
    # a sync: a fix shipped with patchkit that no fix of the user's catalog needs, synced only
    # where the target records it (applied by name before), never brought unasked
    if_recorded: bool = False
    # shipped with patchkit (its catalog, this directory, never written to): a new version of
    # it is made in a catalog of the user's own, which advice says (:meth:`make_for`)
    shipped: str = ""

    def make_for(self, release: str) -> str:
        """How a version of the fix for ``release`` is made: a rebase, in a catalog of the
        user's own for a fix shipped with patchkit (a rebase of the shipped one is refused):
        a copy of its manifest and series, checks, variants and restart included, shadows it.
        A revert of a commit named by id has no version to make (:attr:`by_commit_id`): the
        release is added to its ``upstream.releases``, which a rebase does not do."""
        if self.by_commit_id:
            how = ("add %s to upstream.releases in manifests/%s.toml: a revert of a commit named "
                   "by id is computed from commit %s at apply time, not from a series a rebase "
                   "could move (patchkit rebase skips it); the commit must be in the history of "
                   "the target's HEAD there, or name in revert.fix the fix whose series the "
                   "commit holds, found by patch-id on any fork"
                   % (release, self.name, str((self.revert or {}).get("commit") or "")[:12]))
        else:
            how = "patchkit rebase %s --onto %s" % (self.name, release)
        if not self.shipped:
            return how if self.by_commit_id else "make one with %s" % how
        return ("%s in a catalog of your own, as %s is shipped with patchkit, whose catalog is "
                "never written to: patchkit init DIR; cp %s/manifests/%s.toml DIR/manifests/; "
                "cp -r %s/patches/%s DIR/patches/ (yours then replaces the shipped one); in DIR, %s"
                % ("do it" if self.by_commit_id else "make one", self.name, self.shipped,
                   self.name, self.shipped, self.name, how))

    @property
    def by_commit_id(self) -> bool:
        """A revert of a commit named by id alone (no ``revert.fix``): its change comes from
        the commit in the target's checkout, found by that id."""
        return self.revert is not None and not self.revert.get("fix")


@record_dataclass(frozen=True)
class Request(Record):
    """One checked request: the operation, its options, the roots and the fixes."""

    op: str
    dry_run: bool
    force: bool
    roots: Roots
    state_root: Root
    python: str
    lock_timeout: float
    fixes: Tuple[FixSpec, ...]
    dependencies: Tuple[FixSpec, ...]  # required fixes not in ``fixes``: looked for, never written
    commit: bool = False  # apply: record each fix as a commit in its git roots
    git: bool = True  # apply: False (--no-git) runs no git: no clean check, no release tag
    sync: bool = False  # apply: skip fixes whose change this target does not need (patchkit sync)
    applied_only: bool = False  # verify: only the fixes of the request the target records
    txn: Optional[str] = None  # undo: the transaction to undo (None: the last change)
    # ``python`` is the target's (--python, a venv or python: target), not the engine's own
    python_given: bool = False


def _checks(value: Any, fix: str, key: str) -> Tuple[Dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise UsageError("fix %s: %s must be a list of checks" % (fix, key), fix=fix, key=key)
    return tuple(value)


def recorded_only_fix(name: str, version: int) -> Dict[str, Any]:
    """The FIX object of a fix the target records whose manifest left the catalog: its name
    and version, answered from its record (its backups restore it, its hashes verify it)."""
    return {"name": name, "version": version, "rollback": {"strategy": "restore"},
            "recorded_only": True}


def parse_fix(data: Any, lazy: bool = False, deferred: bool = False) -> FixSpec:
    """``lazy``: the hunks are checked when first used; ``deferred``: the FILE records too."""
    if not isinstance(data, dict) or not data.get("name"):
        raise UsageError("the request has a fix without a name; rebuild it with patchkit.request_builder")
    name = str(data["name"])
    if "stub" in data:  # a fix of name and version only would read as one with no files
        raise UsageError("fix %s is a stub (name and version only), which engine request format "
                         "1 does not take; send the full fix: rebuild the request with "
                         "patchkit.request_builder" % name, fix=name)
    try:
        version = int(data.get("version", 1))
    except (TypeError, ValueError):
        raise UsageError("fix %s: version %r is not an integer" % (name, data.get("version")),
                         fix=name) from None
    release = data.get("release")
    if release is not None and (not isinstance(release, dict) or "versions" not in release):
        raise UsageError("fix %s: release must be null or {root, versions}" % name, fix=name)
    strategy = str((data.get("rollback") or {}).get("strategy") or "restore")
    if strategy not in STRATEGIES:
        raise UsageError("fix %s: rollback strategy %r; use restore or reverse" % (name, strategy), fix=name)
    raw = data.get("files") or []
    files = Changes(raw, name, lazy) if deferred else Changes(raw, name, lazy).all()
    revert = data.get("revert")
    if revert is not None and not (isinstance(revert, dict) and (revert.get("commit") or revert.get("fix"))):
        raise UsageError("fix %s: revert must be null or {root, commit and/or fix, ...}; rebuild "
                         "the request with patchkit.request_builder" % name, fix=name)
    return FixSpec(
        name=name, version=version, title=str(data.get("title", "")),
        requires=tuple(str(r) for r in (data.get("requires") or [])),
        release=release, files=files,
        patches=(data.get("patches") or ()) if deferred else tuple(data.get("patches") or []),
        preconditions=_checks(data.get("preconditions"), name, "preconditions"),
        verification=_checks(data.get("verification"), name, "verification"),
        purge_pycache=bool((data.get("actions") or {}).get("purge_pycache", True)),
        scripts={str(k): str(v) for k, v in (data.get("scripts") or {}).items()},
        strategy=strategy, revert=revert, rationale=str(data.get("rationale") or ""),
        allow_special_modes=data.get("allow_special_modes") is True,
        variants_known=tuple((v, tuple(str(r) for r in rs))
                             for v, rs in (data.get("variants_known") or [])),
        not_needed=str(data.get("not_needed") or ""),
        recorded_only=data.get("recorded_only") is True,
        if_recorded=data.get("if_recorded") is True,
        shipped=data["shipped"] if isinstance(data.get("shipped"), str) else "")


class Changes(Sequence[FileChange]):
    """A fix's FILE records as :class:`FileChange` objects, made when first used."""

    def __init__(self, raw: Any, fix: str, lazy: bool) -> None:
        self.raw, self.fix, self.lazy = raw, fix, lazy
        self.made: Optional[Tuple[FileChange, ...]] = None

    def all(self) -> Tuple[FileChange, ...]:
        if self.made is None:
            self.made = tuple(FileChange.from_dict(f, self.fix, self.lazy) for f in self.raw)
        return self.made

    def __getitem__(self, i: Any) -> Any:
        return self.all()[i]

    def __len__(self) -> int:
        return len(self.all())

    def __bool__(self) -> bool:
        return bool(self.raw)


def parse_request(data: Any) -> Request:
    if not isinstance(data, dict):
        raise UsageError("the engine request must be a JSON object")
    if data.get("format") != FORMAT:
        raise UsageError("engine request format %r; this engine speaks format %d (update patchkit "
                         "on both ends)" % (data.get("format"), FORMAT), format=data.get("format"))
    op = data.get("op")
    if op not in OPS:
        raise UsageError("engine op %r; expected one of %s" % (op, ", ".join(OPS)), op=op)
    roots = Roots(data.get("roots") or {})
    state_root = roots.get(str(data.get("state_root") or PRIMARY_ROOT))
    # status and verify never write; an apply checks each record's hunks when it places them
    lazy = op in ("status", "verify", "apply")
    from .variants import choose  # each fix as its variant for the release the target runs

    git = bool(data.get("git", True))
    releases: Dict[str, Any] = {}
    # a status reads the FILE records of the fixes the target does not record, and no other
    fixes = tuple(parse_fix(choose(f, roots, releases, git) if isinstance(f, dict) else f, lazy,
                            deferred=op == "status") for f in _list(data, "fixes"))
    dependencies = tuple(parse_fix(choose(f, roots, releases, git) if isinstance(f, dict) else f, lazy)
                         for f in _list(data, "dependencies"))
    names = [f.name for f in fixes + dependencies]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError("the request lists fix %s twice (fixes and dependencies together name "
                         "each fix once); rebuild it with patchkit.request_builder" % ", ".join(dupes), fixes=dupes)
    try:
        lock_timeout = float(data.get("lock_timeout", 30.0))
    except (TypeError, ValueError):
        raise UsageError("lock_timeout %r is not a number" % data.get("lock_timeout")) from None
    python = data.get("python")
    if python:  # checks run with it, bytecode and running servers are found by it
        python = _check_interpreter(str(python))
    return Request(op=op, dry_run=bool(data.get("dry_run", False)), force=bool(data.get("force", False)),
                   roots=roots, state_root=state_root, python=str(python or roots.interpreters.get(PRIMARY_ROOT)
                                            or sys.executable),
                   lock_timeout=lock_timeout, fixes=fixes, dependencies=dependencies,
                   commit=bool(data.get("commit", False)), git=bool(data.get("git", True)),
                   sync=bool(data.get("sync", False)),
                   applied_only=bool(data.get("applied_only", False)),
                   txn=str(data["txn"]) if data.get("txn") else None,
                   python_given=bool(data.get("python") or roots.interpreters.get(PRIMARY_ROOT)))


def _list(data: Dict[str, Any], key: str) -> List[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise UsageError("the request's %s must be a list of fixes, not %s; rebuild it with "
                         "patchkit.request_builder" % (key, type(value).__name__), key=key)
    return value


def check_patch_paths(roots: Roots, specs: Iterable[FixSpec]) -> None:
    """Put every patch path of ``specs`` in its canonical form before anything else happens; an
    unsafe one is refused naming its patch file. Roots the target lacks are skipped."""
    names = {r.name for r in roots}
    for spec in specs:
        files = list(spec.files)
        for i, change in enumerate(files):
            if change.root not in names:
                continue
            try:
                path = roots.canonical(change.root, change.path)
                shown = roots.where(change.root, path)  # messages name it as it lies in its root
                if path != change.path or shown != change.where:
                    files[i] = dataclasses.replace(change, path=path, shown=shown)
            except UnsafePathError as err:
                root = roots.get(change.root)
                patch = "patches/%s/%s" % (spec.name, change.patch or "?")
                todo = ("Fix the file's path in that patch's header (its ---/+++ lines): it must "
                        "be relative to root %s (%s) and stay inside it" % (root.name, root.path))
                if err.details.get("resolved"):  # the path is fine; the target's symlink is not
                    todo = ("The patch's path is fine: a symlink in the target takes it out of "
                            "root %s (%s). Remove or repoint that symlink, or give as the root "
                            "the directory it leads to" % (root.name, root.path))
                raise UnsafePathError(
                    "fix %s, patch file %s: %s. %s; patchkit never writes outside a root"
                    % (spec.name, patch, err.message, todo),
                    **dict(err.details, fix=spec.name, patch=patch, root_path=root.path)) from None
        spec.files = tuple(files)


#: Mode bits no file of a fix gets unless its manifest sets ``allow_special_modes``.
SPECIAL_MODES = {0o4000: "setuid", 0o2000: "setgid", 0o1000: "sticky", 0o002: "world-writable"}


def unsafe_mode(fix: str, patch: str, root: str, path: str, mode: Optional[int]) -> Optional[UnsafePathError]:
    """The error for a FILE record giving ``path`` a special mode, or None when it is plain."""
    what = ", ".join(name for bit, name in SPECIAL_MODES.items() if mode is not None and mode & bit)
    if not what:
        return None
    assert mode is not None  # `what` names a bit of it
    shown = "%o" % (0o100000 | mode)
    where = "patches/%s/%s" % (fix, patch or "?")
    return UnsafePathError(
        "fix %s, patch file %s: %s:%s would get mode %s (%s); patchkit gives no file such a mode "
        "unless the fix's manifest allows it. Give the file mode 100644 or 100755 in that patch's "
        "header, or, if the mode is intended, set allow_special_modes = true in the fix's manifest"
        % (fix, where, root, path, shown, what), fix=fix, patch=where, root=root, path=path, mode=shown)


def check_file_modes(specs: Iterable[FixSpec]) -> None:
    """Refuse a fix giving a file a special mode without its manifest's ``allow_special_modes``."""
    for spec in specs:
        if spec.allow_special_modes:
            continue
        for change in spec.files:
            err = unsafe_mode(spec.name, change.patch, change.root, change.path, change.mode)
            if err is not None:
                raise err


def _check_interpreter(python: str) -> str:
    """The interpreter a request names (``--python``) must run here, refused before anything is
    read or written, as a ``python:`` root is: else a fix with no process check applies and
    one with a script fails its verification after writing, and a status's restart gate
    looks for the servers of a venv that is not there and passes. A relative path is made
    absolute here, from the directory it was checked in (the command's; on an ``ssh://`` host,
    the login directory): a check runs in its fix's folder, where ``venv/bin/python`` would
    name another file or none. Not resolved further: a venv's ``bin/python`` is a symlink that
    must stay the venv's."""
    if os.sep in python:
        python = os.path.abspath(python)
        found = os.path.isfile(python) and os.access(python, os.X_OK)
    else:
        import shutil  # here: a bare command name is rare

        found = shutil.which(python) is not None
    if not found:
        raise TargetError("interpreter %s does not exist or is not executable; it is the python "
                          "the fixes' checks run with (--python): pass the python of the "
                          "environment that runs SGLang, or leave --python out" % python,
                          path=python, option="--python")
    return python
