"""`patchkit new` and `patchkit refresh`: capture a checkout's changes as a fix."""

from __future__ import annotations

from pathlib import Path

import click

from .. import authoring, render
from .common import State, json_option, pass_state


def _report(result: authoring.AuthoringResult, as_json: bool, verb: str) -> None:
    data = {
        "name": result.name,
        "version": result.version,
        "manifest": str(result.manifest),
        "patches": [str(p) for p in result.patches],
        "files": list(result.files),
        "base_release": result.base_release,
        "changed": result.changed,
    }
    if as_json:
        render.print_json(data)
        return
    out = render.stdout()
    if not result.changed:
        out.print(f"{result.name} v{result.version} is unchanged: the series already matches the checkout")
        return
    out.print(f"{verb} [bold]{result.name}[/] v{result.version} (base {result.base_release})")
    for f in result.files:
        out.print(f"  {f}")
    out.print(f"  manifest: {result.manifest}")
    for p in result.patches:
        out.print(f"  series:   {p}")


@click.command("new")
@click.argument("fix")
@click.argument("paths", nargs=-1)
@click.option("--from", "src", required=True, type=click.Path(file_okay=False), help="The edited checkout.")
@click.option("--root", default="sglang", show_default=True, help="The target root the paths belong to.")
@click.option("--title", help="One-line title (the commit subject).")
@click.option("--rationale", default="", help="Why the fix exists (else a placeholder to edit).")
@click.option("--base-release", help="Release the change is written against (default: read from the tree).")
@json_option
@pass_state
def new(
    state: State,
    fix: str,
    paths: tuple[str, ...],
    src: str,
    root: str,
    title: str | None,
    rationale: str,
    base_release: str | None,
    as_json: bool,
) -> int:
    """Capture the uncommitted changes of a checkout (or of PATHS in it) as a new FIX."""
    result = authoring.new_fix(
        state.catalog(), fix, Path(src), root=root, paths=paths, title=title,
        rationale=rationale, base_release=base_release,
    )
    _report(result, as_json, "created")
    return 0


@click.command("refresh")
@click.argument("fix")
@click.argument("paths", nargs=-1)
@click.option("--from", "src", required=True, type=click.Path(file_okay=False), help="The edited checkout.")
@click.option("--summary", help="Changelog line for the new version.")
@click.option("--squash", is_flag=True, help="Rewrite a multi-patch series as one patch.")
@json_option
@pass_state
def refresh(
    state: State,
    fix: str,
    paths: tuple[str, ...],
    src: str,
    summary: str | None,
    squash: bool,
    as_json: bool,
) -> int:
    """Rewrite FIX's series from the checkout's current state and bump its version."""
    result = authoring.refresh_fix(
        state.catalog(), fix, Path(src), paths=paths, summary=summary, squash=squash
    )
    _report(result, as_json, "refreshed")
    return 0


COMMANDS = [new, refresh]
