"""`patchkit import` and `patchkit export`: fixes from and to git format-patch/mbox, quilt
series and DEP-3 headed patches (docs/interop.md)."""

from __future__ import annotations

from pathlib import Path

import click

from ..catalog import Catalog
from ..errors import PatchkitError, UsageError
from ..interop import exporter, importer
from . import render
from .authoring import progress_sayer, report_authoring
from .common import RELEASE, State, command


@command(
    "import",
    click.option("--from", "src", type=click.Path(file_okay=False), help="A git checkout holding the commits (with --commits)."),
    click.option("--commits", metavar="A..B", help="With --from: the commits after A up to B, one patch each (as `new --commits`)."),
    click.option("--mbox", "mbox_path", type=click.Path(exists=True), help="An mbox file or a git format-patch directory; more mails may follow as arguments (--mbox DIR/*)."),
    click.option("--split", is_flag=True, help="With --mbox: one fix per patch (else one fix of all)."),
    click.option("--quilt", "quilt_dir", type=click.Path(exists=True, file_okay=False), help="A quilt patches/ directory with its series file."),
    click.option("-p", "strip", type=click.IntRange(0, 20), default=1, show_default=True, help="With --quilt: the strip level of the patches' file names (a series line's -pN wins)."),
    click.option("--one", is_flag=True, help="With --quilt: one fix of the whole series (else one per patch)."),
    click.option("--name", help="The fix's name (several fixes: NAME-1, NAME-2, ...). Default: the Patchkit-Fix header, else the title."),
    click.option("--release", type=RELEASE, help="The SGLang release the patches are written against (default: read from --from/--target)."),
    click.option("--target", "tree", type=click.Path(exists=True, file_okay=False), help="The release tree the patches apply to, to read the release from."),
    click.option("--root", help="The target root the patches' paths belong to (default: a Patchkit-Root header's, else sglang)."),
    click.option("--no-commit", is_flag=True, help="Do not commit the fixes to the catalog's git repository."),
    click.option("--replace", is_flag=True, help="Replace a fix of that name in the catalog (or shadow a shipped one); else an existing name is refused."),
    click.option("--dry-run", "-n", is_flag=True, help="Say what would be written; write nothing."),
    click.argument("more_mails", nargs=-1, type=click.Path(exists=True), metavar="[MAIL]..."),
)
def import_(state: State, src: str | None, commits: str | None, mbox_path: str | None,
            split: bool, quilt_dir: str | None, strip: int, one: bool, name: str | None,
            release: str | None, tree: str | None, root: str | None, no_commit: bool,
            replace: bool, dry_run: bool, as_json: bool, more_mails: tuple[str, ...]) -> int:
    """Make fixes from patches in other formats: a git range, an mbox or format-patch
    directory, or a quilt series; DEP-3 headers become manifest fields."""
    if more_mails and not mbox_path:  # `--mbox DIR/*`, as git am takes the shell's list
        raise UsageError(f"{more_mails[0]}: more mails go after --mbox (--mbox 0001.patch "
                         "0002.patch ..., or --mbox DIR)", option="--mbox")
    given = [o for o, v in (("--from/--commits", src or commits), ("--mbox", mbox_path),
                            ("--quilt", quilt_dir)) if v]
    if len(given) != 1:
        raise UsageError("give exactly one source: --from DIR --commits A..B, --mbox PATH or "
                         f"--quilt DIR (got {', '.join(given) or 'none'})", option="--from")
    if (src is None) != (commits is None):
        raise UsageError("--from and --commits go together: --from DIR --commits A..B",
                         option="--commits")
    if split and not mbox_path or one and not quilt_dir:
        raise UsageError("--split goes with --mbox, --one with --quilt", option="--split")
    catalog = state.catalog()
    if src is not None:
        patches, at_a = importer.from_commits(Path(src), commits or "")
        release = release or at_a
        how, whole = f"the commits {commits} of a checkout", True
    elif mbox_path is not None:
        patches = [p for each in (mbox_path, *more_mails) for p in importer.from_mbox(Path(each))]
        how, whole = "an mbox", not split
    else:
        patches = importer.from_quilt(Path(quilt_dir or ""), strip)
        how, whole = "a quilt series", one
    planned = importer.plan(patches, one=whole, name=name)
    taken = importer.existing(catalog, planned)
    dropped, checks = _replaced(catalog, taken) if replace else ({}, {})
    results = importer.import_fixes(catalog, planned, release=release,
                                    tree=Path(tree) if tree else None, root=root,
                                    commit=not no_commit, dry_run=dry_run, how=how,
                                    replace=replace)
    warnings = [f"{fix}: --replace drops its variants ({kept}) from its manifest, as an export "
                "does not carry them (their series stay in their folders under patches/"
                f"{fix}/): hosts on those releases keep what they run, and apply and sync refuse "
                f"the fix there until a variant serves them (patchkit rebase {fix} --onto "
                "RELEASE makes one)" for fix, kept in dropped.items()
                if any(r.name == fix for r in results)]
    warnings += [f"{fix}: --replace drops its {said} from its manifest, as an export does not "
                 "carry them: nothing checks the fix before or after it is applied until they "
                 f"are put back in {catalog.manifests_dir / (fix + '.toml')}"
                 for fix, said in checks.items()
                 if any(r.name == fix for r in results)]
    if as_json:
        render.print_json({"fixes": [{"name": r.name, "version": r.version,
                                      "replaces": taken.get(r.name),
                                      "manifest": str(r.manifest),
                                      "patches": [str(p) for p in r.patches],
                                      "files": list(r.files), "base_release": r.base_release,
                                      "commit": r.commit} for r in results],
                           "dry_run": dry_run, "warnings": warnings})
        return 0
    render.warn(warnings)
    for result in results:
        whose = taken.get(result.name)
        report_authoring(result, False, "imported" if whose is None else
                         f"imported (replacing {'the shipped' if whose == 'shipped' else 'your'} "
                         "fix of that name: --replace)", dry_note=False)
    if dry_run:
        progress_sayer()("dry run: nothing was written")
    return 0


def _replaced(catalog: Catalog, taken: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Of the fixes an import replaces, what each has that an export does not carry and the
    replacement drops: its variants ("v3 for 0.5.22; ..."), and its checks ("2
    precondition(s) and 3 verification check(s)")."""
    variants, checks = {}, {}
    for name in taken:
        try:
            old = catalog.get(name)
        except PatchkitError:
            continue
        if old.variants_said:
            variants[name] = old.variants_said
        if old.preconditions or old.verification:
            checks[name] = (f"{len(old.preconditions)} precondition(s) and "
                            f"{len(old.verification)} verification check(s)")
    return variants, checks


@command(
    "export",
    click.argument("fixes", nargs=-1, required=True),
    click.option("--format", "fmt", type=click.Choice(exporter.FORMATS), required=True, help="mbox (git am), quilt (series + DEP-3 patches) or dep3 (DEP-3 headed patches)."),
    click.option("-o", "--output", "out", default=".", show_default=True, type=click.Path(file_okay=False), help="The directory to write into."),
)
def export(state: State, fixes: tuple[str, ...], fmt: str, out: str, as_json: bool) -> int:
    """Write FIX... as an mbox `git am` applies, a quilt series `quilt push -a` applies, or
    DEP-3 headed patches."""
    from ..catalog.model import unfinished

    catalog = state.catalog()
    result = exporter.export(catalog, fixes, fmt, Path(out))
    warnings = [w for name in result.fixes for w in unfinished(catalog.get(name))]
    if as_json:
        render.print_json({"format": result.format, "fixes": result.fixes,
                           "files": [str(f) for f in result.files], "notes": result.notes,
                           "warnings": warnings})
        return 0
    render.warn(warnings)
    say = progress_sayer()
    say(f"exported {', '.join(result.fixes)} as {fmt}")
    for f in result.files:
        say(f"  {f}")
    for note in result.notes:
        say(f"note: {note}")
    return 0


COMMANDS = [import_, export]
