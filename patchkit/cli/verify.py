"""`patchkit verify`: rerun the verification of applied fixes."""

from __future__ import annotations

import click

from .. import api, render
from .common import State, emit_result, json_option, pass_state, require_names, target_options


@click.command("verify")
@click.argument("fixes", nargs=-1)
@target_options
@json_option
@pass_state
def verify(
    state: State,
    fixes: tuple[str, ...],
    target: str | None,
    roots: tuple[str, ...],
    python: str | None,
    lock_timeout: float,
    as_json: bool,
) -> int:
    """Run the verification checks of FIXES on the target; writes nothing."""
    names = require_names(fixes, "verify")
    tgt = state.target(target, roots, python)
    with render.busy(f"verifying {', '.join(names)} on {tgt.description}", quiet=as_json):
        result = api.verify(state.catalog(), tgt, names, lock_timeout=lock_timeout)
    return emit_result(result, as_json)


COMMANDS = [verify]
