"""`patchkit status`: what is applied where, and what drifted."""

from __future__ import annotations

import click

from .. import api, render
from ..errors import EXIT_CHECK_FAILED
from .common import State, json_option, pass_state, target_options

UNHEALTHY = {"drifted", "partly-present"}


@click.command("status")
@target_options
@click.option("--all", "show_all", is_flag=True, help="Also list fixes that are not applied.")
@click.option(
    "--exit-code",
    is_flag=True,
    help=f"Exit {EXIT_CHECK_FAILED} when a fix has drifted or is partly present (like git diff --exit-code).",
)
@json_option
@pass_state
def status(
    state: State,
    target: str | None,
    roots: tuple[str, ...],
    python: str | None,
    lock_timeout: float,
    show_all: bool,
    exit_code: bool,
    as_json: bool,
) -> int:
    """Show which fixes are applied on the target, at which version, and any drift."""
    tgt = state.target(target, roots, python)
    with render.busy(f"reading {tgt.description}", quiet=as_json):
        result = api.status(state.catalog(), tgt, lock_timeout=lock_timeout)
    if as_json:
        render.print_json(result.to_json())
    else:
        render.render_status(render.stdout(), result, verbose=show_all)
    if exit_code and any(s.state in UNHEALTHY for s in result.status):
        return EXIT_CHECK_FAILED
    return 0


COMMANDS = [status]
