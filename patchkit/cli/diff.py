"""`patchkit diff FIX --versions A B`: how a fix's series changed between two versions."""

from __future__ import annotations

import click

from .. import rebase
from . import render
from .common import State, command
from .render_history import render_range_diff


@command("diff", click.argument("fix"),
         click.option("--versions", nargs=2, type=int, required=True, metavar="OLD NEW",
                      help="The two versions to compare, e.g. --versions 1 2."))
def diff(state: State, fix: str, versions: tuple[int, int], as_json: bool) -> int:
    """Show a range-diff between two versions of FIX's series (old ones from catalog git)."""
    text = rebase.range_diff(state.catalog(), fix, versions[0], versions[1])
    data = {"fix": fix, "old": versions[0], "new": versions[1], "diff": text}
    return render.emit(as_json, data, lambda out: render_range_diff(out, text))


COMMANDS = [diff]
