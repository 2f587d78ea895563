"""SGLang releases as a linear, tagged git history (patchkit.upstream, patchkit.gitrepo)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from patchkit import gitrepo
from patchkit.cache import cache_dir
from patchkit.errors import PatchkitError, UsageError
from patchkit.upstream import UpstreamRepo, download_wheel, release_date, version_key
from tests.conftest import REAL_HOME
from tests.fixtures.sglang import grown_from


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


# -- version ordering (no registry) -------------------------------------------------------


def test_version_key_orders_releases_numerically_and_posts_after_base() -> None:
    versions = ["0.5.21", "0.5.3", "0.5.20.post1", "0.4.10", "0.5.20", "1.0"]
    assert sorted(versions, key=version_key) == [
        "0.4.10", "0.5.3", "0.5.20", "0.5.20.post1", "0.5.21", "1.0"]
    assert version_key("1.0") == version_key("1.0.0")


def test_the_engine_orders_release_names_as_packaging_does() -> None:
    """One order of release names: the engine's (stdlib, on hosts) is PEP 440's."""
    from packaging.version import Version

    from patchkit.engine.variants import release_key

    names = ["0.5.23.post10", "0.5.23", "0.5.23rc1", "0.5.9", "0.5.23.post2", "0.5.22",
             "0.5.23a1", "0.5.23rc2", "1.0", "0.5.23b1", "0.5.23rc1.post1", "0.10"]
    assert sorted(names, key=release_key) == sorted(names, key=Version)
    assert release_key("0.5.21") == release_key("0.5.21.0")


@pytest.mark.parametrize("bad", ["0.5.21rc1", "v0.5.21", "latest", "0.5.21; rm -rf /"])
def test_unsupported_version_is_a_usage_error(bad: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="expected a release like"):
        UpstreamRepo(tmp_path / "up").fetch(bad)


def test_release_date_comes_from_the_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(zipfile.ZipInfo("sglang/__init__.py", (2026, 10, 1, 6, 36, 48)), "x = 1\n")
        zf.writestr(zipfile.ZipInfo("sglang/a.py", (2026, 9, 1, 0, 0, 0)), "y = 2\n")
    assert release_date(wheel) == "2026-10-01T06:36:48+00:00"


def _small_wheel(wheels: Path, version: str, members: dict[str, bytes | None],
                 deflate: bool = False) -> Path:
    """A wheel of ``version`` in ``wheels`` holding ``members`` (None: an executable file's
    text, ``#!/bin/sh``)."""
    wheels.mkdir(parents=True, exist_ok=True)
    wheel = wheels / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
                         ) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, (2026, 10, 1, 0, 0, 0))
            info.compress_type = zf.compression
            info.external_attr = (0o100755 if data is None else 0o100644) << 16
            zf.writestr(info, b"#!/bin/sh\n" if data is None else data)
    return wheel


def test_a_small_wheel_is_committed_file_for_file_with_modes_and_odd_names(
        tmp_path: Path) -> None:
    """What `git ls-tree` of the release holds is the wheel's ``sglang/`` files, no more:
    compiled extensions and ``.dist-info`` left out, the executable bit kept, a name with a
    space or a leading quote committed as named."""
    _small_wheel(tmp_path / "wheels", "9.9.1", {
        "sglang/__init__.py": b"x = 1\n", "sglang/run me.sh": None,
        'sglang/"quoted".py': b"q = 1\n", "sglang/srt/kernel.cpython-311-x86_64.so": b"\0",
        "sglang-9.9.1.dist-info/METADATA": b"Name: sglang\n"})
    repo = UpstreamRepo(tmp_path / "up", wheels=tmp_path / "wheels")
    rel = repo.fetch("9.9.1")
    listing = git(repo.git_dir, "ls-tree", "-r", "v9.9.1").splitlines()
    assert {(line.split()[0], line.split("\t")[1]) for line in listing} == {
        ("100644", "python/sglang/__init__.py"), ("100755", "python/sglang/run me.sh"),
        ("100644", '"python/sglang/\\"quoted\\".py"')}
    assert git(repo.git_dir, "show", "v9.9.1:python/sglang/run me.sh") == "#!/bin/sh"
    assert git(repo.git_dir, "for-each-ref", "--format=%(refname)").split() == [
        "refs/heads/main", "refs/tags/v9.9.1"]  # the import's own ref is gone
    assert rel.commit == git(repo.git_dir, "rev-parse", "v9.9.1")


@pytest.mark.parametrize("case", ["not-a-zip", "escaping", "no-source", "truncated",
                                  "bad-deflate"])
def test_a_broken_wheel_is_refused_by_name_and_the_store_keeps_what_it_had(
        case: str, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    _small_wheel(wheels, "9.9.1", {"sglang/__init__.py": b"x = 1\n"})
    repo = UpstreamRepo(tmp_path / "up", wheels=wheels)
    repo.fetch("9.9.1")
    before = git(repo.git_dir, "for-each-ref")
    bad = wheels / "sglang-9.9.2-py3-none-any.whl"
    if case == "not-a-zip":
        bad.write_text("<html>not found</html>\n")
    else:
        members = {"escaping": {"sglang/../../evil.py": b"x\n"},
                   "no-source": {"sglang-9.9.2.dist-info/METADATA": b"x\n"},
                   "truncated": {**{f"sglang/f{i}.py": os.urandom(5000) for i in range(300)},
                                 "sglang/a.py": os.urandom(200_000)},
                   "bad-deflate": {**{f"sglang/f{i}.py": b"x = 1\n" * 900 for i in range(300)},
                                   "sglang/a.py": b"".join(b"line %d\n" % i
                                                           for i in range(40_000))}}[case]
        _small_wheel(wheels, "9.9.2", members, deflate=case == "bad-deflate")
        if case in ("truncated", "bad-deflate"):  # its bytes damaged: the read fails mid-import
            data = bad.read_bytes()  # (a CRC error stored; zlib's own error compressed)
            start = data.index(b"sglang/a.py") + len(b"sglang/a.py")
            bad.write_bytes(data[:start + 1000] + bytes(1000) + data[start + 2000:])
    with pytest.raises(PatchkitError) as info:
        repo.fetch("9.9.2")
    assert str(bad) in str(info.value) and "fetch again" in str(info.value)
    assert git(repo.git_dir, "for-each-ref") == before
    assert repo.versions() == ["9.9.1"]
    left = {p.name for p in (repo.git_dir / "objects" / "pack").iterdir()}
    assert not [n for n in left if n.startswith("tmp_")], left  # the import's pack is gone
    assert not list((tmp_path / "up").rglob("fast_import_crash_*"))


def test_an_import_the_disk_stops_is_an_error_naming_the_store_and_leaves_nothing(
        tmp_path: Path) -> None:
    """git fast-import killed mid-import (here by a file size limit, as a full disk would stop
    it) broke the pipe patchkit writes to: exit 70, an internal error, and its unfinished pack
    left in the store. It is the import's failure, said as such, exit 5, nothing left."""
    store = tmp_path / "up"
    _small_wheel(store / "wheels", "9.9.1", {"sglang/__init__.py": b"x = 1\n"})
    _small_wheel(store / "wheels", "9.9.3",
                 {f"sglang/f{i}.py": os.urandom(100_000) for i in range(60)})
    UpstreamRepo(store).fetch("9.9.1")
    before = git(store / "repo.git", "for-each-ref")
    packs = {p.name for p in (store / "repo.git" / "objects" / "pack").iterdir()}
    limited = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20)); "
               "from patchkit.cli.main import main; sys.exit(main())")
    done = subprocess.run([sys.executable, "-c", limited, "upstream", "fetch", "9.9.3"],
                          capture_output=True, text=True,
                          env={**os.environ, "PATCHKIT_UPSTREAM": str(store),
                               "PATCHKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 5, done.stdout + done.stderr
    assert "git fast-import failed in" in done.stderr and "SIGXFSZ" in done.stderr, done.stderr
    assert git(store / "repo.git", "for-each-ref") == before
    assert {p.name for p in (store / "repo.git" / "objects" / "pack").iterdir()} == packs


def test_existing_clone_is_used_as_is_and_never_committed_to(tmp_path: Path) -> None:
    clone = tmp_path / "sglang-clone"
    (clone / "python" / "sglang").mkdir(parents=True)
    (clone / "python" / "sglang" / "version.py").write_text('__version__ = "0.5.21"\n')
    git(tmp_path, "init", "-q", str(clone))
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "release")
    git(clone, "tag", "-a", "v0.5.21", "-m", "v0.5.21")
    git(clone, "tag", "v0.5.21rc1")  # not a release: ignored
    up = UpstreamRepo(clone)
    assert up.foreign and up.versions() == ["0.5.21"]
    rel = up.fetch("0.5.21")
    assert rel.commit == git(clone, "rev-parse", "HEAD")
    tree = up.checkout("0.5.21", tmp_path / "co")
    assert (tree / "python" / "sglang" / "version.py").read_text() == '__version__ = "0.5.21"\n'
    with pytest.raises(UsageError, match=r"git fetch --tags"):
        up.fetch("0.5.20")
    assert git(clone, "rev-list", "--all", "--count") == "1"


def test_upstream_path_defaults_to_the_env_and_the_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PATCHKIT_UPSTREAM", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert UpstreamRepo().path == tmp_path / "cache" / "patchkit" / "upstream"
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "own"))
    assert UpstreamRepo().path == tmp_path / "own" / "upstream"
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(tmp_path / "elsewhere"))
    assert UpstreamRepo().path == tmp_path / "elsewhere"


def test_the_cache_dir_is_patchkit_s_own_then_xdg_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PATCHKIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "patchkit"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as XDG says
    assert cache_dir() == tmp_path / "home" / ".cache" / "patchkit"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "patchkit"
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", "~/pk-cache")
    assert cache_dir() == tmp_path / "home" / "pk-cache"


def test_a_clone_s_release_trees_are_kept_in_the_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clone = tmp_path / "sglang"
    clone.mkdir()
    git(clone, "init", "-q")
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(tmp_path / "own"))
    assert UpstreamRepo(clone).trees.parent.parent == tmp_path / "own" / "clones"


def test_a_test_never_sees_the_user_s_cache() -> None:
    """The seal (tests/conftest.py) gives each test a cache directory of its own, whatever
    PATCHKIT_CACHE_DIR, XDG_CACHE_HOME or PATCHKIT_UPSTREAM the suite was started with."""
    home = Path(os.environ["HOME"])
    assert home != Path(REAL_HOME)
    assert cache_dir().is_relative_to(home) and not cache_dir().exists()
    assert UpstreamRepo().path == cache_dir() / "upstream"


# -- real releases (registry on first use, then the persistent cache) ----------------------


@pytest.mark.network
def test_fetch_commits_and_tags_the_release(upstream_repo: UpstreamRepo,
                                            sglang_wheel_0521: Path) -> None:
    rel = upstream_repo.fetch("0.5.21")  # already there: no second commit
    assert upstream_repo.versions() == ["0.5.21"]
    gd = upstream_repo.git_dir
    assert git(gd, "rev-parse", "v0.5.21^{commit}") == rel.commit
    assert git(gd, "rev-parse", "main") == rel.commit
    assert git(gd, "log", "--format=%an <%ae>|%cn <%ce>", "-1", "v0.5.21") == (
        "SGLang release <releases@patchkit.invalid>|SGLang release <releases@patchkit.invalid>")
    assert git(gd, "log", "-1", "--format=%cI", "v0.5.21") == release_date(sglang_wheel_0521)
    assert rel.wheel == sglang_wheel_0521


@pytest.mark.network
def test_release_tree_has_checkout_layout_without_compiled_files(
    upstream_repo: UpstreamRepo,
) -> None:
    files = git(upstream_repo.git_dir, "ls-tree", "-r", "--name-only", "v0.5.21").splitlines()
    assert len(files) > 4000
    assert all(f.startswith("python/sglang/") for f in files)
    assert "python/sglang/srt/mem_cache/memory_pool_host.py" in files
    assert "python/sglang/srt/model_executor/pool_configurator.py" in files
    assert not [f for f in files if f.endswith((".so", ".pyd", ".dylib"))]
    assert not [f for f in files if ".dist-info" in f]


@pytest.mark.network
def test_a_fetched_release_is_one_pack_not_a_loose_object_per_file(
    upstream_repo: UpstreamRepo,
) -> None:
    """A release's files were written as 6,000 loose objects: 6,000 files more in the
    store, each opened again by every checkout of it, and seconds to copy."""
    blobs = {line.split()[2] for line in
             git(upstream_repo.git_dir, "ls-tree", "-r", "v0.5.21").splitlines()}
    counts = dict(line.split(": ") for line in
                  git(upstream_repo.git_dir, "count-objects", "-v").splitlines())
    assert int(counts["in-pack"]) >= len(blobs) - 5 > 4000, counts  # an empty file stays loose
    assert int(counts["count"]) < len(blobs) // 4, counts  # the trees and the commit only


@pytest.mark.network
def test_a_checkout_moved_to_another_release_is_exactly_that_release(
    catalog_upstream: UpstreamRepo, tmp_path: Path,
) -> None:
    """`matrix` moves one checkout from release to release: what a check left in it
    (an edit, a new file, an ignored ``__pycache__``) does not follow it there."""
    tree = catalog_upstream.checkout("0.5.21", tmp_path / "t")
    pool = tree / "python/sglang/srt/model_executor/pool_configurator.py"
    pool.write_text(pool.read_text() + "# edited\n")
    (tree / "left-behind.txt").write_text("x")
    cache = tree / "python/sglang/__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "stale.cpython-311.pyc").write_bytes(b"\0")
    (tree / ".git" / "info" / "exclude").write_text("__pycache__/\n")
    assert catalog_upstream.move(tree, "0.5.23") == tree
    assert git(tree, "rev-parse", "HEAD") == catalog_upstream.release("0.5.23").commit
    assert gitrepo.is_clean(tree) and not cache.exists()
    assert git(tree, "status", "--porcelain", "--ignored") == ""


@pytest.mark.network
def test_fetch_is_deterministic_given_the_same_wheel(
    tmp_path: Path, sglang_wheels: Path, upstream_repo: UpstreamRepo
) -> None:
    again = UpstreamRepo(tmp_path / "again", wheels=sglang_wheels).fetch("0.5.21")
    assert again.commit == upstream_repo.release("0.5.21").commit


@pytest.mark.network
def test_older_release_fetched_later_gives_linear_sorted_history(
    tmp_path: Path, sglang_wheels: Path, upstream_repo: UpstreamRepo
) -> None:
    # 0.5.21 fetched into an empty directory: a copy of the session's (the same commit,
    # test_fetch_is_deterministic_given_the_same_wheel), without extracting it again
    up = grown_from(upstream_repo, tmp_path / "up", ())
    assert up.versions() == ["0.5.21"]
    newer = up.fetch("0.5.21")
    steps: list[str] = []
    older = up.fetch("0.5.20", progress=steps.append)
    assert any("rebuilding sglang 0.5.21" in s for s in steps)
    assert up.versions() == ["0.5.20", "0.5.21"]
    gd = up.git_dir
    # main: 0.5.21 on top of 0.5.20, nothing else; each tag on that one line.
    chain = git(gd, "rev-list", "--parents", "main").splitlines()
    rebuilt = up.release("0.5.21")
    assert chain == [f"{rebuilt.commit} {older.commit}", older.commit]
    assert rebuilt.tree == newer.tree and rebuilt.commit != newer.commit
    assert git(gd, "log", "-1", "--format=%cI", "v0.5.21") == newer.date
    # The same two releases fetched in order give the very same commits.
    in_order = UpstreamRepo(tmp_path / "in-order", wheels=sglang_wheels)
    in_order.fetch("0.5.20")
    assert in_order.fetch("0.5.21").commit == rebuilt.commit


@pytest.mark.network
def test_checkout_is_a_clean_working_tree_at_the_tag(
    upstream_repo: UpstreamRepo, tmp_path: Path
) -> None:
    tree = upstream_repo.checkout("0.5.21", tmp_path / "co")
    assert gitrepo.work_tree_top(tree) == tree.resolve() and gitrepo.is_clean(tree)
    assert git(tree, "rev-parse", "HEAD") == upstream_repo.release("0.5.21").commit
    assert git(tree, "describe", "--tags") == "v0.5.21"
    target = tree / "python/sglang/srt/mem_cache/memory_pool_host.py"
    target.write_text(target.read_text() + "# local change\n")
    assert "+# local change" in git(tree, "diff", "HEAD")
    with pytest.raises(UsageError, match="not empty"):
        upstream_repo.checkout("0.5.21", tree)


@pytest.mark.network
def test_an_interrupted_checkout_leaves_nothing_and_says_so(
    upstream_repo: UpstreamRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while `upstream checkout` clones: nothing is left at DEST (the clone is made
    beside it and renamed into place) and the message says what was left and what to do;
    it said only "interrupted by SIGINT" and could leave half a tree (a new-user trial)."""
    from click.testing import CliRunner

    from patchkit.cli.main import main

    real = gitrepo.clone

    def cut_short(source: Path, dest: Path, rev: str) -> Path:
        real(source, dest, rev)  # the whole clone is there, then the interrupt comes
        raise KeyboardInterrupt

    monkeypatch.setattr(gitrepo, "clone", cut_short)
    dest = tmp_path / "co"
    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(upstream_repo.path))
    with CliRunner().isolation() as streams:
        with pytest.raises(SystemExit) as done:
            main(["upstream", "checkout", "0.5.21", str(dest)])
        sys.stderr.flush()
        said = streams[1].getvalue().decode()
    assert done.value.code == 130, said
    assert (f"interrupted by SIGINT; nothing was made at {dest.resolve()} (a checkout is put in "
            "place whole)") in " ".join(said.split()), said
    assert not dest.exists() and list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


@pytest.mark.network
def test_tree_path_of_is_cached_and_repaired(upstream_repo: UpstreamRepo) -> None:
    path = upstream_repo.tree_path_of("0.5.21")
    assert (path / "python/sglang/srt/environ.py").is_file()
    marker = path / "python/sglang/stray.py"
    marker.write_text("x\n")
    assert upstream_repo.tree_path_of("0.5.21") == path
    assert not marker.exists()  # a dirty cached tree is made anew


@pytest.mark.network
def test_sglang_tree_fixture_is_a_fresh_release_checkout(sglang_tree: Path) -> None:
    assert (sglang_tree / "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py").is_file()
    assert git(sglang_tree, "describe", "--tags") == "v0.5.21"


@pytest.mark.network
def test_missing_release_says_it_is_not_on_the_registry(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        download_wheel("0.0.999", tmp_path / "wheels")
    message = str(info.value)
    assert "0.0.999 is not on the package registry" in message
    assert "pip index versions sglang" in message
    assert isinstance(info.value, PatchkitError)


def test_checkout_of_a_release_not_fetched_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="patchkit upstream fetch 0.5.21"):
        UpstreamRepo(tmp_path / "up").checkout("0.5.21", tmp_path / "co")


@pytest.mark.network
def test_concurrent_fetches_of_one_release_both_succeed_with_one_commit(
    tmp_path: Path, sglang_wheels: Path, sglang_wheel_0521: Path
) -> None:
    # Two patchkit processes sharing a cache (a demo and a benchmark, two CI jobs) used to
    # race on the release's tag; the second now waits and finds the release there.
    import sys

    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from patchkit.upstream import UpstreamRepo\n"
        "r = UpstreamRepo(Path(sys.argv[1]), wheels=Path(sys.argv[2])).fetch('0.5.21')\n"
        "print(r.commit)\n"
    )
    argv = [sys.executable, "-c", code, str(tmp_path / "up"), str(sglang_wheels)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _out, err in outs]
    assert outs[0][0] == outs[1][0]
    repo = UpstreamRepo(tmp_path / "up", wheels=sglang_wheels)
    assert repo.versions() == ["0.5.21"]
    log = subprocess.run(["git", "--git-dir", str(repo.git_dir), "rev-list", "--all"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(log) == 1


# -- downloading a wheel into a shared directory (a local package index: no registry) -------


def _index_with_a_wheel(index: Path, version: str) -> bytes:
    """A directory pip reads as its package index (``--find-links``), holding a small wheel
    of ``sglang`` ``version``: pip checks its name and version, not what it holds."""
    index.mkdir(parents=True, exist_ok=True)
    info = f"sglang-{version}.dist-info"
    wheel = index / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("sglang/__init__.py", "# " + "x" * 20_000 + "\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return wheel.read_bytes()


def test_concurrent_downloads_each_find_the_whole_wheel_and_leave_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pip writes into a directory of the download's own and the wheel is renamed into the
    # shared one whole: a second process (a parallel fetch, another test worker) finds the
    # complete file or none, and no half-written wheel is ever taken for a downloaded one.
    import sys

    expected = _index_with_a_wheel(tmp_path / "index", "0.0.7")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    wheels = tmp_path / "wheels"
    code = ("import sys\nfrom patchkit.upstream import download_wheel\n"
            "print(download_wheel('0.0.7', sys.argv[1]))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(wheels)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _out, err in outs]
    for out, _err in outs:
        assert Path(out.strip()).read_bytes() == expected
    assert sorted(p.name for p in wheels.iterdir()) == ["sglang-0.0.7-py3-none-any.whl"]


def test_a_failed_download_leaves_the_wheel_directory_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _index_with_a_wheel(tmp_path / "index", "0.0.7")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "sglang-0.0.6-py3-none-any.whl").write_bytes(b"kept")
    with pytest.raises(UsageError, match="0.0.8 is not on the package registry"):
        download_wheel("0.0.8", wheels)
    assert [p.name for p in wheels.iterdir()] == ["sglang-0.0.6-py3-none-any.whl"]


@pytest.mark.network
def test_fetching_several_releases_checks_every_one_before_committing_any(
        upstream_repo: UpstreamRepo, sglang_wheel_0523: Path, tmp_path: Path) -> None:
    """`matrix --releases 0.5.23,0.0.999` (or `upstream fetch`, a rebase's missing bases):
    the release that does not exist fails the run before 0.5.23 is committed, so the store is
    not changed (an older release would even have renewed the newer ones' commits)."""
    from tests.fixtures.sglang import grown_from

    repo = grown_from(upstream_repo, tmp_path / "store", ())
    before = {v: repo.release(v).commit for v in repo.versions()}
    with pytest.raises(UsageError, match="0.0.999"):
        repo.fetch_all(["0.5.23", "0.0.999"])
    assert {v: repo.release(v).commit for v in repo.versions()} == before
    assert [r.version for r in repo.fetch_all(["0.5.23"])] == ["0.5.23"]


@pytest.mark.network
def test_fetch_all_commits_oldest_first_and_answers_the_final_commits(
        upstream_repo: UpstreamRepo, sglang_wheel_0523: Path, tmp_path: Path) -> None:
    """`upstream fetch 0.5.23 0.5.21` into an empty store: committed oldest first (no rebuild
    of 0.5.23 under 0.5.21), and each answer is the commit its tag ends at (it printed a
    commit its own run had replaced)."""
    import shutil

    store = UpstreamRepo(tmp_path / "store", wheels=tmp_path / "wheels")
    (tmp_path / "wheels").mkdir()
    for wheel in upstream_repo.wheels.glob("sglang-0.5.2[13]-*.whl"):
        shutil.copy(wheel, tmp_path / "wheels")
    done = store.fetch_all(["0.5.23", "0.5.21"])
    assert [r.version for r in done] == ["0.5.23", "0.5.21"]
    assert {r.version: r.commit for r in done} == {v: store.release(v).commit
                                                   for v in ("0.5.23", "0.5.21")}


def test_upstream_checkout_refuses_a_full_directory_before_fetching(tmp_path: Path) -> None:
    """The destination is asked about first: nothing is downloaded or committed for a
    checkout that cannot go there (it inserted the release, rebuilding newer ones, then
    refused)."""
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x\n")
    run = subprocess.run([sys.executable, "-m", "patchkit", "upstream", "checkout", "0.5.20",
                          str(full)], capture_output=True, text=True,
                         env=dict(os.environ, PATCHKIT_UPSTREAM=str(tmp_path / "store")))
    assert run.returncode == 2 and "exists and is not empty" in run.stderr, run.stderr
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.whl"))


@pytest.mark.network
def test_fetching_an_older_release_says_which_newer_ones_were_rebuilt(
        upstream_repo: UpstreamRepo, sglang_wheel_0523: Path, tmp_path: Path) -> None:
    """0.5.21 goes in under 0.5.23: 0.5.23's commit is new, which checkouts made before sit
    beside; `upstream fetch` says so (it printed only 0.5.21)."""
    import json
    import shutil

    store = tmp_path / "store"
    (store / "wheels").mkdir(parents=True)
    for wheel in upstream_repo.wheels.glob("sglang-0.5.2[13]-*.whl"):
        shutil.copy(wheel, store / "wheels")
    env = dict(os.environ, PATCHKIT_UPSTREAM=str(store))
    first = subprocess.run([sys.executable, "-m", "patchkit", "upstream", "fetch", "0.5.23",
                            "--json"], capture_output=True, text=True, env=env)
    [was] = json.loads(first.stdout)
    run = subprocess.run([sys.executable, "-m", "patchkit", "upstream", "fetch", "v0.5.21",
                          "--json"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    data = {r["version"]: r for r in json.loads(run.stdout)}
    assert data["0.5.23"]["rebuilt_from"] == was["commit"] != data["0.5.23"]["commit"]
    assert "rebuilt_from" not in data["0.5.21"]
