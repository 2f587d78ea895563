"""Upgrading an applied fix (issue 13, item 8): ``apply`` of version 3 where version 1 is
applied takes v1 out and puts v3 in as one transaction, so there is never a window with no
fix, and a failure leaves v1 exactly in place. And ``status`` says ``outdated`` (item 9)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from patchkit.engine import run

from .helpers import MOD, content_snapshot, file_record, fix, module_text, request, snapshot

NEW = "python/sglang/srt/added/helper.py"


def v1(root: Path) -> Dict[str, Any]:
    old = (root / MOD).read_text()
    return fix("a", [file_record(MOD, old, old.replace("return x + 3\n", "return x + 3000\n")),
                     file_record(NEW, None, "helper = 1\n")], version=1)


def v3(root: Path, **extra: Any) -> Dict[str, Any]:
    """Written against the release, as a new version of a fix is: other lines, no new file."""
    old = module_text()
    return fix("a", [file_record(MOD, old, old.replace("return x + 5\n", "return x + 5000\n"))],
               version=3, **extra)


def go(op: str, root: Path, f: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    return run(request(op, {"sglang": root}, [f], **extra))


def test_apply_of_a_newer_version_upgrades_in_one_transaction(checkout: Path) -> None:
    pristine = content_snapshot(checkout)
    assert go("apply", checkout, v1(checkout))["ok"]
    res = go("apply", checkout, v3(checkout))
    assert res["ok"], res["error"]
    out = res["fixes"][0]
    assert (out["outcome"], out["from_version"], out["version"]) == ("upgraded", 1, 3)
    text = (checkout / MOD).read_text()
    assert "return x + 5000\n" in text and "return x + 3000\n" not in text  # v1 out, v3 in
    assert not (checkout / NEW).exists() and not (checkout / NEW).parent.exists()
    history = (checkout / ".patchkit/history.jsonl").read_text().splitlines()
    assert len(history) == 2  # one transaction for the upgrade
    state = json.loads((checkout / ".patchkit/state.json").read_text())
    assert [(f["name"], f["version"]) for f in state["fixes"]] == [("a", 3)]
    # v3's backups hold the release's bytes, not v1's: its rollback gives the pristine tree
    assert go("rollback", checkout, v3(checkout))["ok"]
    assert content_snapshot(checkout) == pristine


def test_failed_upgrade_leaves_the_old_version_in_place(checkout: Path) -> None:
    assert go("apply", checkout, v1(checkout))["ok"]
    tree = snapshot(checkout, skip_state=False)
    bad = v3(checkout, verification=[{"kind": "grep", "root": "sglang", "path": MOD,
                                      "pattern": "no such line", "present": True}])
    res = go("apply", checkout, bad)
    assert not res["ok"] and res["error"]["type"] == "VerificationFailed"
    assert snapshot(checkout, skip_state=False) == tree  # v1, its state and backups, untouched


def test_dry_run_of_an_upgrade_writes_nothing(checkout: Path) -> None:
    assert go("apply", checkout, v1(checkout))["ok"]
    tree = snapshot(checkout, skip_state=False)
    res = go("apply", checkout, v3(checkout), dry_run=True)
    assert res["ok"] and res["fixes"][0]["outcome"] == "would-upgrade"
    assert res["fixes"][0]["from_version"] == 1
    assert snapshot(checkout, skip_state=False) == tree


def test_upgrade_of_a_drifted_version_is_refused_unless_forced(checkout: Path) -> None:
    assert go("apply", checkout, v1(checkout))["ok"]
    with open(checkout / MOD, "a") as fh:
        fh.write("# hand edit\n")
    tree = snapshot(checkout, skip_state=False)
    res = go("apply", checkout, v3(checkout))
    assert res["error"]["type"] == "DriftError" and "--force" in res["error"]["message"]
    assert snapshot(checkout, skip_state=False) == tree
    res = go("apply", checkout, v3(checkout), force=True)
    assert res["ok"] and res["fixes"][0]["outcome"] == "upgraded"
    assert "# hand edit" not in (checkout / MOD).read_text()


def test_upgrade_under_a_later_fix_on_the_same_file_is_refused(checkout: Path) -> None:
    assert go("apply", checkout, v1(checkout))["ok"]
    mid = (checkout / MOD).read_text()
    later = fix("b", [file_record(MOD, mid, mid.replace("return x + 7\n", "return x + 77\n"))])
    assert go("apply", checkout, later)["ok"]
    tree = snapshot(checkout, skip_state=False)
    res = go("apply", checkout, v3(checkout))
    assert res["error"]["type"] == "PreconditionFailed"
    assert "patchkit rollback b" in res["error"]["message"]
    assert snapshot(checkout, skip_state=False) == tree


def test_status_says_outdated_when_the_catalog_has_another_version(checkout: Path) -> None:
    assert go("apply", checkout, v1(checkout))["ok"]
    res = go("status", checkout, v3(checkout))
    entry = res["status"]["fixes"][0]
    assert (entry["state"], entry["version"], entry["catalog_version"]) == ("outdated", 1, 3)
    res = go("status", checkout, v1(checkout))
    assert res["status"]["fixes"][0]["state"] == "applied"


def test_upgrade_over_edits_that_are_the_new_version_needs_no_force(checkout: Path) -> None:
    """The files were edited by hand into the new version's result (the edit `refresh` then
    made the new version of, or the same hand edit on another host): the drift loses nothing,
    so the upgrade records the new version without --force; its rollback still gives the
    release's bytes. An edit that is not the new version's stays refused."""
    pristine = content_snapshot(checkout)
    assert go("apply", checkout, v1(checkout))["ok"]
    (checkout / MOD).write_text(module_text().replace("return x + 5\n", "return x + 5000\n"))
    (checkout / NEW).unlink()  # v3 does not create it: the hand edit took it out too
    (checkout / NEW).parent.rmdir()
    edited = content_snapshot(checkout)
    seen = go("status", checkout, v3(checkout))["status"]["fixes"][0]
    assert (seen["state"], seen["version"], seen["catalog_version"]) == ("outdated", 1, 3)
    assert "hold v3's change already" in seen["detail"] and "patchkit apply a" in seen["detail"]
    res = go("apply", checkout, v3(checkout))
    assert res["ok"], res["error"]
    out = res["fixes"][0]
    assert (out["outcome"], out["from_version"], out["version"]) == ("upgraded", 1, 3)
    assert "already" in out["detail"] and "v3" in out["detail"]
    assert content_snapshot(checkout) == edited
    state = json.loads((checkout / ".patchkit/state.json").read_text())
    assert [(f["name"], f["version"]) for f in state["fixes"]] == [("a", 3)]
    assert go("status", checkout, v3(checkout))["status"]["fixes"][0]["state"] == "applied"
    assert go("rollback", checkout, v3(checkout))["ok"]
    assert content_snapshot(checkout) == pristine


def test_upgrade_over_part_of_the_new_version_is_still_refused(checkout: Path) -> None:
    assert go("apply", checkout, v1(checkout))["ok"]
    # v1's line taken out by hand, v3's not put in: upgrading would not lose it, but the
    # edit is not v3's result, so it is drift like any other
    (checkout / MOD).write_text((checkout / MOD).read_text().replace("return x + 3000\n",
                                                                    "return x + 3\n"))
    tree = snapshot(checkout, skip_state=False)
    assert go("status", checkout, v3(checkout))["status"]["fixes"][0]["state"] == "drifted"
    res = go("apply", checkout, v3(checkout))
    assert res["error"]["type"] == "DriftError"
    assert snapshot(checkout, skip_state=False) == tree


def test_verify_of_files_holding_the_next_version_says_to_apply_it(checkout: Path) -> None:
    """verify fails (the record is v1's), and says the way out is apply, not a rollback
    --force or another refresh."""
    assert go("apply", checkout, v1(checkout))["ok"]
    (checkout / MOD).write_text(module_text().replace("return x + 5\n", "return x + 5000\n"))
    (checkout / NEW).unlink()
    res = go("verify", checkout, v3(checkout))
    assert res["error"]["type"] == "DriftError"
    [check] = res["error"]["details"]["failures"]
    assert "hold v3's change" in check["detail"] and "patchkit apply a records v3" in check["detail"]
    assert "rollback --force" not in check["detail"]
