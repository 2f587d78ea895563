"""The library's entry points: each hands one request to the target's engine and returns an
:class:`~patchkit.results.OpResult` or raises a :class:`~patchkit.errors.PatchkitError`."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator, Sequence

from .catalog import BrokenFix, Catalog
from .catalog.model import Fix
from .engine.contract import RECORDED
from .errors import ManifestError, PatchFormatError, PatchkitError, UnknownFixError, UnsafePathError
from .request_builder import Unreadable, build_request
from .results import OpResult, check_result
from .targets import Hold, Target, state_root_of

DEFAULT_LOCK_TIMEOUT = 30.0


def _run(catalog: Catalog, target: Target, fixes: list[Fix], op: str, **options: Any) -> OpResult:
    """``options``: build_request's dry_run, force, lock_timeout, commit, git and lazy."""
    request = build_request(catalog, fixes, op=op, roots=dict(target.roots),
                            state_root=state_root_of(target.roots), python=target.python, **options)
    return check_result(target.run(request), target.description)


def apply(catalog: Catalog, target: Target, names: Sequence[str], *, dry_run: bool = False,
          with_deps: bool = False, allow_inactive: bool = False,
          lock_timeout: float = DEFAULT_LOCK_TIMEOUT, commit: bool = False,
          git: bool = True, force: bool = False) -> OpResult:
    """Apply fixes all-or-nothing; ``commit`` records each fix as a commit (docs/git.md);
    ``git=False`` runs no git on the target (a container build: docs/containers.md);
    ``force`` upgrades a fix whose applied version's files drifted, discarding that drift."""
    fixes = catalog.apply_order(names, with_deps=with_deps, allow_inactive=allow_inactive)
    return _run(catalog, target, fixes, "apply", dry_run=dry_run, lock_timeout=lock_timeout,
                commit=commit, git=git, force=force)


def sync_names(catalog: Catalog, roots: Sequence[str]) -> list[str]:
    """The fixes ``patchkit sync`` converges a target with ``roots`` to: every active (and
    upstreamed) fix whose roots it has, in apply order."""
    try:
        every = catalog.all()
    except (ManifestError, PatchFormatError) as err:  # which fixes apply is every manifest's say
        raise type(err)(f"{err.message}. sync converges the target to every fix of the catalog, "
                        "so it reads them all: fix this one, or move it out of manifests/ until "
                        "it is fixed (patchkit apply FIX... applies the fixes you name meanwhile)",
                        **err.details) from None
    return [f.name for f in catalog.apply_order(
        [f.name for f in every if not f.is_inactive and set(f.roots) <= set(roots)])]


def _as_sync(result: OpResult) -> OpResult:
    """A sync's result as it is said (``--json``'s ``op``); read, it is the apply it ran."""
    return dataclasses.replace(result, raw=dict(result.raw, op="sync"))


def sync(catalog: Catalog, target: Target, *, dry_run: bool = False,
         lock_timeout: float = DEFAULT_LOCK_TIMEOUT, git: bool = True,
         force: bool = False) -> OpResult:
    """Converge the target to every active fix for the release it runs, in one transaction:
    each fix gets the variant for that release (an applied older version is upgraded, one an
    SGLang upgrade made ``lost`` is applied again onto the new files); a fix upstream in the
    release is left out and a lost record of it dropped; a fix the target does not need (a
    revert with nothing to revert) or already holds unrecorded is left alone (docs/cli.md)."""
    fixes = [catalog.get(n) for n in sync_names(catalog, list(target.roots))]
    try:  # the engine's op is an apply; the result is a sync's (--json's "op")
        result = _run(catalog, target, fixes, "apply", dry_run=dry_run,
                      lock_timeout=lock_timeout, git=git, force=force, sync=True)
    except PatchkitError as err:
        partial = getattr(err, "result", None)
        if partial is not None:  # a failed sync names what it left out as a successful one
            err.result = _left_out(catalog, target, partial)  # type: ignore[attr-defined]
        raise
    return _left_out(catalog, target, result)


def _left_out(catalog: Catalog, target: Target, result: OpResult) -> OpResult:
    """A sync's result as it is said: an active fix on a root the target was not given is not
    synced, said, not skipped silently (``left_out``); ``unseen``: those of them (and any
    other fix) the target records there, which the sync leaves behind, where the others were
    never applied."""
    result = _as_sync(result)
    unseen = tuple((str(e["name"]), tuple(e["roots"])) for e in result.raw.get("unseen") or ())
    left_out = tuple((f.name, tuple(r for r in f.roots if r not in target.roots))
                     for f in catalog.all() if not f.is_inactive
                     and not set(f.roots) <= set(target.roots))
    named = {name for name, _roots in left_out}
    left_out += tuple(u for u in unseen if u[0] not in named)
    raw = {k: v for k, v in result.raw.items() if k != "unseen"}  # said once, as status's
    return dataclasses.replace(result, raw=raw, left_out=left_out, unseen=unseen)


def rollback(catalog: Catalog, target: Target, names: Sequence[str], *, dry_run: bool = False,
             force: bool = False, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> OpResult:
    """Restore the bytes the fixes replaced; refuses drifted files unless ``force``. A fix
    applied with ``commit`` is undone like ``git revert`` (docs/git.md). A fix the target
    records that the catalog no longer holds is restored from its backups (its record)."""
    known, recorded_only, broken = _recorded_only(catalog, target, names, lock_timeout)
    result = _run(catalog, target, catalog.rollback_order(known), "rollback", dry_run=dry_run,
                  force=force, lock_timeout=lock_timeout, recorded_only=recorded_only)
    return dataclasses.replace(result, broken=broken) if broken else result


def _recorded_only(catalog: Catalog, target: Target, names: Sequence[str], lock_timeout: float
                   ) -> tuple[list[str], list[tuple[str, int]], tuple[BrokenFix, ...]]:
    """``names`` split into the catalog's fixes and ``(name, version)`` of those the target
    records whose manifest is gone from the catalog or cannot be read, which rollback and
    verify answer from the record (a fix needed in an incident is not held up by a typo in
    its manifest); and of those, the ones that cannot be read. A name that is neither raises
    the catalog's error: UnknownFixError, or the manifest's own."""
    known: list[str] = []
    unknown: list[tuple[str, PatchkitError]] = []
    for name in dict.fromkeys(names):
        try:
            catalog.get(name)
            known.append(name)
        except (UnknownFixError, ManifestError, PatchFormatError) as err:
            unknown.append((name, err))
    recorded_only = []
    if unknown:  # only what the target records can be answered without its manifest
        found = status(catalog, target, lock_timeout=lock_timeout)
        recorded = {s.name: s for s in found.status if s.state in RECORDED}
        for name, refused in unknown:
            if name not in recorded:
                raise refused
            recorded_only.append((name, int(recorded[name].version or 1)))
    broken = tuple(BrokenFix.of(name, err) for name, err in unknown
                   if isinstance(err, (ManifestError, PatchFormatError)))
    return known, recorded_only, broken


def undo(catalog: Catalog, target: Target, txn: str | None = None, *, dry_run: bool = False,
         lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> OpResult:
    """Put the target back exactly as it was before the apply, sync or rollback whose result
    named transaction ``txn`` (``OpResult.txn``; None: the target's last change, if it kept
    an undo point): every file, every record (an upgraded fix's old version, a lost fix's
    lost record, a rolled-back fix's own version) and the backups. Refused, writing nothing,
    when there is nothing to undo, another change was committed since or a file changed
    (docs/state.md, "Undo")."""
    return _run(catalog, target, [], "undo", dry_run=dry_run, lock_timeout=lock_timeout, txn=txn)


@contextlib.contextmanager
def held(target: Target, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
         op: str = "apply") -> Iterator[Hold]:
    """Hold the target's lock from a change through its hooks and, should one fail, its undo
    (``hooks.after_change(..., hold=)``), so no other patchkit run changes the target between
    them (docs/state.md, "Lock"): the runs inside the block take the lock from here. A local
    target only; a remote one's runs each lock in their own ssh session (``Hold.held`` False).
    Raises ``LockBusy`` as a run would."""
    hold = getattr(target, "hold", None)
    if hold is None:
        yield Hold()
        return
    with hold(lock_timeout, op) as found:
        yield found


def unread_rows(rows: Sequence[dict[str, Any]],
                unreadable: Unreadable
                ) -> tuple[list[dict[str, Any]], list[BrokenFix]]:
    """A status's fix rows without those of the fixes whose series could not be read
    (``build_request``'s ``unreadable``), or whose patch paths the target does not take (the
    engine's ``unsafe`` row: a path out of a root, or through a symlink of the target out of
    it), and those fixes as broken entries: each, where the target does not record it; a
    target that records one answered from its record, its row kept (one target's status and
    each host's of a fleet alike)."""
    held = {r.get("name") for r in rows if r.get("state") in RECORDED}
    torn: dict[str, PatchkitError] = {
        name: err for name, err in unreadable.items() if name not in held}
    for row in rows:
        unsafe = row.get("unsafe")
        if isinstance(unsafe, dict) and row.get("name") not in held:
            torn.setdefault(str(row["name"]), UnsafePathError(
                str(unsafe.get("message")), **dict(unsafe.get("details") or {})))
    return ([r for r in rows if r.get("name") not in torn],
            [BrokenFix.of(name, err) for name, err in sorted(torn.items())])


def verify(catalog: Catalog, target: Target, names: Sequence[str] = (), *,
           lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> OpResult:
    """Run the verification of applied fixes again; writes nothing. No ``names``: every fix
    the target records as applied (its ``status`` first); none applied: a result without fixes.
    A recorded fix whose manifest left the catalog is checked against its record (the hashes
    of the files it wrote), its manifest's own checks not run (its outcome's ``detail`` says so)."""
    unseen: tuple[tuple[str, tuple[str, ...]], ...] = ()
    if names:
        known, recorded_only, _broken = _recorded_only(catalog, target, names, lock_timeout)
    else:
        found = status(catalog, target, lock_timeout=lock_timeout)
        # a recorded fix whose manifest cannot be read is checked against its record, as one
        # whose manifest left the catalog: the rest are verified whatever one manifest holds
        listed = set(catalog.names()) - {b.name for b in found.broken}
        known = [s.name for s in found.status if s.state in RECORDED and s.name in listed]
        recorded_only = [(s.name, int(s.version or 1)) for s in found.status
                         if s.state in RECORDED and s.name not in listed]
        unseen = found.unseen  # applied there on a root not given: not verified, named
    # a recorded fix is verified by its checks and its record: its series is not needed
    result = _run(catalog, target, [catalog.get(n) for n in known], "verify",
                  lock_timeout=lock_timeout, recorded_only=recorded_only, unreadable={})
    return dataclasses.replace(result, unseen=unseen)


def status(catalog: Catalog, target: Target, *,
           lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> OpResult:
    """What is applied, at which version, and whether any patched file drifted; a fix using a
    root the target lacks is left out (``left_out`` names it and the roots); a fix whose
    manifest cannot be read is in ``broken`` (file, line, message)."""
    readable, broken = catalog.readable()  # a broken manifest is an error row, not the end
    fixes = [f for f in readable if set(f.roots) <= set(target.roots)]
    left_out = tuple((f.name, tuple(r for r in f.roots if r not in target.roots))
                     for f in readable if not set(f.roots) <= set(target.roots))
    # in this process the engine reads a series only when a fix is not recorded; one that
    # cannot be read is an error row of a fix the target does not record, as a bad manifest
    unreadable: Unreadable = {}
    result = _run(catalog, target, fixes, "status", lock_timeout=lock_timeout,
                  lazy=not getattr(target, "is_remote", True), unreadable=unreadable)
    seen = dict(result.raw.get("status") or {})
    seen["fixes"], torn = unread_rows(seen.get("fixes") or [], unreadable)
    if torn:
        dropped = {b.name for b in torn}
        broken = sorted([*broken, *torn], key=lambda b: b.name)
        result = dataclasses.replace(result, raw=dict(result.raw, status=seen),
                                     status=tuple(s for s in result.status if s.name not in dropped))
    # the engine names every recorded fix on a root not given (one the catalog no longer
    # holds is left out too): those are applied there, and not looked at
    named = {name for name, _roots in left_out}
    raw = (result.raw.get("status") or {}).get("left_out") or ()
    unseen = tuple((e["name"], tuple(e["roots"])) for e in raw)
    left_out += tuple(u for u in unseen if u[0] not in named)
    held = {f.name for f in readable} | {b.name for b in broken}
    gone = ("not in the catalog %s: its manifest is gone, or the fix was applied from another "
            "catalog (give that one with --catalog); `rollback` restores it from its record"
            % catalog.root)
    states = tuple(dataclasses.replace(s, detail=gone) if s.name not in held and s.state in RECORDED
                   and not s.detail else s for s in result.status)
    if broken:  # a recorded fix's row keeps what the target records, and says the error too
        errors = {b.name: b.detail for b in broken}
        seen = dict(result.raw.get("status") or {})
        seen["fixes"] = [dict(r, error=errors[r["name"]]) if r.get("name") in errors else r
                         for r in seen.get("fixes") or []]
        result = dataclasses.replace(result, raw=dict(result.raw, status=seen))
    return dataclasses.replace(result, status=states, left_out=left_out, unseen=unseen,
                               broken=tuple(broken))
