"""`patchkit log`: the lineage of the catalog's fixes, as a user reviews it."""

from __future__ import annotations

from typing import Any

import click

from .. import api
from ..catalog import lineage
from . import render
from .render_history import render_log
from .common import TARGET_OPTIONS, State, command
from .fleet import INVENTORY_OPTIONS, fleet_lineage, wants_fleet


@command("log", click.argument("fix", required=False), *TARGET_OPTIONS, *INVENTORY_OPTIONS,
         click.option("--no-history", is_flag=True,
                      help="Leave out the catalog's git history (the commits of each version)."))
def log(state: State, fix: str | None, target: str | None, roots: tuple[str, ...],
        python: str | None, lock_timeout: float, no_history: bool, as_json: bool,
        **fleet: Any) -> int:
    """Show the fixes' history: versions, rebases, links, dead fixes and what replaced them.

    With FIX, only that fix and the fixes linked to it; with --target, which version is
    applied there and since when; with --inventory, which hosts run each version."""
    if wants_fleet(fleet, {"target": target, "roots": roots, "python": python}):
        return fleet_lineage(state, fix, fleet, as_json=as_json, lock_timeout=lock_timeout)
    catalog = state.catalog()
    status = None
    if target is not None or roots or _implied_target(state):
        tgt = state.target(target, roots, python)
        with render.busy(f"reading {tgt.description}", quiet=as_json):
            status = api.status(catalog, tgt, lock_timeout=lock_timeout)
    result = lineage.build(catalog, target_status=status, fix=fix, history=not no_history)
    render.emit(as_json, result.to_json(), lambda out: render_log(out, result))
    render.broken_note(result.broken, as_json)  # exit 0 as list and status: the rows say it
    return 0


def _implied_target(state: State) -> bool:
    """Whether `status` would find a target without --target: the config's default_target or
    an SGLang checkout around the working directory (docs/cli.md, Finding the target)."""
    import os

    from ..targets import find_enclosing_sglang

    cfg = state.config()
    return bool(cfg is not None and getattr(cfg, "default_target", None)) \
        or find_enclosing_sglang(os.getcwd()) is not None


COMMANDS = [log]
