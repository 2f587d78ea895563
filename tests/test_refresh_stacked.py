"""``refresh`` of a fix that shares a file with another applied fix captures its own change
only: the file's diff against what it was before this fix was applied (its backup), not against
HEAD, which would take the other fix's hunks into this one's series; when a fix applied after
it wrote the file too, the refresh is refused, naming that fix. Before, the refreshed series
carried the other fix's hunk (a fresh ``apply`` of both then conflicted) and its advice, "apply
records v2, writing nothing", failed; in the other order it said every changed file was
another fix's, ignoring the author's edit (found by a new-user trial)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.fixtures.user_catalog import pk, user_catalog

LINES = [f"{c} = 1\n" for c in "abcdefghijklmn"]


def _patch(line: int, new: str) -> str:
    """A patch of app.py's ``line`` (0-based) to ``new``, three lines of context each side."""
    lo, hi = max(0, line - 3), min(len(LINES), line + 4)
    body = "".join((" " + x if i != line else f"-{x}+{new}\n") for i, x in enumerate(LINES[lo:hi], lo))
    return f"--- a/app.py\n+++ b/app.py\n@@ -{lo + 1},{hi - lo} +{lo + 1},{hi - lo} @@\n{body}"


def _tree(path: Path) -> Path:
    path.mkdir()
    (path / "app.py").write_text("".join(LINES))
    for argv in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base"]):
        subprocess.run(["git", *argv], cwd=path, check=True)
    return path


def _catalog(tmp_path: Path) -> Path:
    return user_catalog(tmp_path / "catalog", {"first": (_patch(1, "b = 2"), ""),
                                                "mine": (_patch(11, "l = 2"), "")})


def test_refresh_of_the_later_fix_captures_its_own_change_only(tmp_path: Path) -> None:
    catalog, tree = _catalog(tmp_path), _tree(tmp_path / "tree")
    pristine = tmp_path / "pristine"
    shutil.copytree(tree, pristine)
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert pk(*cat, "apply", "first", *where).returncode == 0
    assert pk(*cat, "apply", "mine", *where).returncode == 0
    app = tree / "app.py"
    app.write_text(app.read_text().replace("l = 2", "l = 3"))

    done = pk(*cat, "refresh", "mine", "--from", str(tree), "--summary", "l is 3")
    assert done.returncode == 0, done.stdout + done.stderr
    patch = (catalog / "patches" / "mine" / "0001-mine.patch").read_text()
    assert "+l = 3" in patch and "b = 2" not in patch, patch
    assert "-b = 1" not in patch and " b = 1" not in patch, patch

    recorded = pk(*cat, "apply", "mine", *where)  # the files are v2's: recorded, nothing written
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert pk(*cat, "status", *where, "--exit-code").returncode == 0
    fresh = pk(*cat, "apply", "first", "mine", "--root", f"tree={pristine}")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert (pristine / "app.py").read_text() == app.read_text()


def test_refresh_of_a_fix_another_applied_after_it_wrote_over_is_refused_naming_it(
        tmp_path: Path) -> None:
    catalog, tree = _catalog(tmp_path), _tree(tmp_path / "tree")
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert pk(*cat, "apply", "first", *where).returncode == 0  # first then mine, in its own run:
    assert pk(*cat, "rollback", "first", *where).returncode == 0
    assert pk(*cat, "apply", "mine", *where).returncode == 0  # mine before first
    assert pk(*cat, "apply", "first", *where).returncode == 0
    app = tree / "app.py"
    app.write_text(app.read_text().replace("l = 2", "l = 3"))
    before = {p: p.read_bytes() for p in sorted(catalog.rglob("*")) if p.is_file()}

    done = pk(*cat, "refresh", "mine", "--from", str(tree))
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "app.py" in said and "fix first" in said and "applied after mine" in said, said
    assert "patchkit rollback first" in said, said
    assert {p: p.read_bytes() for p in sorted(catalog.rglob("*")) if p.is_file()} == before
    # the advice, followed: the plain rollback refuses the edited file, as the message says
    assert pk(*cat, "rollback", "first", *where).returncode == 1
    assert "roll back with --force (which discards the edit), make the edit again" in said, said
    assert pk(*cat, "rollback", "first", *where, "--force").returncode == 0
    app.write_text(app.read_text().replace("l = 2", "l = 3"))  # the edit, made again
    assert pk(*cat, "refresh", "mine", "--from", str(tree)).returncode == 0
    assert pk(*cat, "apply", "mine", *where).returncode == 0  # records v2, writing nothing
    assert pk(*cat, "apply", "first", *where).returncode == 0
    assert "l = 3" in app.read_text() and "b = 2" in app.read_text()


def test_a_conflict_names_its_fix_and_the_fix_that_changed_the_file_before_it(tmp_path: Path) -> None:
    """In a run of several fixes a hunk that does not apply says which fix it belongs to, in
    the text as in ``--json``, and which fix of the run changed its file first (found by a
    new-user trial: only ``--json`` named the fix, and the advice was a stale patch's)."""
    catalog = user_catalog(tmp_path / "catalog", {"first": (_patch(5, "f = 2"), ""),
                                                   "copy": (_patch(5, "f = 3"), "")})
    tree = _tree(tmp_path / "tree")
    done = pk("--catalog", str(catalog), "apply", "first", "copy", "--root", f"tree={tree}")
    assert done.returncode == 3, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "fix copy: tree:app.py: hunk #1 of 0001-copy.patch does not apply" in said, said
    assert "fix first changed this file before it" in said, said
    assert "see patchkit show first, and make this fix build on it" in said, said
    assert (tree / "app.py").read_text() == "".join(LINES)


def test_a_refresh_written_on_top_of_an_earlier_fix_says_it_applies_only_after_it(
        tmp_path: Path) -> None:
    """Its new diff's context holds a line the earlier fix wrote (appended right after its
    own change): it applies only after that fix, and refresh says so, naming it and depends_on.
    Before, nothing said so and the new version failed to apply alone (a second trial)."""
    appends = "--- a/app.py\n+++ b/app.py\n@@ -12,3 +12,4 @@\n l = 1\n m = 1\n n = 1\n+o = 1\n"
    catalog = user_catalog(tmp_path / "catalog", {"first": (appends, ""),
                                                   "mine": (_patch(12, "m = 2"), "")})
    tree = _tree(tmp_path / "tree")
    cat, where = ["--catalog", str(catalog)], ["--root", f"tree={tree}"]
    assert pk(*cat, "apply", "first", "mine", *where).returncode == 0  # v1 applies either way
    app = tree / "app.py"
    app.write_text(app.read_text().replace("m = 2", "m = 3"))
    done = pk(*cat, "refresh", "mine", "--from", str(tree))
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "mine v2's change to app.py is written on top of first" in said, said
    assert 'depends_on = ["first"]' in said, said


def test_a_refresh_says_which_files_it_drops(tmp_path: Path) -> None:
    """From a checkout where the fix is not applied, only another file edited: the fix's own
    file no longer differs from HEAD and leaves the series; refresh says so and that the fix
    is not applied there (a second trial: dropped without a word)."""
    catalog = user_catalog(tmp_path / "catalog", {"mine": (_patch(6, "g = 2"), "")})
    tree = _tree(tmp_path / "tree")
    (tree / "other.py").write_text("x = 1\n")
    done = pk("--catalog", str(catalog), "refresh", "mine", "--from", str(tree), "other.py",
              "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "mine v2 drops app.py: it no longer differs from HEAD" in said, said
    assert "mine is not applied there" in said, said


def test_a_refresh_that_breaks_a_fix_stacked_on_it_warns_naming_that_fix(tmp_path: Path) -> None:
    """a's new version rewrites a line b's context holds (b depends on a, same file): b v1 no
    longer applies on a v2. refresh writes a v2 (exit 0) and warns, naming b, the file and what
    to do, as patchkit matrix would find it (a new-user trial: nothing said so until a sync
    conflicted on the hosts). A new version that leaves b's context alone says nothing."""
    from tests.test_stacked_fork import stacked_catalog, stacked_tree

    catalog, tree = stacked_catalog(tmp_path / "catalog"), stacked_tree(tmp_path / "tree")
    cat = ["--catalog", str(catalog)]
    assert pk(*cat, "apply", "a", "--root", f"tree={tree}").returncode == 0
    app = tree / "app.py"
    app.write_text(app.read_text().replace("n = 1\n", "n = 2\n"))
    quiet = pk(*cat, "refresh", "a", "--from", str(tree), "--json")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert json.loads(quiet.stdout)["warnings"] == [], quiet.stdout

    app.write_text(app.read_text().replace("if e:\n", "if e is not None:\n"))
    dry = pk(*cat, "refresh", "a", "--from", str(tree), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    said = " ".join(dry.stderr.split())
    assert "warning:" in said and "b v1 no longer applies on a v3" in said, said
    assert "app.py" in said and "patchkit refresh b" in said and "patchkit matrix" in said, said
    as_json = pk(*cat, "refresh", "a", "--from", str(tree), "--json")
    assert as_json.returncode == 0, as_json.stdout + as_json.stderr
    warnings = json.loads(as_json.stdout)["warnings"]
    assert any("b v1" in w and "app.py" in w and "patchkit refresh b" in w for w in warnings), warnings


def test_a_refresh_judges_a_fix_stacked_on_it_through_another_on_that_one_as_well(
        tmp_path: Path) -> None:
    """c depends on b, b on a, all three on one file: c's context holds a line b adds, so c
    applies only on a and b together. a's new version rewrites a line of c's context that b's
    leaves alone. refresh judged each fix on a's result alone, where c never applied, so it said
    nothing, and a sync of a v2 under them conflicted on c. Now each fix is judged on a's
    result with the fixes it depends on applied first, as a target holds them."""
    b = "--- a/app.py\n+++ b/app.py\n@@ -11,2 +11,3 @@\n k = 1\n+z = 0\n l = 1\n"
    c = "--- a/app.py\n+++ b/app.py\n@@ -12,4 +12,4 @@\n z = 0\n l = 1\n m = 1\n-n = 1\n+n = 2\n"
    catalog = user_catalog(tmp_path / "catalog", {"a": (_patch(7, "h = 2"), ""), "b": (b, ""),
                                                   "c": (c, "")})
    for name, on in (("b", "a"), ("c", "b")):
        manifest = catalog / "manifests" / f"{name}.toml"
        manifest.write_text(manifest.read_text().replace(
            f'rationale = "{name}"\n', f'rationale = "{name}"\ndepends_on = ["{on}"]\n'))
    tree = _tree(tmp_path / "tree")
    cat = ["--catalog", str(catalog)]
    assert pk(*cat, "apply", "a", "b", "c", "--root", f"tree={_tree(tmp_path / 'all')}").returncode == 0
    assert pk(*cat, "apply", "a", "--root", f"tree={tree}").returncode == 0
    app = tree / "app.py"
    app.write_text(app.read_text().replace("i = 1\n", "i = 2\n"))  # in no context of b or c
    quiet = pk(*cat, "refresh", "a", "--from", str(tree), "--json", "--dry-run")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert json.loads(quiet.stdout)["warnings"] == [], quiet.stdout

    app.write_text(app.read_text().replace("m = 1\n", "m = 9\n"))  # c's context, not b's
    done = pk(*cat, "refresh", "a", "--from", str(tree), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    warnings = json.loads(done.stdout)["warnings"]
    assert any("c v1 no longer applies on a v2" in w and "app.py" in w for w in warnings), warnings
    assert not any("b v1" in w for w in warnings), warnings  # b applies on a v2 as before
    synced = pk(*cat, "sync", "--root", f"tree={tmp_path / 'all'}")  # what the warning foretold
    assert synced.returncode == 3 and "fix c" in synced.stdout + synced.stderr, synced.stderr


def test_a_refresh_that_takes_in_its_dependencys_lines_says_it_conflicts_with_it(
        tmp_path: Path) -> None:
    """b depends on a, both applied (not committed) in the checkout; b refreshed with
    --include-applied captures against HEAD, so its new series holds a's lines too: wherever a
    and b are applied it conflicts, and matrix said so later, while refresh said nothing (a
    trial). refresh warns, naming a and the file; without --include-applied it captures b's
    own change and says nothing."""
    from tests.test_stacked_fork import stacked_catalog, stacked_tree

    catalog, tree = stacked_catalog(tmp_path / "catalog"), stacked_tree(tmp_path / "tree")
    cat = ["--catalog", str(catalog)]
    assert pk(*cat, "apply", "a", "b", "--root", f"tree={tree}").returncode == 0
    app = tree / "app.py"
    app.write_text(app.read_text().replace("x = None", "x = []"))
    quiet = pk(*cat, "refresh", "b", "--from", str(tree), "--json", "--dry-run")
    assert quiet.returncode == 0 and json.loads(quiet.stdout)["warnings"] == [], quiet.stdout
    done = pk(*cat, "refresh", "b", "--from", str(tree), "--include-applied", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    warnings = json.loads(done.stdout)["warnings"]
    assert any("b v2's change to app.py does not apply on a's, which it depends on" in w
               and "--commit" in w for w in warnings), warnings
