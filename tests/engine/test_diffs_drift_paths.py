"""Results that must not depend on how they are computed.

- the result's per-file ``diff`` of a placed patch is the patch's own hunks at their placed
  lines (docs/design.md): it applies with ``git apply`` and equals difflib's diff when the two
  group the change alike;
- a status hashes every recorded file, so an in-place change is drift whatever its stat says;
- ``Roots.resolve`` gives ``os.path.realpath``'s answers and refuses every escape from a root.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest

from patchkit.engine import run
from patchkit.engine.paths import Roots
from patchkit.errors import UnsafePathError
from patchkit.engine.workspace import unified_diff

from .helpers import MOD, compact, file_record, fix, git, make_checkout, module_text, request

HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def git_hunks(tmp: Path, before: str, after: str, context: int = 3) -> List[Dict[str, Any]]:
    """The hunks of ``git diff`` between two texts, as the engine request carries them."""
    a, b = tmp / "a.txt", tmp / "b.txt"
    a.write_text(before)
    b.write_text(after)
    out = subprocess.run(["git", "diff", "--no-index", "-U%d" % context, str(a), str(b)],
                         capture_output=True, text=True).stdout
    hunks: List[Dict[str, Any]] = []
    for line in out.splitlines(keepends=True):
        m = HEADER.match(line)
        if m:
            hunks.append({"old_start": int(m.group(1)), "old_count": int(m.group(2) or 1),
                          "new_start": int(m.group(3)), "new_count": int(m.group(4) or 1),
                          "lines": []})
        elif hunks and line[:1] in " -+":
            hunks[-1]["lines"].append([line[0], line[1:]])
        elif hunks and line.startswith("\\"):
            kind, text = hunks[-1]["lines"][-1]
            hunks[-1]["lines"][-1] = [kind, text[:-1]]  # that line has no newline
    return hunks


def applied_diff(root: Path, tmp: Path, before: str, after: str, on: str) -> str:
    """Apply the patch before -> after to the file holding ``on``; the result's diff."""
    (root / MOD).write_text(on)
    git(root, "commit", "-q", "--allow-empty", "-am", "base")
    rec = {"root": "sglang", "path": MOD, "patch": "0001-a.patch", "op": "modify", "mode": None,
           "hunks": git_hunks(tmp, before, after)}
    res = run(request("apply", {"sglang": root}, [fix("a", [rec])], dry_run=True))
    assert res["ok"], res["error"]
    return res["fixes"][0]["files"][0]["diff"]


def check_with_git_apply(tmp: Path, on: str, diff: str, expected: str) -> None:
    work = tmp / "apply"
    (work / os.path.dirname(MOD)).mkdir(parents=True, exist_ok=True)
    (work / MOD).write_text(on)
    (tmp / "result.diff").write_text(diff)
    subprocess.run(["git", "apply", str(tmp / "result.diff")], cwd=work, check=True)
    assert (work / MOD).read_text() == expected


CASES = {
    "two-edits": (lambda t: t.replace("return x + 7\n", "return x * 7\n")
                  .replace("def f30(x):\n", "def f30(x, y=0):\n")),
    "insert-and-delete": (lambda t: t.replace("def f5(x):\n    return x + 5\n", "")
                          .replace("def f20(x):\n", "# twenty\ndef f20(x):\n")),
    "end-without-newline": lambda t: t + "TAIL = 1",
    "edit-at-the-top": lambda t: "import os\n" + t.replace("return x + 0\n", "return x\n"),
}


@pytest.mark.parametrize("shift", [0, 5], ids=["at-its-lines", "placed-5-lines-down"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_placed_diff_equals_difflib(checkout: Path, tmp_path: Path, case: str, shift: int) -> None:
    before = module_text()
    after = CASES[case](before)
    on = "# header\n" * shift + before  # the file the patch is placed on (offset by shift)
    diff = applied_diff(checkout, tmp_path, before, after, on)
    want = "# header\n" * shift + after
    if case == "edit-at-the-top" and shift:
        # written at the file's start, the hunk has no leading context; placed lower, difflib
        # would show 3 lines before it: the field stays the patch's hunk (docs/design.md)
        assert diff.splitlines()[2] == "@@ -6,5 +6,6 @@"
        assert diff != unified_diff(MOD, on.encode(), want.encode())
    else:
        assert diff == unified_diff(MOD, on.encode(), want.encode())
    check_with_git_apply(tmp_path, on, diff, want)


def test_placed_diff_is_the_patch_even_where_difflib_aligns_otherwise(checkout: Path,
                                                                      tmp_path: Path) -> None:
    """Repeated lines: git and difflib may pair them differently; the field is the patch's
    hunks (git's pairing) at the placed lines, and still turns before into after."""
    before = "a\n\nb\n\nc\n" * 3 + module_text(3)
    after = before.replace("a\n\nb\n", "a\n\nB\n\nb\n", 1).replace("c\n" + "a", "c\n\n" + "a", 1)
    diff = applied_diff(checkout, tmp_path, before, after, before)
    hunks = git_hunks(tmp_path, before, after)
    assert [h for h in diff.splitlines() if h.startswith("@@")] == [
        "@@ -%d,%d +%d,%d @@" % (h["old_start"], h["old_count"], h["new_start"], h["new_count"])
        for h in hunks]
    check_with_git_apply(tmp_path, before, diff, after)


@pytest.mark.parametrize("text", ["a\nb\n", "one line without newline", "crlf\r\nend\r\n",
                                  "x\n\\ starts with a backslash\n"],
                         ids=["lines", "no-final-newline", "crlf", "backslash-line"])
@pytest.mark.parametrize("form", ["lines", "body"])
def test_created_and_deleted_files_diff_as_difflib(tmp_path: Path, text: str, form: str) -> None:
    """A file a patch creates or deletes whole gets all its lines as one hunk, the text
    difflib's path gives, in both record forms; and git apply turns the one side into the
    other."""
    root = make_checkout(tmp_path, git_repo=False)
    new = "python/sglang/srt/new.py"
    shape = (lambda r: r) if form == "lines" else compact
    made = run(request("apply", {"sglang": root}, [fix("c", [shape(file_record(new, None, text))])]))
    assert made["ok"], made["error"]
    assert made["fixes"][0]["files"][0]["diff"] == unified_diff(new, None, text.encode())
    assert (root / new).read_bytes() == text.encode()
    gone = run(request("apply", {"sglang": root}, [fix("d", [shape(file_record(new, text, None))])]))
    assert gone["ok"], gone["error"]
    assert gone["fixes"][0]["files"][0]["diff"] == unified_diff(new, text.encode(), None)
    (tmp_path / "made.diff").write_bytes(made["fixes"][0]["files"][0]["diff"].encode())
    subprocess.run(["git", "apply", str(tmp_path / "made.diff")], cwd=root, check=True)
    assert (root / new).read_bytes() == text.encode()


# -- status: drift seen by hashing -------------------------------------------------------------------

def applied(root: Path) -> Dict[str, Any]:
    before = (root / MOD).read_text()
    f = fix("a", [{"root": "sglang", "path": MOD, "patch": "0001-a.patch", "op": "modify",
                   "mode": None, "hunks": git_hunks(root.parent, before,
                                                   before.replace("return x + 7\n", "return x * 7\n"))}])
    assert run(request("apply", {"sglang": root}, [f]))["ok"]
    return f


def file_states(root: Path, f: Dict[str, Any]) -> List[str]:
    res = run(request("status", {"sglang": root}, [f]))
    assert res["ok"], res["error"]
    return [x["state"] for x in res["status"]["fixes"][0]["files"]]


def test_an_in_place_change_with_the_same_size_and_mtime_is_drift(checkout: Path) -> None:
    """Same size, mtime put back: only the ctime tells; the status must still see the change."""
    f = applied(checkout)
    st = os.stat(checkout / MOD)
    data = (checkout / MOD).read_bytes().replace(b"return x * 7", b"return x / 7")
    with open(checkout / MOD, "r+b") as fh:
        fh.write(data)
    os.utime(checkout / MOD, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(checkout / MOD).st_size == st.st_size
    assert file_states(checkout, f) == ["drifted"]


def test_a_rewrite_with_the_same_bytes_is_not_drift(checkout: Path) -> None:
    f = applied(checkout)
    data = (checkout / MOD).read_bytes()
    (checkout / MOD).unlink()
    (checkout / MOD).write_bytes(data)  # new inode and times: hashed again, same bytes
    assert file_states(checkout, f) == ["ok"]


def test_a_forged_stamp_is_not_trusted_beyond_the_stat(checkout: Path) -> None:
    """A ``stat`` stamp an earlier engine recorded is never trusted: the file is hashed."""
    f = applied(checkout)
    path = checkout / ".patchkit/state.json"
    state = json.loads(path.read_text())
    state["fixes"][0]["files"][0]["stat"] = [0, 0, 0, 0, 0]
    path.write_text(json.dumps(state))
    (checkout / MOD).write_text("changed\n")
    assert file_states(checkout, f) == ["drifted"]


def test_paths_resolved_per_directory_equal_realpath_and_refuse_every_escape(tmp_path: Path) -> None:
    """Roots.resolve builds a directory's real path from its parent's; the answers are
    os.path.realpath's, and a path that leaves the root through any symlink is refused."""
    from patchkit.engine.paths import Roots
    from patchkit.errors import UnsafePathError

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    (outside / "d").mkdir(parents=True)
    (root / "a" / "b" / "f.py").write_text("x\n")
    os.symlink("a/b", root / "inner")                      # a directory link inside the root
    os.symlink("../inner", root / "a" / "up")              # a link to a link
    os.symlink(str(outside), root / "a" / "out")           # a directory link out of the root
    os.symlink(str(outside / "d" / "g.py"), root / "a" / "b" / "evil.py")  # a file link out
    os.symlink("missing", root / "a" / "dangling.py")      # a dangling link, inside
    os.symlink("f.py", root / "a" / "b" / "alias.py")      # a file link, inside
    inside = ["a/b/f.py", "inner/f.py", "a/up/f.py", "a/up/new.py", "a//b/f.py", "./a/b/f.py",
              "a/./b/f.py", "a/b/", "a/dangling.py", "a/b/alias.py", "new/dir/x.py", "a/b/."]
    escapes = ["a/out/x.py", "a/out/d/g.py", "a/b/evil.py", "a/up/../../x"]
    roots = Roots({"sglang": str(root)})
    for rel in inside:
        assert roots.resolve("sglang", rel) == os.path.realpath(os.path.join(str(root), rel)), rel
        assert roots.resolve("sglang", rel) == os.path.realpath(os.path.join(str(root), rel))
    for rel in escapes:
        with pytest.raises(UnsafePathError):
            Roots({"sglang": str(root)}).resolve("sglang", rel)
    with pytest.raises(UnsafePathError):  # a directory resolved earlier does not excuse it
        roots.resolve("sglang", "a/out/x.py")


def test_a_path_resolves_as_realpath_does_below_a_symlinked_root(tmp_path: Path) -> None:
    """Roots.resolve looks only at the components below the root's real path (issue 29): the
    result is os.path.realpath's, through a symlinked root, a symlink inside it, missing
    directories and a file where a directory would be; a symlink out of the root is refused."""
    real = tmp_path / "real"
    (real / "python" / "sglang" / "a").mkdir(parents=True)
    (real / "python" / "sglang" / "a" / "f.py").write_text("x = 1\n")
    (real / "python" / "sglang" / "file.py").write_text("")
    (real / "python" / "sglang" / "via").symlink_to("a")
    (real / "python" / "sglang" / "out").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "link").symlink_to(real)
    roots = Roots({"sglang": str(tmp_path / "link")})
    for rel in ("python/sglang/a/f.py", "python/sglang/./a//f.py", "python/sglang/via/f.py",
                "python/sglang/new/dir/g.py", "python/sglang/file.py/x"):
        assert roots.resolve("sglang", rel) == os.path.realpath(tmp_path / "link" / rel), rel
    with pytest.raises(UnsafePathError):
        roots.resolve("sglang", "python/sglang/out/f.py")


def test_each_directory_is_looked_at_once_per_run(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Roots.resolve looks at a directory once per run (it is a directory, not a symlink), and
    at a file every time: 40 files three directories deep cost 43 lstat calls, not 160; the
    answers stay realpath's, and a file turned into a symlink out of the root is still refused."""
    from patchkit.engine import paths
    from patchkit.engine.paths import Roots
    from patchkit.errors import UnsafePathError

    root = tmp_path / "root"
    (root / "a" / "b" / "c").mkdir(parents=True)
    rels = [f"a/b/c/f{i}.py" for i in range(40)]
    for rel in rels:
        (root / rel).write_text("x\n")
    expected = [os.path.realpath(root / rel) for rel in rels]
    roots = Roots({"sglang": str(root)})  # the root's own real path: found once, here
    looked: list[str] = []
    real_lstat = os.lstat

    def counting(path: str) -> os.stat_result:
        looked.append(path)
        return real_lstat(path)

    monkeypatch.setattr(paths.os, "lstat", counting)
    assert [roots.resolve("sglang", rel) for rel in rels] == expected
    assert len(looked) == 43
    (root / rels[0]).unlink()
    (root / rels[0]).symlink_to(tmp_path)
    with pytest.raises(UnsafePathError):
        roots.resolve("sglang", rels[0])
