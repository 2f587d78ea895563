"""Small git helpers: the one module of patchkit that imports GitPython.

Everything else talks to git through these functions, which take plain paths and
revisions, return plain values (hex shas, paths, text), and raise :class:`TargetError`
naming the repository, the git command and its output when git fails.

The helpers are deliberately general (init, commit a directory as a tree, tags, refs,
clone, worktree, diff) so later features (revert, committing a fix) can build on them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import git

from patchkit.engine.gitcli import parse_porcelain_z
from patchkit.errors import TargetError, UsageError

__all__ = [
    "CommitInfo",
    "Identity",
    "apply_and_commit",
    "create_branch",
    "changed_files",
    "head_bytes",
    "head_file",
    "clone",
    "commit_directory",
    "commit_info",
    "commit_paths",
    "commit_tree",
    "diff_worktree",
    "get_config",
    "git_dir",
    "head",
    "init",
    "tracks_modes",
    "patch_id",
    "is_clean",
    "is_git_checkout",
    "is_git_repo",
    "list_tags",
    "rev_parse",
    "set_config",
    "tag",
    "update_refs",
    "worktree_add",
]


@dataclass(frozen=True)
class Identity:
    """A git author or committer."""

    name: str
    email: str


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    tree: str
    parents: tuple[str, ...]
    author: Identity
    committer: Identity
    authored_date: str  # ISO-8601 with offset
    committed_date: str
    message: str


def _run(
    cwd: Path | str, args: Sequence[str], *, env: Mapping[str, str] | None = None,
    strip: bool = True,
) -> str:
    """Run ``git args`` in ``cwd``; a failure becomes a TargetError with git's output."""
    runner = git.Git(str(cwd))
    try:
        out = runner.execute(
            ["git", *args], env=dict(env) if env else None, strip_newline_in_stdout=strip
        )
    except git.GitCommandError as exc:
        stderr = (exc.stderr or "").strip()
        stdout = (exc.stdout or "").strip()
        raise TargetError(
            f"git {' '.join(args[:3])} failed in {cwd} (exit {exc.status}): "
            f"{stderr or stdout or 'no output'}",
            command=["git", *args], cwd=str(cwd), exit=exc.status,
            stderr=stderr, stdout=stdout,
        ) from None
    except (git.NoSuchPathError, FileNotFoundError) as exc:
        raise TargetError(f"cannot run git in {cwd}: {exc}", cwd=str(cwd)) from None
    return out if isinstance(out, str) else out.decode("utf-8", "surrogateescape")


def _identity_env(author: Identity, committer: Identity, date: str) -> dict[str, str]:
    return {
        "GIT_AUTHOR_NAME": author.name,
        "GIT_AUTHOR_EMAIL": author.email,
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": committer.name,
        "GIT_COMMITTER_EMAIL": committer.email,
        "GIT_COMMITTER_DATE": date,
    }


# -- repositories -----------------------------------------------------------------------


def is_git_repo(path: Path | str) -> bool:
    """True if ``path`` itself is a git repository (bare, or a work tree's top level)."""
    p = Path(path)
    if not p.is_dir():
        return False
    try:
        repo = git.Repo(str(p), search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return False
    if repo.bare:
        return Path(repo.git_dir).resolve() == p.resolve()
    return Path(repo.working_tree_dir or "").resolve() == p.resolve()


def is_git_checkout(path: Path | str) -> bool:
    """True if ``path`` lies inside the working tree of a (non-bare) git repository."""
    p = Path(path)
    if not p.exists():
        return False
    try:
        repo = git.Repo(str(p if p.is_dir() else p.parent), search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return False
    return not repo.bare


def git_dir(path: Path | str) -> Path:
    """The git directory of the repository at ``path`` (``.git`` or the bare repo)."""
    return Path(_run(path, ["rev-parse", "--absolute-git-dir"]))


def init(path: Path | str, *, bare: bool = False, branch: str = "main") -> Path:
    """Create a repository at ``path`` (parents too) whose HEAD names ``branch``."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    try:
        git.Repo.init(str(p), bare=bare, initial_branch=branch)
    except git.GitCommandError as exc:
        raise TargetError(f"git init failed in {p}: {exc.stderr}", cwd=str(p)) from None
    return p


def set_config(repo: Path | str, key: str, value: str) -> None:
    _run(repo, ["config", "--local", key, value])


def get_config(repo: Path | str, key: str) -> str | None:
    try:
        return _run(repo, ["config", "--local", "--get", key]) or None
    except TargetError:
        return None


# -- objects and refs -------------------------------------------------------------------


def rev_parse(repo: Path | str, rev: str) -> str | None:
    """The commit ``rev`` names (tags peeled), or None if it names nothing."""
    try:
        return _run(repo, ["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"]) or None
    except TargetError:
        return None


def head(path: Path | str) -> str | None:
    """The commit checked out at ``path``, or None on an unborn branch."""
    return rev_parse(path, "HEAD")


def commit_info(repo: Path | str, rev: str) -> CommitInfo:
    fmt = "%H%n%T%n%P%n%an%n%ae%n%cn%n%ce%n%aI%n%cI%n%B"
    out = _run(repo, ["show", "-s", f"--format={fmt}", f"{rev}^{{commit}}", "--"], strip=False)
    lines = out.split("\n")
    if len(lines) < 10:
        raise TargetError(f"cannot read commit {rev} in {repo}", rev=rev)
    message = "\n".join(lines[9:]).rstrip("\n") + "\n"
    return CommitInfo(
        sha=lines[0],
        tree=lines[1],
        parents=tuple(lines[2].split()),
        author=Identity(lines[3], lines[4]),
        committer=Identity(lines[5], lines[6]),
        authored_date=lines[7],
        committed_date=lines[8],
        message=message,
    )


def commit_tree(
    repo: Path | str,
    tree: str,
    *,
    message: str,
    parents: Sequence[str] = (),
    author: Identity,
    committer: Identity | None = None,
    date: str,
) -> str:
    """Write a commit object for ``tree``; refs are left alone (see :func:`update_refs`).

    Author, committer and both dates are fixed, so the same inputs give the same sha.
    """
    args = ["commit-tree", tree, "-F", "-"]
    for parent in parents:
        args += ["-p", parent]
    env = _identity_env(author, committer or author, date)
    runner = git.Git(str(repo))
    try:
        return runner.execute(["git", *args], env=env, istream=_stdin(message)).strip()
    except git.GitCommandError as exc:
        raise TargetError(
            f"git commit-tree failed in {repo}: {(exc.stderr or '').strip()}", cwd=str(repo)
        ) from None


def _stdin(text: str):  # a real file: GitPython passes istream to Popen as stdin
    f = tempfile.TemporaryFile()
    f.write(text.encode("utf-8"))
    f.seek(0)
    return f


def commit_directory(
    repo: Path | str,
    directory: Path | str,
    *,
    message: str,
    parents: Sequence[str] = (),
    author: Identity,
    committer: Identity | None = None,
    date: str,
) -> str:
    """Commit every file under ``directory`` as the whole tree of a new commit.

    Uses a throw-away index with ``directory`` as work tree, so neither the repository's
    own index nor its working tree (if any) is touched. Returns the commit sha.
    """
    d = Path(directory)
    if not d.is_dir():
        raise UsageError(f"cannot commit {d}: not a directory")
    with tempfile.TemporaryDirectory(prefix="patchkit-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        base = ["--work-tree", str(d)]
        _run(repo, [*base, "add", "--all", "--force", "."], env=env)
        tree = _run(repo, ["write-tree"], env=env)
    return commit_tree(
        repo, tree, message=message, parents=parents, author=author,
        committer=committer, date=date,
    )


def list_tags(repo: Path | str) -> dict[str, str]:
    """Every tag name mapped to the commit it points at (annotated tags peeled)."""
    out = _run(repo, ["for-each-ref", "--format=%(refname:strip=2) %(objectname) %(*objectname)",
                      "refs/tags"])
    tags: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            tags[parts[0]] = parts[2] if len(parts) > 2 else parts[1]
    return tags


def tag(repo: Path | str, name: str, rev: str, *, force: bool = False) -> None:
    """Create (or with ``force`` move) the lightweight tag ``name`` at ``rev``."""
    _run(repo, ["tag", *(["--force"] if force else []), name, rev])


def update_refs(
    repo: Path | str,
    updates: Mapping[str, str],
    expected: Mapping[str, str | None] | None = None,
) -> None:
    """Move several refs in one all-or-nothing transaction.

    ``expected`` maps a ref to the sha it must still hold (None: must not exist); a ref
    that moved underneath fails the whole transaction and nothing changes.
    """
    if not updates:
        return
    zero = "0" * 40
    lines = ["start"]
    for ref, new in updates.items():
        old = (expected or {}).get(ref, "")
        if expected is not None and ref in expected:
            lines.append(f"update {ref} {new} {old or zero}")
        else:
            lines.append(f"update {ref} {new}")
    lines += ["prepare", "commit", ""]
    runner = git.Git(str(repo))
    try:
        runner.execute(["git", "update-ref", "--stdin"], istream=_stdin("\n".join(lines)))
    except git.GitCommandError as exc:
        raise TargetError(
            f"could not update refs in {repo}: {(exc.stderr or '').strip()} "
            "(another process may be writing the repository; retry)",
            refs=sorted(updates),
        ) from None


# -- working trees ----------------------------------------------------------------------


def clone(
    source: Path | str, dest: Path | str, *, rev: str | None = None, shared: bool = False,
) -> Path:
    """Clone ``source`` into ``dest`` and check out ``rev`` (detached for a tag).

    ``shared`` borrows the source's objects (``--shared``): fast and small, but the
    clone breaks if the source repository is deleted or pruned.
    """
    d = Path(dest)
    args = ["clone", "--quiet"]
    if shared:
        args.append("--shared")
    if rev is not None:
        args += ["--branch", rev]
    args += ["--", str(source), str(d)]
    _run(Path(d).parent, args)
    return d


def worktree_add(repo: Path | str, dest: Path | str, rev: str, *, detach: bool = True) -> Path:
    """Add a linked working tree of ``repo`` at ``dest`` checked out at ``rev``."""
    args = ["worktree", "add", "--quiet"]
    if detach:
        args.append("--detach")
    args += [str(dest), rev]
    _run(repo, args)
    return Path(dest)


def is_clean(path: Path | str) -> bool:
    """True if the working tree at ``path`` has no changes against HEAD (untracked too)."""
    return _run(path, ["status", "--porcelain", "--untracked-files=all"]) == ""


def diff_worktree(path: Path | str, paths: Sequence[str] = ()) -> str:
    """Unified diff (git format, 3 lines of context) of the working tree against HEAD.

    Untracked files are left out; pass ``paths`` (relative to the tree) to narrow it.
    """
    args = ["diff", "--no-color", "--no-ext-diff", "HEAD", "--"]
    args += [os.fspath(p) for p in paths]
    return _run(path, args, strip=False)


def changed_files(path: Path | str, paths: Sequence[str] = ()) -> list[str]:
    """Files of the work tree that differ from HEAD (modified, added, deleted), sorted.

    Untracked files count only when named in ``paths`` (a file or a directory prefix), so
    stray build output never sneaks into a captured fix.
    """
    args = ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--"]
    args += [os.fspath(p) for p in paths]
    out = _run(path, args, strip=False)
    named = [os.fspath(p).rstrip("/") for p in paths]
    result: set[str] = set()
    for code, name, source in parse_porcelain_z(out):
        if source is not None:
            result.add(source)
        if code == "??" and not any(name == n or name.startswith(n + "/") for n in named):
            continue
        result.add(name)
    return sorted(result)


def unclaimed_files(path: Path | str, taken: Sequence[str]) -> list[str]:
    """Files of the work tree that differ from HEAD, untracked ones included, other than
    ``taken``: what a capture left out, so the author is told."""
    out = _run(path, ["status", "--porcelain=v1", "-z", "--untracked-files=all"], strip=False)
    found: set[str] = set()
    for _code, name, source in parse_porcelain_z(out):
        found.add(name)
        if source is not None:
            found.add(source)
    return sorted(found - set(taken))


def commit_range(repo: Path | str, spec: str) -> list[str]:
    """The commits of ``A..B`` (or ``A...B``, as git reads it), oldest first."""
    if ".." not in spec:
        raise UsageError(f"--commits takes a range A..B (the commits after A up to B), not "
                         f"{spec!r}", spec=spec)
    try:
        out = _run(repo, ["rev-list", "--reverse", "--topo-order", spec, "--"])
    except TargetError as exc:
        raise UsageError(f"cannot read the commits {spec} in {repo}: {exc.message}. Name two "
                         "commits of that repository, e.g. v0.5.23..HEAD", spec=spec) from None
    return out.split()


def commit_files(repo: Path | str, rev: str) -> list[tuple[str, str | None, str | None]]:
    """What commit ``rev`` changed against its one parent: (path, old mode, new mode) with
    None for a side where the file is absent. A merge commit is refused."""
    info = commit_info(repo, rev)
    if len(info.parents) > 1:
        raise UsageError(f"commit {rev[:12]} in {repo} is a merge; a fix is a line of plain "
                         "commits. Pick a range without merges", rev=rev)
    parent = info.parents[0] if info.parents else "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    out = _run(repo, ["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", parent, rev],
               strip=False)
    fields = out.split("\0")
    result = []
    i = 0
    while i + 1 < len(fields) and fields[i].startswith(":"):
        old_mode, new_mode, _old, _new, _status = fields[i][1:].split(" ")
        result.append((fields[i + 1], None if old_mode == "000000" else old_mode,
                       None if new_mode == "000000" else new_mode))
        i += 2
    return result


def commit_own(top: Path | str, paths: Sequence[str], message: str) -> str:
    """Commit the work-tree state of ``paths`` (relative to ``top``; added, changed or
    deleted) and nothing else, as the user's own git identity; the new commit's sha."""
    _run(top, ["add", "-A", "--", *paths])
    _run(top, ["commit", "-q", "--no-verify", "-m", message, "--", *paths])
    return _run(top, ["rev-parse", "HEAD"])


def head_bytes(path: Path | str, relpath: str) -> bytes | None:
    """The bytes of ``relpath`` at HEAD, or None when HEAD does not have it."""
    found = head_file(path, relpath)
    return None if found is None else found[0]


def head_file(path: Path | str, relpath: str) -> tuple[bytes, str] | None:
    """The bytes and git mode ("100644", "100755") of ``relpath`` at HEAD, or None when HEAD
    does not have it."""
    repo = git.Repo(str(path), search_parent_directories=True)
    try:
        blob = repo.head.commit.tree / relpath
    except (KeyError, ValueError):
        return None
    return blob.data_stream.read(), f"{blob.mode:o}"


def tracks_modes(path: Path | str) -> bool:
    """Whether the checkout's git records executable bits (``core.fileMode``, true unless set
    false, as on file systems whose every file looks executable)."""
    value = get_config(path, "core.fileMode")
    return value is None or value.strip().lower() not in ("false", "no", "off", "0")


def apply_and_commit(
    path: Path | str, patches: Sequence[Path | str], *, message: str, author: Identity, date: str
) -> str:
    """``git apply --index`` each patch (no fuzz: git apply never fuzzes), then commit; the sha."""
    for patch in patches:
        _run(path, ["apply", "--index", "--whitespace=nowarn", os.fspath(Path(patch).resolve())])
    _run(path, ["commit", "-q", "--no-verify", "-m", message], env={**os.environ, **_identity_env(author, author, date)})
    return _run(path, ["rev-parse", "HEAD"])


def commit_paths(
    path: Path | str, paths: Sequence[str], *, message: str, author: Identity, date: str
) -> str:
    """Commit the working-tree state of ``paths`` (already tracked); the new commit's sha."""
    _run(path, ["add", "--", *paths])
    _run(path, ["commit", "-q", "--no-verify", "-m", message, "--", *paths],
         env={**os.environ, **_identity_env(author, author, date)})
    return _run(path, ["rev-parse", "HEAD"])


def create_branch(path: Path | str, name: str) -> None:
    """Create and switch to branch ``name`` at HEAD."""
    _run(path, ["switch", "-q", "-c", name])


# -- history of catalog paths (lineage) ---------------------------------------------------


@dataclass(frozen=True)
class PathCommit:
    """A commit that touched some of the paths asked about (``files``: those it touched)."""

    sha: str
    date: str  # committer date, ISO-8601 with offset
    subject: str
    files: tuple[str, ...]  # relative to the top of the work tree


def work_tree_top(path: Path | str) -> Path | None:
    """The top of the work tree ``path`` lies in, or None outside any (or in a bare repo)."""
    p = Path(path)
    try:
        repo = git.Repo(str(p if p.is_dir() else p.parent), search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    return None if repo.bare or not repo.working_tree_dir else Path(repo.working_tree_dir)


def path_history(top: Path | str, paths: Sequence[str]) -> list[PathCommit]:
    """Commits of HEAD that touched ``paths`` (relative to ``top``), oldest first.

    One ``git log`` for all paths; an unborn HEAD has no history (empty list).
    """
    if rev_parse(top, "HEAD") is None:
        return []
    out = _run(top, ["-c", "core.quotePath=false", "log", "--reverse", "--no-renames",
                     "--format=%x1e%H%x00%cI%x00%s", "--name-only", "HEAD", "--", *paths],
               strip=False)
    commits: list[PathCommit] = []
    for record in out.split("\x1e")[1:]:
        head_line, _, rest = record.partition("\n")
        sha, date, subject = (head_line.split("\x00") + ["", ""])[:3]
        files = tuple(line for line in rest.splitlines() if line.strip())
        commits.append(PathCommit(sha=sha, date=date, subject=subject, files=files))
    return commits


def texts_at(top: Path | str, wanted: Sequence[tuple[str, str]]) -> list[str | None]:
    """The text of each ``(rev, path)`` (path relative to ``top``), None where it is absent.

    One repository object serves every lookup, so GitPython's object reader is reused.
    """
    repo = git.Repo(str(top))
    out: list[str | None] = []
    for rev, relpath in wanted:
        try:
            blob = repo.commit(rev).tree / relpath
            out.append(blob.data_stream.read().decode("utf-8", "replace"))
        except (KeyError, ValueError, git.BadName):
            out.append(None)
    return out


def patch_id(diff: str) -> str | None:
    """``git patch-id --stable`` of a diff (no repository needed): one id for all of it.

    Mail headers are dropped first, so a series of several patches gets the id of the single
    commit that would hold them all (as a fork that committed the series in one go has).
    """
    kept: list[str] = []
    inside = False
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git ") or line.startswith("--- ") and not inside:
            inside = True
        elif line.startswith("From ") and line[5:45].strip() and " " in line[5:]:
            inside = False  # the next patch's mail header
        if inside:
            kept.append(line)
    runner = git.Git(tempfile.gettempdir())
    try:
        out = runner.execute(["git", "patch-id", "--stable"], istream=_stdin("".join(kept)))
    except git.GitCommandError as exc:
        raise TargetError(f"git patch-id failed: {(exc.stderr or '').strip()}") from None
    text = out if isinstance(out, str) else out.decode()
    return text.split()[0] if text.strip() else None


# -- rebase helpers (patchkit.rebase) ------------------------------------------------------


def blob_bytes(repo: Path | str, rev: str, relpath: str) -> bytes | None:
    """The bytes of ``relpath`` in commit ``rev`` of ``repo`` (bare or not); None when absent."""
    r = git.Repo(str(repo))
    try:
        blob = r.commit(rev).tree / relpath
    except (KeyError, ValueError, git.BadName):
        return None
    return blob.data_stream.read()


def merge_file(ours: bytes, base: bytes, theirs: bytes, *,
               labels: tuple[str, str, str] = ("ours", "base", "theirs")) -> tuple[bytes, int]:
    """git's three-way file merge (``git merge-file -p --diff3``): the result and its conflicts.

    No repository is needed; the texts go through temporary files. The count is 0 for a
    clean merge, else the number of conflicted regions (marked in the result).
    """
    with tempfile.TemporaryDirectory(prefix="patchkit-merge-") as tmp:
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = Path(tmp) / name
            p.write_bytes(data)
            names.append(str(p))
        args = ["git", "merge-file", "-p", "--diff3"]
        for label in labels:
            args += ["-L", label]
        runner = git.Git(tmp)
        status, out, err = runner.execute([*args, *names], with_extended_output=True,
                                          with_exceptions=False, as_process=False,
                                          stdout_as_string=False, strip_newline_in_stdout=False)
    if status < 0 or status > 127:
        raise TargetError(f"git merge-file failed (exit {status}): {err!r}")
    return out, status


def worktree_remove(repo: Path | str, dest: Path | str) -> None:
    """Remove a linked working tree made by :func:`worktree_add` (changes in it are lost)."""
    d = Path(dest)
    try:
        _run(repo, ["worktree", "remove", "--force", str(d)])
    except TargetError:
        import shutil

        shutil.rmtree(d, ignore_errors=True)
        _run(repo, ["worktree", "prune"])
