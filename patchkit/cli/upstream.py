"""`patchkit upstream`: SGLang releases from PyPI as a local tagged git history."""

from __future__ import annotations

from pathlib import Path

import click

from . import render
from ..upstream import UpstreamRepo
from .common import json_option


@click.group("upstream")
def upstream() -> None:
    """SGLang releases as a linear, tagged git history (docs/upstream.md)."""


@upstream.command("fetch")
@click.argument("versions", nargs=-1, required=True)
@json_option
def fetch(versions: tuple[str, ...], as_json: bool) -> int:
    """Download releases from PyPI and commit each as a tagged commit."""
    repo = UpstreamRepo()
    with render.stderr().status("fetching") as spinner:
        done = [repo.fetch(version, progress=lambda step: spinner.update(f"{version}: {step}"))
                for version in versions]
    data = [{"version": r.version, "tag": r.tag, "commit": r.commit, "date": r.date} for r in done]
    lines = "\n".join(f"{r.tag} {r.commit[:12]} {r.date}" for r in done)  # VERSIONS is required: never empty
    return render.emit(as_json, data, lambda out: out.print(lines))


@upstream.command("list")
@json_option
def list_releases(as_json: bool) -> int:
    """The releases in the upstream history, oldest first."""
    versions = UpstreamRepo().versions()
    return render.emit(as_json, versions, lambda out: out.print("\n".join(versions)) if versions else None)


@upstream.command("checkout")
@click.argument("version")
@click.argument("dest", type=click.Path(file_okay=False))
@json_option
def checkout(version: str, dest: str, as_json: bool) -> int:
    """Make a working tree of VERSION at DEST (fetching it first if needed)."""
    repo = UpstreamRepo()
    if version not in repo.versions():
        with render.busy(f"fetching {version}", quiet=as_json):
            repo.fetch(version)
    path = repo.checkout(version, Path(dest))
    if as_json:
        r = repo.release(version)
        render.print_json({"version": r.version, "tag": r.tag, "commit": r.commit, "date": r.date,
                           "path": str(path)})
    else:
        render.stdout().print(f"SGLang {version} checked out at {path}")
    return 0


COMMANDS = [upstream]
