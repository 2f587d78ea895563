"""Git-aware fixes on real git repositories: revert fixes, ``apply --commit`` and its rollback,
and the git preconditions (docs/git.md).

Each test builds a small SGLang-like checkout and a catalog in ``tmp_path``: a ``dead`` fix
whose series a fork committed, and fixes that revert it by patch-id or by commit id.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.errors import ConflictError, PreconditionFailed, VerificationFailed
from patchkit.request_builder import build_request
from patchkit.targets import LocalTarget
from patchkit.upstream import UpstreamRepo

from .engine.helpers import content_snapshot, full_snapshot

POOL = "python/sglang/srt/mem_cache/pool.py"
DEAD_LINES = ["        if DEBUG_DBG:\n", "            log('backup', n)\n"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def pool_text() -> str:
    body = "".join(f"    def op{i}(self, n):\n        return n + {i}\n\n" for i in range(30))
    return '"""Host pool."""\n\n\nclass Pool:\n' + body


def with_dead(text: str) -> str:
    anchor = "    def op10(self, n):\n"
    return text.replace(anchor, anchor + "".join(DEAD_LINES))


MANIFEST = """format = 1
name = "{name}"
version = 1
title = "{title}"
status = "active"
rationale = "Why {name}."
{extra}
[upstream]
base_release = "0.5.21"
"""


def write_fix(catalog: Path, name: str, title: str, patch: str | None = None, extra: str = "",
              tail: str = "") -> None:
    text = MANIFEST.format(name=name, title=title, extra=extra)
    if patch is not None:
        (catalog / "patches" / name).mkdir(parents=True, exist_ok=True)
        (catalog / "patches" / name / "0001-x.patch").write_text(patch)
        text += '\n[[patches]]\nfile = "0001-x.patch"\n'
    (catalog / "manifests" / f"{name}.toml").write_text(text + tail)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "sglang"
    pkg = root / "python" / "sglang"
    (pkg / "srt" / "mem_cache").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text("__version__ = version = '0.5.21'\n")
    (root / POOL).write_text(pool_text())
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "release 0.5.21")
    git(root, "tag", "v0.5.21")
    return root


@pytest.fixture
def catalog(tmp_path: Path, tree: Path) -> Catalog:
    """``dead`` (its series is what the fork committed), ``undo-dead`` (revert by fix),
    ``feature`` (an ordinary fix elsewhere in the file)."""
    cat = tmp_path / "catalog"
    (cat / "manifests").mkdir(parents=True)
    (cat / "patches").mkdir()
    (tree / POOL).write_text(with_dead(pool_text()))
    dead_patch = git(tree, "diff")
    feature = pool_text().replace("return n + 25", "return n + 25  # feature")
    (tree / POOL).write_text(feature)
    feature_patch = git(tree, "diff")
    git(tree, "checkout", "-q", "--", POOL)
    write_fix(cat, "dead", "pool: debug the backup", dead_patch)
    write_fix(cat, "undo-dead", "Revert the dead debug fix", None,
              tail='\n[revert]\nfix = "dead"\n\n[[verification]]\nkind = "grep"\n'
                   f'path = "{POOL}"\npattern = "DEBUG_DBG"\ncount = 0\n')
    write_fix(cat, "feature", "pool: mark op25", feature_patch)
    return Catalog(cat)


def commit_dead(tree: Path) -> str:
    (tree / POOL).write_text(with_dead(pool_text()))
    git(tree, "commit", "-q", "-am", "pool: debug the backup")
    return git(tree, "rev-parse", "HEAD").strip()


def later_commit(tree: Path, old: str, new: str, subject: str) -> str:
    text = (tree / POOL).read_text()
    assert old in text
    (tree / POOL).write_text(text.replace(old, new))
    git(tree, "commit", "-q", "-am", subject)
    return git(tree, "rev-parse", "--short", "HEAD").strip()


def target(tree: Path) -> LocalTarget:
    return LocalTarget(roots={"sglang": str(tree)}, description="test fork")


# -- revert fixes ----------------------------------------------------------------------------


def test_a_revert_by_patch_id_through_the_cli_loads_neither_gitpython_nor_rich(
        tree: Path, catalog: Catalog) -> None:
    """The engine hashes the named fix's series itself: the client needs no git of its own
    for an apply, and --json renders nothing with rich."""
    commit_dead(tree)
    code = ("import json, sys\nfrom patchkit.cli.main import main\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
            "print(json.dumps(sorted(m for m in ('git', 'rich', 'concurrent.futures') "
            "if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code, "--catalog", str(catalog.root), "apply",
                           "undo-dead", "--target", str(tree), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out, loaded = proc.stdout.rsplit("\n", 2)[:2]
    assert json.loads(out)["fixes"][0]["outcome"] == "applied"
    assert json.loads(loaded) == []
    assert "DEBUG_DBG" not in (tree / POOL).read_text()


def test_revert_by_patch_id_keeps_a_later_commit_to_the_same_file(tree: Path,
                                                                   catalog: Catalog) -> None:
    dead = commit_dead(tree)
    later_commit(tree, '"""Host pool."""', '"""Host pool (pinned memory)."""', "pool: docstring")
    result = api.apply(catalog, target(tree), ["undo-dead"])
    text = (tree / POOL).read_text()
    assert text == pool_text().replace('"""Host pool."""', '"""Host pool (pinned memory)."""')
    assert result.raw["fixes"][0]["revert"]["commit"] == dead
    check = next(c for c in result.fixes[0].preconditions if c.kind == "git-revert")
    assert "patch-id of fix dead" in check.detail and "pool: docstring" in check.detail
    assert all(c.ok for c in result.fixes[0].verification)
    api.rollback(catalog, target(tree), ["undo-dead"])
    assert "DEBUG_DBG" in (tree / POOL).read_text()
    assert git(tree, "status", "--porcelain") == ""


def test_revert_by_commit_id(tree: Path, catalog: Catalog) -> None:
    dead = commit_dead(tree)
    write_fix(catalog.root, "undo-by-id", "Revert by id", None,
              tail=f'\n[revert]\ncommit = "{dead[:9]}"\npaths = ["{POOL}"]\n')
    api.apply(Catalog(catalog.root), target(tree), ["undo-by-id"])
    assert (tree / POOL).read_text() == pool_text()


def test_a_conflicting_revert_is_refused_naming_the_later_commit_and_lines(
        tree: Path, catalog: Catalog) -> None:
    commit_dead(tree)
    later = later_commit(tree, "log('backup', n)", "log('backup', n, flush=True)",
                         "pool: flush the debug log")
    before = full_snapshot(tree)
    with pytest.raises(ConflictError) as refused:
        api.apply(catalog, target(tree), ["undo-dead"])
    message = str(refused.value)
    assert f"{later} pool: flush the debug log" in message
    line = (tree / POOL).read_text().splitlines().index("            log('backup', n, flush=True)") + 1
    assert f"line(s) {line - 1}-{line}" in message or f"-{line}" in message
    assert POOL in message and "Nothing was written" in message
    assert refused.value.details["later_commits"] == [f"{later} pool: flush the debug log"]
    assert full_snapshot(tree) == before


def test_a_commit_not_in_history_is_named(tree: Path, catalog: Catalog) -> None:
    git(tree, "switch", "-q", "-c", "side")
    side = commit_dead(tree)
    git(tree, "switch", "-q", "main")
    write_fix(catalog.root, "undo-by-id", "Revert by id", None,
              tail=f'\n[revert]\ncommit = "{side}"\n')
    before = full_snapshot(tree)
    with pytest.raises(PreconditionFailed) as refused:
        api.apply(Catalog(catalog.root), target(tree), ["undo-dead"])
    assert "no commit in the history of HEAD" in str(refused.value)
    assert "fix dead" in str(refused.value)
    with pytest.raises(PreconditionFailed) as refused:
        api.apply(Catalog(catalog.root), target(tree), ["undo-by-id"])
    assert f"commit {side} (" in str(refused.value)
    assert "is not in the history of HEAD" in str(refused.value)
    assert full_snapshot(tree) == before


def test_outside_git_the_named_fix_series_is_reversed(tree: Path, catalog: Catalog,
                                                       tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(tree, plain, ignore=shutil.ignore_patterns(".git"))
    (plain / POOL).write_text(with_dead(pool_text()))
    result = api.apply(catalog, target(plain), ["undo-dead"])
    assert (plain / POOL).read_text() == pool_text()
    check = next(c for c in result.fixes[0].preconditions if c.kind == "git-revert")
    assert "not a git checkout" in check.detail and "series of fix dead" in check.detail


# -- apply --commit and its rollback -----------------------------------------------------------


def test_apply_commit_records_trailers_and_rollback_reverts_it(tree: Path,
                                                                catalog: Catalog) -> None:
    head = git(tree, "rev-parse", "HEAD").strip()
    result = api.apply(catalog, target(tree), ["feature"], commit=True)
    sha = result.raw["fixes"][0]["commits"][0]["sha"]
    assert git(tree, "rev-parse", "HEAD").strip() == sha
    assert git(tree, "rev-parse", "HEAD^").strip() == head
    message = git(tree, "log", "-1", "--format=%B")
    assert message.startswith("pool: mark op25\n\nWhy feature.\n")
    assert "Patchkit-Fix: feature v1" in message
    patch_hash = result.raw["fixes"][0]["files"] and catalog.get("feature").patches[0]
    assert "Patchkit-Patch: 0001-x.patch sha256:" in message and patch_hash
    assert git(tree, "status", "--porcelain") == ""
    state = json.loads((tree / ".patchkit" / "state.json").read_text())
    assert state["fixes"][0]["commits"] == [{"root": "sglang", "sha": sha}]

    later_commit(tree, '"""Host pool."""', '"""Host pool, later."""', "pool: later docstring")
    undone = api.rollback(catalog, target(tree), ["feature"])
    assert undone.fixes[0].outcome == "rolled-back"
    assert git(tree, "log", "-1", "--format=%s") == 'Revert "pool: mark op25"\n'
    assert f"This reverts commit {sha}." in git(tree, "log", "-1", "--format=%B")
    assert (tree / POOL).read_text() == pool_text().replace('"""Host pool."""',
                                                            '"""Host pool, later."""')
    assert git(tree, "status", "--porcelain") == ""


def test_a_failed_verification_leaves_no_commit(tree: Path, catalog: Catalog) -> None:
    write_fix(catalog.root, "feature2", "pool: mark op25 again",
              (catalog.root / "patches/feature/0001-x.patch").read_text(),
              tail='\n[[verification]]\nkind = "grep"\n'
                   f'path = "{POOL}"\npattern = "# feature"\ncount = 0\n')
    head = git(tree, "rev-parse", "HEAD")
    before = content_snapshot(tree)
    with pytest.raises(VerificationFailed):
        api.apply(Catalog(catalog.root), target(tree), ["feature2"], commit=True)
    assert content_snapshot(tree) == before
    assert git(tree, "rev-parse", "HEAD") == head
    assert git(tree, "status", "--porcelain") == ""


def test_a_crash_after_the_commit_puts_head_back(tree: Path, catalog: Catalog) -> None:
    head = git(tree, "rev-parse", "HEAD").strip()
    request = build_request(catalog, catalog.apply_order(["feature"]), op="apply",
                            roots={"sglang": str(tree)}, state_root="sglang", python=None,
                            commit=True)
    driver = ("import sys, json; from patchkit.engine import run; "
              "print(json.dumps(run(json.loads(sys.stdin.read()))))")
    proc = subprocess.run([sys.executable, "-c", driver], input=json.dumps(request),
                          env=dict(os.environ, PATCHKIT_FAULT="state:1"), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert git(tree, "rev-parse", "HEAD").strip() != head  # the commit was made, then killed
    recovered = api.status(catalog, target(tree)).recovered
    assert [r["outcome"] for r in recovered] == ["rolled-back"]
    assert git(tree, "rev-parse", "HEAD").strip() == head
    assert git(tree, "status", "--porcelain") == ""


# -- git preconditions ------------------------------------------------------------------------


def checks_fix(catalog: Catalog, checks: str) -> Catalog:
    write_fix(catalog.root, "guarded", "pool: mark op25 (guarded)",
              (catalog.root / "patches/feature/0001-x.patch").read_text(), tail=checks)
    return Catalog(catalog.root)


def refused(catalog: Catalog, tree: Path) -> str:
    before = full_snapshot(tree)
    with pytest.raises(PreconditionFailed) as err:
        api.apply(catalog, target(tree), ["guarded"])
    assert full_snapshot(tree) == before
    return str(err.value)


def test_git_contains_and_descends_from_pass(tree: Path, catalog: Catalog) -> None:
    dead = commit_dead(tree)
    cat = checks_fix(catalog, f'\n[[preconditions]]\nkind = "git-contains"\ncommit = "{dead}"\n'
                              '\n[[preconditions]]\nkind = "git-contains"\nfix = "dead"\n'
                              '\n[[preconditions]]\nkind = "git-descends-from"\ntag = "v0.5.21"\n')
    result = api.apply(cat, target(tree), ["guarded"])
    kinds = [c.kind for c in result.fixes[0].preconditions if c.kind.startswith("git-")]
    assert kinds.count("git-contains") == 2 and "git-descends-from" in kinds


def test_git_contains_failures_name_the_commit(tree: Path, catalog: Catalog) -> None:
    dead = commit_dead(tree)
    message = refused(checks_fix(catalog, '\n[[preconditions]]\nkind = "git-contains"\n'
                                          f'commit = "{dead}"\npresent = false\n'), tree)
    assert dead[:12] in message and "absent" in message
    message = refused(checks_fix(catalog, '\n[[preconditions]]\nkind = "git-contains"\n'
                                          'commit = "deadbeef"\n'), tree)
    assert "commit deadbeef does not exist" in message
    git(tree, "reset", "-q", "--hard", "v0.5.21")
    message = refused(checks_fix(catalog, '\n[[preconditions]]\nkind = "git-contains"\n'
                                          'fix = "dead"\n'), tree)
    assert "the commit of fix dead is not in the history of HEAD" in message


def test_git_descends_from_failures_name_the_tag(tree: Path, catalog: Catalog) -> None:
    git(tree, "switch", "-q", "--orphan", "other")
    (tree / POOL).parent.mkdir(parents=True, exist_ok=True)
    (tree / POOL).write_text(pool_text())
    (tree / "python/sglang/_version.py").write_text("__version__ = version = '0.5.21'\n")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "unrelated history")
    message = refused(checks_fix(catalog, '\n[[preconditions]]\nkind = "git-descends-from"\n'
                                          'tag = "v0.5.21"\n'), tree)
    assert "does not descend from tag v0.5.21" in message
    message = refused(checks_fix(catalog, '\n[[preconditions]]\nkind = "git-descends-from"\n'
                                          'tag = "v9.9.9"\n'), tree)
    assert "tag v9.9.9 does not exist" in message


def test_git_checks_on_a_root_outside_git(tree: Path, catalog: Catalog, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(tree, plain, ignore=shutil.ignore_patterns(".git"))
    message = refused(checks_fix(catalog, '\n[[preconditions]]\nkind = "git-descends-from"\n'
                                          'tag = "v0.5.21"\n'), plain)
    assert "is not a git checkout" in message


def test_a_dirty_touched_file_is_named(tree: Path, catalog: Catalog) -> None:
    (tree / POOL).write_text(pool_text() + "# local edit\n")
    message = refused(checks_fix(catalog, ""), tree)
    assert f"sglang:{POOL} has uncommitted changes" in message


def test_commit_refuses_a_file_changed_by_an_uncommitted_fix(tree: Path,
                                                             catalog: Catalog) -> None:
    commit_dead(tree)
    api.apply(catalog, target(tree), ["undo-dead"])  # not committed
    before = full_snapshot(tree)
    with pytest.raises(PreconditionFailed) as err:
        api.apply(catalog, target(tree), ["feature"], commit=True)
    assert "without --commit" in str(err.value) and POOL in str(err.value)
    assert full_snapshot(tree) == before


# -- the CLI wiring ----------------------------------------------------------------------------


def test_cli_apply_commit_then_rollback(tree: Path, catalog: Catalog) -> None:
    from click.testing import CliRunner

    from patchkit.cli.main import cli

    runner = CliRunner()
    base = ["--catalog", str(catalog.root)]
    head = git(tree, "rev-parse", "HEAD").strip()
    applied = runner.invoke(cli, [*base, "apply", "feature", "--target", str(tree), "--commit", "--json"])
    assert applied.exit_code == 0, applied.output
    sha = json.loads(applied.output)["fixes"][0]["commits"][0]["sha"]
    assert git(tree, "rev-parse", "HEAD").strip() == sha != head
    assert "Patchkit-Fix: feature v1" in git(tree, "log", "-1", "--format=%B")

    undone = runner.invoke(cli, [*base, "rollback", "feature", "--target", str(tree)])
    assert undone.exit_code == 0, undone.output
    assert git(tree, "log", "-1", "--format=%s") == 'Revert "pool: mark op25"\n'
    assert (tree / POOL).read_text() == pool_text()
    assert git(tree, "status", "--porcelain") == ""


def test_patch_id_search_looks_only_at_commits_within_the_fixes_files(tmp_path: Path) -> None:
    """A fork's history has release commits of thousands of files touching the fix's file
    too; only commits changing nothing but the fix's files can hold its series, even when
    their change of those files is the series'. Names with spaces and non-ASCII characters
    are matched exactly."""
    from patchkit.engine import gitops

    repo = tmp_path / "fork"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    odd = "python/sglang/srt/mem cache/pöol.py"
    (repo / odd).parent.mkdir(parents=True)
    (repo / odd).write_text(pool_text())
    for i in range(40):
        (repo / f"python/sglang/srt/other_{i}.py").write_text(f"X = {i}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "release: the whole tree")
    text = pool_text().replace("return n + 3\n", "return n + 3  # fixed\n")
    (repo / odd).write_text(text)
    git(repo, "commit", "-q", "-am", "the fix, as a commit")
    fix_sha = git(repo, "rev-parse", "HEAD").strip()
    series = git(repo, "show", "--format=", "HEAD")
    (repo / odd).write_text(pool_text())
    git(repo, "commit", "-q", "-am", "undo the fix")
    (repo / odd).write_text(text)
    (repo / "python/sglang/srt/other_2.py").write_text("X = 200\n")
    git(repo, "commit", "-q", "-am", "the fix again, with another file")
    (repo / odd).write_text(text + "\n# more\n")
    (repo / "python/sglang/srt/other_1.py").write_text("X = 100\n")
    git(repo, "commit", "-q", "-am", "a later commit of the file and another one")
    pid = subprocess.run(["git", "patch-id", "--stable"], input=series, capture_output=True,
                         text=True, check=True).stdout.split()[0]
    co = gitops.checkout_of(str(repo))
    assert co is not None
    found = co.find_by_patch_id(series, [odd])
    assert found[0] == pid and [c.sha for c in found[1]] == [fix_sha]
    assert co.find_by_patch_id(series.replace("# fixed", "# other"), [odd])[1] == []
    assert co.find_by_patch_id(series, [])[1] == []


def test_a_failed_health_check_after_commit_changes_is_undone_in_git_too(tree: Path,
                                                                          catalog: Catalog) -> None:
    """A change with commits keeps no undo point: the opposite op undoes it. The rollback of a
    committed fix was undone by a plain apply, leaving HEAD at the revert commit with the fix
    uncommitted in the file; and the apply's undo said the fix was "v1 put back"."""
    from tests.test_remote import cli

    base = ["--catalog", str(catalog.root)]
    code, out, err = cli([*base, "apply", "feature", "--target", str(tree), "--commit",
                          "--health-cmd", "exit 5"])
    assert code == 1 and "(feature (not applied) put back as before)" in err, err
    assert (tree / POOL).read_text() == pool_text() and git(tree, "status", "--porcelain") == ""

    assert cli([*base, "apply", "feature", "--target", str(tree), "--commit"])[0] == 0
    applied = (tree / POOL).read_text()
    code, out, err = cli([*base, "rollback", "feature", "--target", str(tree),
                          "--health-cmd", "exit 4"])
    assert code == 1 and "(feature v1 put back as before)" in err, err
    assert (tree / POOL).read_text() == applied
    assert git(tree, "status", "--porcelain") == ""  # committed again, not left in the file
    assert "Patchkit-Fix: feature v1" in git(tree, "log", "-1", "--format=%B")


def test_a_revert_by_commit_id_on_a_release_no_version_serves_is_told_what_serves_it(
        tree: Path, tmp_path: Path) -> None:
    """A fork moved to 0.5.22 whose history holds the commit a 0.5.21 revert-by-id fix undoes:
    status and sync advised `patchkit rebase FIX --onto 0.5.22`, which skips such a fix (its
    change is computed from the commit at apply time) and writes nothing (a new-user trial).
    They now say what serves the release, adding it to upstream.releases, and doing so
    makes sync revert the commit there."""
    from tests.test_authoring import flat, patchkit

    dead = commit_dead(tree)
    cat = tmp_path / "mine"
    (cat / "manifests").mkdir(parents=True)
    (cat / "patches").mkdir()
    write_fix(cat, "undo-by-id", "Revert by id", None,
              tail=f'\n[revert]\ncommit = "{dead[:9]}"\npaths = ["{POOL}"]\n')
    manifest = cat / "manifests" / "undo-by-id.toml"
    assert 'releases' not in manifest.read_text()  # the base release's: ["0.5.21"]
    (tree / "python/sglang/_version.py").write_text("__version__ = version = '0.5.22'\n")
    git(tree, "commit", "-q", "-am", "move the fork to 0.5.22")
    status = patchkit(cat, "status", "--target", str(tree), "--all")
    said = flat(status.output)
    assert "undo-by-id not-applied: no version of the fix serves 0.5.22" in said, said
    synced = patchkit(cat, "sync", "--target", str(tree))
    assert synced.exit_code == 1, synced.output
    for out in (said, flat(synced.output)):
        assert "patchkit rebase undo-by-id --onto" not in out, out
        assert "dd 0.5.22 to upstream.releases in manifests/undo-by-id.toml" in out, out
        assert f"computed from commit {dead[:9]} at apply time" in out, out
    assert "DEBUG_DBG" in (tree / POOL).read_text()

    manifest.write_text(manifest.read_text().replace(
        'base_release = "0.5.21"\n', 'base_release = "0.5.21"\nreleases = ["0.5.21", "0.5.22"]\n'))
    synced = patchkit(cat, "sync", "--target", str(tree))
    assert synced.exit_code == 0, synced.output
    assert (tree / POOL).read_text() == pool_text()


@pytest.mark.network
def test_matrix_and_rebase_say_what_serves_a_release_for_a_revert_by_commit_id(
        tmp_path: Path, upstream_repo: UpstreamRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 0.5.20 revert-by-id fix without a series of its own on the 0.5.21 release tree: the
    matrix called it blocked (a failing cell) while a release tree, which never holds a fork's
    commit, has nothing to revert; rebase skipped it without saying what serves the release.
    The matrix now says not-needed, as status and sync do there, and both say how a fork of
    0.5.21 holding the commit is served."""
    from tests.test_authoring import flat, patchkit

    monkeypatch.setenv("PATCHKIT_UPSTREAM", str(upstream_repo.path))
    cat = tmp_path / "mine"
    assert patchkit(cat, "init", str(cat)).exit_code == 0
    write_fix(cat, "undo-by-id", "Revert by id", None, tail='\n[revert]\ncommit = "1234abcd"\n')
    manifest = cat / "manifests" / "undo-by-id.toml"
    manifest.write_text(manifest.read_text().replace('"0.5.21"', '"0.5.20"'))
    git(cat, "add", "-A")
    git(cat, "commit", "-qm", "undo-by-id")
    told = "add 0.5.21 to upstream.releases in manifests/undo-by-id.toml"
    cells = patchkit(cat, "matrix", "undo-by-id", "--releases", "0.5.21", "--json")
    assert cells.exit_code == 0, cells.output
    cell = json.loads(cells.output)["cells"]["undo-by-id"]["0.5.21"]
    assert cell["kind"] == "not-needed" and told in cell["detail"], cell
    assert "a fork of 0.5.21 whose history holds it is refused" in cell["detail"], cell
    rebased = patchkit(cat, "rebase", "undo-by-id", "--onto", "0.5.21")
    assert rebased.exit_code == 0, rebased.output
    assert "skipped" in rebased.output, rebased.output
    assert ("to serve 0.5.21, add it to upstream.releases in manifests/undo-by-id.toml"
            in flat(rebased.output)), rebased.output
