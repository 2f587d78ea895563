"""A verification check that changes a file the apply wrote undoes the apply, naming the file:
checks only read the target (docs/manifest.md). Before, the apply succeeded with the hashes of
the files as written recorded, so the very next ``status`` said drifted and ``rollback``
refused (found by a new-user trial)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fixtures.user_catalog import app_patch, app_tree, pk, tree_digest, user_catalog

COMMAND = """
[[verification]]
kind = "command"
root = "tree"
argv = ["{python}", "-c", "import sys; CODE", "{root:tree}/app.py"]
name = "WHAT"
"""


def _tree_and_catalog(tmp_path: Path) -> tuple[Path, Path]:
    tree = app_tree(tmp_path / "tree")
    checks = {"writes": ("appends to the file it checks",
                         "open(sys.argv[1], 'a').write('# checked\\\\n')"),
              "reads": ("only reads the file it checks", "open(sys.argv[1]).read()")}
    catalog = user_catalog(tmp_path / "catalog", {
        name: (app_patch(), COMMAND.replace("CODE", code).replace("WHAT", what))
        for name, (what, code) in checks.items()})
    return tree, catalog


def test_a_check_that_changes_a_written_file_undoes_the_apply(tmp_path: Path) -> None:
    tree, catalog = _tree_and_catalog(tmp_path)
    before = tree_digest(tree)
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}", "--python", sys.executable]
    done = pk(*cat, "apply", "writes", *where, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["error"]["type"] == "VerificationFailed"
    assert "changed tree:app.py, which this apply wrote" in data["error"]["message"]
    assert "a check must only read the target" in data["error"]["message"]
    assert {k: v for k, v in tree_digest(tree).items() if not k.startswith(".patchkit/")} == before
    status = json.loads(pk(*cat, "status", *where, "--json").stdout)
    assert [f["name"] for f in status["status"]["fixes"] if f["state"] != "not-applied"] == []


def test_a_check_that_only_reads_is_applied_and_stays_applied(tmp_path: Path) -> None:
    tree, catalog = _tree_and_catalog(tmp_path)
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}", "--python", sys.executable]
    done = pk(*cat, "apply", "reads", *where)
    assert done.returncode == 0, done.stderr
    assert pk(*cat, "status", *where, "--exit-code").returncode == 0


def test_a_check_reading_through_a_symlink_out_of_its_root_says_it_will_not_read_there(
        tmp_path: Path) -> None:
    """A grep check whose path is a symlink to a file outside the root is refused as unsafe
    (exit 2, the tree as it was), saying the file is not read, not "refusing to write" (a
    second trial), and what to do."""
    from tests.fixtures.user_catalog import app_patch, app_tree, pk, tree_digest, user_catalog

    tree = app_tree(tmp_path / "tree")
    (tmp_path / "outside.txt").write_text("value = 1\n")
    (tree / "link.txt").symlink_to(tmp_path / "outside.txt")
    grep = '\n[[preconditions]]\nkind = "grep"\nroot = "tree"\npath = "link.txt"\npattern = "value"\npresent = true\n'
    catalog = user_catalog(tmp_path / "catalog", {"g": (app_patch(), grep)})
    before = tree_digest(tree)
    run = pk("--catalog", str(catalog), "apply", "g", "--root", f"tree={tree}")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "tree:link.txt resolves to" in run.stderr and "outside root tree" in run.stderr, run.stderr
    assert "refusing to write" not in run.stderr, run.stderr
    assert "reads and writes files only inside its roots" in run.stderr, run.stderr
    assert "manifests/g.toml" in run.stderr
    assert tree_digest(tree) == before and not (tree / ".patchkit" / "state.json").exists()


def test_a_check_that_changes_another_fixs_file_or_a_written_files_mode_undoes_the_apply(
        tmp_path: Path) -> None:
    """What the check changed is named and the apply undone when it is a file of a fix applied
    before (which would be drifted under that fix), or only the mode of a file this apply wrote
    (status would not see it, rollback would restore the bytes under the wrong mode). Before,
    only the contents of the files this apply wrote were looked at again (a second trial)."""
    tree = app_tree(tmp_path / "tree")
    (tree / "other.py").write_text("other = 1\n")
    other = ("--- a/other.py\n+++ b/other.py\n@@ -1 +1 @@\n-other = 1\n+other = 2\n")
    catalog = user_catalog(tmp_path / "catalog", {
        "first": (other, ""),
        "touches-first": (app_patch(), COMMAND.replace("CODE", (
            "open(sys.argv[1].replace('app.py', 'other.py'), 'a').write('# checked\\\\n')"))
            .replace("WHAT", "appends to another fix's file")),
        "chmods": (app_patch(), COMMAND.replace("CODE", "import os; os.chmod(sys.argv[1], 0o755)")
                   .replace("WHAT", "makes the file it checks executable"))})
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}", "--python", sys.executable]
    assert pk(*cat, "apply", "first", *where).returncode == 0
    for fix, said in (("touches-first", "changed tree:other.py"),
                      ("chmods", "changed the mode of tree:app.py (755, was 644)")):
        before = tree_digest(tree)
        modes = {p.name: p.stat().st_mode for p in tree.iterdir() if p.is_file()}
        done = pk(*cat, "apply", fix, *where, "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        data = json.loads(done.stdout)
        assert data["error"]["type"] == "VerificationFailed", data
        assert said in data["error"]["message"], data["error"]["message"]
        after = {k: v for k, v in tree_digest(tree).items() if not k.startswith(".patchkit/")}
        before = {k: v for k, v in before.items() if not k.startswith(".patchkit/")}
        if fix == "chmods":
            assert after == before
            assert {p.name: p.stat().st_mode for p in tree.iterdir() if p.is_file()} == modes
        else:  # the other fix's file is not this apply's to put back: named, left as the check left it
            assert {**after, "other.py": None} == {**before, "other.py": None}
            (tree / "other.py").write_text("other = 2\n")
        status = json.loads(pk(*cat, "status", *where, "--json").stdout)
        states = {f["name"]: f["state"] for f in status["status"]["fixes"]}
        assert states[fix] == "not-applied" and states["first"] == "applied", states


def test_a_python_for_the_checks_that_does_not_exist_is_refused_before_anything(tmp_path: Path) -> None:
    """``--python`` naming no interpreter is refused at once (exit 5, the tree as it was), as a
    ``python:`` target is; before, a fix with a command check wrote its files and failed its
    verification, and one with greps alone applied (a new-user trial)."""
    tree, catalog = _tree_and_catalog(tmp_path)
    before = tree_digest(tree)
    missing = str(tmp_path / "no" / "python")
    done = pk("--catalog", str(catalog), "apply", "reads", "--root", f"tree={tree}",
              "--python", missing, "--json")
    assert done.returncode == 5, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "TargetError" and f"interpreter {missing} does not exist" in error["message"]
    assert tree_digest(tree) == before
    assert pk("--catalog", str(catalog), "verify", "--root", f"tree={tree}",
              "--python", missing).returncode == 5
    for op in (["status", "--running", "--exit-code"], ["rollback", "reads"]):  # all alike
        done = pk("--catalog", str(catalog), *op, "--root", f"tree={tree}", "--python", missing)
        assert done.returncode == 5 and f"interpreter {missing} does not exist" in done.stderr, \
            done.stdout + done.stderr


def test_a_relative_python_is_the_one_the_command_named_wherever_a_check_runs(tmp_path: Path) -> None:
    """``--python venv/bin/python``, relative to where the command runs, is the interpreter a
    fix's script runs with, although a python-script check runs in its fix's folder; before,
    the path passed the up-front check and then named nothing there, so apply was undone and
    verify failed on a healthy target with "could not run" (a new-user trial)."""
    tree = app_tree(tmp_path / "tree")
    catalog = user_catalog(tmp_path / "catalog", {"scripted": (app_patch(), """
[[verification]]
kind = "python-script"
root = "tree"
script = "checks/says.py"
args = ["{root:tree}/app.py"]
name = "the script runs with the python given"
""")})
    checks = catalog / "patches" / "scripted" / "checks"
    checks.mkdir()
    (checks / "says.py").write_text("import sys\nassert 'value = 2' in open(sys.argv[1]).read()\n")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    where = ["--root", f"tree={tree}", "--python", "venv/bin/python"]
    for op in (["apply", "scripted"], ["verify", "scripted"], ["status", "--exit-code"]):
        done = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(catalog), *op,
                               *where], capture_output=True, text=True, cwd=tmp_path,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (op, done.stdout + done.stderr)
    assert "value = 2" in (tree / "app.py").read_text()


TOP_PATCH = '--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n-print("app")\n+print("top")\n value = 1\n'


def test_a_fix_whose_dependency_named_beside_it_was_refused_says_so(tmp_path: Path) -> None:
    """``apply base top`` where ``base`` is refused by its own precondition: ``top``'s
    ``requires`` check says base was named in this run and refused, not "apply it first, or use
    --with-deps", which would change nothing (a fleet trial)."""
    tree = app_tree(tmp_path / "tree")
    refused = '''
[[preconditions]]
kind = "grep"
root = "tree"
path = "app.py"
pattern = "not in the file"
present = true
'''
    catalog = user_catalog(tmp_path / "catalog", {"base": (app_patch(), refused),
                                                  "top": (TOP_PATCH, "")})
    top = catalog / "manifests" / "top.toml"
    top.write_text(top.read_text().replace('rationale = "top"\n', 'rationale = "top"\ndepends_on = ["base"]\n'))
    before = tree_digest(tree)
    done = pk("--catalog", str(catalog), "apply", "base", "top", "--root", f"tree={tree}", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    said = json.dumps(json.loads(done.stdout))
    assert "base, named in this run too, was refused" in said and "--with-deps" not in said, said
    assert tree_digest(tree) == before


def test_the_way_back_from_a_drift_names_the_fixes_that_require_the_drifted_one(tmp_path: Path) -> None:
    """A drifted fix that another applied fix requires: verify and apply say to roll both back
    and apply both again, the command that works (a rollback of it alone is refused while the
    other stays); it said the one fix (a fleet trial). Run as said, it puts both back."""
    tree = app_tree(tmp_path / "tree")
    adds = "--- /dev/null\n+++ b/top.py\n@@ -0,0 +1 @@\n+from app import value\n"
    catalog = user_catalog(tmp_path / "catalog", {"base": (app_patch(), ""), "top": (adds, "")})
    top = catalog / "manifests" / "top.toml"
    top.write_text(top.read_text().replace('rationale = "top"\n', 'rationale = "top"\ndepends_on = ["base"]\n'))
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert pk(*cat, "apply", "base", "top", *where).returncode == 0
    (tree / "app.py").write_text((tree / "app.py").read_text() + "# edited\n")
    said = ("patchkit rollback --force base top, then patchkit apply base top (the edits are "
            "lost; top requires it)")
    verified = pk(*cat, "verify", "base", *where)
    assert verified.returncode == 1 and said in " ".join(verified.stderr.split()), verified.stderr
    again = pk(*cat, "apply", "base", *where)
    assert said in " ".join(again.stdout.split()), again.stdout
    assert pk(*cat, "rollback", "--force", "base", "top", *where).returncode == 0
    assert pk(*cat, "apply", "base", "top", *where).returncode == 0
    assert pk(*cat, "verify", "base", "top", *where).returncode == 0
