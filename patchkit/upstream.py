"""SGLang releases from the package registry as a linear, tagged git history.

A fix is written against a release; to diff, rebase or test it we need that release's
source as a git tree. SGLang's wheels carry the Python source, so each release becomes
one commit (``python/sglang/...``, the checkout layout) tagged ``v<version>``, in version
order on branch ``main``. Layout of a managed upstream directory (docs/upstream.md)::

    <path>/repo.git/     bare repository: branch main, tags v0.5.20, v0.5.21, ...
    <path>/wheels/       downloaded wheels, reused by later fetches
    <path>/trees/<ver>/  plain working trees made by tree_path_of() (a cache: do not edit)

``path`` may instead be an existing SGLang clone (``PATCHKIT_UPSTREAM``): its ``v<ver>``
tags are used as they are and nothing is ever committed there.
"""

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

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
_ANY_WHEEL_ARGS = [
    "--python-version", "3.11", "--implementation", "cp",
    "--abi", "cp311", "--abi", "abi3", "--abi", "none",
    "--platform", "manylinux_2_34_x86_64", "--platform", "manylinux_2_28_x86_64",
    "--platform", "manylinux2014_x86_64", "--platform", "any",
]

Progress = Callable[[str], None]


def version_key(version: str) -> tuple[tuple[int, ...], int]:
    """Sort key of a release version ``N.N.N[.postN]`` (trailing zeros ignored, as PEP 440)."""
    m = _VERSION.match(version)
    if m is None:
        raise UsageError(
            f"unsupported SGLang version {version!r}: expected a release like 0.5.21 or "
            "0.5.21.post1", version=version,
        )
    release = tuple(int(p) for p in m.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    post = int(m.group(2)) if m.group(2) is not None else -1
    return release, post


def _is_version(text: str) -> bool:
    return _VERSION.match(text) is not None


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
    """SGLang releases as a git history; see the module docstring for the layout."""

    def __init__(self, path: Path | str | None = None, *, wheels: Path | str | None = None):
        self.path = Path(path).expanduser() if path is not None else upstream_dir()
        # A git repository there is a user's SGLang clone; a plain directory is ours.
        self.foreign = gitrepo.is_git_repo(self.path)
        self.git_dir = self.path if self.foreign else self.path / "repo.git"
        self.wheels = Path(wheels) if wheels is not None else self.path / "wheels"
        if self.foreign:
            digest = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:12]
            self.trees = cache_dir() / "clones" / digest / "trees"
        else:
            self.trees = self.path / "trees"

    # -- queries ----------------------------------------------------------------------

    def _ensure_repo(self) -> None:
        if self.foreign or gitrepo.is_git_repo(self.git_dir):
            return
        gitrepo.init(self.git_dir, bare=True)
        gitrepo.set_config(self.git_dir, _MANAGED_KEY, "true")
        # Clones made by checkout() borrow objects (--shared): never prune them.
        gitrepo.set_config(self.git_dir, "gc.auto", "0")

    def _release_tags(self) -> dict[str, str]:
        """version -> commit, for every ``v<version>`` tag."""
        if not gitrepo.is_git_repo(self.git_dir):
            return {}
        return {
            name[1:]: sha
            for name, sha in gitrepo.list_tags(self.git_dir).items()
            if name.startswith("v") and _is_version(name[1:])
        }

    def versions(self) -> list[str]:
        """The releases present, oldest first."""
        return sorted(self._release_tags(), key=version_key)

    def release(self, version: str) -> Release:
        version_key(version)
        sha = self._release_tags().get(version)
        if sha is None:
            raise UsageError(
                f"SGLang {version} is not in the upstream repository {self.path}: "
                f"run `patchkit upstream fetch {version}` first"
                + (" (or `git fetch --tags` in that clone)" if self.foreign else ""),
                version=version, path=str(self.path),
            )
        info = gitrepo.commit_info(self.git_dir, sha)
        wheel = None if self.foreign else _cached_wheel(self.wheels, version)
        return Release(version, f"v{version}", sha, info.tree, info.committed_date, wheel)

    # -- fetch ------------------------------------------------------------------------

    def fetch(self, version: str, *, progress: Progress | None = None) -> Release:
        """Make ``v<version>`` exist: download, extract, commit in version order, tag."""
        say = progress or (lambda _step: None)
        version_key(version)
        if version in self._release_tags():
            say(f"sglang {version} already in the upstream repository")
            return self.release(version)
        if self.foreign:
            raise UsageError(
                f"tag v{version} is not in the SGLang clone {self.path}; run `git fetch --tags` "
                "there, or unset PATCHKIT_UPSTREAM to let patchkit build releases from the "
                "package registry", version=version, path=str(self.path),
            )
        wheel = download_wheel(version, self.wheels, progress=say)
        self.path.mkdir(parents=True, exist_ok=True)
        with self._locked(say):
            # Another patchkit may have added it (or rebuilt the history) while we waited.
            if version in self._release_tags():
                return self.release(version)
            self._ensure_repo()
            say(f"extracting {wheel.name}")
            with tempfile.TemporaryDirectory(prefix="patchkit-release-", dir=self.path) as tmp:
                extract_source(wheel, Path(tmp))
                say(f"committing sglang {version}")
                self._insert(version, Path(tmp), wheel, say)
        return self.release(version)

    @contextlib.contextmanager
    def _locked(self, say: Progress) -> Iterator[None]:
        """Serialize writers of the managed repository: two fetches at once (a benchmark and
        a demo, two CI jobs sharing a cache) would otherwise race on the same tags."""
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

    def _insert(self, version: str, tree_dir: Path, wheel: Path, say: Progress) -> None:
        """Commit ``version`` at its place in the history; rebuild the later ones on top.

        All objects are written first; tags and main move in one ref transaction at the end.
        """
        tags = self._release_tags()
        ordered = sorted(tags, key=version_key)
        older = [v for v in ordered if version_key(v) < version_key(version)]
        newer = [v for v in ordered if version_key(v) > version_key(version)]
        parent = [tags[older[-1]]] if older else []
        date = release_date(wheel)
        sha = gitrepo.commit_directory(
            self.git_dir, tree_dir, message=_message(version, wheel), parents=parent,
            author=RELEASE_IDENTITY, date=date,
        )
        updates = {f"refs/tags/v{version}": sha}
        expected: dict[str, str | None] = {f"refs/tags/v{version}": None}
        for later in newer:
            say(f"rebuilding sglang {later} on top of {version}")
            info = gitrepo.commit_info(self.git_dir, tags[later])
            sha = gitrepo.commit_tree(
                self.git_dir, info.tree, message=info.message, parents=[sha],
                author=info.author, committer=info.committer, date=info.committed_date,
            )
            updates[f"refs/tags/v{later}"] = sha
            expected[f"refs/tags/v{later}"] = tags[later]
        updates["refs/heads/main"] = sha
        expected["refs/heads/main"] = gitrepo.rev_parse(self.git_dir, "refs/heads/main")
        gitrepo.update_refs(self.git_dir, updates, expected)

    # -- working trees ------------------------------------------------------------------

    def checkout(self, version: str, dest: Path | str) -> Path:
        """A plain working tree of ``version`` at ``dest`` (which must not exist or be empty).

        It is a ``git clone --shared`` of the upstream repository, detached at the tag:
        an ordinary repository (commit, diff, apply fixes) that borrows the upstream's
        objects, so it is quick to make; it needs the upstream repository to stay.
        """
        d = Path(dest).absolute()  # git clones from the upstream repository's directory
        self.release(version)
        if d.exists() and (not d.is_dir() or any(d.iterdir())):
            raise UsageError(
                f"cannot check out SGLang {version} into {d}: it exists and is not empty; "
                "choose a new directory", path=str(d),
            )
        if d.exists():
            d.rmdir()
        d.parent.mkdir(parents=True, exist_ok=True)
        return gitrepo.clone(self.git_dir, d, rev=f"v{version}", shared=True)

    def tree_path_of(self, version: str) -> Path:
        """A cached read-only working tree of ``version`` (made once, reused after)."""
        rel = self.release(version)
        path = self.trees / version
        if path.exists():
            current = gitrepo.head(path) if gitrepo.is_git_repo(path) else None
            if current is not None and gitrepo.commit_info(path, current).tree == rel.tree \
                    and gitrepo.is_clean(path):
                return path
            shutil.rmtree(path)
        self.trees.mkdir(parents=True, exist_ok=True)
        return self.checkout(version, path)


# -- wheels ---------------------------------------------------------------------------------


def _cached_wheel(wheels: Path, version: str) -> Path | None:
    found = sorted(wheels.glob(f"{PROJECT}-{version}-*.whl")) if wheels.is_dir() else []
    return found[0] if found else None


def _pip(args: list[str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", *args]
    return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)


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
    spec = [f"{PROJECT}=={version}", "-d", str(wheels)]
    proc = _pip(spec)
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        listed = _listed_versions(output)
        if listed is not None and version not in listed:
            recent = ", ".join(sorted(listed, key=_loose_key)[-8:])
            raise UsageError(
                f"SGLang {version} is not on the package registry"
                + (f" (latest releases: {recent})" if recent else "")
                + "; see every release with `python -m pip index versions sglang`",
                version=version,
            )
        # The release exists but has no wheel for this interpreter: any wheel will do.
        proc = _pip([*spec, *_ANY_WHEEL_ARGS])
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise TargetError(
                f"downloading SGLang {version} failed (pip exit {proc.returncode}): {tail}; "
                "check the network or the package index configuration and retry",
                version=version, command=proc.args,
            )
    wheel = _cached_wheel(wheels, version)
    if wheel is None:
        raise TargetError(f"pip reported success but no sglang {version} wheel is in {wheels}")
    return wheel


def _listed_versions(pip_output: str) -> list[str] | None:
    m = re.search(r"from versions: ([^)]*)\)", pip_output)
    if m is None:
        return None
    return [v.strip() for v in m.group(1).split(",") if v.strip() and v.strip() != "none"]


def _loose_key(v: str) -> tuple[tuple[int, ...], int]:
    try:
        return version_key(v)
    except UsageError:
        return ((-1,), -1)


# -- extraction -------------------------------------------------------------------------------


def extract_source(wheel: Path, dest: Path) -> int:
    """Write the wheel's ``sglang/`` files under ``dest/python/sglang``; return their count.

    Compiled extensions and the ``.dist-info`` are left out: the tree is the Python source
    as a checkout lays it out.
    """
    count = 0
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = PurePosixPath(info.filename)
                if info.is_dir() or not name.parts or name.parts[0] != PROJECT:
                    continue
                if ".." in name.parts or name.is_absolute():
                    raise TargetError(f"{wheel.name}: unsafe member path {info.filename!r}")
                if _COMPILED.search(name.name):
                    continue
                target = dest / "python" / Path(*name.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(info))
                if (info.external_attr >> 16) & 0o111:
                    target.chmod(0o755)
                count += 1
    except zipfile.BadZipFile as exc:
        raise TargetError(f"{wheel} is not a valid wheel ({exc}); delete it and fetch again",
                          wheel=str(wheel)) from None
    if count == 0:
        raise TargetError(f"{wheel} has no {PROJECT}/ source files", wheel=str(wheel))
    return count


def release_date(wheel: Path) -> str:
    """The release's commit date: the newest file time in the wheel (UTC), else its mtime."""
    newest = None
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.date_time > (1980, 1, 2, 0, 0, 0):
                newest = max(newest or info.date_time, info.date_time)
    if newest is not None:
        when = _dt.datetime(*newest, tzinfo=_dt.timezone.utc)
    else:
        when = _dt.datetime.fromtimestamp(int(wheel.stat().st_mtime), tz=_dt.timezone.utc)
    return when.isoformat()


def _message(version: str, wheel: Path) -> str:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return (
        f"SGLang {version}\n\n"
        f"The Python source of {wheel.name} from the package registry, laid out as a\n"
        "checkout (python/sglang/...); compiled extensions and .dist-info left out.\n\n"
        f"Wheel-SHA256: {digest}\n"
    )
