"""Fix manifests (``manifests/<fix>.toml``): load and validate (docs/manifest.md), raising
:class:`ManifestError` naming the file and the key or line."""

from __future__ import annotations

import datetime as _dt
import os
import re
import stat
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from ..engine.contract import PRIMARY_ROOT, STRATEGIES
from .checks import build_checks
from .model import (
    FORWARDING_STATES,
    MANIFEST_FORMAT,
    MAX_NAME,
    NAME_RE,
    STATUSES,
    Actions,
    ChangelogEntry,
    Fix,
    PatchRef,
    Revert,
    Rollback,
    Upstream,
    Variant,
)
from ..engine.fsops import kind_of
from ..errors import ManifestError
from .reader import (
    ROOT_NAME_RE,
    Ctx,
    check_keys,
    choice,
    loads,
    read_data,
    rel_path,
    root_name,
    string,
    strings,
    table_list,
    typed,
)

DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}\Z")

TOP_KEYS = ("format", "name", "version", "title", "status", "rationale", "depends_on",
            "supersedes", "reverts", "upstream", "patches", "preconditions", "verification",
            "actions", "rollback", "changelog", "revert", "allow_special_modes", "author",
            "headers", "restart", "variants")
TOP_REQUIRED = ("format", "name", "version", "title", "status", "rationale", "upstream")
REVERT_KEYS = ("commit", "fix", "paths", "root")
UPSTREAM_KEYS = ("project", "base_release", "releases", "root", "forwarding", "reference", "bug",
                 "origin", "applied")
AUTHOR_RE = re.compile(r"[^<>\n]*\S <[^<>\s@]+@[^<>\s@]+>\Z")
HEADER_RE = re.compile(r"[A-Za-z][A-Za-z0-9-]*\Z")
PATCH_KEYS = ("file", "root", "description")
CHANGELOG_KEYS = ("version", "date", "base_release", "summary")
VARIANT_KEYS = ("version", "base_release", "releases", "dir", "patches", "preconditions",
                "verification")


def load_manifest(path: Path | str, *, patch_dir: Path | None = None) -> Fix:
    """Read and validate ``manifests/<fix>.toml``; its series lives in ``patches/<fix>/``."""
    path = Path(path)
    data = read_data(path, "manifest")
    if patch_dir is None:
        patch_dir = path.parent.parent / "patches" / str(data.get("name", path.stem))
    fix = build_fix(Ctx(path), data, patch_dir)
    _check_files(Ctx(path), fix)
    return fix


def build_fix(ctx: Ctx, data: Mapping[str, Any], patch_dir: Path) -> Fix:
    """The validated :class:`Fix` of a manifest's ``data``; ``ctx`` names its file."""
    # The format version first: a newer manifest may legitimately have keys we do not know.
    fmt = typed(ctx, data, "", "format", int)
    if fmt > MANIFEST_FORMAT:
        raise ctx.fail("format", f"written in manifest format {fmt}, but this patchkit reads "
                       f"format {MANIFEST_FORMAT} at most", "Upgrade patchkit to use this manifest")
    if fmt < 1:
        raise ctx.fail("format", f"format {fmt} does not exist", f"Set format = {MANIFEST_FORMAT}")
    check_keys(ctx, data, "", TOP_KEYS, TOP_REQUIRED)

    name = string(ctx, data, "", "name")
    if len(name) > MAX_NAME:
        raise ctx.fail("name", f"name '{name[:40]}...' is {len(name)} characters long; a fix "
                       f"name has at most {MAX_NAME}", "Use a shorter name")
    if not NAME_RE.match(name):
        raise ctx.fail("name", f"name '{name}' is not of the form [a-z0-9][a-z0-9.-]*",
                       "Use lowercase letters, digits, '.' and '-'")
    if name != ctx.path.stem:
        raise ctx.fail("name", f"name '{name}' does not match the file name "
                       f"'{ctx.path.name}'", f"Rename the file to {name}.toml or set "
                       f"name = \"{ctx.path.stem}\"")
    version = typed(ctx, data, "", "version", int)
    if version < 1:
        raise ctx.fail("version", f"version {version} is below 1", "Versions start at 1")
    title = string(ctx, data, "", "title", nonempty=True)
    if "\n" in title:
        raise ctx.fail("title", "title spans several lines", "Keep it to one line, like a "
                       "commit subject; put the rest in rationale")
    status = choice(ctx, data, "", "status", STATUSES)
    rationale = string(ctx, data, "", "rationale", nonempty=True)
    depends_on = _names(ctx, data, "depends_on", name)
    supersedes = _names(ctx, data, "supersedes", name)
    reverts = string(ctx, data, "", "reverts", "")
    if reverts and (not NAME_RE.match(reverts) or reverts == name):
        raise ctx.fail("reverts", f"'{reverts}' is not another fix's name", "Name the fix "
                       "whose change this one removes, or leave reverts out")

    upstream = _build_upstream(ctx, data)
    revert = _build_revert(ctx, data, name, upstream.root)
    # The rest is validated in the order of the keywords below.
    return Fix(format=fmt, name=name, version=version, title=title, status=status,
               rationale=rationale, upstream=upstream, manifest_path=ctx.path, patch_dir=patch_dir,
               patches=_build_patches(ctx, data, patch_dir, upstream.root, revert is not None),
               preconditions=build_checks(ctx, data, "preconditions", upstream.root),
               verification=build_checks(ctx, data, "verification", upstream.root),
               actions=_build_actions(ctx, data), rollback=_build_rollback(ctx, data),
               changelog=_build_changelog(ctx, data, version), depends_on=depends_on,
               supersedes=supersedes, reverts=reverts, revert=revert,
               allow_special_modes=typed(ctx, data, "", "allow_special_modes", bool, False),
               author=_author(ctx, data), headers=_headers(ctx, data), restart=_restart(ctx, data),
               variants=_build_variants(ctx, data, patch_dir, upstream, version))



def _restart(ctx: Ctx, data: Mapping[str, Any]) -> tuple[str, ...]:
    """``restart``: the name (or names) of the restart the fix needs, a command of
    ``patchkit.toml``'s ``[restarts]`` (docs/manifest.md)."""
    value = data.get("restart", ())
    names = (value,) if isinstance(value, str) else strings(ctx, data, "", "restart", ())
    for name in names:
        if not ROOT_NAME_RE.match(name):
            raise ctx.fail("restart", f"'{name}' is not a restart name", "Name a command of "
                           "patchkit.toml's [restarts], e.g. restart = \"prefill\"")
    return tuple(names)



class _Within(Ctx):
    """The file's context for the keys of one ``[[variants]]`` entry (``variants[2].patches[1]``)."""

    def __init__(self, ctx: Ctx, where: str) -> None:
        super().__init__(ctx.path)
        self.where = where

    def fail(self, key: str, message: str, todo: str) -> ManifestError:
        return super().fail(f"{self.where}.{key}", message, todo)


def _build_variants(ctx: Ctx, data: Mapping[str, Any], patch_dir: Path, upstream: Upstream,
                    top_version: int) -> tuple[Variant, ...]:
    """``[[variants]]``: other versions of the series, each serving releases no other serves."""
    tables = table_list(ctx, data, "variants")
    if tables and not upstream.releases:
        raise ctx.fail("variants", "the fix has variants but no release precondition "
                       "(upstream.releases = [])", "A variant is chosen by the release a target "
                       "runs: give upstream.releases, or drop [[variants]]")
    served = {r: "the top level" for r in upstream.releases}
    versions, dirs, out = {top_version}, set(), []
    for i, table in enumerate(tables, 1):
        where = f"variants[{i}]"
        check_keys(ctx, table, where, VARIANT_KEYS, ("version", "base_release", "patches"))
        version = typed(ctx, table, where, "version", int)
        if version < 1 or version in versions:  # above the top level's: a refreshed variant
            raise ctx.fail(f"{where}.version", f"variant version {version} is "
                           + ("already used in this fix" if version in versions else
                              "not a version (1 or more)"),
                           "Give each variant the version of the fix it is (see [[changelog]])")
        versions.add(version)
        base = string(ctx, table, where, "base_release", nonempty=True)
        releases = strings(ctx, table, where, "releases", [base])
        if base not in releases:
            raise ctx.fail(f"{where}.releases", f"releases {list(releases)} do not include "
                           f"base_release '{base}'", "Add the base release to releases")
        for release in releases:
            if release in served:
                raise ctx.fail(f"{where}.releases", f"release {release} is served by "
                               f"{served[release]} already", "Each release is served by one "
                               "variant: remove it from one of them")
            served[release] = f"variants[{i}]"
        folder = rel_path(ctx, string(ctx, table, where, "dir", base), f"{where}.dir")
        if folder in dirs or folder == "checks":
            raise ctx.fail(f"{where}.dir", f"dir '{folder}' is "
                           + ("used by another variant" if folder in dirs else "the check scripts' folder"),
                           "Give each variant a folder of its own, e.g. its base release")
        dirs.add(folder)
        inner = _Within(ctx, where)
        if not table_list(inner, table, "patches"):
            raise inner.fail("patches", "the variant's series has no patches",
                             "Add at least one [[variants.patches]]")
        patches = _build_patches(inner, table, patch_dir / folder, upstream.root)
        out.append(Variant(
            version=version, base_release=base, releases=releases, dir=folder, patches=patches,
            preconditions=build_checks(inner, table, "preconditions", upstream.root)
            if "preconditions" in table else None,
            verification=build_checks(inner, table, "verification", upstream.root)
            if "verification" in table else None))
    return tuple(out)


def _author(ctx: Ctx, data: Mapping[str, Any]) -> str:
    author = string(ctx, data, "", "author", "")
    if author and not AUTHOR_RE.match(author):
        raise ctx.fail("author", f"'{author}' is not of the form 'Name <email>'",
                       "Write it as git does, e.g. author = \"Ada Lovelace <ada@example.org>\"")
    return author


def _headers(ctx: Ctx, data: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``[headers]``: patch headers patchkit has no field for (DEP-3's Reviewed-by, Bug-Debian,
    ...), kept as they came so an export writes them back."""
    if "headers" not in data:
        return ()
    table = typed(ctx, data, "", "headers", dict)
    out = []
    for key, value in table.items():
        if not HEADER_RE.match(key):
            raise ctx.fail(f"headers.{key}", f"'{key}' is not a patch header name",
                           "Use letters, digits and '-', e.g. Reviewed-by")
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, str) for v in values):
            raise ctx.fail(f"headers.{key}", "a header's value must be a string, or a list of "
                           "strings for a header given more than once", "Quote it")
        out += [(str(key), v) for v in values]
    return tuple(out)


def _build_revert(ctx: Ctx, data: Mapping[str, Any], own: str, default_root: str) -> Revert | None:
    if "revert" not in data:
        return None
    table = typed(ctx, data, "", "revert", dict)
    check_keys(ctx, table, "revert", REVERT_KEYS, ())
    commit = string(ctx, table, "revert", "commit", "")
    fix = string(ctx, table, "revert", "fix", "")
    if not commit and not fix:
        raise ctx.fail("revert", "[revert] names no commit", "Give commit = \"<id>\" and/or "
                       "fix = \"<the fix whose series the commit holds>\"")
    if commit and not re.fullmatch(r"[0-9a-fA-F]{4,64}", commit):
        raise ctx.fail("revert.commit", f"'{commit}' is not a commit id", "Give a hex commit id "
                       "(at least 4 digits); name a fix with revert.fix instead of a branch or tag")
    if fix and (not NAME_RE.match(fix) or fix == own):
        raise ctx.fail("revert.fix", f"'{fix}' is not another fix's name", "Name the fix whose "
                       "series the commit holds")
    paths = tuple(rel_path(ctx, p, "revert.paths")
                  for p in strings(ctx, table, "revert", "paths", []))
    root = root_name(ctx, string(ctx, table, "revert", "root", default_root), "revert.root")
    return Revert(commit=commit, fix=fix, paths=paths, root=root)


def _names(ctx: Ctx, data: Mapping[str, Any], key: str, own: str) -> tuple[str, ...]:
    names = strings(ctx, data, "", key, [])
    for item in names:
        if not NAME_RE.match(item):
            raise ctx.fail(key, f"'{item}' is not a fix name", "Use the name of a manifest")
        if item == own:
            raise ctx.fail(key, f"the fix names itself in '{key}'", "Remove its own name")
    if len(set(names)) != len(names):
        raise ctx.fail(key, f"'{key}' lists a fix twice", "List each fix once")
    return names


def _build_upstream(ctx: Ctx, data: Mapping[str, Any]) -> Upstream:
    table = typed(ctx, data, "", "upstream", dict)
    check_keys(ctx, table, "upstream", UPSTREAM_KEYS, ("base_release",))
    base = string(ctx, table, "upstream", "base_release", nonempty=True)
    releases = strings(ctx, table, "upstream", "releases", [base])
    if releases and base not in releases:
        raise ctx.fail("upstream.releases", f"releases {list(releases)} do not include "
                       f"base_release '{base}'", "Add the base release to releases (an empty "
                       "list means: no release precondition)")
    root = root_name(ctx, string(ctx, table, "upstream", "root", PRIMARY_ROOT), "upstream.root")
    return Upstream(base_release=base, releases=releases,
                    project=string(ctx, table, "upstream", "project", "sglang", nonempty=True),
                    root=root,
                    forwarding=choice(ctx, table, "upstream", "forwarding", FORWARDING_STATES,
                                      "not-forwarded"),
                    reference=string(ctx, table, "upstream", "reference", ""),
                    bug=string(ctx, table, "upstream", "bug", ""),
                    origin=string(ctx, table, "upstream", "origin", ""),
                    applied=string(ctx, table, "upstream", "applied", ""))


def _build_patches(ctx: Ctx, data: Mapping[str, Any], patch_dir: Path,
                   default_root: str, is_revert: bool = False) -> tuple[PatchRef, ...]:
    tables = table_list(ctx, data, "patches")
    if not tables and not is_revert:
        raise ctx.fail("patches", "the series has no patches", "Add at least one [[patches]] "
                       "(or make the fix the revert of a commit with [revert])")
    out: list[PatchRef] = []
    seen: set[str] = set()
    for i, table in enumerate(tables, 1):
        where = f"patches[{i}]"
        check_keys(ctx, table, where, PATCH_KEYS, ("file",))
        file = rel_path(ctx, string(ctx, table, where, "file", nonempty=True), f"{where}.file")
        root = root_name(ctx, string(ctx, table, where, "root", default_root), f"{where}.root")
        if file in seen:
            raise ctx.fail(f"{where}.file", f"patch '{file}' is listed twice", "List it once")
        seen.add(file)
        out.append(PatchRef(file=file, root=root,
                            description=string(ctx, table, where, "description", ""),
                            path=patch_dir / file))
    return tuple(out)


def _build_actions(ctx: Ctx, data: Mapping[str, Any]) -> Actions:
    table = typed(ctx, data, "", "actions", dict, {})
    check_keys(ctx, table, "actions", ("purge_pycache",), ())
    return Actions(purge_pycache=typed(ctx, table, "actions", "purge_pycache", bool, True))


def _build_rollback(ctx: Ctx, data: Mapping[str, Any]) -> Rollback:
    table = typed(ctx, data, "", "rollback", dict, {})
    check_keys(ctx, table, "rollback", ("strategy", "notes"), ())
    return Rollback(strategy=choice(ctx, table, "rollback", "strategy", STRATEGIES,
                                    "restore"),
                    notes=string(ctx, table, "rollback", "notes", ""))


def _build_changelog(ctx: Ctx, data: Mapping[str, Any], version: int) -> tuple[ChangelogEntry, ...]:
    # the newest version is the top level's, or a refreshed variant's (checked in [[variants]])
    raw = data.get("variants")
    tables: list[Any] = raw if isinstance(raw, list) else []
    version = max([version, *(t["version"] for t in tables if isinstance(t, Mapping)
                              and type(t.get("version")) is int)])
    out: list[ChangelogEntry] = []
    for i, table in enumerate(table_list(ctx, data, "changelog"), 1):
        where = f"changelog[{i}]"
        check_keys(ctx, table, where, CHANGELOG_KEYS, ("version", "date", "summary"))
        entry_version = typed(ctx, table, where, "version", int)
        if out and entry_version <= out[-1].version:
            raise ctx.fail(f"{where}.version", f"changelog version {entry_version} does not "
                           f"come after {out[-1].version}", "Keep entries oldest first, one "
                           "per version")
        if entry_version > version:
            raise ctx.fail(f"{where}.version", f"changelog names version {entry_version} but "
                           f"the fix's newest version is {version}", "Bump version, or fix the entry")
        raw_date = table.get("date")
        if isinstance(raw_date, _dt.date) and not isinstance(raw_date, _dt.datetime):
            date = raw_date.isoformat()
        else:
            date = string(ctx, table, where, "date")
            if not DATE_RE.match(date):
                raise ctx.fail(f"{where}.date", f"date '{date}' is not YYYY-MM-DD",
                               "Write the date as 2026-11-20")
        out.append(ChangelogEntry(version=entry_version, date=date,
                                  summary=string(ctx, table, where, "summary", nonempty=True),
                                  base_release=string(ctx, table, where, "base_release", "")))
    if out and out[-1].version != version:
        raise ctx.fail("changelog", f"the newest changelog entry is for version "
                       f"{out[-1].version}, but the fix is at version {version}",
                       f"Add a [[changelog]] entry for version {version} saying what changed")
    return tuple(out)


def _check_files(ctx: Ctx, fix: Fix) -> None:
    """The series and scripts the manifest names must exist next to it."""
    for i, patch in enumerate(fix.patches, 1):
        try:  # one stat per patch: a drift series has thousands
            mode: int | None = os.stat(patch.path).st_mode
        except (OSError, ValueError):
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise ctx.fail(f"patches[{i}].file", f"patch file {patch.path} is {kind_of(mode)}, "
                           "not a regular file", f"Put the patch itself at {patch.path}")
        if mode is None:
            raise ctx.fail(f"patches[{i}].file", f"patch file {patch.path} does not exist",
                           f"Put the patch at {patch.path} or fix the file name")
    for n, variant in enumerate(fix.variants, 1):
        for i, patch in enumerate(variant.patches, 1):
            if not patch.path.is_file():
                raise ctx.fail(f"variants[{n}].patches[{i}].file", f"patch file {patch.path} "
                               "does not exist", f"Put the patch at {patch.path} or fix the file name")
    extra = [(f"variants[{n}].{key}", checks) for n, v in enumerate(fix.variants, 1)
             for key, checks in (("preconditions", v.preconditions), ("verification", v.verification))
             if checks]
    for key, checks in (("preconditions", fix.preconditions), ("verification", fix.verification),
                        *extra):
        for i, check in enumerate(checks, 1):
            if check.kind == "python-script":
                script = fix.patch_dir / str(check.get("script"))
                if not script.is_file():
                    raise ctx.fail(f"{key}[{i}].script", f"script {script} does not exist",
                                   f"Put the script at {script} (scripts are relative to "
                                   f"{fix.patch_dir})")


def version_and_patches(text: str) -> tuple[int | None, list[str]]:
    """The ``version`` and ``[[patches]].file`` names of a manifest's text, unvalidated (an old
    version need not be valid today); text that is not TOML gives ``(None, [])``."""
    try:
        data = loads(Path("manifest.toml"), text)
    except ManifestError:  # any broken old text just has no version
        return None, []
    return _version_and_files(data)


def _version_and_files(data: dict[str, Any]) -> tuple[int | None, list[str]]:
    version, patches = data.get("version"), data.get("patches")
    patches = patches if isinstance(patches, list) else []
    files = [p.get("file") for p in patches if isinstance(p, dict)]
    return (version if isinstance(version, int) else None), [f for f in files if isinstance(f, str)]


class Declared(NamedTuple):
    """One version a manifest's text declares."""

    folder: str  # of its series under ``patches/<fix>/`` ("" for the top level)
    files: list[str]  # its ``[[patches]].file`` names
    entry: Any  # what the manifest says of it alone: its [[variants]] table, or the top
    #             level without its variants and changelog (a change there changed it)


def declared_versions(text: str) -> dict[int, Declared]:
    """Every version a manifest's text declares, its top level's and each ``[[variants]]``
    entry's, with the folder of its series under ``patches/<fix>/`` ("" for the top level;
    a variant's ``dir``, else its ``base_release``), its ``[[patches]].file`` names and its
    entry; unvalidated, as :func:`version_and_patches` (an old version need not be valid
    today)."""
    try:
        data = loads(Path("manifest.toml"), text)
    except ManifestError:
        return {}
    top, files = _version_and_files(data)
    # the fix's name is not its version's: a rename declares no version anew
    own = {k: v for k, v in data.items() if k not in ("variants", "changelog", "name")}
    out: dict[int, Declared] = {} if top is None else {top: Declared("", files, own)}
    variants = data.get("variants")
    for v in variants if isinstance(variants, list) else ():
        if not isinstance(v, dict) or not isinstance(v.get("version"), int):
            continue
        folder = v.get("dir") or v.get("base_release")
        patches = v.get("patches")
        names = [p.get("file") for p in patches if isinstance(p, dict)] if isinstance(patches, list) else []
        if isinstance(folder, str) and folder:
            out.setdefault(v["version"], Declared(folder, [f for f in names if isinstance(f, str)], v))
    return out


__all__ = ["load_manifest", "build_fix", "version_and_patches", "declared_versions", "Declared",
           "NAME_RE", "MAX_NAME", "name_problem"]


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a fix name (None: it is one): the one rule every command applies."""
    if len(name) > MAX_NAME:
        return (f"the fix name '{name[:40]}...' is {len(name)} characters long; a fix name has "
                f"at most {MAX_NAME}")
    if not NAME_RE.match(name):
        return (f"'{name}' is not a fix name: lowercase letters, digits, '.' and '-', starting "
                "with a letter or digit")
    return None
