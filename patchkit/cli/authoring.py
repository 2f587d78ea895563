"""`patchkit init`, `patchkit new` and `patchkit refresh`: a catalog, and a checkout's changes
captured as a fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Tuple

import click

from .. import authoring
from ..capture import record_path
from ..catalog import writer
from ..catalog.model import unfinished
from . import render
from .common import State, command


def report_authoring(result: authoring.AuthoringResult, as_json: bool, verb: str,
                     warnings: list[str] | None = None, dry_note: bool = True) -> None:
    """One written fix; ``dry_note``: end a dry run's report with "nothing was written" (an
    import of several fixes says it once, after the last)."""
    warnings = warnings or []
    if as_json:
        render.print_json({
            "name": result.name,
            "version": result.version,
            "manifest": str(result.manifest),
            "patches": [str(p) for p in result.patches],
            "files": list(result.files),
            "base_release": result.base_release,
            "changed": result.changed,
            "dry_run": result.dry_run,
            "ignored": list(result.ignored),
            "applied": [{"path": path, "fix": fix} for path, fix in result.applied],
            "renamed": [{"from": old, "to": new} for old, new in result.renamed],
            "commit": result.commit,
            "recorded_version": result.recorded,
            "warnings": warnings,
        })
        return
    render.warn(warnings)
    say = progress_sayer()
    if not result.changed:
        say(f"{result.name} v{result.version} is unchanged: the series already matches the checkout")
    else:
        say(f"{'would be ' if result.dry_run else ''}{verb} {result.name} v{result.version} "
            f"(base {result.base_release})")
        for f in result.files:
            say(f"  {f}")
        say(f"  manifest: {result.manifest}")
        for p in result.patches:
            say(f"  series:   {p}")
        for old, new in result.renamed:
            say(f"  renamed:  {old} -> {new} (the title changed)")
        if result.commit:
            say(f"  committed {result.commit[:12]} in the catalog's git repository")
        elif not result.dry_run and (why := writer.not_committed(result.manifest.parent.parent)):
            say(f"  {why}")
        if result.dry_run and dry_note:
            say("dry run: nothing was written")
    if result.applied:
        say(f"left out {len(result.applied)} file(s) written by applied fixes (the checkout's "
            ".patchkit/state.json; --include-applied takes them):")
        for path, fix in result.applied:
            say(f"  {path} ({fix})")
    if result.ignored:
        say(f"ignored {len(result.ignored)} changed or untracked file(s) of the checkout, "
            "not part of the fix (name them as PATH arguments to take them):")
        for f in result.ignored:
            say(f"  {f}")


def progress_sayer() -> Callable[[str], None]:
    """A function writing one line of text to stdout (never read as rich markup)."""
    out = render.stdout()
    return lambda text: render.line(out, [(text, "")])


@command("init", click.argument("directory", default=".", type=click.Path(file_okay=False)),
         click.option("--no-git", is_flag=True, help="Do not make a git repository (versions then live nowhere)."))
def init(state: State, directory: str, no_git: bool, as_json: bool) -> int:
    """Make a new catalog in DIRECTORY (default: here): manifests/, patches/, patchkit.toml, git."""
    result = authoring.init_catalog(Path(directory), git=not no_git)
    if as_json:
        render.print_json({"root": str(result.root), "files": [str(f) for f in result.files],
                           "commit": result.commit,
                           "repository": None if result.repository is None else str(result.repository)})
        return 0
    say = progress_sayer()
    say(f"made a catalog in {result.root}")
    for f in result.files:
        say(f"  {f}")
    if result.commit and result.repository is not None:
        own = result.repository.resolve() == result.root.resolve()
        say(f"  committed {result.commit[:12]} to "
            + ("its new git repository" if own else
               f"the git repository it lies in, {result.repository}"))
    say("next: cd into it and capture a fix with `patchkit new NAME --from CHECKOUT` "
        "(docs/authoring.md)")
    return 0


def _capture(what: str, *options: Callable) -> Tuple[Callable, ...]:
    """The parameters of a command capturing a checkout's changes as FIX."""
    return (click.argument("fix"), click.argument("paths", nargs=-1),
            click.option("--from", "src", required=True, type=click.Path(file_okay=False),
                         help="The edited checkout."), *options,
            click.option("--no-commit", is_flag=True,
                         help=f"Do not commit {what} to the catalog's git repository."),
            click.option("--include-applied", is_flag=True,
                         help="Also take changed files that applied fixes wrote (left out by default: "
                              "the checkout's .patchkit/state.json names them)."),
            click.option("--target", "record", type=click.Path(file_okay=False), metavar="SGLANG",
                         help="When --from is another root (a serve checkout): the SGLang tree whose "
                              ".patchkit/ records the fixes applied to it, so what they wrote is left out."),
            click.option("--dry-run", "-n", is_flag=True, help="Say what would be written; write nothing."))


@command("new", *_capture(
    "the new fix",
    click.option("--commits", metavar="A..B", help="Capture the commits after A up to B, one patch each (not the uncommitted changes)."),
    click.option("--root", default="sglang", show_default=True, help="The target root the paths belong to."),
    click.option("--title", help="One-line title (the commit subject). Default: the fix's name, or the first commit's subject."),
    click.option("--rationale", default="", help="Why the fix exists (else a placeholder to edit)."),
    click.option("--base-release", help="Release the change is written against (default: read from the tree)."),
    click.option("--author", help="Who wrote it, \"Name <email>\" (default: the first commit's author, else the catalog repository's git user)."),
))
def new(state: State, fix: str, paths: tuple[str, ...], src: str, no_commit: bool, dry_run: bool,
        as_json: bool, **options: Any) -> int:
    """Capture the uncommitted changes of a checkout (or of PATHS in it, or the commits of a
    range) as a new FIX."""
    catalog = state.catalog()
    record = options.pop("record")
    result = authoring.new_fix(catalog, fix, Path(src), paths=paths, commit=not no_commit,
                               dry_run=dry_run, record=record and Path(record), **options)
    warnings = (_unrecorded_root(src, [options["root"]], record, options["include_applied"])
                + _capture_warnings(result, fix))
    report_authoring(result, as_json, "created",
                     warnings + ([] if dry_run else unfinished(catalog.get(fix))))
    return 0


def _unrecorded_root(src: str, roots: list[str], record: str | None,
                     include_applied: bool) -> list[str]:
    """The warning of a capture from another root than sglang whose applied fixes could not be
    looked for: their record is the target's (its sglang tree's ``.patchkit/``)."""
    others = [r for r in roots if r != "sglang"]
    if not others or record or include_applied or record_path(src).exists():
        return []
    return [f"{src} is root {others[0]}: the record of fixes applied to it is kept in the "
            "target's SGLang tree (.patchkit/), so changes they wrote here were not looked for; "
            "pass --target SGLANG to leave them out, or check the patch"]


@command("refresh", *_capture(
    "the new version",
    click.option("--summary", help="Changelog line for the new version."),
    click.option("--squash", is_flag=True, help="Rewrite a multi-patch series as one patch."),
))
def refresh(state: State, fix: str, paths: tuple[str, ...], src: str, no_commit: bool,
            dry_run: bool, as_json: bool, **options: Any) -> int:
    """Rewrite FIX's series from the checkout's current state and bump its version; PATHS
    adds files new to the fix (an untracked file is taken only when named)."""
    catalog = state.catalog()
    record = options.pop("record")
    result = authoring.refresh_fix(catalog, fix, Path(src), paths=paths, commit=not no_commit,
                                   dry_run=dry_run, record=record and Path(record), **options)
    roots = list(dict.fromkeys(p.root for p in catalog.get(fix).patches))
    report_authoring(result, as_json, "refreshed",
                     _unrecorded_root(src, roots, record, options["include_applied"])
                     + _refresh_warnings(result, fix, src) + _capture_warnings(result, fix))
    if not as_json and result.recorded is not None and result.recorded != result.version:
        where = (f"--target {src}" if "sglang" in roots or not record
                 else f"--target {record} --root {roots[0]}={src}")
        if result.recorded_new:  # checked against HEAD by the upgrade: to be put back first
            new = " ".join(result.recorded_new)
            progress_sayer()(
                f"{fix} v{result.recorded} is applied in {src} (its record); v{result.version} "
                f"also changes {new}, which v{result.recorded} did not: put it back (git checkout "
                f"-- {new}, in {src}), then patchkit apply {fix} {where} upgrades it to "
                f"v{result.version}")
        else:
            progress_sayer()(
                f"{fix} v{result.recorded} is applied in {src} (its record), and its files are "
                f"v{result.version}'s: patchkit apply {fix} {where} records v{result.version} "
                "there, writing nothing")
    return 0


def _capture_warnings(result: authoring.AuthoringResult, fix: str) -> list[str]:
    """What a captured change does not apply to that its manifest says it does: the release's
    own file (captured from a fork whose commits after the release changed it), or the
    fixes it depends on (it took their lines in)."""
    return [f"{fix} v{result.version}'s change to {path} does not apply to {result.base_release}'s "
            f"own {path} (the checkout's tag {tag}): commits after {tag} changed that file, and "
            f"the change's context holds their lines, so on a clean {result.base_release} tree "
            f"patchkit apply refuses it (a conflict), though the manifest says it serves "
            f"{result.base_release}. " + (
                f"That is fix {' and '.join(by)}'s change, applied with --commit in the checkout: "
                f"add depends_on = {json.dumps(list(by))} to its manifest (apply then puts it "
                f"first), or write it on {tag} (patchkit upstream checkout {result.base_release} "
                "DIR)" if by else
                f"Write it on {tag} (patchkit upstream checkout {result.base_release} DIR), or "
                "make the fork's own change a fix and add it to depends_on")
            for path, tag, by in result.off_release] + [
        f"{fix} v{result.version}'s change to {path} does not apply on {dep}'s, which it depends "
        f"on: it holds {dep}'s own lines (captured against HEAD where {dep} is applied but not "
        f"committed), so wherever both are applied it conflicts. Apply {dep} with --commit in "
        f"the checkout (HEAD then holds its change), make the edit, and refresh {fix} again"
        for dep, path in result.against]


def _refresh_warnings(result: authoring.AuthoringResult, fix: str, src: str) -> list[str]:
    """What a refresh wrote that a reader of its series would not expect: a file's change
    written on top of other fixes (it applies only after them), a file the old version
    changed and the new one drops."""
    said = []
    for path, before in result.stacked:
        them = " and ".join(before)
        said.append(f"{fix} v{result.version}'s change to {path} is written on top of {them}, "
                    f"applied before it in {src}: its context holds their lines, so it applies "
                    f"only after {'it' if len(before) == 1 else 'them'}. Add depends_on = "
                    f"{json.dumps(list(before))} to its manifest, or refresh from a checkout "
                    f"where {fix} is applied alone")
    for other, version, path in result.breaks:
        said.append(f"{other} v{version} no longer applies on {fix} v{result.version}: its change "
                    f"to {path} applied on top of {fix}'s previous version, and its context is "
                    f"not in {fix} v{result.version}'s result (a sync upgrading {fix} under it is "
                    f"refused). Make {other}'s next version on it: patchkit refresh {other} --from "
                    f"a checkout where {fix} v{result.version} is applied; patchkit matrix shows "
                    f"every fix on every release")
    if result.kept_for:
        said.append(f"{fix} v{result.version} is known to apply to {result.base_release} only: "
                    f"v{result.kept_version} stays the variant for {', '.join(result.kept_for)}; "
                    f"patchkit rebase {fix} --onto RELEASE carries v{result.version} there")
    if result.dropped:
        where = ("" if result.recorded is not None else
                 f" ({fix} is not applied there: refresh from the checkout it is applied in)")
        said.append(f"{fix} v{result.version} drops {', '.join(result.dropped)}: "
                    f"{'it no longer differs' if len(result.dropped) == 1 else 'they no longer differ'}"
                    f" from HEAD in {src}{where}")
    return said


COMMANDS = [init, new, refresh]
