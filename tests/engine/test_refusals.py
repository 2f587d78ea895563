"""A refused run leaves the target byte-identical: every file, mode and directory time, the
``.git`` directory, and no ``.patchkit/`` where there was none (or the same one, unchanged).

The lock is an flock on the state root directory, so taking it writes nothing; ``.patchkit/``
is created only when a transaction starts writing.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Dict, List, Tuple

import pytest

from patchkit.engine import run

from .helpers import (MOD, SCRIPT, file_record, fix, full_snapshot, git, lock_held_elsewhere,
                      request)
from .test_preconditions import _make_read_only, one_fix

Case = Tuple[str, List[Dict[str, Any]], str, Callable[[], ContextManager[Any]]]


def _nothing() -> ContextManager[Any]:
    return contextlib.nullcontext()


def _case(name: str, root: Path) -> Case:
    """(op, fixes, expected error type, context the run happens in) for one kind of refusal."""
    if name == "precondition":
        check = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "zzz", "present": True}
        return "apply", [one_fix(root, [check])], "PreconditionFailed", _nothing
    if name == "conflict":
        before = (root / MOD).read_text().replace("return x + 7\n", "return x - 7\n")
        bad = fix("a", [file_record(MOD, before, before.replace("x - 7", "x * 7"))])
        return "apply", [bad], "ConflictError", _nothing
    if name == "unsafe-path":
        return "apply", [one_fix(root), fix("b", [file_record("../out.py", "a\n", "b\n")])], \
            "UnsafePathError", _nothing
    if name == "special-mode":  # a setuid, world-writable file, in a later fix of the request
        return "apply", [one_fix(root), fix("b", [file_record("python/sglang/srt/suid.py", None,
                                                              "x = 1\n", mode="104777")])], \
            "UnsafePathError", _nothing
    if name == "missing-file":
        f = one_fix(root)
        (root / MOD).unlink()
        return "apply", [f], "TargetFileMissing", _nothing
    if name == "wrong-release":
        return "apply", [one_fix(root, release={"root": "sglang", "versions": ["0.4.0"]})], \
            "PreconditionFailed", _nothing
    if name == "uncommitted":
        f = one_fix(root)
        with open(root / MOD, "a") as fh:
            fh.write("# local edit\n")
        return "apply", [f], "PreconditionFailed", _nothing
    if name == "requires-missing":
        return "apply", [one_fix(root, requires=["zzz"])], "PreconditionFailed", _nothing
    if name == "not-writable":
        srt = root / "python" / "sglang" / "srt"
        undo = _make_read_only(srt)

        @contextlib.contextmanager
        def read_only() -> Any:
            try:
                yield
            finally:
                undo()
        return "apply", [one_fix(root)], "PermissionDenied", read_only
    if name == "lock-busy":
        return "apply", [one_fix(root)], "LockBusy", lambda: lock_held_elsewhere(root)
    if name == "status-stub":  # FIX stubs (name and version only) are not part of the format
        return "status", [{"name": "a", "version": 1, "stub": True}], "UsageError", _nothing
    raise AssertionError(name)


CASES = ["precondition", "conflict", "unsafe-path", "special-mode", "missing-file", "wrong-release", "uncommitted",
         "requires-missing", "not-writable", "lock-busy", "status-stub"]


def _apply_other_fix(root: Path) -> None:
    """Give the target a ``.patchkit/`` of its own: another fix, on another file, applied."""
    text = (root / SCRIPT).read_text()
    other = fix("z", [file_record(SCRIPT, text, text.replace("launching", "starting"))])
    assert run(request("apply", {"sglang": root}, [other]))["ok"]


@pytest.mark.parametrize("prior", [False, True], ids=["fresh", "with-state"])
@pytest.mark.parametrize("name", CASES)
def test_refused_run_leaves_the_target_byte_identical(checkout: Path, name: str, prior: bool) -> None:
    if prior:
        _apply_other_fix(checkout)
    op, fixes, expected, context = _case(name, checkout)
    with context():
        tree = full_snapshot(checkout)
        result = run(request(op, {"sglang": checkout}, fixes, lock_timeout=0.2))
        assert result["ok"] is False and result["error"]["type"] == expected, result["error"]
        assert full_snapshot(checkout) == tree
    assert (checkout / ".patchkit").exists() is prior


@pytest.mark.parametrize("prior", [False, True], ids=["fresh", "with-state"])
def test_a_rollback_of_a_fix_not_applied_converges_and_writes_nothing(checkout: Path, prior: bool) -> None:
    """As apply of an applied fix is already-applied (issue 25, item 9): nothing to do."""
    if prior:
        _apply_other_fix(checkout)
    tree = full_snapshot(checkout)
    result = run(request("rollback", {"sglang": checkout}, [one_fix(checkout)], lock_timeout=0.2))
    assert result["ok"] is True, result["error"]
    assert [(f["name"], f["outcome"]) for f in result["fixes"]] == [("a", "not-applied")]
    assert "nothing to roll back" in result["fixes"][0]["detail"]
    assert full_snapshot(checkout) == tree
    assert (checkout / ".patchkit").exists() is prior


def test_a_fix_stub_is_refused_by_every_op_with_the_way_out(checkout: Path) -> None:
    """A stub would otherwise read as a fix with no files: a status would call it absent."""
    f = one_fix(checkout)
    assert run(request("apply", {"sglang": checkout}, [f]))["ok"]
    for op in ("status", "apply", "verify", "rollback"):
        res = run(request(op, {"sglang": checkout}, [{"name": "a", "version": 1, "stub": True}]))
        assert res["ok"] is False and res["error"]["type"] == "UsageError", (op, res["error"])
        assert "fix a" in res["error"]["message"] and "stub" in res["error"]["message"]
        assert "patchkit.request" in res["error"]["message"]
    status = run(request("status", {"sglang": checkout}, [f]))["status"]
    assert "needs_detection" not in status
    assert [(x["name"], x["state"]) for x in status["fixes"]] == [("a", "applied")]


def test_refusals_of_an_applied_fix_change_nothing(checkout: Path) -> None:
    """Drift refuses an upgrade to another version and a rollback with the state in place,
    and leaves it as it was."""
    f = one_fix(checkout)
    assert run(request("apply", {"sglang": checkout}, [f]))["ok"]
    with open(checkout / MOD, "a") as fh:
        fh.write("# hand edit\n")
    tree = full_snapshot(checkout)
    res = run(request("apply", {"sglang": checkout}, [dict(f, version=2)]))
    assert res["error"]["type"] == "DriftError"
    assert full_snapshot(checkout) == tree
    assert run(request("rollback", {"sglang": checkout}, [f]))["error"]["type"] == "DriftError"
    assert full_snapshot(checkout) == tree


def test_patchkit_dir_appears_only_with_the_write_phase(checkout: Path) -> None:
    tree = full_snapshot(checkout)
    for op in ("status", "verify"):
        run(request(op, {"sglang": checkout}, [one_fix(checkout)]))
    assert run(request("apply", {"sglang": checkout}, [one_fix(checkout)], dry_run=True))["ok"]
    assert full_snapshot(checkout) == tree
    assert run(request("apply", {"sglang": checkout}, [one_fix(checkout)]))["ok"]
    assert sorted(os.listdir(checkout / ".patchkit")) == [".gitignore", "backups", "history.jsonl",
                                                          "state.json", "txn", "undo"]
    assert (checkout / ".patchkit/.gitignore").read_text() == "*\n"
    assert git(checkout, "status", "--porcelain") == " M %s\n" % MOD


DRIVER = ("import sys, json; from patchkit.engine import run; "
          "print(json.dumps(run(json.loads(sys.stdin.read()))))")
WAIT = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.02)\n"


def _start(req: Dict[str, Any]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(req))
    proc.stdin.close()
    proc.stdin = None  # written and closed: communicate() must not flush it again
    return proc


def _wait_until(done: Callable[[], bool], proc: subprocess.Popen) -> None:
    give_up = time.monotonic() + 60  # a deadlock guard, not a timing assertion
    while not done():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < give_up
        time.sleep(0.02)


def _finish(proc: subprocess.Popen) -> Dict[str, Any]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


def test_lock_busy_while_the_other_run_plans_names_its_pid(checkout: Path, tmp_path: Path) -> None:
    """The other run is still checking preconditions: no ``.patchkit/`` exists yet, and the
    holder's pid comes from the kernel's lock table."""
    gate, started = tmp_path / "go", tmp_path / "started"
    wait = {"kind": "command", "root": "sglang", "name": "slow precondition",
            "argv": ["{python}", "-c", "import pathlib, sys; pathlib.Path(sys.argv[2]).touch()\n" + WAIT,
                     str(gate), str(started)]}
    proc = _start(request("apply", {"sglang": checkout}, [one_fix(checkout, [wait])]))
    try:
        _wait_until(started.exists, proc)
        assert not (checkout / ".patchkit").exists()
        res = run(request("status", {"sglang": checkout}, [], lock_timeout=0.1))
        assert res["error"]["type"] == "LockBusy"
        assert "pid %d on " % proc.pid in res["error"]["message"]
        assert res["error"]["details"]["pid"] == str(proc.pid)
    finally:
        gate.touch()
    assert _finish(proc)["ok"]


def test_lock_busy_during_the_write_phase_names_pid_op_and_start(checkout: Path, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    wait = {"kind": "command", "root": "sglang", "name": "slow verification",
            "argv": ["{python}", "-c", WAIT, str(gate)]}
    proc = _start(request("apply", {"sglang": checkout}, [one_fix(checkout, verification=[wait])]))
    holder = checkout / ".patchkit" / "lock-holder.json"
    try:
        _wait_until(holder.exists, proc)
        recorded = json.loads(holder.read_text())
        assert recorded["pid"] == proc.pid and recorded["op"] == "apply"
        res = run(request("apply", {"sglang": checkout}, [one_fix(checkout)], lock_timeout=0.1))
        assert res["error"]["type"] == "LockBusy"
        message = res["error"]["message"]
        assert "pid %d on " % proc.pid in message and "apply since %s" % recorded["since"] in message
    finally:
        gate.touch()
    assert _finish(proc)["ok"]
    assert not holder.exists()  # the record lives only as long as the write phase


@pytest.mark.parametrize("mode,named", [("104777", "setuid, world-writable"),
                                        ("102755", "setgid"), ("100777", "world-writable"),
                                        ("101755", "sticky")])
def test_special_modes_are_refused_unless_the_fix_allows_them(checkout: Path, mode: str,
                                                              named: str) -> None:
    """A FILE record may not make a file setuid, setgid, sticky or world-writable (created, or
    a modified file's new mode) unless its FIX says ``allow_special_modes``; the refusal names
    the fix, the patch and the path, and comes before anything is written."""
    text = (checkout / SCRIPT).read_text()
    created = file_record("python/sglang/srt/suid.py", None, "x = 1\n", mode=mode)
    modified = file_record(SCRIPT, text, text.replace("launching", "starting"), mode=mode)
    for record in (created, modified):
        tree = full_snapshot(checkout)
        result = run(request("apply", {"sglang": checkout}, [fix("s", [record])]))
        assert result["ok"] is False and result["error"]["type"] == "UnsafePathError"
        message = result["error"]["message"]
        assert "fix s, patch file patches/s/0001-a.patch" in message
        assert "sglang:%s would get mode %s (%s)" % (record["path"], mode, named) in message
        assert "allow_special_modes = true" in message
        assert full_snapshot(checkout) == tree

    allowed = fix("s", [created, modified], allow_special_modes=True)
    assert run(request("apply", {"sglang": checkout}, [allowed]))["ok"]
    for record in (created, modified):
        assert os.stat(checkout / record["path"]).st_mode & 0o7777 == int(mode, 8) & 0o7777
    assert run(request("rollback", {"sglang": checkout}, [allowed]))["ok"]
    assert not (checkout / created["path"]).exists()
    assert os.stat(checkout / SCRIPT).st_mode & 0o7777 == 0o755


def test_plain_modes_are_not_refused(checkout: Path) -> None:
    """100644 and 100755 are what git writes: a modified file takes the mode its patch gives."""
    text = (checkout / SCRIPT).read_text()
    plain = fix("p", [file_record(SCRIPT, text, text.replace("launching", "starting"),
                                  mode="100644")])
    assert run(request("apply", {"sglang": checkout}, [plain]))["ok"]
    assert os.stat(checkout / SCRIPT).st_mode & 0o7777 == 0o644


def test_a_file_already_setuid_keeps_its_mode_through_apply_and_rollback(checkout: Path) -> None:
    """A patch without mode lines gives no mode, so nothing is refused, and the file keeps the
    mode it has: written with its owner first, then its mode (a chown clears setuid)."""
    os.chmod(checkout / SCRIPT, 0o4755)
    text = (checkout / SCRIPT).read_text()
    edit = fix("e", [file_record(SCRIPT, text, text.replace("launching", "starting"))])
    assert run(request("apply", {"sglang": checkout}, [edit]))["ok"]
    assert os.stat(checkout / SCRIPT).st_mode & 0o7777 == 0o4755
    assert "starting" in (checkout / SCRIPT).read_text()
    assert run(request("rollback", {"sglang": checkout}, [edit]))["ok"]
    assert os.stat(checkout / SCRIPT).st_mode & 0o7777 == 0o4755
    assert (checkout / SCRIPT).read_text() == text
