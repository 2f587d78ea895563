"""`patchkit rollback`: put back the bytes a fix replaced.

Built like :mod:`patchkit.cli.apply`: :func:`run` is the command, callable by the fast path of
:mod:`patchkit.cli.main` without click; the click command (``COMMANDS``) is built on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import api
from . import render
from .common import TARGET_FAST_OPTIONS, State, emit_result, lazy_command, require_names

if TYPE_CHECKING:
    from .common import FastOptions

FAST_OPTIONS: FastOptions = {
    **TARGET_FAST_OPTIONS,
    "--dry-run": ("dry_run", "flag", False),
    "-n": ("dry_run", "flag", False),
    "--force": ("force", "flag", False),
}


def run(
    state: State,
    fixes: tuple[str, ...],
    target: str | None,
    roots: tuple[str, ...],
    python: str | None,
    lock_timeout: float,
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> int:
    """Roll FIXES back on the target, all or nothing."""
    names = require_names(fixes, "roll back")
    tgt = state.target(target, roots, python)
    with render.busy(f"rolling back {', '.join(names)} on {tgt.description}", quiet=as_json):
        result = api.rollback(
            state.catalog(), tgt, names, dry_run=dry_run, force=force, lock_timeout=lock_timeout
        )
    return emit_result(result, as_json)


def _command() -> Any:
    import click

    from .common import json_option, pass_state, target_options

    @click.command("rollback")
    @click.argument("fixes", nargs=-1)
    @target_options
    @click.option("--dry-run", "-n", is_flag=True, help="Check and show what would be restored; write nothing.")
    @click.option("--force", is_flag=True, help="Roll back even files changed since the fix was applied.")
    @json_option
    @pass_state
    def rollback(state: State, **params: Any) -> int:
        """Roll FIXES back on the target, all or nothing."""
        return run(state, **params)

    return rollback


__getattr__ = lazy_command(__name__, "rollback", _command)
