"""`patchkit upstream`: SGLang releases from PyPI as a local tagged git history."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from . import render
from ..errors import EXIT_CHECK_FAILED, EXIT_CONFLICT
from ..upstream import UpstreamRepo, checkout_dest
from .common import RELEASE, State, json_option, pass_state

if TYPE_CHECKING:  # the check pulls in the catalog and the rebase: loaded when it runs
    from ..rebase.contains import Verdict


@click.group("upstream")
def upstream() -> None:
    """SGLang releases as a linear, tagged git history (docs/upstream.md)."""


@upstream.command("fetch")
@click.argument("versions", nargs=-1, type=RELEASE)
@click.option("--latest", is_flag=True,
              help="Fetch the newest release on the package registry too (a release watch job).")
@json_option
def fetch(versions: tuple[str, ...], latest: bool, as_json: bool) -> int:
    """Download releases from PyPI and commit each as a tagged commit."""
    from ..errors import UsageError
    from ..upstream import latest_release

    if not versions and not latest:
        raise UsageError("name the releases to fetch (patchkit upstream fetch 0.5.23), or "
                         "pass --latest for the newest one on the package registry")
    repo = UpstreamRepo()
    before = repo.release_commits()
    with render.busy("fetching", quiet=as_json) as spinner:
        if latest:
            spinner.update("asking the package registry for the latest release")
            newest = latest_release()
            versions = (*versions, newest) if newest not in versions else versions
        done = repo.fetch_all(versions, progress=spinner.update, named=True)
    # an older release goes in under the newer ones: their commits are new (checkouts made
    # earlier sit on the old ones), said, never silent
    after = repo.release_commits()
    rebuilt = [(repo.release(v), old) for v, old in before.items()
               if v not in versions and after.get(v) != old]
    data = [{"version": r.version, "tag": r.tag, "commit": r.commit, "date": r.date} for r in done]
    data += [{"version": r.version, "tag": r.tag, "commit": r.commit, "date": r.date,
              "rebuilt_from": old} for r, old in rebuilt]
    lines = "\n".join([f"{r.tag} {r.commit[:12]} {r.date}" for r in done]  # never empty: asked
                      + [f"{r.tag} {r.commit[:12]} {r.date} (rebuilt, was {old[:12]}: an older "
                         "release went in under it)" for r, old in rebuilt])
    return render.emit(as_json, data, lambda out: out.print(lines))


@upstream.command("list")
@json_option
def list_releases(as_json: bool) -> int:
    """The releases in the upstream history, oldest first."""
    versions = UpstreamRepo().versions()
    return render.emit(as_json, versions, lambda out: out.print("\n".join(versions)) if versions else None)


@upstream.command("checkout")
@click.argument("version", type=RELEASE)
@click.argument("dest", type=click.Path(file_okay=False))
@json_option
def checkout(version: str, dest: str, as_json: bool) -> int:
    """Make a working tree of VERSION at DEST (fetching it first if needed)."""
    repo = UpstreamRepo()
    where = checkout_dest(version, dest)  # a directory that cannot take it is refused before a fetch
    click.get_current_context().ensure_object(State).leaves = (
        f"nothing was made at {where} (a checkout is put in place whole) and the release store "
        "takes a release whole or not at all; run the command again")
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


@upstream.command("check")
@click.argument("fixes", nargs=-1)
@click.option("--release", "-r", required=True, metavar="VERSION", type=RELEASE,
              help="The release to look in (from the release store: `patchkit upstream fetch`).")
@click.option("--mark", is_flag=True, help="Record each contained active fix as status "
              "\"upstreamed\" with [upstream] applied = VERSION, as a new version, committed.")
@click.option("--dry-run", "-n", "dry_run", is_flag=True, help="With --mark: say what would be "
              "recorded; write nothing.")
@click.option("--no-commit", is_flag=True, help="With --mark: write the manifests, commit nothing.")
@click.option("--exit-code", is_flag=True, help="Exit 1 when any fix is contained (for CI).")
@click.option("--repo", metavar="PATH", help="An SGLang git clone to look in (its v<version> "
              "tags; the recommended set-up: its history tells reverts apart).")
@json_option
@pass_state
def check(state: State, fixes: tuple[str, ...], release: str, mark: bool, dry_run: bool,
          no_commit: bool, exit_code: bool, repo: str | None, as_json: bool) -> int:
    """Does release VERSION already contain each of FIXES (default: every fix; with --mark,
    every fix of your catalog)? By patch-id, reverse-apply, or the fix's verification greps
    (docs/upstream.md, "Is a fix upstream?")."""
    from ..rebase import contains as lib
    from ..errors import UsageError

    if (dry_run or no_commit) and not mark:
        raise UsageError("--dry-run and --no-commit go with --mark (they say how to record)")
    catalog = state.catalog()
    if mark:
        catalog.check_writable("mark fixes upstreamed")
        if fixes:
            catalog.check_own(fixes, "mark as upstreamed")
    names = list(fixes) or (catalog.own_names() if mark else catalog.names())
    upstream_repo = None
    if repo is not None:
        from .. import gitrepo

        if not gitrepo.is_git_repo(Path(repo).expanduser()):
            raise UsageError(f"--repo {repo} is not a git repository: name an SGLang clone",
                             path=repo)
        upstream_repo = UpstreamRepo(repo)
    with render.busy(f"checking {len(names)} fix(es) against SGLang {release}",
                     quiet=as_json) as spinner:
        verdicts = lib.check(catalog, names, release, upstream=upstream_repo,
                             progress=spinner.update)
    marked = lib.mark(catalog, verdicts, commit=not no_commit, dry_run=dry_run) if mark else []
    data = {"release": release, "fixes": [v.to_json() for v in verdicts],
            **({"marked": [m.to_json() for m in marked], "dry_run": dry_run} if mark else {})}
    width = max((len(v.fix) for v in verdicts), default=0)

    def draw(out: object) -> None:
        if isinstance(out, render.PlainConsole):  # piped: FIX<TAB>VERDICT<TAB>EVIDENCE
            render.write_table(out, [[v.fix, *(text.strip() for text, _style in _verdict(v))]
                                     for v in verdicts])
        else:
            for v in verdicts:
                render.line(out, [(v.fix.ljust(width) + "  ", "bold"), *_verdict(v)])
        for m in marked:
            what = (f"marked {m.fix} v{m.version}: status upstreamed, applied {release}"
                    + (f" (commit {m.commit[:12]})" if m.commit else "")) if m.marked else \
                f"{m.fix}: {m.detail}"
            render.line(out, [(what, "")])
        if marked and not dry_run and not no_commit and any(m.marked for m in marked):
            from ..catalog.writer import not_committed

            if why := not_committed(catalog.root):
                render.line(out, [(why, "dim")])
        if mark and dry_run:
            render.line(out, [("dry run: nothing was written", "dim")])

    render.emit(as_json, data, draw)
    if any(v.verdict in (lib.AMBIGUOUS, lib.REMOVED) for v in verdicts):
        click.get_current_context().exit(EXIT_CONFLICT)  # a human decides (docs/upstream.md)
    if exit_code and any(v.contained for v in verdicts):
        click.get_current_context().exit(EXIT_CHECK_FAILED)
    return 0


def _verdict(v: Verdict) -> list[tuple[str, str]]:
    """The segments saying a fix's verdict: how it was decided, then the evidence."""
    if v.verdict == "contained":
        how = {"patch-id": f"patch-id {', '.join(c[:12] for c in v.commits)}",
               "reverse-apply": "reverse-apply", "post-image": "post-image", "merge": "merge",
               "verification": "verification greps"}[v.test]
        return [(f"contained by {how}", "green"), (f"  {v.detail}", "dim")]
    if v.verdict in ("ambiguous", "removed-upstream", "reverted-upstream"):
        label = {"ambiguous": "ambiguous: a human decides", "reverted-upstream": "reverted "
                 "upstream" + (f" in {v.commits[0][:12]}" if v.commits else ""),
                 "removed-upstream": "removed upstream: a human decides"}[v.verdict]
        return [(label, "yellow"), (f"  {v.detail}", "dim")]
    if v.verdict == "not-checked":
        return [("not checked", "yellow"), (f"  {v.detail}", "dim")]
    if v.verdict == "not-applicable":
        return [("not applicable", "yellow"), (f"  {v.detail}", "dim")]
    return [("not contained", ""), (f"  {v.detail}", "dim")]


COMMANDS = [upstream]
