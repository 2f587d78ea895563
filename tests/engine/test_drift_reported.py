"""A recorded fix whose files changed since patchkit wrote them ("drifted", as ``status`` says)
is not silently "already-applied" or "verified": apply names the drifted files, verify fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

from patchkit.engine import run

from .helpers import MOD, SCRIPT, file_record, fix, request, snapshot


def go(op: str, root: Path, fixes: List[Dict[str, Any]], **extra: Any) -> Dict[str, Any]:
    return run(request(op, {"sglang": root}, fixes, **extra))


def two_files(root: Path, **extra: Any) -> Dict[str, Any]:
    mod, script = (root / MOD).read_text(), (root / SCRIPT).read_text()
    return fix("a", [file_record(MOD, mod, mod.replace("return x + 7\n", "return x * 7\n")),
                     file_record(SCRIPT, script, script.replace("launching", "go"))], **extra)


GOOD = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "x * 7", "count": 1, "name": "edit there"}


def test_reapply_of_an_untouched_fix_reports_no_drift(checkout: Path) -> None:
    f = two_files(checkout)
    assert go("apply", checkout, [f])["ok"]
    res = go("apply", checkout, [f])
    assert res["ok"] and res["fixes"][0]["outcome"] == "already-applied"
    assert res["fixes"][0]["drifted"] == []


def test_reapply_of_a_drifted_fix_names_the_drifted_files(checkout: Path) -> None:
    f = two_files(checkout)
    assert go("apply", checkout, [f])["ok"]
    with open(checkout / MOD, "a") as fh:
        fh.write("# hand edit\n")
    (checkout / SCRIPT).unlink()
    tree, state = snapshot(checkout), (checkout / ".patchkit/state.json").read_bytes()
    res = go("apply", checkout, [f])
    assert res["ok"], res["error"]
    [out] = res["fixes"]
    assert out["outcome"] == "already-applied"
    assert out["drifted"] == [{"root": "sglang", "path": MOD, "state": "drifted"},
                              {"root": "sglang", "path": SCRIPT, "state": "missing"}]
    assert snapshot(checkout) == tree and (checkout / ".patchkit/state.json").read_bytes() == state


def test_a_file_a_later_fix_rewrote_is_not_drift(checkout: Path) -> None:
    a = two_files(checkout)
    assert go("apply", checkout, [a])["ok"]
    mid = (checkout / MOD).read_text()
    b = fix("b", [file_record(MOD, mid, mid.replace("return x + 9\n", "return x * 9\n"))], requires=["a"])
    assert go("apply", checkout, [b])["ok"]
    res = go("apply", checkout, [a, b])
    assert [(o["outcome"], o["drifted"]) for o in res["fixes"]] == [("already-applied", [])] * 2
    assert go("verify", checkout, [a, b])["ok"]


def test_verify_fails_on_a_drifted_file_even_when_every_check_passes(checkout: Path) -> None:
    f = two_files(checkout, verification=[GOOD])
    assert go("apply", checkout, [f])["ok"]
    (checkout / SCRIPT).write_text("#!/bin/bash\necho edited by hand\n")
    tree, state = snapshot(checkout), (checkout / ".patchkit/state.json").read_bytes()
    res = go("verify", checkout, [f])
    assert res["error"]["type"] == "DriftError", res["error"]
    message = res["error"]["message"]
    assert "sglang:%s" % SCRIPT in message and "fix a" in message
    assert "patchkit rollback --force a" in message and "nothing was changed" in message
    [out] = res["error"]["details"]["fixes"]
    assert out["outcome"] == "failed"
    assert out["drifted"] == [{"root": "sglang", "path": SCRIPT, "state": "drifted"}]
    assert [(c["name"], c["ok"]) for c in out["verification"]] == [
        ("files as patchkit wrote them", False), ("edit there", True)]
    assert snapshot(checkout) == tree and (checkout / ".patchkit/state.json").read_bytes() == state


def test_verify_with_drift_and_a_failed_check_reports_both(checkout: Path) -> None:
    f = two_files(checkout, verification=[GOOD])
    assert go("apply", checkout, [f])["ok"]
    (checkout / MOD).write_text((checkout / MOD).read_text().replace("x * 7", "x + 7"))
    res = go("verify", checkout, [f])
    assert res["error"]["type"] == "VerificationFailed"
    names = [c["name"] for c in res["error"]["details"]["failures"]]
    assert names == ["files as patchkit wrote them", "edit there"]
    assert "sglang:%s" % MOD in res["error"]["message"]


def test_a_fix_whose_change_was_taken_out_outside_patchkit_is_not_told_to_keep_edits(
        checkout: Path) -> None:
    """`git stash` (or a checkout of the files) took the fix's change out: its files hold what
    they held before it, and verify advised "to keep the edits, make them a new version of
    the fix (refresh)", of edits there are none (a trial). It says so, and the way back,
    which works."""
    from .helpers import git

    f = two_files(checkout)
    assert go("apply", checkout, [f])["ok"]
    git(checkout, "checkout", "--", MOD, SCRIPT)  # the release's own bytes again
    res = go("verify", checkout, [f])
    assert res["error"]["type"] == "DriftError", res["error"]
    said = res["error"]["message"]
    assert "its files hold what they held before it" in said, said
    assert "refresh" not in said and "edits are lost" not in said, said
    assert "patchkit rollback --force a forgets it, writing nothing new, then patchkit apply a" in said
    assert go("rollback", checkout, [f], force=True)["ok"]
    assert go("apply", checkout, [f])["fixes"][0]["outcome"] == "applied"
    assert "x * 7" in (checkout / MOD).read_text()
