"""Every precondition kind, declared and automatic, passing and failing; nothing is written."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest

from patchkit import errors
from patchkit.engine import run

from .helpers import MOD, SCRIPT, content_snapshot, file_record, fix, git, make_checkout, request, snapshot


def one_fix(root: Path, preconditions: List[Dict[str, Any]] = (), **extra: Any) -> Dict[str, Any]:
    before = (root / MOD).read_text()
    after = before.replace("return x + 7\n", "return x * 7\n")
    return fix("a", [file_record(MOD, before, after)], preconditions=list(preconditions), **extra)


def dry(root: Path, fixes: List[Dict[str, Any]], roots: Dict[str, Path] = None) -> Dict[str, Any]:
    return run(request("apply", roots or {"sglang": root}, fixes, dry_run=True))


def pre_results(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    if result["ok"]:
        return [p for f in result["fixes"] for p in f["preconditions"]]
    return result["error"]["details"]["failures"]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


SCRIPT_OK = "import sys, pathlib; sys.exit(0 if pathlib.Path(sys.argv[1], 'python').is_dir() else 3)"
SCRIPT_BAD = "import sys; print('bytes per token: 576, want 640'); sys.exit(3)"


def cases(root: Path):
    """(check, extra scripts, should pass, text expected in the detail) for each kind."""
    (root / "broken.py").write_text("def f(:\n")
    (root / "broken.sh").write_text("if then fi (\n")
    g = {"root": "sglang", "path": MOD}
    return [
        (dict(g, kind="grep", pattern="def f7(x):", count=1), {}, True, "1 matching"),
        (dict(g, kind="grep", pattern="def f7(x):", count=2), {}, False, "expected 2"),
        (dict(g, kind="grep", pattern=r"^def f\d+\(x\):$", regex=True, count=40), {}, True, "40 matching"),
        (dict(g, kind="grep", pattern="nothing like this", present=False), {}, True, "not found"),
        (dict(g, kind="grep", pattern="def f7", present=False), {}, False, "expected it absent"),
        (dict(g, kind="sha256", sha256=sha(root / MOD)), {}, True, "sha256"),
        (dict(g, kind="sha256", sha256="0" * 64), {}, False, "expected " + "0" * 64),
        (dict(g, kind="python-syntax"), {}, True, "parses"),
        ({"kind": "python-syntax", "root": "sglang", "path": "broken.py"}, {}, False, "line 1"),
        ({"kind": "bash-syntax", "root": "sglang", "path": SCRIPT}, {}, True, "parses"),
        ({"kind": "bash-syntax", "root": "sglang", "path": "broken.sh"}, {}, False, "syntax error"),
        ({"kind": "python-import", "root": "sglang", "module": "sglang.srt.mod"}, {}, True, "imported"),
        ({"kind": "python-import", "root": "sglang", "module": "sglang.srt.nope"}, {}, False,
         "No module named 'sglang.srt.nope'"),
        ({"kind": "python-script", "root": "sglang", "script": "checks/ok.py", "args": ["{root:sglang}"]},
         {"checks/ok.py": SCRIPT_OK}, True, "exit 0"),
        ({"kind": "python-script", "root": "sglang", "script": "checks/bad.py", "args": []},
         {"checks/bad.py": SCRIPT_BAD}, False, "bytes per token: 576"),
        ({"kind": "command", "root": "sglang", "argv": ["{python}", "-c", "print('hi')"]}, {}, True, "exit 0"),
        ({"kind": "command", "root": "sglang", "argv": ["{python}", "-c", "import sys; print('boom'); sys.exit(4)"]},
         {}, False, "exit code: 4 (expected 0)"),
        ({"kind": "command", "root": "sglang", "argv": ["bash", "-c", "exit 4"], "expect_exit": 4}, {}, True, "exit 4"),
    ]


def test_every_declared_kind_passes_and_fails(checkout: Path) -> None:
    for check, scripts, passes, text in cases(checkout):
        tree = content_snapshot(checkout)
        result = dry(checkout, [one_fix(checkout, [dict(check, name="the check")], scripts=scripts)])
        assert result["ok"] is passes, (check, result["error"])
        found = [r for r in pre_results(result) if r["name"] == "the check"]
        assert len(found) == 1 and found[0]["ok"] is passes and found[0]["kind"] == check["kind"]
        assert text in found[0]["detail"], (check, found[0]["detail"])
        if not passes:
            assert result["error"]["type"] == "PreconditionFailed"
            assert "the check" in result["error"]["message"]
        assert content_snapshot(checkout) == tree
    assert not (checkout / "python" / "sglang" / "srt" / "__pycache__").exists()  # checks leave no bytecode


def test_all_failures_are_reported_together(checkout: Path) -> None:
    checks = [{"kind": "grep", "root": "sglang", "path": MOD, "pattern": "zzz", "name": "first"},
              {"kind": "sha256", "root": "sglang", "path": MOD, "sha256": "1" * 64, "name": "second"}]
    result = dry(checkout, [one_fix(checkout, checks, release={"root": "sglang", "versions": ["0.4.0"]})])
    assert result["error"]["type"] == "PreconditionFailed"
    names = [f["name"] for f in result["error"]["details"]["failures"]]
    assert names == ["release is one of 0.4.0", "first", "second"]
    for name in names:
        assert name in result["error"]["message"]


def test_a_precondition_sees_earlier_fixes_of_the_request(checkout: Path) -> None:
    before = (checkout / MOD).read_text()
    mid = before.replace("return x + 7\n", "return x * 7\n")
    after = mid.replace("return x + 9\n", "return x * 9\n")
    a = fix("a", [file_record(MOD, before, mid)])
    b = fix("b", [file_record(MOD, mid, after, patch="0001-b.patch")], requires=["a"],
            preconditions=[{"kind": "grep", "root": "sglang", "path": MOD, "pattern": "x * 7", "count": 1}])
    result = dry(checkout, [a, b])
    assert result["ok"], result["error"]
    assert [f["outcome"] for f in result["fixes"]] == ["would-apply", "would-apply"]
    alone = dry(checkout, [b])
    assert {f["kind"] for f in pre_results(alone) if not f["ok"]} == {"requires", "grep"}
    assert "patchkit apply a" in alone["error"]["message"]


def test_release_from_version_file_tag_and_unknown(tmp_path: Path) -> None:
    wrong = make_checkout(tmp_path / "w", release="0.5.20")
    result = dry(wrong, [one_fix(wrong)])
    assert result["error"]["type"] == "PreconditionFailed"
    assert "release 0.5.20" in result["error"]["message"] and "0.5.21" in result["error"]["message"]

    tagged = make_checkout(tmp_path / "t", git_repo=False)
    (tagged / "python" / "sglang" / "_version.py").unlink()
    git(tagged, "init", "-q")
    git(tagged, "add", "-A")
    git(tagged, "commit", "-q", "-m", "x")
    result = dry(tagged, [one_fix(tagged)])
    assert "release is one of 0.5.21" in [r["name"] for r in pre_results(result)]
    assert result["error"]["type"] == "PreconditionFailed"
    assert "cannot tell the release" in result["error"]["message"]
    git(tagged, "tag", "v0.5.21")
    result = dry(tagged, [one_fix(tagged)])
    assert result["ok"], result["error"]
    assert "git tag" in pre_results(result)[0]["detail"]


def test_missing_target_file(checkout: Path) -> None:
    f = one_fix(checkout)
    (checkout / MOD).unlink()
    result = dry(checkout, [f])
    assert result["error"]["type"] == "TargetFileMissing"
    assert "sglang:%s does not exist" % MOD in result["error"]["message"]


def test_a_file_where_a_new_files_directory_goes_is_said_once(checkout: Path) -> None:
    """The line named the new file three times: as the check, its place, and its detail's
    first words, before what is in the way (a trial)."""
    (checkout / "python/sglang/srt/pkg").write_text("in the way\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "a file named pkg")
    new = "python/sglang/srt/pkg/__init__.py"
    result = dry(checkout, [fix("a", [file_record(new, None, "X = 1\n")])])
    message = result["error"]["message"]
    line = next(ln for ln in message.splitlines() if "[file-absent]" in ln)
    assert line.count("sglang:%s" % new) == 2, line  # the check's name and its place
    assert ("sglang:python/sglang/srt/pkg is a file, not a directory; the fix creates a file "
            "there") in line, line


def test_uncommitted_change_in_a_touched_file_is_refused(checkout: Path) -> None:
    f = one_fix(checkout)
    with open(checkout / MOD, "a") as fh:
        fh.write("# local edit\n")
    result = run(request("apply", {"sglang": checkout}, [f]))
    assert result["error"]["type"] == "PreconditionFailed"
    assert "uncommitted changes" in result["error"]["message"]
    assert git(checkout, "status", "--porcelain") == " M %s\n" % MOD


def test_a_file_patchkit_wrote_counts_as_clean(checkout: Path) -> None:
    before = (checkout / MOD).read_text()
    mid = before.replace("return x + 7\n", "return x * 7\n")
    after = mid.replace("return x + 9\n", "return x * 9\n")
    assert run(request("apply", {"sglang": checkout}, [fix("a", [file_record(MOD, before, mid)])]))["ok"]
    result = run(request("apply", {"sglang": checkout}, [fix("b", [file_record(MOD, mid, after)])]))
    assert result["ok"], result["error"]
    clean = [r for r in result["fixes"][0]["preconditions"] if r["kind"] == "git-clean"]
    assert clean[0]["ok"] and "patchkit applied" in clean[0]["detail"]


@pytest.mark.parametrize("path", ["../outside.py", "/etc/passwd", "python/../../outside.py", "escape/x.py"])
def test_unsafe_paths_are_refused_before_any_write(tmp_path: Path, path: str) -> None:
    root = make_checkout(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.py").write_text("a = 1\n")
    os.symlink(outside, root / "escape")
    good = one_fix(root)
    bad = fix("b", [file_record(MOD, "x", "y"), file_record(path, "a = 1\n", "a = 2\n", patch="0002-out.patch")])
    tree, out = snapshot(root), snapshot(outside)
    for op, fixes in (("apply", [good, bad]), ("status", [good, bad])):
        result = run(request(op, {"sglang": root}, fixes))
        if op == "apply":
            error = result["error"]
            assert error["type"] == "UnsafePathError"
        else:  # a status answers the other fixes: that one's row says why (the client's error row)
            assert result["ok"], result["error"]
            rows = {r["name"]: r for r in result["status"]["fixes"]}
            assert rows["a"]["state"] == "not-applied" and "unsafe" not in rows["a"]
            error = rows["b"]["unsafe"]
        message = error["message"]
        # what is wrong, where it comes from, and what to do about it
        assert "sglang:%s" % path in message and "root sglang (%s)" % root in message
        assert "fix b, patch file patches/b/0002-out.patch" in message
        # a path of the patch's own to fix; through a symlink, the target's symlink is to blame
        assert ("a symlink in the target takes it out of root" if path == "escape/x.py"
                else "Fix the file's path in that patch's header") in message, message
        assert "never writes outside a root" in message
        assert (error["details"]["fix"], error["details"]["patch"], error["details"]["path"]) == \
            ("b", "patches/b/0002-out.patch", path)
        assert snapshot(root) == tree and snapshot(outside) == out
    assert not (root / ".patchkit").exists()


def test_unsafe_path_in_a_dependency_names_its_patch(checkout: Path) -> None:
    dep = fix("base", [file_record("../up.py", "a\n", "b\n", patch="0003-up.patch")])
    res = run(request("apply", {"sglang": checkout}, [one_fix(checkout, requires=["base"])],
                      dependencies=[dep]))
    assert res["error"]["type"] == "UnsafePathError"
    assert "fix base, patch file patches/base/0003-up.patch" in res["error"]["message"]


def test_unsafe_path_in_a_declared_check_names_the_manifest(checkout: Path) -> None:
    check = {"kind": "grep", "root": "sglang", "path": "../x.py", "pattern": "a", "name": "look"}
    res = dry(checkout, [one_fix(checkout, [check])])
    assert res["error"]["type"] == "UnsafePathError"
    message = res["error"]["message"]
    assert "fix a: grep check 'look'" in message and "sglang:../x.py" in message
    assert "manifests/a.toml" in message and "patch" not in message


def _make_read_only(directory: Path):
    """A directory even root cannot write: read-only bind mount, else chattr +i. Returns undo."""
    if subprocess.run(["mount", "--bind", str(directory), str(directory)], capture_output=True).returncode == 0:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(directory)], capture_output=True).returncode == 0:
            return lambda: subprocess.run(["umount", str(directory)], check=True)
        subprocess.run(["umount", str(directory)], check=True)
    if subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode == 0:
        return lambda: subprocess.run(["chattr", "-i", str(directory)], check=True)
    if os.geteuid() != 0:
        mode = directory.stat().st_mode
        directory.chmod(0o555)
        return lambda: directory.chmod(mode)
    pytest.skip("no way to make a directory unwritable for root here (no bind mount, no chattr)")


def test_unwritable_target_directory_is_refused_before_any_write(checkout: Path) -> None:
    """An unwritable directory is PermissionDenied (exit 6), not a failed check (exit 1): the
    message names the directory, its root and the way out; the details keep every failure."""
    srt = checkout / "python" / "sglang" / "srt"
    f = one_fix(checkout, [{"kind": "grep", "root": "sglang", "path": MOD, "pattern": "zzz",
                            "name": "also failing"}])
    undo = _make_read_only(srt)
    try:
        tree = snapshot(checkout)
        result = run(request("apply", {"sglang": checkout}, [f]))
        error = result["error"]
        assert error["type"] == "PermissionDenied"
        assert errors.error_from_dict(error).exit_code == errors.EXIT_PERMISSION
        message = error["message"]
        assert "%s (root sglang at %s)" % (srt, checkout) in message
        assert "as a user who can write there" in message and "read-write" in message
        assert "also failing" in message  # the other failures are not hidden
        failed = error["details"]["failures"]
        assert {r["kind"] for r in failed} == {"writable", "grep"}
        assert str(srt) in [r for r in failed if r["kind"] == "writable"][0]["detail"]
        assert [p["name"] for p in error["details"]["fixes"][0]["preconditions"]
                if not p["ok"]] == ["%s is writable" % srt, "also failing"]
        assert error["details"]["unwritable"] == [{"path": str(srt), "root": "sglang",
                                                   "root_path": str(checkout),
                                                   "reason": failed[0]["detail"].split(";")[0]}]
        assert snapshot(checkout) == tree
    finally:
        undo()
    assert run(request("apply", {"sglang": checkout}, [one_fix(checkout)]))["ok"]


def test_unwritable_directory_refuses_rollback_with_permission_denied(checkout: Path) -> None:
    srt = checkout / "python" / "sglang" / "srt"
    f = one_fix(checkout)
    assert run(request("rollback", {"sglang": checkout}, [f]))["fixes"][0]["outcome"] == "not-applied"
    assert run(request("apply", {"sglang": checkout}, [f]))["ok"]
    undo = _make_read_only(srt)
    try:
        tree = snapshot(checkout, skip_state=False)
        result = run(request("rollback", {"sglang": checkout}, [f]))
        assert result["error"]["type"] == "PermissionDenied", result["error"]
        assert "%s (root sglang at %s)" % (srt, checkout) in result["error"]["message"]
        assert result["error"]["details"]["fixes"][0]["name"] == "a"
        assert snapshot(checkout, skip_state=False) == tree
    finally:
        undo()
    assert run(request("rollback", {"sglang": checkout}, [f]))["ok"]



def test_a_labelled_grep_failure_still_names_the_pattern_and_file(checkout: Path) -> None:
    # The label says why the anchor matters; the operator still needs to know what to look for.
    check = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "no-such-anchor",
             "count": 1, "name": "the pool sizes index-K"}
    result = dry(checkout, [one_fix(checkout, [check])])
    assert result["error"]["type"] == "PreconditionFailed"
    message = result["error"]["message"]
    assert "the pool sizes index-K" in message
    assert "'no-such-anchor'" in message and MOD in message


@pytest.mark.parametrize("text, where", [
    ("def f(x):\n    y = x + 1\nreturn y\n", "line 3: 'return' outside function"),  # a de-indented tail
    ("for x in range(3):\n    pass\nbreak\n", "line 3: 'break' outside loop"),
    ("def f(a, a):\n    return a\n", "line 1: duplicate argument 'a'"),
    ("x = 1\ndef f():\n    nonlocal y\n", "line 3: no binding for nonlocal 'y' found"),
])
def test_python_syntax_fails_what_python_could_not_compile(checkout: Path, text: str, where: str,
                                                         capfd: pytest.CaptureFixture[str]) -> None:
    """The file parses (``ast.parse`` takes each of these), but importing it raises a
    SyntaxError: python-syntax compiles it as an import would, and fails with Python's words."""
    (checkout / "bad.py").write_text(text)
    check = {"kind": "python-syntax", "root": "sglang", "path": "bad.py", "name": "the check"}
    result = dry(checkout, [one_fix(checkout, [check])])
    assert result["error"]["type"] == "PreconditionFailed"
    [found] = [r for r in pre_results(result) if r["name"] == "the check"]
    assert found["ok"] is False and where in found["detail"], found["detail"]
    assert not list(checkout.rglob("__pycache__"))


def test_python_syntax_passes_a_file_python_only_warns_about_silently(checkout: Path,
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    """Code Python compiles with a SyntaxWarning (``is`` with a literal, a call of a tuple)
    passes, and the warning is not printed over patchkit's output."""
    (checkout / "warns.py").write_text("x = 1\nif x is 1:\n    y = (1, 2)(3)\n")
    check = {"kind": "python-syntax", "root": "sglang", "path": "warns.py", "name": "the check"}
    result = dry(checkout, [one_fix(checkout, [check])])
    assert result["ok"], result["error"]
    [found] = [r for r in pre_results(result) if r["name"] == "the check"]
    assert found["ok"] is True
    out, err = capfd.readouterr()
    assert "Warning" not in out + err


def test_a_directory_that_accepts_several_new_files_is_probed_and_said_once(checkout: Path) -> None:
    """A file in a new directory and the state directory not made yet both fall to the root
    itself: one "is writable" row, not one per file (a new-user trial saw it twice)."""
    out = run(request("apply", {"sglang": checkout},
                      [fix("a", [file_record("newdir/x.py", None, "y = 2\n"),
                                 file_record("newdir/deeper/z.py", None, "z = 3\n")])],
                      dry_run=True))
    assert out["ok"], out
    rows = [p["name"] for p in out["fixes"][0]["preconditions"] if p["kind"] == "writable"]
    assert rows == ["%s is writable" % checkout], rows
