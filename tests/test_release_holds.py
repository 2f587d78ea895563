"""A fix applied on one release, and the checkout moved (by git) to a release whose own files
hold exactly what the fix wrote: upstream took the change, and the catalog does not say so
yet. The fix's backups are the old release's bytes. ``status`` called it ``applied`` ("the
applied v1 stays as it is") and ``rollback`` wrote the old release's bytes into the new
release's tree, taking upstream's line out of it (a new-user trial, on SGLang 0.5.22 ->
0.5.23). Now status says the release holds the change and what tells it, and rollback refuses
unless forced; it still rolls back a fix whose files the move left as the fix wrote them
(edited since, or not the release's)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.fixtures.user_catalog import pk, tree_digest, user_catalog

APP = "".join(f"{c} = 1\n" for c in "abcdefgh")
FIX = "--- a/python/sglang/app.py\n+++ b/python/sglang/app.py\n@@ -3,3 +3,3 @@\n c = 1\n-d = 1\n+d = 2\n e = 1\n"


def _git(tree: Path, *argv: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *argv], cwd=tree,
                          check=True, capture_output=True, text=True).stdout


def _release(tree: Path, version: str, app: str) -> None:
    (tree / "python" / "sglang" / "version.py").write_text(f'__version__ = "{version}"\n')
    (tree / "python" / "sglang" / "app.py").write_text(app)
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", f"release {version}")
    _git(tree, "tag", f"v{version}")


OTHER = ("--- a/python/sglang/other.py\n+++ b/python/sglang/other.py\n@@ -1,2 +1,2 @@\n"
         " x = 1\n-y = 1\n+y = 2\n")


def sglang_catalog(path: Path, fixes: dict[str, tuple[str, str]]) -> Path:
    """:func:`user_catalog` with each fix on the ``sglang`` root, written for 0.5.22."""
    catalog = user_catalog(path, fixes)
    for name in fixes:
        manifest = catalog / "manifests" / f"{name}.toml"
        manifest.write_text(manifest.read_text()
                            .replace('base_release = "any"\nreleases = []\nroot = "tree"',
                                     'base_release = "0.5.22"\nreleases = ["0.5.22"]\nroot = "sglang"')
                            .replace('root = "tree"', 'root = "sglang"'))
    return catalog


def release_tree(path: Path, other: bool = False) -> Path:
    """A git checkout of release 0.5.22 (tagged v0.5.22): app.py, and other.py if asked."""
    (path / "python" / "sglang").mkdir(parents=True)
    if other:
        (path / "python" / "sglang" / "other.py").write_text("x = 1\ny = 1\n")
    _git(path, "init", "-q")
    _release(path, "0.5.22", APP)
    return path


def _setup(tmp_path: Path, upstream_takes_it: bool = True) -> tuple[list[str], Path]:
    catalog = sglang_catalog(tmp_path / "catalog", {"mine": (FIX, "")})
    tree = release_tree(tmp_path / "sglang")
    cat = ["--catalog", str(catalog)]
    done = pk(*cat, "apply", "mine", "--target", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    applied = (tree / "python" / "sglang" / "app.py").read_text()
    _git(tree, "stash", "-q")
    # 0.5.23 holds the fix's change as the fix wrote it (or not, and another line moved)
    _release(tree, "0.5.23", applied if upstream_takes_it else APP.replace("h = 1", "h = 3"))
    _git(tree, "stash", "drop", "-q")
    return cat, tree


def test_status_says_the_release_the_checkout_moved_to_holds_the_change(tmp_path: Path) -> None:
    cat, tree = _setup(tmp_path)
    done = pk(*cat, "status", "--target", str(tree), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    fix = {f["name"]: f for f in json.loads(done.stdout)["status"]["fixes"]}["mine"]
    assert fix["state"] == "applied", fix
    said = " ".join(fix["detail"].split())
    assert "sglang 0.5.22 -> 0.5.23" in said and "hold this fix's change as v1 wrote it" in said, said
    assert "patchkit upstream check mine --release 0.5.23" in said, said
    assert fix["held"] == {"root": "sglang", "from": "0.5.22", "to": "0.5.23"}, fix


def test_rollback_refuses_to_put_the_old_releases_bytes_into_the_new_one(tmp_path: Path) -> None:
    cat, tree = _setup(tmp_path)
    before = tree_digest(tree)
    done = pk(*cat, "rollback", "mine", "--target", str(tree))
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "put the bytes of 0.5.22 (its backups) into them" in said and "--force" in said, said
    assert tree_digest(tree) == before and _git(tree, "status", "--porcelain", "python") == ""
    forced = pk(*cat, "rollback", "mine", "--target", str(tree), "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert (tree / "python" / "sglang" / "app.py").read_text() == APP  # what --force asked for


def test_a_move_that_did_not_take_the_change_is_still_lost_and_rolled_back_as_before(
        tmp_path: Path) -> None:
    cat, tree = _setup(tmp_path, upstream_takes_it=False)
    done = pk(*cat, "status", "--target", str(tree), "--json")
    fix = {f["name"]: f for f in json.loads(done.stdout)["status"]["fixes"]}["mine"]
    assert fix["state"] == "lost" and "held" not in fix, fix
    assert pk(*cat, "rollback", "mine", "--target", str(tree)).returncode == 0
    assert _git(tree, "status", "--porcelain", "python") == ""  # 0.5.23's files left as they are


def _variant(catalog: Path, patch: str) -> None:
    """v2 of ``mine``, for 0.5.23: ``patch``, written against 0.5.23's files."""
    (catalog / "patches" / "mine" / "0.5.23").mkdir()
    (catalog / "patches" / "mine" / "0.5.23" / "0001-mine.patch").write_text(patch)
    manifest = catalog / "manifests" / "mine.toml"
    manifest.write_text(manifest.read_text() + '\n[[variants]]\nversion = 2\nbase_release = "0.5.23"\n'
                        'releases = ["0.5.23"]\n\n[[variants.patches]]\nfile = "0001-mine.patch"\n'
                        'root = "sglang"\n')


F2 = "--- a/python/sglang/app.py\n+++ b/python/sglang/app.py\n@@ -6 +6 @@\n-f = 1\n+f = 2\n"


def test_an_upgrade_for_the_new_release_applies_onto_its_files_not_the_old_backups(
        tmp_path: Path) -> None:
    """v2, for 0.5.23, changes another line of the file 0.5.23 holds v1's change in. The
    upgrade took v1 out by its backup, 0.5.22's bytes, and applied v2 on them: upstream's
    line was gone, and the dry run's diff did not show it. Now v2 applies onto 0.5.23's file."""
    cat, tree = _setup(tmp_path)
    _variant(Path(cat[1]), F2)
    app = tree / "python" / "sglang" / "app.py"
    release = app.read_text()
    dry = pk(*cat, "apply", "mine", "--target", str(tree), "--dry-run")
    assert dry.returncode == 0 and "-d = 2" not in dry.stdout, dry.stdout + dry.stderr
    done = pk(*cat, "apply", "mine", "--target", str(tree))
    assert done.returncode == 0 and "upgraded mine v1 -> v2" in done.stdout, done.stdout + done.stderr
    assert app.read_text() == release.replace("f = 1", "f = 2")  # 0.5.23's d = 2 kept
    assert pk(*cat, "status", "--target", str(tree), "--exit-code").returncode == 0
    assert pk(*cat, "rollback", "mine", "--target", str(tree)).returncode == 0
    assert app.read_text() == release and _git(tree, "status", "--porcelain", "python") == ""


def test_a_lost_fix_keeps_the_files_the_new_release_holds_as_it_wrote_them(tmp_path: Path) -> None:
    """A fix of two files; 0.5.23 took its change to one of them (the file as the fix wrote
    it) and not the other: the fix is lost. Its rollback wrote 0.5.22's bytes into the file
    0.5.23 had taken the change into, and so did applying it again (the fresh apply of v2,
    which changes only the other file now). Both leave that file as 0.5.23 has it now."""
    catalog = sglang_catalog(tmp_path / "catalog", {"mine": (FIX + OTHER, "")})
    tree = release_tree(tmp_path / "sglang", other=True)
    cat = ["--catalog", str(catalog)]
    assert pk(*cat, "apply", "mine", "--target", str(tree)).returncode == 0
    app = tree / "python" / "sglang" / "app.py"
    taken = app.read_text()
    _git(tree, "stash", "-q")
    (tree / "python" / "sglang" / "other.py").write_text("x = 1\ny = 1\nz = 1\n")  # moved on
    _release(tree, "0.5.23", taken)
    _git(tree, "stash", "drop", "-q")
    fix = {f["name"]: f for f in json.loads(pk(*cat, "status", "--target", str(tree), "--json")
                                           .stdout)["status"]["fixes"]}["mine"]
    assert fix["state"] == "lost" and fix["release_files"] == [["sglang", "python/sglang/app.py"]], fix

    _variant(catalog, OTHER.replace("@@ -1,2 +1,2 @@", "@@ -1,3 +1,3 @@") + " z = 1\n")
    dry = pk(*cat, "rollback", "mine", "--target", str(tree), "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["fixes"][0]["files"] == [], dry.stdout
    done = pk(*cat, "apply", "mine", "--target", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    assert app.read_text() == taken  # 0.5.23's, with the change it took
    assert (tree / "python" / "sglang" / "other.py").read_text() == "x = 1\ny = 2\nz = 1\n"


def test_new_and_refresh_from_a_fork_say_when_the_change_does_not_apply_to_the_release(
        tmp_path: Path) -> None:
    """A fork's checkout: the release's tag, then a commit of the fork's own on the same lines.
    A change written there was captured as serving the release, "known to apply there", but
    its context held the fork's line: on a clean release tree apply refused it (a trial). new
    and refresh now warn, naming the file and the tag; a change the release's own file takes
    says nothing."""
    catalog = user_catalog(tmp_path / "catalog", {})
    tree = release_tree(tmp_path / "fork")
    app = tree / "python" / "sglang" / "app.py"
    app.write_text(APP.replace("c = 1", "c = 1  # fork"))
    _git(tree, "commit", "-qam", "the fork's own change")
    app.write_text(app.read_text().replace("h = 1", "h = 2"))  # far from the fork's line
    quiet = pk("--catalog", str(catalog), "new", "far", "--from", str(tree), "--json", "--dry-run")
    assert quiet.returncode == 0 and json.loads(quiet.stdout)["warnings"] == [], quiet.stdout

    app.write_text(app.read_text().replace("d = 1", "d = 2"))  # beside it: its context
    done = pk("--catalog", str(catalog), "new", "near", "--from", str(tree), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    [warning] = json.loads(done.stdout)["warnings"][:1]
    said = " ".join(warning.split())
    assert "near v1's change to python/sglang/app.py does not apply to 0.5.22's own" in said, said
    assert "(the checkout's tag v0.5.22)" in said and "depends_on" in said, said
    clean = release_tree(tmp_path / "clean")
    assert pk("--catalog", str(catalog), "apply", "near", "--target", str(clean)).returncode == 3

    app.write_text(app.read_text().replace("d = 2", "d = 3"))
    again = pk("--catalog", str(catalog), "refresh", "near", "--from", str(tree), "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert any("near v2's change to python/sglang/app.py does not apply" in w
               for w in json.loads(again.stdout)["warnings"]), again.stdout


def test_apply_on_a_release_the_fix_does_not_list_whose_files_hold_it_points_at_upstream_check(
        tmp_path: Path) -> None:
    """A fix written for 0.5.22, applied to a stock 0.5.23 whose own files hold its change:
    `present-unrecorded ... (a commit of the fork, or applied by hand)`, which it was not; the
    release holds it (a trial). The detail says the release is one the fix does not list and
    what tells whether its files hold the change."""
    catalog = sglang_catalog(tmp_path / "catalog", {"mine": (FIX, "")})
    tree = release_tree(tmp_path / "sglang")
    _release(tree, "0.5.23", APP.replace("d = 1", "d = 2"))  # upstream took the change
    before = tree_digest(tree)
    done = pk("--catalog", str(catalog), "apply", "mine", "--target", str(tree), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    fix = json.loads(done.stdout)["fixes"][0]
    assert fix["outcome"] == "present-unrecorded", fix
    assert "sglang 0.5.23, a release mine v1 is not for (it serves 0.5.22)" in fix["detail"], fix
    assert "patchkit upstream check mine --release 0.5.23" in fix["detail"]
    assert "a commit of the fork" not in fix["detail"].split(";")[0]
    assert tree_digest(tree) == before
    # on a release the fix serves, the change in the files is still the fork's or a hand edit
    tree22 = release_tree(tmp_path / "sglang22")
    (tree22 / "python" / "sglang" / "app.py").write_text(APP.replace("d = 1", "d = 2"))
    _git(tree22, "commit", "-qam", "the fork's commit of the fix")
    done = pk("--catalog", str(catalog), "apply", "mine", "--target", str(tree22), "--json")
    fix = json.loads(done.stdout)["fixes"][0]
    assert fix["outcome"] == "present-unrecorded" and "a commit of the fork" in fix["detail"], fix


def test_a_tree_untracked_in_another_projects_work_tree_is_told_that_work_tree_and_no_git(
        tmp_path: Path) -> None:
    """A release unpacked inside another project's git work tree (a trial's was inside
    patchkit's own clone): the refusal said the file is untracked "in the git work tree that
    holds the root" and to commit it there, which would commit SGLang into that project, and
    never named the work tree nor `--no-git`. It names the work tree's top and offers both."""
    catalog = sglang_catalog(tmp_path / "catalog", {"mine": (FIX, "")})
    outer = tmp_path / "project"
    outer.mkdir()
    _git(outer, "init", "-q")
    (outer / "README").write_text("a project\n")
    _git(outer, "add", "README")
    _git(outer, "commit", "-qm", "a project")
    tree = outer / "unpacked"
    (tree / "python" / "sglang").mkdir(parents=True)
    (tree / "python" / "sglang" / "version.py").write_text('__version__ = "0.5.22"\n')
    (tree / "python" / "sglang" / "app.py").write_text(APP)
    before = tree_digest(tree)
    done = pk("--catalog", str(catalog), "apply", "mine", "--target", str(tree))
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert f"untracked in the git work tree {outer.resolve()}, which holds the root" in said, said
    assert "--no-git" in said
    assert tree_digest(tree) == before
    done = pk("--catalog", str(catalog), "apply", "mine", "--target", str(tree), "--no-git")
    assert done.returncode == 0, done.stdout + done.stderr


def _files(tree: Path) -> dict[str, str]:
    return {k: v for k, v in tree_digest(tree).items() if not k.startswith(".patchkit/")}


def _renamed(tmp_path: Path) -> tuple[Path, Path]:
    """`mine` applied, then renamed by hand in the catalog to `ours` (manifest, series, name)."""
    catalog = sglang_catalog(tmp_path / "catalog", {"mine": (FIX, "")})
    tree = release_tree(tmp_path / "sglang")
    done = pk("--catalog", str(catalog), "apply", "mine", "--target", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    (catalog / "manifests" / "mine.toml").rename(catalog / "manifests" / "ours.toml")
    (catalog / "patches" / "mine").rename(catalog / "patches" / "ours")
    (catalog / "patches" / "ours" / "0001-mine.patch").rename(catalog / "patches" / "ours" / "0001-ours.patch")
    manifest = catalog / "manifests" / "ours.toml"
    manifest.write_text(manifest.read_text().replace('name = "mine"', 'name = "ours"')
                        .replace("0001-mine.patch", "0001-ours.patch"))
    return catalog, tree


def test_a_fix_renamed_by_hand_takes_its_applied_record_over_on_apply_writing_nothing(
        tmp_path: Path) -> None:
    """A fix applied, then renamed by hand in the catalog: status showed two rows for the one
    change (the new name `present-unrecorded`, the old `applied: not in the catalog`), apply
    of the new name called it "a commit of the fork, or applied by hand", and rollback of the
    new name found "no record ... nothing to roll back" with the change in the files (a
    trial). A record under a name the catalog no longer has, whose series is the renamed
    fix's (the same changes, in order) and whose files hold what it wrote, is that fix's:
    apply (and sync) take it over, writing no file; rollback then rolls it back."""
    catalog, tree = _renamed(tmp_path)
    cat = ["--catalog", str(catalog)]
    before = _files(tree)
    rows = {r["name"]: r for r in json.loads(pk(*cat, "status", "--target", str(tree),
                                                "--json").stdout)["status"]["fixes"]}
    assert rows["ours"]["state"] == "present-unrecorded", rows
    assert "recorded as mine" in rows["ours"]["detail"] and "apply ours" in rows["ours"]["detail"]
    assert rows["mine"]["detail"].startswith("renamed ours in the catalog"), rows["mine"]
    dry = pk(*cat, "apply", "ours", "--target", str(tree), "--dry-run", "--json")
    assert json.loads(dry.stdout)["fixes"][0]["outcome"] == "already-applied", dry.stdout
    assert "recorded as mine" in json.loads(dry.stdout)["fixes"][0]["detail"]
    state = json.loads((tree / ".patchkit" / "state.json").read_text())
    assert [f["name"] for f in state["fixes"]] == ["mine"]  # a dry run writes nothing
    said = pk(*cat, "apply", "ours", "--target", str(tree), "--dry-run")
    assert "recorded as mine" in " ".join(said.stdout.split()), said.stdout  # in text too
    done = pk(*cat, "apply", "ours", "--target", str(tree), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    fix = json.loads(done.stdout)["fixes"][0]
    assert fix["outcome"] == "already-applied" and "its record is ours's now" in fix["detail"], fix
    assert _files(tree) == before  # no file written
    state = json.loads((tree / ".patchkit" / "state.json").read_text())
    assert [(f["name"], f["version"]) for f in state["fixes"]] == [("ours", 1)]
    last = json.loads((tree / ".patchkit" / "history.jsonl").read_text().splitlines()[-1])
    assert (last["event"], last["fixes"]) == ("rename", [{"name": "ours", "was": "mine"}])
    rows = {r["name"]: r for r in json.loads(pk(*cat, "status", "--target", str(tree),
                                                "--json").stdout)["status"]["fixes"]}
    assert rows["ours"]["state"] == "applied" and "mine" not in rows, rows
    done = pk(*cat, "rollback", "ours", "--target", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / "python" / "sglang" / "app.py").read_text() == APP


def test_sync_takes_a_renamed_fixs_record_over_too(tmp_path: Path) -> None:
    catalog, tree = _renamed(tmp_path)
    before = _files(tree)
    done = pk("--catalog", str(catalog), "sync", "--target", str(tree), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _files(tree) == before
    state = json.loads((tree / ".patchkit" / "state.json").read_text())
    assert [f["name"] for f in state["fixes"]] == ["ours"]


def test_rollback_of_a_renamed_fix_rolls_back_its_record_under_the_old_name(tmp_path: Path) -> None:
    catalog, tree = _renamed(tmp_path)
    done = pk("--catalog", str(catalog), "rollback", "ours", "--target", str(tree), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    fix = json.loads(done.stdout)["fixes"][0]
    assert fix["outcome"] == "rolled-back" and "recorded as mine" in fix["detail"], fix
    assert (tree / "python" / "sglang" / "app.py").read_text() == APP
    assert json.loads((tree / ".patchkit" / "state.json").read_text())["fixes"] == []


def test_new_on_a_fix_applied_with_commit_names_it_as_the_dependency_to_declare(
        tmp_path: Path) -> None:
    """The fork's change after the release tag was a fix of the catalog, applied with --commit
    (the documented way to build a fix on another): `new --include-applied` said to "make the
    fork's own change a fix and add it to depends_on", though it is one and the checkout's
    record names it (a trial). The warning names it: add depends_on = ["base"]."""
    catalog = sglang_catalog(tmp_path / "catalog", {"base": (FIX, "")})
    tree = release_tree(tmp_path / "fork")
    done = pk("--catalog", str(catalog), "apply", "base", "--target", str(tree), "--commit")
    assert done.returncode == 0, done.stdout + done.stderr
    app = tree / "python" / "sglang" / "app.py"
    app.write_text(app.read_text().replace("c = 1", "c = 2"))  # beside base's line: its context
    made = pk("--catalog", str(catalog), "new", "top", "--from", str(tree), "--include-applied",
              "--json", "--dry-run")
    assert made.returncode == 0, made.stdout + made.stderr
    said = " ".join(" ".join(json.loads(made.stdout)["warnings"]).split())
    assert "top v1's change to python/sglang/app.py does not apply to 0.5.22's own" in said, said
    assert "That is fix base's change, applied with --commit in the checkout" in said, said
    assert 'add depends_on = ["base"]' in said
    assert "make the fork's own change a fix" not in said


def test_a_check_failing_on_a_file_another_fix_of_the_run_changed_names_that_fix(
        tmp_path: Path) -> None:
    """Two fixes synced together each add the same line; the second's `count = 1` grep failed,
    naming it alone (a trial): the other fix of the run that changed the file is named too,
    in the dry run (which asks the check first) as after writing."""
    from patchkit.catalog.series import diff_files

    one = diff_files(APP.encode(), APP.replace("b = 1\n", "b = 1\nx = 9\n").encode(),
                     "python/sglang/app.py")
    two = diff_files(APP.encode(), APP.replace("f = 1\n", "f = 1\nx = 9\n").encode(),
                     "python/sglang/app.py")
    check = ('\n[[verification]]\nkind = "grep"\nroot = "sglang"\npath = "python/sglang/app.py"\n'
             'pattern = "x = 9"\ncount = 1\n')
    catalog = sglang_catalog(tmp_path / "catalog", {"one": (one, ""), "two": (two, check)})
    tree = release_tree(tmp_path / "sglang")
    before = _files(tree)
    for dry in (["--dry-run"], []):
        done = pk("--catalog", str(catalog), "apply", "one", "two", "--target", str(tree), *dry)
        assert done.returncode == 1, done.stdout + done.stderr
        said = " ".join(done.stderr.split())
        assert "2 matching lines" in said and "(this run's one changed sglang:python/sglang/app.py too)" in said, said
        assert _files(tree) == before


def test_a_taken_over_record_moves_its_backups_keeps_the_undo_point_and_frees_the_old_name(
        tmp_path: Path) -> None:
    """A trial after the takeover: the record still kept its backups in backups/mine; a new
    fix named `mine` then wrote its own there, and `rollback ours` failed on a damaged
    backup; the takeover had also dropped the last change's undo point, and a rollback of
    the renamed fix left backups/mine behind. Its backups move with it (the old folder's
    files, which the undo point names, stay until a change replaces that point), the undo
    point holds, and the old name is free."""
    catalog, tree = _renamed(tmp_path)
    cat = ["--catalog", str(catalog)]
    backups = tree / ".patchkit" / "backups"
    assert pk(*cat, "apply", "ours", "--target", str(tree)).returncode == 0
    # the old folder stays while the undo point names its files: hard links of the same files
    assert sorted(p.name for p in backups.iterdir()) == ["mine", "ours"]
    assert (backups / "ours" / "0").stat().st_ino == (backups / "mine" / "0").stat().st_ino
    state = json.loads((tree / ".patchkit" / "state.json").read_text())
    assert all(f["backup"].startswith("backups/ours/") for f in state["fixes"][0]["files"]), state
    undone = pk(*cat, "undo", "--target", str(tree), "--dry-run")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    # a new fix takes the old name: its backups do not touch the renamed fix's
    other = OTHER.replace("other.py", "app.py").replace("x = 1\n-y = 1\n+y = 2\n", "g = 1\n-h = 1\n+h = 2\n")
    other = other.replace("@@ -1,2 +1,2 @@", "@@ -7,2 +7,2 @@")
    (catalog / "patches" / "mine").mkdir()
    (catalog / "patches" / "mine" / "0001-mine.patch").write_text(other)
    manifest = (catalog / "manifests" / "ours.toml").read_text()
    (catalog / "manifests" / "mine.toml").write_text(
        manifest.replace('name = "ours"', 'name = "mine"').replace("0001-ours.patch", "0001-mine.patch"))
    done = pk(*cat, "apply", "mine", "--target", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    done = pk(*cat, "rollback", "mine", "ours", "--target", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / "python" / "sglang" / "app.py").read_text() == APP
    assert not backups.exists() or list(backups.iterdir()) == []


def test_rollback_of_a_renamed_fix_leaves_no_backups_under_the_old_name(tmp_path: Path) -> None:
    catalog, tree = _renamed(tmp_path)
    done = pk("--catalog", str(catalog), "rollback", "ours", "--target", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    backups = tree / ".patchkit" / "backups"
    assert not backups.exists() or list(backups.iterdir()) == [], list(backups.iterdir())


def test_undo_after_a_takeover_undoes_the_apply_before_it(tmp_path: Path) -> None:
    catalog, tree = _renamed(tmp_path)
    cat = ["--catalog", str(catalog)]
    assert pk(*cat, "apply", "ours", "--target", str(tree)).returncode == 0  # the takeover
    done = pk(*cat, "undo", "--target", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / "python" / "sglang" / "app.py").read_text() == APP
    assert json.loads((tree / ".patchkit" / "state.json").read_text())["fixes"] == []
