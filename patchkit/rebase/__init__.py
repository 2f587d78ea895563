"""Rebase fixes onto a newer SGLang release or commit (``patchkit rebase``, docs/rebase.md).

Per fix (dependency order) and per patch (series order) the new upstream decides one of:

``unchanged``   the hunks apply at their lines (zero fuzz)
``offset``      the hunks apply, some at other lines (zero fuzz)
``upstream``    the upstream already holds the change: an upstream commit between the base
                and the target has the patch's (or the series') ``git patch-id --stable``,
                or the reversed hunks apply
``merged``      git's three-way merge (``git merge-file``: base / patched / new upstream)
``anchor-gone`` a grep precondition of the fix no longer matches the new upstream
``conflict``    the merge leaves conflicts
``resolved``    (after ``--continue``) a conflict or anchor-gone the user resolved by hand

The upstream is patchkit's upstream repository (release tags ``v<version>``) or an SGLang
git clone (``repo=``); the target is a release or, in a clone, any commit; a fix's base is
``v<base_release>`` there unless ``base=`` names one. ``start`` classifies every fix at once
(see :mod:`patchkit.rebase.run`); a fix is written when the run reaches it. Onto a commit
that is not a release nothing is written: the report says what each fix would do.

State in ``<catalog>/.patchkit-rebase/``: ``state.json``::

    {"format": 2, "onto": label, "release": "0.5.23"|null, "onto_rev": sha, "base": sha|null,
     "inactive": bool (dead and superseded fixes too: named, or include_inactive),
     "git_dir": "<upstream repository>", "queue": [names still to do, the stopped fix first],
     "written": [names written], "results": [FixReport as JSON],
     "plan": {name: {"key": sha256 of the fix's catalog files, "report": FixReport,
                     "done": {patch file: refreshed text}, "stop": null | stop}},
     "stopped": null | stop}

where a stop is ``{"name", "patch", "file", "done", "pre", "tree", "patches",
"conflicted", "paths"}`` (and ``"merged"``, the worktree's files, while only planned);
``written`` (one name a line, appended before a fix's files are written); ``backup/``, a copy
of ``manifests/`` and ``patches/`` from before the run; ``worktree/``, a stop's files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..catalog import Catalog
from ..engine import hunks
from ..errors import UsageError
from .. import gitrepo
from .classify import PatchReport
from .run import (MARKERS, STATE_DIR, STATE_FORMAT, FixReport, Progress, RebaseReport, Run,
                  fix_from_json, queue_order, skip_reason)

if TYPE_CHECKING:
    from ..upstream import UpstreamRepo

_VERSION = re.compile(r"^\d+(?:\.\d+)*(?:\.post\d+)?$")

__all__ = ["FixReport", "PatchReport", "RebaseReport", "STATE_DIR", "abort", "continue_",
           "current", "in_progress", "range_diff", "series_of_version", "skip", "start"]


def range_diff(catalog: Catalog, name: str, old: int, new: int) -> str:
    """A diff of two versions' patch files, patch by patch (see :mod:`.versions`)."""
    from .versions import range_diff as _range_diff

    return _range_diff(catalog, name, old, new)


def series_of_version(catalog: Catalog, name: str, version: int) -> dict[str, str]:
    """The patch files (name -> text) of ``version`` of a fix (see :mod:`.versions`)."""
    from .versions import series_of_version as _series_of_version

    return _series_of_version(catalog, name, version)


def _managed_git_dir() -> Path:
    """Where patchkit's upstream repository is (docs/upstream.md), without importing it:
    when the tags are there already, the rebase needs no GitPython."""
    env = os.environ.get("PATCHKIT_UPSTREAM")
    if env:
        path = Path(env).expanduser()
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = Path(cache) / "patchkit" / "upstream"
    return path if (path / ".git").exists() or (path / "HEAD").is_file() else path / "repo.git"


def _version(text: str) -> str | None:
    """``text`` if it is a release version (upstream.version_key's form), else None."""
    return text if _VERSION.match(text) else None


def _resolve(git_dir: Path, onto: str, fixes: Sequence, base: str | None, *, clone: bool,
             fetch: "UpstreamRepo | None", progress: Progress | None, inactive: bool = False
             ) -> tuple[str, str | None, str, str | None]:
    """(label, release or None, onto commit, base commit or None); fetches missing releases."""
    release = onto if _version(onto) else (onto[1:] if onto.startswith("v") and _version(onto[1:])
                                           else None)
    # only the bases of fixes that will be rebased: a dead fix's old release is not needed
    wanted = {f.upstream.base_release for f in fixes if not skip_reason(f, release, inactive)} \
        if base is None else set()
    missing = [v for v in sorted(wanted | ({release} if release else set()))
               if gitrepo.rev_parse(git_dir, f"v{v}") is None]
    if missing and not clone:
        if fetch is None:  # patchkit's own repository: GitPython only when fetching
            from ..upstream import UpstreamRepo as _Upstream

            fetch = _Upstream()
        for v in missing:
            fetch.fetch(v, progress=(lambda line: progress(line, 0, -1)) if progress else None)
        missing = []
    if release and gitrepo.rev_parse(git_dir, f"v{release}"):
        onto_rev = gitrepo.rev_parse(git_dir, f"v{release}")
    else:
        onto_rev, release = gitrepo.rev_parse(git_dir, onto), None
    if onto_rev is None:
        raise UsageError(f"--onto {onto}: no such release or commit in {git_dir}; name a release "
                         "(0.5.23), a tag or a commit of the clone", onto=onto)
    bases = [v for v in missing if v != release]
    if bases:
        raise UsageError(f"the fixes' base release(s) {', '.join(bases)} have no tag v<release> in "
                         f"{git_dir}: fetch the tags there, or name the base with --base REF",
                         missing=bases)
    base_rev = None
    if base is not None:
        base_rev = gitrepo.rev_parse(git_dir, base)
        if base_rev is None:
            raise UsageError(f"--base {base}: no such commit in {git_dir}", base=base)
    label = release or (onto if len(onto) < 40 else onto[:12])
    return label, release, onto_rev, base_rev


def start(catalog: Catalog, onto: str, names: Sequence[str] | None = None, *,
          upstream: UpstreamRepo | None = None, repo: Path | str | None = None,
          base: str | None = None, include_inactive: bool = False,
          progress: Progress | None = None, dry_run: bool = False) -> RebaseReport:
    """Rebase ``names`` (default: every fix) onto ``onto``: a release, or with ``repo`` (an
    SGLang git clone) any tag or commit there; ``base`` overrides each fix's ``v<base>``.

    A named fix is rebased whatever its status (a fork may have a dead fix committed); the
    default, every fix, takes dead and superseded ones only with ``include_inactive``.
    ``dry_run`` (and any ``onto`` that is not a release) only reports: every fix is classified
    without stopping, the catalog is not written and no rebase is left in progress."""
    catalog.check_writable("rebase")  # a dry run too: it keeps its state there while it runs
    if names:
        catalog.check_own(names, "rebase")
    state_dir = catalog.root / STATE_DIR
    if (state_dir / "state.json").exists():
        raise UsageError(f"a rebase is in progress in {catalog.root}: finish it with "
                         "`patchkit rebase --continue`, `--skip` or `--abort`")
    inactive = bool(names) or include_inactive
    # every fix: the catalog's own (the shipped fixes seen beside it are not rewritten here)
    fixes = queue_order(catalog, list(names) if names else catalog.own_names())
    if repo is not None:
        git_dir = Path(repo).expanduser()
        if gitrepo.rev_parse(git_dir, "HEAD") is None and not (git_dir / "HEAD").is_file():
            raise UsageError(f"--repo {repo} is not a git repository: name an SGLang clone",
                             path=str(repo))
        fetch, clone = None, True
    elif upstream is not None:
        git_dir, fetch, clone = upstream.git_dir, upstream, upstream.foreign
    else:
        git_dir, fetch, clone = _managed_git_dir(), None, False
    label, release, onto_rev, base_rev = _resolve(git_dir, onto, fixes, base, clone=clone,
                                                  fetch=fetch, progress=progress,
                                                  inactive=inactive)
    state_dir.mkdir(exist_ok=True)
    (state_dir / ".gitignore").write_text("*\n", encoding="utf-8")
    (state_dir / "written").unlink(missing_ok=True)
    backup = state_dir / "backup"
    shutil.rmtree(backup, ignore_errors=True)
    shutil.copytree(catalog.manifests_dir, backup / "manifests")
    shutil.copytree(catalog.patches_dir, backup / "patches")
    state = {"format": STATE_FORMAT, "onto": label, "release": release, "onto_rev": onto_rev,
             "base": base_rev, "git_dir": str(git_dir), "queue": [f.name for f in fixes],
             "written": [], "results": [], "plan": {}, "stopped": None, "inactive": inactive,
             "dry_run": dry_run}
    run = Run(catalog, state, progress)
    if run.writes:
        run.plan()
        return run.run()
    try:  # a report-only run never stops, so nothing of it may stay behind
        run.plan()
        return run.run()
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def _load(catalog: Catalog, progress: Progress | None) -> Run:
    path = catalog.root / STATE_DIR / "state.json"
    if not path.is_file():
        raise UsageError(f"no rebase in progress in {catalog.root} (no {STATE_DIR}/state.json); "
                         "start one with `patchkit rebase --onto RELEASE`", catalog=str(catalog.root))
    state = json.loads(path.read_text(encoding="utf-8"))
    if state.get("format") != STATE_FORMAT:
        raise UsageError(f"{path} has format {state.get('format')}; this patchkit reads "
                         f"{STATE_FORMAT}: finish it with the patchkit that started it")
    journal = path.parent / "written"
    if journal.is_file():
        state["written"] = list(dict.fromkeys(
            [*state["written"], *journal.read_text(encoding="utf-8").split()]))
    return Run(catalog, state, progress)


def continue_(catalog: Catalog, *, upstream: UpstreamRepo | None = None,
              progress: Progress | None = None) -> RebaseReport:
    """Take the edited worktree files as the stopped patch's result and go on."""
    run = _load(catalog, progress)
    stopped = run.state["stopped"]
    if not stopped:
        return run.run()
    wt = run.worktree()
    resumed: dict[str, str | None] = {}
    for path in stopped["paths"]:
        f = wt / path
        text = hunks.decode(f.read_bytes()) if f.is_file() else None
        if text is not None and any(line.startswith(MARKERS) for line in text.split("\n")):
            raise UsageError(f"{f} still has conflict markers: resolve them (edit the file), "
                             "then run `patchkit rebase --continue` again", path=str(f))
        resumed[path] = text
    old = run.old_fix(stopped["name"])
    file = stopped["file"]
    stopped["done"][file] = _refreshed(old, file, stopped["pre"], resumed)
    reps = stopped["patches"]
    reps[-1] = {**reps[-1], "classification": "resolved",
                "detail": f"{reps[-1]['classification']}, resolved by hand: {reps[-1]['detail']}"}
    report, done, stop = run.one(stopped["name"], resumed=resumed)
    if stop is not None:
        run.blobs.close()
        run.lay_out(stop)
        run.save()
        return run.report(report)
    run.drop_worktree()
    fix = run.catalog.get(stopped["name"])
    run.write(fix, report, done)
    run.state["results"].append(report.to_json())
    run.state["stopped"] = None
    run.state["queue"].pop(0)
    run.replan_after(fix.name, [p for r in report.patches for p in r.paths])
    return run.run()


def _refreshed(old, file: str, pre, post) -> str:  # noqa: ANN001
    from .classify import series_text

    return series_text((old.patch_dir / file).read_text(encoding="utf-8", errors="surrogateescape"),
                       pre, post)


def skip(catalog: Catalog, *, upstream: UpstreamRepo | None = None,
         progress: Progress | None = None) -> RebaseReport:
    """Leave the stopped fix as it is in the catalog and go on with the next (planned) one."""
    run = _load(catalog, progress)
    stopped = run.state["stopped"]
    if stopped:
        fix = run.catalog.get(stopped["name"])
        run.drop_worktree()
        if run.fingerprint(fix.name) != stopped.get("key"):  # edited while stopped, then skipped
            run.replan_after(fix.name, stopped["paths"])
        run.state["results"].append(FixReport(
            fix.name, fix.upstream.base_release, run.onto, "skipped",
            "skipped by the user at a conflict; left as it was", tuple(
                fix_from_json({"name": "", "from_release": "", "to_release": "", "outcome": "",
                               "detail": "", "patches": stopped["patches"]}).patches),
            fix.version, fix.version).to_json())
        run.state["stopped"] = None
        run.state["queue"].pop(0)
    return run.run()


def abort(catalog: Catalog, *, upstream: UpstreamRepo | None = None) -> list[str]:
    """Put back every catalog file the run wrote; remove the worktree and the state."""
    run = _load(catalog, None)
    restored = []
    for name in run.state["written"]:
        shutil.copy2(run.backup / "manifests" / f"{name}.toml", catalog.manifest_path(name))
        src, dst = run.backup / "patches" / name, catalog.patches_dir / name
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
        restored.append(name)
    run.drop_worktree()
    shutil.rmtree(run.dir, ignore_errors=True)
    return restored


def current(catalog: Catalog) -> RebaseReport | None:
    """The rebase in progress in ``catalog`` (where it stopped, what is done and what is
    left), or None; reads the state and changes nothing."""
    if not in_progress(catalog):
        return None
    run = _load(catalog, None)
    try:
        return run.stopped_report()
    finally:
        run.blobs.close()


def in_progress(catalog: Catalog) -> bool:
    return (catalog.root / STATE_DIR / "state.json").is_file()
