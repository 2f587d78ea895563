"""The catalog's model: what a manifest and ``patchkit.toml`` say (docs/manifest.md), as
frozen dataclasses built after validation, so the rest of patchkit trusts every field."""

from __future__ import annotations

import re
from dataclasses import asdict, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

# the request/result contract (check kinds, their keys and defaults, the primary root); the
# order of release names is the engine's, which chooses variants by it next to the files
from ..engine.contract import CHECK_DEFAULTS, PRIMARY_ROOT
from ..engine.recordbase import Record, record_dataclass
from ..engine.variants import release_key

#: The manifest format this patchkit reads and writes; a newer one asks for an upgrade.
MANIFEST_FORMAT = 1

STATUSES = ("active", "dead", "superseded", "upstreamed")
#: Statuses refused for apply unless the caller insists (``allow_inactive``).
INACTIVE_STATUSES = ("dead", "superseded")
FORWARDING_STATES = ("not-forwarded", "proposed", "merged", "rejected", "not-applicable")

#: the longest fix name: it is a file name (manifests/NAME.toml, patches/NAME/), a git path
#: and a state record key, everywhere a name is accepted
MAX_NAME = 100
NAME_RE = re.compile(r"[a-z0-9][a-z0-9.-]{0,%d}\Z" % (MAX_NAME - 1))
SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")

#: A release name such as 0.5.22 or 0.5.23rc1 (``[upstream] applied`` may also be a commit).
RELEASE_RE = re.compile(r"\d+(\.\d+)+([a-z]+\d*)?(\.post\d+)?\Z")


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain JSON data of a frozen value (mappings to dicts, tuples to lists)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@record_dataclass(frozen=True)
class Upstream(Record):
    """Where the series comes from and which releases it is known to apply to."""

    base_release: str
    releases: tuple[str, ...]  # empty: no release precondition
    project: str = "sglang"
    root: str = PRIMARY_ROOT
    forwarding: str = "not-forwarded"
    reference: str = ""
    bug: str = ""  # the bug report (DEP-3 Bug)
    origin: str = ""  # where the change comes from (DEP-3 Origin), e.g. an upstream commit URL
    applied: str = ""  # the upstream release (or commit) that contains it (DEP-3 Applied-Upstream)


@record_dataclass(frozen=True)
class PatchRef(Record):
    """One patch of the series: ``patches/<fix>/<file>``, its paths relative to ``root``."""

    file: str
    root: str
    description: str
    path: Path


@record_dataclass(frozen=True)
class Check(Record):
    """A precondition or verification; ``params`` holds the kind's keys (see CHECK_KEYS)."""

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _freeze(dict(self.params or {})))

    @property
    def name(self) -> str:
        return str(self.params.get("name", ""))

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)

    def to_request(self) -> dict[str, Any]:
        """The CHECK object of the engine request (docs/design.md), defaults filled in."""
        out: dict[str, Any] = {"kind": self.kind, **thaw(self.params)}
        for key, value in CHECK_DEFAULTS.get(self.kind, {}).items():
            out.setdefault(key, thaw(value))
        return out

    def describe(self) -> str:
        """One line for people: the label if any, else what the check looks at."""
        p = self.params
        where = f"{p.get('root', PRIMARY_ROOT)}:{p['path']}" if "path" in p else ""
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


@record_dataclass(frozen=True)
class Actions(Record):
    """``[actions]``: what the applier does besides writing the patched files."""

    purge_pycache: bool = True


@record_dataclass(frozen=True)
class Rollback(Record):
    """``[rollback]``: how the fix is undone."""

    strategy: str = "restore"
    notes: str = ""


@record_dataclass(frozen=True)
class Revert(Record):
    """``[revert]``: the inverse of a commit, named by id and/or by its fix (docs/git.md)."""

    commit: str = ""
    fix: str = ""
    paths: tuple[str, ...] = ()
    root: str = PRIMARY_ROOT

    def describe(self) -> str:
        """What it reverts, for people (``show``): the commit is tried first, then the fix's."""
        found = f"the commit holding the series of {self.fix} (found by patch-id)" if self.fix else ""
        what = ", else ".join(w for w in (self.commit and f"commit {self.commit}", found) if w)
        only = f", only {', '.join(self.paths)}" if self.paths else ""
        return f"{what}, in root {self.root}{only}"


@record_dataclass(frozen=True)
class ChangelogEntry(Record):
    """One ``[[changelog]]`` entry: a version of the series and why it changed."""

    version: int
    date: str  # ISO date, YYYY-MM-DD
    summary: str
    base_release: str = ""


@record_dataclass(frozen=True)
class Variant(Record):
    """A ``[[variants]]`` entry: another version of the fix's series, for other releases; its
    series is under ``patches/<fix>/<dir>/``. ``preconditions``/``verification`` None: the
    top level's."""

    version: int
    base_release: str
    releases: tuple[str, ...]
    dir: str
    patches: tuple[PatchRef, ...]
    preconditions: tuple[Check, ...] | None = None
    verification: tuple[Check, ...] | None = None


@record_dataclass(frozen=True)
class Fix(Record):
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
    actions: Actions = Actions()
    rollback: Rollback = Rollback()
    changelog: tuple[ChangelogEntry, ...] = ()
    revert: Revert | None = None
    allow_special_modes: bool = False  # files may be made setuid, setgid, sticky, o+w
    author: str = ""  # "Name <email>": the From of an exported patch (docs/interop.md)
    headers: tuple[tuple[str, str], ...] = ()  # other patch headers, in order (DEP-3 Reviewed-by)
    restart: tuple[str, ...] = ()  # restarts it needs: names of patchkit.toml's [restarts]
    variants: tuple[Variant, ...] = ()  # other versions kept for other releases (docs/manifest.md)

    @property
    def is_inactive(self) -> bool:
        return self.status in INACTIVE_STATUSES

    @property
    def checks(self) -> tuple[Check, ...]:
        return self.preconditions + self.verification

    @property
    def scripts(self) -> tuple[str, ...]:
        """Script paths (relative to ``patch_dir``) the checks run, each once, in order."""
        return tuple(dict.fromkeys(str(c.get("script")) for c in self.checks if c.kind == "python-script"))

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
            "upstream": thaw(asdict(self.upstream)),
            "patches": [{"file": p.file, "root": p.root, "description": p.description} for p in self.patches],
            "preconditions": [c.to_request() for c in self.preconditions],
            "verification": [c.to_request() for c in self.verification],
            "actions": asdict(self.actions),
            "rollback": asdict(self.rollback),
            "allow_special_modes": self.allow_special_modes,
            "revert": None if self.revert is None else thaw(asdict(self.revert)),
            "changelog": [asdict(c) for c in self.changelog],
            "author": self.author,
            "headers": [list(h) for h in self.headers],
            "variants": [{"version": v.version, "base_release": v.base_release,
                          "releases": list(v.releases), "dir": v.dir,
                          "patches": [{"file": p.file, "root": p.root} for p in v.patches]}
                         for v in self.variants],
        }

    @property
    def upstream_since(self) -> str:
        """The release whose upstream holds the change (``[upstream] applied`` when it names a
        release), or ``""``."""
        return self.upstream.applied if RELEASE_RE.match(self.upstream.applied) else ""

    def not_needed_on(self, release: str) -> bool:
        """``release`` is the upstream release holding the change, or later."""
        since = self.upstream_since
        return bool(since) and release_key(release) >= release_key(since)

    def as_variant(self, variant: Variant) -> "Fix":
        """The fix as that variant alone: its version, releases, series and checks."""
        return replace(self, version=variant.version, variants=(),
                       upstream=replace(self.upstream, base_release=variant.base_release,
                                        releases=variant.releases),
                       patches=variant.patches,
                       preconditions=self.preconditions if variant.preconditions is None
                       else variant.preconditions,
                       verification=self.verification if variant.verification is None
                       else variant.verification)

    def all_variants(self) -> tuple["Fix", ...]:
        """Every variant as a fix of its own, the top level first."""
        return (replace(self, variants=()),) + tuple(self.as_variant(v) for v in self.variants)

    def variant_for(self, release: str) -> "Fix | None":
        """The variant serving ``release`` (a fix without a release precondition serves all)."""
        if not self.upstream.releases:
            return replace(self, variants=())
        return next((v for v in self.all_variants() if release in v.upstream.releases), None)

    @property
    def next_version(self) -> int:
        """The version a new series of the fix gets: above every version it holds, the top
        level's and each variant's (a refreshed variant may be the newest)."""
        return max((self.version, *(v.version for v in self.variants))) + 1

    def serves(self) -> dict[str, int]:
        """Each release a version of the fix serves, and that version, the top level's first
        (empty: no release precondition, any release)."""
        served = {r: self.version for r in self.upstream.releases}
        served.update((r, v.version) for v in self.variants for r in v.releases)
        return served

    @property
    def variants_said(self) -> str:
        """Its ``[[variants]]`` as messages name them: ``v3 for 0.5.22; v5 for 0.5.21``."""
        return "; ".join(f"v{v.version} for {', '.join(v.releases)}" for v in self.variants)

    def variant_label(self) -> str:
        """How people name this version: ``v3 (0.5.22)``."""
        releases = ", ".join(self.upstream.releases)
        return f"v{self.version}" + (f" ({releases})" if releases else "")

    @property
    def roots(self) -> tuple[str, ...]:
        """Every target root the fix touches or checks, each once."""
        roots = [self.upstream.root] if self.upstream.releases else []
        roots += [patch.root for patch in self.patches]
        roots += [self.revert.root] if self.revert is not None else []
        roots += [str(check.get("root", self.upstream.root)) for check in self.checks]
        return tuple(dict.fromkeys(roots))


@record_dataclass(frozen=True)
class TargetConfig(Record):
    """A named target of ``patchkit.toml``: a local root, or a root on a host over SSH."""

    name: str
    path: str  # the "sglang" root; absolute for a local target
    host: str | None = None
    user: str | None = None
    port: int | None = None
    python: str | None = None
    ssh_options: tuple[str, ...] = ()
    ssh_program: str | None = None
    roots: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "roots", MappingProxyType(dict(self.roots or {})))

    @property
    def is_remote(self) -> bool:
        return self.host is not None

    def all_roots(self) -> dict[str, str]:
        """Every root of the target by name, the main one as ``sglang``."""
        return {PRIMARY_ROOT: self.path, **self.roots}


@record_dataclass(frozen=True)
class ProjectConfig(Record):
    """``patchkit.toml``: named targets and, optionally, where the catalog is."""

    path: Path
    catalog: Path | None = None
    default_target: str | None = None  # used when no --target is given
    targets: Mapping[str, TargetConfig] = field(default_factory=dict)
    shipped_fixes: bool = False  # a catalog's own file: the shipped catalog sits beside it
    restarts: Mapping[str, str] = field(default_factory=dict)  # name -> shell command

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", MappingProxyType(dict(self.targets or {})))
        object.__setattr__(self, "restarts", MappingProxyType(dict(self.restarts or {})))


#: The rationale `new` writes, for its author to replace (docs/authoring.md).
PLACEHOLDER = "Replace this:"


def unfinished(fix: Fix) -> list[str]:
    """What a fix still lacks that `new` leaves to its author: a rationale of its own, and a
    verification proving it is in place (docs/authoring.md); warnings, never errors. Only of an
    active fix: a dead, superseded or upstreamed one is history, not work to finish."""
    out: list[str] = []
    if fix.status != "active":
        return out
    if fix.rationale.strip().startswith(PLACEHOLDER):
        out.append(f"{fix.name}: its rationale is still the placeholder ({fix.manifest_path}: "
                   "say what was wrong, what the fix does and the evidence)")
    if not fix.verification:
        out.append(f"{fix.name}: it has no [[verification]] of its own: nothing checks that it works "
                   f"once applied (add one to {fix.manifest_path}, docs/manifest.md)")
    return out
