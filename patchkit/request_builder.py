"""Build the engine request of an operation over fixes of a catalog (docs/design.md, "Engine
request"): everything travels in it, so the engine never reads the catalog."""

from __future__ import annotations

from typing import Any, Sequence

from .catalog import Catalog
from .catalog.model import Fix
from .engine.contract import FORMAT, OPS, reversed_record
from .errors import ManifestError, PatchFormatError, UsageError

#: The fixes whose series could not be read, by name, each with its error (``unreadable``).
Unreadable = dict[str, ManifestError | PatchFormatError]


def build_request(catalog: Catalog, fixes: list[Fix], *, op: str,
                  roots: dict[str, str], state_root: str, python: str | None,
                  dry_run: bool = False, force: bool = False, lock_timeout: float = 30.0,
                  commit: bool = False, git: bool = True, sync: bool = False,
                  lazy: bool = False, recorded_only: Sequence[tuple[str, int]] = (),
                  applied_only: bool = False, txn: str | None = None,
                  unreadable: Unreadable | None = None) -> dict[str, Any]:
    """The engine request for ``op`` over ``fixes``, already in the order the op needs.
    ``lazy`` (a status run in this process): each series is read when the engine first uses it.
    ``recorded_only`` (a rollback or a verify): ``(name, version)`` of fixes the target
    records and the catalog no longer holds, answered from their record: restored from their
    backups, verified against the hashes of the files they wrote (a FIX object of name and
    version, marked ``recorded_only``).
    ``applied_only`` (a verify of a fleet's hosts, no fix named): of ``fixes``, each target
    verifies those it records as applied.
    ``txn`` (an undo): the transaction to undo, as the change's result named it (None: the
    target's last change).
    ``unreadable`` (a status or a verify, which answer a fix the target records from its
    record): a fix whose series cannot be read goes with none, its error put here by name
    (when it is read, for a ``lazy`` request), instead of ending the request."""
    if op not in OPS:
        raise UsageError(f"unknown operation '{op}'; use one of {', '.join(OPS)}", op=op)
    if state_root not in roots:
        raise UsageError(f"the state root '{state_root}' is not one of the target's roots "
                         f"({', '.join(sorted(roots)) or 'none'}). Name a defined root",
                         state_root=state_root)
    if op != "status":
        for fix in fixes:
            missing = [r for r in fix.roots if r not in roots]
            if missing:
                from .catalog.reader import key_where  # here: only a refusal names the line

                where = key_where(fix.manifest_path, "root", missing[0])
                raise UsageError(f"fix '{fix.name}' uses the root(s) {', '.join(missing)} "
                                 f"({where}), which the target does not define (it has "
                                 f"{', '.join(sorted(roots))}). Define them with "
                                 f"{how_to_give(missing)}, or fix the root's name in the "
                                 "manifest", fix=fix.name, roots=missing,
                                 file=str(fix.manifest_path))
    inside = {fix.name for fix in fixes}  # the engine looks for dependencies outside them
    outside = dict.fromkeys(dep for fix in fixes for dep in fix.depends_on if dep not in inside)
    request: dict[str, Any] = {
        "format": FORMAT,
        "op": op,
        "dry_run": bool(dry_run),
        "force": bool(force),
        "roots": dict(roots),
        "state_root": state_root,
        "python": python,
        "lock_timeout": float(lock_timeout),
        "fixes": _recorded_only(recorded_only)
                 + [fix_request(fix, catalog, lazy=lazy and op == "status", unreadable=unreadable)
                    for fix in fixes],
        "dependencies": [] if op == "status" else [fix_request(catalog.get(n), catalog) for n in outside],
        "commit": bool(commit),
        "git": bool(git),
    }
    if sync and op == "apply":  # skip what the target does not need (docs/cli.md, sync)
        request["sync"] = True
        _unasked(catalog, fixes, request["fixes"])
    if applied_only and op == "verify":
        request["applied_only"] = True
    if op == "undo":
        request["txn"] = txn
    if op == "apply":
        _check_modes(request["fixes"])
    return request


def _unasked(catalog: Catalog, fixes: list[Fix], entries: list[dict[str, Any]]) -> None:
    """A sync from a catalog of the user's own: each shipped fix (beside it) that none of the
    user's fixes of the sync needs, by ``depends_on`` however deep, is marked ``if_recorded``:
    synced only where the target records it, never brought unasked (docs/cli.md, sync)."""
    needed: set[str] = set()
    todo = [f.name for f in fixes if not catalog.shipped(f.name)]
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(catalog.get(name).depends_on)
    for entry in entries:
        if catalog.shipped(entry["name"]) and entry["name"] not in needed:
            entry["if_recorded"] = True


def _recorded_only(fixes: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    if not fixes:
        return []
    from .engine.request import recorded_only_fix  # here: the engine's parser, loaded when used

    return [recorded_only_fix(name, version) for name, version in fixes]


def _check_modes(fixes: list[dict[str, Any]]) -> None:
    """The engine's refusal of special file modes, raised before any target is contacted."""
    from .engine.hunks import parse_mode
    from .engine.request import unsafe_mode

    for fix in (f for f in fixes if not f.get("allow_special_modes")):
        for rec in (r for r in fix.get("files") or () if r.get("mode")):
            err = unsafe_mode(fix["name"], rec.get("patch", ""), rec["root"], rec["path"],
                              parse_mode(rec["mode"]))
            if err is not None:
                raise err


def how_to_give(roots: Sequence[str]) -> str:
    """How a run is given the roots ``roots`` it lacks: the advice of apply's refusal of a fix
    on them, and of sync's note on such a fix it skips."""
    return "%s or [targets.NAME.roots] in patchkit.toml" % " ".join(f"--root {r}=PATH" for r in roots)


#: The keys of a FIX a variant replaces (docs/design.md, "Variants").
VARIANT_KEYS = ("version", "release", "patches", "files", "revert", "preconditions",
                "verification", "scripts")


def fix_request(fix: Fix, catalog: Catalog, lazy: bool = False,
                unreadable: Unreadable | None = None) -> dict[str, Any]:
    """One FIX object of the request; ``catalog`` resolves the fixes it names. A fix with
    ``[[variants]]`` carries each (the keys it replaces) for the engine to choose by the
    target's release; a fix upstream since a release carries it as ``upstream_since``."""
    out = _fix_object(fix, catalog, lazy, unreadable)
    if fix.variants:
        out["variants"] = [{k: v for k, v in _fix_object(fix.as_variant(var), catalog, lazy,
                                                          unreadable).items()
                            if k in VARIANT_KEYS} for var in fix.variants]
    if fix.upstream_since:
        out["upstream_since"] = fix.upstream_since
    if catalog.read_only or catalog.shipped(fix.name):  # a new version is made elsewhere:
        out["shipped"] = str(fix.manifest_path.parent.parent)  # the catalog to copy it from
    return out


def _fix_object(fix: Fix, catalog: Catalog, lazy: bool = False,
                unreadable: Unreadable | None = None) -> dict[str, Any]:
    if lazy or unreadable is not None:
        series = _Series(fix, unreadable)
        patches, files = (_Half(series, 0), _Half(series, 1)) if lazy else (series.half(0), series.half(1))
    else:
        patches, files = _series(fix)
    revert = None
    if fix.revert is not None:
        revert = {"root": fix.revert.root, "commit": fix.revert.commit or None,
                  "fix": fix.revert.fix or None, "paths": list(fix.revert.paths),
                  "own_series": bool(fix.patches)}
        if fix.revert.fix:
            named = _named(catalog, fix, fix.revert.fix, "revert.fix")
            # outside git, whether its change can be in a release's files ([]: any release)
            revert["fix_releases"] = list(named.serves())
            # the reverted fix's variant written for the same release, else its top level
            named = next((v for v in named.all_variants()
                          if v.upstream.base_release == fix.upstream.base_release), named)
            revert.update(_commit_of(named))
            if not fix.patches:  # outside git: the named fix's series, reversed
                files = [reversed_record(rec) for rec in reversed(_series(named)[1])]
    return {
        "name": fix.name,
        "version": fix.version,
        "title": fix.title,
        "rationale": fix.rationale,
        "requires": list(fix.depends_on),
        "release": ({"root": fix.upstream.root, "versions": list(fix.upstream.releases)}
                    if fix.upstream.releases else None),
        "patches": patches,
        "files": files,
        "revert": revert,
        "preconditions": [_check(c, fix, catalog) for c in fix.preconditions],
        "verification": [_check(c, fix, catalog) for c in fix.verification],
        "actions": {"purge_pycache": fix.actions.purge_pycache},
        "scripts": _scripts(fix),
        "rollback": {"strategy": fix.rollback.strategy},
        "allow_special_modes": fix.allow_special_modes,
    }


def _series(fix: Fix) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The fix's patches (file, sha256, diff_sha256: ``series_records``) and their FILE
    records."""
    from .catalog.series import series_records  # unidiff: not imported by a status that needs none

    try:
        digests, files = series_records([(ref.path, ref.root) for ref in fix.patches])
    except OSError as exc:
        raise ManifestError(f"{fix.manifest_path}: cannot read patch {exc.filename}: "
                            f"{exc.strerror}. Restore the file", file=str(fix.manifest_path),
                            key="patches", fix=fix.name) from None
    except PatchFormatError as exc:  # the patch file names itself; its fix is said here
        exc.details.setdefault("fix", fix.name)
        raise
    return [{"file": ref.file, **digest} for ref, digest in zip(fix.patches, digests)], files


class _Series:
    """``_series`` of a fix, run when either half is first used: lazily, only in a request
    handed to the engine in this process (never serialized), where a status reads the series
    of the fixes the target does not record, and no other (docs/performance.md).
    ``unreadable`` (see :func:`build_request`): a series that cannot be read is empty, its
    error kept there by the fix's name."""

    def __init__(self, fix: Fix, unreadable: Unreadable | None = None) -> None:
        self.fix, self.unreadable = fix, unreadable
        self.read: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None

    def half(self, i: int) -> list[dict[str, Any]]:
        if self.read is None:
            try:
                self.read = _series(self.fix)
            except (ManifestError, PatchFormatError) as err:
                if self.unreadable is None:
                    raise
                self.unreadable.setdefault(self.fix.name, err)
                self.read = ([], [])
        return self.read[i]


class _Half(Sequence[dict[str, Any]]):
    """The patches (0) or the FILE records (1) of a :class:`_Series`."""

    def __init__(self, series: _Series, i: int) -> None:
        self.series, self.i = series, i

    def __getitem__(self, k: Any) -> Any:
        return self.series.half(self.i)[k]

    def __len__(self) -> int:
        return len(self.series.half(self.i))

    def __bool__(self) -> bool:  # each patch has a file record (or fails to read): no read
        read = self.series.read
        return bool(self.series.fix.patches) if read is None else bool(read[self.i])




def _named(catalog: Catalog, fix: Fix, name: str, key: str) -> Fix:
    if name not in catalog.names():
        raise ManifestError(f"{fix.manifest_path}: {key} names fix '{name}', which the catalog "
                            f"{catalog.root} does not hold (key '{key}'). Fix the name",
                            file=str(fix.manifest_path), key=key)
    return catalog.get(name)


def _commit_of(named: Fix) -> dict[str, Any]:
    """How the engine finds the commit holding ``named``'s series: the series itself (the
    engine hashes it with the commits' changes in one ``git patch-id``) and its files."""
    from .catalog.series import patch_text  # here: only a revert fix's request reads a series

    series = "".join(patch_text(ref.path) for ref in named.patches)
    paths = sorted({rec["path"] for rec in _series(named)[1]})
    return {"series": series, "fix_paths": paths}


def _check(check: Any, fix: Fix, catalog: Catalog) -> dict[str, Any]:
    out = check.to_request()
    if check.kind == "git-contains" and check.get("fix"):
        out.update(_commit_of(_named(catalog, fix, str(check.get("fix")), "preconditions.fix")))
    return out


def _scripts(fix: Fix) -> dict[str, str]:
    out = {}
    for script in fix.scripts:
        path = fix.patch_dir / script
        try:
            out[script] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise ManifestError(f"{fix.manifest_path}: cannot read check script {path}: "
                                f"{reason}. Restore it as UTF-8 text",
                                file=str(fix.manifest_path), key="script") from None
    return out
