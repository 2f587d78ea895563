"""Concurrency: 8 processes apply and roll back 4 fixes (different files) on one target at once.

Each process runs the real engine in its own interpreter, so the only thing that keeps them
apart is the lock (an flock on the state root). Afterwards the record must match the files:
every recorded fix's files hold its after-hash, every unrecorded fix's files their original
bytes, and no journal, transaction scratch or temp file is left. The history must hold
exactly one committed event per successful apply or rollback: nothing lost, nothing doubled.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

from patchkit.engine import run
from tests.engine.helpers import file_record, fix, git, make_checkout, module_text, request

PROCESSES = 8
ROUNDS = 3
FILES = ["python/sglang/srt/m%d.py" % i for i in range(4)]

WORKER = r"""
import json, os, sys, time
from patchkit.engine import run
spec = json.loads(sys.stdin.read())
while not os.path.exists(spec["go"]):
    time.sleep(0.005)
out = []
for op in spec["ops"]:
    res = run(spec[op])
    out.append({"op": op, "ok": res["ok"], "error": res["error"],
                "outcomes": [f["outcome"] for f in res["fixes"]]})
print(json.dumps(out))
"""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_eight_concurrent_applies_and_rollbacks_stay_consistent(tmp_path: Path) -> None:
    root = make_checkout(tmp_path)
    originals = {}
    after_hash = {}
    fixes = []
    for i, path in enumerate(FILES):
        before = module_text(10 + i)
        (root / path).write_text(before)
        originals[path] = before.encode()
        after = before.replace("return x + 3\n", "return x + 3  # fixed by c%d\n" % i)
        fixes.append(fix("c%d" % i, [file_record(path, before, after)]))
        after_hash["c%d" % i] = sha(after.encode())
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "four modules")

    go = tmp_path / "go"
    procs = []
    for k in range(PROCESSES):
        f = fixes[k % 4]
        ops = (["apply", "rollback"] if k < 4 else ["rollback", "apply"]) * ROUNDS
        if k % 2:
            ops = ops + ["apply"]  # half the processes leave their fix applied (if nobody undoes it)
        spec = {"go": str(go), "ops": ops,
                "apply": request("apply", {"sglang": root}, [f], lock_timeout=120.0),
                "rollback": request("rollback", {"sglang": root}, [f], lock_timeout=120.0)}
        proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(spec))
        proc.stdin.close()
        proc.stdin = None  # communicate() must not touch it again
        procs.append(proc)
    go.write_text("")  # all at once
    results: List[Dict[str, Any]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.extend(json.loads(out))

    committed = 0
    for r in results:
        if r["ok"]:
            assert r["outcomes"] in (["applied"], ["already-applied"], ["rolled-back"],
                                     ["not-applied"]), r  # not-applied: rolled back by another
            committed += r["outcomes"] not in (["already-applied"], ["not-applied"])
        else:
            raise AssertionError(r)
    assert committed >= 4

    pk = root / ".patchkit"
    state = json.loads((pk / "state.json").read_text())
    recorded = {f["name"]: f for f in state["fixes"]}
    for i, f in enumerate(fixes):
        data = (root / FILES[i]).read_bytes()
        if f["name"] in recorded:
            assert sha(data) == after_hash[f["name"]] == recorded[f["name"]]["files"][0]["after_sha256"]
            assert (pk / "backups" / f["name"]).is_dir()
        else:
            assert data == originals[FILES[i]]
            assert not (pk / "backups" / f["name"]).exists()
    assert not (pk / "journal.json").exists() and not (pk / "lock-holder.json").exists()
    assert not (pk / "txn").exists() or list((pk / "txn").iterdir()) == []
    assert not list(root.rglob("*.patchkit-tmp"))
    events = [json.loads(line) for line in (pk / "history.jsonl").read_text().splitlines()]
    assert [e["outcome"] for e in events] == ["committed"] * committed  # nothing lost, nothing doubled
    assert len({e["txn"] for e in events}) == committed
    status = run(request("status", {"sglang": root}, fixes))
    assert status["ok"] and status["recovered"] == []
    assert {f["name"]: f["state"] for f in status["status"]["fixes"]} == {
        f["name"]: ("applied" if f["name"] in recorded else "not-applied") for f in fixes}
