"""Manifests (``manifests/<fix>.toml``) and the project config (``patchkit.toml``).

The only module that touches TOML (tomlkit). Loading validates everything the format says
(docs/manifest.md) and raises :class:`ManifestError` naming the file and the key or line, so
the rest of patchkit works on trusted frozen dataclasses (:mod:`patchkit.catalog.model`). Writing goes
through tomlkit's round trip, so a bump keeps the author's comments and layout.

Manifest format 1 is the current one; a manifest declaring a newer ``format`` is refused with
"upgrade patchkit" rather than half-understood.

Read-only loads (apply, status, list, ...) parse with the standard library's ``tomllib``
(Python >= 3.11), several times faster than tomlkit and without importing it; only when that
parse fails is the text parsed again with tomlkit, whose error names the line and column.
tomlkit stays the parser of everything that edits a manifest in place.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import marshal
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import ManifestError

_UNSET: Any = object()
#: tomllib (Python >= 3.11; None on 3.10, where every parse goes through tomlkit), imported by
#: the first parse: a run whose manifests all come from the index (patchkit.catalog.manifest_index)
#: never needs it.
_tomllib: Any = _UNSET


def _toml_lib() -> Any:
    global _tomllib
    if _tomllib is _UNSET:
        try:
            import tomllib as _tomllib
        except ImportError:  # pragma: no cover - exercised on Python 3.10 only
            _tomllib = None
    return _tomllib

from .model import (
    CHECK_KEYS,
    CHECK_KINDS,
    CHECK_TIMEOUTS,
    DEFAULT_ROOT,
    FORWARDING_STATES,
    MANIFEST_FORMAT,
    ROLLBACK_STRATEGIES,
    STATUSES,
    Actions,
    ChangelogEntry,
    Check,
    Fix,
    PatchRef,
    ProjectConfig,
    Revert,
    Rollback,
    TargetConfig,
    Upstream,
)

NAME_RE = re.compile(r"[a-z0-9][a-z0-9.-]*\Z")
ROOT_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")
DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}\Z")

TOP_KEYS = ("format", "name", "version", "title", "status", "rationale", "depends_on",
            "supersedes", "reverts", "upstream", "patches", "preconditions", "verification",
            "actions", "rollback", "changelog", "revert", "allow_special_modes")
TOP_REQUIRED = ("format", "name", "version", "title", "status", "rationale", "upstream")
REVERT_KEYS = ("commit", "fix", "paths", "root")
UPSTREAM_KEYS = ("project", "base_release", "releases", "root", "forwarding", "reference")
PATCH_KEYS = ("file", "root", "description")
CHANGELOG_KEYS = ("version", "date", "base_release", "summary")
TARGET_KEYS = ("path", "host", "user", "port", "python", "ssh_options", "ssh_program", "roots")
REMOTE_ONLY_KEYS = ("user", "port", "ssh_options", "ssh_program")

_MISSING: Any = object()
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", list: "an array",
               dict: "a table"}
DOCS = "docs/manifest.md"


class _Ctx:
    """Which file is being read, so every error names it."""

    def __init__(self, path: Path, kind: str = "manifest") -> None:
        self.path = path
        self.kind = kind

    def fail(self, key: str, message: str, todo: str) -> ManifestError:
        where = f" (key '{key}')" if key else ""
        return ManifestError(f"{self.path}: {message}{where}. {todo}", file=str(self.path),
                             key=key)


def _full(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _table_label(where: str) -> str:
    match = re.fullmatch(r"(\w+)\[(\d+)\]", where)
    if match:
        return f"[[{match.group(1)}]] #{match.group(2)}"
    return f"[{where}]" if where else "the top level"


def _check_keys(ctx: _Ctx, data: Mapping[str, Any], where: str, allowed: Sequence[str],
                required: Sequence[str]) -> None:
    for key in data:
        if key not in allowed:
            import difflib

            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else "remove it or fix its spelling."
            raise ctx.fail(_full(where, key), f"unknown key '{key}' in {_table_label(where)}",
                           f"{hint[0].upper()}{hint[1:]} Valid keys there: "
                           f"{', '.join(sorted(allowed))} (see {DOCS})")
    for key in required:
        if key not in data:
            raise ctx.fail(_full(where, key), f"missing required key '{key}' in "
                           f"{_table_label(where)}", f"Add it (see {DOCS})")


def _typed(ctx: _Ctx, data: Mapping[str, Any], where: str, key: str, kind: type,
           default: Any = _MISSING) -> Any:
    if key not in data:
        if default is _MISSING:
            raise ctx.fail(_full(where, key), f"missing required key '{key}'", f"Add it (see {DOCS})")
        return default
    value = data[key]
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise ctx.fail(_full(where, key), f"'{key}' must be {_TYPE_NAMES[kind]}, "
                       f"not {_toml_type(value)} ({value!r})", f"Fix its value (see {DOCS})")
    return value


def _toml_type(value: Any) -> str:
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a float"),
                       (str, "a string"), (list, "an array"), (dict, "a table"),
                       (_dt.datetime, "a date-time"), (_dt.date, "a date")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _str(ctx: _Ctx, data: Mapping[str, Any], where: str, key: str, default: Any = _MISSING,
         nonempty: bool = False) -> str:
    value = _typed(ctx, data, where, key, str, default)
    if nonempty and not value.strip():
        raise ctx.fail(_full(where, key), f"'{key}' is empty", "Give it a value")
    return value


def _str_list(ctx: _Ctx, data: Mapping[str, Any], where: str, key: str,
              default: Any = _MISSING) -> tuple[str, ...]:
    value = _typed(ctx, data, where, key, list, default)
    for item in value:
        if not isinstance(item, str):
            raise ctx.fail(_full(where, key), f"'{key}' must be an array of strings, but holds "
                           f"{_toml_type(item)} ({item!r})", "Quote each item")
    return tuple(value)


def _enum(ctx: _Ctx, data: Mapping[str, Any], where: str, key: str, choices: Sequence[str],
          default: Any = _MISSING) -> str:
    value = _str(ctx, data, where, key, default)
    if value not in choices:
        import difflib

        close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
        hint = f"Did you mean '{close[0]}'? " if close else ""
        raise ctx.fail(_full(where, key), f"'{key}' is '{value}', not one of "
                       f"{', '.join(choices)}", f"{hint}Use one of those values")
    return value


def _rel_path(ctx: _Ctx, value: str, key: str) -> str:
    """A path relative to a root or the fix's patch dir: never absolute, never up and out."""
    # As PurePosixPath's parts, without building one: "." and empty parts are dropped there,
    # ".." is kept, so a ".." component is one of the "/"-separated pieces either way.
    if not value or value[0] == "/" or "\\" in value or ".." in value.split("/"):
        raise ctx.fail(key, f"path '{value}' must be relative, with '/' separators and no "
                       "'..'", "Give the path relative to its root")
    return value


def _table_list(ctx: _Ctx, data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ctx.fail(key, f"'{key}' must be an array of tables ([[{key}]])",
                       f"Write each entry as a [[{key}]] table")
    return value


# -- reading ---------------------------------------------------------------------------------


def _read_text(path: Path, kind: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such {kind} file", file=str(path), key="") from None
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}). "
                            f"Save the {kind} as UTF-8", file=str(path), key="") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the {kind}: {exc.strerror}", file=str(path),
                            key="") from None


def _read_data(path: Path, kind: str) -> dict[str, Any]:
    """The file's TOML as plain Python data, for read-only loads: tomllib when it parses,
    else tomlkit (for its precise error, or in case it accepts what tomllib refuses).

    A large file's parse (a release-drift series lists thousands of patches) is cached by
    the sha256 of its text (see :func:`_cache_path`); validation still runs on every load.
    """
    text = _read_text(path, kind)
    cache = _cache_path(text) if len(text) >= CACHE_MIN_CHARS else None
    if cache is not None:
        cached = _load_cached(cache)
        if cached is not None:
            return cached
    data = None
    toml = _toml_lib()
    if toml is not None:
        try:
            data = toml.loads(text)
        except (toml.TOMLDecodeError, ValueError):
            pass
        except RecursionError:  # tomllib recurses once per level of nesting
            raise _too_deep(path, kind) from None
    if data is None:
        data = _parse_toml(path, kind, text).unwrap()
    if cache is not None:
        _store_cached(cache, data)
    return data


def _too_deep(path: Path, kind: str) -> ManifestError:
    """Arrays, inline tables or dotted keys nested deeper than the parser (or Python's
    recursion limit) goes: no manifest or config needs more than a few levels."""
    return _Ctx(path, kind).fail("", "not valid TOML: values or keys nested too deeply to read",
                                 "Flatten the nesting (a few levels of tables and arrays is "
                                 "all the format uses; see docs/manifest.md)")


#: Texts shorter than this parse faster than a cache file is read.
CACHE_MIN_CHARS = 16_384
_TAG = "\0toml-"  # marks a date/time value in a cached parse (marshal has no dates)
_stamp: str | None = None


def _cache_path(text: str) -> Path:
    """``<user cache>/patchkit/manifests/<stamp>/<sha256 of the text>``; the stamp changes with
    this module's source and the parser (Python's version, tomllib or tomlkit), so an entry
    made by another loader is never read."""
    global _stamp
    if _stamp is None:
        parser = "tomllib" if _toml_lib() is not None else "tomlkit-" + _tomlkit_version()
        ident = f"{sys.version}|{parser}|".encode() + Path(__file__).read_bytes()
        _stamp = hashlib.sha256(ident).hexdigest()[:16]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
    return Path(base) / "patchkit" / "manifests" / _stamp / key


def _tomlkit_version() -> str:
    import tomlkit

    return str(getattr(tomlkit, "__version__", ""))


def _encode(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return (_TAG + type(value).__name__, value.isoformat())
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, tuple):  # TOML data has no tuples: only our tagged dates
        kind, iso = value
        return getattr(_dt, kind[len(_TAG):]).fromisoformat(iso)
    return value


def _load_cached(cache: Path) -> dict[str, Any] | None:
    """The cached parse, or None when absent or damaged (then parsed afresh)."""
    try:
        data = _decode(marshal.loads(cache.read_bytes()))
    except (OSError, ValueError, EOFError, TypeError, AttributeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _store_cached(cache: Path, data: dict[str, Any]) -> None:
    """Best effort and atomic (temp file + rename): a cache that cannot be written is skipped."""
    try:
        blob = marshal.dumps(_encode(data))
        cache.parent.mkdir(parents=True, exist_ok=True)
        import tempfile

        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=cache.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, cache)
    except (OSError, ValueError, RecursionError):  # too deep to encode: not cached
        pass


def _read_toml(path: Path, kind: str) -> Any:
    """The file as a tomlkit document, for editing it in place."""
    return _parse_toml(path, kind, _read_text(path, kind))


def _parse_toml(path: Path, kind: str, text: str) -> Any:
    import tomlkit
    import tomlkit.exceptions

    ctx = _Ctx(path, kind)
    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        reason = re.sub(r" at line \d+ col \d+$", "", str(exc))
        line, col = exc.line, exc.col
        raise ManifestError(f"{path}:{line}:{col}: not valid TOML: {reason}. Fix the syntax at "
                            f"line {line} column {col} (TOML reference: https://toml.io)",
                            file=str(path), line=line, col=col) from None
    except tomlkit.exceptions.TOMLKitError as exc:
        raise ctx.fail("", f"not valid TOML: {exc}", "Fix the syntax (https://toml.io)") from None
    except RecursionError:  # a tomlkit without its own nesting limit
        raise _too_deep(path, kind) from None


def load_manifest(path: Path | str, *, patch_dir: Path | None = None) -> Fix:
    """Read and validate ``manifests/<fix>.toml``; its series lives in ``patches/<fix>/``."""
    path = Path(path)
    data = _read_data(path, "manifest")
    if patch_dir is None:
        patch_dir = path.parent.parent / "patches" / str(data.get("name", path.stem))
    fix = _build_fix(_Ctx(path), data, patch_dir)
    _check_files(_Ctx(path), fix)
    return fix


def check_files(fix: Fix) -> None:
    """What :func:`load_manifest` checks last, for a fix rebuilt from :func:`fix_data`: the
    series and scripts must still exist (raises the same :class:`ManifestError`)."""
    _check_files(_Ctx(fix.manifest_path), fix)


def fix_data(fix: Fix) -> tuple:
    """A validated fix as plain marshal-able data, without its paths (:func:`fix_from_data`)."""
    def checks(items: tuple[Check, ...]) -> list:
        return [(c.kind, {k: list(v) if isinstance(v, tuple) else v for k, v in c.params.items()})
                for c in items]

    up, rev = fix.upstream, fix.revert
    return (FIX_DATA_FORMAT, fix.format, fix.name, fix.version, fix.title, fix.status,
            fix.rationale, (up.base_release, list(up.releases), up.project, up.root,
                            up.forwarding, up.reference),
            [(p.file, p.root, p.description) for p in fix.patches], list(fix.depends_on),
            list(fix.supersedes), fix.reverts, checks(fix.preconditions),
            checks(fix.verification), fix.actions.purge_pycache,
            (fix.rollback.strategy, fix.rollback.notes),
            [(c.version, c.date, c.summary, c.base_release) for c in fix.changelog],
            None if rev is None else (rev.commit, rev.fix, list(rev.paths), rev.root),
            fix.allow_special_modes)


FIX_DATA_FORMAT = 2


def fix_from_data(data: Any, manifest_path: Path, patch_dir: Path) -> Fix:
    """The :class:`Fix` :func:`fix_data` was made from, without validating it again (it was
    validated when recorded). Raises ``ValueError`` for data of another shape."""
    try:
        (tag, fmt, name, version, title, status, rationale, up, patches, depends_on, supersedes,
         reverts, preconditions, verification, purge, rollback, changelog, rev,
         allow_special_modes) = data
        if tag != FIX_DATA_FORMAT:
            raise ValueError(f"fix data format {tag!r}")
        return Fix(
            format=fmt, name=name, version=version, title=title, status=status,
            rationale=rationale,
            upstream=Upstream(base_release=up[0], releases=tuple(up[1]), project=up[2],
                              root=up[3], forwarding=up[4], reference=up[5]),
            patches=tuple(PatchRef(file=f, root=r, description=d, path=patch_dir / f)
                          for f, r, d in patches),
            manifest_path=manifest_path, patch_dir=patch_dir, depends_on=tuple(depends_on),
            supersedes=tuple(supersedes), reverts=reverts,
            preconditions=tuple(Check(k, p) for k, p in preconditions),
            verification=tuple(Check(k, p) for k, p in verification),
            actions=Actions(purge_pycache=purge),
            rollback=Rollback(strategy=rollback[0], notes=rollback[1]),
            changelog=tuple(ChangelogEntry(version=v, date=d, summary=s, base_release=b)
                            for v, d, s, b in changelog),
            revert=None if rev is None else Revert(commit=rev[0], fix=rev[1],
                                                   paths=tuple(rev[2]), root=rev[3]),
            allow_special_modes=allow_special_modes)
    except (TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ValueError(f"not the data of a fix: {exc}") from None


def _build_fix(ctx: _Ctx, data: Mapping[str, Any], patch_dir: Path) -> Fix:
    # The format version first: a newer manifest may legitimately have keys we do not know.
    fmt = _typed(ctx, data, "", "format", int)
    if fmt > MANIFEST_FORMAT:
        raise ctx.fail("format", f"written in manifest format {fmt}, but this patchkit reads "
                       f"format {MANIFEST_FORMAT} at most", "Upgrade patchkit to use this manifest")
    if fmt < 1:
        raise ctx.fail("format", f"format {fmt} does not exist", f"Set format = {MANIFEST_FORMAT}")
    _check_keys(ctx, data, "", TOP_KEYS, TOP_REQUIRED)

    name = _str(ctx, data, "", "name")
    if not NAME_RE.match(name):
        raise ctx.fail("name", f"name '{name}' is not of the form [a-z0-9][a-z0-9.-]*",
                       "Use lowercase letters, digits, '.' and '-'")
    if name != ctx.path.stem:
        raise ctx.fail("name", f"name '{name}' does not match the file name "
                       f"'{ctx.path.name}'", f"Rename the file to {name}.toml or set "
                       f"name = \"{ctx.path.stem}\"")
    version = _typed(ctx, data, "", "version", int)
    if version < 1:
        raise ctx.fail("version", f"version {version} is below 1", "Versions start at 1")
    title = _str(ctx, data, "", "title", nonempty=True)
    if "\n" in title:
        raise ctx.fail("title", "title spans several lines", "Keep it to one line, like a "
                       "commit subject; put the rest in rationale")
    status = _enum(ctx, data, "", "status", STATUSES)
    rationale = _str(ctx, data, "", "rationale", nonempty=True)
    depends_on = _names(ctx, data, "depends_on", name)
    supersedes = _names(ctx, data, "supersedes", name)
    reverts = _str(ctx, data, "", "reverts", "")
    if reverts and (not NAME_RE.match(reverts) or reverts == name):
        raise ctx.fail("reverts", f"'{reverts}' is not another fix's name", "Name the fix "
                       "whose change this one removes, or leave reverts out")

    upstream = _build_upstream(ctx, data)
    revert = _build_revert(ctx, data, name, upstream.root)
    patches = _build_patches(ctx, data, patch_dir, upstream.root, revert is not None)
    preconditions = _build_checks(ctx, data, "preconditions", upstream.root)
    verification = _build_checks(ctx, data, "verification", upstream.root)
    actions = _build_actions(ctx, data)
    rollback = _build_rollback(ctx, data)
    changelog = _build_changelog(ctx, data, version)
    allow_special_modes = _typed(ctx, data, "", "allow_special_modes", bool, False)
    return Fix(format=fmt, name=name, version=version, title=title, status=status,
               rationale=rationale, upstream=upstream, patches=patches,
               manifest_path=ctx.path, patch_dir=patch_dir, depends_on=depends_on,
               supersedes=supersedes, reverts=reverts, preconditions=preconditions,
               verification=verification, actions=actions, rollback=rollback,
               changelog=changelog, revert=revert, allow_special_modes=allow_special_modes)


def _build_revert(ctx: _Ctx, data: Mapping[str, Any], own: str, default_root: str) -> Revert | None:
    if "revert" not in data:
        return None
    table = _typed(ctx, data, "", "revert", dict)
    _check_keys(ctx, table, "revert", REVERT_KEYS, ())
    commit = _str(ctx, table, "revert", "commit", "")
    fix = _str(ctx, table, "revert", "fix", "")
    if not commit and not fix:
        raise ctx.fail("revert", "[revert] names no commit", "Give commit = \"<id>\" and/or "
                       "fix = \"<the fix whose series the commit holds>\"")
    if commit and not re.fullmatch(r"[0-9a-fA-F]{4,64}", commit):
        raise ctx.fail("revert.commit", f"'{commit}' is not a commit id", "Give a hex commit id "
                       "(at least 4 digits); name a fix with revert.fix instead of a branch or tag")
    if fix and (not NAME_RE.match(fix) or fix == own):
        raise ctx.fail("revert.fix", f"'{fix}' is not another fix's name", "Name the fix whose "
                       "series the commit holds")
    paths = tuple(_rel_path(ctx, p, "revert.paths") for p in _str_list(ctx, table, "revert", "paths", []))
    root = _root_name(ctx, _str(ctx, table, "revert", "root", default_root), "revert.root")
    return Revert(commit=commit, fix=fix, paths=paths, root=root)


def _names(ctx: _Ctx, data: Mapping[str, Any], key: str, own: str) -> tuple[str, ...]:
    names = _str_list(ctx, data, "", key, [])
    for item in names:
        if not NAME_RE.match(item):
            raise ctx.fail(key, f"'{item}' is not a fix name", "Use the name of a manifest")
        if item == own:
            raise ctx.fail(key, f"the fix names itself in '{key}'", "Remove its own name")
    if len(set(names)) != len(names):
        raise ctx.fail(key, f"'{key}' lists a fix twice", "List each fix once")
    return names


def _build_upstream(ctx: _Ctx, data: Mapping[str, Any]) -> Upstream:
    table = _typed(ctx, data, "", "upstream", dict)
    _check_keys(ctx, table, "upstream", UPSTREAM_KEYS, ("base_release",))
    base = _str(ctx, table, "upstream", "base_release", nonempty=True)
    releases = _str_list(ctx, table, "upstream", "releases", [base])
    if releases and base not in releases:
        raise ctx.fail("upstream.releases", f"releases {list(releases)} do not include "
                       f"base_release '{base}'", "Add the base release to releases (an empty "
                       "list means: no release precondition)")
    root = _str(ctx, table, "upstream", "root", DEFAULT_ROOT)
    _root_name(ctx, root, "upstream.root")
    return Upstream(base_release=base, releases=releases,
                    project=_str(ctx, table, "upstream", "project", "sglang", nonempty=True),
                    root=root,
                    forwarding=_enum(ctx, table, "upstream", "forwarding", FORWARDING_STATES,
                                     "not-forwarded"),
                    reference=_str(ctx, table, "upstream", "reference", ""))


def _root_name(ctx: _Ctx, root: str, key: str) -> str:
    if not ROOT_NAME_RE.match(root):
        raise ctx.fail(key, f"'{root}' is not a root name", "Use letters, digits, '_', '.', '-'")
    return root


def _build_patches(ctx: _Ctx, data: Mapping[str, Any], patch_dir: Path,
                   default_root: str, is_revert: bool = False) -> tuple[PatchRef, ...]:
    tables = _table_list(ctx, data, "patches")
    if not tables and not is_revert:
        raise ctx.fail("patches", "the series has no patches", "Add at least one [[patches]] "
                       "(or make the fix the revert of a commit with [revert])")
    out: list[PatchRef] = []
    seen: set[str] = set()
    roots_ok = {default_root}
    for i, table in enumerate(tables, 1):
        ref = _plain_patch(table, patch_dir, default_root, roots_ok, seen)
        if ref is not None:  # a plain entry, checked in one pass (a release series has 10^3)
            out.append(ref)
            continue
        where = f"patches[{i}]"
        _check_keys(ctx, table, where, PATCH_KEYS, ("file",))
        file = _rel_path(ctx, _str(ctx, table, where, "file", nonempty=True), f"{where}.file")
        root = _root_name(ctx, _str(ctx, table, where, "root", default_root), f"{where}.root")
        if file in seen:
            raise ctx.fail(f"{where}.file", f"patch '{file}' is listed twice", "List it once")
        seen.add(file)
        out.append(PatchRef(file=file, root=root,
                            description=_str(ctx, table, where, "description", ""),
                            path=patch_dir / file))
    return tuple(out)


_PATCH_KEY_SET = frozenset(PATCH_KEYS)


def _plain_patch(table: Mapping[str, Any], patch_dir: Path, default_root: str,
                 roots_ok: set[str], seen: set[str]) -> PatchRef | None:
    """The PatchRef of an entry that passes every check of the long way, else None (the
    long way then names what is wrong). ``roots_ok`` and ``seen`` are updated."""
    file = table.get("file")
    root = table.get("root", default_root)
    description = table.get("description", "")
    if (type(file) is not str or type(root) is not str or type(description) is not str
            or not table.keys() <= _PATCH_KEY_SET or not file.strip() or file in seen
            or file[0] == "/" or "\\" in file or ".." in file.split("/")):
        return None
    if root not in roots_ok:
        if not ROOT_NAME_RE.match(root):
            return None
        roots_ok.add(root)
    seen.add(file)
    return PatchRef(file=file, root=root, description=description, path=patch_dir / file)


def _build_checks(ctx: _Ctx, data: Mapping[str, Any], key: str,
                  default_root: str) -> tuple[Check, ...]:
    out: list[Check] = []
    for i, table in enumerate(_table_list(ctx, data, key), 1):
        where = f"{key}[{i}]"
        kind = _str(ctx, table, where, "kind")
        if kind not in CHECK_KEYS:
            import difflib

            close = difflib.get_close_matches(kind, CHECK_KINDS, n=1, cutoff=0.5)
            hint = f"Did you mean '{close[0]}'? " if close else ""
            raise ctx.fail(f"{where}.kind", f"unknown check kind '{kind}'",
                           f"{hint}Kinds: {', '.join(CHECK_KINDS)}")
        required, optional = CHECK_KEYS[kind]
        _check_keys(ctx, table, where, ("kind", "name", "timeout", *required, *optional), required)
        out.append(Check(kind, _check_params(ctx, table, where, kind, default_root)))
    return tuple(out)


def _check_params(ctx: _Ctx, table: Mapping[str, Any], where: str, kind: str,
                  default_root: str) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if "name" in table:
        params["name"] = _str(ctx, table, where, "name")
    if "timeout" in table:
        timeout = table["timeout"]
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ctx.fail(f"{where}.timeout", f"timeout must be a number of seconds, not "
                           f"{_toml_type(timeout)}", "Write it as a number, e.g. timeout = 600")
        if not 0 < timeout < float("inf"):
            raise ctx.fail(f"{where}.timeout", f"timeout {timeout} is not above 0 seconds",
                           f"Give the seconds the check may run (default {CHECK_TIMEOUTS[kind]:g})")
        params["timeout"] = timeout
    params["root"] = _root_name(ctx, _str(ctx, table, where, "root", default_root),
                                f"{where}.root")
    if "path" in CHECK_KEYS[kind][0]:
        params["path"] = _rel_path(ctx, _str(ctx, table, where, "path"), f"{where}.path")
    if kind == "grep":
        params["pattern"] = _str(ctx, table, where, "pattern", nonempty=True)
        if "\n" in params["pattern"]:
            raise ctx.fail(f"{where}.pattern", "pattern holds a newline, but grep matches one "
                           "line at a time", "Match a single line (use count for several)")
        params["regex"] = _typed(ctx, table, where, "regex", bool, False)
        if params["regex"]:
            try:
                re.compile(params["pattern"])
            except re.error as exc:
                raise ctx.fail(f"{where}.pattern", f"pattern is not a valid regular "
                               f"expression: {exc}", "Fix it, or set regex = false") from None
        if ("count" in table) == ("present" in table):
            raise ctx.fail(f"{where}.count", "a grep check needs exactly one of 'count' and "
                           "'present'", "Keep count (exact number of matching lines) or "
                           "present (true/false), not both")
        if "count" in table:
            params["count"] = _typed(ctx, table, where, "count", int)
            if params["count"] < 0:
                raise ctx.fail(f"{where}.count", "count is negative", "Use 0 or more")
        else:
            params["present"] = _typed(ctx, table, where, "present", bool)
    elif kind == "sha256":
        digest = _str(ctx, table, where, "sha256")
        if not SHA256_RE.match(digest):
            raise ctx.fail(f"{where}.sha256", "sha256 is not 64 lowercase hex digits",
                           "Paste the output of sha256sum")
        params["sha256"] = digest
    elif kind == "python-import":
        params["module"] = _str(ctx, table, where, "module", nonempty=True)
        if "sys_path" in table:
            params["sys_path"] = _str(ctx, table, where, "sys_path")
    elif kind == "python-script":
        params["script"] = _rel_path(ctx, _str(ctx, table, where, "script"), f"{where}.script")
        params["args"] = list(_str_list(ctx, table, where, "args", []))
    elif kind == "command":
        argv = _str_list(ctx, table, where, "argv")
        if not argv:
            raise ctx.fail(f"{where}.argv", "argv is empty", "Give the program and arguments")
        params["argv"] = list(argv)
        params["expect_exit"] = _typed(ctx, table, where, "expect_exit", int, 0)
    elif kind in ("git-contains", "git-descends-from"):
        pair = ("commit", "fix") if kind == "git-contains" else ("tag", "commit")
        if (pair[0] in table) == (pair[1] in table):
            raise ctx.fail(f"{where}.{pair[0]}", f"a {kind} check needs exactly one of "
                           f"'{pair[0]}' and '{pair[1]}'", f"Keep one of {pair[0]} and {pair[1]}")
        for key in pair:
            if key in table:
                params[key] = _str(ctx, table, where, key, nonempty=True)
        if "fix" in params and not NAME_RE.match(params["fix"]):
            raise ctx.fail(f"{where}.fix", f"'{params['fix']}' is not a fix name", "Name a "
                           "fix of the catalog")
        if kind == "git-contains":
            params["present"] = _typed(ctx, table, where, "present", bool, True)
    return params


def _build_actions(ctx: _Ctx, data: Mapping[str, Any]) -> Actions:
    table = _typed(ctx, data, "", "actions", dict, {})
    _check_keys(ctx, table, "actions", ("purge_pycache",), ())
    return Actions(purge_pycache=_typed(ctx, table, "actions", "purge_pycache", bool, True))


def _build_rollback(ctx: _Ctx, data: Mapping[str, Any]) -> Rollback:
    table = _typed(ctx, data, "", "rollback", dict, {})
    _check_keys(ctx, table, "rollback", ("strategy", "notes"), ())
    return Rollback(strategy=_enum(ctx, table, "rollback", "strategy", ROLLBACK_STRATEGIES,
                                   "restore"),
                    notes=_str(ctx, table, "rollback", "notes", ""))


def _build_changelog(ctx: _Ctx, data: Mapping[str, Any], version: int) -> tuple[ChangelogEntry, ...]:
    out: list[ChangelogEntry] = []
    for i, table in enumerate(_table_list(ctx, data, "changelog"), 1):
        where = f"changelog[{i}]"
        _check_keys(ctx, table, where, CHANGELOG_KEYS, ("version", "date", "summary"))
        entry_version = _typed(ctx, table, where, "version", int)
        if out and entry_version <= out[-1].version:
            raise ctx.fail(f"{where}.version", f"changelog version {entry_version} does not "
                           f"come after {out[-1].version}", "Keep entries oldest first, one "
                           "per version")
        if entry_version > version:
            raise ctx.fail(f"{where}.version", f"changelog names version {entry_version} but "
                           f"the fix is at version {version}", "Bump version, or fix the entry")
        raw_date = table.get("date")
        if isinstance(raw_date, _dt.date) and not isinstance(raw_date, _dt.datetime):
            date = raw_date.isoformat()
        else:
            date = _str(ctx, table, where, "date")
            if not DATE_RE.match(date):
                raise ctx.fail(f"{where}.date", f"date '{date}' is not YYYY-MM-DD",
                               "Write the date as 2026-11-20")
        out.append(ChangelogEntry(version=entry_version, date=date,
                                  summary=_str(ctx, table, where, "summary", nonempty=True),
                                  base_release=_str(ctx, table, where, "base_release", "")))
    if out and out[-1].version != version:
        raise ctx.fail("changelog", f"the newest changelog entry is for version "
                       f"{out[-1].version}, but the fix is at version {version}",
                       f"Add a [[changelog]] entry for version {version} saying what changed")
    return tuple(out)


def _check_files(ctx: _Ctx, fix: Fix) -> None:
    """The series and scripts the manifest names must exist next to it."""
    try:  # one directory listing instead of a stat per patch (symlinks followed, as is_file)
        listed = {e.name for e in os.scandir(fix.patch_dir) if e.is_file()}
    except OSError:
        listed = set()
    for i, patch in enumerate(fix.patches, 1):
        if patch.file not in listed and not patch.path.is_file():
            raise ctx.fail(f"patches[{i}].file", f"patch file {patch.path} does not exist",
                           f"Put the patch at {patch.path} or fix the file name")
    for key, checks in (("preconditions", fix.preconditions), ("verification", fix.verification)):
        for i, check in enumerate(checks, 1):
            if check.kind == "python-script":
                script = fix.patch_dir / str(check.get("script"))
                if not script.is_file():
                    raise ctx.fail(f"{key}[{i}].script", f"script {script} does not exist",
                                   f"Put the script at {script} (scripts are relative to "
                                   f"{fix.patch_dir})")


# -- project config --------------------------------------------------------------------------


def load_config(path: Path | str) -> ProjectConfig:
    """Read ``patchkit.toml``: named targets, and where the catalog is (relative to the file)."""
    path = Path(path)
    ctx = _Ctx(path, "config")
    data = _read_data(path, "config")
    _check_keys(ctx, data, "", ("catalog", "default_target", "targets", "shipped_fixes"), ())
    base = path.parent.resolve()
    catalog = None
    if "catalog" in data:
        catalog = base / Path(_str(ctx, data, "", "catalog", nonempty=True)).expanduser()
    targets_table = _typed(ctx, data, "", "targets", dict, {})
    targets = {}
    for name, table in targets_table.items():
        where = f"targets.{name}"
        if not isinstance(table, dict):
            raise ctx.fail(where, f"target '{name}' must be a table", f"Write it as [{where}]")
        if not ROOT_NAME_RE.match(name):
            raise ctx.fail(where, f"'{name}' is not a target name", "Use letters, digits, "
                           "'_', '.', '-'")
        targets[name] = _build_target(ctx, name, table, base)
    default = _str(ctx, data, "", "default_target", None) if "default_target" in data else None
    if default is not None and default not in targets:
        raise ctx.fail("default_target", f"default_target '{default}' is not a defined target "
                       f"({', '.join(sorted(targets)) or 'none'})",
                       f"Add [targets.{default}] or fix the name")
    shipped = _typed(ctx, data, "", "shipped_fixes", bool, False)
    return ProjectConfig(path=path, catalog=catalog, default_target=default, targets=targets,
                         shipped_fixes=shipped)


def _build_target(ctx: _Ctx, name: str, table: Mapping[str, Any], base: Path) -> TargetConfig:
    where = f"targets.{name}"
    _check_keys(ctx, table, where, TARGET_KEYS, ("path",))
    host = _str(ctx, table, where, "host", None, nonempty=True) if "host" in table else None
    if host is None:
        for key in REMOTE_ONLY_KEYS:
            if key in table:
                raise ctx.fail(_full(where, key), f"'{key}' only applies to a remote target",
                               "Add host = \"...\" or remove it")

    def place(value: str) -> str:
        # A local root is resolved against the config's directory; a remote one is the host's.
        expanded = Path(value).expanduser()
        return value if host is not None else str(base / expanded)

    path = place(_str(ctx, table, where, "path", nonempty=True))
    roots_table = _typed(ctx, table, where, "roots", dict, {})
    roots = {}
    for root, value in roots_table.items():
        key = f"{where}.roots.{root}"
        _root_name(ctx, root, key)
        if root == DEFAULT_ROOT:
            raise ctx.fail(key, f"root '{DEFAULT_ROOT}' is the target's path", "Set it with "
                           "path, not under roots")
        if not isinstance(value, str) or not value:
            raise ctx.fail(key, f"root '{root}' must be a path string", "Quote the path")
        roots[root] = place(value)
    port = None
    if "port" in table:
        port = _typed(ctx, table, where, "port", int)
        if not 0 < port < 65536:
            raise ctx.fail(f"{where}.port", f"port {port} is out of range", "Use 1-65535")
    return TargetConfig(
        name=name, path=path, host=host,
        user=_str(ctx, table, where, "user", None) if "user" in table else None,
        port=port,
        python=_str(ctx, table, where, "python", None) if "python" in table else None,
        ssh_options=_str_list(ctx, table, where, "ssh_options", ()),
        ssh_program=(_str(ctx, table, where, "ssh_program", None, nonempty=True)
                     if "ssh_program" in table else None),
        roots=roots)


# -- authoring -------------------------------------------------------------------------------


def _patch_tables(patches: Iterable[Sequence[str]]) -> Any:
    import tomlkit

    aot = tomlkit.aot()
    for entry in patches:
        file, root, *rest = entry
        table = tomlkit.table()
        table["file"] = file
        table["root"] = root
        if rest and rest[0]:
            table["description"] = rest[0]
        aot.append(table)
    return aot


_SKELETON = """\
# Manifest of the fix {name_q}; the format is described in docs/manifest.md.
format = {format}
name = {name}
version = 1                      # bump on every change of the series (see [[changelog]])
title = {title}
status = "active"                # active | dead | superseded | upstreamed
rationale = {rationale}
depends_on = []                  # fixes that must be applied first

[upstream]
project = "sglang"
base_release = {base}          # the release the series was written against
releases = [{base}]            # releases it is known to apply to ([] = no release check)
root = "sglang"                  # the root whose release is checked
forwarding = "not-forwarded"     # not-forwarded | proposed | merged | rejected | not-applicable
reference = ""                   # upstream PR / issue / commit

# The series, applied in this order; each file is under patches/{name_raw}/.
{patches}
# Checks, optional; every kind is described in docs/manifest.md. For example:
# [[preconditions]]
# kind = "grep"
# path = "python/sglang/srt/..."
# pattern = "a line the series expects to find"
# count = 1
#
# [[verification]]
# kind = "python-syntax"
# path = "python/sglang/srt/..."

[[changelog]]                    # one entry per version, oldest first
version = 1
date = {date}
base_release = {base}
summary = "First version."
"""


def new_manifest_text(name: str, title: str, base_release: str,
                      patches: list[tuple[str, str]], rationale: str = "", *,
                      date: str | None = None) -> str:
    """A commented version-1 manifest that loads as-is (once its patch files exist).

    ``patches`` are ``(file, root)`` or ``(file, root, description)``. Without ``rationale``
    the text carries a prose placeholder to replace; checks are commented-out examples.
    The text is validated before it is returned, so a bad name or title fails here.
    """
    import tomlkit

    def q(value: Any) -> str:
        return tomlkit.item(value).as_string()

    why = rationale.strip() or ("Replace this: what was wrong, what the fix does, and the\n"
                                "evidence (logs, measurements, upstream discussion).")
    blocks = []
    for entry in patches:
        file, root, *rest = entry
        block = f"[[patches]]\nfile = {q(file)}\nroot = {q(root)}\n"
        if rest and rest[0]:
            block += f"description = {q(rest[0])}\n"
        blocks.append(block)
    text = _SKELETON.format(
        format=MANIFEST_FORMAT, name=q(name), name_q=name, name_raw=name, title=q(title),
        rationale=tomlkit.string(why + "\n", multiline=True).as_string(), base=q(base_release),
        patches="\n".join(blocks), date=q(date or _dt.date.today().isoformat()))
    _build_fix(_Ctx(Path(f"{name}.toml")), tomlkit.parse(text).unwrap(), Path("patches") / name)
    return text


def bump_manifest(path: Path | str, *, version: int, changelog_summary: str, date: str,
                  patches: list[tuple[str, str]] | None = None, base_release: str | None = None,
                  releases: list[str] | None = None) -> None:
    """Record a new version of the series in place, keeping comments and layout.

    ``patches`` replaces the ``[[patches]]`` list; ``base_release`` without ``releases`` also
    resets an explicit ``releases`` to ``[base_release]`` (a rebased series is only known to
    apply there). A changelog entry for ``version`` is appended. The result is validated
    before the file is replaced (atomically).
    """
    import tomlkit

    path = Path(path)
    ctx = _Ctx(path)
    doc = _read_toml(path, "manifest")
    current = _build_fix(ctx, doc.unwrap(), path.parent.parent / "patches" / path.stem)
    if version <= current.version:
        raise ctx.fail("version", f"new version {version} is not above the current version "
                       f"{current.version}", f"Use version {current.version + 1}")
    doc["version"] = version
    upstream = doc["upstream"]
    if base_release is not None:
        upstream["base_release"] = base_release
        if releases is None and "releases" in upstream:
            releases = [base_release]
    if releases is not None:
        upstream["releases"] = releases
    if patches is not None:
        doc["patches"] = _patch_tables(patches)
    entry = tomlkit.table()
    entry.update({"version": version, "date": date,
                  "base_release": base_release or current.upstream.base_release,
                  "summary": changelog_summary})
    if "changelog" in doc:
        aot = doc["changelog"]
        if len(aot) and not aot[-1].as_string().endswith("\n\n"):
            aot[-1].add(tomlkit.nl())  # a blank line before the new [[changelog]], as above it
        aot.append(entry)
    else:
        doc.add(tomlkit.nl())
        changelog = tomlkit.aot()
        changelog.append(entry)
        doc.add("changelog", changelog)
    text = tomlkit.dumps(doc)
    _build_fix(ctx, tomlkit.parse(text).unwrap(), current.patch_dir)
    _atomic_write_text(path, text)


def add_release(path: Path | str, release: str) -> bool:
    """Add ``release`` to ``upstream.releases`` in place (the series applies there unchanged).

    The series does not change, so the version does not either. Returns False when the
    release was listed already (nothing written). Comments and layout are kept.
    """
    import tomlkit

    path = Path(path)
    ctx = _Ctx(path)
    doc = _read_toml(path, "manifest")
    current = _build_fix(ctx, doc.unwrap(), path.parent.parent / "patches" / path.stem)
    if release in current.upstream.releases or not current.upstream.releases:
        return False
    doc["upstream"]["releases"] = [*current.upstream.releases, release]
    text = tomlkit.dumps(doc)
    _build_fix(ctx, tomlkit.parse(text).unwrap(), current.patch_dir)
    _atomic_write_text(path, text)
    return True


def version_and_patches(text: str) -> tuple[int | None, list[str]]:
    """The ``version`` and ``[[patches]].file`` names of a manifest's text, unvalidated.

    For reading old versions from the catalog's git history (``patchkit diff --versions``);
    an unreadable text gives ``(None, [])``.
    """
    import tomlkit

    try:
        data = tomlkit.parse(text).unwrap()
    except Exception:  # noqa: BLE001 - any broken old text just has no version
        return None, []
    version = data.get("version")
    files = [p.get("file") for p in data.get("patches", []) if isinstance(p, dict)]
    return (version if isinstance(version, int) else None), [f for f in files if isinstance(f, str)]


def _atomic_write_text(path: Path, text: str) -> None:
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


__all__ = ["load_manifest", "load_config", "new_manifest_text", "bump_manifest", "add_release", "version_and_patches", "NAME_RE"]
