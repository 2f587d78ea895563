"""`patchkit rollback`: put back the bytes a fix replaced."""

from __future__ import annotations

import click

from .. import api, render
from .common import State, emit_result, json_option, pass_state, require_names, target_options


@click.command("rollback")
@click.argument("fixes", nargs=-1)
@target_options
@click.option("--dry-run", "-n", is_flag=True, help="Check and show what would be restored; write nothing.")
@click.option("--force", is_flag=True, help="Roll back even files changed since the fix was applied.")
@json_option
@pass_state
def rollback(
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


COMMANDS = [rollback]
