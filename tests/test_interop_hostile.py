"""Hostile input for every importer of `patchkit import` (issue 16): a malformed mbox, a
series naming a missing patch, a patch escaping the tree, a mail with CRLF line endings,
non-UTF-8 headers (a quilt patch's line endings are judged against the tree when it is applied:
tests/test_any_tree.py). Each is refused with exit 2 and an error naming the file and what to do, and
nothing is written to the catalog: its files are unchanged byte for byte, and its git HEAD.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.catalog import Catalog
from patchkit.errors import EXIT_USAGE
from tests.test_authoring import catalog_state, flat, git, patchkit, small_checkout

DIFF = b"""\
diff --git a/python/sglang/a.py b/python/sglang/a.py
--- a/python/sglang/a.py
+++ b/python/sglang/a.py
@@ -1,3 +1,3 @@
 one = 1
-two = 2
+two = 22
 three = 3
"""
ESCAPING = DIFF.replace(b"a/python/sglang/a.py", b"a/../../outside.py").replace(
    b"b/python/sglang/a.py", b"b/../../outside.py")


def mail(diff: bytes = DIFF, subject: bytes = b"a: two is twenty-two") -> bytes:
    return (b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            b"From: Ann Author <ann@example.org>\nDate: Tue, 10 Nov 2026 12:00:00 +0100\n"
            b"Subject: [PATCH] " + subject + b"\n\nThe pool needs 22.\n---\n" + diff)


def dep3(diff: bytes = DIFF, description: bytes = b"a: two is twenty-two") -> bytes:
    return b"Description: " + description + b"\n The pool needs 22.\n---\n" + diff


def crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    root = tmp_path / "fixes"
    result = patchkit(root, "init", str(root))
    assert result.exit_code == 0, result.output
    return root


def refused(catalog: Path, args: list[str], *expected: str) -> None:
    """The import exits 2 saying each of ``expected``, and writes nothing to the catalog."""
    before, head = catalog_state(catalog), git(catalog, "rev-parse", "HEAD")
    result = patchkit(catalog, "import", *args, "--release", "0.5.23")
    assert result.exit_code == EXIT_USAGE, result.output
    message = flat(result.output)
    for text in expected:
        assert text in message, message
    assert "Traceback" not in result.output
    assert catalog_state(catalog) == before
    assert git(catalog, "rev-parse", "HEAD") == head


MBOX_CASES = {
    "not-a-mail": (b"this is not a mail\njust some text\n",
                   ["message 1 is not a patch mail", "Give the output of git format-patch"]),
    "no-diff": (mail(b""), ["no diff found", "git format-patch writes it"]),
    "truncated-hunk": (mail(DIFF[:-20]), ["fewer lines than its header says",
                                          "Regenerate the patch"]),
    "escaping": (mail(ESCAPING), ["'../../outside.py', outside the tree",
                                  "check where the patch comes from"]),
    "crlf": (crlf(mail()), ["CRLF", "Convert it back (dos2unix"]),
    "latin1-subject": (mail(subject=b"caf\xe9: two"), ["its Subject header is not UTF-8",
                                                        "iconv"]),
    "bad-rfc2047": (mail(subject=b"=?x-unknown?q?caf=E9?="), ["Subject header is not UTF-8"]),
}


@pytest.mark.parametrize("case", sorted(MBOX_CASES))
def test_a_hostile_mbox_is_refused_naming_the_file_and_nothing_is_written(
        catalog: Path, tmp_path: Path, case: str) -> None:
    data, expected = MBOX_CASES[case]
    path = tmp_path / f"{case}.mbox"
    path.write_bytes(data)
    refused(catalog, ["--mbox", str(path)], str(path), *expected)
    # A format-patch directory holding it says the same of the file.
    directory = tmp_path / "format-patch"
    directory.mkdir()
    (directory / "0001-good.patch").write_bytes(mail())
    (directory / f"0002-{case}.patch").write_bytes(data)
    refused(catalog, ["--mbox", str(directory), "--split", "--name", "x"], f"0002-{case}.patch", *expected[1:])


QUILT_CASES = {
    "missing-patch": ({"series": b"one.patch\ngone.patch\n", "one.patch": dep3()},
                      "series:2", ["names gone.patch, which is not in",
                                   "Add the patch file, or remove the line from series"]),
    "escaping-series": ({"series": b"../../outside.patch\n"}, "series",
                        ["'../../outside.patch', outside the tree"]),
    "escaping-patch": ({"series": b"one.patch\n", "one.patch": dep3(ESCAPING)}, "one.patch",
                       ["'../../outside.py', outside the tree", "-p strip level"]),
    "escaping-strip": ({"series": b"one.patch -p0\n", "one.patch": dep3(ESCAPING.replace(
        b"a/../../", b"../").replace(b"b/../../", b"../"))}, "one.patch",
                       ["'../outside.py', outside the tree"]),
    "latin1-description": ({"series": b"one.patch\n", "one.patch": dep3(description=b"caf\xe9")},
                           "one.patch", ["its DEP-3 headers are not UTF-8", "iconv"]),
    "no-series": ({"one.patch": dep3()}, "", ["no quilt series file", "QUILT_PATCHES"]),
    "empty-series": ({"series": b"# nothing\n"}, "series", ["the series lists no patch"]),
    "too-deep": ({"series": b"one.patch -p9\n", "one.patch": dep3()}, "one.patch",
                 ["stripping 9 component(s) (-p9)", "Give the right -p level"]),
}


@pytest.mark.parametrize("case", sorted(QUILT_CASES))
def test_a_hostile_quilt_series_is_refused_naming_the_file_and_nothing_is_written(
        catalog: Path, tmp_path: Path, case: str) -> None:
    files, named, expected = QUILT_CASES[case]
    patches = tmp_path / "pkg" / "debian" / "patches"
    patches.mkdir(parents=True)
    for name, data in files.items():
        (patches / name).write_bytes(data)
    refused(catalog, ["--quilt", str(patches)], f"{patches}/{named}".rstrip("/"), *expected)


def test_a_hostile_git_range_is_refused_and_nothing_is_written(catalog: Path,
                                                                tmp_path: Path) -> None:
    src = small_checkout(tmp_path, release="0.5.23")
    plain = tmp_path / "plain"
    plain.mkdir()
    refused(catalog, ["--from", str(plain), "--commits", "A..B"], str(plain),
            "is not the top of a git checkout")
    refused(catalog, ["--from", str(src), "--commits", "HEAD..HEAD"], "holds no commits",
            "the range is A..B")
    refused(catalog, ["--from", str(src), "--commits", "nope..HEAD"], "cannot read the commits",
            "Name two commits of that repository")


def test_import_names_exactly_one_source(catalog: Path, tmp_path: Path) -> None:
    (tmp_path / "one.mbox").write_bytes(mail())
    refused(catalog, [], "give exactly one source")
    refused(catalog, ["--mbox", str(tmp_path / "one.mbox"), "--one"], "--one with --quilt")
    made = patchkit(catalog, "import", "--mbox", str(tmp_path / "one.mbox"), "--release",
                    "0.5.23")
    assert made.exit_code == 0, made.output
    refused(catalog, ["--mbox", str(tmp_path / "one.mbox")],
            "fix 'a-two-is-twenty-two' already exists", "pass --name")


def test_raw_utf8_and_rfc2047_headers_are_read_not_refused(catalog: Path, tmp_path: Path) -> None:
    raw = mail(subject="café: two".encode()).replace(b"Ann Author", "Zoë Author".encode())
    encoded = mail(subject=b"=?UTF-8?q?caf=C3=A9=3A_two?=")
    for name, data in (("raw", raw), ("encoded", encoded)):
        (tmp_path / f"{name}.mbox").write_bytes(data)
        made = patchkit(catalog, "import", "--mbox", str(tmp_path / f"{name}.mbox"), "--name",
                        name, "--release", "0.5.23")
        assert made.exit_code == 0, made.output
    fixes = Catalog(catalog)
    assert fixes.get("raw").title == fixes.get("encoded").title == "café: two"
    assert fixes.get("raw").author == "Zoë Author <ann@example.org>"


def test_a_damaged_hunk_is_named_by_its_line_in_the_file(catalog: Path, tmp_path: Path) -> None:
    """The line an error names is the file's, where an editor opens it: in a format-patch
    file, in the second mail of an mbox, in a DEP-3 quilt patch (it was the line within the
    diff part: `0001-x.patch:4` for a hunk on line 14)."""
    bad = mail(DIFF[:-20])
    hunk = bad.split(b"\n").index(b"@@ -1,3 +1,3 @@") + 1  # its 1-based line
    directory = tmp_path / "format-patch"
    directory.mkdir()
    (directory / "0001-bad.patch").write_bytes(bad)
    refused(catalog, ["--mbox", str(directory)], f"0001-bad.patch:{hunk}: the hunk at line {hunk}")
    both = tmp_path / "two.mbox"
    good = mail()
    both.write_bytes(good + bad)
    second = good.count(b"\n") + hunk
    refused(catalog, ["--mbox", str(both), "--split", "--name", "x"],
            f"two.mbox:{second}: the hunk at line {second}")
    patches = tmp_path / "q" / "patches"
    patches.mkdir(parents=True)
    (patches / "series").write_text("one.patch\n")
    (patches / "one.patch").write_bytes(dep3(DIFF[:-20]))
    at = dep3(DIFF[:-20]).split(b"\n").index(b"@@ -1,3 +1,3 @@") + 1
    refused(catalog, ["--quilt", str(patches)], f"one.patch:{at}: the hunk at line {at}")
