"""The undo op (docs/state.md, "Undo"): the target put back exactly as it was before the last
apply, which a failed --health-cmd asks for. Undoing by a rollback lost the old version of an
upgraded fix (the host had neither) and the record of a lost fix applied again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

from patchkit.engine import run

from .helpers import MOD, content_snapshot, file_record, fix, module_text, request, snapshot
from .test_upgrade import NEW, v1, v3

DRIVER = ("import sys, json; from patchkit.engine import run; "
          "print(json.dumps(run(json.loads(sys.stdin.read()))))")


def go(op: str, root: Path, *fixes: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    return run(request(op, {"sglang": root}, list(fixes), **extra))


def kept(root: Path) -> Dict[str, Any]:
    """The tree with its records and backups: what "as it was before" means (the history, the
    lock, the undo point and the id of the last transaction aside)."""
    out = {k: v[:3] if v[0] == "file" else v for k, v in snapshot(root, skip_state=False).items()
           if not k.startswith((".patchkit/history", ".patchkit/undo", ".patchkit/lock",
                                ".patchkit/txn"))}
    if (root / ".patchkit/state.json").exists():
        out[".patchkit/state.json"] = json.loads((root / ".patchkit/state.json").read_text())["fixes"]
    return out


def other(root: Path) -> Dict[str, Any]:
    return fix("b", [file_record("python/sglang/srt/other.py", None, "other = 1\n")])


def test_undo_of_an_upgrade_puts_the_old_version_back(checkout: Path) -> None:
    pristine = content_snapshot(checkout)
    assert go("apply", checkout, v1(checkout))["ok"]
    before = kept(checkout)
    res = go("apply", checkout, v3(checkout))
    assert res["fixes"][0]["outcome"] == "upgraded" and res["txn"]
    undone = go("undo", checkout, txn=res["txn"])
    assert undone["ok"], undone["error"]
    out = undone["fixes"][0]
    assert (out["name"], out["outcome"], out["version"], out["from_version"]) == ("a", "undone", 1, 3)
    assert kept(checkout) == before  # v1's files, its record and its backups, byte for byte
    assert "undo" not in os.listdir(checkout / ".patchkit")  # the point is used up
    assert go("rollback", checkout, v1(checkout))["ok"]  # and v1's backups are the release's
    assert content_snapshot(checkout) == pristine


def test_undo_of_a_first_apply_leaves_nothing_of_it(checkout: Path) -> None:
    before = kept(checkout)
    res = go("apply", checkout, v1(checkout))
    assert (checkout / NEW).exists()
    undone = go("undo", checkout, txn=res["txn"])
    assert undone["ok"], undone["error"]
    assert undone["fixes"][0]["version"] is None
    assert not (checkout / NEW).parent.exists()  # the directory it made, removed
    assert {k: v for k, v in kept(checkout).items() if not k.startswith(".patchkit")} == before
    assert json.loads((checkout / ".patchkit/state.json").read_text())["fixes"] == []
    assert not (checkout / ".patchkit/backups/a").exists()
    history = [json.loads(x)["event"] for x in (checkout / ".patchkit/history.jsonl").read_text().splitlines()]
    assert history == ["apply", "undo"]


def test_undo_is_refused_when_another_change_was_committed_since(checkout: Path) -> None:
    first = go("apply", checkout, v1(checkout))
    assert go("apply", checkout, other(checkout))["ok"]
    tree = snapshot(checkout, skip_state=False)
    second = json.loads((checkout / ".patchkit/state.json").read_text())["txn"]
    res = go("undo", checkout, txn=first["txn"])
    assert not res["ok"] and res["error"]["type"] == "PreconditionFailed"
    assert f"it is not the last change there (the last is {second})" in res["error"]["message"]
    assert snapshot(checkout, skip_state=False) == tree
    rolled = go("rollback", checkout, other(checkout))  # a rollback's point replaces it
    assert rolled["ok"] and rolled["txn"] != second
    assert go("undo", checkout, txn=second)["error"]["type"] == "PreconditionFailed"


def test_undo_is_refused_when_a_file_changed_since(checkout: Path) -> None:
    res = go("apply", checkout, v1(checkout))
    (checkout / MOD).write_text((checkout / MOD).read_text() + "# edited\n")
    tree = snapshot(checkout, skip_state=False)
    undone = go("undo", checkout, txn=res["txn"])
    assert not undone["ok"] and undone["error"]["type"] == "ConcurrentChange"
    assert f"sglang:{MOD} changed since" in undone["error"]["message"]
    assert snapshot(checkout, skip_state=False) == tree


def test_an_undo_killed_half_way_is_rolled_back_and_can_run_again(checkout: Path) -> None:
    assert go("apply", checkout, v1(checkout))["ok"]
    before = kept(checkout)
    res = go("apply", checkout, v3(checkout))
    upgraded = kept(checkout)
    req = request("undo", {"sglang": checkout}, [], txn=res["txn"])
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(req),
                          env=dict(os.environ, PATCHKIT_FAULT="rename:2"), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert go("status", checkout, v3(checkout))["ok"]  # the recovery puts the upgrade back
    assert kept(checkout) == upgraded
    assert go("undo", checkout, txn=res["txn"])["ok"]
    assert kept(checkout) == before


def test_an_apply_with_nothing_to_write_names_no_transaction(checkout: Path) -> None:
    assert "txn" in go("apply", checkout, fix("c", [file_record(MOD, module_text(), module_text()
                                                              .replace("x + 7\n", "x + 70\n"))]))
    assert "txn" not in go("apply", checkout, fix("c", [file_record(MOD, module_text(), module_text()
                                                                   .replace("x + 7\n", "x + 70\n"))]))
