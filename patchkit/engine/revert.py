"""Revert fixes (docs/git.md): each file commit C changed becomes the three-way merge of the
current file, C's version and C's parent's, so later changes are kept."""

from __future__ import annotations

from typing import Any, Dict, List, NoReturn, Optional, Tuple

from ..errors import ConflictError
from .checks import result
from .gitops import Checkout, checkout_and_head, merge_file
from .hunks import decode, locate, split_lines
from .paths import Roots
from .recordbase import Record, record_dataclass
from .request import FixSpec

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


@record_dataclass(frozen=True)
class RevertFile(Record):
    """One file the reverted commit touched."""

    status: str  # what C did to the file: A (added), M (modified), D (deleted)
    repo_path: str  # as git names it
    path: str  # checkout layout, as the request's FILE records name files


@record_dataclass(frozen=True)
class Source(Record):
    """The commit a revert fix undoes, in the checkout of its root."""

    root: str
    checkout: Checkout
    sha: str
    parent: str
    title: str  # "abbrev subject"
    found_by: str
    files: Tuple[RevertFile, ...]


def _name(rev: Dict[str, Any]) -> str:
    if rev.get("commit") and rev.get("fix"):
        return "commit %s (or the commit of fix %s)" % (rev["commit"], rev["fix"])
    return "commit %s" % rev["commit"] if rev.get("commit") else "the commit of fix %s" % rev.get("fix")


def resolve(fix: FixSpec, roots: Roots) -> Tuple[Optional[Source], Dict[str, Any]]:
    """The commit to revert and the precondition result saying how it was found; no commit
    with an ok result: the root is outside git and the FILE records are the fallback."""
    source, found, _why = resolved(fix, roots)
    return source, found


def resolved(fix: FixSpec, roots: Roots) -> Tuple[Optional[Source], Dict[str, Any], str]:
    """:func:`resolve`, and why there is nothing to revert: the target's checkout is git,
    with a HEAD, whose history holds no commit the fix undoes (``status``'s not-needed
    detail); "" otherwise."""
    rev = fix.revert or {}
    root = roots.get(str(rev.get("root") or "sglang"))
    label = "revert %s" % _name(rev)

    def outcome(ok: bool, detail: str) -> Dict[str, Any]:
        return result("git-revert", label, ok, detail, root.name)

    checkout, head, outside = _checkout(root)
    if checkout is None:
        if fix.files:
            return None, outcome(True, "root %s %s: reverse-applying %s instead"
                                 % (root.name, outside, "the series of fix %s" % rev["fix"] if rev.get("fix")
                                    and not rev.get("own_series") else "this fix's own series")), ""
        return None, outcome(False, "root %s (%s) %s, and a revert of %s needs one; "
                             "name the fix whose series it committed (revert.fix) so patchkit can "
                             "reverse that series instead" % (root.name, root.path, outside,
                                                              _name(rev))), ""
    if head is None:
        return None, outcome(False, "root %s has no commit at HEAD" % root.name), ""
    commit, found_by, missing = _find(rev, root, checkout, head)
    if commit is None:
        return None, outcome(False, "; ".join(missing) + ": there is nothing to revert in root %s. "
                             "Check the target's branch, or leave this fix out" % root.name), \
            NOTHING % "; ".join(missing)
    if len(commit.parents) > 1:
        return None, outcome(False, "%s is a merge commit; patchkit reverts single-parent commits "
                             "only" % commit.title), ""
    parent = commit.parents[0] if commit.parents else EMPTY_TREE
    wanted = [checkout.rel(root.mapped(p)) for p in rev.get("paths") or []]
    files = tuple(RevertFile(status if status in "AD" else "M", path,
                             root.unmapped(path[len(checkout.prefix):]))
                  for status, path in commit.files if within(path, wanted or [checkout.prefix]))
    sha, title = commit.sha, commit.title
    if not files:
        return None, outcome(False, "commit %s changes none of %s in root %s"
                             % (title, ", ".join(rev.get("paths") or ["its files"]), root.name)), ""
    return Source(root.name, checkout, sha, parent, title, found_by, files), \
        outcome(True, "reverts %s (found by %s)" % (title, found_by)), ""


def _checkout(root: Any) -> Tuple[Optional[Checkout], Optional[str], str]:
    """The git checkout a revert is asked of, its HEAD, and why there is none: an installed
    package has none, whatever work tree it lies in (a virtualenv in a project's repository):
    its wheel's RECORD is its proof, as the clean check says, and that repository's history
    is not SGLang's."""
    from .record import installed

    if installed(root) is not None:
        return None, None, ("is an installed package (the git work tree it lies in is not "
                            "its history)")
    checkout, head = checkout_and_head(root.path)  # one git process for both
    return checkout, head, "is not a git checkout"


def _find(rev: Dict[str, Any], root: Any, checkout: Checkout, head: str
          ) -> Tuple[Any, str, List[str]]:
    """The commit ``rev`` names in the history of ``head`` (by id, else by the patch-id of
    ``revert.fix``'s series), how it was found, and why each way found none."""
    commit, found_by, missing = None, "", []  # type: Tuple[Any, str, List[str]]
    if rev.get("commit"):
        cand = checkout.rev(str(rev["commit"]))
        if cand is None:
            missing.append("commit %s does not exist in the repository %s" % (rev["commit"], checkout.top))
        elif not checkout.is_ancestor(cand, head):
            missing.append("commit %s (%s) is not in the history of HEAD (%s)"
                           % (rev["commit"], checkout.describe(cand), head[:12]))
        else:
            commit, found_by = checkout.commits([cand])[0], "commit id %s" % rev["commit"]
    if commit is None and rev.get("fix"):
        paths = [checkout.rel(root.mapped(p)) for p in rev.get("fix_paths") or []]
        pid, found = checkout.find_by_patch_id(str(rev.get("series") or ""), paths)
        if found:
            commit, found_by = found[0], "patch-id of fix %s's series" % rev["fix"]
        else:
            missing.append("no commit in the history of HEAD (%s) carries the change of fix %s "
                           "(patch-id %s of its series)" % (head[:12], rev["fix"], pid or "none"))
    return commit, found_by, missing


#: A revert fix's ``not-needed`` detail: why its change was never there.
NOTHING = "nothing to revert on this target: %s"


def within(path: str, specs: List[str]) -> bool:
    """Whether a repository path is one of ``specs`` or under one (a directory; "" is the top)."""
    return any(path == s or path.startswith(s.rstrip("/") + "/") or not s for s in specs)


def revert_file(fix: str, src: Source, f: RevertFile, current: Optional[bytes]) -> Optional[bytes]:
    """The file's bytes with C's change to it undone and every later change kept."""
    where = "%s:%s" % (src.root, f.path)
    base, theirs = src.checkout.blobs([(src.sha, f.repo_path), (src.parent, f.repo_path)])
    base, theirs = (None if f.status == "D" else base), (None if f.status == "A" else theirs)
    if current == base or (f.status in "AD" and current is None):
        return theirs  # unchanged since C, or already as before C (None for an added file)
    if current is None or base is None or theirs is None:
        what = ("was deleted since" if current is None else
                "exists again although the commit deleted it" if base is None else
                "was changed since the commit created it")
        _refuse(fix, src, f, where, "%s %s" % (where, what), [])
    short = src.sha[:12]
    merged, conflicts = merge_file(current, base, theirs, ("current", short, short + "^"))
    if conflicts:
        ranges = conflict_ranges(current, merged)
        lines = ", ".join("%d-%d" % (r["lines"][0], r["lines"][1]) for r in ranges)
        _refuse(fix, src, f, where, "%s: undoing the commit's change conflicts with later changes "
                "at line(s) %s of the current file" % (where, lines or "?"), ranges)
    return merged


def _refuse(fix: str, src: Source, f: RevertFile, where: str, what: str,
            ranges: List[Dict[str, Any]]) -> NoReturn:
    later = src.checkout.commits_touching(src.sha, f.repo_path)
    raise ConflictError(
        "fix %s: cannot revert %s: %s. Later commits touching %s: %s. Nothing was written; "
        "resolve it by hand (git revert %s in the checkout), or write the revert as a series"
        % (fix, src.title, what, f.path, "; ".join(later) if later else "none (uncommitted changes?)",
           src.sha[:12]),
        fix=fix, commit=src.sha, root=src.root, path=f.path, where=where, later_commits=later,
        conflicts=ranges)


def conflict_ranges(current: bytes, merged: bytes) -> List[Dict[str, Any]]:
    """Where each conflict of a ``--diff3`` merge sits in the current file (1-based lines)."""
    ours_lines = split_lines(decode(current))
    out: List[Dict[str, Any]] = []
    block: Dict[str, List[str]]
    section, block, plain_before = None, {"current": [], "commit": [], "before": []}, 0
    for line in split_lines(decode(merged)):
        if line.startswith("<<<<<<< "):
            section = "current"
        elif section and line.startswith("||||||| "):
            section = "commit"
        elif section and line.rstrip("\r\n") == "=======":
            section = "before"
        elif section and line.startswith(">>>>>>> "):
            side = block["current"]
            at = locate(ours_lines, side, plain_before) if side else None
            start = (at + 1) if at is not None else plain_before + 1
            out.append({"lines": [start, start + max(len(side), 1) - 1],
                        **{key: [ln.rstrip("\n") for ln in got] for key, got in block.items()}})
            plain_before = start - 1 + len(side)
            section, block = None, {"current": [], "commit": [], "before": []}
        elif section:
            block[section].append(line)
        else:
            plain_before += 1
    return out


def not_on_release(fix: FixSpec, roots: Roots, git: bool, recorded: Any = ()) -> str:
    """Why a revert fix has nothing to revert on a root outside git (an installed package, a
    tree without ``.git``, ``--no-git``) judged by the releases, or "": the fix it reverts has
    no version for the release the root runs (``revert.fix_releases``) and the target records
    none applied, so its change is not in that release's files. A git checkout is judged by
    its history instead (:func:`resolve`): a fork of that release may carry the commit."""
    from .variants import release_of

    rev = fix.revert or {}
    named, served = rev.get("fix"), list(rev.get("fix_releases") or ())
    if not named or not served or named in recorded:
        return ""
    root = roots.get(str(rev.get("root") or "sglang"))
    found = release_of(roots, root.name, {}, git)
    if found is None or found in served:
        return ""
    if git and _checkout(root)[0] is not None:
        return ""
    return ("nothing to revert on this target: no version of fix %s serves %s (they serve %s) "
            "and it is not recorded here, so its change is not in the release's files"
            % (named, found, ", ".join(served)))
