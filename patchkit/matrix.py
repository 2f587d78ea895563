"""The fixes x releases matrix (``patchkit matrix``, docs/rebase.md "The release watch"): for
each active fix and each SGLang release, what serving that release takes.

A cell is one of: ``vN`` (the variant serving the release applies, zero fuzz, on the
release's files), ``not-needed`` (nothing to do there, e.g. a revert with nothing to revert),
``upstream`` (the fix is marked upstream since that release or earlier and the release still
holds it, or the release holds its whole change), ``removed upstream`` (marked upstream since
an earlier release, and this one no longer holds the change: a human decides), ``no variant`` (no variant serves it, but the newest series applies there
unchanged: a rebase only adds the release), ``rebase needed`` (it applies at an offset or
after a clean merge), ``conflict`` (a rebase would stop, or the variant no longer applies;
labelled ``verify fails`` when it applies but a check of its verification that reads a file,
asked of the files the apply would write, fails there),
``blocked`` (a fix under it, named in the label, fails there: the fix cannot be applied, or
a rebase cannot compute it, before that one is served)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .catalog import Catalog
from .catalog.model import Fix
from .errors import PatchkitError, UsageError, VerificationFailed
from .upstream import UpstreamRepo, release_name, version_key

#: Cells that fail ``patchkit matrix --exit-code``: a release the catalog cannot serve as is.
FAILING = ("conflict", "blocked", "removed")
#: Every cell kind, for the docs and --json consumers.
KINDS = ("variant", "not-needed", "upstream", "removed", "no variant", "rebase needed", "conflict",
         "blocked")
#: What a dry-run rebase's outcome means for a release no variant serves.
_REBASE_KINDS = {"extended": "no variant", "rebased": "rebase needed", "clean": "rebase needed",
                 "upstreamed": "upstream", "conflict": "conflict", "stopped": "conflict",
                 "skipped": "blocked"}

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Cell:
    """One fix on one release: ``kind`` (KINDS), ``label`` (what the cell shows) and why."""

    kind: str
    label: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "label": self.label, "detail": self.detail}


@dataclass(frozen=True)
class Matrix:
    releases: tuple[str, ...]
    fixes: tuple[str, ...]
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)  # fix -> release -> cell

    @property
    def failing(self) -> list[tuple[str, str]]:
        return [(f, r) for f in self.fixes for r in self.releases
                if self.cells[f][r].kind in FAILING]

    def to_json(self) -> dict[str, Any]:
        return {"releases": list(self.releases), "fixes": list(self.fixes),
                "cells": {f: {r: c.to_json() for r, c in row.items()} for f, row in self.cells.items()},
                "failing": [{"fix": f, "release": r} for f, r in self.failing]}

    def markdown(self) -> str:
        """The matrix as a GitHub-flavoured Markdown table (a CI job summary)."""
        lines = ["| fix | " + " | ".join(self.releases) + " |",
                 "|---|" + "---|" * len(self.releases)]
        lines += [f"| {f} | " + " | ".join(self.cells[f][r].label for r in self.releases) + " |"
                  for f in self.fixes]
        return "\n".join(lines) + "\n"


def parse_releases(text: str | None, known: Sequence[str], stored: Sequence[str] = ()
                   ) -> list[str]:
    """``A..B`` (every release from A to B, both included, that the catalog's variants name
    (``known``) or the release store holds (``stored``): A and B are fetched when missing),
    ``A,B,C``, or None (every release the catalog's variants name); oldest first, and a
    release may be spelled as its tag (``v0.5.23``)."""
    if text is None:
        return list(known)
    if ".." in text:
        low, _, high = (part.strip() for part in text.partition(".."))
        if not low or not high:
            raise UsageError(f"--releases {text}: give both ends, OLD..NEW (e.g. 0.5.22..0.5.23)")
        low, high = release_name(low), release_name(high)
        if version_key(low) > version_key(high):
            raise UsageError(f"--releases {text}: {low} comes after {high}; write OLD..NEW")
        between = [v for v in (*known, *stored)
                   if version_key(low) <= version_key(v) <= version_key(high)]
        return sorted({low, high, *between}, key=version_key)
    parts = [v.strip() for v in text.split(",")]
    if not any(parts):
        raise UsageError("--releases names no release; give A..B or A,B")
    if "" in parts:
        raise UsageError(f"--releases {text}: an empty item; give releases between the commas "
                         "(e.g. 0.5.22,0.5.23)")
    return sorted(dict.fromkeys(release_name(v) for v in parts), key=version_key)  # each once


def fixes_of(catalog: Catalog, names: Sequence[str] = ()) -> list[Fix]:
    """The fixes the matrix covers: ``names``, else every active fix with a release
    precondition (a fix for a root of the deployment's own is the same on every release)."""
    if names:
        return [catalog.get(n) for n in names]
    return [f for f in catalog.all() if not f.is_inactive and f.upstream.releases]


def matrix(catalog: Catalog, releases: Sequence[str], names: Sequence[str] = (), *,
           upstream: UpstreamRepo | None = None, progress: Progress | None = None) -> Matrix:
    """Every fix of ``names`` (default: :func:`fixes_of`) on every release of ``releases``,
    fetched into ``upstream`` (patchkit's upstream repository) when missing."""
    say = progress or (lambda _line: None)
    repo = upstream or UpstreamRepo()
    fixes = fixes_of(catalog, names)
    cells: dict[str, dict[str, Cell]] = {f.name: {} for f in fixes}
    repo.fetch_all(releases, progress=say)  # every one first: a missing one fails now
    with tempfile.TemporaryDirectory(prefix="patchkit-matrix-") as tmp:
        tree: Path | None = None
        for release in releases:
            say(f"checking the fixes on sglang {release}")
            # one checkout, moved from release to release: a release shares most of its
            # 6,000 files with the one before, and only the others are written again
            tree = repo.checkout(release, Path(tmp) / "sglang") if tree is None else \
                repo.move(tree, release)
            unserved = []
            column: dict[str, Cell] = {}
            held = _asked(catalog, fixes, release, repo)
            for fix in _under_first(catalog, fixes):
                cell = None if fix.not_needed_on(release) else _blocked(catalog, fix, release, column)
                cell = cell or _served(catalog, fix, release, tree, held)
                if cell is not None:
                    column[fix.name] = cell
            for fix in fixes:
                cell = column.get(fix.name)
                if cell is None:
                    unserved.append(fix)
                else:
                    cells[fix.name][release] = cell
            if unserved:
                say(f"classifying {len(unserved)} fix(es) with no variant for {release}")
                column = {name: row[release] for name, row in cells.items() if release in row}
                cells_for = _rebase_cells(catalog, unserved, release, repo, column)
                for fix in unserved:
                    cells[fix.name][release] = cells_for[fix.name]
    return Matrix(tuple(releases), tuple(f.name for f in fixes), cells)


def _under(catalog: Catalog, fix: Fix) -> list[str]:
    """The fixes under ``fix`` (its dependencies and the fix it reverts, transitively), as a
    rebase puts them under it."""
    from .rebase.sides import reverted

    return [d.name for d in catalog.dependency_order([*fix.depends_on, *reverted(fix)],
                                                     with_deps=True)]


def _under_first(catalog: Catalog, fixes: Sequence[Fix]) -> list[Fix]:
    """``fixes``, each after those of them that are under it."""
    by_name = {f.name: f for f in fixes}
    order: dict[str, Fix] = {}

    def visit(fix: Fix) -> None:
        if fix.name not in order:
            for name in _under(catalog, fix):
                if name in by_name:
                    visit(by_name[name])
            order[fix.name] = fix

    for fix in fixes:
        visit(fix)
    return list(order.values())


def _blocked(catalog: Catalog, fix: Fix, release: str, column: dict[str, Cell]) -> Cell | None:
    """``fix``'s cell when a fix applied with it (its dependencies) already fails on
    ``release`` (``column``: the cells decided there): it cannot be applied before that one."""
    deps = [d.name for d in catalog.apply_order([fix.name], with_deps=True, allow_inactive=True)
            if d.name != fix.name]
    dep = next((d for d in deps if d in column and column[d].kind in FAILING), None)
    if dep is None:
        return None
    return Cell("blocked", f"blocked by {dep}",
                f"{dep} on {release}: {column[dep].label}: {column[dep].detail}")


def _served(catalog: Catalog, fix: Fix, release: str, tree: Path, held: dict[str, Any]
            ) -> Cell | None:
    """The cell of a fix a variant serves (or that is upstream there); None: no variant.
    ``held``: :func:`_asked`'s verdicts."""
    if fix.not_needed_on(release):
        return _still_upstream(fix, release, held.get(fix.name))
    variant = fix.variant_for(release)
    if variant is None and fix.revert is None:
        return None  # a rebase dry run classifies it
    from .request_builder import build_request
    from .results import check_result
    from .targets import LocalTarget

    fixes = catalog.apply_order([fix.name], with_deps=True, allow_inactive=True)
    target = LocalTarget({"sglang": str(tree)}, None, f"sglang {release}")
    try:
        request = build_request(catalog, fixes, op="apply", roots={"sglang": str(tree)},
                                state_root="sglang", python=None, dry_run=True, sync=True)
        result = check_result(target.run(request), target.description)
    except PatchkitError as err:
        if variant is None:  # a revert fix with something to revert: a rebase dry run says
            return None
        failed = [f for f in err.details.get("failures") or () if f.get("fix") == fix.name]
        if isinstance(err, VerificationFailed) and failed:
            return Cell("conflict", "verify fails", f"v{variant.version} applies, but its "
                        f"verification fails on {release}: " + "; ".join(
                            f"{f['name']}: {f['detail']}" for f in failed))
        return Cell("conflict", "conflict", f"v{variant.version} no longer applies: "
                    f"{err.message.splitlines()[0]}")
    outcome = next((o for o in result.fixes if o.name == fix.name), None)
    if outcome is not None and outcome.outcome in ("not-needed", "present-unrecorded"):
        # (a revert fix with nothing to revert needs no variant there, as sync says)
        detail = outcome.detail or outcome.outcome
        if variant is None and fix.revert is not None and not fix.revert.fix:
            # the release's own files never hold a fork's commit; a fork of it that does is
            # refused (status and sync say why), as no version serves the release
            detail = (f"nothing to revert in {release}'s own files (commit {fix.revert.commit} "
                      f"is a fork's); a fork of {release} whose history holds it is refused: no "
                      f"version serves {release}, and a rebase makes none for a revert of a "
                      f"commit named by id; add {release} to upstream.releases in "
                      f"manifests/{fix.name}.toml to revert it there")
        return Cell("not-needed", "not-needed", detail)
    if variant is None:
        return None
    return Cell("variant", variant.variant_label(), "applies with zero fuzz")


def _asked(catalog: Catalog, fixes: Sequence[Fix], release: str, repo: UpstreamRepo
           ) -> dict[str, Any]:
    """Of the fixes marked upstream since a release before ``release``, what ``release`` says
    of each, as ``upstream check`` asks it (one check for them all): a later release may have
    removed or reverted the change (the mark says "every later release", which only the
    release's files can confirm)."""
    marked = [f for f in fixes if f.not_needed_on(release) and release != f.upstream_since]
    if not marked:
        return {}
    from .rebase.contains import check

    return {v.fix: v for v in check(catalog, marked, release, upstream=repo)}


def _still_upstream(fix: Fix, release: str, said: Any) -> Cell:
    """A fix marked upstream since this release or an earlier one: ``upstream`` while the
    release still holds the change (``said``: its verdict, None on the marked release)."""
    from .rebase.contains import CONTAINED, NOT_APPLICABLE, NOT_CHECKED

    marked = f"marked upstream since {fix.upstream_since}"
    if said is None:
        return Cell("upstream", "upstream", marked)
    if said.verdict in (CONTAINED, NOT_APPLICABLE, NOT_CHECKED):
        return Cell("upstream", "upstream", marked + (f"; {release} still holds it ({said.detail})"
                                                      if said.contained else ""))
    return Cell("removed", "removed upstream", f"{marked}, but {release} no longer holds the "
                f"change ({said.verdict}: {said.detail}); a human decides: patchkit upstream "
                f"check {fix.name} --release {release}")


def _rebase_cells(catalog: Catalog, fixes: list[Fix], release: str, repo: UpstreamRepo,
                  column: dict[str, Cell]) -> dict[str, Cell]:
    """What a rebase of each fix onto ``release`` would do: a dry run on the user's catalog
    (it never stops and writes nothing there; its history gives old versions, and its
    messages name it). ``column``: the release's cells so far (the variants serving it)."""
    from . import rebase

    report = rebase.start(catalog, release, [f.name for f in fixes], upstream=repo, dry_run=True)
    done = dict(column)
    for rep in report.fixes:  # in dependency order: a fix's dependencies are decided first
        kind = _REBASE_KINDS.get(rep.outcome, "conflict")
        cell = Cell(kind, kind, rep.detail)
        if kind == "blocked":
            under = _under(catalog, catalog.get(rep.name))
            failing = next((d for d in under if d in done and done[d].kind in FAILING), None)
            named = next((d for d in under if rep.detail.startswith(
                (f"dependency {d} ", f"dependency {d}:"))), None)
            by = named or failing
            detail = rep.detail if failing is None or failing == named else \
                f"{failing} on {release}: {done[failing].label}; {rep.detail}"
            cell = Cell("blocked", f"blocked by {by}" if by else "blocked", detail)
        done[rep.name] = cell
    return {f.name: done.get(f.name, Cell("conflict", "conflict", "not classified"))
            for f in fixes}


def known_releases(catalog: Catalog) -> list[str]:
    """Every release a variant of an active fix serves, oldest first."""
    seen = {r for f in fixes_of(catalog) for v in f.all_variants() for r in v.upstream.releases}
    return sorted(seen, key=version_key)
