"""The library's entry points: everything the CLI does, callable from Python.

Each function plans in memory, hands one request to the target's engine, and returns an
:class:`~patchkit.results.OpResult` or raises a :class:`~patchkit.errors.PatchkitError`
(carrying the partial result as ``err.result``). Nothing here prints or exits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .catalog import Catalog
from .request import build_request
from .results import OpResult, check_result
from .targets import Target, state_root_of

if TYPE_CHECKING:
    from .catalog.model import Fix

DEFAULT_LOCK_TIMEOUT = 30.0


def _run(catalog: Catalog, target: Target, fixes: list[Fix], op: str, *, dry_run: bool = False,
         force: bool = False, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
         commit: bool = False) -> OpResult:
    request = build_request(catalog, fixes, op=op, roots=dict(target.roots),
                            state_root=state_root_of(target.roots), python=target.python,
                            dry_run=dry_run, force=force, lock_timeout=lock_timeout,
                            commit=commit)
    return check_result(target.run(request), target.description)


def apply(catalog: Catalog, target: Target, names: Sequence[str], *, dry_run: bool = False,
          with_deps: bool = False, allow_inactive: bool = False,
          lock_timeout: float = DEFAULT_LOCK_TIMEOUT, commit: bool = False) -> OpResult:
    """Apply fixes all-or-nothing: every patch written and verified, or nothing changed.

    ``commit`` records each fix as a commit (with ``Patchkit-Fix`` trailers) in every git
    root it changes, inside the same transaction (docs/git.md).
    """
    fixes = catalog.apply_order(names, with_deps=with_deps, allow_inactive=allow_inactive)
    return _run(catalog, target, fixes, "apply", dry_run=dry_run, lock_timeout=lock_timeout,
                commit=commit)


def rollback(catalog: Catalog, target: Target, names: Sequence[str], *, dry_run: bool = False,
             force: bool = False, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> OpResult:
    """Restore the bytes the fixes replaced; refuses drifted files unless ``force``.

    A fix applied with ``commit`` is undone like ``git revert``: the inverse of its commit is
    merged onto today's files and committed (docs/git.md).
    """
    return _run(catalog, target, catalog.rollback_order(names), "rollback", dry_run=dry_run,
                force=force, lock_timeout=lock_timeout)


def verify(catalog: Catalog, target: Target, names: Sequence[str], *,
           lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> OpResult:
    """Run the verification of applied fixes again; writes nothing."""
    fixes = [catalog.get(n) for n in names]
    return _run(catalog, target, fixes, "verify", lock_timeout=lock_timeout)


def status(catalog: Catalog, target: Target, *,
           lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> OpResult:
    """What is applied, at which version, and whether any patched file drifted.

    Every fix of the catalog whose roots the target defines is sent in full, in one request,
    so the engine can also spot fixes present in the files but not recorded (applied by
    hand, or already in the release). A fix using a root the target lacks (``serve`` on a
    bare checkout) cannot be looked for there and is left out rather than failing the whole
    status; fixes recorded as applied are reported from the target's state either way.
    """
    fixes = [f for f in catalog.all() if set(f.roots) <= set(target.roots)]
    return _run(catalog, target, fixes, "status", lock_timeout=lock_timeout)
