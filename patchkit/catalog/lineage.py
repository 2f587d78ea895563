"""The lineage of a catalog's fixes: who came after whom, what each version changed, and why,
from the manifests, the catalog's git history and a target's status (docs/lineage.md)."""

from __future__ import annotations

import heapq
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from .. import gitrepo
from . import BrokenFix, Catalog
from ..engine.contract import RECORDED
from ..errors import ManifestError
from .manifest import Declared, declared_versions
from .model import Fix, thaw

#: Version of the ``--json`` document (docs/lineage.md).
LINEAGE_FORMAT = 1

#: Link kinds that order the lineage: the fix named comes first.
ORDERING_LINKS = ("depends_on", "supersedes", "reverts")


@dataclass(frozen=True)
class CatalogCommit:
    """A commit of the catalog repository that touched the fix's manifest or series."""

    sha: str
    date: str  # committer date, ISO-8601
    subject: str


@dataclass(frozen=True)
class Version:
    """One version of a fix's series, from its changelog entry (and the catalog history)."""

    version: int
    date: str  # YYYY-MM-DD from the changelog; "" when the fix has none
    base_release: str  # the upstream release this version applies to
    summary: str
    rebased_from: str = ""  # the previous version's base release, when this one moved
    commits: tuple[CatalogCommit, ...] = ()
    serves: tuple[str, ...] = ()  # the releases this version serves today (a variant of it)

    @property
    def is_rebase(self) -> bool:
        return bool(self.rebased_from)


@dataclass(frozen=True)
class Links:
    """Every relation of one fix, both directions."""

    depends_on: tuple[str, ...] = ()
    depended_on_by: tuple[str, ...] = ()
    supersedes: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    reverts: str = ""
    reverted_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class Applied:
    """What a target's ``status`` says of the fix."""

    state: str  # a status state: applied | drifted | lost | outdated | not-applied | ...
    version: int | None
    applied_at: str | None
    commits: tuple[tuple[str, str], ...] = ()  # (root, sha) of each commit apply --commit made


@dataclass(frozen=True)
class FixLineage:
    name: str
    status: str
    title: str
    version: int  # the current version
    base_release: str
    forwarding: str
    rationale: str
    links: Links
    versions: tuple[Version, ...]
    applied: Applied | None = None  # None: no target, or the target cannot hold this fix
    revert: Mapping[str, Any] | None = None  # a git-native revert: {commit, fix, root, paths}
    upstream_since: str = ""  # the release upstream holds the change since (Fix.upstream_since)

    @property
    def replaced_by(self) -> tuple[str, ...]:
        """What to use instead of a dead or superseded fix: its supersessors and reverts."""
        if self.status not in ("dead", "superseded"):
            return ()
        return tuple(dict.fromkeys((*self.links.superseded_by, *self.links.reverted_by)))

    def to_json(self) -> dict[str, Any]:
        """Every field as plain data (docs/lineage.md), with ``replaced_by``."""
        applied = None if self.applied is None else dict(
            asdict(self.applied), commits=[{"root": r, "sha": sha} for r, sha in self.applied.commits])
        return dict(thaw(asdict(self)), replaced_by=list(self.replaced_by), applied=applied)


@dataclass(frozen=True)
class Edge:
    """``source`` depends_on / supersedes / reverts ``target``."""

    source: str
    kind: str
    target: str


@dataclass(frozen=True)
class Lineage:
    fixes: tuple[FixLineage, ...]  # in lineage order
    edges: tuple[Edge, ...]
    history: bool  # the catalog's git history was read
    target: str | None = None  # the target whose status is shown
    focus: str | None = None  # the fix asked for, if any
    #: the fixes whose manifest cannot be read (their links unknown): error entries, as in list
    broken: tuple[BrokenFix, ...] = ()

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fixes)

    def get(self, name: str) -> FixLineage:
        return {f.name: f for f in self.fixes}[name]  # KeyError for a fix not in it

    def to_json(self) -> dict[str, Any]:
        out = {
            "format": LINEAGE_FORMAT,
            "focus": self.focus,
            "target": self.target,
            "history": self.history,
            "order": list(self.order),
            "edges": [{"from": e.source, "kind": e.kind, "to": e.target} for e in self.edges],
            "fixes": [f.to_json() for f in self.fixes],
            "broken": [b.to_json() for b in self.broken],  # as `list --json` and `status --json`
        }
        return out


# -- building ---------------------------------------------------------------------------------


def build(catalog: Catalog, *, target_status: Any = None, fix: str | None = None,
          history: bool = True) -> Lineage:
    """The lineage of ``catalog``; with ``fix``, only that fix and the fixes linked to it.
    ``target_status`` is an ``api.status`` result; ``history`` False skips the git history.
    A manifest that cannot be read is in ``broken`` (file, line, message) and the rest goes
    on, as in ``list`` and ``status``; asked for by ``fix``, it is its error."""
    fixes, broken = catalog.validate_readable()
    asked = next((b for b in broken if b.name == fix), None)
    if asked is not None:  # asked for by name: its error, naming file and line
        raise ManifestError(asked.detail, file=asked.file, line=asked.line)
    name = catalog.get(fix).name if fix is not None else None
    commits = _catalog_history(catalog, fixes) if history else None
    lineage = replace(
        _assemble(fixes, _applied(target_status), commits,
                  target=getattr(target_status, "target", None)), broken=tuple(broken))
    return focus(lineage, name) if name is not None else lineage


def from_fixes(fixes: Iterable[Fix], *, states: Mapping[str, str] | None = None) -> Lineage:
    """A lineage of already loaded fixes, with a target's states by name (no git history)."""
    applied = {name: Applied(state, None, None) for name, state in (states or {}).items()}
    return _assemble(list(fixes), applied, None, target=None)


def focus(lineage: Lineage, name: str) -> Lineage:
    """``name``, every fix it builds on and every fix that builds on it (transitively)."""
    lineage.get(name)
    before: dict[str, set[str]] = {f.name: set() for f in lineage.fixes}
    after: dict[str, set[str]] = {f.name: set() for f in lineage.fixes}
    for edge in lineage.edges:
        before[edge.source].add(edge.target)
        after[edge.target].add(edge.source)
    keep = {name} | _reach(name, before) | _reach(name, after)
    return Lineage(fixes=tuple(f for f in lineage.fixes if f.name in keep),
                   edges=tuple(e for e in lineage.edges if e.source in keep and e.target in keep),
                   history=lineage.history, target=lineage.target, focus=name,
                   broken=lineage.broken)


def _reach(start: str, graph: Mapping[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _assemble(fixes: Sequence[Fix], applied: Mapping[str, Applied],
              commits: Mapping[str, Sequence[tuple[CatalogCommit, int | None, tuple[int, ...]]]] | None,
              *, target: str | None) -> Lineage:
    by_name = {f.name: f for f in fixes}
    edges = [Edge(f.name, kind, other) for f in fixes for kind, other in _outgoing(f)
             if other in by_name]
    ordered = _order(fixes, edges)

    def incoming(name: str, kind: str) -> tuple[str, ...]:
        return tuple(e.source for n in ordered for e in edges
                     if e.source == n.name and e.kind == kind and e.target == name)

    out = []
    for f in ordered:
        links = Links(
            depends_on=f.depends_on, depended_on_by=incoming(f.name, "depends_on"),
            supersedes=f.supersedes, superseded_by=incoming(f.name, "supersedes"),
            reverts=next((e.target for e in edges if e.source == f.name and e.kind == "reverts"), ""),
            reverted_by=incoming(f.name, "reverts"),
        )
        out.append(FixLineage(
            name=f.name, status=f.status, title=f.title, version=f.version,
            base_release=f.upstream.base_release, forwarding=f.upstream.forwarding,
            rationale=f.rationale.strip(), links=links,
            versions=_versions(f, None if commits is None else commits.get(f.name, ())),
            applied=applied.get(f.name), revert=None if f.revert is None else thaw(asdict(f.revert)),
            upstream_since=f.upstream_since,
        ))
    rank = {f.name: i for i, f in enumerate(ordered)}
    edges.sort(key=lambda e: (rank[e.source], ORDERING_LINKS.index(e.kind), rank[e.target]))
    return Lineage(fixes=tuple(out), edges=tuple(edges), history=commits is not None,
                   target=target)


def _outgoing(fix: Fix) -> list[tuple[str, str]]:
    reverts = dict.fromkeys(n for n in (fix.reverts, fix.revert and fix.revert.fix) if n)
    return ([("depends_on", d) for d in fix.depends_on] + [("supersedes", s) for s in fix.supersedes]
            + [("reverts", name) for name in reverts])


def _first_date(fix: Fix) -> tuple[int, str, str]:
    """Sort key among fixes free to come next: dated first (oldest first), then by name."""
    return (0, fix.changelog[0].date, fix.name) if fix.changelog else (1, "", fix.name)


def _order(fixes: Sequence[Fix], edges: Sequence[Edge]) -> list[Fix]:
    """Kahn's algorithm; a cycle through supersedes/reverts is a manifest error."""
    by_name = {f.name: f for f in fixes}
    waiting = {f.name: {e.target for e in edges if e.source == f.name} for f in fixes}
    ready = [_first_date(f) for f in fixes if not waiting[f.name]]
    heapq.heapify(ready)
    order: list[Fix] = []
    while ready:
        name = heapq.heappop(ready)[2]
        order.append(by_name[name])
        for other, needs in waiting.items():
            if name in needs:
                needs.discard(name)
                if not needs:
                    heapq.heappush(ready, _first_date(by_name[other]))
    stuck = sorted(n for n in by_name if n not in {f.name for f in order})
    if stuck:
        files = ", ".join(str(by_name[n].manifest_path) for n in stuck)
        raise ManifestError(f"the lineage links (depends_on, supersedes, reverts) of "
                            f"{', '.join(stuck)} form a cycle ({files}): a fix cannot come "
                            "after itself. Remove one of these links",
                            file=str(by_name[stuck[0]].manifest_path), key="supersedes",
                            cycle=stuck)
    return order


#: A changelog summary as ``rebase`` writes it: ``Rebased from A onto B: ...``.
_REBASED = re.compile(r"Rebased from (\S+) onto ")


def _versions(fix: Fix, commits: Sequence[tuple[CatalogCommit, int | None, tuple[int, ...]]] | None
              ) -> tuple[Version, ...]:
    entries = {e.version: (e.date, e.base_release, e.summary) for e in fix.changelog}
    if not entries:
        entries[fix.version] = ("", fix.upstream.base_release, "")
    by_version = _attribute(commits or (), fix.version)
    for number in by_version:
        entries.setdefault(number, ("", "", ""))
    serving = {v.version: v.upstream.releases for v in fix.all_variants()}
    out: list[Version] = []
    previous = ""
    bases: set[str] = set()  # the releases earlier versions were based on
    for number in sorted(entries):
        date, base, summary = entries[number]
        base = base or previous or fix.upstream.base_release
        said = _REBASED.match(summary)  # what a rebase writes: the base it started from
        # with variants the versions are no chain: one on a base an earlier one had is that
        # line's next version (a refreshed variant), not a rebase from the version before
        rebased_from = said.group(1) if said else (
            previous if previous and base != previous and base not in bases else "")
        bases.add(base)
        out.append(Version(version=number, date=date, base_release=base, summary=summary,
                           rebased_from=rebased_from, commits=tuple(by_version.get(number, ())),
                           serves=tuple(serving.get(number, ()))))
        previous = base
    return tuple(out)


def _attribute(commits: Sequence[tuple[CatalogCommit, int | None, tuple[int, ...]]], current: int
               ) -> dict[int, list[CatalogCommit]]:
    """Each commit goes to the versions it made (``made``: see :func:`_catalog_history`), else
    to the top-level version its manifest declared; a commit without a readable manifest (a
    series committed before its manifest) to the versions of the next commit that has one."""
    out: dict[int, list[CatalogCommit]] = {}
    pending: list[CatalogCommit] = []
    for commit, number, made in commits:
        targets = made or (() if number is None else (number,))
        if not targets:
            pending.append(commit)
            continue
        for version in targets:
            out.setdefault(version, []).extend([*pending, commit])
        pending = []
    if pending:
        out.setdefault(max(out, default=current), []).extend(pending)
    return out


def named_history(history: Sequence[gitrepo.PathCommit], moves: Sequence[tuple[str, str, str]],
                  name: str, prefix: str = "") -> list[tuple[gitrepo.PathCommit, str]]:
    """The commits of ``history`` (oldest first) that touched fix ``name``'s manifest or series,
    each with the name the fix had there: ``moves`` (``gitrepo.renames`` of the manifests)
    carry it back through each rename of its manifest, as ``git log --follow`` does, so a fix
    renamed by hand keeps the commits that made its versions; and a name an earlier fix had
    before it was renamed away is that fix's up to the rename, not this one's. ``prefix``:
    the catalog's directory in its work tree ("" or ``DIR/``)."""
    index = {c.sha: i for i, c in enumerate(history)}
    spans: list[tuple[str, int, int]] = []  # (manifest path, first commit, past the last)
    path, hi, lo = f"{prefix}manifests/{name}.toml", len(history), 0
    for sha, old, new in reversed(moves):  # newest first
        at = index.get(sha)
        if at is None or at >= hi:
            continue
        if new == path:  # renamed into the name here: before, the fix was `old`
            spans.append((path, at, hi))
            path, hi = old, at
        elif old == path:  # another fix had the name, and left it here
            lo = at + 1
            break
    spans.append((path, lo, hi))
    out = []
    for path, first, past in reversed(spans):
        was = path[len(f"{prefix}manifests/"):-len(".toml")]
        for commit in history[first:past]:
            if any(p == path or p.startswith(f"{prefix}patches/{was}/") for p in commit.files):
                out.append((commit, was))
    return out


def _catalog_history(catalog: Catalog, fixes: Sequence[Fix]
                     ) -> dict[str, list[tuple[CatalogCommit, int | None, tuple[int, ...]]]] | None:
    """Per fix, the commits of its manifest or series with the top-level version declared at
    each and the versions each made: the versions its manifest declares new or changed (a
    variant's table, or the top level outside its variants and changelog) and those whose
    series it wrote; None when the catalog is not in a git work tree."""
    top = gitrepo.work_tree_top(catalog.root)
    if top is None:
        return None
    rel = catalog.root.resolve().relative_to(top.resolve()).as_posix()
    prefix = "" if rel == "." else rel + "/"
    history = gitrepo.path_history(top, [f"{prefix}manifests", f"{prefix}patches"])
    moves = gitrepo.renames(top, f"{prefix}manifests")
    touched = {fix.name: named_history(history, moves, fix.name, prefix) for fix in fixes}
    moved = {sha for sha, _old, _new in moves}  # a rename moves a series; it writes none
    wanted = [(c.sha, f"{prefix}manifests/{was}.toml") for cs in touched.values() for c, was in cs]
    texts = iter(gitrepo.texts_at(top, wanted)) if wanted else iter(())
    out: dict[str, list[tuple[CatalogCommit, int | None, tuple[int, ...]]]] = {}
    for fix_name, cs in touched.items():
        out[fix_name] = []
        before: dict[int, Declared] = {}
        for c, name in cs:
            declared = declared_versions(next(texts) or "")
            declared_top = next((v for v, d in declared.items() if not d.folder), None)
            # by the folder of the series the commit's own manifest declares: a refreshed
            # variant's older version keeps the commits that wrote it
            folders = {v: f"{prefix}patches/{name}/{d.folder}/" for v, d in declared.items()
                       if d.folder}
            ours = [p for p in c.files if p.startswith(f"{prefix}patches/{name}/")
                    and c.sha not in moved]
            wrote = {v for v, folder in folders.items() if any(p.startswith(folder) for p in ours)}
            if declared_top is not None and any(  # the top level's: the rest of the fix's folder
                    not p.startswith(tuple(folders.values())) for p in ours):
                wrote.add(declared_top)
            changed = {v for v, d in declared.items()
                       if v not in before or before[v].entry != d.entry}
            out[fix_name].append((CatalogCommit(c.sha, c.date, c.subject), declared_top,
                                  tuple(sorted(changed | wrote))))
            before = declared or before
    return out


def _applied(target_status: Any) -> dict[str, Applied]:
    """Per fix, what the target's status says; commits come from the raw record."""
    if target_status is None:
        return {}
    raw = {str(f.get("name")): f for f in ((target_status.raw.get("status") or {}).get("fixes") or ())
           if isinstance(f, Mapping)}
    out = {}
    for s in target_status.status:
        commits = tuple((str(c.get("root", "")), str(c.get("sha", "")))
                        for c in raw.get(s.name, {}).get("commits") or () if isinstance(c, Mapping))
        # Only a recorded fix has an applied version; status reports the catalog's for the rest.
        version = s.version if s.state in RECORDED else None
        out[s.name] = Applied(s.state, version, s.applied_at, commits)
    return out


__all__ = ["Applied", "CatalogCommit", "Edge", "FixLineage", "Lineage", "Links", "Version",
           "build", "focus", "from_fixes", "LINEAGE_FORMAT", "ORDERING_LINKS"]
