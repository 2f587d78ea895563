"""The catalog's model: what a manifest (``manifests/<fix>.toml``) and ``patchkit.toml`` say.

Frozen dataclasses only, built by :mod:`patchkit.catalog.manifest` after validation, so the rest of
patchkit can trust every field (types, enums, required keys) without re-checking. The format
itself is written down in ``docs/manifest.md``; this module mirrors it.

The classes are declared with ``@record`` instead of ``@dataclass(frozen=True)``: they stay
dataclasses (``dataclasses.fields``, ``replace`` and ``asdict`` work, assignment raises
``FrozenInstanceError``), but their ``__init__`` is written by hand and ``__eq__``, ``__hash__``,
``__repr__`` and the frozen ``__setattr__`` come from :class:`Frozen`, because the generated
methods cost about a millisecond per class at import, a large part of a small run's start.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

#: The manifest format this patchkit reads and writes; a newer one asks for an upgrade.
MANIFEST_FORMAT = 1

STATUS_ACTIVE = "active"
STATUS_DEAD = "dead"
STATUS_SUPERSEDED = "superseded"
STATUS_UPSTREAMED = "upstreamed"
STATUSES = (STATUS_ACTIVE, STATUS_DEAD, STATUS_SUPERSEDED, STATUS_UPSTREAMED)
#: Statuses refused for apply unless the caller insists (``allow_inactive``).
INACTIVE_STATUSES = (STATUS_DEAD, STATUS_SUPERSEDED)

FORWARDING_STATES = ("not-forwarded", "proposed", "merged", "rejected", "not-applicable")

ROLLBACK_RESTORE = "restore"
ROLLBACK_REVERSE = "reverse"
ROLLBACK_STRATEGIES = (ROLLBACK_RESTORE, ROLLBACK_REVERSE)

DEFAULT_ROOT = "sglang"

#: Check kinds -> (required keys, optional keys), besides ``kind``, ``name`` and ``timeout``
#: (every kind). ``root`` defaults to the fix's upstream root; grep needs exactly one of
#: count/present.
CHECK_KEYS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = MappingProxyType({
    "grep": (("path", "pattern"), ("root", "regex", "count", "present")),
    "sha256": (("path", "sha256"), ("root",)),
    "python-syntax": (("path",), ("root",)),
    "bash-syntax": (("path",), ("root",)),
    "python-import": (("module",), ("root", "sys_path")),
    "python-script": (("script",), ("root", "args")),
    "command": (("argv",), ("root", "expect_exit")),
    # git checks: exactly one of commit/fix (git-contains), of tag/commit (git-descends-from)
    "git-contains": ((), ("root", "commit", "fix", "present")),
    "git-descends-from": ((), ("root", "tag", "commit")),
})
CHECK_KINDS = tuple(CHECK_KEYS)

#: Seconds a check may run unless its ``timeout`` says otherwise (docs/manifest.md); the
#: engine keeps the same table (patchkit.engine.checks.DEFAULT_TIMEOUTS) for requests without.
CHECK_TIMEOUTS: Mapping[str, float] = MappingProxyType({
    "grep": 60.0, "sha256": 60.0, "python-syntax": 60.0, "bash-syntax": 60.0,
    "python-import": 300.0, "python-script": 300.0, "command": 300.0,
    "git-contains": 300.0, "git-descends-from": 300.0,
})

#: Defaults written into the engine request so the engine never guesses.
CHECK_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    kind: MappingProxyType(dict(extra, timeout=CHECK_TIMEOUTS[kind])) for kind, extra in (
        ("grep", {"regex": False}),
        ("sha256", {}),
        ("python-syntax", {}),
        ("bash-syntax", {}),
        ("python-import", {}),
        ("python-script", {"args": ()}),
        ("command", {"expect_exit": 0}),
        ("git-contains", {"present": True}),
        ("git-descends-from", {}),
    )
})


class Frozen:
    """The methods ``@dataclass(frozen=True)`` would generate, written once for every record."""

    __slots__ = ()
    __dataclass_fields__: Any

    def _values(self) -> tuple[Any, ...]:
        d = self.__dict__
        return tuple(d[name] for name in self.__dataclass_fields__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        d = self.__dict__
        inner = ", ".join(f"{name}={d[name]!r}" for name in self.__dataclass_fields__)
        return f"{self.__class__.__qualname__}({inner})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


def record(cls: type) -> type:
    """Make ``cls`` (a :class:`Frozen` with a hand-written ``__init__``) a dataclass.

    Only the fields are registered: nothing is generated, so this costs a tenth of a frozen
    ``@dataclass`` while ``dataclasses.fields``/``replace``/``asdict`` keep working."""
    return dataclass(init=False, repr=False, eq=False)(cls)


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


@record
class Upstream(Frozen):
    """Where the series comes from and which releases it is known to apply to."""

    base_release: str
    releases: tuple[str, ...]  # empty: no release precondition
    project: str = "sglang"
    root: str = DEFAULT_ROOT
    forwarding: str = "not-forwarded"
    reference: str = ""

    def __init__(self, base_release: str, releases: tuple[str, ...], project: str = "sglang",
                 root: str = DEFAULT_ROOT, forwarding: str = "not-forwarded",
                 reference: str = "") -> None:
        self.__dict__.update(base_release=base_release, releases=releases, project=project,
                             root=root, forwarding=forwarding, reference=reference)


@record
class PatchRef(Frozen):
    """One patch of the series: ``patches/<fix>/<file>``, its paths relative to ``root``."""

    file: str
    root: str
    description: str
    path: Path

    def __init__(self, file: str, root: str, description: str, path: Path) -> None:
        self.__dict__.update(file=file, root=root, description=description, path=path)


@record
class Check(Frozen):
    """A precondition or verification; ``params`` holds the kind's keys (see CHECK_KEYS)."""

    kind: str
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __init__(self, kind: str, params: Mapping[str, Any] | None = None) -> None:
        self.__dict__.update(kind=kind, params=_freeze(dict(params or {})))

    @property
    def name(self) -> str:
        return str(self.params.get("name", ""))

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)

    def to_request(self) -> dict[str, Any]:
        """The CHECK object of the engine request (docs/design.md), defaults filled in."""
        out: dict[str, Any] = {"kind": self.kind}
        for key, value in self.params.items():
            out[key] = _thaw(value)
        for key, value in CHECK_DEFAULTS.get(self.kind, {}).items():
            out.setdefault(key, _thaw(value))
        return out

    def describe(self) -> str:
        """One line for people: the label if any, else what the check looks at."""
        p = self.params
        where = f"{p.get('root', DEFAULT_ROOT)}:{p['path']}" if "path" in p else ""
        if self.kind == "grep":
            want = f"= {p['count']}" if "count" in p else ("present" if p.get("present") else "absent")
            what = f"grep {p['pattern']!r} in {where} {want}"
        elif self.kind in ("python-syntax", "bash-syntax", "sha256"):
            what = f"{self.kind} {where}"
        elif self.kind == "python-import":
            what = f"import {p['module']}"
        elif self.kind == "python-script":
            what = f"python {p['script']}"
        elif self.kind == "git-contains":
            thing = f"commit {p['commit']}" if "commit" in p else f"the commit of fix {p['fix']}"
            what = f"HEAD {'contains' if p.get('present', True) else 'does not contain'} {thing}"
        elif self.kind == "git-descends-from":
            what = f"HEAD descends from {'tag ' + p['tag'] if 'tag' in p else 'commit ' + p['commit']}"
        else:
            what = " ".join(str(a) for a in p.get("argv", ()))
        return f"{self.name} ({what})" if self.name else what


@record
class Actions(Frozen):
    """``[actions]``: what the applier does besides writing the patched files."""

    purge_pycache: bool = True

    def __init__(self, purge_pycache: bool = True) -> None:
        self.__dict__["purge_pycache"] = purge_pycache


@record
class Rollback(Frozen):
    """``[rollback]``: how the fix is undone."""

    strategy: str = ROLLBACK_RESTORE
    notes: str = ""

    def __init__(self, strategy: str = ROLLBACK_RESTORE, notes: str = "") -> None:
        self.__dict__.update(strategy=strategy, notes=notes)


@record
class Revert(Frozen):
    """``[revert]``: the fix is the inverse of a commit, merged onto today's files (docs/git.md).

    The commit is named by id (``commit``) and/or by the fix whose series it committed
    (``fix``, found by patch-id, so one manifest serves every fork); ``paths`` restricts it.
    """

    commit: str = ""
    fix: str = ""
    paths: tuple[str, ...] = ()
    root: str = DEFAULT_ROOT

    def __init__(self, commit: str = "", fix: str = "", paths: tuple[str, ...] = (),
                 root: str = DEFAULT_ROOT) -> None:
        self.__dict__.update(commit=commit, fix=fix, paths=paths, root=root)


@record
class ChangelogEntry(Frozen):
    """One ``[[changelog]]`` entry: a version of the series and why it changed."""

    version: int
    date: str  # ISO date, YYYY-MM-DD
    summary: str
    base_release: str = ""

    def __init__(self, version: int, date: str, summary: str, base_release: str = "") -> None:
        self.__dict__.update(version=version, date=date, summary=summary,
                             base_release=base_release)


_NO_ACTIONS = Actions()
_NO_ROLLBACK = Rollback()


@record
class Fix(Frozen):
    """A validated manifest, with where it lives (``manifest_path``, ``patch_dir``)."""

    format: int
    name: str
    version: int
    title: str
    status: str
    rationale: str
    upstream: Upstream
    patches: tuple[PatchRef, ...]
    manifest_path: Path
    patch_dir: Path
    depends_on: tuple[str, ...] = ()
    supersedes: tuple[str, ...] = ()
    reverts: str = ""
    preconditions: tuple[Check, ...] = ()
    verification: tuple[Check, ...] = ()
    actions: Actions = _NO_ACTIONS
    rollback: Rollback = _NO_ROLLBACK
    changelog: tuple[ChangelogEntry, ...] = ()
    revert: Revert | None = None
    allow_special_modes: bool = False  # files may be made setuid, setgid, sticky, o+w

    def __init__(self, format: int, name: str, version: int, title: str, status: str,
                 rationale: str, upstream: Upstream, patches: tuple[PatchRef, ...],
                 manifest_path: Path, patch_dir: Path, depends_on: tuple[str, ...] = (),
                 supersedes: tuple[str, ...] = (), reverts: str = "",
                 preconditions: tuple[Check, ...] = (), verification: tuple[Check, ...] = (),
                 actions: Actions = _NO_ACTIONS, rollback: Rollback = _NO_ROLLBACK,
                 changelog: tuple[ChangelogEntry, ...] = (), revert: Revert | None = None,
                 allow_special_modes: bool = False) -> None:
        self.__dict__.update(
            format=format, name=name, version=version, title=title, status=status,
            rationale=rationale, upstream=upstream, patches=patches, manifest_path=manifest_path,
            patch_dir=patch_dir, depends_on=depends_on, supersedes=supersedes, reverts=reverts,
            preconditions=preconditions, verification=verification, actions=actions,
            rollback=rollback, changelog=changelog, revert=revert,
            allow_special_modes=allow_special_modes)

    @property
    def is_inactive(self) -> bool:
        return self.status in INACTIVE_STATUSES

    @property
    def checks(self) -> tuple[Check, ...]:
        return self.preconditions + self.verification

    @property
    def scripts(self) -> tuple[str, ...]:
        """Script paths (relative to ``patch_dir``) the checks run, each once, in order."""
        seen: dict[str, None] = {}
        for check in self.checks:
            if check.kind == "python-script":
                seen.setdefault(str(check.get("script")), None)
        return tuple(seen)

    def to_json(self) -> dict[str, Any]:
        """The fix as plain data for ``--json`` output."""
        return {
            "name": self.name,
            "version": self.version,
            "title": self.title,
            "status": self.status,
            "rationale": self.rationale,
            "depends_on": list(self.depends_on),
            "supersedes": list(self.supersedes),
            "reverts": self.reverts,
            "upstream": {
                "project": self.upstream.project,
                "base_release": self.upstream.base_release,
                "releases": list(self.upstream.releases),
                "root": self.upstream.root,
                "forwarding": self.upstream.forwarding,
                "reference": self.upstream.reference,
            },
            "patches": [{"file": p.file, "root": p.root, "description": p.description} for p in self.patches],
            "preconditions": [c.to_request() for c in self.preconditions],
            "verification": [c.to_request() for c in self.verification],
            "actions": {"purge_pycache": self.actions.purge_pycache},
            "rollback": {"strategy": self.rollback.strategy, "notes": self.rollback.notes},
            "allow_special_modes": self.allow_special_modes,
            "revert": None if self.revert is None else {
                "commit": self.revert.commit, "fix": self.revert.fix,
                "paths": list(self.revert.paths), "root": self.revert.root},
            "changelog": [
                {"version": c.version, "date": c.date, "base_release": c.base_release, "summary": c.summary}
                for c in self.changelog
            ],
        }

    @property
    def roots(self) -> tuple[str, ...]:
        """Every target root the fix touches or checks, each once."""
        seen: dict[str, None] = {}
        if self.upstream.releases:
            seen.setdefault(self.upstream.root, None)
        for patch in self.patches:
            seen.setdefault(patch.root, None)
        if self.revert is not None:
            seen.setdefault(self.revert.root, None)
        for check in self.checks:
            seen.setdefault(str(check.get("root", self.upstream.root)), None)
        return tuple(seen)


@record
class TargetConfig(Frozen):
    """A named target of ``patchkit.toml``: a local root, or a root on a host over SSH."""

    name: str
    path: str  # the "sglang" root; absolute for a local target
    host: str | None = None
    user: str | None = None
    port: int | None = None
    python: str | None = None
    ssh_options: tuple[str, ...] = ()
    ssh_program: str | None = None
    roots: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __init__(self, name: str, path: str, host: str | None = None, user: str | None = None,
                 port: int | None = None, python: str | None = None,
                 ssh_options: tuple[str, ...] = (), ssh_program: str | None = None,
                 roots: Mapping[str, str] | None = None) -> None:
        self.__dict__.update(name=name, path=path, host=host, user=user, port=port,
                             python=python, ssh_options=ssh_options, ssh_program=ssh_program,
                             roots=MappingProxyType(dict(roots or {})))

    @property
    def is_remote(self) -> bool:
        return self.host is not None

    def all_roots(self) -> dict[str, str]:
        """Every root of the target by name, the main one as ``sglang``."""
        return {DEFAULT_ROOT: self.path, **self.roots}


@record
class ProjectConfig(Frozen):
    """``patchkit.toml``: named targets and, optionally, where the catalog is."""

    path: Path
    catalog: Path | None = None
    default_target: str | None = None  # used when no --target is given
    targets: Mapping[str, TargetConfig] = field(default_factory=lambda: MappingProxyType({}))
    shipped_fixes: bool = False  # a catalog's own file: the shipped catalog sits beside it

    def __init__(self, path: Path, catalog: Path | None = None, default_target: str | None = None,
                 targets: Mapping[str, TargetConfig] | None = None,
                 shipped_fixes: bool = False) -> None:
        self.__dict__.update(path=path, catalog=catalog, default_target=default_target,
                             targets=MappingProxyType(dict(targets or {})),
                             shipped_fixes=shipped_fixes)
