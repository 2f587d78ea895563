"""`patchkit apply`: plan, check, write, verify, or change nothing.

:func:`run` is the command; the click command that parses for it is built on first use
(``COMMANDS``), so the fast path of :mod:`patchkit.cli.main` can call :func:`run` without
importing click. :data:`FAST_OPTIONS` must say what the click options say (tests/test_startup.py).
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
    "--diff": ("show_diff", "flag", None),
    "--verbose": ("verbose", "flag", False),
    "-v": ("verbose", "flag", False),
    "--with-deps": ("with_deps", "flag", False),
    "--allow-inactive": ("allow_inactive", "flag", False),
    "--commit": ("commit", "flag", False),
}


def run(
    state: State,
    fixes: tuple[str, ...],
    target: str | None,
    roots: tuple[str, ...],
    python: str | None,
    lock_timeout: float,
    dry_run: bool,
    with_deps: bool,
    allow_inactive: bool,
    commit: bool,
    show_diff: bool | None,
    verbose: bool,
    as_json: bool,
) -> int:
    """Apply FIXES to the target, all or nothing."""
    names = require_names(fixes, "apply")
    tgt = state.target(target, roots, python)
    with render.busy(f"{'checking' if dry_run else 'applying'} {', '.join(names)} on {tgt.description}",
                     quiet=as_json):
        result = api.apply(
            state.catalog(),
            tgt,
            names,
            dry_run=dry_run,
            with_deps=with_deps,
            allow_inactive=allow_inactive,
            lock_timeout=lock_timeout,
            commit=commit,
        )
    return emit_result(result, as_json, show_diff=show_diff or None, verbose=verbose)


def _command() -> Any:
    import click

    from .common import json_option, pass_state, target_options

    @click.command("apply")
    @click.argument("fixes", nargs=-1)
    @target_options
    @click.option("--dry-run", "-n", is_flag=True,
                  help="Check and show where each hunk lands (and the diff, when few files change); write nothing.")
    @click.option("--diff", "show_diff", is_flag=True, default=None,
                  help="Show the full diff of every file (plain text unless stdout is a terminal).")
    @click.option("--verbose", "-v", is_flag=True, help="One row per file even when a fix changes many.")
    @click.option("--with-deps", is_flag=True, help="Also apply the fixes these depend on.")
    @click.option("--allow-inactive", is_flag=True, help="Allow applying a dead or superseded fix.")
    @click.option("--commit", "commit", is_flag=True,
                  help="Record each fix as a commit (Patchkit-Fix trailers) in the target's git checkout.")
    @json_option
    @pass_state
    def apply(state: State, **params: Any) -> int:
        """Apply FIXES to the target, all or nothing."""
        return run(state, **params)

    return apply


__getattr__ = lazy_command(__name__, "apply", _command)
