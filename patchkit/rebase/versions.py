"""Versions of a fix's series (``patchkit diff FIX --versions A B``), old ones from the
catalog's git history: apart from the rebase run, which (``--skip``) never needs it."""

from __future__ import annotations

from .. import gitrepo
from ..catalog import manifest
from ..catalog import Catalog
from ..catalog.lineage import named_history
from ..errors import UsageError


def series_of_version(catalog: Catalog, name: str, version: int) -> dict[str, str]:
    """The patch files (name -> text) of ``version`` of a fix: from the catalog (its current
    version, or one a ``[[variants]]`` entry keeps for another release), or for an older one
    from the last commit of the catalog's git history declaring it."""
    fix = catalog.get(name)
    for kept in fix.all_variants():
        if version == kept.version:
            return {r.file: r.path.read_text(encoding="utf-8", errors="surrogateescape")
                    for r in kept.patches}
    home = fix.manifest_path.parent.parent  # the catalog holding it (a shipped one beside)
    top = gitrepo.work_tree_top(home)
    if top is None:
        raise UsageError(f"version {version} of {name} is not the current one ({fix.version}) "
                         f"and the catalog {home} is not in git, where old versions live")
    rel = home.resolve().relative_to(top.resolve()).as_posix()
    prefix = "" if rel == "." else rel + "/"
    history = gitrepo.path_history(top, [f"{prefix}manifests", f"{prefix}patches"])
    moves = gitrepo.renames(top, f"{prefix}manifests")  # a fix renamed keeps its versions
    for commit, was in reversed(named_history(history, moves, name, prefix)):
        (text,) = gitrepo.texts_at(top, [(commit.sha, f"{prefix}manifests/{was}.toml")])
        declared = manifest.declared_versions(text or "")  # a variant's versions too
        if version in declared:
            folder, files = declared[version].folder, declared[version].files
            rel_patches = f"{prefix}patches/{was}"
            under = f"{rel_patches}/{folder}/" if folder else f"{rel_patches}/"
            texts = gitrepo.texts_at(top, [(commit.sha, under + f) for f in files])
            return {f: t or "" for f, t in zip(files, texts)}
    raise UsageError(f"no version {version} of {name} in the catalog's git history (versions "
                     f"run up to {fix.next_version - 1}); `patchkit log {name}` lists them")


def range_diff(catalog: Catalog, name: str, old: int, new: int) -> str:
    """A diff of the two versions' patch files, patch by patch (a range-diff of the series)."""
    import difflib

    a, b = series_of_version(catalog, name, old), series_of_version(catalog, name, new)
    out: list[str] = []
    for file in dict.fromkeys([*a, *b]):
        out += difflib.unified_diff(
            a.get(file, "").splitlines(keepends=True), b.get(file, "").splitlines(keepends=True),
            fromfile=f"v{old}/{file}" if file in a else "/dev/null",
            tofile=f"v{new}/{file}" if file in b else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)
