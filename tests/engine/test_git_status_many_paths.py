"""The git-clean precondition asks one ``git status`` per root: limited to the request's paths,
or, for a request of many paths, of the whole root (git matches every index entry against every
pathspec, so 2,152 of them cost more than the whole checkout). Both give the same answer."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from patchkit.engine import gitcli


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_the_status_of_the_whole_root_says_what_the_limited_one_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = tmp_path / "checkout"
    root = top / "python"  # the root is a directory inside the work tree
    (root / "pkg").mkdir(parents=True)
    names = ["clean.py", "edited.py", "deleted.py", "staged.py", "old.py", "pkg/deep.py"]
    for name in names:
        (root / name).write_text("%s\n" % name)
    (top / "outside.py").write_text("outside\n")
    _git(top, "init", "-q")
    _git(top, "add", "-A")
    _git(top, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    (root / "edited.py").write_text("changed\n")
    (root / "deleted.py").unlink()
    (root / "staged.py").write_text("staged\n")
    _git(top, "add", "python/staged.py")
    _git(top, "mv", "python/old.py", "python/new.py")  # a staged rename: each side its own code
    (root / "untracked.py").write_text("new\n")
    (root / "pkg" / "loose.py").write_text("new\n")
    (root / "not-asked.py").write_text("new\n")  # changed, but no path of the request
    (top / "outside.py").write_text("changed\n")  # outside the root
    asked = ["clean.py", "edited.py", "deleted.py", "staged.py", "old.py", "new.py",
             "pkg/deep.py", "untracked.py", "pkg/loose.py", "absent.py"]

    limited = gitcli.changed_paths(str(root), asked)
    monkeypatch.setattr(gitcli, "MANY_PATHS", 3)  # so these ten are many
    whole = gitcli.changed_paths(str(root), asked)

    assert limited.checkout and whole.checkout and not limited.error and not whole.error
    assert whole.changed == limited.changed
    assert set(whole.changed) == {"edited.py", "deleted.py", "staged.py", "old.py", "new.py",
                                  "untracked.py", "pkg/loose.py"}
    assert whole.changed["untracked.py"] == "??" and whole.changed["edited.py"] == " M"
    assert (whole.changed["old.py"], whole.changed["new.py"]) == ("D ", "A ")
    # asked alone, a side of a rename has the same code
    assert gitcli.changed_paths(str(root), ["new.py"]).changed == {"new.py": "A "}
