"""A fleet whose every host fails still shows each host, with its reason (issue 25, items 2, 7).

Ansible's local connection (no sshd needed): each host's ``ansible_python_interpreter`` is a shim
that exits 1, as a broken interpreter Ansible picked on every host would. The action plugin
then cannot start the agent, so each host is ``failed``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
HOSTS = ("prefill-1", "decode-1")
REASON = "agent did not start"

needs_ansible = pytest.mark.skipif(not (BIN / "ansible-inventory").exists(),
                                   reason="ansible-core not installed (the fleet extra)")


@pytest.fixture(scope="module")
def broken_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("broken-fleet")
    shim = tmp / "python3"
    shim.write_text("#!/bin/sh\necho 'shim: python3 is not installed' >&2\nexit 1\n")
    shim.chmod(0o755)
    hosts = {}
    for name in HOSTS:
        (tmp / name / "serve").mkdir(parents=True)
        (tmp / name / "sglang").mkdir()
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": str(shim),
                       "patchkit_target": str(tmp / name / "sglang"),
                       "patchkit_roots": {"serve": str(tmp / name / "serve")}}
    inventory = tmp / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    return inventory


def pk(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "patchkit"), *args], capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL)


def test_the_restart_line_of_a_fleet_names_the_hosts_that_need_it() -> None:
    """A fleet's apply or undo without --after-cmd left each changed host running the old
    code and said nothing of it; the line one target gets, with the hosts."""
    from patchkit.cli.render import PlainConsole
    from patchkit.cli.render_status import render_after

    for op, defined, how in [
            ("apply", True, "(patchkit.toml [restarts]; run it on each host, or apply with --restart)"),
            ("undo", True, "(patchkit.toml [restarts]; run it on each host)"),
            ("undo", False, "(run it on each host yourself)")]:
        out = io.StringIO()
        render_after(PlainConsole(out), None, ("prefill",), op, defined, hosts=["h1", "h2"])
        assert out.getvalue() == f"restart needed on h1, h2: prefill {how}\n", out.getvalue()
    out = io.StringIO()
    render_after(PlainConsole(out), None, ("prefill",), "apply", True)
    assert out.getvalue() == ("restart needed prefill (patchkit.toml [restarts]; run it, or "
                              "apply with --restart)\n")


@needs_ansible
def test_every_host_failed_is_a_row_with_its_reason_and_exit_code_fails(broken_fleet: Path) -> None:
    inv = str(broken_fleet)
    plain = pk("status", "--inventory", inv)
    assert plain.returncode == 15, plain.stderr  # no host answered: SessionFailed, as one target's
    assert "error: no host answered the status: 2 failed" in plain.stderr, plain.stderr
    lines = plain.stdout.splitlines()
    for host in HOSTS:
        rows = [line.split("\t") for line in lines if line.startswith(f"{host}\t")
                and not line.startswith(f"{host}\t(running)\t")]
        assert rows, plain.stdout
        assert all(row[2] == "failed" and REASON in row[4] for row in rows), rows
        assert f"{host}\t(running)\t-\t" in plain.stdout  # a host not reached: "-"

    code = pk("status", "--inventory", inv, "--exit-code")
    assert code.returncode == 15, code.stdout + code.stderr

    data = json.loads(pk("status", "--inventory", inv, "--json").stdout)
    assert data["ok"] is False and data["error"]["type"] == "SessionFailed", data["error"]
    for host in HOSTS:
        cells = data["matrix"][host]
        assert cells and all(c["state"] == "failed" and REASON in c["detail"] for c in cells.values())

    wide = dict(os.environ, FORCE_COLOR="1", COLUMNS="400")
    terminal = pk("status", "--inventory", inv, env=wide)
    text = terminal.stdout
    for host in HOSTS:
        assert host in text and "failed" in text and REASON in text, text
    assert text.count(REASON) >= len(HOSTS), text


def test_plain_fleet_lines_stay_one_per_host_when_a_detail_has_newlines() -> None:
    from patchkit.cli.fleet import render_hosts, render_matrix
    from patchkit.fleet.status import status_cells
    from patchkit.cli.render import PlainConsole
    from patchkit.fleet import HostReport, Survey

    detail = "the host said:\nTraceback (most recent call last):\n\tboom"
    hosts = (HostReport("h1", "ok", result={"status": {"fixes": [
                 {"name": "a", "state": "applied", "version": 2}]}}),
             HostReport("h2", "failed", detail))
    out = io.StringIO()
    render_hosts(PlainConsole(out), hosts, "verify")
    assert len(out.getvalue().splitlines()) == 2, out.getvalue()
    assert out.getvalue().splitlines()[1].count("\t") == 3
    out = io.StringIO()
    render_matrix(PlainConsole(out), status_cells(Survey(op="status", hosts=hosts)))
    assert out.getvalue().splitlines() == [
        "h1\ta\tapplied\tv2",
        "h2\ta\tfailed\t\tthe host said: Traceback (most recent call last): boom"]


@needs_ansible
def test_log_on_a_fleet_says_log_and_names_failed_hosts_as_status_does(broken_fleet: Path) -> None:
    run = pk("log", "--inventory", str(broken_fleet))
    assert run.returncode == 15, run.stderr  # no host answered, as status
    assert "log on the hosts of" in run.stderr and "status on" not in run.stderr
    failed = [line for line in run.stdout.splitlines() if line.startswith("failed: ")]
    assert [line.split(":")[1].strip() for line in failed] == list(HOSTS), run.stdout
    assert all(REASON in line for line in failed)
    assert "unreachable" not in run.stdout
    data = json.loads(pk("log", "--inventory", str(broken_fleet), "--json").stdout)
    assert data["unreachable"] == [] and sorted(data["failed"]) == sorted(HOSTS)
