"""Zero-fuzz hunk placement on text in memory."""

from __future__ import annotations

import pytest

from patchkit.engine.hunks import FileChange, apply_change, decode, encode, split_lines
from patchkit.errors import ConflictError, PatchFormatError

from .helpers import file_record, hunks_from, module_text


def change(before, after, path="python/sglang/srt/mod.py", **kw) -> FileChange:
    return FileChange.from_dict(file_record(path, before, after, **kw), "fx")


def test_split_lines_keeps_endings_and_splits_on_newline_only() -> None:
    assert split_lines("a\r\nb\x0bc\x1cd\nlast") == ["a\r\n", "b\x0bc\x1cd\n", "last"]
    assert split_lines("") == []
    assert split_lines("x\n") == ["x\n"]


@pytest.mark.parametrize("seed", range(4))
def test_split_lines_takes_the_fast_path_only_where_it_splits_the_same(seed: int) -> None:
    """``split_lines`` lets ``str.splitlines`` split a text with no break but "\\n"; on any
    mix of the breaks ``str.splitlines`` knows, it splits on "\\n" alone."""
    import random

    rng = random.Random(seed)
    alphabet = "ab \n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet if rng.random() < 0.5 else "ab \n")
                       for _ in range(rng.randrange(12)))
        parts = text.split("\n")
        expected = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        assert split_lines(text) == expected, repr(text)


def test_exact_placement_reports_zero_offset() -> None:
    before = module_text()
    after = before.replace("return x + 7\n", "return x * 7\n")
    new, placed = apply_change(before, change(before, after))
    assert new == after
    assert [(p.index, p.expected_line, p.line, p.offset) for p in placed] == [(1, 20, 20, 0)]


def test_placement_at_an_offset_is_found_and_reported() -> None:
    before = module_text()
    after = before.replace("return x + 7\n", "return x * 7\n").replace("return x + 30\n", "return 30\n")
    moved = "# header\n# header 2\n# header 3\n" + before
    new, placed = apply_change(moved, change(before, after))
    assert new == "# header\n# header 2\n# header 3\n" + after
    assert [(p.expected_line, p.line, p.offset) for p in placed] == [(20, 23, 3), (89, 92, 3)]


def test_one_differing_context_line_is_a_conflict_not_a_fuzz() -> None:
    before = module_text()
    after = before.replace("return x + 7\n", "return x * 7\n")
    # GNU patch would apply this with fuzz 1: only the outermost context line differs.
    target = before.replace("return x + 6\n", "return y + 6\n")
    with pytest.raises(ConflictError) as info:
        apply_change(target, change(before, after))
    err = info.value
    assert err.details["hunk"] == 1
    assert err.details["patch"] == "0001-a.patch"
    assert err.details["expected_line"] == 20
    assert err.details["first_difference"] == {"line": 20, "expected": "    return x + 6\n",
                                               "found": "    return y + 6\n"}
    assert "sglang:python/sglang/srt/mod.py" in err.message and "hunk #1 of 0001-a.patch" in err.message
    # the lines as they read, not Python's escapes
    assert 'expects "    return x + 6" but the file has "    return y + 6"' in err.message


def test_crlf_lines_are_matched_and_kept() -> None:
    before = "one\r\ntwo\r\nthree\r\nfour\r\n"
    after = "one\r\ntwo\r\nTHREE\r\nfour\r\n"
    new, _ = apply_change(before, change(before, after))
    assert new == after
    with pytest.raises(ConflictError):  # LF context does not match CRLF lines
        apply_change(before.replace("\r\n", "\n"), change(before, after))


def test_no_newline_at_end_of_file_both_ways() -> None:
    before = "a\nb\nc"
    after = "a\nb\nc\nd\n"
    new, _ = apply_change(before, change(before, after))
    assert new == after
    back, _ = apply_change(after, change(before, after).reversed())
    assert back == before
    hunk_lines = change(before, after).hunks[0].lines
    assert ("-", "c") in hunk_lines and ("+", "c\n") in hunk_lines


def test_non_utf8_bytes_survive_a_round_trip() -> None:
    raw = b"latin1: caf\xe9\nkeep \xff\xfe\nend\n"
    before = decode(raw)
    after = before.replace("end\n", "END\n")
    new, _ = apply_change(before, change(before, after))
    assert encode(new) == b"latin1: caf\xe9\nkeep \xff\xfe\nEND\n"


def test_create_and_delete() -> None:
    created, placed = apply_change(None, change(None, "x = 1\ny = 2\n", path="python/sglang/new.py"))
    assert created == "x = 1\ny = 2\n" and placed[0].index == 1
    with pytest.raises(ConflictError, match="already exists"):
        apply_change("", change(None, "x = 1\n", path="python/sglang/new.py"))
    gone, _ = apply_change("x = 1\n", change("x = 1\n", None, path="python/sglang/new.py"))
    assert gone is None
    with pytest.raises(ConflictError, match="deletes this file"):
        apply_change("x = 2\n", change("x = 1\n", None, path="python/sglang/new.py"))


def test_patches_in_sequence_see_each_others_result() -> None:
    v0 = module_text()
    v1 = v0.replace("return x + 3\n", "return x + 3  # one\n")
    v2 = v1.replace("return x + 3  # one\n", "return x + 3  # two\n")
    text, _ = apply_change(v0, change(v0, v1, patch="0001-a.patch"))
    text, _ = apply_change(text, change(v1, v2, patch="0002-b.patch"))
    assert text == v2
    with pytest.raises(ConflictError, match="0002-b.patch"):  # the second alone does not apply
        apply_change(v0, change(v1, v2, patch="0002-b.patch"))


def test_nearest_match_wins_when_the_context_repeats() -> None:
    block = "x\ny\nz\n"
    text = block * 5
    hunks = [{"old_start": 7, "old_count": 3, "new_start": 7, "new_count": 3,
              "lines": [[" ", "x\n"], ["-", "y\n"], ["+", "Y\n"], [" ", "z\n"]]}]
    ch = FileChange.from_dict({"root": "r", "path": "p", "patch": "p", "op": "modify", "hunks": hunks}, "fx")
    new, placed = apply_change(text, ch)
    assert placed[0].line == 7 and new == block * 2 + "x\nY\nz\n" + block * 2


def test_damaged_hunk_header_is_a_patch_format_error() -> None:
    data = file_record("a.py", "a\nb\n", "a\nc\n")
    data["hunks"][0]["old_count"] = 5
    with pytest.raises(PatchFormatError, match="header says"):
        FileChange.from_dict(data, "fx")


def test_hunks_from_helper_matches_difflib_positions() -> None:
    hunks = hunks_from("a\nb\n", "a\nb\nc\n")
    assert hunks == [{"old_start": 1, "old_count": 2, "new_start": 1, "new_count": 3,
                      "lines": [[" ", "a\n"], [" ", "b\n"], ["+", "c\n"]]}]


def _as_body(record: dict) -> dict:
    """The same FILE record with every hunk sent as one ``body`` string (as patchkit.request_builder does)."""
    from patchkit.engine.hunks import hunk_body

    hunks = [dict({k: v for k, v in h.items() if k != "lines"}, body=hunk_body(h["lines"]))
             for h in record["hunks"]]
    return dict(record, hunks=hunks)


@pytest.mark.parametrize("before, after", [
    ("a\nb\nc\nd\n", "a\nB\nc\nd\ne\n"),
    ("a\r\nb\x0cx\r\nc\n", "a\r\nb\x0cy\r\nc\n"),  # CR, form feed: split on "\n" only
    ("a\nb\nlast", "a\nB\nlast"),  # no newline at end of file, on both sides
    ("a\nb\n", "a\nb\nend"),  # the new side loses the final newline
])
def test_a_body_hunk_places_and_splits_like_its_lines(before: str, after: str) -> None:
    record = file_record("python/sglang/srt/mod.py", before, after)
    from_lines = FileChange.from_dict(record, "fx")
    from_body = FileChange.from_dict(_as_body(record), "fx")
    assert [h.body for h in from_body.hunks] != [None]
    assert [(h.old, h.new) for h in from_body.hunks] == [(h.old, h.new) for h in from_lines.hunks]
    assert from_body.hunks == from_lines.hunks
    assert apply_change(before, from_body)[0] == after == apply_change(before, from_lines)[0]


def test_a_created_file_from_a_body_keeps_every_byte() -> None:
    text = "first\n+plus in the text\n\\ not a marker\r\nlast"
    record = _as_body(file_record("python/sglang/srt/new.py", None, text))
    assert record["op"] == "create"
    assert apply_change(None, FileChange.from_dict(record, "fx"))[0] == text


def test_a_created_file_is_its_text_whatever_its_lines_hold() -> None:
    """A created file's text is taken from its hunk's body without a line made: the same
    bytes as its lines would give, an unterminated last line and stray "+" included."""
    import random

    rng = random.Random(7)
    for _ in range(500):
        text = "".join(rng.choice(["x", "+", "\\", "\n", "\r", " ", "\n+"])
                       for _ in range(rng.randrange(1, 15)))
        record = _as_body(file_record("python/sglang/srt/new.py", None, text))
        from_body = FileChange.from_dict(record, "fx")
        assert apply_change(None, from_body)[0] == text, repr(text)
        assert from_body.hunks[0].added_text() == "".join(from_body.hunks[0].new)


@pytest.mark.parametrize("body", [" a\n-b\nc\n", " a\n\n+b\n", "+a\n+b\n"])
def test_a_body_with_an_untagged_line_or_wrong_counts_is_a_patch_format_error(body: str) -> None:
    record = {"root": "sglang", "path": "python/x.py", "patch": "0001-x.patch", "op": "modify",
              "hunks": [{"old_start": 1, "old_count": 2, "new_start": 1, "new_count": 2,
                         "body": body}]}
    with pytest.raises(PatchFormatError):
        FileChange.from_dict(record, "fx")


def test_a_block_is_counted_wherever_it_stands_overlaps_and_edges_included() -> None:
    """presence's count of a block (the duplicate check: more copies near a hunk than its old
    side holds) is every place the block stands, as a slide over the lines finds them."""
    import random

    from patchkit.engine.presence import _count

    rnd = random.Random(29)
    for _ in range(3000):
        lines = [rnd.choice("ab\n") for _ in range(rnd.randint(0, 10))]
        block = [rnd.choice("ab\n") for _ in range(rnd.randint(1, 3))]
        slid = sum(1 for i in range(len(lines) - len(block) + 1)
                   if lines[i:i + len(block)] == block)
        assert _count(lines, block) == slid, (lines, block)
