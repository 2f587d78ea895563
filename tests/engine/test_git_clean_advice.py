"""The git-clean precondition's way out works for the kind of change it found.

Each case follows the advice the refusal gives, as a user would paste it into a shell, and
the same apply then succeeds: advice that cannot work (``git checkout -- FILE`` on an
untracked file, or on a change already staged) fails these tests.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any, Dict

from patchkit.engine import run

from .helpers import MOD, SCRIPT, file_record, fix, git, make_checkout, request


def _advice(result: Dict[str, Any]) -> str:
    assert result["error"]["type"] == "PreconditionFailed", result
    [failure] = [f for f in result["error"]["details"]["failures"] if f["kind"] == "git-clean"]
    return failure["detail"]


def _follow(advice: str, pattern: str, cwd: Path) -> None:
    """Run the command the advice names (the text inside the parentheses after ``pattern``)."""
    found = re.search(pattern + r" \(([^)]*)\)", advice) or re.search(pattern + r" (git -C \S+ .*)$", advice)
    assert found, advice
    command = found.group(1).replace(" commit", " commit -m 'from the advice'")  # no editor here
    subprocess.run(command, shell=True, cwd=cwd, check=True, capture_output=True)


def _script_fix(root: Path) -> Dict[str, Any]:
    before = (root / SCRIPT).read_text()
    return fix("serve", [file_record(SCRIPT, before, before.replace("launching", "starting"),
                                     root="serve")], release=None)


def test_an_untracked_file_in_an_enclosing_work_tree_gets_advice_that_works(tmp_path: Path) -> None:
    # A root that is a plain folder inside another repository's work tree (the README's demo
    # run from a patchkit clone): the touched file is untracked there.
    outer = tmp_path / "project"
    outer.mkdir()
    git(outer, "init", "-q")
    (outer / "README").write_text("a project\n")
    git(outer, "add", "README")
    git(outer, "commit", "-q", "-m", "project")
    sglang = make_checkout(tmp_path)
    serve = make_checkout(outer, name="serve", git_repo=False)
    req = request("apply", {"sglang": sglang, "serve": serve}, [_script_fix(serve)])

    advice = _advice(run(req))
    assert "untracked" in advice and "checkout --" not in advice, advice
    assert f"serve:{SCRIPT}" in advice and str(serve) in advice
    _follow(advice, "commit the file", tmp_path)
    assert git(outer, "status", "--porcelain", "--untracked-files=all", "--", "serve/" + SCRIPT) == ""
    result = run(req)
    assert result["ok"], result["error"]
    assert "starting" in (serve / SCRIPT).read_text()


def test_a_staged_change_gets_advice_that_discards_it(tmp_path: Path) -> None:
    sglang = make_checkout(tmp_path)
    before = (sglang / MOD).read_text()
    (sglang / MOD).write_text(before + "# a staged edit\n")
    git(sglang, "add", MOD)
    edit = fix("a", [file_record(MOD, before, before.replace("return x + 7\n", "return x * 7\n"))])
    req = request("apply", {"sglang": sglang}, [edit])

    advice = _advice(run(req))
    assert "uncommitted changes" in advice
    _follow(advice, "discard them with", tmp_path)
    assert (sglang / MOD).read_text() == before
    result = run(req)
    assert result["ok"], result["error"]


def test_an_added_file_gets_advice_to_commit_it(tmp_path: Path) -> None:
    sglang = make_checkout(tmp_path)
    new = "python/sglang/srt/new.py"
    (sglang / new).write_text("x = 1\n")
    git(sglang, "add", new)
    req = request("apply", {"sglang": sglang}, [fix("a", [file_record(new, "x = 1\n", "x = 2\n")])])

    advice = _advice(run(req))
    assert "not committed" in advice and "checkout --" not in advice, advice
    _follow(advice, "commit it", tmp_path)
    result = run(req)
    assert result["ok"], result["error"]
