"""A fix's checks run in one batch (:func:`patchkit.engine.checks.run_checks`): the first check
that runs a process is started before the checks the engine runs itself and waited for after
them, so a fix's script and the other fixes' greps overlap (issue 29, the seed's deploy); the
results keep the checks' order, and nothing a check started outlives an error beside it.

The overlap is shown by order, not by time: the engine's own check reads its file through a
reader that waits for a mark the command leaves when it starts.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from patchkit.engine import checks
from patchkit.engine.paths import Roots
from patchkit.errors import UsageError
from tests.fixtures.procs import alive

from .helpers import MOD


def _context(checkout: Path, read=None) -> checks.CheckContext:
    roots = Roots({"sglang": str(checkout)})
    return checks.CheckContext("a", roots, sys.executable, {}, read or roots.read)


def _command(*lines: str, **extra) -> dict:
    return dict({"kind": "command", "root": "sglang",
                 "argv": [sys.executable, "-c", "\n".join(lines)]}, **extra)


def _wait_for(path: Path, seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists():
            return True
        time.sleep(0.01)
    return False


def test_a_command_check_runs_while_the_engine_runs_its_own_checks(checkout: Path, tmp_path: Path) -> None:
    """The command comes after the grep in the list; the grep's read sees the command already
    running (its mark), so the engine did not wait for one to start the other."""
    mark = tmp_path / "started"
    seen = []
    roots = Roots({"sglang": str(checkout)})

    def read(root: str, path: str) -> Optional[bytes]:
        seen.append(_wait_for(mark))
        return roots.read(root, path)

    ctx = _context(checkout, read)
    grep = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "def ", "name": "has a def"}
    command = _command("import pathlib, sys", "pathlib.Path(sys.argv[1]).touch()",
                       name="leaves its mark")
    command["argv"].append(str(mark))
    out = checks.run_checks([(grep, ctx), (command, ctx)])
    assert seen == [True]
    assert [r["name"] for r in out] == ["has a def", "leaves its mark"]  # the checks' order
    assert [r["ok"] for r in out] == [True, True]


def test_process_checks_after_the_first_run_one_at_a_time_in_order(checkout: Path, tmp_path: Path) -> None:
    """Commands a user wrote may share a port or a file: the second starts after the first
    ended. Each appends its name to one log; the first sleeps before it writes."""
    log = tmp_path / "log"
    ctx = _context(checkout)
    first = _command("import sys, time", "time.sleep(0.3)",
                     "open(sys.argv[1], 'a').write('first\\n')", name="first")
    second = _command("import sys", "open(sys.argv[1], 'a').write('second\\n')", name="second")
    for check in (first, second):
        check["argv"].append(str(log))
    out = checks.run_checks([(first, ctx), (second, ctx)])
    assert [r["ok"] for r in out] == [True, True]
    assert log.read_text() == "first\nsecond\n"


def test_a_command_that_ended_while_the_engine_worked_is_not_late(checkout: Path, tmp_path: Path) -> None:
    """Its limit counts from its start; one that ended inside it passes however long the
    engine's own checks kept the result unread."""
    ctx = _context(checkout)
    roots = Roots({"sglang": str(checkout)})
    done = tmp_path / "done"

    def slow_read(root: str, path: str) -> Optional[bytes]:
        assert _wait_for(done)  # the command has ended its work...
        time.sleep(1.5)  # ...and the engine goes on past the command's limit
        return roots.read(root, path)

    slow = _context(checkout, slow_read)
    command = _command("import pathlib, sys", "pathlib.Path(sys.argv[1]).touch()", timeout=1,
                       name="quick")
    command["argv"].append(str(done))
    grep = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "def "}
    out = checks.run_checks([(command, ctx), (grep, slow)])
    assert out[0]["ok"], out[0]["detail"]


def test_a_command_past_its_limit_while_the_engine_worked_fails_as_timed_out(checkout: Path) -> None:
    ctx = _context(checkout)
    command = _command("import time", "time.sleep(60)", timeout=0.5, name="sleeps")
    grep = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "def "}
    out = checks.run_checks([(command, ctx), (grep, ctx)])
    assert not out[0]["ok"] and "timed out after 0.5 s" in out[0]["detail"]
    assert out[0]["detail"].endswith("output:\n(none)")  # said, not an empty line
    assert out[1]["ok"]


def test_an_error_in_the_engines_checks_ends_the_started_command(checkout: Path, tmp_path: Path) -> None:
    """A malformed check beside a running script: the error propagates, and the script (and
    what it started) is not left running."""
    pid_file = tmp_path / "pid"
    ctx = _context(checkout)
    command = _command("import os, subprocess, sys, time",
                       "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])",
                       "open(sys.argv[1], 'w').write('%d %d' % (os.getpid(), child.pid))",
                       "time.sleep(60)", name="sleeps")
    command["argv"].append(str(pid_file))
    roots = Roots({"sglang": str(checkout)})

    def read(root: str, path: str) -> Optional[bytes]:
        assert _wait_for(pid_file) and _wait_for_text(pid_file)
        return roots.read(root, path)

    broken = {"kind": "grep", "root": "sglang", "path": MOD}  # no pattern: a manifest error
    with pytest.raises(UsageError, match="lacks 'pattern'"):
        checks.run_checks([(command, ctx), (broken, _context(checkout, read))])
    pids = [int(p) for p in pid_file.read_text().split()]
    end = time.monotonic() + 20
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids), pids


def _wait_for_text(path: Path) -> bool:
    end = time.monotonic() + 20
    while time.monotonic() < end:
        if len(path.read_text().split()) == 2:
            return True
        time.sleep(0.01)
    return False


def test_a_command_that_cannot_start_is_its_checks_failure(checkout: Path) -> None:
    ctx = _context(checkout)
    missing = {"kind": "command", "root": "sglang", "argv": [os.fspath(checkout / "no-such-program")]}
    grep = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "def "}
    out = checks.run_checks([(missing, ctx), (grep, ctx)])
    assert not out[0]["ok"] and "could not run" in out[0]["detail"]
    assert out[1]["ok"]


def test_a_check_fed_on_stdin_counts_its_limit_from_its_input(checkout: Path) -> None:
    """``bash -n`` reads the script from its stdin, given when it is collected: the engine's
    own checks running past its limit meanwhile do not make it late."""
    (checkout / "serve.sh").write_text("echo serving\n" * 100_000)  # bash takes a while on it
    roots = Roots({"sglang": str(checkout)})

    def slow_read(root: str, path: str) -> Optional[bytes]:
        time.sleep(1.5)  # past the bash check's limit below
        return roots.read(root, path)

    bash = {"kind": "bash-syntax", "root": "sglang", "path": "serve.sh", "timeout": 1}
    grep = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "def "}
    out = checks.run_checks([(bash, _context(checkout)), (grep, _context(checkout, slow_read))])
    assert out[0]["ok"], out[0]["detail"]
    assert out[1]["ok"]


def test_an_apply_and_a_verify_check_every_fix_in_one_batch(checkout: Path, monkeypatch) -> None:
    """The verifications of every fix of an apply, and of a verify, go to run_checks at once, so
    the first fix's script overlaps the second fix's greps; each fix gets its own results back."""
    from patchkit.engine import apply as apply_mod
    from patchkit.engine import run

    from .helpers import SCRIPT, file_record, fix, request

    batches: list = []
    real = checks.run_checks

    def spy(jobs):
        batches.append([(ctx.fix, check.get("name")) for check, ctx in jobs])
        return real(jobs)

    monkeypatch.setattr(checks, "run_checks", spy)
    monkeypatch.setattr(apply_mod, "run_checks", spy)
    mod, script = (checkout / MOD).read_text(), (checkout / SCRIPT).read_text()
    a = fix("a", [file_record(MOD, mod, mod.replace("return x + 7\n", "return x * 7\n"))],
            verification=[dict(_command("pass"), name="a runs"),
                          {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "x * 7",
                           "count": 1, "name": "a greps"}])
    b = fix("b", [file_record(SCRIPT, script, script.replace("launching", "starting"),
                              patch="0001-b.patch")],
            verification=[{"kind": "grep", "root": "sglang", "path": SCRIPT, "pattern": "starting",
                           "count": 1, "name": "b greps"}])
    applied = run(request("apply", {"sglang": checkout}, [a, b]))
    assert applied["ok"], applied
    verified = run(request("verify", {"sglang": checkout}, [a, b]))
    assert verified["ok"], verified
    both = [("a", "a runs"), ("a", "a greps"), ("b", "b greps")]
    # one batch per run, every fix's checks in it (the empty ones: each fix's preconditions)
    assert [batch for batch in batches if batch] == [both, both]
    by_fix = {f["name"]: [r["name"] for r in f["verification"]] for f in verified["fixes"]}
    assert by_fix == {"a": ["a runs", "a greps"], "b": ["b greps"]}


def test_a_script_check_is_placed_where_the_script_is(checkout: Path) -> None:
    """The script lives in the catalog (patches/FIX/...), not in the root it runs in."""
    ctx = checks.CheckContext("a", Roots({"sglang": str(checkout)}), sys.executable,
                              {"checks/fail.py": "import sys; sys.exit(3)"}, Roots({"sglang": str(checkout)}).read)
    out = checks.run_check({"kind": "python-script", "root": "sglang", "script": "checks/fail.py"}, ctx)
    assert not out["ok"] and out["where"] == "patches/a/checks/fail.py"
    assert "exit code: 3" in out["detail"]


def test_a_placeholder_naming_no_root_says_which_manifest_to_fix(checkout: Path) -> None:
    command = {"kind": "command", "root": "sglang", "argv": ["ls", "{root:nosuch}"]}
    with pytest.raises(UsageError, match=r"\{root:nosuch\} names no root of the target \(roots: "
                                         r"sglang\); fix the check in manifests/a\.toml"):
        checks.run_checks([(command, _context(checkout))])


def test_a_command_that_prints_hundreds_of_megabytes_costs_no_memory_for_them(checkout: Path) -> None:
    """Only the output's tail is kept while a command runs (all a result shows); reading it
    whole held 3 times its size (a new-user trial: 200 MB printed, 610 MB resident)."""
    import json
    import subprocess

    program = """
import json, sys
from patchkit.engine import checks
from patchkit.engine.paths import Roots
roots = Roots({"sglang": sys.argv[1]})
ctx = checks.CheckContext("a", roots, sys.executable, {}, roots.read)
noisy = "import sys; sys.stdout.buffer.write(b'x' * (300 << 20)); print('the end'); sys.exit(3)"
out = checks.run_check({"kind": "command", "root": "sglang", "argv": [sys.executable, "-c", noisy]}, ctx)
# this program's own peak (VmHWM): ru_maxrss would count the parent forked before exec
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"head": out["detail"][:300], "tail": out["detail"][-100:], "ok": out["ok"],
                  "peak_mb": peak // 1024}))
"""
    run = subprocess.run([sys.executable, "-c", program, str(checkout)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    assert not found["ok"] and "exit code: 3 (expected 0)" in found["head"], found
    assert found["tail"].rstrip().endswith("the end"), found  # the output's tail, as before
    assert found["peak_mb"] < 150, found  # the 300 MB it printed were not held


def test_a_command_that_prints_more_than_a_pipe_holds_is_not_late_for_the_engines_checks(
        checkout: Path) -> None:
    """Its output is read while the engine runs its own checks: a command that wrote more
    than the pipe holds (64 KB) waited on the engine's reading and was killed as late (a
    second trial: 70,000 bytes beside a 5 s regex grep)."""
    roots = Roots({"sglang": str(checkout)})

    def slow_read(root: str, path: str) -> Optional[bytes]:
        time.sleep(2.5)  # past the command's limit below
        return roots.read(root, path)

    chatty = _command("import sys", "sys.stdout.write('x' * 200_000)", timeout=1.5, name="chatty")
    grep = {"kind": "grep", "root": "sglang", "path": MOD, "pattern": "def "}
    out = checks.run_checks([(chatty, _context(checkout)), (grep, _context(checkout, slow_read))])
    assert out[0]["ok"], out[0]["detail"][:300]
