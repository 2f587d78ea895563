"""A user's own catalog (issue 13, items 4 to 6): `patchkit init`, the shipped catalog beside
it and never written to, `new`/`refresh` committing each version, `new --commits`, titles
that follow into the series, what refresh ignored, and `--dry-run`.

Commands run through the console script's own error boundary (``patchkit.cli.main.main``)
from the directory a user would be in, on small real git checkouts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import tomlkit
from click.testing import CliRunner, Result

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.errors import EXIT_USAGE
from patchkit.targets import LocalTarget
from tests.fixtures.user_catalog import APP, app_tree
from tests.test_authoring import (REPO, SHIPPED, _console_script, catalog_state, flat, git,
                                  reset, small_checkout)

X = "python/sglang/a.py"


def run(*args: str) -> Result:
    """``patchkit ARGS`` in the current directory, no --catalog: the catalog is discovered."""
    return CliRunner().invoke(_console_script, list(args), env={"COLUMNS": "400"})


def ok(*args: str) -> Result:
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result


def edit(src: Path, rel: str, old: str, new: str) -> None:
    path = src / rel
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))


@pytest.fixture
def user_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A catalog made by `patchkit init`, the working directory."""
    monkeypatch.delenv("PATCHKIT_CATALOG", raising=False)
    monkeypatch.chdir(tmp_path)
    ok("init", "fixes")
    root = tmp_path / "fixes"
    monkeypatch.chdir(root)
    return root


def shipped_state() -> dict:
    return {**catalog_state(REPO / "manifests"), **catalog_state(REPO / "patches")}


# -- item 4: never the shipped catalog; init; the user's catalog beside the shipped one -------


def test_new_outside_any_catalog_refuses_and_writes_nothing_into_the_shipped_catalog(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = small_checkout(tmp_path)
    edit(src, X, "two = 2", "two = 22")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.delenv("PATCHKIT_CATALOG", raising=False)
    monkeypatch.chdir(elsewhere)
    assert Catalog.discover().root.resolve() == REPO.resolve()  # the shipped one, as a fallback
    before = shipped_state()
    for command in (("new", "myfix", "--from", str(src)),
                    ("refresh", "dsv4-bf16-sizing", "--from", str(src))):
        result = run(*command)
        assert result.exit_code == EXIT_USAGE, result.output
        message = flat(result.output)
        assert "never written to" in message and "patchkit init DIR" in message
        assert shipped_state() == before
    assert not (REPO / "manifests" / "myfix.toml").exists()


def test_init_makes_a_committed_catalog_and_refuses_an_existing_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    made = ok("init", "fixes")
    root = tmp_path / "fixes"
    assert (root / "manifests").is_dir() and (root / "patches").is_dir()
    config = (root / "patchkit.toml").read_text()
    assert "shipped_fixes = true" in config and "# [targets.prod]" in config
    assert git(root, "log", "--format=%s").splitlines() == [
        "patchkit catalog: manifests/, patches/, patchkit.toml"]
    assert git(root, "status", "--porcelain") == ""
    assert "made a catalog in fixes" in flat(made.output)

    before = catalog_state(root)
    again = run("init", "fixes")
    assert again.exit_code == EXIT_USAGE and "already holds" in flat(again.output)
    assert catalog_state(root) == before

    plain = run("init", "--no-git", "plain")
    assert plain.exit_code == 0, plain.output
    assert not (tmp_path / "plain" / ".git").exists()
    assert Catalog(tmp_path / "plain").names() == []


def test_init_of_a_new_directory_inside_a_work_tree_commits_to_that_work_tree(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outer = tmp_path / "ops"
    outer.mkdir()
    git(outer, "init", "-q")
    monkeypatch.chdir(outer)
    made = run("init", "deploy/fixes")
    assert made.exit_code == 0, made.output
    root = outer / "deploy" / "fixes"
    assert (root / "manifests").is_dir() and not (root / ".git").exists()
    assert git(outer, "log", "--format=%s").splitlines() == [
        "patchkit catalog: manifests/, patches/, patchkit.toml"]
    assert git(outer, "status", "--porcelain") == ""
    # which repository it committed to, said (a trial could not tell it was not a new one)
    assert f"to the git repository it lies in, {outer}" in flat(made.output), made.output


def patchkit_clone(clone: Path) -> Path:
    """A stand-in for a clone of patchkit: a git repository whose pyproject.toml is patchkit's
    (what marks a patchkit source tree), committed."""
    clone.mkdir()
    (clone / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    git(clone, "init", "-q")
    git(clone, "add", "-A")
    git(clone, "-c", "user.name=A", "-c", "user.email=a@example.org", "commit", "-qm", "patchkit")
    return clone


def test_init_inside_patchkits_own_clone_is_refused_writing_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From the clone the Quick start runs in, `patchkit init myfixes` committed the user's
    catalog to patchkit's own repository (a trial). Refused, naming it and what to do;
    --no-git makes it there all the same."""
    clone = patchkit_clone(tmp_path / "patchkit")
    monkeypatch.chdir(clone)
    refused = run("init", "myfixes")
    assert refused.exit_code == EXIT_USAGE, refused.output
    said = flat(refused.output)
    assert f"lies in patchkit's own source tree ({clone})" in said and "--no-git" in said, said
    assert not (clone / "myfixes").exists()
    assert git(clone, "log", "--format=%s").splitlines() == ["patchkit"]
    assert run("init", "--no-git", "myfixes").exit_code == 0
    assert (clone / "myfixes" / "manifests").is_dir()


def test_a_catalog_made_with_no_git_inside_patchkits_clone_is_never_committed_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """init refused a catalog inside patchkit's own clone unless --no-git, but every command
    that writes a catalog (new, refresh, upstream check --mark, import) then committed it to
    the clone's repository all the same (a trial's --mark did). The catalog's repository has
    one owner, which leaves such a catalog uncommitted; the clone's own catalog, named with
    --catalog by a patchkit developer, is still committed to it."""
    clone = patchkit_clone(tmp_path / "patchkit")
    monkeypatch.chdir(clone)
    ok("init", "--no-git", "myfixes")
    src = small_checkout(tmp_path)
    edit(src, X, "two = 2", "two = 22")
    made = ok("--catalog", "myfixes", "new", "myfix", "--from", str(src))
    assert (clone / "myfixes" / "manifests" / "myfix.toml").is_file()
    assert git(clone, "log", "--format=%s").splitlines() == ["patchkit"], made.output
    assert "not committed" in flat(made.output) and "patchkit's own" in flat(made.output)
    # the clone's own catalog, named: a patchkit developer's shipped fix, committed as before
    (clone / "manifests").mkdir()
    (clone / "patches").mkdir()
    ok("--catalog", str(clone), "new", "shipped-one", "--from", str(src))
    assert git(clone, "log", "--format=%s").splitlines()[0].startswith("shipped-one v1")


def test_a_user_catalog_lists_its_fixes_beside_the_shipped_ones_and_wins_a_clash(
        tmp_path: Path, user_catalog: Path) -> None:
    src = small_checkout(tmp_path)
    edit(src, X, "two = 2", "two = 22")
    ok("new", "myfix", "--from", str(src))
    listed = json.loads(ok("list", "--all", "--json").stdout)
    names = [f["name"] for f in listed]
    assert "myfix" in names and set(SHIPPED.names()) <= set(names)
    assert git(user_catalog, "status", "--porcelain") == ""

    # A fix of the user's named like a shipped one replaces it, with a warning.
    shipped = SHIPPED.get("dsv4-bf16-sizing")
    clash = ok("new", shipped.name, "--from", str(src), "--title", "our own sizing")
    assert "replaces the shipped fix" not in clash.stderr  # made before the catalog held it
    shown = ok("show", shipped.name, "--json")
    assert json.loads(shown.stdout)["title"] == "our own sizing"
    assert f"warning: {shipped.name} in" in shown.stderr
    assert "replaces the shipped fix of the same name" in shown.stderr

    # The shipped fixes are read beside the catalog, never copied into it.
    assert sorted(p.stem for p in (user_catalog / "manifests").glob("*.toml")) == [
        shipped.name, "myfix"]
    # refresh writes only the user's fixes.
    before = shipped_state()
    refused = run("refresh", "prefill-hicache-off", "--from", str(src))
    assert refused.exit_code == EXIT_USAGE
    assert "shipped with patchkit" in flat(refused.output)
    assert shipped_state() == before


def test_shipped_fixes_false_shows_only_the_users_fixes(tmp_path: Path,
                                                      user_catalog: Path) -> None:
    config = user_catalog / "patchkit.toml"
    config.write_text(config.read_text().replace("shipped_fixes = true", "shipped_fixes = false"))
    assert json.loads(ok("list", "--all", "--json").stdout) == []


# -- item 5: new and refresh commit each version ----------------------------------------------


def test_new_and_refresh_commit_each_version_so_diff_versions_works_right_away(
        tmp_path: Path, user_catalog: Path) -> None:
    src = small_checkout(tmp_path)
    edit(src, X, "two = 2", "two = 22")
    made = ok("new", "myfix", "--from", str(src))
    assert "committed" in made.output
    edit(src, X, "three = 3", "three = 33")
    ok("refresh", "myfix", "--from", str(src), "--summary", "Three too.")
    assert git(user_catalog, "log", "--format=%s").splitlines()[:2] == [
        "myfix v2: Three too.", "myfix v1: myfix"]
    assert git(user_catalog, "status", "--porcelain") == ""

    diff = ok("diff", "myfix", "--versions", "1", "2")
    assert "three = 33" in diff.output

    # --no-commit: the change is left in the work tree for the author to commit.
    edit(src, X, "one = 1", "one = 11")
    head = git(user_catalog, "rev-parse", "HEAD")
    ok("refresh", "myfix", "--from", str(src), "--no-commit")
    assert git(user_catalog, "rev-parse", "HEAD") == head
    assert "manifests/myfix.toml" in git(user_catalog, "status", "--porcelain")


def test_commits_take_only_the_fix_and_leave_the_authors_staged_work_alone(
        tmp_path: Path, user_catalog: Path) -> None:
    (user_catalog / "NOTES.md").write_text("draft\n")
    git(user_catalog, "add", "NOTES.md")
    src = small_checkout(tmp_path)
    edit(src, X, "two = 2", "two = 22")
    ok("new", "myfix", "--from", str(src))
    committed = git(user_catalog, "show", "--name-only", "--format=", "HEAD").split()
    assert committed == ["manifests/myfix.toml", "patches/myfix/0001-myfix.patch"]
    assert git(user_catalog, "status", "--porcelain").splitlines() == ["A  NOTES.md"]


# -- item 6: titles, ignored files, --dry-run, --commits ---------------------------------------


def test_new_without_title_names_the_patch_after_the_fix_and_refresh_follows_a_new_title(
        tmp_path: Path, user_catalog: Path) -> None:
    src = small_checkout(tmp_path)
    edit(src, X, "two = 2", "two = 22")
    ok("new", "myfix", "--from", str(src))
    patch = user_catalog / "patches" / "myfix" / "0001-myfix.patch"
    assert "Subject: [PATCH] myfix\n" in patch.read_text()
    assert "describe the change" not in patch.read_text()

    manifest = user_catalog / "manifests" / "myfix.toml"
    manifest.write_text(manifest.read_text().replace('title = "myfix"',
                                                     'title = "a: two is twenty-two"'))
    result = ok("refresh", "myfix", "--from", str(src))
    assert "0001-myfix.patch -> 0001-a-two-is-twenty-two.patch" in flat(result.output)
    fix = Catalog(user_catalog).get("myfix")
    assert fix.version == 2
    assert [p.file for p in fix.patches] == ["0001-a-two-is-twenty-two.patch"]
    assert "Subject: [PATCH] a: two is twenty-two\n" in fix.patches[0].path.read_text()
    assert not patch.exists()
    assert git(user_catalog, "status", "--porcelain") == ""

    # The renamed series still applies.
    reset(src)
    target = LocalTarget(roots={"sglang": str(src)})
    assert api.apply(Catalog(user_catalog), target, ["myfix"]).fixes[0].outcome == "applied"
    assert "two = 22" in (src / X).read_text()


def test_refresh_says_what_it_ignored_and_takes_an_untracked_file_when_named(
        tmp_path: Path, user_catalog: Path) -> None:
    src = small_checkout(tmp_path)
    edit(src, X, "two = 2", "two = 22")
    ok("new", "myfix", "--from", str(src))
    new_file = "python/sglang/c.py"
    (src / new_file).write_text("c = 3\n")
    result = ok("refresh", "myfix", "--from", str(src))
    out = flat(result.output)
    assert "unchanged" in out
    assert "ignored 1 changed or untracked file(s)" in out and new_file in out
    assert Catalog(user_catalog).get("myfix").version == 1

    taken = ok("refresh", "myfix", new_file, "--from", str(src), "--json")
    data = json.loads(taken.stdout)
    assert data["version"] == 2 and new_file in data["files"] and data["ignored"] == []
    reset(src)
    target = LocalTarget(roots={"sglang": str(src)})
    api.apply(Catalog(user_catalog), target, ["myfix"])
    assert (src / new_file).read_text() == "c = 3\n"


def test_dry_run_of_new_and_refresh_writes_nothing(tmp_path: Path, user_catalog: Path) -> None:
    src = small_checkout(tmp_path)
    edit(src, X, "two = 2", "two = 22")
    before = catalog_state(user_catalog)
    dry = ok("new", "myfix", "--from", str(src), "--dry-run")
    assert "would be created myfix v1" in flat(dry.output)
    assert "nothing was written" in flat(dry.output)
    assert catalog_state(user_catalog) == before
    ok("new", "myfix", "--from", str(src))
    edit(src, X, "three = 3", "three = 33")
    before = catalog_state(user_catalog)
    dry = json.loads(ok("refresh", "myfix", "--from", str(src), "--dry-run", "--json").stdout)
    assert dry["dry_run"] is True and dry["version"] == 2 and dry["commit"] is None
    assert catalog_state(user_catalog) == before
    assert Catalog(user_catalog).get("myfix").version == 1


def comment_columns(text: str) -> list[list[int]]:
    """The column of each trailing comment (``key = value  # what it is``, commented out or
    not), by block: the lines between two blank ones."""
    blocks: list[list[int]] = [[]]
    for line in text.splitlines():
        if not line.strip():
            blocks.append([])
        elif found := re.search(r"\S\s+(#) ", line):
            blocks[-1].append(found.start(1))
    return [b for b in blocks if b]


def test_new_writes_a_manifest_whose_trailing_comments_line_up_in_each_block(
        tmp_path: Path, user_catalog: Path) -> None:
    """The manifest of `new` had its comments padded by hand for an SGLang fix of a release
    as long as 0.5.21: a shorter release, an author, or a fix of another root (releases = [],
    its own root named) moved them out of their column."""
    short = small_checkout(tmp_path / "short", release="0.5.3")
    edit(short, X, "two = 2", "two = 22")
    ok("new", "short-release", "--from", str(short), "--author", "Ada Lovelace <ada@example.org>")
    tree = app_tree(tmp_path / "tree", git=True)
    (tree / "app.py").write_text(APP.replace("value = 1", "value = 2"))
    ok("new", "other-root", "--from", str(tree), "--root", "tree")
    # patchkit.toml, as `init` wrote it, keeps one column per block too
    texts = {name: (user_catalog / "manifests" / f"{name}.toml").read_text()
             for name in ("short-release", "other-root")}
    for name, text in [*texts.items(), ("patchkit.toml", (user_catalog / "patchkit.toml").read_text())]:
        columns = comment_columns(text)
        assert all(len(set(block)) == 1 for block in columns), (name, columns, text)
    assert [len(b) for b in comment_columns(texts["other-root"])] == [3, 5, 1]
    # ... and each still loads as the manifest it was
    fixes = Catalog(user_catalog)
    short_fix, other = fixes.get("short-release"), fixes.get("other-root")
    assert (short_fix.version, short_fix.author, short_fix.upstream.base_release,
            short_fix.upstream.releases) == (1, "Ada Lovelace <ada@example.org>", "0.5.3", ("0.5.3",))
    assert tomlkit.parse(texts["other-root"]).unwrap()["upstream"] == {
        "project": "tree", "base_release": "any", "releases": [], "root": "tree",
        "forwarding": "not-forwarded", "reference": ""}
    assert [(p.file, p.root) for p in other.patches] == [("0001-other-root.patch", "tree")]


def test_new_from_commits_keeps_each_commits_author_date_and_message(
        tmp_path: Path, user_catalog: Path) -> None:
    src = small_checkout(tmp_path, release="0.5.23")
    base = git(src, "rev-parse", "HEAD").strip()
    edit(src, X, "two = 2", "two = 22")
    env = dict(os.environ, GIT_AUTHOR_NAME="Ann Author", GIT_AUTHOR_EMAIL="ann@example.com",
               GIT_AUTHOR_DATE="2026-11-10T12:00:00+01:00")
    subprocess.run(["git", "commit", "-qam", "a: two is twenty-two\n\nThe pool needs 22."],
                   cwd=src, env=env, check=True)
    (src / "python/sglang/c.py").write_text("c = 3\n")
    edit(src, "python/sglang/_version.py", "0.5.23", "0.5.24")  # HEAD's release is not A's
    git(src, "add", ".")
    git(src, "commit", "-qm", "c: a new module")
    expected = {rel: (src / rel).read_bytes() for rel in (X, "python/sglang/c.py")}

    ok("new", "pair", "--from", str(src), "--commits", f"{base}..HEAD")
    fix = Catalog(user_catalog).get("pair")
    assert fix.title == "a: two is twenty-two"
    assert fix.rationale.strip() == "The pool needs 22."
    assert fix.upstream.base_release == "0.5.23"  # the release at A
    assert [p.file for p in fix.patches] == ["0001-a-two-is-twenty-two.patch",
                                             "0002-c-a-new-module.patch"]
    first = fix.patches[0].path.read_text()
    assert first.startswith("From: Ann Author <ann@example.com>\n"
                            "Date: Tue, 10 Nov 2026 12:00:00 +0100\n"
                            "Subject: [PATCH] a: two is twenty-two\n\nThe pool needs 22.\n---\n")
    assert "Subject: [PATCH] c: a new module\n" in fix.patches[1].path.read_text()

    git(src, "checkout", "-q", base)
    reset(src)
    target = LocalTarget(roots={"sglang": str(src)})
    assert api.apply(Catalog(user_catalog), target, ["pair"]).fixes[0].outcome == "applied"
    assert {rel: (src / rel).read_bytes() for rel in expected} == expected

    # A refresh keeps each patch's author and date.
    edit(src, X, "one = 1", "one = 11")
    ok("refresh", "pair", "--from", str(src))
    fix = Catalog(user_catalog).get("pair")
    assert fix.version == 2
    first = fix.patches[0].path.read_text()
    assert first.startswith("From: Ann Author <ann@example.com>\n"
                            "Date: Tue, 10 Nov 2026 12:00:00 +0100\n")
    assert "+one = 11" in first


# -- rebase writes only the user's fixes too ---------------------------------------------------


def test_rebase_takes_only_the_users_fixes_and_never_writes_the_shipped_catalog(
        tmp_path: Path, user_catalog: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = small_checkout(tmp_path)  # release 0.5.21
    git(src, "tag", "v0.5.21")
    edit(src, X, "two = 2", "two = 22")
    ok("new", "myfix", "--from", str(src))
    reset(src)
    edit(src, "python/sglang/b.py", "one = 1", "one = 1\nzero = 0")
    edit(src, "python/sglang/_version.py", "0.5.21", "0.5.22")
    git(src, "commit", "-qam", "release 0.5.22")
    git(src, "tag", "v0.5.22")

    before = shipped_state()
    moved = ok("rebase", "--all", "--onto", "0.5.22", "--repo", str(src), "--json")
    names = [f["name"] for f in json.loads(moved.stdout)["fixes"]]
    assert names == ["myfix"]
    assert "0.5.22" in Catalog(user_catalog).get("myfix").upstream.releases
    refused = run("rebase", "dsv4-bf16-sizing", "--onto", "0.5.22", "--repo", str(src))
    assert refused.exit_code == EXIT_USAGE and "shipped with patchkit" in flat(refused.output)
    assert shipped_state() == before

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    outside = run("rebase", "--all", "--onto", "0.5.22", "--repo", str(src))
    assert outside.exit_code == EXIT_USAGE and "patchkit init DIR" in flat(outside.output)
    assert shipped_state() == before
    assert not (REPO / ".patchkit-rebase").exists()


def test_a_commit_that_fails_says_the_fix_is_written_and_what_to_commit(
        tmp_path: Path, user_catalog: Path) -> None:
    src = small_checkout(tmp_path)
    edit(src, X, "two = 2", "two = 22")
    (user_catalog / ".git" / "index.lock").write_text("")  # another git is running there
    result = run("new", "myfix", "--from", str(src))
    assert result.exit_code == 5, result.output
    message = flat(result.output)
    assert "myfix v1: myfix is written in" in message
    assert "manifests/myfix.toml and patches/myfix yourself" in message
    assert Catalog(user_catalog).get("myfix").version == 1


def test_init_without_a_git_identity_writes_nothing_and_says_how_to_go_on(tmp_path: Path) -> None:
    """A new user whose git knows no name or email: init refuses before writing anything,
    saying how to set one (or --no-git), and runs once it is set. Before, it left a catalog
    uncommitted and staged, exit 5, and the rerun was refused as 'already holds a catalog'."""
    import sys

    home = tmp_path / "home"
    home.mkdir()
    bare = {k: v for k, v in os.environ.items()
            if not k.startswith(("GIT_", "EMAIL")) and k not in ("HOME", "XDG_CONFIG_HOME")}
    bare.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1")
    init = [sys.executable, "-m", "patchkit", "init", "my-fixes"]
    refused = subprocess.run(init, cwd=tmp_path, env=bare, capture_output=True, text=True)
    assert refused.returncode == EXIT_USAGE, refused.stderr
    said = flat(refused.stderr)
    assert "git cannot commit as you" in said and "git config --global user.email" in said
    assert "--no-git" in said and "Nothing was written" in said
    assert not (tmp_path / "my-fixes").exists()
    named = dict(bare, GIT_AUTHOR_NAME="New User", GIT_AUTHOR_EMAIL="new@example.org",
                 GIT_COMMITTER_NAME="New User", GIT_COMMITTER_EMAIL="new@example.org")
    done = subprocess.run(init, cwd=tmp_path, env=named, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert git(tmp_path / "my-fixes", "status", "--porcelain") == ""


def test_new_without_a_git_identity_writes_nothing_and_says_how_to_go_on(tmp_path: Path) -> None:
    """`new` into a git catalog whose user git knows no name or email: refused before writing,
    saying how (or --no-commit); it wrote and staged the fix, failed, and a rerun was refused
    as 'already exists' (a fresh-clone trial)."""
    import sys

    home = tmp_path / "home"
    home.mkdir()
    named = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CONFIG_HOME")}
    named.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="A", GIT_AUTHOR_EMAIL="a@x.org",
                 GIT_COMMITTER_NAME="A", GIT_COMMITTER_EMAIL="a@x.org")
    bare = {k: v for k, v in named.items() if not k.startswith(("GIT_AUTHOR", "GIT_COMMITTER", "EMAIL"))}
    pk = [sys.executable, "-m", "patchkit"]
    assert subprocess.run([*pk, "init", "cat"], cwd=tmp_path, env=named).returncode == 0
    tree = app_tree(tmp_path / "tree", git=True)
    (tree / "app.py").write_text(APP.replace("value = 1", "value = 2"))
    new = [*pk, "--catalog", str(tmp_path / "cat"), "new", "edit", "--root", "tree", "--from",
           str(tree), "--base-release", "any"]
    refused = subprocess.run(new, cwd=tmp_path, env=bare, capture_output=True, text=True)
    assert refused.returncode == EXIT_USAGE, refused.stderr
    assert "git cannot commit as you" in flat(refused.stderr) and "--no-commit" in flat(refused.stderr)
    assert not (tmp_path / "cat" / "manifests" / "edit.toml").exists()
    done = subprocess.run(new, cwd=tmp_path, env=named, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
