"""Crash recovery: the engine SIGKILLs itself at every fault point; the next run repairs it.

Before the commit point (state.json) the next run must leave the tree byte-identical to
before the killed run; after it, the transaction must be complete.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from patchkit.engine import run

from .helpers import content_snapshot, git, request
from .test_transaction import series

DRIVER = ("import sys, json; from patchkit.engine import run; "
          "print(json.dumps(run(json.loads(sys.stdin.read()))))")

BEFORE_COMMIT = ["backup:1", "backup:2", "journal:1", "write:1", "write:2", "rename:1", "rename:3",
                 "action:1", "verify:1", "state:1"]


def killed_run(req: Dict[str, Any], fault: str) -> None:
    env = dict(os.environ, PATCHKIT_FAULT=fault)
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(req), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""


def leftovers(root: Path) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.patchkit-tmp"))


def status_after_crash(root: Path, fix: Dict[str, Any], op: str) -> Dict[str, Any]:
    res = run(request("status", {"sglang": root}, [fix]))
    assert res["ok"], res["error"]
    assert len(res["recovered"]) == 1
    assert res["recovered"][0]["op"] == op and res["recovered"][0]["fixes"] == ["a"]
    assert res["status"]["journal"] is None
    assert not (root / ".patchkit/journal.json").exists()
    assert os.listdir(root / ".patchkit/txn") == []
    assert leftovers(root) == []
    again = run(request("status", {"sglang": root}, [fix]))
    assert again["recovered"] == []
    return res


@pytest.mark.parametrize("fault", BEFORE_COMMIT + ["cleanup:1"])
def test_killed_apply_is_undone_or_completed(checkout: Path, fault: str) -> None:
    f = series(checkout, verification=[{"kind": "python-syntax", "root": "sglang",
                                        "path": "python/sglang/srt/mod.py"}])
    original = content_snapshot(checkout)
    killed_run(request("apply", {"sglang": checkout}, [f]), fault)
    res = status_after_crash(checkout, f, "apply")
    entry = res["status"]["fixes"][0]
    if fault in BEFORE_COMMIT:
        assert res["recovered"][0]["outcome"] == "rolled-back"
        assert content_snapshot(checkout) == original
        assert git(checkout, "status", "--porcelain") == ""
        assert entry["state"] == "not-applied"
        history = (checkout / ".patchkit/history.jsonl").read_text()
        assert '"event": "recovered"' in history
    else:
        assert res["recovered"][0]["outcome"] == "completed"
        assert entry["state"] == "applied"
        state = json.loads((checkout / ".patchkit/state.json").read_text())
        assert (checkout / ".patchkit" / state["fixes"][0]["files"][0]["backup"]).exists()
        assert run(request("rollback", {"sglang": checkout}, [f]))["ok"]
        assert content_snapshot(checkout) == original
    assert run(request("apply", {"sglang": checkout}, [f]))["ok"]  # the target is usable again


ROLLBACK_BEFORE_COMMIT = ["backup:1", "journal:1", "write:1", "write:3", "rename:2", "action:1", "state:1"]


@pytest.mark.parametrize("fault", ROLLBACK_BEFORE_COMMIT + ["cleanup:1"])
def test_killed_rollback_is_undone_or_completed(checkout: Path, fault: str) -> None:
    f = series(checkout)
    original = content_snapshot(checkout)
    assert run(request("apply", {"sglang": checkout}, [f]))["ok"]
    applied = content_snapshot(checkout)
    killed_run(request("rollback", {"sglang": checkout}, [f]), fault)
    res = status_after_crash(checkout, f, "rollback")
    entry = res["status"]["fixes"][0]
    if fault in ROLLBACK_BEFORE_COMMIT:
        assert res["recovered"][0]["outcome"] == "rolled-back"
        assert content_snapshot(checkout) == applied
        assert entry["state"] == "applied"
        assert run(request("rollback", {"sglang": checkout}, [f]))["ok"]
    else:
        assert res["recovered"][0]["outcome"] == "completed"
        assert entry["state"] == "not-applied"
        assert not (checkout / ".patchkit/backups/a").exists()
    assert content_snapshot(checkout) == original
    assert git(checkout, "status", "--porcelain") == ""
