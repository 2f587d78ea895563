"""`patchkit rebase`: move fixes onto a newer SGLang release, like git rebase (docs/rebase.md)."""

from __future__ import annotations

import contextlib
import shlex

import click

from .. import rebase as rebase_lib
from ..errors import EXIT_CONFLICT, UsageError
from . import render
from .common import State, command
from .render_history import rebase_progress, render_rebase, render_rebase_in_progress


@command(
    "rebase",
    click.argument("fixes", nargs=-1),
    click.option("--all", "all_fixes", is_flag=True, help="Rebase every active fix of the catalog "
                 "(a fix named as an argument is rebased whatever its status)."),
    click.option("--include-inactive", is_flag=True, help="With --all, dead and superseded fixes "
                 "too (a fork that has them committed needs them on the new release)."),
    click.option("--onto", metavar="REF", help="The release to rebase onto, e.g. --onto 0.5.23 "
                 "(no default), or with --repo a tag or commit of that SGLang clone."),
    click.option("--repo", metavar="PATH", help="An SGLang git clone to take the upstream from "
                 "(fix bases: its v<base_release> tags, or --base)."),
    click.option("--base", metavar="REF", help="The commit every fix was written against "
                 "(default: tag v<base_release> of each fix)."),
    click.option("--drop-old", is_flag=True, help="Keep no variant for the old releases: the "
                 "rebased series serves only --onto (retire the old releases)."),
    click.option("--continue", "cont", is_flag=True, help="Go on after resolving a conflict in the worktree."),
    click.option("--skip", is_flag=True, help="Leave the stopped fix as it was and go on."),
    click.option("--abort", is_flag=True, help="Stop and put the catalog back as it was."),
    click.option("--dry-run", "-n", "dry_run", is_flag=True, help="Classify every fix and say "
                 "what the rebase would do, without stopping; write nothing (as any run onto a "
                 "commit that is not a release)."),
)
def rebase(state: State, fixes: tuple[str, ...], all_fixes: bool, include_inactive: bool,
           onto: str | None, repo: str | None, base: str | None, drop_old: bool, cont: bool, skip: bool, abort: bool,
           dry_run: bool, as_json: bool) -> int:
    """Rebase FIXES (or --all) onto a release; classify every patch; stop at a conflict.

    Bare, while a rebase is stopped: where it stopped and what to do next."""
    catalog = state.catalog()
    cmd = "patchkit rebase" if state.catalog_dir is None else \
        f"patchkit --catalog {shlex.quote(state.catalog_dir)} rebase"  # what to run next
    modes = [m for m, on in (("--continue", cont), ("--skip", skip), ("--abort", abort)) if on]
    starting = onto or fixes or all_fixes or repo or base or include_inactive or dry_run or drop_old
    if len(modes) > 1 or (modes and starting):
        raise UsageError(f"{' and '.join(modes)} take no other arguments; pass one of them alone")
    if not modes and not starting:
        current = rebase_lib.current(catalog)
        if current is not None:  # like `git status` during a rebase: where, and what next
            render.emit(as_json, {**current.to_json(), "in_progress": True},
                        lambda out: render_rebase_in_progress(out, current, cmd))
            click.get_current_context().exit(EXIT_CONFLICT)
    if abort:
        restored = rebase_lib.abort(catalog)
        said = "rebase aborted; catalog restored" + (f" ({', '.join(restored)})" if restored else "")
        return render.emit(as_json, {"aborted": True, "restored": restored},
                           lambda out: render.line(out, [(said, "")]))
    if not modes:
        if not onto:
            raise UsageError("name the release to rebase onto: patchkit rebase --all --onto 0.5.23")
        if not fixes and not all_fixes:
            raise UsageError("name the fixes to rebase, or pass --all")
        if fixes and all_fixes:
            raise UsageError(f"--all rebases every active fix, and {', '.join(fixes)} names "
                             "some: give the fixes or --all, not both", option="--all")

    with contextlib.nullcontext() if as_json else rebase_progress(render.stderr()) as progress:
        if cont:
            report = rebase_lib.continue_(catalog, progress=progress)
        elif skip:
            report = rebase_lib.skip(catalog, progress=progress)
        else:
            report = rebase_lib.start(catalog, onto or "", list(fixes) or None, repo=repo, base=base,
                                      include_inactive=include_inactive, progress=progress, dry_run=dry_run,
                                      drop_old=drop_old)
    render.emit(as_json, report.to_json(), lambda out: render_rebase(out, report, cmd))
    if not report.done:  # a conflict waits for the user: the conflict exit code (docs/cli.md)
        click.get_current_context().exit(EXIT_CONFLICT)
    return 0


COMMANDS = [rebase]
