"""`patchkit status`: which fixes a target carries. Its own module, so a status, which only
reads, loads none of the commands that change a target (`cli/ops.py`)."""

from __future__ import annotations

from typing import Any

import click

from .. import api
from ..engine.contract import UNHEALTHY
from ..errors import EXIT_CHECK_FAILED
from . import render, render_status
from .common import TARGET_OPTIONS, State, command, run_op
from .fleet import INVENTORY_OPTIONS, fleet_options, survey, wants_fleet


@command(
    "status", *TARGET_OPTIONS, *INVENTORY_OPTIONS,
    click.option("--all", "show_all", is_flag=True, help="Also list fixes that are not applied (with --inventory: also the "
                 "columns of dead and superseded fixes no host carries)."),
    click.option("--exit-code", is_flag=True,
                 help=f"Exit {EXIT_CHECK_FAILED} when a fix has drifted, is lost, partly present or "
                      "outdated (like git diff --exit-code)."),
    click.option("--running", is_flag=True,
                 help="With --exit-code, also fail on a process running code older than the fixes "
                      "(restart pending), a stale .pyc, or a /proc that cannot be read."),
)
def status(state: State, show_all: bool, exit_code: bool, running: bool, as_json: bool,
           **where: Any) -> int:
    """Show which fixes are applied on the target, at which version, and any drift.

    With --inventory, a host x fix matrix of the fleet."""
    fleet = fleet_options(where, rollout_options=False)
    if wants_fleet(fleet, where):
        return survey(state, "status", [], fleet, as_json=as_json, lock_timeout=where["lock_timeout"],
                      exit_code=exit_code, running_gate=running, show_all=show_all)
    result = run_op(state, where, "reading", as_json, api.status)
    render.emit(as_json, result.to_json() if as_json else None,
                lambda out: render_status.render_status(out, result, verbose=show_all,
                                                        unread=show_all or running))
    render.broken_note(result.broken, as_json)
    unhealthy = any(s.state in UNHEALTHY for s in result.status) or bool(result.broken)
    return EXIT_CHECK_FAILED if exit_code and (unhealthy or running and runs_old_code(result)) else 0


def runs_old_code(result: Any) -> bool:
    """``status --exit-code --running``: a restart pending, a stale .pyc, or no way to tell."""
    run = result.running
    return run is None or not run.available or bool(run.pending or run.stale_pyc)


COMMANDS = [status]
