"""The client's git layer, the one module importing GitPython: plain paths and revisions in,
plain values out, :class:`TargetError` (with git's output) on failure. The engine has its own
stdlib runner (``patchkit.engine.gitcli``)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from types import ModuleType
from typing import Any

from patchkit.engine.gitcli import parse_porcelain_z
from patchkit.engine.gitops import series_diff
from patchkit.errors import TargetError, UsageError, reap

_git: ModuleType | None = None


def _gitpython() -> ModuleType:
    """GitPython, imported on first use: commands that run no git (a local ``apply`` or
    ``status``) never load it. It looks for git when imported and raises if there is none, so
    it is told to stay quiet: a command that needs git says so when it runs it."""
    global _git
    if _git is None:
        refresh = os.environ.get("GIT_PYTHON_REFRESH")
        os.environ["GIT_PYTHON_REFRESH"] = "quiet"
        try:
            import git
        finally:
            if refresh is None:
                del os.environ["GIT_PYTHON_REFRESH"]
            else:
                os.environ["GIT_PYTHON_REFRESH"] = refresh
        _git = git
    return _git


def _repo(path: Path | str, *, search: bool = True) -> Any:
    """The GitPython ``Repo`` at (or, with ``search``, around) ``path``; a TargetError if none."""
    git = _gitpython()
    try:
        return git.Repo(str(path), search_parent_directories=search)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise TargetError(f"{path} is not a git repository: name a clone or the top of a "
                          "checkout", path=str(path)) from None

__all__ = [
    "Blobs", "CommitInfo", "Identity", "PathCommit", "apply_and_commit", "changed_files", "clone",
    "commit_diffs", "commit_files", "commit_info", "commit_paths",
    "author_ident", "commit_range", "commit_tree", "create_branch", "init", "is_clean",
    "is_git_repo", "unstage",
    "list_tags", "patch_id", "patch_ids", "path_history", "renames", "rev_parse", "set_config", "write_tree",
    "texts_at", "tracks_modes", "unclaimed_files", "update_refs", "work_tree_top",
]


@dataclass(frozen=True)
class Identity:
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


def _run(cwd: Path | str, args: Sequence[str], *, env: Mapping[str, str] | None = None,
         strip: bool = True, data: str | None = None) -> str:
    """``git args`` in ``cwd`` (``data`` on its stdin); a failure is a TargetError."""
    git = _gitpython()
    try:
        out = git.Git(str(cwd)).execute(
            ["git", *args], env=dict(env) if env else None, strip_newline_in_stdout=strip,
            istream=None if data is None else _stdin(data))
    except git.GitCommandError as exc:
        stderr, stdout = (exc.stderr or "").strip(), (exc.stdout or "").strip()
        raise TargetError(f"git {' '.join(args[:3])} failed in {cwd} (exit {exc.status}): "
                          f"{stderr or stdout or 'no output'}", command=["git", *args],
                          cwd=str(cwd), exit=exc.status, stderr=stderr, stdout=stdout) from None
    except (git.NoSuchPathError, FileNotFoundError) as exc:
        raise TargetError(f"cannot run git in {cwd}: {exc}", cwd=str(cwd)) from None
    return out if isinstance(out, str) else out.decode("utf-8", "surrogateescape")


def _stdin(text: str):  # a real file: GitPython passes istream to Popen as stdin
    f = tempfile.TemporaryFile()
    f.write(text.encode("utf-8", "surrogateescape"))
    f.seek(0)
    return f


def _identity_env(author: Identity, committer: Identity, date: str) -> dict[str, str]:
    return {"GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email,
            "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_NAME": committer.name,
            "GIT_COMMITTER_EMAIL": committer.email, "GIT_COMMITTER_DATE": date}


def is_git_repo(path: Path | str) -> bool:
    """True if ``path`` itself is a git repository (bare, or a work tree's top level)."""
    p = Path(path)
    if not p.is_dir():
        return False
    try:
        repo = _repo(p, search=False)
    except TargetError:
        return False
    return Path(repo.git_dir if repo.bare else repo.working_tree_dir or "").resolve() == p.resolve()


def work_tree_top(path: Path | str) -> Path | None:
    """The top of the work tree ``path`` lies in, or None outside any (or in a bare repo)."""
    p = Path(path)
    try:
        repo = _repo(p if p.is_dir() else p.parent)
    except TargetError:
        return None
    return None if repo.bare or not repo.working_tree_dir else Path(repo.working_tree_dir)


def init(path: Path | str, *, bare: bool = False, branch: str = "main") -> Path:
    """Create a repository at ``path`` (parents too) whose HEAD names ``branch``."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    git = _gitpython()
    try:
        git.Repo.init(str(p), bare=bare, initial_branch=branch)
    except git.GitCommandError as exc:
        raise TargetError(f"git init failed in {p}: {exc.stderr}", cwd=str(p)) from None
    return p


def set_config(repo: Path | str, key: str, value: str) -> None:
    """Set ``section.name`` in the repository's own config."""
    section, _, name = key.rpartition(".")
    with contextlib.closing(_repo(repo, search=False)) as r, r.config_writer("repository") as cw:
        cw.set_value(section, name, value)


def tracks_modes(path: Path | str) -> bool:
    """Whether the checkout's git records executable bits (``core.fileMode``, default true)."""
    with contextlib.closing(_repo(path)) as r:
        value = r.config_reader("repository").get_value("core", "filemode", True)
    return str(value).strip().lower() not in ("false", "no", "off", "0")


def _commit(r: Any, rev: str) -> Any:
    """The commit object ``rev`` names in the open repository ``r`` (tags peeled), or None."""
    git = _gitpython()
    try:
        found = r.commit(rev)
    except (git.BadName, git.BadObject, ValueError, TypeError, IndexError):
        return None
    return None if found.hexsha == "0" * 40 else found  # GitPython makes up the null commit


def rev_parse(repo: Path | str, rev: str) -> str | None:
    """The commit ``rev`` names (tags peeled), or None if it names nothing."""
    try:
        r = _repo(repo)
    except TargetError:
        return None
    with contextlib.closing(r):
        found = _commit(r, rev)
        return None if found is None else found.hexsha


def _identity(actor: Any) -> Identity:
    return Identity(actor.name, actor.email)


def commit_info(repo: Path | str, rev: str) -> CommitInfo:
    with contextlib.closing(_repo(repo)) as r:
        c = _commit(r, rev)
        if c is None:
            raise TargetError(f"cannot read commit {rev} in {repo}", rev=rev)
        message = c.message if isinstance(c.message, str) else c.message.decode("utf-8", "replace")
        return CommitInfo(sha=c.hexsha, tree=c.tree.hexsha,
                          parents=tuple(p.hexsha for p in c.parents),
                          author=_identity(c.author), committer=_identity(c.committer),
                          authored_date=c.authored_datetime.isoformat(),
                          committed_date=c.committed_datetime.isoformat(),
                          message=message.rstrip("\n") + "\n")


class Blobs:
    """Files of one repository's commits, all read by one ``git cat-file`` (ended by close)."""

    def __init__(self, repo: Path | str) -> None:
        self._repo = _repo(repo)
        self._seen: dict[tuple[str, str], tuple[bytes, str] | None] = {}

    def file(self, rev: str, relpath: str) -> tuple[bytes, str] | None:
        """The bytes and git mode ("100644", "100755") of ``relpath`` in ``rev``, or None."""
        if (rev, relpath) not in self._seen:
            git = _gitpython()
            try:
                blob = self._repo.commit(rev).tree / relpath
                found = (blob.data_stream.read(), f"{blob.mode:o}") if blob.type == "blob" \
                    else None
            except (KeyError, ValueError, git.BadName, git.BadObject):
                found = None
            self._seen[(rev, relpath)] = found
        return self._seen[(rev, relpath)]

    def read(self, rev: str, relpath: str) -> bytes | None:
        return (self.file(rev, relpath) or (None,))[0]

    def commit_of(self, rev: str) -> str | None:
        """The sha of the commit ``rev`` names, or None when it names none."""
        git = _gitpython()
        try:
            return str(self._repo.commit(rev).hexsha)
        except (ValueError, git.BadName, git.BadObject):
            return None

    def close(self) -> None:
        self._repo.close()


def texts_at(top: Path | str, wanted: Sequence[tuple[str, str]]) -> list[str | None]:
    """The text of each ``(rev, path)`` (path relative to ``top``), None where it is absent."""
    with contextlib.closing(Blobs(top)) as blobs:
        found = [blobs.read(rev, relpath) for rev, relpath in wanted]
    return [None if data is None else data.decode("utf-8", "replace") for data in found]


def commit_tree(repo: Path | str, tree: str, *, message: str, parents: Sequence[str] = (),
                author: Identity, committer: Identity | None = None, date: str) -> str:
    """Write a commit object for ``tree`` (refs left alone); fixed identities and date make the
    same inputs give the same sha."""
    args = ["commit-tree", tree, "-F", "-"]
    for parent in parents:
        args += ["-p", parent]
    return _run(repo, args, env=_identity_env(author, committer or author, date), data=message)


def write_tree(repo: Path | str, files: Iterable[tuple[str, bytes, bool]]) -> str:
    """Write ``files`` ((path in the tree, bytes, executable)) into ``repo`` as one tree and
    return its sha. One ``git fast-import`` streams them into one pack: no file on disk, no
    index, no loose object per file (a release's 6,000 files were 6,000 files more in the
    repository, each opened again by every checkout of it). Blobs are stored whole at zlib
    level 1, as ``git add`` of a large file stores them (a release's fetch several times faster
    than extracting and adding it: docs/performance.md). The commit it makes to carry the tree
    is left unreferenced: its ref, ``refs/patchkit/import-PID``, is deleted after. When
    ``files`` fails, or the import does, nothing is left: no ref, and its unfinished pack is
    deleted (the caller holds the repository's write lock: a pack begun meanwhile is its)."""
    git = _gitpython()
    ref = f"refs/patchkit/import-{os.getpid()}"
    packs = Path(repo) / _run(repo, ["rev-parse", "--git-path", "objects/pack"])  # git >= 2.5
    before = set(packs.glob("tmp_pack_*"))
    proc = git.Git(str(repo)).execute(
        ["git", "-c", "core.bigFileThreshold=1", "-c", "core.compression=1", "fast-import",
         "--quiet", "--done"], as_process=True, istream=subprocess.PIPE)
    try:
        out = proc.proc.stdin
        out.write(b"commit %s\ncommitter patchkit <patchkit@patchkit.invalid> 0 +0000\n"
                  b"data 0\ndeleteall\n" % ref.encode())
        for path, data, executable in files:
            out.write(b"M %s inline %s\ndata %d\n" % (b"100755" if executable else b"100644",
                                                      _import_path(path), len(data)))
            out.write(data)
            out.write(b"\n")
        out.write(b"done\n")
        out.close()
    except OSError:  # it stopped reading: it failed (a full disk, a file size limit)
        code = _stop_import(proc.proc, packs, before)
        said = proc.proc.stderr.read().decode("utf-8", "replace").strip() if proc.proc.stderr else ""
        raise TargetError(f"git fast-import failed in {repo} ({_exit_said(code)})"
                          f"{': ' + said if said else ''}; nothing was imported. Check the "
                          "disk there and fetch again", cwd=str(repo)) from None
    except BaseException:  # a file that cannot be read: nothing imported, no ref made
        _stop_import(proc.proc, packs, before)
        raise
    try:
        proc.wait()
    except git.GitCommandError as exc:
        _stop_import(proc.proc, packs, before)
        raise TargetError(f"git fast-import failed in {repo} (exit {exc.status}): "
                          f"{(exc.stderr or '').strip() or 'no output'}", cwd=str(repo)) from None
    tree = _run(repo, ["rev-parse", "--verify", f"{ref}^{{tree}}"])
    _run(repo, ["update-ref", "-d", ref])
    return tree


def _stop_import(proc: subprocess.Popen[bytes], packs: Path, before: set[Path]) -> int | None:
    """Kill a ``git fast-import`` that is not to finish (if it still runs) and delete the pack
    it was writing (an ``objects/pack/tmp_pack_*`` that was not there before it): what it had
    imported goes. Its exit code."""
    if proc.poll() is None:
        proc.kill()
    code = reap(proc)  # a signal may have cut a wait short, its wait lock held
    for pack in set(packs.glob("tmp_pack_*")) - before:
        with contextlib.suppress(OSError):
            pack.unlink()
    return code


def _exit_said(code: int | None) -> str:
    if code is None:  # reaped by a wait a signal cut short: its status is not known
        return "ended"
    if code < 0:
        import signal

        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"


def _import_path(path: str) -> bytes:
    """``path`` as fast-import reads it: C-quoted if it starts with a quote or holds a line
    break, as is otherwise."""
    raw = path.encode("utf-8", "surrogateescape")
    if not raw.startswith(b'"') and b"\n" not in raw:
        return raw
    return b'"' + raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n") + b'"'


def list_tags(repo: Path | str) -> dict[str, str]:
    """Every tag name mapped to the commit it points at (annotated tags peeled)."""
    git = _gitpython()
    found: dict[str, str] = {}
    with contextlib.closing(_repo(repo)) as r:
        for tag in r.tags:
            with contextlib.suppress(ValueError, git.BadName, git.BadObject):  # not a commit
                found[tag.name] = tag.commit.hexsha
    return found


def update_refs(repo: Path | str, updates: Mapping[str, str],
                expected: Mapping[str, str | None]) -> None:
    """Move several refs all or nothing; ``expected``: the sha each ref must still hold (None:
    must not exist)."""
    lines = ["start", *(f"update {ref} {new} {expected[ref] or '0' * 40}" for ref, new in updates.items())]
    try:
        _run(repo, ["update-ref", "--stdin"], data="\n".join([*lines, "prepare", "commit", ""]))
    except TargetError as exc:
        raise TargetError(f"could not update refs in {repo}: {exc.details.get('stderr', '')} "
                          "(another process may be writing the repository; retry)",
                          refs=sorted(updates)) from None


def clone(source: Path | str, dest: Path, rev: str) -> Path:
    """Clone ``source`` into ``dest`` at ``rev``, borrowing the source's objects (--shared)."""
    _run(dest.parent, ["clone", "--quiet", "--shared", "--branch", rev, "--", str(source), str(dest)])
    return dest


def switch(path: Path | str, rev: str) -> None:
    """Make the work tree at ``path`` exactly ``rev``'s tree, detached there: git rewrites only
    the files that differ, and files it does not track (a check's ``__pycache__``) are removed."""
    _run(path, ["checkout", "--quiet", "--force", "--detach", rev])
    _run(path, ["clean", "--quiet", "--force", "-d", "-x"])


def is_clean(path: Path | str, paths: Sequence[str] = ()) -> bool:
    """True if the working tree at ``path`` (or ``paths`` in it) has no changes against HEAD,
    untracked files too."""
    return _run(path, ["status", "--porcelain", "--untracked-files=all", "--", *paths]) == ""


def unstage(top: Path | str, paths: Sequence[str]) -> None:
    """Put the index entries of ``paths`` back to HEAD's (the work tree is left alone)."""
    _run(top, ["reset", "-q", "--", *paths])


def identity_problem(cwd: Path | str) -> str | None:
    """Why git cannot commit as the user in ``cwd`` (no name or email it can use), in git's
    own last words, or None."""
    for var in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
        try:
            _run(cwd, ["var", var])
        except TargetError as exc:
            said = str(exc.details.get("stderr") or exc.message).strip().splitlines()
            return said[-1] if said else exc.message
    return None


def author_ident(top: Path | str) -> str | None:
    """Who commits here, "Name <email>", as git tells it (config or GIT_AUTHOR_* variables)."""
    try:
        ident = _run(top, ["var", "GIT_AUTHOR_IDENT"]).strip()
    except TargetError:
        return None
    return re.sub(r"\s+\d+\s+[-+]\d{4}$", "", ident)


def _status(path: Path | str, paths: Sequence[str] = ()) -> list[tuple[str, str, str | None]]:
    return list(parse_porcelain_z(_run(path, ["status", "--porcelain=v1", "-z",
                                              "--untracked-files=all", "--",
                                              *(os.fspath(p) for p in paths)], strip=False)))


def changed_files(path: Path | str, paths: Sequence[str] = ()) -> list[str]:
    """Files of the work tree that differ from HEAD, sorted; untracked ones only when named in
    ``paths`` (a file or a directory prefix), so stray build output is never captured."""
    named = [os.fspath(p).rstrip("/") for p in paths]
    result: set[str] = set()
    for code, name, source in _status(path, paths):
        if source is not None:
            result.add(source)
        if code != "??" or any(name == n or name.startswith(n + "/") for n in named):
            result.add(name)
    return sorted(result)


def unclaimed_files(path: Path | str, taken: Sequence[str]) -> list[str]:
    """Files differing from HEAD (untracked too) other than ``taken``: what a capture left out."""
    found = {n for _code, name, source in _status(path) for n in (name, source) if n is not None}
    return sorted(found - set(taken))


def commit_paths(top: Path | str, paths: Sequence[str], message: str, *,
                 author: Identity | None = None, date: str | None = None) -> str:
    """Commit the work-tree state of ``paths`` (none: the whole tree) alone; the new sha.
    Without ``author``, as the user's own git identity."""
    env = _identity_env(author, author, date or "") if author is not None else None
    _run(top, ["add", "-A", "--", *paths])
    # the message on stdin: an argument is limited in size (a long rationale would not fit)
    _run(top, ["commit", "-q", "--no-verify", "-F", "-", "--", *paths], env=env, data=message)
    with contextlib.closing(_repo(top)) as r:
        return str(r.head.commit.hexsha)


def apply_and_commit(path: Path | str, patches: Sequence[Path | str], *, message: str,
                     author: Identity, date: str) -> str:
    """``git apply --index`` each patch (git apply never fuzzes), then commit; the sha."""
    for patch in patches:
        _run(path, ["apply", "--index", "--whitespace=nowarn", os.fspath(Path(patch).resolve())])
    return commit_paths(path, [], message, author=author, date=date)


def create_branch(path: Path | str, name: str) -> None:
    """Create and switch to branch ``name`` at HEAD."""
    _run(path, ["switch", "-q", "-c", name])


def commit_range(repo: Path | str, spec: str) -> list[str]:
    """The commits of ``A..B`` (or ``A...B``, as git reads it), oldest first."""
    if ".." not in spec:
        raise UsageError(f"--commits takes a range A..B (the commits after A up to B), not "
                         f"{spec!r}", spec=spec)
    try:
        return _run(repo, ["rev-list", "--reverse", "--topo-order", spec, "--"]).split()
    except TargetError as exc:
        raise UsageError(f"cannot read the commits {spec} in {repo}: {exc.message}. Name two "
                         "commits of that repository, e.g. v0.5.23..HEAD", spec=spec) from None


def commit_files(repo: Path | str, rev: str) -> list[tuple[str, str | None, str | None]]:
    """(path, old mode, new mode) of what ``rev`` changed (None: absent); a merge is refused."""
    info = commit_info(repo, rev)
    if len(info.parents) > 1:
        raise UsageError(f"commit {rev[:12]} in {repo} is a merge; a fix is a line of plain "
                         "commits. Pick a range without merges", rev=rev)
    parent = info.parents[0] if info.parents else "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    fields = _run(repo, ["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", parent, rev],
                  strip=False).split("\0")
    result = []
    for meta, path in zip(fields[0::2], fields[1::2]):
        if not meta.startswith(":"):
            break
        old_mode, new_mode = meta[1:].split(" ")[:2]
        result.append((path, None if old_mode == "000000" else old_mode,
                       None if new_mode == "000000" else new_mode))
    return result


@dataclass(frozen=True)
class PathCommit:
    sha: str
    date: str  # committer date, ISO-8601 with offset
    subject: str
    files: tuple[str, ...]  # relative to the top of the work tree


def _log(repo: Path | str, args: Sequence[str], paths: Sequence[str]
         ) -> list[tuple[list[str], str]]:
    """``git log`` of ``paths``: per commit, [sha, committer date, subject] and what follows."""
    out = _run(repo, ["-c", "core.quotePath=false", "log", "--no-renames", "--no-color",
                      "--no-ext-diff", "--format=%x1e%H%x00%cI%x00%s", *args, "--", *paths],
               strip=False)
    return [(head.split("\x00"), rest) for head, _, rest
            in (record.partition("\n") for record in out.split("\x1e")[1:])]


def path_history(top: Path | str, paths: Sequence[str]) -> list[PathCommit]:
    """Commits of HEAD that touched ``paths`` (relative to ``top``), oldest first."""
    if rev_parse(top, "HEAD") is None:  # an unborn branch
        return []
    log = _log(top, ["--reverse", "--name-only", "HEAD"], paths)
    return [PathCommit(sha, date, subject, tuple(n for n in rest.splitlines() if n.strip()))
            for (sha, date, subject), rest in log]


def renames(top: Path | str, directory: str) -> list[tuple[str, str, str]]:
    """(commit, old path, new path) of each file under ``directory`` (relative to ``top``)
    that HEAD's history renamed (git's rename detection, as ``git log --follow`` sees it),
    oldest first."""
    if rev_parse(top, "HEAD") is None:
        return []
    out = _run(top, ["-c", "core.quotePath=false", "log", "-M", "--diff-filter=R", "--reverse",
                     "--name-status", "--no-color", "--format=%x1e%H", "HEAD", "--", directory],
               strip=False)
    found = []
    for record in out.split("\x1e")[1:]:
        sha, _, rest = record.partition("\n")
        for line in rest.splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[0].startswith("R"):
                found.append((sha.strip(), parts[1], parts[2]))
    return found


def commit_diffs(repo: Path | str, base: str, onto: str, paths: Iterable[str]
                 ) -> list[tuple[str, str, dict[str, str]]]:
    """(sha, subject, {path: its diff}) of the commits of ``base..onto`` touching ``paths``:
    split per file, so a fix's files match even in a commit that changed others."""
    wanted = sorted(set(paths))
    return [(sha, subject, {part.split(" b/", 1)[0]: "diff --git a/" + part.rstrip("\n") + "\n"
                            for part in body.split("\ndiff --git a/")[1:]})
            for (sha, _date, subject), body in _log(repo, ["-p", f"{base}..{onto}"], wanted)
            ] if wanted else []


def patch_ids(texts: Sequence[str]) -> list[str | None]:
    """``git patch-id --stable`` of each text, in one process; None for a text with no diff."""
    data = "".join(f"commit {i + 1:040x}\n\n{series_diff(t)}" for i, t in enumerate(texts))
    found: dict[int, str] = {}
    for line in _run(tempfile.gettempdir(), ["patch-id", "--stable"], data=data).splitlines():
        pid, _, cid = line.partition(" ")
        found[int(cid, 16) - 1] = pid
    return [found.get(i) for i in range(len(texts))]


def patch_id(text: str) -> str | None:
    """The patch-id of a fix's series (its patch files joined): that of a commit holding it."""
    return patch_ids([text])[0]
