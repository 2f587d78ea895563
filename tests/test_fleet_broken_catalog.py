"""A fleet's status goes on past a fix it cannot read, as one target's does: a manifest that
is not valid TOML, or a patch that is not a patch (a work-in-progress fix in a team catalog),
is listed in ``broken`` and said on stderr, the matrix shows every other fix, exit 0
(``--exit-code`` 1). Before, either ended ``status --inventory`` with exit 2: the fleet's
monitoring gate broken by one unapplied fix.

The hosts use Ansible's local connection with this Python (no sshd needed), each its own
SGLang-like tree and a second root."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.fixtures.user_catalog import app_patch, app_tree, pk, user_catalog

needs_ansible = pytest.mark.skipif(not (Path(sys.executable).parent / "ansible-inventory").exists(),
                                   reason="ansible-core not installed (the fleet extra)")


@needs_ansible
def test_a_fleet_status_lists_what_it_cannot_read_and_shows_the_rest(tmp_path: Path) -> None:
    catalog = user_catalog(tmp_path / "catalog", {"good": (app_patch(), ""),
                                                    "wip": ("not a patch yet\n", "")})
    (catalog / "manifests" / "torn.toml").write_text('format = 1\nname = "torn"\ntitle = \n')
    hosts = {}
    for host in ("h1", "h2"):
        sglang = tmp_path / host / "sglang"
        (sglang / "python" / "sglang").mkdir(parents=True)
        (sglang / "python" / "sglang" / "__init__.py").write_text("")
        (sglang / "python" / "sglang" / "_version.py").write_text('__version__ = "0.5.23"\n')
        tree = app_tree(tmp_path / host / "tree")
        hosts[host] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "patchkit_target": str(sglang), "patchkit_roots": {"tree": str(tree)}}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    cat = ["--catalog", str(catalog)]
    applied = pk(*cat, "apply", "good", "--target", str(tmp_path / "h1" / "sglang"),
                 "--root", f"tree={tmp_path / 'h1' / 'tree'}")
    assert applied.returncode == 0, applied.stderr

    plain = pk(*cat, "status", "--inventory", str(inventory))
    assert plain.returncode == 0, plain.stderr
    cells = {tuple(line.split("\t")[:2]): line.split("\t")[2] for line in plain.stdout.splitlines()}
    assert cells[("h1", "good")] == "applied" and cells[("h2", "good")] == "not-applied", plain.stdout
    assert not any(fix in ("wip", "torn") for _host, fix in cells), plain.stdout
    wip, torn = catalog / "patches" / "wip" / "0001-wip.patch", catalog / "manifests" / "torn.toml"
    assert f"2 fix(es) could not be read (their rows say why): {torn}:3, {wip}:1" in plain.stderr

    assert pk(*cat, "status", "--inventory", str(inventory), "--exit-code").returncode == 1
    data = json.loads(pk(*cat, "status", "--inventory", str(inventory), "--json").stdout)
    assert data["ok"] is True  # the matrix is its answer, whatever it holds
    assert [(b["name"], b["error"]["file"], b["error"]["line"]) for b in data["broken"]] == [
        ("torn", str(torn), 3), ("wip", str(wip), 1)]
    assert data["matrix"]["h1"]["good"]["state"] == "applied"


@needs_ansible
def test_a_fleet_verify_of_what_each_host_applied_goes_on_past_a_fix_it_cannot_read(
        tmp_path: Path) -> None:
    """A bare ``verify --inventory`` verifies what each host applied, as one target's does: a
    manifest or patch that cannot be read does not end it (before: exit 2 on a team catalog's
    work in progress); a fix a host applied whose patch then went missing is checked there
    against its record, and a file edited since still fails it."""
    catalog = user_catalog(tmp_path / "catalog", {"good": (app_patch(), ""),
                                                    "wip": ("not a patch yet\n", "")})
    (catalog / "manifests" / "torn.toml").write_text('format = 1\nname = "torn"\ntitle = \n')
    hosts, trees = {}, {}
    for host in ("h1", "h2"):
        sglang = tmp_path / host / "sglang"
        (sglang / "python" / "sglang").mkdir(parents=True)
        (sglang / "python" / "sglang" / "__init__.py").write_text("")
        (sglang / "python" / "sglang" / "_version.py").write_text('__version__ = "0.5.23"\n')
        trees[host] = app_tree(tmp_path / host / "tree")
        hosts[host] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "patchkit_target": str(sglang), "patchkit_roots": {"tree": str(trees[host])}}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    cat = ["--catalog", str(catalog)]
    assert pk(*cat, "apply", "good", "--target", str(tmp_path / "h1" / "sglang"),
              "--root", f"tree={trees['h1']}").returncode == 0

    verify = pk(*cat, "verify", "--inventory", str(inventory), "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["ok"] is True
    by_host = {h["host"]: h for h in json.loads(verify.stdout)["hosts"]}
    assert [f["name"] for f in by_host["h1"]["result"]["fixes"]] == ["good"]
    assert by_host["h1"]["result"]["fixes"][0]["outcome"] == "verified"
    assert by_host["h2"]["state"] == "ok" and not by_host["h2"]["result"]["fixes"]

    (catalog / "patches" / "good" / "0001-good.patch").unlink()  # its manifest cannot be read
    again = pk(*cat, "verify", "--inventory", str(inventory), "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    good = json.loads(again.stdout)["hosts"][0]["result"]["fixes"][0]
    assert good["outcome"] == "verified" and "cannot be read" in good["detail"], good
    (trees["h1"] / "app.py").write_text("edited\n")
    drifted = pk(*cat, "verify", "--inventory", str(inventory))
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert "h1" in drifted.stdout and "failed" in drifted.stdout, drifted.stdout
    data = json.loads(pk(*cat, "verify", "--inventory", str(inventory), "--json").stdout)
    assert data["ok"] is False and data["error"]["type"] == "VerificationFailed", data
    assert data["error"]["details"]["hosts"] == ["h1"]


@needs_ansible
def test_a_fleet_command_that_fails_says_so_in_json_with_its_error(tmp_path: Path) -> None:
    """Every ``--json`` object says ``ok`` (docs/cli.md); a fleet verify or rollout that a host
    ends says why in ``error``, as one target's failure does. Before, ``verify --inventory``
    and ``log --inventory`` had no ``ok``, and a rollout stopped by an unreachable host had
    ``ok: false`` and no ``error`` (a new-user trial)."""
    catalog = user_catalog(tmp_path / "catalog", {"good": (app_patch(), "")})
    sglang = tmp_path / "h1" / "sglang"
    (sglang / "python" / "sglang").mkdir(parents=True)
    (sglang / "python" / "sglang" / "_version.py").write_text('__version__ = "0.5.23"\n')
    tree = app_tree(tmp_path / "h1" / "tree")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
             "patchkit_target": str(sglang), "patchkit_roots": {"tree": str(tree)}}
    gone = dict(local, ansible_connection="ssh", ansible_host="127.0.0.1", ansible_port=1,
                ansible_ssh_common_args="-o ConnectTimeout=5 -o BatchMode=yes")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"h1": local, "gone": gone}}}))
    cat, inv = ["--catalog", str(catalog)], ["--inventory", str(inventory)]

    log = pk(*cat, "log", *inv, "--json")
    assert log.returncode == 0 and json.loads(log.stdout)["ok"] is True, log.stdout + log.stderr
    verify = pk(*cat, "verify", *inv, "--json")
    assert verify.returncode == 10, verify.stdout + verify.stderr
    data = json.loads(verify.stdout)
    assert data["ok"] is False and data["error"]["type"] == "HostUnreachable", data
    assert "gone" in data["error"]["message"]
    apply = pk(*cat, "apply", "good", *inv, "--json")
    assert apply.returncode == 10, apply.stdout + apply.stderr
    data = json.loads(apply.stdout)
    assert data["ok"] is False and data["error"]["type"] == "HostUnreachable", data
    assert data["error"]["message"] == data["stopped"] and data["error"]["details"]["hosts"] == ["gone"]
    init = pk("init", str(tmp_path / "mine"), "--no-git", "--json")
    assert init.returncode == 0 and json.loads(init.stdout)["ok"] is True, init.stdout
