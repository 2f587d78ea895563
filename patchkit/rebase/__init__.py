"""Rebase fixes onto a newer SGLang release or commit (``patchkit rebase``, docs/rebase.md).

:mod:`.state` holds a rebase in progress, :mod:`.loop` plans and writes, :mod:`.sides` builds
the trees a fix is computed between, :mod:`.matching` finds upstream commits by patch-id,
:mod:`.classify` decides a patch."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from .. import gitrepo
from ..catalog import Catalog
from ..catalog.series import patch_text
from ..engine import hunks
from ..errors import UsageError
from ..upstream import UpstreamRepo, release_name
from .classify import PatchReport, missing_why, patch_from_json, series_text
from .loop import Rebase
from .sides import queue_order, skip_reason
from .state import (MARKERS, STATE_DIR, STATE_FORMAT, FixReport, Progress, RebaseReport,
                    RebaseState, backport, fix_report, start_from)
from .versions import range_diff, series_of_version

__all__ = ["FixReport", "PatchReport", "RebaseReport", "STATE_DIR", "abort", "continue_",
           "current", "in_progress", "range_diff", "series_of_version", "skip", "start"]


def _release(text: str) -> str | None:
    """The release ``text`` (``0.5.23`` or ``v0.5.23``) names, or None (a git revision)."""
    with contextlib.suppress(UsageError):
        return release_name(text)
    return None


def _resolve(fetch: UpstreamRepo | None, git_dir: Path, onto: str, bases: set[str],
             base: str | None, progress: Progress | None
             ) -> tuple[str, str | None, str, str | None]:
    """(label, release or None, onto commit, base commit or None), fetching missing releases
    first when ``fetch`` (patchkit's own upstream repository) is given."""
    release = _release(onto)
    missing = [v for v in sorted(bases | ({release} if release else set()))
               if gitrepo.rev_parse(git_dir, f"v{v}") is None]
    if fetch is not None and missing:
        fetch.fetch_all(missing, progress=(lambda line: progress(line, 0, -1)) if progress else None)
    missing = missing if fetch is None else []
    onto_rev = gitrepo.rev_parse(git_dir, f"v{release}") if release else None
    if onto_rev is None:
        onto_rev, release = gitrepo.rev_parse(git_dir, onto), None
    if onto_rev is None:
        if fetch is None:  # --repo: a user's SGLang clone
            raise UsageError(f"--onto {onto}: no such release or commit in {git_dir}; name a "
                             "release (0.5.23), a tag or a commit of the clone", onto=onto)
        held = ", ".join(fetch.versions()) or "none yet"
        raise UsageError(f"--onto {onto}: not a release (like 0.5.23 or v0.5.23, fetched from the "
                         f"package registry when missing) nor a commit of the release store "
                         f"{fetch.path} (it holds {held}); to rebase onto a commit of an SGLang "
                         "clone, give --repo CLONE", onto=onto)
    missing = [v for v in missing if v != release]
    if missing:
        raise UsageError(f"the fixes' base release(s) {', '.join(missing)} have no tag "
                         f"v<release> in {git_dir}: fetch the tags there, or name the base "
                         "with --base REF", missing=missing)
    base_rev = None if base is None else gitrepo.rev_parse(git_dir, base)
    if base is not None and base_rev is None:
        raise UsageError(f"--base {base}: no such commit in {git_dir}", base=base)
    return release or (onto if len(onto) < 40 else onto[:12]), release, onto_rev, base_rev


def start(catalog: Catalog, onto: str, names: Sequence[str] | None = None, *,
          upstream: UpstreamRepo | None = None, repo: Path | str | None = None,
          base: str | None = None, include_inactive: bool = False,
          progress: Progress | None = None, dry_run: bool = False,
          drop_old: bool = False) -> RebaseReport:
    """Rebase ``names`` (default: every fix of the catalog's own, dead and superseded ones only
    with ``include_inactive``) onto ``onto``: a release, or with ``repo`` (an SGLang clone) any
    tag or commit there; ``base`` overrides each fix's ``v<base>``. ``dry_run`` (and an ``onto``
    that is no release) only reports. Each rebased fix keeps its old version as a variant for
    the releases it served (docs/rebase.md, "Variants"); ``drop_old`` keeps none."""
    if not dry_run and _release(onto) is not None:  # a report-only run writes nowhere in it
        catalog.check_writable("rebase", dry_run="rebase --dry-run")
        if names:
            catalog.check_own(names, "rebase")
    if in_progress(catalog):
        raise UsageError(f"a rebase is in progress in {catalog.root}: finish it with "
                         "`patchkit rebase --continue`, `--skip` or `--abort`")
    inactive = bool(names) or include_inactive
    fixes = queue_order(catalog, list(names) if names else catalog.own_names())
    fetch = None  # patchkit's own upstream repository: missing releases are fetched there
    if repo is not None:
        git_dir = Path(repo).expanduser()
        if gitrepo.rev_parse(git_dir, "HEAD") is None and not (git_dir / "HEAD").is_file():
            raise UsageError(f"--repo {repo} is not a git repository: name an SGLang clone",
                             path=str(repo))
    elif upstream is None:
        fetch = UpstreamRepo()
        git_dir = fetch.git_dir
    else:
        fetch, git_dir = (None if upstream.foreign else upstream), upstream.git_dir
    release = _release(onto)
    # only the bases of fixes that will be rebased: a dead fix's old release is not needed
    bases = set() if base is not None else {  # for a backport, the version it starts from's
        start_from(f, release, drop_old).upstream.base_release
        for f in fixes if not skip_reason(f, release, inactive, drop_old)}
    label, release, onto_rev, base_rev = _resolve(fetch, git_dir, onto, bases, base, progress)
    state = RebaseState.create(catalog, {
        "format": STATE_FORMAT, "onto": label, "release": release, "onto_rev": onto_rev,
        "base": base_rev, "git_dir": str(git_dir), "queue": [f.name for f in fixes],
        "written": [], "results": [], "plan": {}, "stopped": None, "inactive": inactive,
        "dry_run": dry_run, "drop_old": drop_old})
    rebase = Rebase(state, progress)
    try:
        rebase.plan()
        return rebase.rebase_loop()
    except BaseException:
        if state.writes and not state.data["written"] and not state.data.get("stopped"):
            state.remove()  # failed before it wrote a fix: no rebase to continue or abort
        raise
    finally:
        if not state.writes:  # a report-only rebase never stops: nothing of it may stay
            state.remove()


def continue_(catalog: Catalog, *, upstream: UpstreamRepo | None = None,
              progress: Progress | None = None) -> RebaseReport:
    """Take the edited worktree files as the stopped patch's result and go on."""
    rebase = Rebase(RebaseState.load(catalog), progress)
    state, stopped = rebase.state, rebase.state.data["stopped"]
    if not stopped:
        return rebase.rebase_loop()
    resumed: dict[str, str | None] = {}
    for path in stopped["paths"]:
        f = state.worktree / path
        text = hunks.decode(f.read_bytes()) if f.is_file() else None
        if text is not None and any(line.startswith(MARKERS) for line in text.split("\n")):
            raise UsageError(f"{f} still has conflict markers: resolve them (edit the file), "
                             "then run `patchkit rebase --continue` again", path=str(f))
        resumed[path] = text
    kept = [p for p in stopped.get("missing", ()) if resumed.get(p) is not None]
    old, file = rebase.start(state.old_fix(stopped["name"])), stopped["file"]
    if kept:  # the old file taken as it is: the patch would create it whole
        back = backport(state.old_fix(stopped["name"]), state.release, rebase.drop_old)
        left = (f"the variant for {state.onto} leaves that change out" if back else
                f"a fix left with no change is marked upstream since {state.onto}")
        raise UsageError(
            f"{state.onto} has no {', '.join(kept)}, which fix {stopped['name']} changes "
            f"({stopped['file']}; {missing_why(old.upstream.base_release, state.onto)}), and "
            "--continue would write a patch that creates the whole file. Run `patchkit rebase "
            "--skip` to leave the fix as it is (the releases it serves keep it); if "
            f"{state.onto} does not need the change, delete "
            f"{', '.join(str(state.worktree / p) for p in kept)} and run `patchkit rebase "
            f"--continue` ({left}); if the code lies in another file there, `patchkit rebase "
            f"--skip` and write the fix again on {state.onto}. Nothing was written; the rebase "
            "stays stopped", fix=stopped["name"], missing=kept)
    source = next(r.path for r in old.patches if r.file == file)  # a backport's: its variant's
    stopped["done"][file] = series_text(patch_text(source), stopped["pre"], resumed)
    last = stopped["patches"][-1]
    if all(resumed.get(p) == stopped["pre"].get(p) for p in stopped["pre"]):
        # left as the release has it: the patch changes nothing there, it is upstream
        stopped["patches"][-1] = {**last, "classification": "upstream",
                                  "detail": f"{last['classification']}, resolved by hand to "
                                            f"{state.onto}'s files: already upstream"}
    else:
        stopped["patches"][-1] = {**last, "classification": "resolved",
                                  "detail": f"{last['classification']}, resolved by hand: "
                                            f"{last['detail']}"}
    report, done, stop = rebase.rebase_fix(stopped["name"], resumed=resumed)
    if stop is not None:
        rebase.sides.blobs.close()
        state.stop_at(stop)
        return state.report(report)
    state.drop_worktree()
    fix = catalog.get(stopped["name"])
    rebase.done_with(fix, report, done)
    rebase.replan_after(fix.name, [p for r in report.patches for p in r.paths])
    return rebase.rebase_loop()


def skip(catalog: Catalog, *, upstream: UpstreamRepo | None = None,
         progress: Progress | None = None) -> RebaseReport:
    """Leave the stopped fix as it is in the catalog and go on with the next (planned) one."""
    rebase = Rebase(RebaseState.load(catalog), progress)
    state, stopped = rebase.state, rebase.state.data["stopped"]
    if stopped:
        fix = state.started(catalog.get(stopped["name"]))  # the version its stop named
        state.drop_worktree()
        if state.fingerprint(fix.name) != stopped.get("key"):  # edited while stopped
            rebase.replan_after(fix.name, stopped["paths"])
        state.data["results"].append(fix_report(
            fix, state.onto, "skipped", "skipped by the user at a conflict; left as it was",
            tuple(patch_from_json(p) for p in stopped["patches"])).to_json())
        state.data["stopped"] = None
        state.data["queue"].pop(0)
    return rebase.rebase_loop()


def abort(catalog: Catalog, *, upstream: UpstreamRepo | None = None) -> list[str]:
    """Put back every catalog file the rebase wrote; remove the worktree and the state."""
    return RebaseState.load(catalog).restore()


def current(catalog: Catalog) -> RebaseReport | None:
    """The rebase in progress in ``catalog`` (read, not changed), or None."""
    return RebaseState.load(catalog).stopped_report() if in_progress(catalog) else None


def in_progress(catalog: Catalog) -> bool:
    return (catalog.root / STATE_DIR / "state.json").is_file()
