"""Patch files into FILE records, byte-exact; and diff_files, read back exactly and by git."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchkit.errors import PatchFormatError
from patchkit.engine.hunks import body_lines
from patchkit.engine.contract import reversed_record
from patchkit.catalog.series import diff_files, parse_patch, series_records

SAMPLES = Path(__file__).parent / "samples" / "catalog" / "patches"


def git(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, input=input, check=True,
                          capture_output=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    return path


def commit_all(repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "state")


def staged_diff(repo: Path, tmp_path: Path, *extra: str) -> Path:
    git(repo, "add", "-A")
    out = tmp_path / "change.patch"
    out.write_bytes(git(repo, "diff", "--cached", *extra))
    return out


def apply_records(files: dict[str, bytes | None], records: list[dict[str, Any]]) -> None:
    """Apply FILE records strictly at the lines they name (what diff_files produces)."""
    for rec in records:
        text = (files.get(rec["path"]) or b"").decode("utf-8", "surrogateescape")
        parts = text.split("\n")
        lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        shift = 0
        for hunk in rec["hunks"]:
            old = [t for k, t in hunk["lines"] if k in " -"]
            new = [t for k, t in hunk["lines"] if k in " +"]
            at = (hunk["old_start"] if hunk["old_count"] == 0 else hunk["old_start"] - 1) + shift
            assert lines[at:at + len(old)] == old
            lines[at:at + len(old)] = new
            shift += len(new) - len(old)
        if rec["op"] == "delete":
            assert not lines
            files[rec["path"]] = None
        else:
            files[rec["path"]] = "".join(lines).encode("utf-8", "surrogateescape")


def test_git_diff_with_every_kind_of_change(repo: Path, tmp_path: Path) -> None:
    (repo / "crlf.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    (repo / "nonl.txt").write_bytes(b"x\ny\nz")
    (repo / "latin.txt").write_bytes(b"caf\xe9\nok\n")
    (repo / "gone.txt").write_bytes(b"bye\n")
    (repo / "with space.txt").write_bytes(b"sp\n")
    commit_all(repo)
    (repo / "crlf.txt").write_bytes(b"a\r\nB\r\nc\r\n")
    (repo / "nonl.txt").write_bytes(b"x\nY\nz\n")
    (repo / "nonl.txt").chmod(0o755)
    (repo / "latin.txt").write_bytes(b"caf\xe9\nOK\xff\n")
    (repo / "gone.txt").unlink()
    (repo / "new.txt").write_bytes(b"new\n")
    (repo / "empty.txt").write_bytes(b"")
    (repo / "with space.txt").write_bytes(b"sp2\n")
    (repo / "caf\u00e9.py").write_text("x = 1\n")
    records = {r["path"]: r for r in parse_patch(staged_diff(repo, tmp_path), "sglang")}

    assert set(records) == {"crlf.txt", "nonl.txt", "latin.txt", "gone.txt", "new.txt",
                            "empty.txt", "with space.txt", "caf\u00e9.py"}
    assert all(r["root"] == "sglang" and r["patch"] == "change.patch" for r in records.values())
    assert records["crlf.txt"]["hunks"][0]["lines"] == [
        [" ", "a\r\n"], ["-", "b\r\n"], ["+", "B\r\n"], [" ", "c\r\n"]]
    nonl = records["nonl.txt"]
    assert nonl["mode"] == "100755" and nonl["op"] == "modify"
    assert ["-", "z"] in nonl["hunks"][0]["lines"] and ["+", "z\n"] in nonl["hunks"][0]["lines"]
    assert ["+", "OK\udcff\n"] in records["latin.txt"]["hunks"][0]["lines"]
    assert records["gone.txt"]["op"] == "delete" and records["gone.txt"]["mode"] is None
    assert records["new.txt"]["op"] == "create" and records["new.txt"]["mode"] == "100644"
    assert records["empty.txt"] == {"root": "sglang", "path": "empty.txt", "patch": "change.patch",
                                    "op": "create", "mode": "100644", "hunks": []}
    assert records["with space.txt"]["hunks"][0]["lines"] == [["-", "sp\n"], ["+", "sp2\n"]]
    assert records["crlf.txt"]["mode"] is None
    assert records["caf\u00e9.py"]["op"] == "create"


def test_the_request_series_carries_each_hunk_as_a_body_of_the_same_lines(
        repo: Path, tmp_path: Path) -> None:
    """series_records (what a request carries) gives ``body``; read back it is parse_patch's ``lines``,
    for CRLF, a missing final newline on either side, and bytes that are not UTF-8; the
    reversed record of a revert reads back as the lines reversed."""
    (repo / "crlf.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    (repo / "nonl.txt").write_bytes(b"x\ny\nz")
    (repo / "lost.txt").write_bytes(b"k\nl\n")
    (repo / "latin.txt").write_bytes(b"caf\xe9\nok\n")
    commit_all(repo)
    (repo / "crlf.txt").write_bytes(b"a\r\nB\r\nc\r\n")
    (repo / "nonl.txt").write_bytes(b"x\nY\nz\n")
    (repo / "lost.txt").write_bytes(b"k\nL")
    (repo / "latin.txt").write_bytes(b"caf\xe9\nOK\xff\n")
    patch = staged_diff(repo, tmp_path)
    by_lines = parse_patch(patch, "sglang")
    _digests, by_body = series_records([(patch, "sglang")])
    assert [r["path"] for r in by_body] == [r["path"] for r in by_lines]
    flip = {"+": "-", "-": "+", " ": " "}
    for compact, full in zip(by_body, by_lines):
        assert all("lines" not in h and isinstance(h["body"], str) for h in compact["hunks"])
        assert [body_lines(h["body"]) for h in compact["hunks"]] == \
            [tuple(map(tuple, h["lines"])) for h in full["hunks"]]
        undone = reversed_record(compact)["hunks"]
        assert [body_lines(h["body"]) for h in undone] == \
            [tuple((flip[k], t) for k, t in h["lines"]) for h in full["hunks"]]
        assert [(h["old_start"], h["old_count"]) for h in undone] == \
            [(h["new_start"], h["new_count"]) for h in full["hunks"]]
    nonl = {r["path"]: r for r in by_body}["nonl.txt"]["hunks"][0]["body"]
    assert nonl == " x\n-y\n-z\n\\ No newline at end of file\n+Y\n+z\n"


def test_format_patch_mail_with_signature_and_no_newline() -> None:
    path = SAMPLES / "pool-guard" / "0002-serve-pin-index-k-dtype.patch"
    [record] = parse_patch(path, "serve")
    assert (record["root"], record["path"], record["op"]) == ("serve", "serve.sh", "modify")
    assert record["hunks"] == [{
        "old_start": 1, "old_count": 2, "new_start": 1, "new_count": 3,
        "lines": [[" ", "#!/bin/sh\n"], ["+", "export SGLANG_INDEX_K_DTYPE=bf16\n"],
                  [" ", 'exec python -m sglang.launch_server "$@"']]}]


def test_an_mbox_of_several_mails_is_refused_as_one_patch(tmp_path: Path) -> None:
    mail = SAMPLES / "pool-guard" / "0002-serve-pin-index-k-dtype.patch"
    two = tmp_path / "two.mbox"
    two.write_bytes(mail.read_bytes() + b"\n" + mail.read_bytes())
    with pytest.raises(PatchFormatError) as exc:
        parse_patch(two, "serve")
    assert str(two) in str(exc.value) and "2 mails" in str(exc.value)
    assert "patchkit import --mbox" in str(exc.value)
    assert len(parse_patch(mail, "serve")) == 1  # one mail is one patch, as before


def test_one_patch_touching_a_file_twice_keeps_both_hunks_in_order() -> None:
    [record] = parse_patch(SAMPLES / "index-k-bytes" / "0001-count-index-k-bytes.patch", "sglang")
    assert record["path"] == "python/sglang/srt/pool.py"
    assert [h["old_start"] for h in record["hunks"]] == [3]


def test_plain_unified_diff_without_git_headers(tmp_path: Path) -> None:
    patch = tmp_path / "plain.patch"
    patch.write_bytes(b"--- a/x.py\t2026-01-01 00:00:00\n+++ b/x.py\t2026-01-02 00:00:00\n"
                      b"@@ -1 +1 @@\n-a\n+b\n--- /dev/null\n+++ b/y.py\n@@ -0,0 +1 @@\n+new\n")
    first, second = parse_patch(patch, "sglang")
    assert (first["path"], first["op"], first["mode"]) == ("x.py", "modify", None)
    assert (second["path"], second["op"], second["mode"]) == ("y.py", "create", "100644")


@pytest.mark.parametrize("old,new", [("x.py.orig", "x.py"), ("a/x.py.orig", "b/x.py"),
                                     ("x.py~", "x.py"), ("x.py.bak", "x.py"), ("x.py", "x.py.new")])
def test_a_plain_diff_against_a_kept_copy_edits_the_file(tmp_path: Path, old: str, new: str) -> None:
    """``diff -u x.py.orig x.py``, the most common hand-made patch, edits ``x.py`` as GNU patch
    and quilt take it; before, it was refused as a rename (a new-user trial). git's own diffs
    say a rename, so differing names there stay one."""
    patch = tmp_path / "plain.patch"
    patch.write_text(f"--- {old}\t2026-01-01 00:00:00\n+++ {new}\t2026-01-02 00:00:00\n"
                     "@@ -1 +1 @@\n-a\n+b\n")
    (record,) = parse_patch(patch, "sglang")
    assert (record["path"], record["op"]) == ("x.py", "modify")
    for header in ("", "diff --git a/x.py.orig b/x.py\n"):
        patch.write_text(f"{header}--- y.py\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n"
                         if not header else f"{header}--- a/x.py.orig\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")
        with pytest.raises(PatchFormatError, match="the file is renamed"):
            parse_patch(patch, "sglang")


def test_a_diff_N_creation_or_deletion_dated_the_epoch_is_one(tmp_path: Path) -> None:
    """`diff -uN` names a file absent on one side by its own name, dated 1970-01-01, with no
    lines there: a creation (or deletion), as GNU patch takes it; it read as an edit of a file
    that then did not exist ("exists [file-present] ... does not exist": a fresh-clone trial).
    An empty file edited (a real date) stays an edit."""
    patch = tmp_path / "n.patch"
    patch.write_text("--- new.py\t1970-01-01 00:00:00.000000000 +0000\n"
                     "+++ new.py\t2026-10-01 10:00:01.000000000 +0000\n@@ -0,0 +1 @@\n+x = 1\n"
                     "--- old.py\t2026-10-01 10:00:00.000000000 +0000\n"
                     "+++ old.py\t1969-12-31 19:00:00.000000000 -0500\n@@ -1 +0,0 @@\n-y = 2\n"
                     "--- empty.py\t2026-10-01 10:00:00.000000000 +0000\n"
                     "+++ empty.py\t2026-10-01 10:00:01.000000000 +0000\n@@ -0,0 +1 @@\n+z = 3\n")
    made, gone, edited = parse_patch(patch, "sglang")
    assert (made["path"], made["op"]) == ("new.py", "create")
    assert (gone["path"], gone["op"]) == ("old.py", "delete")
    assert (edited["path"], edited["op"]) == ("empty.py", "modify")


BAD_PATCHES = {
    "empty": (b"\n\n", 1, "the patch is empty"),
    "no-changes": (b"just some words\n", 1, "no file changes found"),
    "hunk-short": (b"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n", 3,
                   "fewer lines than its header says"),
    "hunk-undercount": (b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+extra\n", 6,
                        "beyond the lengths its header gives"),
    "garbage-in-hunk": (b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n*b\n+c\n d\n", 5,
                        "line 5 ('*b') is not a line of the hunk at line 3 (@@ -1,2 +1,2 @@)"),
    "hunk-overcount-before-a-mail-signature": (
        b"--- a/x\n+++ b/x\n@@ -1,5 +1,5 @@\n a\n-b\n+c\n d\n-- \n2.39.5\n", 9,
        "line 9 ('2.39.5') is not a line of the hunk at line 3 (@@ -1,5 +1,5 @@)"),
    "marker-first": (b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n\\ No newline at end of file\n-a\n+b\n",
                     4, "follows no line"),
    "rename": (b"diff --git a/x b/y\nsimilarity index 90%\nrename from x\nrename to y\n"
               b"--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", 1, "renames are not supported"),
    "symlink": (b"diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n"
                b"@@ -0,0 +1 @@\n+target\n\\ No newline at end of file\n", 1, "symbolic link"),
}


@pytest.mark.parametrize("name", sorted(BAD_PATCHES))
def test_bad_patch_names_file_and_line(tmp_path: Path, name: str) -> None:
    data, line, message = BAD_PATCHES[name]
    patch = tmp_path / f"{name}.patch"
    patch.write_bytes(data)
    with pytest.raises(PatchFormatError) as info:
        parse_patch(patch, "sglang")
    assert info.value.details == {"file": str(patch), "line": line}
    assert info.value.message.startswith(f"{patch}:{line}: ")
    assert message in info.value.message


def test_binary_patch_is_refused(repo: Path, tmp_path: Path) -> None:
    (repo / "a.txt").write_text("t\n")  # sorts before blob.bin
    (repo / "blob.bin").write_bytes(bytes(range(256)))
    patch = staged_diff(repo, tmp_path, "--binary")
    with pytest.raises(PatchFormatError, match="binary patches are not supported") as info:
        parse_patch(patch, "sglang")
    assert info.value.details["line"] > 1  # the second file's header, not the first's


def test_each_parse_gives_fresh_records_of_the_current_content(tmp_path: Path) -> None:
    patch = tmp_path / "p.patch"
    patch.write_text(diff_files(b"a\n", b"b\n", "x.txt"))
    first = parse_patch(patch, "sglang")
    first[0]["hunks"][0]["lines"].clear()
    again = parse_patch(patch, "other")
    assert again[0]["hunks"][0]["lines"] == [["-", "a\n"], ["+", "b\n"]]
    assert again[0]["root"] == "other"
    patch.write_text(diff_files(b"a\n", b"c\n", "x.txt"))
    assert parse_patch(patch, "sglang")[0]["hunks"][0]["lines"][1] == ["+", "c\n"]


TRICKY = [
    (b"a\nb\nc\n", b"a\nB\nc\n"),
    (b"a\r\nb\r\n", b"a\r\nb\n"),  # only the line ending changes
    (b"x\ny", b"x\ny\n"),  # a final newline added
    (b"x\ny\n", b"x\ny"),  # and removed
    (b"\xff\xfe\n-- x\n+++ y\n", b"\xff\xfe\n--- z\n@@ -1 +1 @@\n"),  # diff-like content
    (b"\\ No newline at end of file\n", b"\\ No newline at end of file"),
    (b"", b"content\n"),
    (b"one\n", b""),
    (b"".join(b"line %d\n" % i for i in range(40)),
     b"".join(b"line %d\n" % i for i in range(40) if i not in (5, 30)) + b"tail"),
]


@pytest.mark.parametrize("old,new", TRICKY)
def test_diff_files_round_trip_and_git_agrees(repo: Path, tmp_path: Path, old: bytes,
                                              new: bytes) -> None:
    for before, after in ((old, new), (None, new), (old, None)):
        if before == after or (before is None and not after) or (after is None and not before):
            continue
        text = diff_files(before, after, "dir/the file.txt")
        patch = tmp_path / "rt.patch"
        patch.write_bytes(text.encode("utf-8", "surrogateescape"))
        files: dict[str, bytes | None] = {"dir/the file.txt": before}
        apply_records(files, parse_patch(patch, "sglang"))
        assert files["dir/the file.txt"] == after
        # git itself reads the same patch to the same result.
        target = repo / "dir" / "the file.txt"
        target.parent.mkdir(exist_ok=True)
        if before is None:
            target.unlink(missing_ok=True)
        else:
            target.write_bytes(before)
        git(repo, "apply", "--unsafe-paths", str(patch))
        assert (target.read_bytes() if target.exists() else None) == after


def test_diff_files_headers(tmp_path: Path) -> None:
    assert diff_files(b"same\n", b"same\n", "x") == ""
    created = diff_files(None, b"", "empty.txt")
    assert created == "diff --git a/empty.txt b/empty.txt\nnew file mode 100644\n"
    deleted = diff_files(b"a\n", None, "x.py")
    assert "deleted file mode 100644\n--- a/x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n" in deleted
    script = diff_files(None, b"#!/bin/sh\n", "run.sh", mode="100755")
    assert "new file mode 100755\n--- /dev/null\n+++ b/run.sh\n" in script
    quoted = diff_files(b"a\n", b"b\n", "caf\u00e9.py")
    assert '--- "a/caf\\303\\251.py"\n' in quoted
    # modes: a modified file's mode change is git's old/new mode lines; alone, they are the diff
    assert diff_files(b"a\n", b"a\n", "x", mode="100755", old_mode="100755") == ""
    assert diff_files(b"a\n", b"a\n", "run.sh", mode="100755", old_mode="100644") == (
        "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n")
    both = diff_files(b"a\n", b"b\n", "run.sh", mode="100644", old_mode="100755")
    assert both.startswith("diff --git a/run.sh b/run.sh\nold mode 100755\nnew mode 100644\n--- a/")
    assert "deleted file mode 100755\n" in diff_files(b"a\n", None, "run.sh", old_mode="100755")
    modes = tmp_path / "modes.patch"
    modes.write_text(diff_files(b"a\n", b"a\n", "run.sh", mode="100755", old_mode="100644") + both)
    assert [(r["op"], r["mode"], len(r["hunks"])) for r in parse_patch(modes, "sglang")] == [
        ("modify", "100755", 0), ("modify", "100644", 1)]
    patch = tmp_path / "q.patch"
    patch.write_text(quoted)
    assert parse_patch(patch, "sglang")[0]["path"] == "caf\u00e9.py"


_line = st.sampled_from(["a", "b", "", "-- x", "+++ y", "@@ -1 +1 @@", "\\ No newline",
                         "\xe9", "\udcff", " "]).flatmap(
    lambda body: st.sampled_from(["\n", "\r\n", "\r\n"]).map(lambda end: body + end))
_content = st.lists(_line, max_size=25).flatmap(
    lambda lines: st.booleans().map(
        lambda cut: ("".join(lines)[:-1] if cut and lines else "".join(lines))
        .encode("utf-8", "surrogateescape")))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=_content, new=_content)
def test_diff_files_parse_patch_round_trip(tmp_path: Path, old: bytes, new: bytes) -> None:
    text = diff_files(old, new, "f.txt")
    if old == new:
        assert text == ""
        return
    patch = tmp_path / "prop.patch"
    patch.write_bytes(text.encode("utf-8", "surrogateescape"))
    files: dict[str, bytes | None] = {"f.txt": old}
    apply_records(files, parse_patch(patch, "sglang"))
    assert files["f.txt"] == new


def _sections(*bodies: bytes) -> bytes:
    return b"".join(b"diff --git a/f%d b/f%d\n--- a/f%d\n+++ b/f%d\n" % (n, n, n, n) + body
                    for n, body in enumerate(bodies))


@pytest.mark.parametrize("reader", ["parse_patch", "series_records"])
@pytest.mark.parametrize("bad, line, message", [
    (b"@@ -1 +1 @@\n-a\n+b\n+c\n", 19, "continues the hunk at line 16"),
    (b"@@ -1 +1 @@\n\\ No newline at end of file\n-a\n+b\n", 17, "follows no line"),
], ids=["undercounted", "stray-marker"])
def test_an_error_in_a_later_file_names_the_line_of_the_whole_patch(
        tmp_path: Path, reader: str, bad: bytes, line: int, message: str) -> None:
    """The patch is read one ``diff --git`` section at a time (issue 26, memory): an error in
    the third file still names its line in the patch, not in the section."""
    patch = tmp_path / "three.patch"
    good = b"@@ -1 +1 @@\n-a\n+b\n"
    patch.write_bytes(_sections(good, good, bad))
    with pytest.raises(PatchFormatError) as info:
        if reader == "parse_patch":
            parse_patch(patch, "sglang")
        else:
            series_records([(patch, "sglang")])
    assert info.value.details == {"file": str(patch), "line": line}
    assert message in info.value.message


def test_a_large_series_applies_byte_identically_to_git_apply(repo: Path, tmp_path: Path) -> None:
    """A patch of many files (read a section at a time, each hunk kept as its body text) turns
    the tree into what ``git apply`` makes of it, byte for byte: CRLF, bytes that are not
    UTF-8, missing final newlines, files created and deleted, several hunks per file; and
    every file's result diff applies with ``git apply`` too."""
    from patchkit.engine import run

    sglang = repo / "python" / "sglang"
    sglang.mkdir(parents=True)
    (sglang / "version.py").write_text('__version__ = "0.5.23"\n')
    files = {f"python/sglang/m{n}.py": b"".join(b"line %d of %d\r\n" % (i, n) if n % 3 == 0
                                                else b"line %d of %d \xff\n" % (i, n)
                                                for i in range(120)) for n in range(60)}
    for rel, data in files.items():
        (repo / rel).write_bytes(data if rel != "python/sglang/m7.py" else data.rstrip(b"\n"))
    commit_all(repo)
    for n, rel in enumerate(files):
        path = repo / rel
        if n % 10 == 5:
            path.unlink()
            continue
        lines = path.read_bytes().split(b"\n")
        for i in (3, 50, 110):
            lines[i] = lines[i].replace(b"line", b"LINE") + b" # changed"
        path.write_bytes(b"\n".join(lines) + (b"tail" if n == 7 else b""))
    for n in range(12):
        (sglang / "new" / f"n{n}.py").parent.mkdir(exist_ok=True)
        (sglang / "new" / f"n{n}.py").write_bytes(b"created %d\n" % n * 40 + b"no newline")
    patch = staged_diff(repo, tmp_path)
    expected = {p.relative_to(repo).as_posix(): p.read_bytes()
                for p in sglang.rglob("*") if p.is_file()}
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-qfd")

    _digests, records = series_records([(patch, "sglang")])
    request = {"format": 1, "op": "apply", "dry_run": False, "force": False,
               "roots": {"sglang": str(repo)}, "state_root": "sglang", "python": None,
               "lock_timeout": 5.0, "git": False,
               "fixes": [{"name": "big", "version": 1, "title": "big", "requires": [],
                          "release": None, "patches": [], "files": records,
                          "preconditions": [], "verification": [],
                          "actions": {"purge_pycache": False}, "scripts": {},
                          "rollback": {"strategy": "restore"}}]}
    result = run(request)
    assert result["ok"], result["error"]
    got = {p.relative_to(repo).as_posix(): p.read_bytes()
           for p in sglang.rglob("*") if p.is_file() and ".patchkit" not in p.parts}
    assert got == expected
    shown = result["fixes"][0]["files"]
    assert len(shown) == 60 + 12 and {f["op"] for f in shown} == {"modify", "create", "delete"}
    git(repo, "stash", "-q", "--include-untracked")  # the tree as it was, for the diffs
    (tmp_path / "result.diff").write_text("".join(f["diff"] for f in shown),
                                          encoding="utf-8", errors="surrogateescape")
    git(repo, "apply", str(tmp_path / "result.diff"))
    assert {p.relative_to(repo).as_posix(): p.read_bytes()
            for p in sglang.rglob("*") if p.is_file()} == expected


# Sections a hunk's lines are taken from as they stand in the patch, and sections with a line
# unidiff reads otherwise (a marker, a bare empty line, a line starting with "\r", a last line
# without a newline, an empty line after a hunk), side by side in one patch and in one
# plain-diff section of several files.
_MIXED = (b"From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001\n"
          b"Subject: [PATCH] mixed\n\n---\n"
          b"diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,3 +1,3 @@ def f():\n"
          b" x\n-y\n+Y\n z\n@@ -10,2 +10,3 @@\n p\n+q\r\n q\n"
          b"diff --git a/b.py b/b.py\n--- a/b.py\n+++ b/b.py\n@@ -1,2 +1,2 @@\n a\n-b\n"
          b"\\ No newline at end of file\n+b\n"
          b"diff --git a/c.py b/c.py\n--- a/c.py\n+++ b/c.py\n@@ -1,3 +1,3 @@\n a\n\n-c\n+C\n"
          b"diff --git a/d.py b/d.py\n--- a/d.py\n+++ b/d.py\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n"
          b"\n"
          b"diff --git a/e.py b/e.py\n--- a/e.py\n+++ b/e.py\n@@ -1,2 +1,2 @@\n\rodd\n-b\n+B\xff\n"
          b"diff --git a/n.py b/n.py\nnew file mode 100755\n--- /dev/null\n+++ b/n.py\n"
          b"@@ -0,0 +1,2 @@\n+one\n+two\n"
          b"diff --git a/gone.py b/gone.py\ndeleted file mode 100644\n--- a/gone.py\n+++ /dev/null\n"
          b"@@ -1 +0,0 @@\n-bye\n"
          b"-- \n2.43.0\n\n")
_PLAIN_DIFF = (b"--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n--- a/y.py\n+++ b/y.py\n"
               b"@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n--- a/z.py\n+++ b/z.py\n"
               b"@@ -3 +3,2 @@\n k\n+l")


@pytest.mark.parametrize("data", [_MIXED, _PLAIN_DIFF], ids=["sections", "plain"])
def test_hunks_taken_from_the_patch_text_equal_unidiffs_lines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """Hunk lines are taken from the patch where unidiff (reading without a Line object per
    line) found them; every record, body or lines, equals what unidiff's own lines give."""
    import patchkit.catalog.series as series

    patch = tmp_path / "mixed.patch"
    patch.write_bytes(data)
    taken = (series_records([(patch, "sglang")])[1], parse_patch(patch, "sglang"))
    with monkeypatch.context() as m:
        m.setattr(series, "_spans", lambda lines, patchset: None)  # unidiff's Line objects
        assert (series_records([(patch, "sglang")])[1], parse_patch(patch, "sglang")) == taken
    bodies = {r["path"]: [h["body"] for h in r["hunks"]] for r in taken[0] if r["path"] != "e.py"}
    assert bodies == ({"a.py": [" x\n-y\n+Y\n z\n", " p\n+q\r\n q\n"],
                       "b.py": [" a\n-b\n\\ No newline at end of file\n+b\n"],
                       "c.py": [" a\n \n-c\n+C\n"], "d.py": [" a\n-b\n+B\n"],
                       "n.py": ["+one\n+two\n"], "gone.py": ["-bye\n"]}
                      if data == _MIXED else
                      {"x.py": [" a\n-b\n+c\n"], "y.py": ["-a\n+b\n\\ No newline at end of file\n"],
                       "z.py": [" k\n+l\n\\ No newline at end of file\n"]})
