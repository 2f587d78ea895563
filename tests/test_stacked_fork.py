"""Two fixes on one file, the later depending on the earlier (``depends_on``), on a fork:
the earlier one carried as a commit of the fork, the later applied by patchkit on top of it.
The later fix's change hides the earlier one's hunks, so the presence check of the earlier one
reads the file as it was before the fixes recorded on it (their backups). Before, the first
``sync`` left the earlier fix out (present-unrecorded) and applied the later one, then
``status`` called the earlier one ``not-applied`` and a second ``sync`` conflicted, its advice
telling the earlier fix to depend on its own dependent (a new-user trial)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.user_catalog import pk, tree_digest, user_catalog
from tests.test_remote import ssh  # noqa: F401  (a fixture)

LINES = [f"{c} = 1\n" for c in "abcdefghijklmn"]
# a adds two lines after e; b, which depends on a, changes the second of them
A = ("--- a/app.py\n+++ b/app.py\n@@ -3,6 +3,8 @@\n c = 1\n d = 1\n e = 1\n+if e:\n"
     "+    x = 0\n f = 1\n g = 1\n h = 1\n")
B = ("--- a/app.py\n+++ b/app.py\n@@ -4,7 +4,8 @@\n d = 1\n e = 1\n if e:\n-    x = 0\n"
     "+    # nothing yet\n+    x = None\n f = 1\n g = 1\n h = 1\n")


def _git(tree: Path, *argv: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *argv], cwd=tree,
                   check=True, capture_output=True)


def stacked_catalog(path: Path, a: str = A, b: str = B) -> Path:
    """Fixes a and b (``depends_on = ["a"]``) of the user's catalog, b written on top of a."""
    catalog = user_catalog(path, {"a": (a, ""), "b": (b, "")})
    manifest = catalog / "manifests" / "b.toml"
    manifest.write_text(manifest.read_text().replace(
        'rationale = "b"\n', 'rationale = "b"\ndepends_on = ["a"]\n'))
    return catalog


def stacked_tree(path: Path) -> Path:
    path.mkdir()
    (path / "app.py").write_text("".join(LINES))
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "base")
    return path


def _states(cat: list[str], where: list[str]) -> dict[str, str]:
    done = pk(*cat, "status", "--all", *where)
    assert done.returncode == 0, done.stdout + done.stderr
    return {row.split("\t")[0]: row.split("\t")[1] for row in done.stdout.splitlines() if "\t" in row}


def test_sync_of_a_fork_carrying_the_dependency_as_a_commit_is_idempotent(tmp_path: Path) -> None:
    catalog, tree = stacked_catalog(tmp_path / "catalog"), stacked_tree(tmp_path / "fork")
    (tmp_path / "a.patch").write_text(A)
    _git(tree, "apply", str(tmp_path / "a.patch"))
    _git(tree, "commit", "-qam", "fork: a")
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert _states(cat, where) == {"a": "present-unrecorded", "b": "not-applied"}

    first = pk(*cat, "sync", *where)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "present-unrecorded a" in first.stdout and "applied b" in first.stdout, first.stdout
    after = (tree / "app.py").read_text()
    assert "    x = None\n" in after and "    x = 0\n" not in after
    assert _states(cat, where) == {"a": "present-unrecorded", "b": "applied"}

    again = pk(*cat, "sync", *where)  # nothing changed: nothing to do
    assert again.returncode == 0, again.stdout + again.stderr
    assert "present-unrecorded a" in again.stdout and "already-applied b" in again.stdout, again.stdout
    assert (tree / "app.py").read_text() == after
    named = pk(*cat, "apply", "a", *where)  # apply of the fork's commit: in the files already
    assert named.returncode == 0 and "present-unrecorded a" in named.stdout, named.stdout + named.stderr
    assert pk(*cat, "status", "--exit-code", *where).returncode == 0
    assert (tree / "app.py").read_text() == after


def test_a_conflict_under_a_dependent_never_tells_the_fix_to_depend_on_it(tmp_path: Path) -> None:
    """The fork's commit of a edited away under b (recorded on top of it): a no longer applies
    there, and the conflict says b depends on a and to roll b back, not "make a build on b"."""
    catalog, tree = stacked_catalog(tmp_path / "catalog"), stacked_tree(tmp_path / "fork")
    (tmp_path / "a.patch").write_text(A)
    _git(tree, "apply", str(tmp_path / "a.patch"))
    _git(tree, "commit", "-qam", "fork: a")
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert pk(*cat, "sync", *where).returncode == 0
    app = tree / "app.py"
    app.write_text(app.read_text().replace("if e:\n", ""))  # a's line gone, b's lines kept
    _git(tree, "commit", "-qam", "fork: a's guard dropped")

    done = pk(*cat, "apply", "a", *where)
    assert done.returncode == 3, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "fix b, which depends on a, changed this file on top of a's change" in said, said
    assert "patchkit rollback b" in said, said
    assert "build on" not in said and "depends_on" not in said, said


def test_sync_upgrades_a_stack_of_fixes_on_one_file_in_one_transaction(tmp_path: Path) -> None:
    """a v1 and b v1 (b depends on a, same file) applied; the catalog then has v2 of both,
    b's written on a's. sync takes b v1 out, then a v1, and puts a v2 and b v2 in, one
    transaction: the file is what a fresh apply of the two v2 makes. Before, it said the file
    changed since patchkit applied a v1 (it holds what b v1 wrote on it) and offered --force,
    which then conflicted (a new-user trial)."""
    catalog, tree = stacked_catalog(tmp_path / "catalog"), stacked_tree(tmp_path / "tree")
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    (pristine / "app.py").write_text("".join(LINES))
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert pk(*cat, "apply", "a", "b", *where).returncode == 0
    a2, b2 = A.replace("+if e:", "+if e is not None:"), B.replace(" if e:", " if e is not None:")
    for name, patch in (("a", a2), ("b", b2)):
        (catalog / "patches" / name / f"0001-{name}.patch").write_text(patch)
        manifest = catalog / "manifests" / f"{name}.toml"
        manifest.write_text(manifest.read_text().replace("version = 1\n", "version = 2\n"))
    assert pk(*cat, "apply", "a", "b", "--root", f"tree={pristine}").returncode == 0
    states = {row.split("\t")[0]: row.split("\t")[1]
              for row in pk(*cat, "status", *where).stdout.splitlines() if "\t" in row}
    assert states == {"a": "outdated (v1 applied, v2 in the catalog)",
                      "b": "outdated (v1 applied, v2 in the catalog)"}, states

    dry = pk(*cat, "sync", "--dry-run", *where)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    done = pk(*cat, "sync", *where)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "upgraded a v1 -> v2" in done.stdout and "upgraded b v1 -> v2" in done.stdout, done.stdout
    assert "--force" not in done.stdout + done.stderr
    assert (tree / "app.py").read_text() == (pristine / "app.py").read_text()
    assert pk(*cat, "status", "--exit-code", *where).returncode == 0
    assert pk(*cat, "verify", *where).returncode == 0
    # each v2 keeps the bytes before it: rolling both back gives the release's file
    assert pk(*cat, "rollback", "b", "a", *where).returncode == 0
    assert (tree / "app.py").read_text() == "".join(LINES)


def _new_version(catalog: Path, name: str, patch: str, version: int = 2) -> None:
    (catalog / "patches" / name / f"0001-{name}.patch").write_text(patch)
    manifest = catalog / "manifests" / f"{name}.toml"
    manifest.write_text(manifest.read_text().replace("version = 1\n", f"version = {version}\n"))


@pytest.mark.parametrize("depends,remote", [(True, False), (False, False), (True, True)],
                         ids=["depends-on", "stacked", "depends-on-over-ssh"])
def test_sync_upgrades_an_outdated_fix_under_a_current_one_and_puts_that_back(
        tmp_path: Path, depends: bool, remote: bool, request: pytest.FixtureRequest) -> None:
    """a v1 and b v1 (b applied on top of a, same file) applied; the catalog then has a v2 and
    b still at v1. sync takes b out, upgrades a and puts b v1 back, one transaction: the file
    is what a fresh apply of a v2 and b v1 makes. Before, it refused ("fix b was applied after
    a and also changed app.py; roll the later fix back first"), as if b were not its to put
    back (a new-user trial). Over ssh:// the same: the engine on the host takes b out and puts
    it back from the request the client sent."""
    catalog = (stacked_catalog(tmp_path / "catalog") if depends
               else user_catalog(tmp_path / "catalog", {"a": (A, ""), "b": (B, "")}))
    tree = stacked_tree(tmp_path / "tree")
    pristine = stacked_tree(tmp_path / "pristine")
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    if remote:
        ssh = request.getfixturevalue("ssh")
        host_sglang = tmp_path / "sglang"  # the target's SGLang checkout, holding its state
        (host_sglang / "python" / "sglang").mkdir(parents=True)
        where = ["--target", ssh.url(str(host_sglang)), "--root", f"tree={tree}", *ssh.cli_args()]

    def ours() -> dict[str, str]:  # the catalog's SGLang fixes are there too, for that root
        return {k: v for k, v in _states(cat, where).items() if k in ("a", "b")}
    assert pk(*cat, "apply", "a", *where).returncode == 0
    assert pk(*cat, "apply", "b", *where).returncode == 0
    a2 = A + "@@ -12,3 +14,3 @@\n l = 1\n m = 1\n-n = 1\n+n = 2\n"  # a second hunk, far from b
    _new_version(catalog, "a", a2)
    assert pk(*cat, "apply", "a", "b", "--root", f"tree={pristine}").returncode == 0
    assert ours() == {"a": "outdated (v1 applied, v2 in the catalog)", "b": "applied"}

    dry = pk(*cat, "sync", "--dry-run", *where)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "would-upgrade a v1 -> v2" in dry.stdout and "would-apply b v1" in dry.stdout, dry.stdout
    done = pk(*cat, "sync", "--json", *where)
    assert done.returncode == 0, done.stdout + done.stderr
    fixes = {f["name"]: f for f in json.loads(done.stdout)["fixes"]}
    assert fixes["a"]["outcome"] == "upgraded" and fixes["a"]["from_version"] == 1, fixes
    assert fixes["b"]["outcome"] == "applied" and fixes["b"]["version"] == 1, fixes
    assert "put back on a v2" in fixes["b"]["detail"], fixes["b"]
    assert (tree / "app.py").read_text() == (pristine / "app.py").read_text()
    assert ours() == {"a": "applied", "b": "applied"}
    assert pk(*cat, "status", "--exit-code", *where).returncode == 0
    assert pk(*cat, "verify", *where).returncode == 0
    again = pk(*cat, "sync", *where)  # converged: nothing left to do
    assert "already-applied a" in again.stdout and "already-applied b" in again.stdout, again.stdout
    # each keeps the bytes before it: rolling both back gives the release's file
    assert pk(*cat, "rollback", "b", "a", *where).returncode == 0
    assert (tree / "app.py").read_text() == "".join(LINES)


def test_sync_refuses_when_the_current_fix_no_longer_applies_on_the_upgraded_one(
        tmp_path: Path) -> None:
    """a v2 rewrites the line b v1's context holds: b cannot be put back on it. sync refuses
    (a conflict, exit 3), naming b and a v2 and what to do, and writes nothing."""
    catalog, tree = stacked_catalog(tmp_path / "catalog"), stacked_tree(tmp_path / "tree")
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert pk(*cat, "apply", "a", "b", *where).returncode == 0
    _new_version(catalog, "a", A.replace("+if e:", "+if e is not None:"))
    before = tree_digest(tree)
    state = (tree / ".patchkit" / "state.json").read_bytes()

    done = pk(*cat, "sync", "--json", *where)
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    said = " ".join(error["message"].split())
    assert "fix b:" in said and "b v1 is applied on top of a" in said, said
    assert "does not apply on a v2" in said and "patchkit refresh b" in said, said
    assert "patchkit rollback b" in said and "nothing was written" in said, said
    assert "depends_on" not in said, said  # b already builds on a
    # not a stale patch's advice: the host runs the right release, and a refresh against it
    # would take b as it lies on a v1 (a new-user trial)
    assert "Refresh the patch against this tree" not in said, said
    assert error["details"]["fix"] == "b" and error["details"]["put_back_on"] == ["a"], error
    assert tree_digest(tree) == before
    assert (tree / ".patchkit" / "state.json").read_bytes() == state
