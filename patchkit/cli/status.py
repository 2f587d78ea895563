"""`patchkit status`: what is applied where, and what drifted.

Built like :mod:`patchkit.cli.apply`: :func:`run` is the command, callable by the fast path of
:mod:`patchkit.cli.main` without click (status takes no argument, so a command line with one
goes to click, which refuses it); the click command (``COMMANDS``) is built on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import api
from . import render
from ..errors import EXIT_CHECK_FAILED
from .common import TARGET_FAST_OPTIONS, State, lazy_command

if TYPE_CHECKING:
    from .common import FastOptions

UNHEALTHY = {"drifted", "partly-present", "outdated"}

FAST_OPTIONS: FastOptions = {
    **TARGET_FAST_OPTIONS,
    "--all": ("show_all", "flag", False),
    "--exit-code": ("exit_code", "flag", False),
}
FAST_TAKES_FIXES = False


def run(
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


def _command() -> Any:
    import click

    from .common import json_option, pass_state, target_options

    @click.command("status")
    @target_options
    @click.option("--all", "show_all", is_flag=True, help="Also list fixes that are not applied.")
    @click.option(
        "--exit-code",
        is_flag=True,
        help=f"Exit {EXIT_CHECK_FAILED} when a fix has drifted, is partly present or is outdated (like git diff --exit-code).",
    )
    @json_option
    @pass_state
    def status(state: State, **params: Any) -> int:
        """Show which fixes are applied on the target, at which version, and any drift."""
        return run(state, **params)

    return status


__getattr__ = lazy_command(__name__, "status", _command)
