"""Which fixes a rebase takes, in which order, and the two sides each is computed between:
the old base and the new upstream, each with the fixes under it applied."""

from __future__ import annotations

from collections.abc import Sequence

from packaging.version import Version

from .. import gitrepo
from ..catalog import Catalog
from ..catalog.model import Fix
from ..catalog.series import patch_text
from ..errors import ConflictError, PatchkitError
from .classify import Series, Tree, apply_all, changes
from .state import RebaseState


class Skip(Exception):
    """A fix cannot be computed (a side cannot be built): it is reported skipped."""


def reverted(fix: Fix) -> list[str]:
    """The fix a revert fix removes, as a list: it is under the revert like a dependency."""
    return [fix.revert.fix] if fix.revert is not None and fix.revert.fix else []


def skip_reason(fix: Fix, release: str | None, inactive: bool = False,
                drop_old: bool = False) -> str:
    """Why ``fix`` is not rebased, or ""; ``inactive``: dead and superseded fixes too;
    ``drop_old``: a release a variant serves is rebased onto all the same (the variants go)."""
    if fix.status in ("dead", "superseded") and not inactive:
        return (f"{fix.status}: not rebased (name it, or pass --include-inactive, to rebase "
                "it anyway)")
    if fix.revert is not None and not fix.revert.fix:
        return ("a revert of a commit named by id: its change is computed from the fork's "
                "commit at apply time, so there is no series to rebase; to serve "
                f"{release or 'a release'}, add it to upstream.releases in "
                f"manifests/{fix.name}.toml")
    if not fix.patches:
        return "no patch series to rebase"
    if not fix.upstream.releases:
        return "no release precondition: the series is not tied to SGLang releases"
    if any(p.root != fix.upstream.root for p in fix.patches):
        return f"patches outside the {fix.upstream.root} root"
    kept = ""
    if drop_old and fix.variants:  # --drop-old retires variants only of the fixes it rebases
        kept = ("; --drop-old kept its variants (%s): it drops those of the fixes it rebases; "
                "delete a [[variants]] entry and its folder by hand to retire it"
                % fix.variants_said)
    if release is not None and fix.not_needed_on(release):  # rebasing would move the mark on
        return (f"in upstream since {fix.upstream_since}, so not needed on {release}: nothing to "
                f"rebase, and the mark stays (`patchkit upstream check {fix.name} --release "
                f"{release}` asks whether {release} still holds the change)")
    if release is not None and fix.upstream.base_release == release:
        return f"already based on {release}{kept}"
    if release is not None and release in fix.upstream.releases:
        return f"already known to apply to {release}{kept}"
    served = None if drop_old or release is None else fix.variant_for(release)
    if served is not None:  # the top level was asked above: this is one of its variants
        return (f"its variant v{served.version} (based on {served.upstream.base_release}) "
                f"already serves {release}: nothing to rebase (`patchkit matrix` shows what "
                "each release gets)")
    return ""


def queue_order(catalog: Catalog, names: Sequence[str]) -> list[Fix]:
    """The named fixes in dependency order, each revert fix after the fix it reverts."""
    fixes = catalog.dependency_order(names)
    selected = {f.name: f for f in fixes}
    order: list[Fix] = []
    seen: set[str] = set()

    def visit(fix: Fix) -> None:
        if fix.name not in seen:
            seen.add(fix.name)
            for dep in [*fix.depends_on, *reverted(fix)]:
                if dep in selected:
                    visit(selected[dep])
            order.append(fix)

    for fix in fixes:
        visit(fix)
    return order


def read_series(fix: Fix) -> Series:
    return [(r.file, patch_text(r.path)) for r in fix.patches]


class Sides:
    """The upstream trees with the fixes under a fix applied; ``planned``: the series the plan
    expects a fix to end with."""

    def __init__(self, state: RebaseState) -> None:
        self.state = state
        self.blobs = gitrepo.Blobs(state.data["git_dir"])
        self.planned: dict[str, Series] = {}
        self._releases: list[tuple[Version, str]] | None = None

    def releases_between(self, base: str, onto: str | None) -> list[str]:
        """The releases (``v<version>`` tags of the upstream) after ``base`` and before
        ``onto``, oldest first; none when ``onto`` is no release."""
        from ..upstream import version_key

        if onto is None:
            return []
        if self._releases is None:
            tags = gitrepo.list_tags(self.state.data["git_dir"])
            self._releases = []
            for name in tags:
                try:
                    self._releases.append((version_key(name[1:]), name[1:]))
                except PatchkitError:
                    continue
        try:
            lo, hi = version_key(base), version_key(onto)
        except PatchkitError:
            return []
        return [v for k, v in sorted(self._releases) if lo < k < hi]

    def deps(self, fix: Fix) -> list[Fix]:
        """The fixes under this one (and under the fix it reverts), dependencies first."""
        return self.state.catalog.dependency_order([*fix.depends_on, *reverted(fix)],
                                                   with_deps=True)

    def dep_series(self, name: str, release: str | None, *, old: bool, under: str
                   ) -> tuple[Series, str]:
        """The series of ``name`` (and which version) to put under ``under`` on ``release``:
        the one based on (or known to apply to) it, from the catalog (old side: as it was at
        the start; new side: the plan first) or, for another base, its git history."""
        if not old and name in self.planned:
            return self.planned[name], f"as rebased onto {self.state.onto}"
        fix = self.state.old_fix(name) if old else self.state.catalog.get(name)
        if release is None or release == fix.upstream.base_release \
                or release in fix.upstream.releases:
            return read_series(fix), f"v{fix.version}"
        served = fix.variant_for(release)
        if served is not None:  # the catalog serves that release with its own variant
            return read_series(served), f"v{served.version}, its variant for {release}"
        matching = sorted({e.version for e in fix.changelog
                           if e.base_release == release and e.version != fix.version})
        if matching:
            from .versions import series_of_version

            try:
                texts = series_of_version(self.state.catalog, name, matching[-1])
            except PatchkitError as exc:
                raise Skip(f"dependency {name}: its version {matching[-1]} (based on "
                           f"{release}) cannot be read: {exc}") from None
            return list(texts.items()), f"v{matching[-1]}, from the catalog's history"
        if not old:  # tried as it is: it may still apply (the caller says so if not)
            return read_series(fix), f"v{fix.version}"
        known = ", ".join(f"v{e.version} on {e.base_release or '?'}" for e in fix.changelog) \
            or f"v{fix.version} on {fix.upstream.base_release}"
        raise Skip(f"dependency {name} has no version based on {release}, the base of "
                   f"{under} (its versions: {known}), so {under}'s old side cannot be built: "
                   f"rebase {under} together with {name} from a catalog commit where {name} "
                   f"is still on {release}, or write {under} again on {self.state.onto}")

    def tree(self, fix: Fix, *, old: bool) -> Tree:
        """The old base (``old``) or the new upstream, with the fixes under ``fix`` applied."""
        release = fix.upstream.base_release if old else self.state.release
        tree = Tree(self.blobs, self.state.base_rev(fix) if old else self.state.data["onto_rev"])
        for dep in self.deps(fix):
            texts, which = self.dep_series(dep.name, release, old=old, under=fix.name)
            for file, chs in changes(dep, texts, dep.patch_dir):
                try:
                    apply_all(tree, chs)
                except ConflictError:
                    if old:
                        raise Skip(f"dependency {dep.name} ({which}, {file}) does not apply to "
                                   f"{release}, the base of this fix: its series there is not "
                                   "the one this fix was written on") from None
                    hint = f" (a {dep.status} fix is rebased only when named or with " \
                        "--include-inactive)" if dep.status in ("dead", "superseded") else ""
                    raise Skip(f"dependency {dep.name} ({which}, {file}) does not apply to "
                               f"{self.state.onto}; rebase it first{hint}") from None
        return tree
