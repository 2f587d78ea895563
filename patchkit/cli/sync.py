"""`patchkit sync`: converge a target (or every host of an inventory) to every active fix for
the release it runs (docs/cli.md, "sync")."""

from __future__ import annotations

from typing import Any

import click

from .. import api
from ..targets import parse_root_option
from . import render
from .common import FORCE_UPGRADE, TARGET_OPTIONS, State, command, write_options
from .fleet import ROLLOUT_OPTIONS, rollout, wants_fleet
from .ops import (HOOK_OPTIONS, after_change, changed_held, fleet_options, holding, hooked,
                  restarts_of, run_op, undo_of)


@command(
    "sync", *TARGET_OPTIONS, *ROLLOUT_OPTIONS, *HOOK_OPTIONS,
    click.option("--dry-run", "-n", is_flag=True,
                 help="Say what sync would apply, upgrade, re-apply or drop; write nothing."),
    write_options()[1], FORCE_UPGRADE,
)
def sync(state: State, dry_run: bool, no_git: bool, force: bool, use_restarts: bool,
         health_timeout: float, as_json: bool, **where: Any) -> int:
    """Converge the target to every active fix for the release it runs, in one transaction.

    Each fix gets its variant for the target's release: missing ones are applied, an older
    version is upgraded, one lost to an SGLang upgrade is applied again; fixes upstream in
    that release are left out (and their lost records dropped). With --inventory, every host
    converges to its own release in the waves of `apply`. As with `apply`, the hooks
    (--after-cmd, --health-cmd, --restart) run after the change, on one target or each host."""
    fleet = fleet_options(where)
    catalog = state.catalog()
    roots = ["sglang"] + ([] if fleet.get("inventory") else
                          [parse_root_option(r)[0] for r in where["roots"]])
    # a restart the fixes name that patchkit.toml lacks is refused before anything is written
    found = hooked(state, fleet, api.sync_names(catalog, roots), use_restarts, health_timeout)
    if wants_fleet(fleet, where):
        return rollout(state, "apply", api.sync_names(catalog, ["sglang"]), fleet,
                       dry_run=dry_run, as_json=as_json, git=not no_git, force=force, sync=True,
                       lock_timeout=where["lock_timeout"])
    with holding(state, where, found, "apply", dry_run, use_restarts) as hold:
        result = run_op(state, where, "checking what to sync on" if dry_run else "syncing", as_json,
                        api.sync, dry_run=dry_run, git=not no_git, force=force)
        if use_restarts:  # the restarts of the fixes this sync changed, not of every fix it holds
            found["after_cmd"] = restarts_of(state, changed_held(state, result))[1]
        if not result.fixes and not as_json:
            render.line(render.stdout(), [("nothing to sync: the catalog has no active fix for "
                                           "this target's roots", "")])
            return 0
        return after_change(state, where, result, found, undo_of(state, where, result),
                            health_timeout, as_json, hold, command="sync")


COMMANDS = [sync]
