"""Every check runs under a time limit (its ``timeout``): one that runs past it fails, as a
precondition (nothing written) or as a verification (every file restored, nothing recorded).

A catastrophic regex (``^(a+)+$`` against a long line of ``a`` ending in ``b``) never finishes
inside Python's ``re``; neither does a command that sleeps. Each test runs the engine in a
process of its own, and there in a thread that is not the main one (as a library user may),
so a check that is not stopped shows as that process outliving the guard below, instead of
hanging the test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from patchkit.engine import checks, contract
from patchkit.engine.contract import CHECK_DEFAULTS, CHECK_KINDS
from tests.fixtures.procs import alive

from .helpers import MOD, content_snapshot, file_record, fix, git, request

SLOW = "data/slow.txt"
CATASTROPHIC = {"kind": "grep", "root": "sglang", "path": SLOW, "pattern": "^(a+)+$",
                "regex": True, "present": False, "timeout": 1, "name": "no run of a's alone"}
GUARD = 120  # seconds: far beyond any limit below; only a check nobody stopped reaches it

RUNNER = r"""
import json, sys, threading
from patchkit.engine import run
requests = json.load(sys.stdin)
out = []
def work():
    out.append(run(requests[0]))
t = threading.Thread(target=work)
t.start()
t.join()
out.extend(run(r) for r in requests[1:])  # after it, in the main thread: is the lock free?
print(json.dumps(out))
"""


def run_elsewhere(*requests: Dict[str, Any]) -> List[Dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(list(requests)),
                          capture_output=True, text=True, timeout=GUARD)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def slow_file(root: Path) -> None:
    (root / "data").mkdir()
    (root / SLOW).write_text("header\n" + "a" * 5000 + "b\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "a file a catastrophic regex never gets through")


def one_fix(root: Path, **extra: Any) -> Dict[str, Any]:
    before = (root / MOD).read_text()
    return fix("a", [file_record(MOD, before, before.replace("return x + 7\n", "return x * 7\n"))],
               **extra)


def test_a_catastrophic_regex_precondition_is_stopped_and_nothing_is_written(checkout: Path) -> None:
    slow_file(checkout)
    tree = content_snapshot(checkout)
    res, status = run_elsewhere(request("apply", {"sglang": checkout},
                                        [one_fix(checkout, preconditions=[CATASTROPHIC])]),
                                request("status", {"sglang": checkout}, [], lock_timeout=0.1))
    assert res["error"]["type"] == "PreconditionFailed", res["error"]
    [failure] = res["error"]["details"]["failures"]
    assert failure["name"] == "no run of a's alone" and failure["kind"] == "grep"
    assert "timed out after 1 s" in failure["detail"] and "timeout" in failure["detail"]
    assert "no run of a's alone" in res["error"]["message"] and "timed out" in res["error"]["message"]
    assert content_snapshot(checkout) == tree and not (checkout / ".patchkit").exists()
    assert status["ok"], status["error"]  # the lock was released
    assert git(checkout, "status", "--porcelain") == ""


def test_a_catastrophic_regex_verification_rolls_the_fix_back(checkout: Path) -> None:
    slow_file(checkout)
    tree = content_snapshot(checkout)
    f = one_fix(checkout, verification=[CATASTROPHIC])
    res, status = run_elsewhere(request("apply", {"sglang": checkout}, [f]),
                                request("status", {"sglang": checkout}, [f], lock_timeout=0.1))
    assert res["error"]["type"] == "VerificationFailed", res["error"]
    assert "every file was restored" in res["error"]["message"]
    assert "no run of a's alone" in res["error"]["message"] and "timed out" in res["error"]["message"]
    [failure] = res["error"]["details"]["failures"]
    assert failure["name"] == "no run of a's alone" and "timed out after 1 s" in failure["detail"]
    assert content_snapshot(checkout) == tree  # the written file is back as it was
    assert status["ok"], status["error"]  # the lock was released and nothing was recorded
    assert [s["state"] for s in status["status"]["fixes"]] == ["not-applied"]
    assert git(checkout, "status", "--porcelain") == ""


def test_a_regex_that_finishes_still_counts_its_lines(checkout: Path) -> None:
    """The limit changes nothing for a regex that ends: same lines, same detail."""
    check = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": r"^def f\d+\(x\):$",
             "regex": True, "count": 40, "timeout": 30}
    res = run_elsewhere(request("apply", {"sglang": checkout}, [one_fix(checkout, preconditions=[check])],
                                dry_run=True))[0]
    assert res["ok"], res["error"]
    [found] = [p for p in res["fixes"][0]["preconditions"] if p["kind"] == "grep"]
    assert found["ok"] and found["detail"].startswith("40 matching lines (lines 1, 4, 7,")


def test_a_command_past_its_timeout_is_stopped_with_what_it_started(checkout: Path, tmp_path: Path) -> None:
    """The command and every process it started (its process group) are killed."""
    pidfile = tmp_path / "sleeper.pid"
    check = {"kind": "command", "root": "sglang", "timeout": 1, "name": "slow smoke test",
             "argv": ["bash", "-c", "sleep 600 & echo $! > %s; echo started; wait" % pidfile]}
    tree = content_snapshot(checkout)
    res = run_elsewhere(request("apply", {"sglang": checkout}, [one_fix(checkout, verification=[check])]))[0]
    assert res["error"]["type"] == "VerificationFailed", res["error"]
    [failure] = res["error"]["details"]["failures"]
    assert failure["name"] == "slow smoke test"
    assert "timed out after 1 s" in failure["detail"] and "started" in failure["detail"]
    assert content_snapshot(checkout) == tree
    sleeper = int(pidfile.read_text())
    assert not alive(sleeper), "the command's child outlived the check's time limit"


def test_every_kind_has_a_default_time_limit_the_request_carries() -> None:
    """One table (the contract) gives the engine its limits and the catalog its request defaults."""
    assert checks.CHECK_TIMEOUTS is contract.CHECK_TIMEOUTS and checks.CHECK_KINDS is contract.CHECK_KINDS
    assert set(contract.CHECK_TIMEOUTS) == set(CHECK_KINDS)
    for kind in CHECK_KINDS:
        assert CHECK_DEFAULTS[kind]["timeout"] == contract.CHECK_TIMEOUTS[kind] > 0
    assert contract.CHECK_TIMEOUTS["command"] == contract.CHECK_TIMEOUTS["python-script"] == 300


def test_no_worker_process_outlives_a_run(checkout: Path) -> None:
    """The process that runs regex and syntax checks is gone when ``run`` returns."""
    check = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "f7", "regex": True,
             "present": True}
    children = ("import glob\n"
                "def kids(f):\n"
                "    try:\n"
                "        return open(f).read().split()\n"
                "    except FileNotFoundError:  # a thread ending as it was listed: it has none\n"
                "        return []\n"
                "print(json.dumps([p for f in glob.glob('/proc/self/task/*/children') "
                "for p in kids(f)]))")
    script = RUNNER.replace("print(json.dumps(out))", children)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=GUARD,
                          input=json.dumps([request("apply", {"sglang": checkout},
                                                    [one_fix(checkout, preconditions=[check])],
                                                    dry_run=True)]))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_a_python_syntax_check_is_one_pass_in_the_engine_bounded_by_its_limit(checkout: Path) -> None:
    """The compile runs in the engine (the worker's interpreter, so the same answer) and starts
    no process; like a literal grep, a pass that took longer than the limit fails."""
    from patchkit.engine.paths import Roots

    roots = Roots({"sglang": str(checkout)})
    ctx = checks.CheckContext("a", roots, sys.executable, {}, roots.read)
    check = {"kind": "python-syntax", "root": "sglang", "path": MOD}
    assert checks.run_check(dict(check, timeout=30), ctx)["detail"] == "parses"
    (checkout / "broken.py").write_text("def f(:\n")
    broken = checks.run_check(dict(check, path="broken.py", timeout=30), ctx)
    assert not broken["ok"] and broken["detail"].startswith("line 1: ")
    assert getattr(checks._local, "worker", None) is None  # no worker process was started
    late = checks.run_check(dict(check, timeout=1e-9), ctx)
    assert not late["ok"] and "timed out after" in late["detail"]


def test_a_check_whose_wait_a_signal_cut_short_is_still_ended_and_reaped(tmp_path: Path) -> None:
    """A signal can land in Python's own ``Popen.wait(timeout)`` just after it took the
    object's wait lock and before the ``try`` that gives it back: the lock stays held. The
    check's ``kill`` then waited on that lock forever, with the stop signals ignored (the full
    suite's SIGQUIT-during-verification test hung for the check's whole 60 s, once). The
    command is killed and reaped all the same, by its process id."""
    import threading

    from patchkit.engine.checks import Started

    started = Started(["sleep", "60"], str(tmp_path), timeout=120)
    proc = started.proc
    assert proc is not None
    assert proc._waitpid_lock.acquire(False)  # type: ignore[attr-defined]  the cut-short wait's
    ender = threading.Thread(target=started.kill, daemon=True)
    ender.start()
    ender.join(30)
    assert not ender.is_alive(), "kill() waits on a wait lock nobody will release"
    assert proc.returncode == -9, proc.returncode
    with pytest.raises(ChildProcessError):  # reaped: no zombie left
        os.waitpid(proc.pid, os.WNOHANG)


def test_a_command_that_ends_is_seen_at_once_not_at_the_next_poll(tmp_path: Path, monkeypatch) -> None:
    """``Popen.wait`` with a time limit polls, sleeping up to 50 ms between looks: a script
    check of the seed's sizing fix (about 50 ms alone) took 80 ms inside an apply. The end of
    the command's output wakes the wait instead; at most the few moments between the output's
    end and the exit are slept, never the command's run."""
    import time

    from patchkit.engine.checks import Started

    slept: List[float] = []
    real_sleep = time.sleep

    def counting_sleep(seconds: float) -> None:
        slept.append(seconds)
        real_sleep(seconds)

    started = Started([sys.executable, "-c", "import time; time.sleep(0.5); print('done')"],
                      str(tmp_path), timeout=60)
    monkeypatch.setattr(time, "sleep", counting_sleep)
    assert started.finish() is None  # exit 0
    assert b"done" in bytes(started.kept)
    assert sum(slept) < 0.25, slept  # a poll over the command's half second sleeps all of it
