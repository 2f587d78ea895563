"""`patchkit sync`: converge a target (or every host of an inventory) to every active fix for
the release it runs (docs/cli.md, "sync")."""

from __future__ import annotations

from typing import Any

import click

from .. import api
from . import render
from .common import FORCE_UPGRADE, TARGET_OPTIONS, State, command, write_options
from .fleet import ROLLOUT_OPTIONS, rollout, wants_fleet
from .ops import emit_result, fleet_options, run_op


@command(
    "sync", *TARGET_OPTIONS, *ROLLOUT_OPTIONS,
    click.option("--dry-run", "-n", is_flag=True,
                 help="Say what sync would apply, upgrade, re-apply or drop; write nothing."),
    write_options()[1], FORCE_UPGRADE,
)
def sync(state: State, dry_run: bool, no_git: bool, force: bool, as_json: bool,
         **where: Any) -> int:
    """Converge the target to every active fix for the release it runs, in one transaction.

    Each fix gets its variant for the target's release: missing ones are applied, an older
    version is upgraded, one lost to an SGLang upgrade is applied again; fixes upstream in
    that release are left out (and their lost records dropped). With --inventory, every host
    converges to its own release in the waves of `apply`."""
    fleet = fleet_options(where)
    if wants_fleet(fleet, where):
        names = api.sync_names(state.catalog(), ["sglang"])
        return rollout(state, "apply", names, fleet, dry_run=dry_run, as_json=as_json,
                       git=not no_git, force=force, sync=True, lock_timeout=where["lock_timeout"])
    result = run_op(state, where, "checking what to sync on" if dry_run else "syncing", as_json,
                  api.sync, dry_run=dry_run, git=not no_git, force=force)
    if not result.fixes and not as_json:
        render.line(render.stdout(), [("nothing to sync: the catalog has no active fix for "
                                       "this target's roots", "")])
        return 0
    return emit_result(result, as_json, command="sync")


COMMANDS = [sync]
