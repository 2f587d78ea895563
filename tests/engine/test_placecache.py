"""Placed FILE records kept by content in the user's cache (local targets only).

A repeat apply of the same records to the same bytes replays the byte edits instead of placing
hunks; anything else (other bytes, other records, a damaged cache, no cache directory) is
placed as usual, and every result is the one placement gives.
"""

from __future__ import annotations

import hashlib
import marshal
from pathlib import Path
from typing import Any, Dict, List

import pytest

from patchkit.engine import apply as engine_apply
from patchkit.engine import hunks, run

from .helpers import MOD, SCRIPT, compact, file_record, fix, make_checkout, request, snapshot

UNICODE = "python/sglang/srt/unicode.py"


def two_file_fix(root: Path) -> Dict[str, Any]:
    text = (root / MOD).read_text()
    new = text.replace("return x + 3\n", "return x - 3\n").replace("return x + 30\n", "return 30\n")
    script = (root / SCRIPT).read_text()
    uni = (root / UNICODE).read_text()
    return fix("a", [compact(file_record(MOD, text, new)),
                     compact(file_record(SCRIPT, script, script.replace("launching", "starting"))),
                     compact(file_record(UNICODE, uni, uni.replace("x + 2", "x + 20"))),
                     compact(file_record("python/sglang/srt/new.py", None, "créé = 1\n"))])


def make_tree(base: Path) -> Path:
    root = make_checkout(base, git_repo=False)
    # non-ASCII before and between its three hunks: character and byte offsets differ
    (root / UNICODE).write_text(("# éàü — ünïcödé\n" * 8 + "def g(x):\n    return x + 2\n") * 3)
    return root


def placed(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    calls: List[str] = []
    real = engine_apply.apply_change

    def spy(text, change, edits=None):  # type: ignore[no-untyped-def]
        calls.append(change.path)
        return real(text, change, edits)

    monkeypatch.setattr(engine_apply, "apply_change", spy)
    return calls


def apply_fresh(tmp_path: Path, name: str, cache: Path, f: Dict[str, Any] = None,
                edit=None) -> Dict[str, Any]:  # type: ignore[no-untyped-def,assignment]
    root = make_tree(tmp_path / name)
    if edit:
        edit(root)
    res = run(request("apply", {"sglang": root}, [f or two_file_fix(root)]), cache_dir=str(cache))
    assert res["ok"], res["error"]
    return {"root": root, "res": res}


def results(res: Dict[str, Any]) -> List[Any]:
    return [(f["path"], f["after_sha256"], f["hunks"], f["diff"]) for f in res["fixes"][0]["files"]]


def test_a_repeat_apply_replays_the_edits_and_gives_the_same_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    calls = placed(monkeypatch)
    first = apply_fresh(tmp_path, "one", cache)
    assert sorted(calls) == sorted([MOD, SCRIPT, UNICODE, "python/sglang/srt/new.py"])
    assert list((cache / "placed").glob("*/*"))  # one entry for the fix
    calls.clear()
    second = apply_fresh(tmp_path, "two", cache)
    assert calls == []  # nothing placed: every record replayed
    assert results(second["res"]) == results(first["res"])
    assert snapshot(second["root"]).keys() == snapshot(first["root"]).keys()
    for rel, value in snapshot(first["root"]).items():
        assert snapshot(second["root"])[rel][:3] == value[:3], rel
    assert (second["root"] / UNICODE).read_text().count("x + 20") == 3
    assert len(second["res"]["fixes"][0]["files"][2]["hunks"]) == 3
    # and the replayed apply rolls back like any other
    f = two_file_fix(make_tree(tmp_path / "three"))
    assert run(request("rollback", {"sglang": second["root"]}, [f]))["ok"]
    assert "x + 20" not in (second["root"] / UNICODE).read_text()


def test_a_file_with_other_bytes_is_placed_again(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first = apply_fresh(tmp_path, "one", cache)
    calls = placed(monkeypatch)

    def shifted(root: Path) -> None:  # two lines on top: the same hunks, two lines lower
        (root / MOD).write_text("# a\n# b\n" + (root / MOD).read_text())

    f = two_file_fix(make_tree(tmp_path / "plain"))
    second = apply_fresh(tmp_path, "two", cache, f, shifted)
    assert calls == [MOD]  # only the file whose bytes differ
    offsets = [h["offset"] for h in second["res"]["fixes"][0]["files"][0]["hunks"]]
    assert offsets == [2, 2]
    assert first["res"]["fixes"][0]["files"][0]["hunks"][0]["offset"] == 0
    text = (second["root"] / MOD).read_text()
    assert text.startswith("# a\n# b\n") and "return x - 3\n" in text and "return 30\n" in text


def test_a_damaged_cache_is_placed_again_never_replayed_wrong(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first = apply_fresh(tmp_path, "one", cache)
    entry = next((cache / "placed").glob("*/*"))
    records = marshal.loads(entry.read_bytes())
    for i, (before, after, edits, where, diff) in records.items():  # every edit's bytes altered
        records[i] = (before, after, [(s, e, new + b"# tampered\n") for s, e, new in edits], where,
                      diff)
    entry.write_bytes(marshal.dumps(records))
    calls = placed(monkeypatch)
    second = apply_fresh(tmp_path, "two", cache)
    assert len(calls) == 4  # no record reproduced its after-bytes: all placed
    assert results(second["res"]) == results(first["res"])
    entry.write_bytes(b"not marshal")
    calls.clear()
    third = apply_fresh(tmp_path, "three", cache)
    assert len(calls) == 4 and results(third["res"]) == results(first["res"])


def test_other_records_never_meet_the_entry_and_no_cache_dir_keeps_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    apply_fresh(tmp_path, "one", cache)
    calls = placed(monkeypatch)
    root = make_tree(tmp_path / "two")
    f = two_file_fix(root)
    f["files"][0]["hunks"][0]["body"] = f["files"][0]["hunks"][0]["body"].replace(
        "+    return x - 3\n", "+    return x - 4\n")
    assert run(request("apply", {"sglang": root}, [f]), cache_dir=str(cache))["ok"]
    assert len(calls) == 4 and "return x - 4\n" in (root / MOD).read_text()
    assert len(list((cache / "placed").glob("*/*"))) == 2  # its own entry
    other = tmp_path / "nocache"
    root = make_tree(tmp_path / "three")
    assert run(request("apply", {"sglang": root}, [two_file_fix(root)]))["ok"]
    assert not other.exists() and len(list((cache / "placed").glob("*/*"))) == 2


def test_a_malformed_hunk_is_refused_before_any_write_even_with_a_warm_cache(
        tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    apply_fresh(tmp_path, "one", cache)
    root = make_tree(tmp_path / "two")
    before = snapshot(root, skip_state=False)
    f = two_file_fix(root)
    f["files"][2]["hunks"][0]["old_count"] += 1  # a damaged header: another key, checked
    res = run(request("apply", {"sglang": root}, [f]), cache_dir=str(cache))
    assert not res["ok"] and res["error"]["type"] == "PatchFormatError"
    assert snapshot(root, skip_state=False) == before


def test_record_and_replay_round_trip_on_crlf_and_no_final_newline() -> None:
    from patchkit.engine import placecache
    from patchkit.engine.hunks import FileChange

    before = "a\r\nb\r\nç\r\nd".encode("utf-8")
    after = "a\r\nB\r\nç\r\nd!".encode("utf-8")
    rec = compact(file_record("f.txt", before.decode(), after.decode()))
    change = FileChange.from_dict(rec, "fx", lazy=True)
    edits: List[Any] = []
    new, where = hunks.apply_change(before.decode(), change, edits)
    assert new is not None and new.encode() == after
    cached = placecache.record(before, before.decode(), after, edits, where, None)
    assert cached is not None
    got = placecache.replay(cached, change, before)
    assert got is not None and got[0] == after and got[1] == where and got[2] is None
    assert placecache.replay(cached, change, before + b"x") is None
    assert cached[4] is None  # no diff given: none kept
    assert hashlib.sha256(after).hexdigest() == cached[1]
