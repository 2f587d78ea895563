"""SGLang releases from the package registry as a linear, tagged git history: each wheel's
Python source becomes one commit tagged ``v<version>``, in version order on ``main``, so fixes
can be diffed, rebased and tested against it (docs/upstream.md)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.version import Version

from patchkit import gitrepo
from patchkit.cache import cache_dir, upstream_dir
from patchkit.errors import TargetError, UsageError

__all__ = ["RELEASE_IDENTITY", "Release", "UpstreamRepo", "download_wheel", "version_key"]

RELEASE_IDENTITY = gitrepo.Identity("SGLang release", "releases@patchkit.invalid")
PROJECT = "sglang"
_MANAGED_KEY = "patchkit.upstream"
_COMPILED = re.compile(r"\.(so|pyd|dylib)(\.[0-9]+)*$")
_VERSION = re.compile(r"^(\d+(?:\.\d+)*)(?:\.post(\d+))?$")
# Any wheel serves (only its Python source is kept): used when none fits this interpreter.
_ANY_WHEEL_ARGS = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                   "--abi", "abi3", "--abi", "none", "--platform", "manylinux_2_34_x86_64",
                   "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
                   "--platform", "any"]

Progress = Callable[[str], None]


def version_key(version: str) -> Version:
    """Sort key of a release version ``N.N.N[.postN]`` (PEP 440's order, by ``packaging``; the
    engine's ``release_key`` orders release names alike without it)."""
    if _VERSION.match(version) is None:
        raise UsageError(f"unsupported SGLang version {version!r}: expected a release like "
                         "0.5.21 or 0.5.21.post1", version=version)
    return Version(version)


def checkout_dest(version: str, dest: Path | str) -> Path:
    """``dest`` as a checkout of ``version`` goes there (absolute: git clones from the upstream
    repository's directory; said as the path it is, not as given), refused when it exists and
    is not empty: asked before anything is fetched for it."""
    d = Path(dest).resolve()
    if d.exists() and (not d.is_dir() or any(d.iterdir())):
        raise UsageError(f"cannot check out SGLang {version} into {d}: it exists and is not "
                         "empty; choose a new directory", path=str(d))
    return d


def release_name(text: str) -> str:
    """The release ``text`` names, as patchkit spells it: ``0.5.23``, given that or its tag's
    spelling ``v0.5.23`` (every command taking a release accepts both); a UsageError else."""
    bare = text.strip()
    if bare.startswith("v") and _VERSION.match(bare[1:]):
        bare = bare[1:]
    version_key(bare)
    return bare


@dataclass(frozen=True)
class Release:
    """One release in the upstream history."""

    version: str
    tag: str
    commit: str
    tree: str
    date: str  # commit date, ISO-8601
    wheel: Path | None = None  # the wheel it was built from, when patchkit built it


class UpstreamRepo:
    """SGLang releases as a git history (docs/upstream.md)."""

    def __init__(self, path: Path | str | None = None, *, wheels: Path | str | None = None):
        self.path = Path(path).expanduser() if path is not None else upstream_dir()
        # A git repository there is a user's SGLang clone; a plain directory is ours.
        self.foreign = gitrepo.is_git_repo(self.path)
        self.git_dir = self.path if self.foreign else self.path / "repo.git"
        self.wheels = Path(wheels) if wheels is not None else self.path / "wheels"
        digest = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:12]
        # nothing is ever written into a clone: its trees go to the cache directory
        self.trees = (cache_dir() / "clones" / digest if self.foreign else self.path) / "trees"

    def release_commits(self) -> dict[str, str]:
        """version -> commit, for every ``v<version>`` tag."""
        if not gitrepo.is_git_repo(self.git_dir):
            return {}
        return {name[1:]: sha for name, sha in gitrepo.list_tags(self.git_dir).items()
                if name.startswith("v") and _VERSION.match(name[1:])}

    def versions(self) -> list[str]:
        """The releases present, oldest first."""
        return sorted(self.release_commits(), key=version_key)

    def release(self, version: str) -> Release:
        version_key(version)
        sha = self.release_commits().get(version)
        if sha is None:
            raise UsageError(f"SGLang {version} is not in the upstream repository {self.path}: "
                             f"run `patchkit upstream fetch {version}` first"
                             + (" (or `git fetch --tags` in that clone)" if self.foreign else ""),
                             version=version, path=str(self.path))
        info = gitrepo.commit_info(self.git_dir, sha)
        wheel = None if self.foreign else _cached_wheel(self.wheels, version)
        return Release(version, f"v{version}", sha, info.tree, info.committed_date, wheel)

    def fetch(self, version: str, *, progress: Progress | None = None) -> Release:
        """Make ``v<version>`` exist: download, extract, commit in version order, tag."""
        say = progress or (lambda _step: None)
        version_key(version)
        if version in self.release_commits():
            say(f"sglang {version} already in the upstream repository")
            return self.release(version)
        if self.foreign:
            raise UsageError(f"tag v{version} is not in the SGLang clone {self.path}; run `git "
                             "fetch --tags` there, or unset PATCHKIT_UPSTREAM to let patchkit "
                             "build releases from the package registry", version=version,
                             path=str(self.path))
        wheel = download_wheel(version, self.wheels, progress=say)
        self.path.mkdir(parents=True, exist_ok=True)
        with self._locked(say):
            # Another patchkit may have added it (or rebuilt the history) while we waited.
            if version in self.release_commits():
                return self.release(version)
            if not gitrepo.is_git_repo(self.git_dir):
                gitrepo.init(self.git_dir, bare=True)
                gitrepo.set_config(self.git_dir, _MANAGED_KEY, "true")
                # clones made by checkout() borrow objects (--shared): never prune them
                gitrepo.set_config(self.git_dir, "gc.auto", "0")
            say(f"committing sglang {version} from {wheel.name}")
            tree = gitrepo.write_tree(self.git_dir, source_files(wheel))
            self._insert(version, tree, wheel, say)
        return self.release(version)

    def fetch_all(self, versions: Sequence[str], *, progress: Progress | None = None,
                  named: bool = False) -> list[Release]:
        """:meth:`fetch` of each of ``versions``, every missing one made sure of first (its
        wheel downloaded, or in a foreign clone its tag looked for): a release that does not
        exist fails before the history is rebuilt for the others (an older release is
        inserted in version order, renewing the commits of the newer ones). ``named``: each
        step says its release first (``0.5.23: downloading ...``)."""
        say = progress or (lambda _step: None)

        def of(version: str) -> Progress:
            return (lambda step: say(f"{version}: {step}")) if named else say

        have = self.release_commits()
        for version in dict.fromkeys(versions):
            version_key(version)
            if version not in have and not self.foreign:
                download_wheel(version, self.wheels, progress=of(version))
        for version in sorted(dict.fromkeys(versions), key=version_key):  # oldest first: an
            self.fetch(version, progress=of(version))  # older one inserted later rebuilds more
        return [self.release(version) for version in versions]  # the commits as they ended

    @contextlib.contextmanager
    def _locked(self, say: Progress) -> Iterator[None]:
        """Serialize writers of the managed repository: two fetches at once would race."""
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say("waiting for another patchkit writing the upstream repository")
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _insert(self, version: str, tree: str, wheel: Path, say: Progress) -> None:
        """Commit ``version`` at its place in the history and rebuild the later ones on top;
        tags and main move in one ref transaction once every object is written."""
        tags = self.release_commits()
        ordered = sorted(tags, key=version_key)
        older = [v for v in ordered if version_key(v) < version_key(version)]
        newer = [v for v in ordered if version_key(v) > version_key(version)]
        parent = [tags[older[-1]]] if older else []
        sha = gitrepo.commit_tree(self.git_dir, tree, message=_message(version, wheel),
                                  parents=parent, author=RELEASE_IDENTITY, date=release_date(wheel))
        updates = {f"refs/tags/v{version}": sha}
        expected: dict[str, str | None] = {f"refs/tags/v{version}": None}
        for later in newer:
            say(f"rebuilding sglang {later} on top of {version}")
            info = gitrepo.commit_info(self.git_dir, tags[later])
            sha = gitrepo.commit_tree(self.git_dir, info.tree, message=info.message, parents=[sha],
                                      author=info.author, committer=info.committer,
                                      date=info.committed_date)
            updates[f"refs/tags/v{later}"] = sha
            expected[f"refs/tags/v{later}"] = tags[later]
        updates["refs/heads/main"] = sha
        expected["refs/heads/main"] = gitrepo.rev_parse(self.git_dir, "refs/heads/main")
        gitrepo.update_refs(self.git_dir, updates, expected)

    def checkout(self, version: str, dest: Path | str) -> Path:
        """A working tree of ``version`` at ``dest`` (absent or empty), detached at the tag."""
        d = checkout_dest(version, dest)
        self.release(version)
        d.parent.mkdir(parents=True, exist_ok=True)
        # made beside it and renamed into place: interrupted, nothing is left at ``dest``
        work = Path(tempfile.mkdtemp(prefix=f".{d.name}.patchkit-", dir=d.parent))
        try:
            gitrepo.clone(self.git_dir, work / "tree", f"v{version}")
            if d.exists():
                d.rmdir()
            os.rename(work / "tree", d)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return d

    def move(self, tree: Path, version: str) -> Path:
        """The checkout ``tree`` (made by :meth:`checkout`) turned into ``version``'s: only the
        files that differ between the two releases are written."""
        gitrepo.switch(tree, self.release(version).commit)
        return tree

    def tree_path_of(self, version: str) -> Path:
        """A cached read-only working tree of ``version`` (made once, reused after)."""
        rel = self.release(version)
        path = self.trees / version
        if path.exists():
            current = gitrepo.rev_parse(path, "HEAD") if gitrepo.is_git_repo(path) else None
            if current and gitrepo.commit_info(path, current).tree == rel.tree and \
                    gitrepo.is_clean(path):
                return path
            shutil.rmtree(path)
        self.trees.mkdir(parents=True, exist_ok=True)
        return self.checkout(version, path)


def _cached_wheel(wheels: Path, version: str) -> Path | None:
    return min(wheels.glob(f"{PROJECT}-{version}-*.whl"), default=None) if wheels.is_dir() else None


def _pip(args: list[str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)


def latest_release() -> str:
    """The newest SGLang release on the package registry (pre-releases left out), as pip's
    ``index versions`` reports it: what ``upstream fetch --latest`` fetches."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", PROJECT, "--disable-pip-version-check"]
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    found = re.search(rf"^{PROJECT} \(([^)]+)\)", proc.stdout, re.M)
    if proc.returncode != 0 or found is None:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise TargetError(f"asking the package registry for the latest SGLang release failed "
                          f"(pip exit {proc.returncode}): {tail or 'no answer'}; check the network "
                          "or the package index configuration, or name the release",
                          command=cmd)
    version = found.group(1).strip()
    version_key(version)
    return version


def download_wheel(version: str, wheels: Path | str, *, progress: Progress | None = None) -> Path:
    """The wheel of SGLang ``version`` in ``wheels``: a cached one, or downloaded with pip."""
    version_key(version)
    wheels = Path(wheels)
    cached = _cached_wheel(wheels, version)
    if cached is not None:
        return cached
    wheels.mkdir(parents=True, exist_ok=True)
    if progress:
        progress(f"downloading sglang {version} from the package registry")
    # pip writes into a directory of this download's own, and the wheel is renamed into
    # ``wheels`` whole: another process looking for it (a second fetch of the same release,
    # a parallel test worker) finds the complete file or none, never one pip is still writing.
    with tempfile.TemporaryDirectory(dir=wheels, prefix=".download-") as private:
        _pip_download(version, Path(private))
        for done in Path(private).glob(f"{PROJECT}-{version}-*.whl"):
            os.replace(done, wheels / done.name)
    wheel = _cached_wheel(wheels, version)
    if wheel is None:
        raise TargetError(f"pip reported success but no sglang {version} wheel is in {wheels}")
    return wheel


def _pip_download(version: str, dest: Path) -> None:
    spec = [f"{PROJECT}=={version}", "-d", str(dest)]
    proc = _pip(spec)
    if proc.returncode != 0:
        m = re.search(r"from versions: ([^)]*)\)", proc.stdout + proc.stderr)
        listed = m and [v.strip() for v in m.group(1).split(",") if v.strip() not in ("", "none")]
        if listed is not None and version not in listed:  # None exactly when m is
            recent = ", ".join(sorted(listed, key=_loose_key)[-8:])
            raise UsageError(f"SGLang {version} is not on the package registry"
                             + (f" (latest releases: {recent})" if recent else "")
                             + "; see every release with `python -m pip index versions sglang`",
                             version=version)
        # The release exists but has no wheel for this interpreter: any wheel will do.
        proc = _pip([*spec, *_ANY_WHEEL_ARGS])
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise TargetError(f"downloading SGLang {version} failed (pip exit {proc.returncode}): "
                              f"{tail}; check the network or the package index configuration "
                              "and retry", version=version, command=proc.args)


def _loose_key(v: str) -> tuple[bool, Version]:
    """Registry versions: the releases patchkit takes last, in order."""
    return (True, version_key(v)) if _VERSION.match(v) else (False, Version("0"))


def source_files(wheel: Path) -> Iterator[tuple[str, bytes, bool]]:
    """The wheel's ``sglang/`` files as (path in a checkout, ``python/sglang/...``; bytes;
    executable), without compiled extensions or ``.dist-info``. Every member's name is checked
    here, before the first is read: a wheel that is not one, names a path outside ``sglang/``
    or holds no source fails before anything is written."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise _bad_wheel(wheel, exc) from None
    members = []
    with contextlib.ExitStack() as unless_returned:
        unless_returned.callback(zf.close)
        for info in zf.infolist():
            name = PurePosixPath(info.filename)
            if info.is_dir() or not name.parts or name.parts[0] != PROJECT:
                continue
            if ".." in name.parts or name.is_absolute():
                raise TargetError(f"{wheel}: unsafe member path {info.filename!r}; delete the "
                                  "wheel and fetch again", wheel=str(wheel))
            if not _COMPILED.search(name.name):
                members.append(("/".join(("python", *name.parts)), info))
        if not members:
            raise TargetError(f"{wheel} has no {PROJECT}/ source files; delete it and fetch "
                              "again", wheel=str(wheel))
        unless_returned.pop_all()
    return _read_members(wheel, zf, members)


def _read_members(wheel: Path, zf: zipfile.ZipFile, members: list[tuple[str, zipfile.ZipInfo]]
                  ) -> Iterator[tuple[str, bytes, bool]]:
    with zf:
        for path, info in members:
            try:
                data = zf.read(info)
            except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
                raise _bad_wheel(wheel, exc) from None
            yield path, data, bool((info.external_attr >> 16) & 0o111)


def _bad_wheel(wheel: Path, exc: Exception) -> TargetError:
    return TargetError(f"{wheel} is not a valid wheel ({exc}); delete it and fetch again",
                       wheel=str(wheel))


def release_date(wheel: Path) -> str:
    """The release's commit date: the newest file time in the wheel (UTC), else its mtime."""
    with zipfile.ZipFile(wheel) as zf:
        newest = max((info.date_time for info in zf.infolist() if info.date_time > (1980, 1, 2, 0, 0, 0)),
                     default=None)
    when = (_dt.datetime(*newest, tzinfo=_dt.timezone.utc) if newest is not None else
            _dt.datetime.fromtimestamp(int(wheel.stat().st_mtime), tz=_dt.timezone.utc))
    return when.isoformat()


def _message(version: str, wheel: Path) -> str:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return (f"SGLang {version}\n\nThe Python source of {wheel.name} from the package registry, "
            "laid out as a\ncheckout (python/sglang/...); compiled extensions and .dist-info "
            f"left out.\n\nWheel-SHA256: {digest}\n")
