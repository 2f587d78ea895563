"""Does an SGLang release already contain a fix? (``patchkit upstream check``, docs/upstream.md
"Is a fix upstream?"). Three tests, in order; the first two are the per-patch decision
``patchkit rebase`` makes too (:func:`patchkit.rebase.classify.held_upstream`):

1. patch-id: an upstream commit between the fix's base release and the release has the
   ``git patch-id --stable`` of the fix's series, or of each of its patches;
2. reverse-apply: each patch's hunks do not apply to the release but their reverse does, with
   zero fuzz (the change is there, whoever committed it);
3. verification greps: the fix's own ``grep`` verification checks on the release's root all
   pass on the release and not all on the fix's base (so they tell the change apart).

A revert fix (``[revert]``) is contained when the release no longer has the reverted change
while its base release had it: its own series (the reverse of that change) is tested, else the
reverted fix's series reversed. When the base never had the change (the revert of a commit of
the fork), the release cannot tell: not applicable."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from .. import gitrepo
from ..catalog import Catalog, edit, writer
from ..catalog.model import Check, Fix
from ..engine import hunks
from ..engine.contract import grep_holds
from ..errors import ConflictError, PatchkitError
from ..upstream import UpstreamRepo, version_key
from .classify import Held, Series, Tree, apply_all, changes, decide, held_upstream
from .matching import UpstreamMatches
from .sides import read_series

__all__ = ["AMBIGUOUS", "CONTAINED", "NOT_APPLICABLE", "NOT_CHECKED", "NOT_CONTAINED",
           "REMOVED", "REVERTED", "Verdict", "check", "contains"]

CONTAINED, NOT_CONTAINED, NOT_APPLICABLE = "contained", "not-contained", "not-applicable"
AMBIGUOUS = "ambiguous"  # both directions apply, or what it adds is already there: a human
REVERTED = "reverted-upstream"  # an upstream commit held it, a later one reverted it
REMOVED = "removed-upstream"  # an earlier release held it, this one no longer does
NOT_CHECKED = "not-checked"  # a release it needs could not be had (the detail says why)


@dataclass(frozen=True)
class Verdict:
    """What one release says of one fix, and the evidence."""

    fix: str
    release: str
    verdict: str  # contained | not-contained | not-applicable | ambiguous | reverted-upstream
    #               | removed-upstream | not-checked
    test: str = ""  # contained: patch-id | reverse-apply | post-image | merge | verification
    detail: str = ""
    commits: tuple[str, ...] = ()  # patch-id: the upstream commits holding the series
    files: tuple[str, ...] = ()  # the files the deciding test read

    @property
    def contained(self) -> bool:
        return self.verdict == CONTAINED

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "commits": list(self.commits), "files": list(self.files)}


@dataclass
class _Subject:
    """A fix as tested: the series whose presence means "contained"."""

    fix: Fix
    texts: Series  # for patch-id; empty when the series is computed (a revert of a fix)
    patches: list[tuple[str, list[hunks.FileChange]]]


def contains(catalog: Catalog, fix: str | Fix, release: str, *,
             upstream: UpstreamRepo | None = None) -> Verdict:
    """Whether ``release`` (from the release store, ``upstream``) already contains ``fix``."""
    return check(catalog, [fix], release, upstream=upstream)[0]


def check(catalog: Catalog, fixes: Sequence[str | Fix], release: str, *,
          upstream: UpstreamRepo | None = None,
          progress: Callable[[str], None] | None = None) -> list[Verdict]:
    """:func:`contains` for several fixes at once (one ``git log`` for all their patch-ids).
    Releases missing from patchkit's own release store are fetched from the package registry
    (``progress`` says so); in a clone (``UpstreamRepo`` of a git repository) they must be
    tags. A fix whose base release cannot be had is ``not-checked`` (the detail says why), the
    others are checked; an unknown fix or a release that cannot be had is a UsageError."""
    repo = upstream or UpstreamRepo()
    found = [f if isinstance(f, Fix) else catalog.get(f) for f in fixes]
    onto = _have(repo, release, progress)
    verdicts: dict[str, Verdict] = {}
    subjects: list[_Subject] = []
    bases: dict[str, str | None] = {}
    tops = {f.name: f for f in found}
    for top in found:
        fix = judged(top, release)  # a variant serving the release, say, not the top level
        why = _not_applicable(fix) or _older(release, top)
        if why:
            verdicts[fix.name] = Verdict(fix.name, release, NOT_APPLICABLE, detail=why)
            continue
        base = fix.upstream.base_release
        if base not in bases:
            try:
                _have(repo, base, progress)
                bases[base] = None
            except PatchkitError as exc:
                bases[base] = str(exc)
        if bases[base]:
            verdicts[fix.name] = Verdict(fix.name, release, NOT_CHECKED, detail=(
                f"its base release {base} is not available, so it cannot be compared: "
                f"{bases[base]}"))
            continue
        subjects.append(_subject(catalog, fix, release))
    versions = repo.versions()
    blobs = gitrepo.Blobs(repo.git_dir)
    try:
        matches = UpstreamMatches(repo.git_dir, onto.commit,
                                  lambda fix: f"v{fix.upstream.base_release}")
        matches.match([(s.fix, s.texts) for s in subjects if s.texts])
        for s in subjects:
            between = [v for v in versions if _between(s.fix.upstream.base_release, v, release)]
            verdict = _decide(s, matches, Tree(blobs, onto.commit), blobs, release, between)
            if s.fix.version != tops[s.fix.name].version:
                how = "serving" if release in s.fix.upstream.releases else "nearest"
                verdict = replace(verdict, detail=f"{verdict.detail}; asked of its variant "
                                  f"v{s.fix.version} (based on {s.fix.upstream.base_release}), "
                                  f"the version {how} {release}")
            verdicts[s.fix.name] = verdict
    finally:
        blobs.close()
    return [verdicts[f.name] for f in found]


def judged(fix: Fix, release: str) -> Fix:
    """The version of ``fix`` a release is asked about: the one serving it, else the one based
    on the newest release not after it (the series a release between two versions' bases
    would have been written from), else the top level (a release older than every version)."""
    if not fix.variants:
        return fix
    served = fix.variant_for(release)
    if served is not None:
        return served
    try:
        below = [v for v in fix.all_variants()
                 if version_key(v.upstream.base_release) <= version_key(release)]
    except PatchkitError:  # a tag of a clone that is no release: the top level, as before
        return fix
    return max(below, key=lambda v: version_key(v.upstream.base_release)) if below else fix


def _have(repo: UpstreamRepo, version: str, progress: Callable[[str], None] | None):
    """The release ``version``, fetched first into patchkit's own store when it is missing."""
    if repo.foreign or version in repo.versions():
        return repo.release(version)
    return repo.fetch(version, progress=progress)


def _between(base: str, version: str, release: str) -> bool:
    try:
        return version_key(base) < version_key(version) < version_key(release)
    except PatchkitError:
        return False


def _older(release: str, fix: Fix) -> str:
    """Why ``release``, older than the base of every version of ``fix`` (its top level's and
    its variants'), cannot tell ("" when it is not older): the fix was written on its base to
    change it, so no release before can have taken it; its reversed hunks may apply there
    all the same (a fix taking back a change of the base), and "upstream since" an older
    release would make the fix not needed on its own base."""
    try:
        oldest = min((v.upstream.base_release for v in fix.all_variants()), key=version_key)
        if version_key(release) >= version_key(oldest):
            return ""
    except PatchkitError:  # a tag of a clone that is no release: asked as it is
        return ""
    said = (f"older than its base release {oldest}" if not fix.variants else
            f"older than every version of the fix (the oldest based on {oldest})")
    return (f"{release} is {said}: a release before the one the fix was written on cannot "
            "have taken it (`patchkit matrix` says what each release needs)")


def _not_applicable(fix: Fix) -> str:
    """Why a release cannot tell whether it holds ``fix`` ("" when it can)."""
    root = fix.upstream.root
    if fix.upstream.project != "sglang":
        return f"not an SGLang fix (upstream.project = {fix.upstream.project!r})"
    other = sorted({p.root for p in fix.patches if p.root != root})
    if other:
        return f"targets another root ({', '.join(other)}), not the SGLang release"
    if fix.revert is not None and (fix.revert.root or root) != root:
        return f"reverts a commit of another root ({fix.revert.root})"
    return ""


def _subject(catalog: Catalog, fix: Fix, release: str) -> _Subject:
    if fix.patches:
        texts = read_series(fix)
        return _Subject(fix, texts, changes(fix, texts, fix.patch_dir))
    if fix.revert is not None and fix.revert.fix:  # the reverted fix's series, reversed
        gone = judged(catalog.get(fix.revert.fix), release)
        chs = [c for _f, cs in changes(gone, read_series(gone), gone.patch_dir) for c in cs]
        wanted = set(fix.revert.paths)
        undo = [c.reversed() for c in reversed(chs) if not wanted or c.path in wanted]
        return _Subject(fix, [], [(f"reverse of {gone.name}", undo)] if undo else [])
    return _Subject(fix, [], [])


def _by_patches(s: _Subject, matches: UpstreamMatches, tree: Tree, blobs: gitrepo.Blobs,
                release: str, between: Sequence[str]) -> Verdict | str:
    """The verdict of the fix's patches, or the first patch upstream does not hold."""
    fix = s.fix
    whole, per_patch = matches.of(fix, s.texts) if s.texts else (None, {})
    held: list[tuple[Held, list[str]]] = []
    missing = ""
    base_tree = Tree(blobs, f"v{fix.upstream.base_release}")
    for file, chs in s.patches:
        hit = whole or per_patch.get(file)
        said = decide(tree, chs, hit, matches.reverted(fix, hit), base_tree)
        paths = tuple(dict.fromkeys(c.path for c in chs))
        if said.kind == "absent" and said.applies:
            for version in between:  # held by an earlier release: removed since
                there = decide(Tree(blobs, f"v{version}"), chs, None)
                if there.held is not None:
                    return Verdict(fix.name, release, REMOVED, "release-walk", (
                        f"{file}: landed upstream in {version} ({there.held.detail(version)})"
                        f", and {release} no longer has it: removed (or reverted) "
                        "upstream; applying it would bring the code back"), (), paths)
        if said.kind in ("ambiguous", "reverted", "removed"):
            verdict = {"ambiguous": AMBIGUOUS, "reverted": REVERTED,
                       "removed": REMOVED}[said.kind]
            return Verdict(fix.name, release, verdict, said.kind, f"{file}: {said.detail}",
                           (said.commit,) if said.commit else (), paths)
        if said.held is None:
            missing = file
            break
        held.append((said.held, list(paths)))
        # the base side moves on with the series (the next patch's merge test)
        try:
            apply_all(base_tree, chs)
        except ConflictError:
            pass
    else:
        files = tuple(dict.fromkeys(p for _h, paths in held for p in paths))
        if fix.revert is not None:  # only evidence if the release line ever had the change
            base = Tree(blobs, f"v{fix.upstream.base_release}")
            if all(held_upstream(base, chs, None) is not None for _file, chs in s.patches):
                return Verdict(fix.name, release, NOT_APPLICABLE, detail=(
                    f"the change it reverts is in neither its base {fix.upstream.base_release} "
                    f"nor {release}: it reverts a commit of the fork, not of SGLang"))
        commits = tuple(dict.fromkeys(h.commit for h, _p in held if h.commit))
        if all(h.test == "patch-id" for h, _p in held):
            subjects = dict.fromkeys(h.subject for h, _p in held)
            return Verdict(fix.name, release, CONTAINED, "patch-id",
                           f"upstream commit {', '.join(c[:12] for c in commits)} "
                           f"({'; '.join(subjects)}) has its patch-id", commits, files)
        tests = list(dict.fromkeys(h.test for h, _p in held if h.test != "patch-id"))
        test = tests[0] if len(tests) == 1 else "post-image"
        how = "; ".join(h.detail(release) for h, _p in held if h.test != "patch-id")
        return Verdict(fix.name, release, CONTAINED, test, how
                       + (f" (patch-id: upstream commit {', '.join(c[:12] for c in commits)})"
                          if commits else ""), commits, files)
    return missing


def _decide(s: _Subject, matches: UpstreamMatches, tree: Tree, blobs: gitrepo.Blobs,
            release: str, between: Sequence[str] = ()) -> Verdict:
    fix = s.fix
    missing = ""
    if s.patches:
        found = _by_patches(s, matches, tree, blobs, release, between)
        if isinstance(found, Verdict):
            return found
        missing = found
    greps = [c for c in fix.verification if c.kind == "grep"
             and (c.get("root") or fix.upstream.root) == fix.upstream.root]
    if greps:
        onto_ok = all(_grep_holds(c, tree.get(c.get("path"))) for c in greps)
        base = Tree(blobs, f"v{fix.upstream.base_release}")
        base_ok = all(_grep_holds(c, base.get(c.get("path"))) for c in greps)
        files = tuple(dict.fromkeys(str(c.get("path")) for c in greps))
        if onto_ok and not base_ok:
            return Verdict(fix.name, release, CONTAINED, "verification",
                           f"its {len(greps)} verification grep(s) pass on {release} and not "
                           f"on its base {fix.upstream.base_release}", (), files)
    if not s.patches:
        why = "no series to compare (a revert of a commit named by id)" if fix.revert else \
            "no patch series"
        return Verdict(fix.name, release, NOT_CONTAINED,
                       detail=why + (", and its verification greps do not tell" if greps else ""))
    return Verdict(fix.name, release, NOT_CONTAINED,
                   detail=f"{missing}: no upstream commit has its patch-id, it is not held hunk by "
                   "hunk and a three-way merge would change the release" + ("; its verification greps do not tell" if greps
                                           else "; no grep verification to ask"))


def _grep_holds(check_: Check, text: str | None) -> bool:
    """A grep check's verdict on a file's text, as the engine decides it."""
    if text is None:
        return False
    pattern = str(check_.get("pattern"))
    regex = None
    if check_.get("regex"):
        with contextlib.suppress(re.error):
            regex = re.compile(pattern)
        if regex is None:
            return False
    hits = sum(1 for line in text.split("\n")
               if (regex.search(line) if regex is not None else pattern in line))
    return grep_holds(check_.params, hits)


@dataclass(frozen=True)
class Marked:
    """What ``--mark`` did (or would do) with one contained fix."""

    fix: str
    version: int  # the new version; the current one when not marked
    marked: bool
    detail: str
    commit: str | None = None  # the catalog commit recording it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def mark(catalog: Catalog, verdicts: Sequence[Verdict], *,
         commit: bool = True, dry_run: bool = False) -> list[Marked]:
    """Record each contained, active fix as ``status = "upstreamed"`` with ``[upstream]
    applied = "<release>"``, its version and series unchanged (a host on an earlier release keeps
    the version it runs; on that release and later the fix is not needed) and, in a catalog in
    git, one commit per fix, as other authoring edits. Fixes are checked
    (writable catalog, the user's own) before anything is written."""
    todo = [v for v in verdicts if v.contained]
    if not todo:
        return []
    catalog.check_writable("mark fixes upstreamed")
    catalog.check_own([v.fix for v in todo], "mark as upstreamed")
    done = []
    for v in todo:
        fix = catalog.get(v.fix)
        if fix.status != "active":
            done.append(Marked(fix.name, fix.version, False, f"status is {fix.status}: not "
                               "marked (only active fixes are)"))
            continue
        summary = f"Upstreamed in {v.release} ({_evidence(v)})."
        if dry_run:
            done.append(Marked(fix.name, fix.version, False, f"would be marked: {summary}"))
            continue
        # the version and series stay: hosts on releases before v.release keep running it
        if not edit.set_upstream(fix.manifest_path, v.release):
            done.append(Marked(fix.name, fix.version, False, f"marked upstream in {v.release} "
                               "already: not marked again"))
            continue
        catalog.forget(fix.name)
        sha = writer.commit(catalog, fix.name, f"{fix.name} v{fix.version}: {summary}\n\nRecorded "
                      "by `patchkit upstream check --mark`; the version is unchanged, so hosts "
                      f"on releases before {v.release} keep it.\n") if commit else None
        done.append(Marked(fix.name, fix.version, True, summary, sha))
    return done


def _evidence(v: Verdict) -> str:
    if v.test == "patch-id":
        return f"patch-id of upstream commit {', '.join(c[:12] for c in v.commits)}"
    if v.test in ("reverse-apply", "post-image", "merge"):
        return v.detail
    return "its verification greps pass"
