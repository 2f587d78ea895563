"""A target written by an earlier release (tests/samples/state-v1, made by its make_sample.py
with the engine before the typed records) is read, recovered and rolled back by this one:
the on-disk formats of docs/state.md did not change."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Dict, List

from patchkit.engine import run

from .helpers import request

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "state-v1"


def tree_bytes(root: Path) -> Dict[str, str]:
    """Every file outside ``.patchkit/`` with the sha256 of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".patchkit" not in p.parts}


def sample(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.copytree(SAMPLE / name, root)
    return root


def fixes(*names: str) -> List[Dict[str, Any]]:
    every = {f["name"]: f for f in json.loads((SAMPLE / "fixes.json").read_text())}
    return [every[n] for n in names]


def states(res: Dict[str, Any]) -> Dict[str, str]:
    assert res["ok"], res["error"]
    return {f["name"]: f["state"] for f in res["status"]["fixes"]}


def test_an_earlier_release_s_target_is_read_and_rolled_back(tmp_path: Path) -> None:
    root = sample(tmp_path, "applied")
    assert tree_bytes(root) != tree_bytes(SAMPLE / "original")
    status = run(request("status", {"sglang": root}, fixes("alpha", "beta")))
    assert states(status) == {"alpha": "applied", "beta": "applied"}
    assert status["recovered"] == []
    res = run(request("rollback", {"sglang": root}, fixes("beta")))
    assert res["ok"], res["error"]
    assert [f["outcome"] for f in res["fixes"]] == ["rolled-back"]
    assert not (root / "python/sglang/srt/extra").exists()  # the directory beta created
    res = run(request("rollback", {"sglang": root}, fixes("alpha")))
    assert res["ok"], res["error"]
    assert tree_bytes(root) == tree_bytes(SAMPLE / "original")
    state = json.loads((root / ".patchkit/state.json").read_text())
    assert state["fixes"] == []
    assert not (root / ".patchkit/backups/alpha").exists()


def test_an_earlier_release_s_interrupted_apply_is_recovered(tmp_path: Path) -> None:
    root = sample(tmp_path, "interrupted")
    assert (root / ".patchkit/journal.json").exists()
    status = run(request("status", {"sglang": root}, fixes("alpha", "beta")))
    assert [(r["op"], r["fixes"], r["outcome"]) for r in status["recovered"]] == [
        ("apply", ["beta"], "rolled-back")]
    assert states(status) == {"alpha": "applied", "beta": "not-applied"}
    assert not (root / ".patchkit/journal.json").exists()
    assert not (root / ".patchkit/lock-holder.json").exists()
    assert list((root / ".patchkit/txn").iterdir()) == []
    assert not list(root.rglob("*.patchkit-tmp"))
    res = run(request("rollback", {"sglang": root}, fixes("alpha")))
    assert res["ok"], res["error"]
    assert tree_bytes(root) == tree_bytes(SAMPLE / "original")


def test_records_read_and_written_again_are_unchanged() -> None:
    """The typed records give back exactly the JSON an earlier release wrote, keys they do not
    know included (an earlier engine's ``stat`` of a file, a later engine's additions)."""
    from patchkit.engine.records import Journal, State

    for name in ("applied", "interrupted"):
        raw = json.loads((SAMPLE / name / ".patchkit/state.json").read_text())
        assert State.from_json(raw).to_json() == raw
        raw["fixes"][0]["files"][0]["stat"] = [1, 2]
        raw["fixes"][0]["later"] = {"x": 1}
        assert State.from_json(raw).to_json() == raw
    raw = json.loads((SAMPLE / "interrupted/.patchkit/journal.json").read_text())
    assert Journal.from_json(raw).to_json() == raw
    raw["files"][0]["abs"] = "/old/engine/path"
    assert Journal.from_json(raw).to_json() == raw
