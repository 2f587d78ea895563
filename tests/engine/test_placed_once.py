"""The not-already-added check places a file's first record to look around each hunk; that
placement is the one apply writes (no second placement). What it answers stays the same: a
second record of the same file is checked against the file as read, a conflict is raised
where the placement would raise it, a refusal of one fix leaves the files of the next as
they were, and a refused precondition explains more than a conflict."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

from patchkit.engine import run

from .helpers import MOD, content_snapshot, file_record, fix, make_checkout, request

BLOCK = "    y = compute(a, b)\n    z = combine(y, a)\n"
BASE = "".join("line %d\n" % i for i in range(1, 60))


def _tree(tmp_path: Path, text: str) -> Path:
    root = make_checkout(tmp_path)
    (root / MOD).write_text(text)
    return root


def _apply(root: Path, fixes: List[Dict[str, Any]], **extra: Any) -> Dict[str, Any]:
    return run(request("apply", {"sglang": root}, fixes, git=False, **extra))


def _kinds(result: Dict[str, Any]) -> List[str]:
    return [f["kind"] for f in result["error"]["details"]["failures"]]


def test_a_file_of_several_records_is_placed_and_written_as_each_says(tmp_path: Path) -> None:
    """Three records of one file: the first placed by the check, the others after it; the
    result and the hunks' reported lines are those of placing each in turn."""
    root = _tree(tmp_path, BASE)
    one = BASE.replace("line 10\n", "line 10 a\n")
    two = one.replace("line 30\n", "line 30\n" + BLOCK)
    three = two.replace("line 50\n", "")
    records = [file_record(MOD, BASE, one, patch="0001-a.patch"),
               file_record(MOD, one, two, patch="0002-b.patch"),
               file_record(MOD, two, three, patch="0003-c.patch")]
    result = _apply(root, [fix("a", records)])
    assert result["ok"], result["error"]
    assert (root / MOD).read_text() == three
    [entry] = result["fixes"][0]["files"]
    assert [(h["patch"], h["line"]) for h in entry["hunks"]] == [
        ("0001-a.patch", 7), ("0002-b.patch", 28), ("0003-c.patch", 49)]


def test_a_later_record_adding_a_block_already_in_the_file_is_refused(tmp_path: Path) -> None:
    """The second record of the file adds a block the file (as read) already holds nearby:
    refused, though the first record (placed by the check) is fine."""
    text = BASE.replace("line 20\n", "line 20\n" + BLOCK)
    root = _tree(tmp_path, text)
    one = text.replace("line 5\n", "line 5 a\n")
    two = one.replace("line 24\n", "line 24\n" + BLOCK)
    before = content_snapshot(root)
    result = _apply(root, [fix("a", [file_record(MOD, text, one, patch="0001-a.patch"),
                                     file_record(MOD, one, two, patch="0002-b.patch")])])
    assert not result["ok"] and _kinds(result) == ["not-already-added"], result["error"]
    assert "0002-b.patch" in result["error"]["message"]
    assert content_snapshot(root) == before


def test_a_refused_fix_leaves_the_next_fix_its_file_as_read(tmp_path: Path) -> None:
    """Fix a is refused (a second copy); fix b changes the same file: it is checked and
    placed on the file as it is, not on a's placement."""
    text = BASE.replace("line 20\n", "line 20\n" + BLOCK)
    root = _tree(tmp_path, text)
    dup = text.replace("line 23\n", "line 23\n" + BLOCK)
    other = text.replace("line 40\n", "line 40 b\n")
    result = _apply(root, [fix("a", [file_record(MOD, text, dup)]),
                           fix("b", [file_record(MOD, text, other, patch="0001-b.patch")])])
    assert not result["ok"] and _kinds(result) == ["not-already-added"], result["error"]
    assert [f["name"] for f in result["error"]["details"]["fixes"]] == ["a", "b"]
    forced = _apply(root, [fix("b", [file_record(MOD, text, other, patch="0001-b.patch")])])
    assert forced["ok"] and (root / MOD).read_text() == other


def test_a_conflict_after_a_refusal_is_reported_as_the_refusal(tmp_path: Path) -> None:
    """The fix's first file does not apply (its context is gone), its second adds a block
    already there: the refused precondition is the error, not the conflict; with --force
    (no check) the conflict is."""
    text = BASE.replace("line 20\n", "line 20\n" + BLOCK)
    root = _tree(tmp_path, text)
    other = "scripts/other.py"
    (root / other).write_text(BASE)
    stale = BASE.replace("line 40\n", "line forty\n")
    records = [file_record(other, stale, stale.replace("line forty\n", "line 40!\n")),
               file_record(MOD, text, text.replace("line 23\n", "line 23\n" + BLOCK))]
    before = content_snapshot(root)
    refused = _apply(root, [fix("a", records)])
    assert not refused["ok"] and refused["error"]["type"] == "PreconditionFailed", refused["error"]
    assert _kinds(refused) == ["not-already-added"]
    forced = _apply(root, [fix("a", records)], force=True)
    assert not forced["ok"] and forced["error"]["type"] == "ConflictError", forced["error"]
    assert forced["error"]["details"]["path"] == other
    assert content_snapshot(root) == before


def test_a_conflict_of_the_checked_record_is_raised_where_it_was(tmp_path: Path) -> None:
    """The check's placement stops at a hunk that does not apply; the conflict is raised
    when the fix is placed, naming that hunk, and nothing is written."""
    root = _tree(tmp_path, BASE)
    stale = BASE.replace("line 30\n", "line thirty\n")
    after = stale.replace("line 5\n", "line 5 a\n").replace("line thirty\n", "line 30!\n")
    before = content_snapshot(root)
    result = _apply(root, [fix("a", [file_record(MOD, stale, after)])])
    assert not result["ok"] and result["error"]["type"] == "ConflictError", result["error"]
    assert result["error"]["details"]["hunk"] == 2
    assert content_snapshot(root) == before
