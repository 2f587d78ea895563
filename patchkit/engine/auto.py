"""The preconditions the engine adds to every fix: release, requirements, file presence,
git cleanliness and writability (docs/design.md, "Automatic preconditions")."""

from __future__ import annotations

import os
import shlex
from typing import AbstractSet, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..errors import PermissionDenied
from . import gitcli
from .checks import Reader, failure_lines, result
from .contract import PARTLY_PRESENT, PRESENT_UNRECORDED
from .fsops import nearest_existing_dir, probe_writable
from .paths import Root, Roots, dot_git_top
from .records import FixRecord
from .request import FixSpec
from .variants import detect_release
from .workspace import Entry

def release_check(spec: FixSpec, roots: Roots, cache: Dict[str, Tuple[Optional[str], str]],
                  git: bool = True, applied: Optional[FixRecord] = None) -> Dict[str, Any]:
    """The release the fix's root runs is one its version serves. ``applied``: the record of
    another version of it on the target, which a refused upgrade leaves in place (said)."""
    assert spec.release is not None
    root = roots.get(str(spec.release.get("root") or "sglang"))
    wanted = [str(v) for v in spec.release.get("versions") or []]
    if root.name not in cache:
        cache[root.name] = detect_release(root, git=git)
    found, source = cache[root.name]
    # the releases any version of the fix serves, when it has variants (the top level's else)
    served = [r for _v, rs in spec.variants_known for r in rs] or wanted
    name = "release is one of %s" % ", ".join(dict.fromkeys(served))
    if found is None:
        return result("release", name, False,
                      "cannot tell the release of root %s (%s): no sglang/_version.py with a version and "
                      "HEAD is not on a release tag. Point the root at an SGLang release checkout or "
                      "install, or tag HEAD with its release" % (root.name, root.path), root.name)
    ok = found in wanted
    detail = "release %s (from %s)" % (found, source)
    if not ok and spec.variants_known:
        detail += "; no variant of the fix serves %s: variants exist for %s. %s" % (found, ", ".join(
            "%s (v%s)" % (", ".join(rs) or "any release", v) for v, rs in spec.variants_known),
            _capital(spec.make_for(found)))
    elif not ok and spec.by_commit_id:
        detail += "; the fix is known to apply to %s only. %s" % (", ".join(wanted),
                                                                 _capital(spec.make_for(found)))
    elif not ok:
        detail += "; the fix is known to apply to %s only. %s, or add %s to upstream.releases " \
                  "once it is checked" % (", ".join(wanted), _capital(spec.make_for(found)), found)
    if not ok and applied is not None and applied.version != spec.version:
        detail += "; the applied v%s stays as it is" % applied.version
    return result("release", name, ok, detail, root.name)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def requires_check(spec: FixSpec, recorded: Dict[str, FixRecord], earlier: Set[str],
                   dependencies: Dict[str, FixSpec], read: Reader,
                   sync: bool = False, lost: Optional[Dict[str, str]] = None,
                   named: Sequence[str] = (),
                   beneath: Optional[Callable[[str], Optional[Reader]]] = None,
                   dry_run: bool = False) -> List[Dict[str, Any]]:
    """Each required fix is recorded (any version), planned earlier in this request, or, when
    the request carries it as a dependency, present in the files (a fork may carry it).
    ``sync``: the advice is sync's, which has no --with-deps (it applies what it can; with
    ``dry_run``, would apply).
    ``lost``: recorded fixes a reinstall or another release took away (not there; said so).
    ``named``: the fixes the request names (one of them refused is not to be applied "first").
    ``beneath``: by a dependency's name, the files before the recorded fixes building on it
    (``observe.beneath_records``)."""
    out = []
    for name in spec.requires:
        if name in earlier:
            ok, detail = True, "applied earlier in this request"
        elif name in recorded:
            ok, detail = True, "recorded v%s" % recorded[name].version
        elif name in dependencies:
            from . import presence

            found = presence.detect(dependencies[name].files, read,
                                    beneath(name) if beneath else None).state
            ok = found == PRESENT_UNRECORDED
            part = "only part of its change is in the files"
            if ok:
                detail = "present in the files, not recorded by patchkit"
            elif lost and name in lost:  # recorded (state.json says so): its record is stale
                detail = ("fix %s is recorded but lost (%s), %s" % (
                    name, lost[name].split(":")[0].split(";")[0],
                    "and " + part if found == PARTLY_PRESENT else "so its change is gone"))
            elif found == PARTLY_PRESENT:
                detail = "fix %s is not recorded by patchkit and %s" % (name, part)
            else:
                detail = "fix %s is neither recorded by patchkit nor present in the files" % name
        else:
            ok, detail = False, ("fix %s is not recorded by patchkit (the request carries no copy of "
                                 "it to look for in the files)" % name)
        if not ok and sync:
            detail += ("; sync %s apply it here (no variant of it serves this release, or "
                       "it was refused: see patchkit matrix and patchkit status)"
                       % ("would not" if dry_run else "did not"))
        elif not ok and name in named:
            detail += ("; %s, named in this run too, was refused (its own failed check says why): "
                       "this fix applies once it does" % name)
        elif not ok:
            detail += "; apply it first (patchkit apply %s) or use --with-deps" % name
        out.append(result("requires", "requires %s" % name, ok, detail, name))
    return out


def presence_check(entry: Entry, op: str) -> Optional[Dict[str, Any]]:
    exists = entry.current is not None
    if entry.blocked:
        kind, label = ("file-absent", "%s can be created" % entry.where) if op == "create" else (
            "file-present", "%s exists" % entry.where)
        # the check's own name and place say the path already: the detail says what is in the way
        return result(kind, label, False, "%s; the fix %s a file there. Fix the path in the "
                      "patch, or move what is in the way" % (entry.blocked,
                                                             "creates" if op == "create" else "changes"),
                      entry.where)
    if op == "create":
        return None if not exists else result(
            "file-absent", "%s is absent" % entry.where, False,
            "%s already exists but the fix creates it; remove it or roll back what created it"
            % entry.where, entry.where)
    return None if exists else result(
        "file-present", "%s exists" % entry.where, False,
        "%s does not exist (looked at %s); check the root path and the target's layout"
        % (entry.where, entry.abs), entry.where)


def duplicate_check(entry: Entry, changes: List[Any]) -> Tuple[Optional[Dict[str, Any]], Any]:
    """Refused when a hunk would write a second copy of lines already next to where it goes
    (the change, or code just like it, is already there: docs/upstream.md, "ambiguous").
    Also returns the first record's placement on the file (``presence.Placed``, None when
    there is none), found by the same search: apply writes it instead of placing every hunk
    a second time."""
    from . import presence
    from .hunks import decode

    if entry.current is None or not changes:
        return None, None
    text = decode(entry.current)
    found, placed = None, None
    for n, change in enumerate(changes):
        if n == 0 and change.op == "modify":  # the placement apply writes, found on the way
            found, placed = presence.placed_with_duplicates(text, change)
        else:
            found = presence.duplicates(text, change)
        if found is not None:
            break
    if found is None:
        return None, placed
    line, hunk, _block = found
    return result("not-already-added", "%s does not already hold the added lines"
                  % entry.where, False,
                  "the lines this patch adds are already in %s at line %d (hunk #%d of "
                  "%s): applying it would write a second copy; check whether the fix "
                  "is already there, or apply with --force" % (
                      entry.where, line, hunk.index, change.patch), entry.where), placed


NO_GIT = "--no-git given, git was not run, so nothing proves the file matches HEAD"


BY_RECORD = ("an installed package: its files are checked against its wheel's RECORD, not "
             "against the git work tree it lies in")


def git_changes(keys: List[Tuple[str, str]], roots: Roots, git: bool = True,
                installed: AbstractSet[str] = frozenset()) -> Dict[str, gitcli.Changes]:
    """One ``git status`` per root, over every (root, path) of ``keys`` (the whole request);
    without ``git`` none: a root in a work tree is then "not checked". ``installed``: the
    roots that are installed packages, whose RECORD is their proof, never a work tree around
    them (a virtualenv inside a project's repository): "not checked" either."""
    by_root: Dict[str, Dict[str, None]] = {}
    for root, path in keys:
        by_root.setdefault(root, {})[roots.get(root).mapped(path)] = None
    unasked = {name: BY_RECORD for name in by_root if name in installed}
    if not git:
        unasked = dict.fromkeys(by_root, NO_GIT)
    out = {name: gitcli.Changes(dot_git_top(roots.get(name).path) is not None, error=why)
           for name, why in unasked.items()}
    for name, rels in by_root.items():
        if name not in unasked:  # the version file too: a release unpacked over HEAD's
            version = version_file(roots.get(name))
            out[name] = gitcli.changed_paths(roots.get(name).path,
                                             list(rels) + ([version] if version else []))
    return out


def version_file(root: Root) -> str:
    """The root-relative path of the version file its release is read from ("" when none)."""
    from .variants import detect_release

    return detect_release(root, git=False)[1]


def uncommitted_release(changes: gitcli.Changes, root: Root) -> str:
    """The root's version file when it differs from HEAD's ("" when not): another release's
    files put over the checkout (unpacked, copied) and not committed, so HEAD is the old
    release."""
    version = version_file(root)
    code = changes.changed.get(version) if version else None
    # modified, staged or not: an untracked one is a tree git never held (a folder in another
    # work tree), and its files' own advice holds
    return version if code is not None and code != "??" and "M" in code else ""


def git_clean_checks(entries: List[Entry], roots: Roots, recorded: Dict[Tuple[str, str], Set[str]],
                     changes: Dict[str, gitcli.Changes], strict: bool = False) -> List[Dict[str, Any]]:
    """Touched files must match HEAD, or the bytes patchkit itself wrote there earlier; with
    ``strict`` (apply --commit) HEAD only, as the commit would take in the earlier change too."""
    out = []
    for e in entries:
        found = changes[e.root]
        if not found.checkout:
            continue
        rel = roots.get(e.root).mapped(e.path)
        if found.error:  # as before a checkout git cannot read: not a reason to refuse
            out.append(result("git-clean", "%s is clean" % e.where, True,
                              "not checked: %s" % found.error, e.where))
            continue
        code = found.changed.get(rel)
        ours = e.sha256(e.original) in recorded.get((e.root, e.path), set())
        if code is None:
            detail = "unmodified against HEAD"
        elif ours and strict:
            ours = False
            detail = ("%s differs from HEAD by a fix patchkit applied without --commit, which this "
                      "commit would take in; roll that fix back, or apply it with --commit first"
                      % e.where)
        elif ours:
            detail = "differs from HEAD only by a fix patchkit applied"
        elif (version := uncommitted_release(found, roots.get(e.root))):
            # "discard them with git checkout HEAD -- FILE" would put the old release's bytes
            # into the new release's tree (a trial)
            root = roots.get(e.root).path
            detail = ("%s differs from HEAD, and so does the release's version file (%s): "
                      "another release's files were put over this checkout and not committed, "
                      "so HEAD is the old release. Commit them (git -C %s add -A && git -C %s "
                      "commit), then run again, or apply with --no-git"
                      % (e.where, version, shlex.quote(root), shlex.quote(root)))
        else:
            detail = _dirty_advice(e.where, code, roots.get(e.root).path, rel)
        out.append(result("git-clean", "%s is clean" % e.where, code is None or ours, detail, e.where))
    return out


def _dirty_advice(where: str, code: str, root: str, rel: str) -> str:
    """What a touched file's ``git status`` code means and the way out that works for it."""
    git = "git -C %s" % shlex.quote(root)
    if code == "??":
        top = dot_git_top(root) or root
        return ("%s is untracked in the git work tree %s, which holds the root %s (git status "
                "'??'), so HEAD cannot vouch for it. If that repository is not the tree's own "
                "(the release was unpacked or copied inside another project), apply with "
                "--no-git, or keep the root outside it; if it is, commit the file (%s add %s && "
                "%s commit) or make git ignore it (.gitignore)"
                % (where, top, root, git, shlex.quote(rel), git))
    if code[0] == "A":
        return ("%s is added to git's index but not committed (git status %r); commit it "
                "(%s commit), or unstage it (%s rm --cached %s)"
                % (where, code.strip(), git, git, shlex.quote(rel)))
    return ("%s has uncommitted changes (git status %r); commit or stash them, or discard them "
            "with %s checkout HEAD -- %s" % (where, code.strip(), git, shlex.quote(rel)))


def writable_checks(dirs: List[Tuple[str, str]], cache: Dict[str, Optional[str]]) -> List[Dict[str, Any]]:
    """Each (where, directory) must accept new files; probed for real, as root passes os.access.
    One result per directory probed: a file in a new directory and the state directory not
    made yet are both the root's to accept, said once."""
    out = []
    said: Set[str] = set()
    for where, directory in dirs:
        existing = nearest_existing_dir(directory)
        if existing in said:
            continue
        said.add(existing)
        if existing not in cache:
            cache[existing] = probe_writable(existing)
        why = cache[existing]
        out.append(result("writable", "%s is writable" % existing, why is None,
                          "writable" if why is None else "%s; make it writable (remount read-write, "
                          "chattr -i, or fix permissions) and retry" % why, where))
    return out


def permission_denied(failures: List[Dict[str, Any]], results: List[Dict[str, Any]],
                      probed: Dict[str, Optional[str]], roots: Roots) -> PermissionDenied:
    """An unwritable directory is the environment's doing, not the fix's: its own error (exit 6)."""
    denied = []
    for directory in sorted(d for d, why in probed.items() if why):
        root = _root_of(directory, roots)
        denied.append({"path": directory, "reason": probed[directory],
                       "root": root.name if root else None, "root_path": root.path if root else None})
    lines = "\n".join("- %s (root %s at %s): %s" % (d["path"], d["root"], d["root_path"], d["reason"])
                      for d in denied)
    return PermissionDenied(
        "permission denied: patchkit cannot create files in %d director%s of the target; nothing "
        "was written:\n%s\nRun patchkit as a user who can write there, or remount the file system "
        "read-write, then retry.\nFailed preconditions:\n%s"
        % (len(denied), "y" if len(denied) == 1 else "ies", lines, failure_lines(failures)),
        failures=failures, fixes=results, unwritable=denied)


def _root_of(directory: str, roots: Roots) -> Optional[Root]:
    """The innermost root holding ``directory`` (given as a real or as-given path)."""
    found = [(len(top), root) for root in roots
             for top in (root.real.rstrip(os.sep) or os.sep, root.path.rstrip(os.sep) or os.sep)
             if directory == top or directory.startswith(top.rstrip(os.sep) + os.sep)]
    return max(found, key=lambda f: f[0])[1] if found else None
