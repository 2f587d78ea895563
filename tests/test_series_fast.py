"""The fast git-diff reader gives exactly unidiff's records, or hands the patch to unidiff.

unidiff (through ``patchkit.catalog.series._parse``) is the reference: every comparison here is
against the records it makes, in the request's ``body`` form. A patch the fast reader takes
must give equal records; a patch unidiff refuses must never be taken (its error, with file and
line, comes from unidiff as before).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchkit.catalog import series
from patchkit.errors import PatchFormatError
from patchkit.catalog.series import compact_hunk, diff_files, parse_series
from patchkit.catalog.series_fast import parse_git_patch
from tests.test_series import BAD_PATCHES

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted(REPO.glob("patches/*/*.patch")) + sorted(
    (REPO / "tests" / "samples").glob("**/*.patch"))


def reference(data: bytes, name: str = "0001-x.patch") -> Any:
    """unidiff's records in the body form, or the PatchFormatError it raises."""
    try:
        records = series._parse(Path(name), data)
    except PatchFormatError as exc:
        return exc
    for record in records:
        record["hunks"] = [compact_hunk(h) for h in record["hunks"]]
    return records


def fast(data: bytes, name: str = "0001-x.patch") -> Any:
    return parse_git_patch(data.decode("utf-8", "surrogateescape"), name)


def assert_same_or_deferred(data: bytes) -> bool:
    """True when the fast reader took the patch (and then its records are unidiff's)."""
    got = fast(data)
    if got is None:
        return False
    expected = reference(data)
    assert not isinstance(expected, Exception), (data, expected)
    assert got == expected
    return True


def test_every_patch_of_the_repository_is_read_fast_and_alike() -> None:
    assert len(SHIPPED) >= 5
    for path in SHIPPED:
        assert assert_same_or_deferred(path.read_bytes()), path


def git(cwd: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True).stdout


FORMS = {
    "modify, omitted counts": b"diff --git a/x.py b/x.py\nindex 1234567..89abcde 100644\n"
                              b"--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n",
    "new file, no newline": b"diff --git a/n.sh b/n.sh\nnew file mode 100755\n"
                            b"index 0000000..89abcde\n--- /dev/null\n+++ b/n.sh\n"
                            b"@@ -0,0 +1,2 @@\n+#!/bin/sh\n+exit 0\n"
                            b"\\ No newline at end of file\n",
    "deleted file": b"diff --git a/d.txt b/d.txt\ndeleted file mode 100644\n"
                    b"index 89abcde..0000000\n--- a/d.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n"
                    b"-one\n-two\n",
    "mode change with hunk": b"diff --git a/m b/m\nold mode 100644\nnew mode 100755\n"
                             b"index 1..2\n--- a/m\n+++ b/m\n@@ -1 +1 @@\n-a\n+b\n",
    "CRLF body, marker in the middle": b"diff --git a/w.txt b/w.txt\nindex 1..2 100644\n"
                                       b"--- a/w.txt\n+++ b/w.txt\n@@ -1,2 +1,2 @@\n"
                                       b" keep\r\n-old\r\n\\ No newline at end of file\n"
                                       b"+new\r\n",
    "non-UTF-8 bytes": b"diff --git a/l.txt b/l.txt\n--- a/l.txt\n+++ b/l.txt\n@@ -1 +1 @@\n"
                       b"-caf\xe9\n+caf\xc3\xa9 \xff\n",
    "format-patch mail, two files, trailer": (
        b"From 1 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\n- a bullet\n+ another\n"
        b"---\n a.txt | 2 +-\n 1 file changed\n\n"
        b"diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@ def f():\n"
        b" a\n-b\n+c\n d\n@@ -10 +10 @@\n-x\n+y\n"
        b"diff --git a/b.txt b/b.txt\n--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-p\n"
        b"\\ No newline at end of file\n+q\n\\ No newline at end of file\n-- \n2.43.0\n\n"),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_forms_git_writes_are_read_fast_and_alike(form: str) -> None:
    assert assert_same_or_deferred(FORMS[form])


DEFERRED = {
    "plain unified diff": b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
    "quoted path": b'diff --git "a/f\\303\\251" "b/f\\303\\251"\n--- "a/f\\303\\251"\n'
                   b'+++ "b/f\\303\\251"\n@@ -1 +1 @@\n-a\n+b\n',
    "path with a space": b"diff --git a/s p b/s p\n--- a/s p\n+++ b/s p\n@@ -1 +1 @@\n-a\n+b\n",
    "empty new file": b"diff --git a/e b/e\nnew file mode 100644\nindex 0000000..e69de29\n",
    "CRLF headers": b"diff --git a/x b/x\r\n--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n",
    "blank context line": b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n\n-a\n+b\n",
    "last line without newline": b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b",
    "commit message with a header line": b"Subject: x\n\n--- a/y\n\n"
                                         b"diff --git a/x b/x\n--- a/x\n+++ b/x\n"
                                         b"@@ -1 +1 @@\n-a\n+b\n",
}


@pytest.mark.parametrize("form", sorted(DEFERRED))
def test_what_the_fast_reader_does_not_know_goes_to_unidiff(form: str, tmp_path: Path) -> None:
    data = DEFERRED[form]
    assert fast(data) is None
    patch = tmp_path / "0001-x.patch"
    patch.write_bytes(data)
    expected = reference(data, patch.name)
    if isinstance(expected, PatchFormatError):  # unidiff refuses it: so does the series
        with pytest.raises(PatchFormatError) as info:
            parse_series([(patch, "sglang", data)])
        assert info.value.message.endswith(expected.message.split(": ", 1)[1])
        assert info.value.details["file"] == str(patch)
        return
    assert parse_series([(patch, "sglang", data)])[1] == [dict(r, root="sglang")
                                                           for r in expected]


GIT_BAD = {
    "hunk-short": (b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n", 4,
                   "fewer lines than its header says"),
    "hunk-undercount": (b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+extra\n",
                        7, "beyond the lengths its header gives"),
    "garbage-in-hunk": (b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n*b\n+c\n",
                        6, "malformed"),
    "marker-first": (b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n"
                     b"\\ No newline at end of file\n-a\n+b\n", 5, "follows no line"),
    "two-markers": (b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n"
                    b"\\ No newline at end of file\n\\ No newline at end of file\n+b\n", 7,
                    "follows no line"),
}


@pytest.mark.parametrize("name", sorted(GIT_BAD) + sorted(BAD_PATCHES))
def test_a_bad_patch_in_a_series_fails_as_unidiff_says(tmp_path: Path, name: str) -> None:
    data, line, message = {**BAD_PATCHES, **GIT_BAD}[name]
    assert fast(data) is None
    patch = tmp_path / f"{name}.patch"
    patch.write_bytes(data)
    with pytest.raises(PatchFormatError) as info:
        parse_series([(patch, "sglang", data)])
    assert info.value.details == {"file": str(patch), "line": line}
    assert message in info.value.message


def test_a_binary_patch_in_a_series_is_refused_by_unidiff(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("t\n")
    (repo / "blob.bin").write_bytes(bytes(range(256)))
    git(repo, "add", "-A")
    data = git(repo, "diff", "--cached", "--binary")
    assert fast(data) is None
    with pytest.raises(PatchFormatError, match="binary patches are not supported"):
        parse_series([(tmp_path / "b.patch", "sglang", data)])


# -- generated patches ---------------------------------------------------------------------

texts = st.lists(st.sampled_from(["a\n", "b\n", "c\r\n", "\n", " x\n", "-y\n", "\xe9\n", "z"]),
                 max_size=12).map(lambda lines: "".join(lines).encode("utf-8", "surrogateescape"))
sections = st.tuples(st.one_of(st.none(), texts), st.one_of(st.none(), texts),
                     st.sampled_from(["x.py", "d/y.txt", "x.py", "d/y.txt", "s p", "e\xe9"]),
                     st.sampled_from(["100644", "100755"]))
PREAMBLES = ["", "", "", "From 1 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\n- item\n---\n x | 1 +\n\n",
             "Subject: y\n\n--- a/z\n\n", "@@ -1 +1 @@\n"]
TRAILERS = ["", "", "-- \n2.43.0\n\n", "-- \n2.43.0\n\n", "\n", "+stray\n", "\\ No newline at end of file\n", "-- \n"]


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PREAMBLES), st.lists(sections, min_size=1, max_size=3),
       st.sampled_from(TRAILERS), st.data())
def test_generated_patches_read_fast_alike_or_deferred(preamble: str, parts: list, trailer: str,
                                                       data: st.DataObject) -> None:
    body = "".join(diff_files(old, new, path, mode=mode) for old, new, path, mode in parts)
    patch = (preamble + body + trailer).encode("utf-8", "surrogateescape")
    assert_same_or_deferred(patch)
    # The same patch with one line dropped, doubled or changed: still alike or deferred.
    lines = patch.split(b"\n")
    i = data.draw(st.integers(0, len(lines) - 1))
    edit = data.draw(st.sampled_from(["drop", "dup", "blank", "space", "cr"]))
    if edit == "drop":
        del lines[i]
    elif edit == "dup":
        lines.insert(i, lines[i])
    elif edit == "blank":
        lines[i] = b""
    elif edit == "space":
        lines[i] = b" " + lines[i]
    else:
        lines[i] += b"\r"
    assert_same_or_deferred(b"\n".join(lines))


# -- the real drift --------------------------------------------------------------------------

@pytest.mark.network
def test_the_real_release_drift_is_read_fast_and_alike(catalog_upstream: Any) -> None:
    """Every file of the 0.5.21 -> 0.5.23 drift as one git patch each, and the whole drift as
    one patch: the fast reader takes nearly all and agrees with unidiff on each."""
    whole = git(catalog_upstream.git_dir, "diff", "--no-renames", "v0.5.21", "v0.5.23")
    starts = [0] + [i + 1 for i in range(len(whole)) if whole.startswith(b"\ndiff --git ", i)]
    patches = [whole[a:b] for a, b in zip(starts, starts[1:] + [len(whole)])]
    assert len(patches) > 500
    taken = sum(assert_same_or_deferred(p) for p in patches)
    assert taken >= 0.95 * len(patches)
    assert_same_or_deferred(whole)


def test_a_series_of_git_patches_is_read_without_unidiff(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast reader is what reads a plain git series (unidiff is not called at all), and
    the records are unidiff's."""
    items = [(tmp_path / f"{i:04d}.patch", "sglang", FORMS[form])
             for i, form in enumerate(sorted(FORMS))]
    expected = [dict(r, root="sglang", patch=path.name)
                for path, _root, data in items for r in reference(data)]

    def refuse(*_args: Any) -> None:
        raise AssertionError("unidiff was called")

    monkeypatch.setattr(series, "_parse", refuse)
    assert parse_series(items)[1] == expected
