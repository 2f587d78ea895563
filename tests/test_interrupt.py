"""Ctrl-C says what it left, as SIGTERM does: "interrupted by SIGINT; nothing it wrote is left
half-done ..." on stderr and in ``--json`` (the target named), exit 130, the target as it was
and no check left running. Before, a Ctrl-C during an apply's verification printed a blank line
and "aborted", and its JSON had no target (found by a new-user trial)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.fixtures.procs import alive
from tests.fixtures.user_catalog import app_patch, app_tree, tree_digest, user_catalog

SLOW = """
[[verification]]
kind = "command"
root = "tree"
argv = ["{python}", "-c", "import os, pathlib, sys, time; pathlib.Path(sys.argv[1]).write_text(str(os.getpid())); time.sleep(60)", "MARK"]
name = "takes a while"
"""


def _signalled_once_marked(argv: list[str], mark: Path, signum: int, **popen: Any
                           ) -> tuple[subprocess.Popen[str], str, str]:
    """``argv`` in a session of its own, sent ``signum`` once its check wrote ``mark``; the
    process, its stdout and stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)
    deadline = time.monotonic() + 60
    while not (mark.exists() and mark.read_text()) and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.05)
    assert mark.exists(), proc.communicate()
    os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=60)
    return proc, out, err


def test_ctrl_c_during_a_verification_says_what_it_left(tmp_path: Path) -> None:
    tree = app_tree(tmp_path / "tree")
    mark = tmp_path / "check.pid"
    catalog = user_catalog(tmp_path / "catalog", {"slow": (app_patch(), SLOW.replace("MARK", str(mark)))})
    run = [sys.executable, "-m", "patchkit"]
    before = tree_digest(tree)

    proc, out, err = _signalled_once_marked(
        [*run, "--catalog", str(catalog), "apply", "slow", "--root", f"tree={tree}", "--python",
         sys.executable, "--json"], mark, signal.SIGINT)  # SIGINT not ignored, as at a terminal

    assert proc.returncode == 130, out + err
    said = "interrupted by SIGINT; nothing it wrote is left half-done"
    assert said in err and "patchkit status" in err, err
    assert err.startswith("error: "), err  # no blank line first (click's, on Ctrl-C)
    # the status it suggests acts on this target only with this run's options: said
    note = "note: run the patchkit commands above with this run's options: --catalog "
    assert f"{note}{catalog} --root tree={tree} --python {sys.executable}" in err, err
    data = json.loads(out)
    assert data["ok"] is False and data["error"]["type"] == "Interrupted"
    assert said in data["error"]["message"]
    assert data["target"] and str(tree) in data["target"]
    assert tree_digest(tree) == before  # the written file put back
    assert not (tree / ".patchkit" / "journal.json").exists()
    deadline = time.monotonic() + 10
    while alive(int(mark.read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(int(mark.read_text()))  # the check's process ended with the run


def test_ctrl_c_during_a_verify_says_it_wrote_nothing(tmp_path: Path) -> None:
    """A verify only reads: Ctrl-C (or SIGTERM) during its check says so, not that what it
    wrote was put back (a second trial)."""
    tree = app_tree(tmp_path / "tree")
    mark = tmp_path / "check.pid"
    # slow only once MARK's directory holds "slow": the apply's own verification is quick
    check = SLOW.replace('"import os', '"import os, pathlib, sys, time; pathlib.Path(sys.argv[1] + '
                         '\'.slow\').exists() or sys.exit(0); import os')
    catalog = user_catalog(tmp_path / "catalog", {"slow": (app_patch(), check.replace("MARK", str(mark)))})
    run = [sys.executable, "-m", "patchkit", "--catalog", str(catalog)]
    where = ["--root", f"tree={tree}", "--python", sys.executable]
    assert subprocess.run([*run, "apply", "slow", *where], capture_output=True).returncode == 0
    Path(str(mark) + ".slow").write_text("")
    for argv, signum in ((["verify", *where, "--json"], signal.SIGINT),
                         (["verify", *where], signal.SIGINT), (["verify", *where], signal.SIGTERM)):
        mark.unlink(missing_ok=True)
        before = tree_digest(tree)
        proc, out, err = _signalled_once_marked([*run, *argv], mark, signum)
        assert proc.returncode == 128 + signum, out + err
        said = ("interrupted by SIGINT" if signum == signal.SIGINT else "terminated by SIGTERM") \
            + "; it writes nothing to the target, which is as it was"
        assert said in err and "left half-done" not in err, err
        if "--json" in argv:
            data = json.loads(out)
            assert data["op"] == "verify" and said in data["error"]["message"]
        assert tree_digest(tree) == before


def test_a_run_that_waits_for_the_lock_says_so_while_it_waits(tmp_path: Path) -> None:
    """Another run holds the target's lock: a ``status`` waiting for it says who holds it and
    how long it will wait, on its progress line, instead of sitting silent behind "reading"
    (a new-user trial: 17 s of silence); at the limit it ends with LockBusy, exit 4."""
    tree = app_tree(tmp_path / "tree")
    catalog = user_catalog(tmp_path / "catalog", {"good": (app_patch(), "")})
    run = [sys.executable, "-m", "patchkit", "--catalog", str(catalog)]
    assert subprocess.run([*run, "apply", "good", "--root", f"tree={tree}"]).returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY "
         "| os.O_DIRECTORY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
         "time.sleep(60)", str(tree)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout.readline() == "held\n"  # type: ignore[union-attr]
        done = subprocess.run([*run, "status", "--root", f"tree={tree}", "--lock-timeout", "1.5"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              env=dict(os.environ, PATCHKIT_PROGRESS_AFTER="0"))
        assert done.returncode == 4, done.stdout + done.stderr
        said = " ".join(done.stderr.split())
        assert f"waiting for the lock on {tree}: another patchkit run" in said, said
        assert f"pid {holder.pid}" in said and "waiting up to 1.5s (--lock-timeout)" in said, said
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # this test's own process group, by its PID
        holder.wait(timeout=30)
        holder.stdout.close()  # type: ignore[union-attr]


def test_a_signal_ignored_when_patchkit_starts_stays_ignored(tmp_path: Path) -> None:
    """Under `nohup` (or the ssh:// agent, which ignores SIGHUP so a dropped connection never
    stops a run half way on the host) SIGHUP was still caught once the run began, and undid
    the change. A signal ignored when patchkit starts is left ignored, the Unix convention:
    the run goes on to the end."""
    tree = app_tree(tmp_path / "tree")
    mark = tmp_path / "check.pid"
    brief = SLOW.replace("time.sleep(60)", "time.sleep(2)").replace("MARK", str(mark))
    catalog = user_catalog(tmp_path / "catalog", {"brief": (app_patch(), brief)})

    def nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc, out, err = _signalled_once_marked(
        [sys.executable, "-m", "patchkit", "--catalog", str(catalog), "apply", "brief", "--root",
         f"tree={tree}", "--python", sys.executable], mark, signal.SIGHUP, preexec_fn=nohup)
    assert proc.returncode == 0, out + err
    assert "applied brief" in out and (tree / "app.py").read_text().endswith("value = 2\n")


def test_a_signal_in_the_first_moments_of_a_json_run_still_prints_its_json(tmp_path: Path) -> None:
    """SIGTERM or SIGINT in the first ~0.1 s of a --json run printed no JSON: before the CLI
    installed its handlers the run died of the signal (or printed a KeyboardInterrupt
    traceback from patchkit's imports), and after, until click read --json, it said the error
    on stderr only. Now, from patchkit's first line on, every such run prints its JSON
    document; only a signal while the interpreter itself starts, and imports the patchkit
    package, before the program's first line, ends it as it ends any program (docs/cli.md)."""
    tree = app_tree(tmp_path / "tree")
    catalog = user_catalog(tmp_path / "catalog", {"quick": (app_patch(), "")})
    argv = [sys.executable, "-m", "patchkit", "--catalog", str(catalog), "apply", "quick",
            "--dry-run", "--root", f"tree={tree}", "--json"]
    seen = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        for step in range(0, 16, 2):  # 0 to 0.14 s: the three windows, 20 ms apart
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(step * 0.01)
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=60)
            frames = re.findall(r'File "[^"]*/patchkit/([^"]+)"', err)
            if not out and proc.returncode in (-signum, 1) and set(frames) <= {
                    "__init__.py", "errors.py"}:  # the interpreter's start, importing patchkit
                seen.append("before patchkit")
                continue
            assert out, (step, proc.returncode, err)
            data = json.loads(out)  # a document, whatever moment the signal came
            if data["ok"]:
                assert proc.returncode == 0, err  # the signal came after the run
                seen.append("after")
                continue
            assert proc.returncode == 128 + signum, (step, out, err)
            assert data["op"] == "apply" and data["error"]["type"] in ("Terminated", "Interrupted")
            assert data["error"]["message"] in err
            seen.append("json")
    assert "json" in seen, seen


ARMED_THEN_SIGNALLED = """
import os, signal, sys
from patchkit.errors import hold_signals
hold_signals()  # the program's first line, as the console script's
real = signal.signal
def arm(signum, handler):  # a Ctrl-C landing the moment the CLI hands SIGINT back to Python
    before = real(signum, handler)
    if handler is signal.default_int_handler:
        os.kill(os.getpid(), signal.SIGINT)
    return before
signal.signal = arm
from patchkit.cli.main import entry
entry(sys.argv[1:])
"""


def test_a_ctrl_c_as_the_cli_takes_sigint_back_is_said_not_a_traceback(tmp_path: Path) -> None:
    """The CLI holds the signals of its first moments, then gives SIGINT back to Python's own
    handler: a Ctrl-C landing in that hand-over raised KeyboardInterrupt outside every handler
    of the CLI, a traceback and no JSON (the full suite's early-signal test, once). It is an
    interrupt like any other: its JSON document, exit 130."""
    tree = app_tree(tmp_path / "tree")
    catalog = user_catalog(tmp_path / "catalog", {"quick": (app_patch(), "")})
    before = tree_digest(tree)
    proc = subprocess.run([sys.executable, "-c", ARMED_THEN_SIGNALLED, "--catalog", str(catalog),
                           "apply", "quick", "--root", f"tree={tree}", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 130, (proc.stdout, proc.stderr)
    data = json.loads(proc.stdout)
    assert (data["ok"], data["op"], data["error"]["type"]) == (False, "apply", "Interrupted")
    assert tree_digest(tree) == before


def test_a_signal_once_state_json_names_the_change_leaves_it_complete(
        tmp_path: Path, monkeypatch: Any) -> None:
    """The commit point is state.json's rename. A SIGTERM after it, while the directory was
    being fsynced (state.json already naming the transaction), put the files back as if
    before the commit point: the state recorded the fix as applied over files that no
    longer held it. It is the change complete, its journal kept for the next run's
    bookkeeping, and said so."""
    import pytest

    from patchkit import api, errors
    from patchkit.catalog import Catalog
    from patchkit.engine.store import Store
    from patchkit.targets import LocalTarget
    from tests.test_remote import PY, SAMPLES, make_tree

    roots = make_tree(tmp_path / "tree")
    target = LocalTarget(roots, PY, "local")
    catalog = Catalog(SAMPLES / "catalog")
    written = Store.write_state

    def signalled_after(self: Store, state: Any) -> None:
        written(self, state)
        if state.names():  # the apply's commit point, not a later bookkeeping write
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(Store, "write_state", signalled_after)
    with errors.stopping_on_signals(), pytest.raises(errors.Terminated) as info:
        api.apply(catalog, target, ["index-k-bytes"])
    assert "the change is complete" in str(info.value), str(info.value)
    assert info.value.details.get("committed") is True
    monkeypatch.setattr(Store, "write_state", written)
    seen = {s.name: s.state for s in api.status(catalog, target).status}
    assert seen["index-k-bytes"] == "applied", seen  # the files hold what the state records


def test_a_signal_while_a_class_is_made_is_an_interrupt_not_a_bug() -> None:
    """A SIGINT or SIGTERM while a command's modules are imported lands, in Python 3.11, inside
    a class being made (a dataclass field's ``__set_name__``), which wraps it as
    ``RuntimeError: Error calling __set_name__``: the CLI said "internal error ... this is a bug
    in patchkit", exit 70 (seen in the first-moments test above). The signal under the
    wrapping is what the run says."""
    from patchkit.cli import main
    from patchkit.errors import Stop

    for raised, signum in ((KeyboardInterrupt(), signal.SIGINT), (Stop(signal.SIGTERM), signal.SIGTERM)):
        class Field:
            def __set_name__(self, owner: type, name: str) -> None:
                raise raised

        try:
            type("Record", (), {"requires": Field()})
        except BaseException as exc:  # noqa: BLE001  the wrapping (3.11) or the signal itself
            got = exc
        assert main._signal_under(got) == signum, repr(got)  # type: ignore[arg-type]
    assert main._signal_under(RuntimeError("a bug")) is None


def test_a_signal_after_the_result_is_said_leaves_the_exit_code_as_it_is() -> None:
    """A Ctrl-C or SIGTERM as patchkit exits, its result printed (the interpreter's shutdown,
    tens of milliseconds), killed it by the signal: a script read ``"ok": true`` and exit
    -2 (130 in a shell). Once the command has said its result, the program ignores them."""
    script = ("import os, signal, sys, time\n"
              "from patchkit.cli import entry\n"
              "try:\n"
              "    entry(['--version'])\n"
              "except SystemExit as done:\n"
              "    code = done.code\n"
              "for signum in (signal.SIGINT, signal.SIGTERM):\n"
              "    os.kill(os.getpid(), signum)\n"
              "time.sleep(0.2)\n"
              "sys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stdout.startswith("patchkit, version")
