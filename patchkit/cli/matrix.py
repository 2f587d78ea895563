"""`patchkit matrix`: the fixes x releases matrix, the release watch of a CI job."""

from __future__ import annotations

from typing import Any

import click

from .. import matrix as lib
from ..errors import EXIT_CHECK_FAILED, UsageError
from . import render
from .common import State, command

STYLE = {"variant": "green", "not-needed": "dim", "upstream": "magenta", "no variant": "yellow",
         "rebase needed": "yellow", "conflict": "bold red", "blocked": "bold red",
         "removed": "bold red"}


@command(
    "matrix",
    click.argument("fixes", nargs=-1),
    click.option("--releases", metavar="A..B|A,B", help="The releases: every one from A to B "
                 "(A and B fetched when missing), or a list (default: those the catalog's "
                 "variants serve)."),
    click.option("--markdown", is_flag=True, help="Print a Markdown table (a CI job summary)."),
    click.option("--exit-code", is_flag=True, help=f"Exit {EXIT_CHECK_FAILED} when a cell is a "
                 "conflict, blocked or removed upstream: a release the catalog cannot serve as is."),
)
def matrix(state: State, fixes: tuple[str, ...], releases: str | None, markdown: bool,
           exit_code: bool, as_json: bool) -> int:
    """Each active fix on each release: the variant serving it, or what serving it takes."""
    if markdown and as_json:
        raise UsageError("--markdown and --json are two outputs; pick one")
    catalog = state.catalog()
    from ..upstream import UpstreamRepo

    wanted = lib.parse_releases(releases, lib.known_releases(catalog), UpstreamRepo().versions())
    if not wanted:
        raise UsageError("no release to check: the catalog's fixes name none; pass --releases A..B")

    with render.busy(f"checking {len(wanted)} release(s)", quiet=as_json) as progress:
        result = lib.matrix(catalog, wanted, list(fixes), progress=progress.update)
    if markdown:
        click.echo(result.markdown(), nl=False)
    else:
        render.emit(as_json, result.to_json(), lambda out: _draw(out, result))
    return EXIT_CHECK_FAILED if exit_code and result.failing else 0


def _draw(out: Any, result: lib.Matrix) -> None:
    """Terminal: a fix x release table, then why each failing cell fails. Plain (a pipe, a
    file): one line per fix and release, ``FIX RELEASE CELL DETAIL`` tab-separated, as every
    command writes them (docs/cli.md, Piped output)."""
    if isinstance(out, render.PlainConsole):
        render.write_table(out, [[f, r, result.cells[f][r].label, result.cells[f][r].detail]
                                 for f in result.fixes for r in result.releases])
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None)
    table.add_column("fix", style="bold", overflow="fold")
    for r in result.releases:
        table.add_column(r, overflow="fold")
    for f in result.fixes:
        table.add_row(f, *(Text(result.cells[f][r].label, style=STYLE.get(result.cells[f][r].kind, ""))
                           for r in result.releases))
    out.print(table)
    for f, r in result.failing:
        render.line(out, [(f"{f} on {r}: ", "bold red"), (result.cells[f][r].detail, "")],
                    soft_wrap=True)


COMMANDS = [matrix]
