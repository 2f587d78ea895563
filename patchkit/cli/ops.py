"""`patchkit apply`, `rollback`, `verify` and `undo`: the commands that change or check a
target (`status`, which only reads one, is `cli/status.py`)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable

import click

from .. import api, hooks
from ..errors import (ChangeNotUndone, ManifestError, PatchFormatError, Terminated, UnknownFixError,
                      UsageError)
from . import render, render_status
from .common import FORCE_UPGRADE, TARGET_OPTIONS, State, command, run_op, write_options
from .fleet import (INVENTORY_OPTIONS, ROLLOUT_OPTIONS, WAVE_OPTIONS, fleet_options, hook_commands,
                    rollout, survey, wants_fleet)


FIXES = click.argument("fixes", nargs=-1)


def _names(fixes: tuple[str, ...], what: str) -> list[str]:
    if not fixes:
        raise UsageError(f"name at least one fix to {what}; `patchkit list` shows them")
    return list(fixes)


def emit_result(result: Any, as_json: bool, after: Any = None, restarts: tuple[str, ...] = (),
                restarts_defined: bool = True, **options: Any) -> int:
    data = result.to_json() if as_json else None  # the JSON object only when it is printed
    if data is not None and (after is not None or restarts):
        data.update(restart=list(restarts), after=None if after is None else after.to_json())

    def draw(out: Any) -> None:
        render.render_result(out, result, **options)
        render_status.render_after(out, after, restarts, options.get("command") or result.op,
                                   restarts_defined)

    return render.emit(as_json, data, draw)


HOOK_OPTIONS = (
    click.option("--health-timeout", type=click.FloatRange(min=0, min_open=True),
                 default=hooks.DEFAULT_HEALTH_TIMEOUT, show_default=True, metavar="SECONDS",
                 help="How long --health-cmd may take: sglang:URL waits this long for a 200; a shell command is killed at it."),
    click.option("--restart", "use_restarts", is_flag=True,
                 help="Run the restarts the changed fixes name (patchkit.toml [restarts]) as the --after-cmd."),
)


def restarts_of(state: State, fixes: list[Any]) -> tuple[tuple[str, ...], str | None]:
    """The restarts ``fixes`` name (manifest ``restart``) and their commands joined with ``&&``
    (None when none is named); a name ``patchkit.toml`` does not define is refused."""
    names = tuple(dict.fromkeys(name for fix in fixes for name in fix.restart))
    if not names:
        return (), None
    config = state.config()
    defined = dict(config.restarts) if config is not None else {}
    missing = [n for n in names if n not in defined]
    if missing:
        where = (f"which {config.path} does not define: add" if config is not None else
                 "and no patchkit.toml was found (see patchkit init): write one with")
        raise UsageError(f"the fixes need the restart {', '.join(missing)}, {where} [restarts] "
                         f"{missing[0]} = \"COMMAND\" (e.g. systemctl restart sglang-prefill)",
                         option="--restart")
    return names, " && ".join(defined[n] for n in names)


def changed_held(state: State, result: Any) -> list[Any]:
    """The catalog's fixes among those the run changed."""
    return readable_of(state, hooks.changed_fixes(result))


def readable_of(state: State, names: Any) -> list[Any]:
    """The catalog's fixes of ``names`` whose manifests read, each read alone: a fix rolled back
    from its record (gone from the catalog, or its manifest broken) names no restart it can be
    held to."""
    catalog = state.catalog()
    out = []
    for name in names:
        try:
            out.append(catalog.get(name))
        except (UnknownFixError, ManifestError, PatchFormatError):
            continue
    return out


def restarts_said(state: State, fixes: list[Any]) -> tuple[tuple[str, ...], bool]:
    """The restarts ``fixes`` name, and whether patchkit.toml defines every one of them."""
    restarts = tuple(dict.fromkeys(r for fix in fixes for r in fix.restart))
    config = state.config() if restarts else None
    return restarts, config is not None and set(restarts) <= set(dict(config.restarts))


def hooked(state: State, fleet: dict[str, Any], names: list[str], use_restarts: bool,
            health_timeout: float) -> dict[str, Any]:
    """Take --after-cmd/--health-cmd out of ``fleet`` for one target (returned); for a fleet,
    turn ``sglang:URL`` and --restart into the shell commands its hosts run."""
    single = fleet.get("inventory") is None
    found = {"after_cmd": fleet.get("after_cmd"), "health_cmd": fleet.get("health_cmd")}
    if use_restarts:
        if found["after_cmd"]:
            raise UsageError("--restart runs the fixes' restarts as the after-command; give it or "
                             "--after-cmd, not both", option="--restart")
        found["after_cmd"] = restarts_of(state, readable_of(state, names))[1]
    checked = hooks.health_command(found["health_cmd"], timeout=health_timeout)  # bad input: before any write
    if single:
        fleet.update(after_cmd=None, health_cmd=None)
        state.hooks = tuple(flag for flag, key in (("--restart" if use_restarts else "--after-cmd",
                                                    "after_cmd"), ("--health-cmd", "health_cmd"))
                            if found[key])
        return found
    fleet.update(after_cmd=found["after_cmd"], health_cmd=checked,
                 health_limit=hooks.health_limit(found["health_cmd"], health_timeout))
    return {}


def holding(state: State, where: dict[str, Any], found: dict[str, Any], op: str,
            dry_run: bool, restarts: bool = False) -> Any:
    """The target's lock held from the change through its hooks and their undo (``api.held``),
    when hooks will run: no other run changes the target in between."""
    if dry_run or not (found.get("after_cmd") or found.get("health_cmd") or restarts):
        return contextlib.nullcontext(None)
    target = state.target(where["target"], where["roots"], where["python"])
    return api.held(target, lock_timeout=where["lock_timeout"], op=op)


def after_change(state: State, where: dict[str, Any], result: Any, found: dict[str, Any], undo: Any,
           health_timeout: float, as_json: bool, hold: Any = None, **emit: Any) -> int:
    """Run the hooks after a single target's change, then print; a failure prints the result
    and raises (the change undone)."""
    changed = hooks.changed_fixes(result)
    target = state.target(where["target"], where["roots"], where["python"])
    try:
        after = hooks.after_change(target, changed, after_cmd=found.get("after_cmd"),
                                   health_cmd=found.get("health_cmd"), undo=lambda: undo(target, changed),
                                   health_timeout=health_timeout, hold=hold, op=result.op)
    except (hooks.HookFailed, ChangeNotUndone, Terminated) as err:  # failed, or interrupted
        if not as_json:
            render.render_result(render.stdout(), result, **emit)
        if isinstance(err, hooks.HookFailed) and err.after is not None:  # undone: said so
            result = hooks.as_undone(result, err.after)
        err.result = result  # type: ignore[union-attr]
        raise
    restarts, defined = restarts_said(state, changed_held(state, result))
    return emit_result(result, as_json, after if after.ran else None, restarts,
                       restarts_defined=defined or not restarts, **emit)


def undo_of(state: State, where: dict[str, Any], result: Any) -> Callable[[Any, list[str]], Any]:
    """The undo of a run's change after a failed hook: the target put back exactly as before
    it by the undo point its transaction kept (``api.undo``); where it kept none (``--commit``),
    the opposite op over the changed fixes (a rollback reverts the commits)."""
    def undo(target: Any, changed: list[str]) -> Any:
        if result.txn:
            return api.undo(state.catalog(), target, result.txn, lock_timeout=where["lock_timeout"])
        if result.op == "rollback":  # a fix whose commits it reverted is committed again
            return api.apply(state.catalog(), target, changed, lock_timeout=where["lock_timeout"],
                             commit=any(f.commits for f in result.fixes))
        return api.rollback(state.catalog(), target, changed, lock_timeout=where["lock_timeout"])
    return undo


VERBOSE = click.option("--verbose", "-v", is_flag=True,
                       help="One row per file even when a fix changes many.")


def _one_target_only(verbose: bool) -> None:
    if verbose:
        raise UsageError("--verbose shows one target's files; with --inventory, --dry-run --json "
                         "gives each host's diff", option="--verbose")


@command(
    "apply", FIXES, *TARGET_OPTIONS, *ROLLOUT_OPTIONS, *HOOK_OPTIONS,
    click.option("--dry-run", "-n", is_flag=True,
                 help="Check and show where each hunk lands (and the diff, when few files change); write nothing."),
    click.option("--diff", "show_diff", is_flag=True, default=None,
                 help="Show the full diff of every file (plain text unless stdout is a terminal)."),
    VERBOSE,
    click.option("--with-deps", is_flag=True, help="Also apply the fixes these depend on."),
    click.option("--allow-inactive", is_flag=True, help="Allow applying a dead or superseded fix."),
    *write_options(), FORCE_UPGRADE,
)
def apply(state: State, fixes: tuple[str, ...], dry_run: bool, show_diff: bool | None,
          verbose: bool, with_deps: bool, allow_inactive: bool, commit: bool, no_git: bool,
          force: bool, use_restarts: bool, health_timeout: float, as_json: bool, **where: Any) -> int:
    """Apply FIXES to the target, all or nothing."""
    names = _names(fixes, "apply")
    fleet = fleet_options(where)
    found = hooked(state, fleet, names, use_restarts, health_timeout)
    if wants_fleet(fleet, where):
        if show_diff:
            raise UsageError("--diff shows one target's files; with --inventory, --dry-run --json "
                             "gives each host's diff", option="--diff")
        _one_target_only(verbose)
        return rollout(state, "apply", names, fleet, dry_run=dry_run, as_json=as_json,
                       with_deps=with_deps, allow_inactive=allow_inactive, commit=commit,
                       git=not no_git, force=force, lock_timeout=where["lock_timeout"])
    with holding(state, where, found, "apply", dry_run) as hold:
        result = run_op(state, where, f"{'checking' if dry_run else 'applying'} {', '.join(names)} on",
                        as_json, api.apply, names, dry_run=dry_run, with_deps=with_deps,
                        allow_inactive=allow_inactive, commit=commit, git=not no_git, force=force)
        return after_change(state, where, result, found, undo_of(state, where, result),
                            health_timeout, as_json, hold, show_diff=show_diff or None,
                            verbose=verbose)


@command(
    "rollback", FIXES, *TARGET_OPTIONS, *ROLLOUT_OPTIONS, *HOOK_OPTIONS,
    click.option("--dry-run", "-n", is_flag=True, help="Check and show what would be restored; write nothing."),
    click.option("--force", is_flag=True, help="Roll back even files changed since the fix was applied."),
    VERBOSE,
)
def rollback(state: State, fixes: tuple[str, ...], dry_run: bool, force: bool, verbose: bool,
             use_restarts: bool, health_timeout: float, as_json: bool, **where: Any) -> int:
    """Roll FIXES back on the target, all or nothing."""
    names = _names(fixes, "roll back")
    fleet = fleet_options(where)
    found = hooked(state, fleet, names, use_restarts, health_timeout)
    if wants_fleet(fleet, where):
        _one_target_only(verbose)
        return rollout(state, "rollback", names, fleet, dry_run=dry_run, as_json=as_json,
                       force=force, lock_timeout=where["lock_timeout"])
    with holding(state, where, found, "rollback", dry_run) as hold:
        result = run_op(state, where, f"rolling back {', '.join(names)} on", as_json, api.rollback,
                        names, dry_run=dry_run, force=force)
        if not as_json:
            render.warn(f"{b.name}: its manifest cannot be read ({b.detail}); rolled back from its "
                        "record, the backups the target keeps. The restart it needs is in its "
                        "manifest: restart the server yourself" for b in result.broken)
        return after_change(state, where, result, found, undo_of(state, where, result),
                            health_timeout, as_json, hold, verbose=verbose)


@command(
    "undo", *TARGET_OPTIONS, *WAVE_OPTIONS, *hook_commands(hidden=True),
    click.option("--dry-run", "-n", is_flag=True, help="Check and say what would be put back; write nothing."),
    VERBOSE,
)
def undo(state: State, dry_run: bool, verbose: bool, as_json: bool, **where: Any) -> int:
    """Put the target back exactly as it was before its last apply, sync or rollback.

    Every file, every record (an upgraded fix's old version, a lost fix's record, a rolled-back
    fix's own version) and the backups, in one transaction. Only the last change can be
    undone, once (a change with git commits, apply --commit, keeps no undo point: roll back or
    apply instead); refused, writing nothing, when a file it wrote has changed since. What a
    failed --health-cmd runs. With --inventory, every host's own last change, preflighted on
    every host before any is written, then in waves; it runs no hooks."""
    fleet = fleet_options(where)
    hooks.refuse_hooks_on_undo(after_cmd=fleet["after_cmd"], health_cmd=fleet["health_cmd"])
    if wants_fleet(fleet, where):
        _one_target_only(verbose)
        return rollout(state, "undo", [], fleet, dry_run=dry_run, as_json=as_json,
                       lock_timeout=where["lock_timeout"])
    result = run_op(state, where, "checking the undo on" if dry_run else "undoing the last change on",
                    as_json, api.undo, None, dry_run=dry_run)
    # the server runs the undone code until restarted: the restarts its fixes name, said
    restarts, defined = restarts_said(state, changed_held(state, result))
    return emit_result(result, as_json, None, restarts, restarts_defined=defined, verbose=verbose)


@command("verify", FIXES, *TARGET_OPTIONS, *INVENTORY_OPTIONS)
def verify(state: State, fixes: tuple[str, ...], as_json: bool, **where: Any) -> int:
    """Run the verification checks of FIXES (default: every fix applied there) on the target;
    writes nothing."""
    fleet = fleet_options(where, rollout_options=False)
    if wants_fleet(fleet, where):  # no FIX: every host verifies what it has applied
        return survey(state, "verify", list(fixes), fleet, as_json=as_json,
                      lock_timeout=where["lock_timeout"])
    result = run_op(state, where, f"verifying {', '.join(fixes) or 'the applied fixes'} on", as_json,
                  api.verify, list(fixes))
    if not fixes and not result.fixes and not as_json:
        sys.stderr.write(f"no fix applied on {result.target}: nothing to verify\n")
    return emit_result(result, as_json)


COMMANDS = [apply, rollback, verify, undo]
