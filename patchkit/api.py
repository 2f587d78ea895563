"""The library's entry points: everything the CLI does, callable from Python.

Each function plans in memory, hands one request to the target's engine, and returns an
:class:`~patchkit.results.OpResult` or raises a :class:`~patchkit.errors.PatchkitError`
(carrying the partial result as ``err.result``). Nothing here prints or exits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from . import plan
from .catalog import Catalog, FixStub
from .results import OpResult, check_result
from .targets import Target, state_root_of

if TYPE_CHECKING:
    from .catalog.model import Fix

DEFAULT_LOCK_TIMEOUT = 30.0


def _run(
    catalog: Catalog,
    target: Target,
    fixes: list[Fix] | list[FixStub],
    op: str,
    *,
    dry_run: bool = False,
    force: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    commit: bool = False,
) -> OpResult:
    request = plan.build_request(
        catalog,
        fixes,
        op=op,
        roots=dict(target.roots),
        state_root=state_root_of(target.roots),
        python=target.python,
        dry_run=dry_run,
        force=force,
        lock_timeout=lock_timeout,
        commit=commit,
    )
    return check_result(target.run(request), target.description)


def apply(
    catalog: Catalog,
    target: Target,
    names: Sequence[str],
    *,
    dry_run: bool = False,
    with_deps: bool = False,
    allow_inactive: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    commit: bool = False,
) -> OpResult:
    """Apply fixes all-or-nothing: every patch written and verified, or nothing changed.

    ``commit`` records each fix as a commit (with ``Patchkit-Fix`` trailers) in every git
    root it changes, inside the same transaction (docs/git.md).
    """
    fixes = plan.fixes_for_apply(
        catalog, list(names), with_deps=with_deps, allow_inactive=allow_inactive
    )
    return _run(catalog, target, fixes, "apply", dry_run=dry_run, lock_timeout=lock_timeout,
                commit=commit)


def rollback(
    catalog: Catalog,
    target: Target,
    names: Sequence[str],
    *,
    dry_run: bool = False,
    force: bool = False,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> OpResult:
    """Restore the bytes the fixes replaced; refuses drifted files unless ``force``.

    A fix applied with ``commit`` is undone like ``git revert``: the inverse of its commit is
    merged onto today's files and committed (docs/git.md).
    """
    fixes = plan.fixes_for_rollback(catalog, list(names))
    return _run(
        catalog, target, fixes, "rollback", dry_run=dry_run, force=force, lock_timeout=lock_timeout
    )


def verify(
    catalog: Catalog,
    target: Target,
    names: Sequence[str],
    *,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> OpResult:
    """Run the verification of applied fixes again; writes nothing."""
    fixes = [catalog.get(n) for n in names]
    return _run(catalog, target, fixes, "verify", lock_timeout=lock_timeout)


def status(
    catalog: Catalog,
    target: Target,
    *,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> OpResult:
    """What is applied, at which version, and whether any patched file drifted.

    Every fix of the catalog whose roots the target defines is asked about, so the engine can
    also spot fixes that are present in the files but not recorded (applied by hand, or
    already in the release). A fix using a root the target lacks (``serve`` on a bare
    checkout) cannot be looked for there; it is left out rather than failing the whole
    status. Fixes recorded as applied are reported from the target's state either way.
    """
    wanted = set(target.roots)
    fixes = [f for f in catalog.all() if set(f.roots) <= wanted]
    return _strip(_run(catalog, target, fixes, "status", lock_timeout=lock_timeout))


def _strip(result: OpResult) -> OpResult:
    """The result without ``needs_detection``, which only joins the two requests."""
    status = result.raw.get("status")
    if not isinstance(status, dict) or "needs_detection" not in status:
        return result
    raw = dict(result.raw, status={k: v for k, v in status.items() if k != "needs_detection"})
    return OpResult.from_engine(raw, result.target)


def _merged(first: OpResult, second: OpResult, order: list[str], needs: list[str]) -> OpResult:
    """One status as a single request would give it: the catalog's fixes in catalog order
    (the recorded ones answered by the first request, the others by the second), then the
    recorded fixes the catalog does not list; the journal as the second request saw it."""
    one = first.raw["status"]
    two = second.raw.get("status") or {}
    asked, listed = set(needs), set(order)
    answered = {f["name"]: f for f in one.get("fixes") or () if f["name"] in listed}
    answered.update((f["name"], f) for f in two.get("fixes") or () if f["name"] in asked)
    fixes = [answered[name] for name in order if name in answered]
    fixes += [f for f in one.get("fixes") or () if f["name"] not in listed]
    status = {k: v for k, v in two.items() if k != "needs_detection"}
    status.update(state_root=one.get("state_root"), fixes=fixes)
    raw = dict(second.raw, status=status,
               recovered=list(first.raw.get("recovered") or ()) + list(second.raw.get("recovered") or ()))
    return OpResult.from_engine(raw, second.target)
