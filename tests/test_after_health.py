"""``--after-cmd`` and ``--health-cmd`` on one target, local and over the test sshd, with the
fleet's semantics; the built-in ``sglang:URL`` health kind against a stdlib HTTP server on
loopback standing in for SGLang's ``/health``, including one that never answers."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from patchkit.demo import SEED_FIXES
from tests.test_remote import PY, REPO, SAMPLES, Ssh, cli, make_tree, ssh  # noqa: F401  (ssh is a fixture)
from tests.fixtures.procs import alive

POOL = "python/sglang/srt/pool.py"


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        code = 200 if self.path in ("/health", "/health_generate") else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def health_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A server that takes connections and never answers (a hung SGLang)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def _status(args: list[str]) -> dict[str, str]:
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "status", "--json", *args])
    assert code == 0, err
    return {f["name"]: f["state"] for f in json.loads(out)["status"]["fixes"]}


def _where(kind: str, ssh: Ssh, roots: dict[str, str]) -> list[str]:
    main = roots["sglang"] if kind == "local" else ssh.url(roots["sglang"])
    return (["--target", main, "--root", f"serve={roots['serve']}", "--python", PY]
            + (ssh.cli_args() if kind == "remote" else []))


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_a_passing_health_check_keeps_the_change_and_the_after_cmd_runs_once(
        kind: str, ssh: Ssh, tmp_path: Path, health_url: str) -> None:
    roots = make_tree(tmp_path / "tree")
    log = tmp_path / "after.log"
    where = _where(kind, ssh, roots)
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes", *where,
                          "--after-cmd", f"echo restarted >> {log}",
                          "--health-cmd", f"sglang:{health_url}", "--json"])
    assert code == 0, out + err
    data = json.loads(out)
    assert [r["what"] for r in data["after"]["ran"]] == ["after-cmd", "health-cmd"]
    assert data["after"]["ran"][1]["command"] == f"sglang:{health_url}"
    assert log.read_text() == "restarted\n"
    assert _status(where)["index-k-bytes"] == "applied"


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_a_failed_health_check_undoes_the_change_and_runs_the_after_cmd_again(
        kind: str, ssh: Ssh, tmp_path: Path, silent_url: str) -> None:
    roots = make_tree(tmp_path / "tree")
    before = Path(roots["sglang"], POOL).read_bytes()
    log = tmp_path / "after.log"
    where = _where(kind, ssh, roots)
    health = ["--health-cmd", f"sglang:{silent_url}", "--health-timeout", "1"] if kind == "local" \
        else ["--health-cmd", "echo the server is down; exit 3"]
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes", *where,
                          "--after-cmd", f"echo restarted >> {log}", *health])
    assert code == 1, out + err
    assert "applied index-k-bytes" in out  # what the run did, then why it was undone
    assert "--health-cmd failed" in err and "the change was undone" in err
    assert ("no answer" in err or "timed out" in err) if kind == "local" else "the server is down" in err
    assert log.read_text() == "restarted\nrestarted\n"
    assert Path(roots["sglang"], POOL).read_bytes() == before
    assert _status(where).get("index-k-bytes", "not-applied") == "not-applied"


@pytest.mark.parametrize("hook", ["--after-cmd", "--health-cmd"])
def test_a_failed_hook_is_typed_by_which_command_failed_and_its_output_stands_apart(
        hook: str, tmp_path: Path) -> None:
    """A failed --after-cmd (a restart) was typed HealthCheckFailed, so a script could not tell
    a restart that failed from a server that came up unhealthy; and output without a final
    newline ran into patchkit's own words ("the server is down; the change was undone")."""
    roots = make_tree(tmp_path / "tree")
    before = Path(roots["sglang"], POOL).read_bytes()
    where = _where("local", None, roots)  # type: ignore[arg-type]
    base = ["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes", *where,
            hook, "printf 'the server is down'; exit 3"]
    code, out, err = cli([*base, "--json"])
    assert code == 1, out + err
    error = json.loads(out)["error"]
    assert error["type"] == ("AfterCommandFailed" if hook == "--after-cmd" else "HealthCheckFailed")
    assert Path(roots["sglang"], POOL).read_bytes() == before
    code, out, err = cli(base)
    assert code == 1, out + err
    lines = err.splitlines()
    assert lines[0].startswith(f"error: {hook} failed (exit 3)") and "the change was undone" in lines[0]
    assert lines[1:] == [f"{hook} said:", "  the server is down"], err


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_a_failed_health_check_after_an_upgrade_puts_the_old_version_back(
        kind: str, ssh: Ssh, tmp_path: Path) -> None:
    """The undo was a rollback of the new version, which restores the release's files: the
    server then ran with neither version, while the message said "put back as before"."""
    import shutil

    roots = make_tree(tmp_path / "tree")
    catalog = tmp_path / "catalog"
    shutil.copytree(SAMPLES / "catalog", catalog)
    where = _where(kind, ssh, roots)
    base = ["--catalog", str(catalog)]
    assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0
    applied = Path(roots["sglang"], POOL).read_bytes()
    manifest = catalog / "manifests" / "index-k-bytes.toml"
    manifest.write_text(manifest.read_text().replace("version = 2\n", "version = 3\n", 1)
                        + '\n[[changelog]]\nversion = 3\ndate = "2026-12-01"\n'
                          'summary = "Same change, new version."\n')
    code, out, err = cli([*base, "apply", "index-k-bytes", *where, "--json",
                          "--health-cmd", "echo the server is down; exit 3"])
    assert code == 1, out + err
    data = json.loads(out)
    assert [(f["outcome"], f["undid"], f["version"], f["from_version"]) for f in data["fixes"]] == [
        ("undone", "upgraded", 2, 3)]
    assert "summary" not in data and "txn" not in data  # they named the state undone
    undone = data["error"]["details"]["after"]["undone"]
    assert [(f["name"], f["outcome"], f["version"]) for f in undone["fixes"]] == [
        ("index-k-bytes", "undone", 2)]
    assert "(index-k-bytes v2 put back as before)" in data["error"]["message"]
    assert Path(roots["sglang"], POOL).read_bytes() == applied  # v2's change, still there
    code, out, err = cli([*base, "status", "--json", *where])
    seen = {f["name"]: (f["state"], f["version"]) for f in json.loads(out)["status"]["fixes"]}
    assert seen["index-k-bytes"] == ("outdated", 2), seen


def test_a_failed_health_check_after_a_rollback_puts_the_same_version_back(tmp_path: Path) -> None:
    """The undo of a rollback was an apply of the catalog's version: with the catalog at v3
    and v2 applied, a failed health check after the rollback deployed v3, said as "put back
    as before"."""
    import shutil

    roots = make_tree(tmp_path / "tree")
    catalog = tmp_path / "catalog"
    shutil.copytree(SAMPLES / "catalog", catalog)
    where = _where("local", None, roots)  # type: ignore[arg-type]
    base = ["--catalog", str(catalog)]
    assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0
    state = Path(roots["sglang"], ".patchkit/state.json")
    applied, fixes = Path(roots["sglang"], POOL).read_bytes(), json.loads(state.read_text())["fixes"]
    manifest = catalog / "manifests" / "index-k-bytes.toml"
    manifest.write_text(manifest.read_text().replace("version = 2\n", "version = 3\n", 1)
                        + '\n[[changelog]]\nversion = 3\ndate = "2026-12-01"\n'
                          'summary = "Same change, new version."\n')
    code, out, err = cli([*base, "rollback", "index-k-bytes", *where, "--health-cmd", "exit 3",
                          "--json"])
    assert code == 1, out + err
    undone = json.loads(out)["error"]["details"]["after"]["undone"]
    assert [(f["outcome"], f["version"]) for f in undone["fixes"]] == [("undone", 2)], undone
    assert json.loads(state.read_text())["fixes"] == fixes  # v2, as it was; not v3
    assert Path(roots["sglang"], POOL).read_bytes() == applied


def test_an_undo_that_fails_says_the_change_stands_with_its_own_exit_code(tmp_path: Path) -> None:
    """The health check edits a file the apply wrote, then fails: the undo is refused, and
    that was an exit 1 with a HealthCheckFailed, as for a change undone."""
    roots = make_tree(tmp_path / "tree")
    edit = tmp_path / "edit.sh"
    edit.write_text(f"#!/bin/sh\necho '# oncall' >> {Path(roots['sglang'], POOL)}\nexit 1\n")
    edit.chmod(0o755)
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes",
                          *_where("local", None, roots), "--health-cmd", str(edit),  # type: ignore[arg-type]
                          "--json"])
    assert code == 17, out + err
    error = json.loads(out)["error"]
    assert error["type"] == "ChangeNotUndone" and "the change stands" in error["message"]
    assert error["details"]["undo_error"]["type"] == "ConcurrentChange"
    assert _status(_where("local", None, roots))["index-k-bytes"] == "drifted"  # type: ignore[arg-type]


def test_hooks_refuse_bad_input_before_anything_is_written(tmp_path: Path) -> None:
    roots = make_tree(tmp_path / "tree")
    before = Path(roots["sglang"], POOL).read_bytes()
    code, _out, err = cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes",
                           "--target", roots["sglang"], "--root", f"serve={roots['serve']}",
                           "--health-cmd", "sglang:127.0.0.1:30000"])
    assert code == 2 and "sglang:http://127.0.0.1:30000" in err
    code, _out, err = cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes",
                           "--target", roots["sglang"], "--root", f"serve={roots['serve']}",
                           "--restart", "--after-cmd", "true"])
    assert code == 2 and "--restart" in err
    assert Path(roots["sglang"], POOL).read_bytes() == before
    assert not Path(roots["sglang"], ".patchkit").exists()


SERVER = """import os, sys, time
sys.path.insert(0, "python")  # the fork's sglang, as `python -m sglang.launch_server` finds it
open(sys.argv[2], "w").write(str(os.getpid()))
time.sleep(3600)
"""


@pytest.mark.network
def test_seed_deploy_on_the_demo_fork_restarts_the_server_and_clears_restart_pending(
        demo_fork, tmp_path: Path, health_url: str) -> None:  # type: ignore[no-untyped-def]
    fork = demo_fork  # as build_fork makes it: a copy of the session's (tests/fixtures/fleet.py)
    server, pidfile = tmp_path / "server.py", tmp_path / "server.pid"
    server.write_text(SERVER)
    launch = shlex.join([PY, str(server), str(fork.sglang / "python"), str(pidfile)])
    start = f"(cd {shlex.quote(str(fork.sglang))} && setsid {launch} </dev/null >/dev/null 2>&1 &);"
    # the "service": killed and started again by the after-command
    restart = (f"kill $(cat {pidfile}); rm -f {pidfile}; {start} "
               f"while [ ! -s {pidfile} ]; do sleep 0.05; done")
    subprocess.run(["/bin/sh", "-c", f"{start} while [ ! -s {pidfile} ]; do sleep 0.05; done"],
                   check=True, timeout=30)
    where = ["--target", str(fork.sglang), "--root", f"serve={fork.serve}"]
    try:
        first = int(pidfile.read_text())
        code, out, err = cli(["--catalog", str(REPO), "status", *where, "--json"])
        assert [p["pid"] for p in json.loads(out)["status"]["running"]["processes"]] == [first]
        code, out, err = cli(["--catalog", str(REPO), "apply", *SEED_FIXES[:-1], *where])
        assert code == 0, out + err
        code, out, err = cli(["--catalog", str(REPO), "status", *where, "--exit-code", "--running"])
        assert code == 1 and f"restart pending\t{first}\t" in err, err  # the restart it needs
        code, out, err = cli(["--catalog", str(REPO), "apply", SEED_FIXES[-1], *where, "--after-cmd",
                              restart, "--health-cmd", f"sglang:{health_url}/health_generate", "--json"])
        assert code == 0, out + err
        assert [r["exit"] for r in json.loads(out)["after"]["ran"]] == [0, 0]
        code, out, err = cli(["--catalog", str(REPO), "status", *where])
        assert code == 0 and "restart pending" not in err, err
        code, out, err = cli(["--catalog", str(REPO), "status", *where, "--exit-code", "--running",
                              "--json"])
        assert code == 0, out + err
        running = json.loads(out)["status"]["running"]
        pid = int(pidfile.read_text())
        assert [p["state"] for p in running["processes"] if p["pid"] == pid] == ["current"]
    finally:
        if pidfile.exists() and pidfile.read_text():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def _restart_catalog(tmp_path: Path, restart: str) -> Path:
    import shutil

    catalog = tmp_path / "catalog"
    shutil.copytree(SAMPLES / "catalog", catalog)
    manifest = catalog / "manifests" / "index-k-bytes.toml"
    manifest.write_text(manifest.read_text().replace('status = "active"\n', f'status = "active"\n{restart}\n', 1))
    return catalog


def test_the_restart_a_manifest_names_is_said_and_run_by_restart(tmp_path: Path) -> None:
    roots = make_tree(tmp_path / "tree")
    catalog = _restart_catalog(tmp_path, 'restart = "prefill"')
    log = tmp_path / "restarts"
    config = tmp_path / "patchkit.toml"
    config.write_text("")  # no [restarts] yet: the hint says to define it, not to pass --restart
    where = ["--target", roots["sglang"], "--root", f"serve={roots['serve']}"]
    code, out, err = cli(["--catalog", str(catalog), "--config", str(config), "apply", "index-k-bytes", *where])
    assert code == 0, err
    assert "restart needed prefill (run it yourself; define it in patchkit.toml [restarts]" in out, out
    cli(["--catalog", str(catalog), "--config", str(config), "rollback", "index-k-bytes", *where])
    config.write_text(f'[restarts]\nprefill = "echo prefill >> {log}"\n')
    code, out, err = cli(["--catalog", str(catalog), "--config", str(config), "apply", "index-k-bytes", *where])
    assert code == 0, err
    assert "restart needed prefill" in out and "or apply with --restart" in out and not log.exists()
    code, out, err = cli(["--catalog", str(catalog), "--config", str(config), "rollback",
                          "index-k-bytes", *where])
    assert code == 0, err  # the hint names the command that changed the fix
    assert "restart needed prefill" in out and "or rollback with --restart" in out, out
    code, out, err = cli(["--catalog", str(catalog), "--config", str(config), "apply", "index-k-bytes",
                          *where, "--restart", "--json"])
    assert code == 0, err
    assert json.loads(out)["restart"] == ["prefill"] and log.read_text() == "prefill\n"

    config.write_text("[restarts]\ndecode = \"true\"\n")  # prefill is not defined: refused, nothing written
    cli(["--catalog", str(catalog), "--config", str(config), "rollback", "index-k-bytes", *where])
    before = Path(roots["sglang"], POOL).read_bytes()
    code, _out, err = cli(["--catalog", str(catalog), "--config", str(config), "apply", "index-k-bytes",
                           *where, "--restart"])
    assert code == 2 and "prefill" in err and "[restarts]" in err
    assert Path(roots["sglang"], POOL).read_bytes() == before


def test_a_bad_restart_name_in_a_manifest_is_a_manifest_error(tmp_path: Path) -> None:
    catalog = _restart_catalog(tmp_path, 'restart = "no spaces please"')
    code, _out, err = cli(["--catalog", str(catalog), "show", "index-k-bytes"])
    assert code != 0 and "restart" in err and "index-k-bytes.toml" in err


def test_show_names_the_restart_and_init_writes_a_restarts_table_to_fill_in(tmp_path: Path) -> None:
    """`show` had no Restart line; the patchkit.toml `init` writes had no [restarts], though
    every shipped fix names one, so every apply said "restart needed" and --restart exited 2."""
    catalog = _restart_catalog(tmp_path, 'restart = "prefill"')
    code, out, err = cli(["--catalog", str(catalog), "show", "index-k-bytes"])
    assert code == 0, err
    assert "Restart: prefill" in out
    code, _out, err = cli(["init", str(tmp_path / "mine"), "--no-git"])
    assert code == 0, err
    written = (tmp_path / "mine" / "patchkit.toml").read_text()
    assert "# [restarts]\n# prefill = " in written
    import tomllib
    uncommented = written.replace("# [restarts]", "[restarts]").replace("# prefill =", "prefill =")
    assert "prefill" in tomllib.loads(uncommented)["restarts"]  # as written, once uncommented


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_the_hooks_run_says_the_change_stands_and_stops_the_command(
        signum: int, tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM while --after-cmd ran left the fix applied with nothing said (SIGTERM:
    exit 143, "target unchanged" in the exit-code table, and no JSON; SIGINT: "aborted").
    Now the command is stopped, the run exits 128 + the signal's number, says on stderr and in
    its JSON that the change stands unconfirmed and what to do, and the target is as applied."""
    import sys
    import time

    roots = make_tree(tmp_path / "tree")
    started, pidfile, child = tmp_path / "started", tmp_path / "after.pid", tmp_path / "child.pid"
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkit", "--catalog", str(SAMPLES / "catalog"), "apply",
         "index-k-bytes", "--target", roots["sglang"], "--root", f"serve={roots['serve']}",
         "--python", PY, "--json", "--after-cmd",
         f"echo $$ > {pidfile}; sleep 60 & echo $! > {child}; touch {started}; wait"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert started.exists(), proc.communicate()
    os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, out + err
    name = signal.Signals(signum).name
    assert f"interrupted by {name} while --after-cmd ran" in err, err
    assert "the change stands (index-k-bytes)" in err and "patchkit undo" in err, err
    data = json.loads(out)
    assert data["ok"] is False and data["error"]["type"] == "Terminated"
    assert [f["outcome"] for f in data["fixes"]] == ["applied"]
    assert data["error"]["details"]["after"]["ran"] == []  # the after-cmd did not finish
    # which hook the signal stopped, for a script: only the message said it (a trial)
    assert data["error"]["details"]["stopped"] == {"what": "after-cmd", "command": proc.args[-1]}
    with pytest.raises(ProcessLookupError):  # the after-cmd was stopped with the run
        os.kill(int(pidfile.read_text()), 0)
    deadline = time.monotonic() + 10  # and what it started (it outlived the shell: init's now)
    while time.monotonic() < deadline and alive(int(child.read_text())):
        time.sleep(0.05)
    assert not alive(int(child.read_text()))
    assert _status(["--target", roots["sglang"], "--root", f"serve={roots['serve']}"])[
        "index-k-bytes"] == "applied"


def test_sync_says_and_runs_the_restarts_of_what_it_changed(tmp_path: Path) -> None:
    """sync is the upgrade path: it said no restart (apply and rollback do), took no --restart,
    and refused --after-cmd and --health-cmd on one target."""
    roots = make_tree(tmp_path / "tree")
    catalog = _restart_catalog(tmp_path, 'restart = "prefill"')
    log = tmp_path / "restarts"
    config = tmp_path / "patchkit.toml"
    config.write_text(f'[restarts]\nprefill = "echo prefill >> {log}"\n')
    where = ["--target", roots["sglang"], "--root", f"serve={roots['serve']}"]
    base = ["--catalog", str(catalog), "--config", str(config)]
    code, out, err = cli([*base, "sync", *where])
    assert code == 0, err
    assert "restart needed prefill" in out and "or sync with --restart" in out and not log.exists()
    code, out, err = cli([*base, "sync", *where, "--restart", "--json"])  # nothing changed
    assert code == 0, err
    assert "restart" not in json.loads(out) and not log.exists()
    code, out, err = cli([*base, "rollback", "pool-guard", "index-k-bytes", *where])
    assert code == 0, (out, err)
    code, out, err = cli([*base, "sync", *where, "--restart", "--json"])
    assert code == 0, err
    assert json.loads(out).get("restart") == ["prefill"], out
    assert json.loads(out)["restart"] == ["prefill"] and log.read_text() == "prefill\n"
    cli([*base, "rollback", "pool-guard", "index-k-bytes", *where])
    code, out, err = cli([*base, "sync", *where, "--after-cmd", f"echo after >> {log}"])
    assert code == 0, err
    assert log.read_text() == "prefill\nafter\n"


def test_sync_names_the_fixes_on_roots_it_was_not_given(tmp_path: Path) -> None:
    """A fix on the serve root is not synced on a target given only its sglang root; sync said
    nothing of it (status --all does). One never applied there is skipped, said as such with
    how to give the root (as apply's refusal says it), not "not synced" as if something was
    wrong; one the target records on that root is what a sync leaves behind, and says so.
    Exit 0 either way: nothing failed."""
    roots = make_tree(tmp_path / "tree")
    catalog = tmp_path / "catalog"
    import shutil

    shutil.copytree(SAMPLES / "catalog", catalog)
    sync = ["--catalog", str(catalog), "sync", "--target", roots["sglang"]]
    code, out, err = cli([*sync, "--dry-run"])
    assert code == 0, err
    assert ("pool-guard: skipped: never applied here, and root serve is not given (to sync it, "
            "give the root: --root serve=PATH or [targets.NAME.roots] in patchkit.toml)") in err, err
    assert "not synced" not in out + err
    code, out, err = cli([*sync, "--dry-run", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["left_out"] == [{"name": "pool-guard", "missing_roots": ["serve"]}]
    assert data["unseen"] == []

    code, out, err = cli(["--catalog", str(catalog), "apply", "pool-guard", "--with-deps",
                          "--target", roots["sglang"], "--root", f"serve={roots['serve']}"])
    assert code == 0, err
    code, out, err = cli([*sync, "--dry-run"])
    assert code == 0, err
    assert ("pool-guard: applied here, not synced: root serve not given (--root serve=PATH)"
            in err), err
    data = json.loads(cli([*sync, "--dry-run", "--json"])[1])
    assert data["unseen"] == [{"name": "pool-guard", "missing_roots": ["serve"]}]


def test_a_failed_sync_names_the_fixes_it_left_out_as_a_successful_one_does(
        tmp_path: Path) -> None:
    """A sync that fails carried ``unseen: []`` and no ``left_out`` in its JSON, even when a
    fix on a root not given was applied there (a new-user trial): a script reading what the
    sync left behind found nothing. A failed sync says both, as a successful one does."""
    import shutil

    roots = make_tree(tmp_path / "tree")
    catalog = tmp_path / "catalog"
    shutil.copytree(SAMPLES / "catalog", catalog)
    code, out, err = cli(["--catalog", str(catalog), "apply", "pool-guard", "--with-deps",
                          "--target", roots["sglang"], "--root", f"serve={roots['serve']}"])
    assert code == 0, err
    # a fix the sglang tree cannot take: its precondition is never met
    (catalog / "manifests" / "never.toml").write_text(
        'format = 1\nname = "never"\nversion = 1\ntitle = "never"\nstatus = "active"\n'
        'rationale = "never"\n\n[upstream]\nbase_release = "0.5.21"\n'
        'releases = ["0.5.20", "0.5.21"]\n\n[[patches]]\nfile = "0001-never.patch"\n\n'
        '[[preconditions]]\nkind = "grep"\npath = "python/sglang/srt/pool.py"\n'
        'pattern = "a line no release has"\npresent = true\n')
    (catalog / "patches" / "never").mkdir()
    (catalog / "patches" / "never" / "0001-never.patch").write_text(
        "--- /dev/null\n+++ b/python/sglang/srt/never.py\n@@ -0,0 +1 @@\n+never = 1\n")
    left = [{"name": "pool-guard", "missing_roots": ["serve"]}]
    for dry in ([], ["--dry-run"]):
        code, out, err = cli(["--catalog", str(catalog), "sync", "--target", roots["sglang"],
                              *dry, "--json"])
        assert code == 1, (out, err)
        data = json.loads(out)
        assert data["ok"] is False and "never" in data["error"]["message"], data
        assert data["left_out"] == left and data["unseen"] == left, data
    (catalog / "manifests" / "never.toml").unlink()
    code, out, err = cli(["--catalog", str(catalog), "sync", "--target", roots["sglang"],
                          "--root", f"serve={roots['serve']}", "--json"])
    assert code == 0, err
    data = json.loads(out)  # nothing left out: both said, empty
    assert (data["left_out"], data["unseen"]) == ([], []), data


def test_a_server_url_with_or_without_its_slash_probes_its_health_endpoint() -> None:
    """`sglang:http://host:port/` probed `/` (a plain HTTP server's 200 passed a bad deploy,
    a real SGLang server's 404 failed a good one); the server's own URL means `/health`."""
    import shlex

    from patchkit.hooks import health_command

    def probed(url: str) -> str:
        return shlex.split(str(health_command(f"sglang:{url}", python="python3")))[-2]

    for url in ("http://127.0.0.1:30000", "http://127.0.0.1:30000/"):
        assert probed(url) == "http://127.0.0.1:30000/health", url
    assert probed("http://127.0.0.1:30000/health_generate") == "http://127.0.0.1:30000/health_generate"


def test_restart_without_any_config_says_none_was_found(tmp_path: Path, monkeypatch) -> None:
    """With no patchkit.toml at all, --restart said "which patchkit.toml does not define"."""
    roots = make_tree(tmp_path / "tree")
    catalog = _restart_catalog(tmp_path, 'restart = "prefill"')
    monkeypatch.chdir(tmp_path)  # no patchkit.toml here, none given
    monkeypatch.delenv("PATCHKIT_CONFIG", raising=False)
    before = Path(roots["sglang"], POOL).read_bytes()
    code, _out, err = cli(["--catalog", str(catalog), "sync", "--target", roots["sglang"],
                           "--root", f"serve={roots['serve']}", "--restart"])
    assert code == 2 and "no patchkit.toml was found" in err and "[restarts] prefill" in err, err
    assert Path(roots["sglang"], POOL).read_bytes() == before


def _patchkit(args: list[str], out: Path) -> str:
    """A shell line running patchkit ARGS as its own process (as a hook would), its output to
    ``out`` and its exit code to ``out``.code."""
    return (shlex.join([PY, "-m", "patchkit", "--catalog", str(SAMPLES / "catalog"), *args])
            + f" > {shlex.quote(str(out))} 2>&1; echo $? > {shlex.quote(str(out))}.code")


def test_a_change_made_while_the_health_check_runs_waits_for_the_lock_and_the_undo_succeeds(
        tmp_path: Path) -> None:
    """The hooks ran after the target's lock was released: an apply of another fix that
    slipped in while --health-cmd ran made the undo fail ("not the last change there", exit
    17), leaving the server half patched. The run now holds the lock through its hooks and
    their undo: the other apply waits for it (here it gives up at its --lock-timeout), the
    failed check's undo puts the target back, and the other fix was never written."""
    roots = make_tree(tmp_path / "tree")
    before = {p: Path(roots[r], p).read_bytes() for r, p in (("sglang", POOL),)}
    where = _where("local", None, roots)  # type: ignore[arg-type]
    inner = tmp_path / "inner"
    health = _patchkit(["apply", "pool-guard", *where, "--lock-timeout", "0.5"], inner) + "; exit 1"
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes", *where,
                          "--health-cmd", health, "--json"])
    assert code == 1, out + err
    assert json.loads(out)["error"]["type"] == "HealthCheckFailed"
    assert inner.with_suffix(".code").read_text().strip() == "4", inner.read_text()  # LockBusy
    assert "holds the lock" in inner.read_text() and "--health-cmd" in inner.read_text()
    assert {p: Path(roots["sglang"], p).read_bytes() for p in before} == before
    seen = _status(where)
    assert seen.get("index-k-bytes", "not-applied") == "not-applied"
    assert seen.get("pool-guard", "not-applied") == "not-applied"


def test_a_read_only_patchkit_run_from_a_hook_reads_the_target_while_its_lock_is_held(
        tmp_path: Path) -> None:
    """The lock held through the hooks must not deadlock a hook that runs `patchkit status`
    (or any read-only run) on the target: it reads at once, before and after the undo."""
    roots = make_tree(tmp_path / "tree")
    where = _where("local", None, roots)  # type: ignore[arg-type]
    ok = tmp_path / "ok"
    status = ["status", "--json", *where, "--lock-timeout", "0.5"]
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes", *where,
                          "--health-cmd", _patchkit(status, ok) + f"; exit $(cat {ok}.code)"])
    assert code == 0, out + err
    fixes = {f["name"]: f["state"] for f in json.loads(ok.read_text())["status"]["fixes"]}
    assert fixes["index-k-bytes"] == "applied"

    cli(["--catalog", str(SAMPLES / "catalog"), "rollback", "index-k-bytes", *where])
    runs = tmp_path / "runs"
    runs.mkdir()
    after = (f"n=$(ls {runs} | wc -l); "
             + _patchkit(status, runs / "s") .replace(str(runs / "s"), f"{runs}/s$n"))
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes", *where,
                          "--after-cmd", after, "--health-cmd", "exit 3"])
    assert code == 1, out + err
    seen = []  # the after-cmd ran twice: after the change, and again after its undo
    for i in (0, 2):
        assert (runs / f"s{i}.code").read_text().strip() == "0", (runs / f"s{i}").read_text()
        states = {f["name"]: f["state"] for f in json.loads((runs / f"s{i}").read_text())["status"]["fixes"]}
        seen.append(states.get("index-k-bytes"))
    assert seen == ["applied", "not-applied"]


@pytest.mark.parametrize("op", ["apply", "rollback"])
def test_the_json_of_a_failed_hook_says_the_fixes_were_undone(op: str, tmp_path: Path) -> None:
    """With --json, a failed hook's output said `fixes[0].outcome` "applied" (or
    "rolled-back"), `ok` false beside it, though the change had been undone."""
    roots = make_tree(tmp_path / "tree")
    where = _where("local", None, roots)  # type: ignore[arg-type]
    base = ["--catalog", str(SAMPLES / "catalog")]
    if op == "rollback":
        assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0
    code, out, err = cli([*base, op, "index-k-bytes", *where, "--after-cmd", "true",
                          "--health-cmd", "echo unhealthy; exit 3", "--json"])
    assert code == 1, out + err
    data = json.loads(out)
    assert data["ok"] is False and data["error"]["type"] == "HealthCheckFailed"
    [fix] = data["fixes"]
    assert fix["name"] == "index-k-bytes" and fix["outcome"] == "undone", fix
    assert fix["undid"] == ("applied" if op == "apply" else "rolled-back")
    assert fix["version"] == (None if op == "apply" else 2)  # the version put back
    assert [(r["what"], r["exit"]) for r in data["after"]["ran"]] == [
        ("after-cmd", 0), ("health-cmd", 3), ("after-cmd", 0)]
    assert data["after"]["undone"]["fixes"][0]["outcome"] == "undone"
    assert _status(where).get("index-k-bytes", "not-applied") == (
        "not-applied" if op == "apply" else "applied")


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_a_shell_health_check_that_hangs_is_stopped_at_the_health_timeout_and_undone(
        kind: str, ssh: Ssh, tmp_path: Path) -> None:
    """--health-timeout bounded only sglang:URL: a shell --health-cmd that hung hung
    patchkit forever. Now its process group is killed at the timeout, the check fails as
    timed out, and the change is undone."""
    import time

    roots = make_tree(tmp_path / "tree")
    before = Path(roots["sglang"], POOL).read_bytes()
    where = _where(kind, ssh, roots)
    pidfile = tmp_path / "sleep.pid"
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes", *where,
                          "--health-cmd", f"sleep 600 & echo $! > {pidfile}; wait",
                          "--health-timeout", "1", "--json"])
    assert code == 1, out + err
    data = json.loads(out)
    assert data["error"]["type"] == "HealthCheckFailed"
    assert "--health-cmd timed out after 1s" in data["error"]["message"], data["error"]["message"]
    [run] = data["after"]["ran"]
    assert run["what"] == "health-cmd" and run["timed_out"] is True
    assert data["fixes"][0]["outcome"] == "undone"
    assert Path(roots["sglang"], POOL).read_bytes() == before
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    assert not alive(pid), "the health command's sleep outlived the timeout"


def test_on_an_ssh_target_a_change_made_during_the_hooks_leaves_the_commands_to_run(
        ssh: Ssh, tmp_path: Path) -> None:
    """Over ssh:// the lock is not held between runs: an apply slipping in while the health
    check runs makes the undo refuse (exit 17), and the message said no concrete next step.
    It now names `patchkit status` and the rollback of the fixes, and the error repeats the
    options the run was given (the note's, docs/cli.md), so each runs on the same target."""
    roots = make_tree(tmp_path / "tree")
    where = _where("remote", ssh, roots)
    inner = tmp_path / "inner"
    health = _patchkit(["apply", "pool-guard", *where], inner) + "; exit 1"
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes", *where,
                          "--health-cmd", health, "--json"])
    assert code == 17, out + err
    error = json.loads(out)["error"]
    assert "not the last change" in error["message"], error["message"]
    steps = re.findall(r"`(patchkit [^`]*)`", error["message"])
    assert steps[-2:] == ["patchkit status", "patchkit rollback index-k-bytes"], error["message"]
    assert error["details"]["options"] == ["--catalog", str(SAMPLES / "catalog"), *where]
    assert "note: run the patchkit commands above with this run's options: " in err


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_a_hook_that_leaves_a_process_running_returns_when_its_shell_exits(
        kind: str, ssh: Ssh, tmp_path: Path) -> None:
    """A restart such as `nohup python -m sglang.launch_server ... &` leaves its server running
    with the hook's output open: patchkit waited for that output to close, so the after-cmd
    never returned and a health check that passed timed out and was undone. A hook is done when
    its shell exits; what it started keeps running."""
    from tests.test_remote import cli_process

    roots = make_tree(tmp_path / "tree")
    pids = tmp_path / "pids"
    try:
        done = cli_process(["--catalog", str(SAMPLES / "catalog"), "apply", "index-k-bytes",
                            *_where(kind, ssh, roots),
                            "--after-cmd", f"sleep 600 & echo $! >> {pids}; echo restarted",
                            "--health-cmd", f"sleep 600 & echo $! >> {pids}; echo healthy",
                            "--health-timeout", "30", "--json"])
        assert done.returncode == 0, done.stdout + done.stderr
        data = json.loads(done.stdout)
        assert data["fixes"][0]["outcome"] == "applied"
        ran = {r["what"]: r for r in data["after"]["ran"]}
        assert "restarted" in ran["after-cmd"]["output"] and "healthy" in ran["health-cmd"]["output"]
        assert not ran["health-cmd"].get("timed_out")
        started = [int(p) for p in pids.read_text().split()]
        assert len(started) == 2 and all(alive(p) for p in started)  # the "server" keeps running
    finally:
        for pid in (int(p) for p in (pids.read_text().split() if pids.exists() else ())):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _held_python(tmp_path: Path, armed: Path, inside: Path) -> Path:
    """A ``--python`` that, once ``armed`` exists, marks ``inside`` and waits (until ``armed``
    is gone, at most a minute) before answering the bytecode purge's question
    (``sys.pycache_prefix``) the first time: an undo after a failed check asks it once its
    files are written, before its commit point; the restore a signal there starts asks it
    again, and is answered at once."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\ncase \"$*\" in *pycache_prefix*) if [ -e {shlex.quote(str(armed))} ] && [ ! -e {shlex.quote(str(inside))} ]; "
                      f"then touch {shlex.quote(str(inside))}; n=0; while [ -e {shlex.quote(str(armed))} ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done; fi;; esac\n"
                      f"exec {shlex.quote(PY)} \"$@\"\n")
    python.chmod(0o755)
    return python


def _signalled_when(proc: subprocess.Popen[str], ready: Any, signum: int) -> tuple[str, str]:
    import time

    deadline = time.monotonic() + 60
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready(), proc.communicate(timeout=60)
    proc.send_signal(signum)
    return proc.communicate(timeout=60)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_the_undo_of_a_failed_check_says_the_change_stands_and_what_to_run(
        signum: int, tmp_path: Path) -> None:
    """A signal while a failed health check's undo was writing exited 17, ChangeNotUndone,
    whose message said both "the change stands" and "nothing it wrote is left half-done" (of
    the undo), and offered a rollback. Now: the exit of an interrupt, and the message says the
    undo did not complete, the change stands, and `patchkit undo` takes it out."""
    import sys

    roots = make_tree(tmp_path / "tree")
    armed, inside = tmp_path / "armed", tmp_path / "in-undo"
    python = _held_python(tmp_path, armed, inside)
    where = ["--target", roots["sglang"], "--root", f"serve={roots['serve']}", "--python", str(python)]
    applied_file = Path(roots["sglang"], POOL)
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkit", "--catalog", str(SAMPLES / "catalog"), "apply",
         "index-k-bytes", *where, "--json", "--health-cmd", f"touch {shlex.quote(str(armed))}; exit 1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    out, err = _signalled_when(proc, inside.exists, signum)
    assert proc.returncode == 128 + signum, out + err
    name = signal.Signals(signum).name
    assert "the undo did not complete" in err and "the change stands (index-k-bytes)" in err, err
    assert "half-done" not in err and "patchkit undo" in err, err
    data = json.loads(out)
    assert data["ok"] is False and data["error"]["type"] in ("Terminated", "Interrupted")
    assert data["error"]["details"]["undo"] == "not-completed"
    assert data["error"]["details"]["signal"] == name
    armed.unlink()
    assert _status(where)["index-k-bytes"] == "applied"
    changed = applied_file.read_bytes()
    code, out, err = cli(["--catalog", str(SAMPLES / "catalog"), "undo", *where])  # as it says
    assert code == 0, out + err
    assert applied_file.read_bytes() != changed
    assert _status(where).get("index-k-bytes", "not-applied") == "not-applied"


def test_a_signal_after_the_undo_of_a_failed_check_committed_says_the_undo_completed(
        tmp_path: Path) -> None:
    """A SIGTERM once the undo had committed (state.json written; its history line still to
    be appended, here to a FIFO nobody reads) said the undo failed and the change stands."""
    import sys

    roots = make_tree(tmp_path / "tree")
    where = _where("local", None, roots)  # type: ignore[arg-type]
    state = Path(roots["sglang"], ".patchkit", "state.json")
    history = state.with_name("history.jsonl")
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkit", "--catalog", str(SAMPLES / "catalog"), "apply",
         "index-k-bytes", *where, "--json", "--health-cmd",
         f"rm -f {shlex.quote(str(history))}; mkfifo {shlex.quote(str(history))}; exit 1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)

    def undone() -> bool:  # the fifo is there and the state no longer records the fix
        return history.is_fifo() and "index-k-bytes" not in state.read_text()

    out, err = _signalled_when(proc, undone, signal.SIGTERM)
    history.unlink()
    assert proc.returncode == 143, out + err
    assert "the undo completed" in err and "index-k-bytes put back as before" in err, err
    assert "the change stands" not in err, err
    data = json.loads(out)
    assert data["error"]["type"] == "Terminated" and data["error"]["details"]["undo"] == "completed"
    assert _status(where).get("index-k-bytes", "not-applied") == "not-applied"


@pytest.mark.parametrize("hooks", [["--after-cmd", "true", "--health-cmd", "true"], []],
                         ids=["hooks", "no-hooks"])
def test_a_signal_just_after_the_commit_point_says_the_change_is_complete_and_the_hooks_never_ran(
        hooks: list[str], tmp_path: Path) -> None:
    """A SIGTERM once state.json records the change (its history line still to be appended,
    here to a FIFO nobody reads) said "the next patchkit run ... finishes or undoes it", not
    that the change is complete, nor that --after-cmd and --health-cmd never ran."""
    import sys

    roots = make_tree(tmp_path / "tree")
    where = _where("local", None, roots)  # type: ignore[arg-type]
    base = ["--catalog", str(SAMPLES / "catalog")]
    assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0
    assert cli([*base, "rollback", "index-k-bytes", *where])[0] == 0
    state = Path(roots["sglang"], ".patchkit", "state.json")
    history = state.with_name("history.jsonl")
    kept = history.read_bytes()
    history.unlink()
    os.mkfifo(history)
    proc = subprocess.Popen([sys.executable, "-m", "patchkit", *base, "apply", "index-k-bytes",
                             *where, *hooks, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    out, err = _signalled_when(proc, lambda: "index-k-bytes" in state.read_text(), signal.SIGTERM)
    history.unlink()
    history.write_bytes(kept)
    assert proc.returncode == 143, out + err
    assert "the change is complete" in err and "finishes or undoes" not in err, err
    data = json.loads(out)
    details = data["error"]["details"]
    assert data["error"]["type"] == "Terminated" and details["committed"] is True
    if hooks:
        assert "--after-cmd and --health-cmd never ran" in err, err
        assert details["hooks_not_run"] == ["--after-cmd", "--health-cmd"]
    else:
        assert "never ran" not in err and "hooks_not_run" not in details
    assert _status(where)["index-k-bytes"] == "applied"


@pytest.mark.parametrize("cut", ["signal", "dropped"])
def test_an_ssh_undo_of_a_failed_check_cut_short_says_it_may_have_completed(
        cut: str, ssh: Ssh, tmp_path: Path) -> None:
    """On an ssh:// target the undo's session ends after its request reached the host: a
    SIGTERM to patchkit closes it, or the connection drops (its ssh client killed, as a
    network that goes away ends it). The engine there goes on and completes the undo. It was
    said as a failed undo, exit 17, "the change stands": the change the host was taking out.
    Now: the exit of the signal (143, Terminated), or 14 for the lost connection with the
    failed check said first; the message says whether the undo completed is not known here,
    and what shows it."""
    import sys
    import time

    roots = make_tree(tmp_path / "tree")
    armed, inside = tmp_path / "armed", tmp_path / "in-undo"
    python = _held_python(tmp_path, armed, inside)
    where = ["--target", ssh.url(roots["sglang"]), "--root", f"serve={roots['serve']}",
             "--python", str(python), *ssh.cli_args()]
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchkit", "--catalog", str(SAMPLES / "catalog"), "apply",
         "index-k-bytes", *where, "--json", "--health-cmd", f"touch {shlex.quote(str(armed))}; exit 1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    if cut == "signal":
        out, err = _signalled_when(proc, inside.exists, signal.SIGTERM)
    else:
        deadline = time.monotonic() + 60
        while not inside.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert inside.exists(), proc.communicate(timeout=60)
        os.kill(ssh.last_pid(), signal.SIGKILL)  # the undo's own ssh client: its connection ends
        out, err = proc.communicate(timeout=60)
    data = json.loads(out)
    if cut == "signal":
        assert proc.returncode == 143, out + err
        assert "whether the undo completed is not known here" in err, err
        assert data["error"]["type"] == "Terminated"
    else:
        assert proc.returncode == 14, out + err
        assert "--health-cmd failed (exit 1)" in err, err
        assert "reached the host, then the connection was lost" in err, err
        assert "whether it completed is not known here" in err, err
        assert data["error"]["type"] == "ConnectionLost"
        assert [r["what"] for r in data["error"]["details"]["after"]["ran"]] == ["health-cmd"]
    assert "the change stands" not in err and "failed too" not in err, err
    assert data["error"]["details"]["undo"] == "unknown"
    armed.unlink()  # the engine on the host goes on: the undo completes there
    deadline = time.monotonic() + 60
    plain = _where("remote", ssh, roots)
    while _status(plain).get("index-k-bytes", "not-applied") != "not-applied":
        assert time.monotonic() < deadline, _status(plain)
        time.sleep(0.2)
