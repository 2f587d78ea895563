"""The test fleet itself: real ansible-core reaches each of the three loopback hosts through that
host's own sshd, reports a host where nothing listens and a host taken down mid-test as
unreachable, and finds on every host its own copy of the demo fork."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.fleet import FLEET_SIZE, FleetTargets

pytestmark = [pytest.mark.ssh, pytest.mark.network]


def adhoc(fleet: FleetTargets, inventory: Path, tree: Path,
          *args: str) -> dict[str, dict[str, Any]]:
    """Run ``ansible all`` and return each host's result (the tree callback's JSON files)."""
    proc = fleet.run("ansible", "all", "-i", str(inventory), "--tree", str(tree), *args)
    results = {p.name: json.loads(p.read_text()) for p in tree.iterdir()} if tree.exists() else {}
    # 0: all ok; 4: some host unreachable (ansible's exit codes)
    expected = 4 if any(r.get("unreachable") for r in results.values()) else 0
    assert proc.returncode == expected, proc.stdout + proc.stderr
    return results


def test_ping_reaches_each_host_through_its_own_sshd_and_reports_the_unreachable_ones(
        fleet: FleetTargets, tmp_path: Path) -> None:
    names = [f"h{i}" for i in range(1, FLEET_SIZE + 1)]
    assert [n.name for n in fleet.nodes] == names
    ports = {n.host.port for n in fleet.nodes}
    assert len(ports) == FLEET_SIZE  # each its own sshd
    inventory = fleet.write_inventory(tmp_path / "with-h5.yml", unreachable=["h5"])
    before = {n.name: n.host.server.accepted() for n in fleet.nodes}

    results = adhoc(fleet, inventory, tmp_path / "ping", "-m", "ansible.builtin.ping")
    assert sorted(results) == names + ["h5"]
    for name in names:
        assert results[name].get("ping") == "pong", results[name]
        assert fleet.node(name).host.server.accepted() > before[name], name
    assert results["h5"]["unreachable"] is True
    # ssh is refused; with pipelining Ansible may be writing the module to ssh's stdin when ssh
    # exits, and then says the data could not be sent (a broken pipe) instead of ssh's refusal
    assert ("Connection refused" in results["h5"]["msg"]
            or "Data could not be sent to remote host" in results["h5"]["msg"]), results["h5"]["msg"]

    # h2 goes down mid-test: it is unreachable, the others are not, and no connection reached
    # its sshd any more.
    fleet.servers.stop("h2")
    assert not fleet.servers.running("h2")
    accepted_h2 = fleet.node("h2").host.server.accepted()
    results = adhoc(fleet, fleet.inventory, tmp_path / "ping-again", "-m", "ansible.builtin.ping")
    assert results["h2"]["unreachable"] is True
    assert [n for n in names if results[n].get("ping") == "pong"] == ["h1", "h3"]
    assert fleet.node("h2").host.server.accepted() == accepted_h2


def test_a_lean_session_has_the_path_a_stock_session_has(sshd) -> None:  # type: ignore[no-untyped-def]
    """The tests' sshd skips the login shell's rc files (tests/fixtures/sshd_server.py) but not
    what they give the host's programs: the PATH a stock session there has."""
    import subprocess

    from tests.fixtures.sshd_server import session_path

    stock = session_path()
    if stock is None:
        pytest.skip("the stock session's PATH could not be read: lean servers run the rc files")
    seen = subprocess.run(["ssh", *sshd.ssh_options(), "-p", str(sshd.port), f"{sshd.user}@{sshd.host}",
                           'printf "<%s>" "$PATH"'], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.endswith(f"<{stock}>"), seen.stdout
