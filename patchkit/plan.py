"""Turn fixes of a catalog into an engine request (docs/design.md, "Engine request").

Everything the engine needs travels in the request: parsed hunks, patch hashes, check
scripts' source. The engine never reads the catalog, so a remote host needs nothing but the
request. Selection helpers put fixes in the order the engine expects (dependencies first for
apply, dependents first for rollback) and refuse dead or superseded fixes for apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from .catalog import Catalog, FixStub
from .errors import ManifestError, UsageError

if TYPE_CHECKING:
    from .catalog.model import Fix

REQUEST_FORMAT = 1
OPS = ("apply", "rollback", "status", "verify")


def fixes_for_apply(catalog: Catalog, names: Iterable[str], with_deps: bool = False, *,
                    allow_inactive: bool = False) -> list[Fix]:
    """The named fixes in application order (dependencies first, included ``with_deps``)."""
    fixes = catalog.dependency_order(names, with_deps=with_deps)
    if not allow_inactive:
        for fix in fixes:
            if fix.is_inactive:
                raise UsageError(_inactive_message(catalog, fix), fix=fix.name, status=fix.status)
    return fixes


def _inactive_message(catalog: Catalog, fix: Fix) -> str:
    replaced = [f.name for f in catalog.replacements(fix.name)]
    if replaced:
        instead = (f"it was replaced by {', '.join(replaced)}; apply "
                   f"{'that' if len(replaced) == 1 else 'those'} instead")
    else:
        instead = "nothing in the catalog replaces it"
    return (f"fix '{fix.name}' is {fix.status} ({instead}). To apply it anyway, allow inactive "
            f"fixes (--allow-inactive); its manifest is {fix.manifest_path}")


def fixes_for_rollback(catalog: Catalog, names: Iterable[str], *,
                       with_dependents: bool = False) -> list[Fix]:
    """The named fixes in rollback order (dependents first); ``with_dependents`` adds every
    fix of the catalog that depends on one of them."""
    wanted = list(dict.fromkeys(names))
    if with_dependents:
        for name in list(wanted):
            wanted.extend(f.name for f in catalog.dependents(name) if f.name not in wanted)
    return list(reversed(catalog.dependency_order(wanted)))


def build_request(catalog: Catalog, fixes: list[Fix] | list[FixStub], *, op: str,
                  roots: dict[str, str], state_root: str, python: str | None,
                  dry_run: bool = False, force: bool = False, lock_timeout: float = 30.0,
                  commit: bool = False) -> dict[str, Any]:
    """The engine request for ``op`` over ``fixes`` (already in the order the op needs).

    A status may list :class:`FixStub` s (no series read); its ``dependencies`` stay empty,
    as the engine reads them for apply only.
    """
    if op not in OPS:
        raise UsageError(f"unknown operation '{op}'; use one of {', '.join(OPS)}", op=op)
    if state_root not in roots:
        raise UsageError(f"the state root '{state_root}' is not one of the target's roots "
                         f"({', '.join(sorted(roots)) or 'none'}). Name a defined root",
                         state_root=state_root)
    if op != "status":
        stubs = [fix.name for fix in fixes if isinstance(fix, FixStub)]
        if stubs:
            raise UsageError(f"a {op} request needs the full fixes, not stubs "
                             f"({', '.join(stubs)}); pass Fix objects (Catalog.get)",
                             fixes=stubs)
        for fix in fixes:
            missing = [r for r in fix.roots if r not in roots]
            if missing:
                raise UsageError(f"fix '{fix.name}' uses the root(s) {', '.join(missing)}, which "
                                 f"the target does not define (it has {', '.join(sorted(roots))}). "
                                 "Define them with --root NAME=PATH or [targets.NAME.roots] in "
                                 "patchkit.toml", fix=fix.name, roots=missing)
    request = {
        "format": REQUEST_FORMAT,
        "op": op,
        "dry_run": bool(dry_run),
        "force": bool(force),
        "roots": dict(roots),
        "state_root": state_root,
        "python": python,
        "lock_timeout": float(lock_timeout),
        "fixes": [stub_request(fix) if isinstance(fix, FixStub) else fix_request(fix, catalog)
                  for fix in fixes],
        "dependencies": [] if op == "status" else [
            fix_request(dep, catalog) for dep in _outside_dependencies(catalog, fixes)],
        "commit": bool(commit),
    }
    if op == "apply":
        _check_modes(request["fixes"])
    return request


def _check_modes(fixes: list[dict[str, Any]]) -> None:
    """The engine's refusal of special file modes (setuid, setgid, sticky, world-writable),
    raised here before any target is contacted: only records with a mode line are looked at."""
    from .engine.hunks import parse_mode
    from .engine.request import unsafe_mode

    for fix in fixes:
        if fix.get("allow_special_modes"):
            continue
        for rec in fix.get("files") or ():
            if rec.get("mode"):
                err = unsafe_mode(fix["name"], rec.get("patch", ""), rec["root"], rec["path"],
                                  parse_mode(rec["mode"]))
                if err is not None:
                    raise err


def _outside_dependencies(catalog: Catalog, fixes: list[Fix]) -> list[Fix]:
    """Fixes required by ``fixes`` but not among them: the engine checks they are applied or
    present in the files (a fork may carry a prerequisite as a commit)."""
    inside = {fix.name for fix in fixes}
    out: dict[str, Fix] = {}
    for fix in fixes:
        for dep in fix.depends_on:
            if dep not in inside and dep not in out:
                out[dep] = catalog.get(dep)
    return list(out.values())


def stub_request(stub: FixStub) -> dict[str, Any]:
    """A status's FIX stub: the engine answers it from the state, or asks for the full fix."""
    return {"name": stub.name, "version": stub.version, "stub": True}


def fix_request(fix: Fix, catalog: Catalog | None = None) -> dict[str, Any]:
    """One FIX object of the request; ``catalog`` resolves the fixes a revert or a git check
    names (their series' patch-ids travel in the request, so the host needs no catalog)."""
    patches, files = _series(fix)
    release = None
    if fix.upstream.releases:
        release = {"root": fix.upstream.root, "versions": list(fix.upstream.releases)}
    revert = None
    if fix.revert is not None:
        revert = {"root": fix.revert.root, "commit": fix.revert.commit or None,
                  "fix": fix.revert.fix or None, "paths": list(fix.revert.paths),
                  "own_series": bool(files)}
        if fix.revert.fix:
            named = _named(catalog, fix, fix.revert.fix, "revert.fix")
            revert.update(_commit_of(named))
            if not files:  # outside git: the named fix's series, reversed
                files = [_reversed(rec) for rec in reversed(_series(named)[1])]
    return {
        "name": fix.name,
        "version": fix.version,
        "title": fix.title,
        "rationale": fix.rationale,
        "requires": list(fix.depends_on),
        "release": release,
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
    """The fix's patches (file, sha256) and their FILE records (parsed once per series)."""
    from .catalog.series import read_series  # not at start-up: a status of stubs reads no series

    try:
        digests, files = read_series([(ref.path, ref.root) for ref in fix.patches])
    except OSError as exc:
        raise ManifestError(f"{fix.manifest_path}: cannot read patch {exc.filename}: "
                            f"{exc.strerror}. Restore the file", file=str(fix.manifest_path),
                            key="patches") from None
    patches = [{"file": ref.file, "sha256": digest} for ref, digest in zip(fix.patches, digests)]
    return patches, files


def _named(catalog: Catalog | None, fix: Fix, name: str, key: str) -> Fix:
    if catalog is None:
        raise UsageError(f"fix '{fix.name}' names fix '{name}' ({key}); build its request with "
                         "the catalog", fix=fix.name)
    if name not in catalog.names():
        raise ManifestError(f"{fix.manifest_path}: {key} names fix '{name}', which the catalog "
                            f"{catalog.root} does not hold (key '{key}'). Fix the name",
                            file=str(fix.manifest_path), key=key)
    return catalog.get(name)


def _commit_of(named: Fix) -> dict[str, Any]:
    """How the engine finds the commit holding ``named``'s series: its patch-id, and the
    files to look at (so only commits touching them are read)."""
    from .gitrepo import patch_id  # GitPython: loaded only by a fix that needs git

    text = "".join(ref.path.read_text(encoding="utf-8", errors="surrogateescape")
                   for ref in named.patches)
    pid = patch_id(text)
    paths = sorted({rec["path"] for rec in _series(named)[1]})
    return {"patch_ids": [pid] if pid else [], "fix_paths": paths}


def _check(check: Any, fix: Fix, catalog: Catalog | None) -> dict[str, Any]:
    out = check.to_request()
    if check.kind == "git-contains" and check.get("fix"):
        out.update(_commit_of(_named(catalog, fix, str(check.get("fix")), "preconditions.fix")))
    return out


def _reversed(rec: dict[str, Any]) -> dict[str, Any]:
    """A FILE record undone: sides swapped, creations become deletions."""
    op = {"create": "delete", "delete": "create"}.get(rec["op"], rec["op"])
    hunks = [dict(_flipped(h), old_start=h["new_start"], old_count=h["new_count"],
                  new_start=h["old_start"], new_count=h["old_count"]) for h in rec["hunks"]]
    return dict(rec, op=op, hunks=hunks)


_FLIP = {"+": "-", "-": "+", " ": " "}


def _flipped(hunk: dict[str, Any]) -> dict[str, Any]:
    """The hunk's lines with "+" and "-" swapped, in whichever form it carries them (a
    ``body``'s "\\ No newline" marker lines stay as they are)."""
    if "body" in hunk:
        from .catalog.series import split_lines

        body = "".join(_FLIP.get(line[0], line[0]) + line[1:]
                       for line in split_lines(hunk["body"]))
        return {"body": body}
    return {"lines": [[_FLIP[k], t] for k, t in hunk["lines"]]}


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
