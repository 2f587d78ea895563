"""A hunk's compact ``body`` (docs/design.md, FILE) is the same hunk as its ``lines``.

The client sends ``body``; old requests and hand-written ones send ``lines``. Both must place,
write and diff byte for byte alike, including CRLF, a missing final newline (on either side),
a lone "\\r" and bytes that are not UTF-8; a damaged body is a patch error, not a wrong edit.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict, List

import pytest

from patchkit.engine import run
from patchkit.engine.hunks import FileChange, apply_change, body_lines, hunk_body
from patchkit.engine.request import parse_request
from patchkit.errors import PatchFormatError

from .helpers import MOD, compact, file_record, fix, git, make_checkout, request

# (before, after) texts whose hunks stress the notation.
HOSTILE = [
    ("a\r\nb\r\nc\r\n", "a\r\nB\r\nc\r\n"),                   # CRLF kept in the text
    ("x\ny\nz", "x\ny\nz\n"),                                  # no newline on the old side
    ("x\ny\nz\n", "x\ny\nZ"),                                  # ... on the new side
    ("p\nq", "p\nr"),                                          # ... on both sides
    ("a\nb\r", "a\nB\r"),                                      # a last line ending in a lone CR
    ("caf\udce9\n\\ x\n", "caf\udce9\n\\ y\n+z\n-w\n"),        # non-UTF-8, texts like markers
    ("", "new\n"),                                             # an empty file gains a line
    ("only\n", ""),                                            # ... and loses it
]


@pytest.mark.parametrize("before,after", HOSTILE)
def test_body_reads_back_as_the_same_lines_and_applies_alike(before: str, after: str) -> None:
    record = file_record("f.txt", before, after)
    for hunk in record["hunks"]:
        assert body_lines(hunk_body(hunk["lines"])) == tuple(map(tuple, hunk["lines"]))
    by_lines = FileChange.from_dict(record, "fx")
    by_body = FileChange.from_dict(compact(record), "fx")
    assert by_body.hunks == by_lines.hunks
    assert apply_change(before, by_body)[0] == after
    assert apply_change(before, by_body) == apply_change(before, by_lines)
    undone = by_body.reversed()
    assert apply_change(after, undone)[0] == before


def test_body_is_the_patch_notation() -> None:
    lines = [[" ", "ctx\n"], ["-", "old\r\n"], ["+", "new\r"], ["+", ""]]
    body = hunk_body(lines)
    assert body == (" ctx\n-old\r\n+new\r\n\\ No newline at end of file\n"
                    "+\n\\ No newline at end of file\n")
    assert body_lines(body) == tuple(map(tuple, lines))
    assert body_lines("+a\n+b") == (("+", "a\n"), ("+", "b"))  # a body without its last newline


@pytest.mark.parametrize("body,why", [
    ("\\ No newline at end of file\n+a\n", "follows no line"),
    ("+a\n\\ No newline at end of file\n\\ No newline at end of file\n", "follows no line"),
    (["+a\n"], "not a string"),
    ("+a\n\n", "header says"),      # an untagged empty line is no line of a hunk
    ("+a\n*b\n", "header says"),    # an unknown tag
    ("+a\n", "header says"),        # fewer lines than the header counts
])
def test_a_damaged_body_is_a_patch_format_error(body: Any, why: str) -> None:
    hunk = {"old_start": 1, "old_count": 0, "new_start": 1, "new_count": 2, "body": body}
    change = FileChange.from_dict({"root": "sglang", "path": "f.txt", "patch": "0001-x.patch",
                                   "op": "modify", "hunks": [hunk]}, "fx", lazy=True)
    with pytest.raises(PatchFormatError, match=why) as info:
        change.hunks  # noqa: B018
    assert "0001-x.patch" in str(info.value) and "hunk #1" in str(info.value)


def test_status_splits_no_body_and_apply_checks_every_one(tmp_path: Path) -> None:
    root = make_checkout(tmp_path)
    text = (root / MOD).read_text()
    record = compact(file_record(MOD, text, text.replace("return x + 3\n", "return x + 4\n")))
    damaged = copy.deepcopy(record)
    damaged["hunks"][0]["body"] += "+extra\n"
    status = parse_request(request("status", {"sglang": root}, [fix("a", [damaged])]))
    assert "hunks" not in vars(status.fixes[0].files[0])  # lazy: nothing split yet
    # an apply checks each record's hunks when it places them, before the first write
    good = fix("b", [compact(file_record("python/sglang/srt/other.py", None, "new\n"))])
    res = run(request("apply", {"sglang": root}, [good, fix("a", [damaged])]))
    assert not res["ok"] and res["error"]["type"] == "PatchFormatError"
    assert "header says" in res["error"]["message"]
    assert (root / MOD).read_text() == text and not (root / "python/sglang/srt/other.py").exists()
    assert not (root / ".patchkit").exists()


def test_apply_status_and_rollback_give_the_same_answers_in_both_forms(tmp_path: Path) -> None:
    results: List[Dict[str, Any]] = []
    for form, name in ((lambda r: r, "lines"), (compact, "body")):
        root = make_checkout(tmp_path / name)
        text = (root / MOD).read_text()
        new = text.replace("return x + 3\n", "return x + 3  # patched\n").rstrip("\n")
        records = [form(file_record(MOD, text, new)),
                   form(file_record("scripts/new.sh", None, "#!/bin/sh\r\necho hi"))]
        applied = run(request("apply", {"sglang": root}, [fix("a", records)]))
        assert applied["ok"], applied["error"]
        assert (root / MOD).read_text() == new
        status = run(request("status", {"sglang": root}, [fix("a", records)]))
        rolled = run(request("rollback", {"sglang": root}, [fix("a", records)]))
        assert rolled["ok"] and (root / MOD).read_text() == text
        assert git(root, "status", "--porcelain") == ""
        results.append({"files": [{k: v for k, v in f.items()}
                                  for f in applied["fixes"][0]["files"]],
                        "status": [f["files"] for f in status["status"]["fixes"]],
                        "rollback": rolled["fixes"][0]["files"]})
    assert results[0] == results[1]
