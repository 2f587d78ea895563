"""Two fixes that patch the same file: the file must hold what the *last* fix to touch it wrote.

Fix A's own after-hash is history once fix B (applied later) changed the file again, so status
must not call A drifted, and rollback checks B's after-hash for B, and refuses to roll A back
from under B unless B goes too (first, or in the same request).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from patchkit.engine import run

from .helpers import MOD, SCRIPT, file_record, fix, full_snapshot, git, request


def two_fixes(root: Path) -> Tuple[Dict[str, Any], Dict[str, Any], str]:
    """A changes f7 in mod.py (and the launch script); B, independent of A, changes f9 in the
    same file, starting from A's result. Returns (a, b, original text)."""
    v0 = (root / MOD).read_text()
    v1 = v0.replace("return x + 7\n", "return x * 7\n")
    v2 = v1.replace("return x + 9\n", "return x * 9\n")
    script = (root / SCRIPT).read_text()
    a = fix("a", [file_record(MOD, v0, v1), file_record(SCRIPT, script, script.replace("launching", "go"))])
    b = fix("b", [file_record(MOD, v1, v2, patch="0001-b.patch")])
    return a, b, v0


def go(op: str, root: Path, fixes: List[Dict[str, Any]], **extra: Any) -> Dict[str, Any]:
    return run(request(op, {"sglang": root}, fixes, **extra))


def states(root: Path, fixes: List[Dict[str, Any]]) -> Dict[str, Tuple[str, List[str]]]:
    res = go("status", root, fixes)
    assert res["ok"], res["error"]
    return {f["name"]: (f["state"], [x["state"] for x in f["files"]]) for f in res["status"]["fixes"]}


@pytest.fixture(params=["separately", "together"])
def applied(request: pytest.FixtureRequest, checkout: Path) -> Tuple[Dict[str, Any], Dict[str, Any], str]:
    a, b, v0 = two_fixes(checkout)
    if request.param == "separately":
        assert go("apply", checkout, [a])["ok"]
        assert go("apply", checkout, [b])["ok"]
    else:
        assert go("apply", checkout, [a, b])["ok"]
    return a, b, v0


def test_status_of_a_file_two_fixes_patched_is_not_drift(checkout: Path, applied: Any) -> None:
    a, b, _ = applied
    assert states(checkout, [a, b]) == {"a": ("applied", ["ok", "ok"]), "b": ("applied", ["ok"])}
    # a change nobody recorded is drift, for every fix whose file it is
    with open(checkout / MOD, "a") as fh:
        fh.write("# hand edit\n")
    assert states(checkout, [a, b]) == {"a": ("drifted", ["drifted", "ok"]), "b": ("drifted", ["drifted"])}


def test_a_file_back_at_an_earlier_fix_s_bytes_is_drift(checkout: Path, applied: Any) -> None:
    """Someone undid B's change by hand: the file holds A's after-hash, which nobody wrote last."""
    a, b, _ = applied
    (checkout / MOD).write_text((checkout / MOD).read_text().replace("return x * 9\n", "return x + 9\n"))
    assert states(checkout, [a, b]) == {"a": ("drifted", ["drifted", "ok"]), "b": ("drifted", ["drifted"])}
    res = go("rollback", checkout, [b])
    assert res["error"]["type"] == "DriftError" and "(fix b)" in res["error"]["message"]
    v2 = (checkout / MOD).read_text().replace("return x + 9\n", "return x * 9\n")
    c = fix("c", [file_record(MOD, v2, v2.replace("return x + 3\n", "return 3\n"), patch="0001-c.patch")])
    res = go("apply", checkout, [c])
    assert res["error"]["type"] == "PreconditionFailed" and "uncommitted changes" in res["error"]["message"]


def test_rolling_back_the_last_fix_then_the_first(checkout: Path, applied: Any) -> None:
    a, b, v0 = applied
    res = go("rollback", checkout, [b])
    assert res["ok"], res["error"]
    assert (checkout / MOD).read_text() == v0.replace("return x + 7\n", "return x * 7\n")
    assert states(checkout, [a, b]) == {"a": ("applied", ["ok", "ok"]), "b": ("not-applied", [])}
    res = go("rollback", checkout, [a])
    assert res["ok"], res["error"]
    assert (checkout / MOD).read_text() == v0
    assert git(checkout, "status", "--porcelain") == ""


def test_rolling_back_the_first_fix_alone_is_refused_naming_the_later_one(checkout: Path, applied: Any) -> None:
    a, b, _ = applied
    tree = full_snapshot(checkout)
    res = go("rollback", checkout, [a], force=True)  # not drift: force does not override it
    assert res["error"]["type"] == "PreconditionFailed"
    message = res["error"]["message"]
    assert "fix b was applied after a and also changed sglang:%s" % MOD in message
    assert "roll the later fix back first or together" in message and "patchkit rollback b a" in message
    assert res["error"]["details"]["blockers"] == [{"fix": "a", "changed_after_by": "b",
                                                    "files": ["sglang:%s" % MOD]}]
    assert full_snapshot(checkout) == tree


@pytest.mark.parametrize("order", ["ab", "ba"])
def test_rolling_back_both_in_one_request_in_any_order(checkout: Path, applied: Any, order: str) -> None:
    a, b, v0 = applied
    fixes = {"a": a, "b": b}
    res = go("rollback", checkout, [fixes[n] for n in order])
    assert res["ok"], res["error"]
    assert [f["name"] for f in res["fixes"]] == list(order)
    assert {f["outcome"] for f in res["fixes"]} == {"rolled-back"}
    assert (checkout / MOD).read_text() == v0
    assert git(checkout, "status", "--porcelain") == ""
    assert states(checkout, [a, b]) == {"a": ("not-applied", []), "b": ("not-applied", [])}


def test_drift_on_a_shared_file_names_the_last_fix(checkout: Path, applied: Any) -> None:
    a, b, v0 = applied
    with open(checkout / MOD, "a") as fh:
        fh.write("# hand edit\n")
    tree = full_snapshot(checkout)
    res = go("rollback", checkout, [a, b])
    assert res["error"]["type"] == "DriftError"
    assert [(d["fix"], d["path"]) for d in res["error"]["details"]["drifted"]] == [("b", MOD)]
    assert full_snapshot(checkout) == tree
    res = go("rollback", checkout, [a, b], force=True)
    assert res["ok"], res["error"]
    assert (checkout / MOD).read_text() == v0
