"""`patchkit list` and `patchkit show`: read the catalog."""

from __future__ import annotations

import click

from . import render
from ..catalog.model import unfinished
from .common import State, command


@command("list", click.option("--all", "show_all", is_flag=True,
                              help="Include dead, superseded and upstreamed fixes."))
def list_fixes(state: State, as_json: bool, show_all: bool) -> int:
    """List the fixes of the catalog (a manifest that cannot be read: an error row)."""
    readable, broken = state.catalog().readable()
    fixes = [f for f in readable if show_all or f.status == "active"]
    data = [{"name": f.name, "version": f.version, "status": f.status, "title": f.title,
             "base_release": f.upstream.base_release, "serves": f.serves(),
             "depends_on": list(f.depends_on),
             "warnings": unfinished(f)} for f in fixes]
    data += [b.to_json() for b in broken]
    data.sort(key=lambda entry: str(entry["name"]))  # one entry a fix, by name, as the rows are
    render.emit(as_json, data, lambda out: render.render_fix_list(out, fixes, broken))
    if not as_json:
        render.warn(w for f in fixes for w in unfinished(f))
    render.broken_note(broken, as_json)
    return 0


@command("show", click.argument("fix"))
def show(state: State, fix: str, as_json: bool) -> int:
    """Show a fix: why it exists, what it touches, how it is checked."""
    from ..catalog.series import parse_patch  # the patch reader: show alone parses a series

    catalog = state.catalog()
    f = catalog.get(fix)
    catalog.dependency_order([fix], with_deps=True)  # a cycle or a broken dependency: list's error
    files = {p.file: sorted({fr["path"] for fr in parse_patch(p.path, p.root)}) for p in f.patches}
    revert = None if f.revert is None else f.revert.describe()
    return render.emit(as_json, f.to_json() | {"files": files, "serves": f.serves(),
                                               "git_revert": revert},
                       lambda out: render.render_fix(out, f, files))


COMMANDS = [list_fixes, show]
