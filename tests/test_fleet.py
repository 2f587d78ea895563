"""Fleet rollouts through real ansible-core to three real sshd hosts on loopback, each with its
own copy of the demo fork (docs/fleet.md): converge, a drifted host, unreachable hosts, a failing
canary, a killed controller, an upgrade."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.targets import LocalTarget

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.ssh

SEED = ["dsv4-bf16-sizing", "revert-hicache-index-k-sync", "prefill-hicache-off"]
SIZING = "python/sglang/srt/model_executor/pool_configurator.py"
HOST_POOL = "python/sglang/srt/mem_cache/memory_pool_host.py"


def snapshot(node) -> dict[str, str]:
    """Every file of the host's two trees that git sees changed or untracked, with its digest
    (the engine's own `.patchkit/` aside: state_of reads it): equal snapshots mean the trees'
    files are as they were."""
    seen = {}
    for root in (node.sglang, node.serve):
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--ignored"],
                             cwd=root, capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line[3:].startswith(".patchkit/"):
                continue
            path = root / line[3:]
            seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else line[:2]
        for name in (SIZING, HOST_POOL, "serve_dsv4_prefill.sh"):
            path = root / name
            if path.is_file():
                seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def state_of(node) -> dict[str, int]:
    path = node.sglang / ".patchkit" / "state.json"
    if not path.is_file():
        return {}
    return {f["name"]: f["version"] for f in json.loads(path.read_text())["fixes"]}


def patchkit(fleet, *args: str, inventory: Path | None = None, catalog: Path | None = None
             ) -> tuple[int, dict]:
    first = ["--catalog", str(catalog)] if catalog else []
    proc = fleet.run("patchkit", *first, *args, "--inventory", str(inventory or fleet.inventory), "--json")
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}") from None


def hosts(report: dict) -> dict[str, str]:
    return {h["host"]: h["state"] for h in report["hosts"]}


def test_fleet_converges_in_waves_and_a_rerun_touches_no_host(fleet) -> None:
    pristine = {n.name: snapshot(n) for n in fleet.nodes}
    code, dry = patchkit(fleet, "apply", *SEED, "--dry-run")
    assert code == 0, dry
    assert hosts(dry) == {n.name: "would-apply" for n in fleet.nodes}
    for host in dry["hosts"]:  # check mode, with each host's diff
        files = {f["path"]: f["diff"] for fix in host["result"]["fixes"] for f in fix["files"]}
        assert "get_dsv4_bf16_index_k_bytes_per_token" in files[SIZING]
    for node in fleet.nodes:
        assert snapshot(node) == pristine[node.name] and state_of(node) == {}

    code, report = patchkit(fleet, "apply", *SEED, "--waves", "1,100%",
                            "--after-cmd", "echo restart >> {{ patchkit_target }}/../restarts")
    assert code == 0, report
    assert hosts(report) == {n.name: "applied" for n in fleet.nodes}
    assert report["waves"] == [["h1"], ["h2", "h3"]]
    assert [g["hosts"] for g in report["groups"]] == [["h1", "h2", "h3"]]
    for node in fleet.nodes:
        assert state_of(node) == {"dsv4-bf16-sizing": 4, "revert-hicache-index-k-sync": 5,
                                  "prefill-hicache-off": 1}
        assert "get_dsv4_bf16_index_k_bytes_per_token" in (node.sglang / SIZING).read_text()
        assert "--enable-hierarchical-cache" not in (node.serve / "serve_dsv4_prefill.sh").read_text()
        assert (node.workdir / "restarts").read_text() == "restart\n"
    before = {n.name: snapshot(n) for n in fleet.nodes}
    mtimes = {n.name: (n.sglang / ".patchkit" / "state.json").stat().st_mtime_ns for n in fleet.nodes}

    code, again = patchkit(fleet, "apply", *SEED, "--after-cmd", "echo restart >> {{ patchkit_target }}/../restarts")
    assert code == 0, again
    assert hosts(again) == {n.name: "unchanged" for n in fleet.nodes}
    assert again["waves"] == []
    for node in fleet.nodes:
        assert snapshot(node) == before[node.name]
        assert (node.sglang / ".patchkit" / "state.json").stat().st_mtime_ns == mtimes[node.name]
        assert (node.workdir / "restarts").read_text() == "restart\n"  # not restarted again

    code, verified = patchkit(fleet, "verify", *SEED)
    assert code == 0, verified
    assert {h["state"] for h in verified["hosts"]} == {"ok"}
    assert {f["outcome"] for h in verified["hosts"] for f in h["result"]["fixes"]} == {"verified"}
    code, status = patchkit(fleet, "status", "--exit-code")
    assert code == 0, status
    for node in fleet.nodes:
        row = status["matrix"][node.name]
        assert row["dsv4-bf16-sizing"] == {"state": "applied", "version": 4, "release": "0.5.23"}
        assert row["prefill-hicache-off"] == {"state": "applied", "version": 1, "release": "0.5.23"}
        # the dead fix no host carries is no column, as one target's status shows it no row
        assert "hicache-index-k-sync" not in row, row
    everything = fleet.run("patchkit", "status", "--all", "--inventory", str(fleet.inventory))
    assert everything.returncode == 0, everything.stderr
    assert "h1\thicache-index-k-sync\tnot-applied\t" in everything.stdout, everything.stdout


def test_a_drifted_host_stops_the_rollout_in_preflight_with_nothing_written(fleet) -> None:
    drifted = fleet.node("h3")
    path = drifted.sglang / SIZING
    path.write_text(path.read_text().replace("# One FlashMLA-layout latent slot, in bytes.",
                                             "# edited on the host by hand"))
    before = {n.name: snapshot(n) for n in fleet.nodes}

    code, report = patchkit(fleet, "apply", *SEED, "--waves", "1,100%")

    assert code == 16, report
    states = hosts(report)
    assert states["h3"] == "refused"
    assert "pool_configurator.py" in next(h["detail"] for h in report["hosts"] if h["host"] == "h3")
    assert {states[h] for h in ("h1", "h2")} == {"untouched"}
    assert "nothing was written" in report["stopped"]
    for node in fleet.nodes:
        assert snapshot(node) == before[node.name], node.name
        assert state_of(node) == {}


def backups_of(node) -> dict[str, str]:
    """The digest of every backup the host's engine keeps (``.patchkit/backups/``)."""
    base = node.sglang / ".patchkit" / "backups"
    return {str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.rglob("*")) if p.is_file()}


def test_undo_on_a_fleet_puts_each_host_back_as_before_its_last_change_or_writes_nothing(fleet) -> None:
    """After an apply --inventory whose effect the user dislikes, undo --inventory puts every
    host back exactly as before it: files, records and backups. Preflight (the engine's undo
    check) runs on every host first: a host that refuses (a file edited since the apply, or
    nothing to undo) stops the run with nothing written on any host; a dry run writes nothing;
    the waves undo the very change each host's preflight checked (its transaction, pinned)."""
    h1, h2, h3 = (fleet.node(n) for n in ("h1", "h2", "h3"))
    for node in (h1, h2):  # a fix applied before the rollout: its record and backups stay
        target = LocalTarget({"sglang": str(node.sglang), **node.roots}, fleet.python, node.name)
        assert api.apply(Catalog(REPO), target, ["prefill-hicache-off"]).ok, node.name
    state_file = {n.name: n.sglang / ".patchkit" / "state.json" for n in fleet.nodes}
    before = {n.name: (snapshot(n), json.loads(state_file[n.name].read_text()), backups_of(n))
              for n in (h1, h2)}
    code, report = patchkit(fleet, "apply", *SEED, "--limit", "h1,h2")
    assert code == 0 and hosts(report) == {"h1": "applied", "h2": "applied"}, report
    # the hosts run the old code until their prefill server restarts: said, as for one target
    assert (report["restart"], report["restart_hosts"]) == (["prefill"], ["h1", "h2"]), report

    def held() -> dict[str, tuple]:  # every host's files and engine state, byte for byte
        return {n.name: (snapshot(n), state_file[n.name].read_bytes()
                         if state_file[n.name].exists() else None) for n in fleet.nodes}

    applied = held()
    code, dry = patchkit(fleet, "undo", "--dry-run", "--limit", "h1,h2")
    assert code == 0, dry
    assert (dry["op"], dry["dry_run"], dry["ok"], dry["stopped"], dry["waves"]) == \
        ("undo", True, True, None, [])
    assert hosts(dry) == {"h1": "would-undo", "h2": "would-undo"}
    assert (dry["restart"], dry["restart_hosts"]) == ([], [])  # nothing changed
    label = "dsv4-bf16-sizing v4 -> not applied, revert-hicache-index-k-sync v5 -> not applied"
    assert dry["groups"] == [{"change": label, "hosts": ["h1", "h2"]}], dry["groups"]
    for host in dry["hosts"]:
        assert host["result"]["undoes"], host
        assert {f["name"]: (f["outcome"], f["from_version"], f["version"])
                for f in host["result"]["fixes"]} == {
            "dsv4-bf16-sizing": ("would-undo", 4, None),
            "revert-hicache-index-k-sync": ("would-undo", 5, None)}
    assert held() == applied

    sizing = h2.sglang / SIZING  # edited on h2 after the apply; h3 never changed at all
    patched = sizing.read_bytes()
    sizing.write_bytes(patched.replace(b"get_dsv4_bf16_index_k_bytes_per_token",
                                       b"edited_on_the_host_by_hand", 1))
    edited = held()
    plain = fleet.run("patchkit", "undo", "--inventory", str(fleet.inventory))
    assert plain.returncode == 16, plain.stdout + plain.stderr
    lines = {line.split("\t")[0]: line.split("\t") for line in plain.stdout.splitlines()
             if line.startswith("h")}
    assert lines["h1"][1] == "untouched", plain.stdout
    assert lines["h2"][1] == "refused" and "pool_configurator.py" in lines["h2"][3], plain.stdout
    assert lines["h3"][1] == "refused" and "nothing to undo" in lines["h3"][3], plain.stdout
    assert "stopped: preflight refused 2 host(s) (h2, h3); nothing was written on any host" \
        in plain.stdout, plain.stdout
    assert held() == edited
    assert "restart needed" not in plain.stdout  # nothing was written

    sizing.write_bytes(patched)
    code, report = patchkit(fleet, "undo", "--limit", "h1,h2", "--waves", "1,100%")
    assert code == 0, report
    assert (report["restart"], report["restart_hosts"]) == (["prefill"], ["h1", "h2"]), report
    assert (report["op"], report["dry_run"], report["ok"], report["waves"]) == \
        ("undo", False, True, [["h1"], ["h2"]])
    assert [(h["host"], h["state"], h["wave"]) for h in report["hosts"]] == [
        ("h1", "undone", 1), ("h2", "undone", 2)]
    checked = {h["host"]: h["result"]["undoes"] for h in dry["hosts"]}
    for host in report["hosts"]:
        assert host["result"]["undoes"] == checked[host["host"]]  # what preflight checked
        assert {f["outcome"] for f in host["result"]["fixes"]} == {"undone"}
    for node in (h1, h2):
        files, state, backups = before[node.name]
        assert snapshot(node) == files, node.name
        now = json.loads(state_file[node.name].read_text())
        assert {k: v for k, v in now.items() if k != "txn"} == \
            {k: v for k, v in state.items() if k != "txn"}, node.name  # the undo's own txn aside
        assert backups_of(node) == backups, node.name
    assert held()["h3"] == applied["h3"]


def test_unreachable_host_stops_before_writing_unless_the_budget_allows_it(fleet, tmp_path: Path) -> None:
    inventory = fleet.write_inventory(tmp_path / "with-h5.yml", unreachable=["h5"])
    before = {n.name: snapshot(n) for n in fleet.nodes}

    code, report = patchkit(fleet, "apply", *SEED, "--max-fail", "0", inventory=inventory)
    assert code == 10, report
    assert hosts(report)["h5"] == "unreachable"
    assert report["stopped"].startswith("unreachable")
    for node in fleet.nodes:
        assert snapshot(node) == before[node.name]

    code, report = patchkit(fleet, "apply", *SEED, "--max-fail", "1", inventory=inventory)
    assert code == 0, report
    assert hosts(report) == {"h1": "applied", "h2": "applied", "h3": "applied", "h5": "unreachable"}
    # verify naming no fix: every host verifies what it applied (the help's default); an
    # unreachable host is exit 10, as for one remote target
    code, verified = patchkit(fleet, "verify", inventory=inventory)
    assert code == 10, verified
    ran = {h["host"]: (h["state"], [f["name"] for f in (h["result"] or {}).get("fixes") or []])
           for h in verified["hosts"]}
    assert ran["h1"] == ("ok", sorted(SEED)) and ran["h5"][0] == "unreachable", ran
    code, verified = patchkit(fleet, "verify", "--limit", "h1,h2")
    assert code == 0, verified
    # a fix whose manifest left the catalog is verified from its record on each host, as on
    # one target: it was skipped, and the fleet's verify passed without looking at it
    gone = tmp_path / "catalog-without-prefill"
    for part in ("manifests", "patches"):
        shutil.copytree(REPO / part, gone / part)
    (gone / "manifests" / "prefill-hicache-off.toml").unlink()
    code, verified = patchkit(fleet, "verify", "--limit", "h1", catalog=gone)
    assert code == 0, verified
    [h1] = verified["hosts"]
    by_name = {f["name"]: f for f in h1["result"]["fixes"]}
    assert set(by_name) == set(SEED), by_name
    assert "manifest is gone" in by_name["prefill-hicache-off"]["detail"]
    assert [c["kind"] for c in by_name["prefill-hicache-off"]["verification"]] == ["drift"]
    # named, as on one target (it was an unknown fix, exit 2); a name no host records is
    # not applied there
    code, verified = patchkit(fleet, "verify", "prefill-hicache-off", "--limit", "h1",
                              catalog=gone)
    assert code == 0, verified
    [fix] = verified["hosts"][0]["result"]["fixes"]
    assert fix["name"] == "prefill-hicache-off" and "manifest is gone" in fix["detail"], fix
    code, verified = patchkit(fleet, "verify", "no-such-fix", "--limit", "h1", catalog=gone)
    assert code == 1 and verified["hosts"][0]["state"] == "failed", verified
    assert "no-such-fix is not applied" in verified["hosts"][0]["detail"], verified
    plain = fleet.run("patchkit", "status", "--inventory", str(inventory))
    assert "h5\t(running)\t-\t" in plain.stdout and "h1\t(running)\t" in plain.stdout, plain.stdout
    code, status = patchkit(fleet, "status", "--exit-code", inventory=inventory)
    assert code == 1  # h5 is unreachable: the fleet has not converged
    assert status["matrix"]["h5"]["dsv4-bf16-sizing"]["state"] == "unreachable"
    assert status["matrix"]["h1"]["dsv4-bf16-sizing"]["state"] == "applied"


def test_a_failing_canary_health_check_rolls_the_canary_back_and_touches_no_other_host(fleet) -> None:
    before = {n.name: snapshot(n) for n in fleet.nodes}

    code, report = patchkit(fleet, "apply", *SEED, "--waves", "1,50%",
                            "--after-cmd", "echo restart >> {{ patchkit_target }}/../restarts",
                            "--health-cmd", "echo unhealthy >&2; exit 7")

    assert code == 16, report
    states = hosts(report)
    assert states == {"h1": "rolled-back", "h2": "untouched", "h3": "untouched"}
    canary = next(h for h in report["hosts"] if h["host"] == "h1")
    assert "health-cmd failed (exit 7): unhealthy" in canary["detail"]
    assert report["stopped"].startswith("wave 1 failed on h1")
    for node in fleet.nodes:  # the canary's files are the release's again; the others never changed
        assert snapshot(node) == before[node.name], node.name
        assert state_of(node) == {}
    canary_node = fleet.node("h1")
    assert (canary_node.workdir / "restarts").read_text() == "restart\nrestart\n"  # change, undo
    assert not (fleet.node("h2").workdir / "restarts").exists()

    # a health command that hangs is killed at --health-timeout on the host, with what it
    # started (it bounded only sglang:URL on a fleet), and the canary is put back; an
    # after-command that leaves a process running holding its output is done when its shell is
    started, probed = canary_node.workdir / "after-pids", canary_node.workdir / "health-pids"
    code, report = patchkit(fleet, "apply", *SEED, "--waves", "1,50%", "--health-timeout", "2",
                            "--after-cmd", f"sleep 600 & echo $! >> {started}",
                            "--health-cmd", f"sleep 300 & echo $! >> {probed}; wait")
    assert code == 16, report
    canary = next(h for h in report["hosts"] if h["host"] == "h1")
    assert canary["state"] == "rolled-back", canary
    assert "health-cmd failed (exit 124): (killed after 2s)" in canary["detail"], canary
    assert len(started.read_text().split()) == 2  # after the change, and after its undo
    for pid in started.read_text().split():  # left running, as a restarted server is
        os.kill(int(pid), signal.SIGKILL)
    [pid] = probed.read_text().split()
    try:  # killed with the health command: gone, or a zombie no init here reaps
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z"), state
    for node in fleet.nodes:
        assert snapshot(node) == before[node.name], node.name


def test_a_host_whose_change_was_undone_after_its_health_check_needs_no_restart(fleet) -> None:
    """A failed --health-cmd undid h1's change: its files are as before, so nothing is to be
    restarted there, as one target says none. It said "restart needed on h1: prefill"
    (--json restart, restart_hosts) for a host rolled back (a new-user trial)."""
    before = snapshot(fleet.node("h1"))
    code, report = patchkit(fleet, "apply", "dsv4-bf16-sizing", "--limit", "h1",
                            "--health-cmd", "false")
    assert code == 16 and hosts(report) == {"h1": "rolled-back"}, report
    assert report["restart"] == [] and report["restart_hosts"] == [], report
    assert snapshot(fleet.node("h1")) == before
    plain = fleet.run("patchkit", "apply", "dsv4-bf16-sizing", "--inventory", str(fleet.inventory),
                      "--limit", "h1", "--health-cmd", "false")
    assert plain.returncode == 16 and "restart needed" not in plain.stdout + plain.stderr, plain.stdout
    code, applied = patchkit(fleet, "apply", "dsv4-bf16-sizing", "--limit", "h1")  # it still says it
    assert code == 0 and applied["restart_hosts"] == ["h1"] and applied["restart"], applied


def test_a_fleet_sync_says_op_sync_as_one_target_does(fleet) -> None:
    """`sync --inventory --json` said `"op": "apply"` on success and in a dry run, `"sync"` on
    a failure (a new-user trial): the command run, whatever its outcome."""
    for args in (["--dry-run"], [], ["--waves", "0"]):
        code, data = patchkit(fleet, "sync", "--limit", "h1", *args)
        assert data["op"] == "sync", (args, data)
        assert code == (2 if args == ["--waves", "0"] else 0), data


def test_a_host_whose_undo_failed_is_told_its_change_stands_and_how_to_take_it_back(fleet) -> None:
    """The canary's health check fails and its undo cannot run (here the health command takes
    the undo point away; a host dropping off the network during its check does the same): the
    host is `failed` with its change in place. Its row said only `undoing the change failed
    too`, no next step, while a run again reports it unchanged without a check. Now the row
    and the stop say the change stands unconfirmed, with the status and the rollback that
    take it back, and that rollback works."""
    before = snapshot(fleet.node("h1"))
    code, report = patchkit(fleet, "apply", *SEED, "--waves", "1,50%", "--health-cmd",
                            "rm -rf {{ patchkit_target }}/.patchkit/undo; exit 7")
    assert code == 16, report
    assert hosts(report) == {"h1": "failed", "h2": "untouched", "h3": "untouched"}
    detail = next(h for h in report["hosts"] if h["host"] == "h1")["detail"]
    inv = str(fleet.inventory)
    assert "health-cmd failed (exit 7)" in detail and "the change stands there, not confirmed" in detail
    assert f"patchkit status --inventory {inv} --limit h1" in detail, detail
    undo = f"patchkit rollback {' '.join(SEED)} --inventory {inv} --limit h1"
    assert undo in detail and "with no check" in detail, detail
    assert "the change stands, not confirmed, on h1" in report["stopped"], report["stopped"]
    assert state_of(fleet.node("h1")) and snapshot(fleet.node("h1")) != before
    code, back = patchkit(fleet, *undo.split()[1:-4], "--limit", "h1")
    assert code == 0, back
    assert snapshot(fleet.node("h1")) == before and state_of(fleet.node("h1")) == {}


def test_a_killed_controller_leaves_every_host_all_or_nothing_and_status_recovers(fleet, tmp_path: Path) -> None:
    # h2's module is killed by the engine's fault injection in the middle of its write phase
    # (PATCHKIT_FAULT travels to h2 only, by SendEnv); h1 finishes and waits in --after-cmd
    # while the controller is killed.
    inventory = tmp_path / "faulty.yml"
    data = json.loads(fleet.inventory.read_text())
    h2 = data["all"]["hosts"]["h2"] if "hosts" in data.get("all", {}) else None
    assert h2 is not None, data
    h2["ansible_ssh_common_args"] += " -o SendEnv=PATCHKIT_FAULT"
    inventory.write_text(json.dumps(data))
    release = tmp_path / "release"
    before = {n.name: snapshot(n) for n in fleet.nodes}
    after_cmd = (f"touch {{{{ patchkit_target }}}}/../reached; "
                 f"while [ ! -e {release} ]; do sleep 0.1; done")
    # SIGKILL leaves the controller's temporary workdir behind: keep it in this test's directory
    tmp = tmp_path / "controller-tmp"
    tmp.mkdir()
    env = dict(fleet.env, PATCHKIT_FAULT="write:2", TMPDIR=str(tmp))
    proc = subprocess.Popen([str(fleet.bin / "patchkit"), "apply", *SEED, "--inventory", str(inventory),
                             "--waves", "2,100%", "--after-cmd", after_cmd, "--json"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (fleet.node("h1").workdir / "reached").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "h1 never reached --after-cmd"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        release.touch()  # the orphaned --after-cmd on h1 ends
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    assert state_of(fleet.node("h1")) == {"dsv4-bf16-sizing": 4, "revert-hicache-index-k-sync": 5,
                                          "prefill-hicache-off": 1}
    assert (fleet.node("h2").sglang / ".patchkit" / "journal.json").exists() or \
        snapshot(fleet.node("h2")) == before["h2"]
    for name in ("h3",):  # the second wave never started
        assert snapshot(fleet.node(name)) == before[name]

    code, status = patchkit(fleet, "status", inventory=inventory)
    assert code == 0, status
    recovered = {h["host"]: h["result"]["recovered"] for h in status["hosts"]}
    assert recovered["h1"] == [] and recovered["h3"] == []
    if recovered["h2"]:
        assert recovered["h2"][0]["outcome"] == "rolled-back"
    assert snapshot(fleet.node("h2")) == before["h2"]  # all or nothing: nothing
    assert state_of(fleet.node("h2")) == {}
    assert status["matrix"]["h1"]["dsv4-bf16-sizing"] == {"state": "applied", "version": 4, "release": "0.5.23"}
    assert status["matrix"]["h2"]["dsv4-bf16-sizing"]["state"] == "not-applied"

    code, report = patchkit(fleet, "apply", *SEED)  # the re-run converges
    assert code == 0, report
    assert hosts(report) == {"h1": "unchanged", "h2": "applied", "h3": "applied"}


def test_two_hosts_sharing_a_root_a_fix_writes_are_refused_in_preflight(fleet, tmp_path: Path) -> None:
    """h1 and h2 with their own SGLang trees but one serve directory (an NFS mount of serve
    scripts): one apply of a serve fix would be reported `applied` on both, though the second
    host's engine found it there already, and a rollback on one host would take it from the
    other. Preflight refuses the second host, naming the root; nothing is written."""
    inventory = tmp_path / "shared.yml"
    data = json.loads(fleet.inventory.read_text())
    shared = data["all"]["hosts"]["h1"]["patchkit_roots"]["serve"]
    data["all"]["hosts"]["h2"]["patchkit_roots"]["serve"] = shared
    inventory.write_text(json.dumps(data))
    before = {n.name: snapshot(n) for n in fleet.nodes}
    code, report = patchkit(fleet, "apply", "prefill-hicache-off", inventory=inventory)
    assert code != 0, report
    states = hosts(report)
    assert states["h2"] == "refused", report
    h2 = next(h for h in report["hosts"] if h["host"] == "h2")
    assert "root serve" in h2["detail"] and "h1" in h2["detail"] and shared in h2["detail"]
    for node in fleet.nodes:
        assert snapshot(node) == before[node.name], node.name
    # a fix of the sglang root alone writes nothing there: the shared serve root is no matter
    code, dry = patchkit(fleet, "apply", "dsv4-bf16-sizing", "--dry-run", inventory=inventory)
    assert code == 0 and hosts(dry)["h2"] == "would-apply", dry


def test_a_bad_patchkit_python_is_refused_naming_the_variable_and_the_host(
        fleet, tmp_path: Path) -> None:
    """A host's patchkit_python that is not there is that host's refusal in preflight (nothing
    written anywhere), said as the inventory's variable of that host: before, it said
    "(--python) ... or leave --python out", an option no fleet run takes."""
    inventory = tmp_path / "bad-python.yml"
    data = json.loads(fleet.inventory.read_text())
    data["all"]["hosts"]["h2"]["patchkit_python"] = "/nonexistent/bin/python"
    inventory.write_text(json.dumps(data))
    before = {n.name: snapshot(n) for n in fleet.nodes}
    code, report = patchkit(fleet, "apply", "prefill-hicache-off", inventory=inventory)
    assert code == 16, report
    assert hosts(report)["h2"] == "refused", report
    detail = next(h for h in report["hosts"] if h["host"] == "h2")["detail"]
    assert "/nonexistent/bin/python" in detail and "patchkit_python of host h2" in detail, detail
    assert "--python" not in detail, detail
    for node in fleet.nodes:
        assert snapshot(node) == before[node.name], node.name


def test_a_host_whose_change_appeared_after_preflight_is_reported_as_its_engine_says(fleet) -> None:
    """Between preflight and h2's wave someone makes the change on h2 by hand (here h1's
    --after-cmd copies its patched serve script there): h2's engine leaves the fix out as
    present-unrecorded, and the host is `unchanged` with why, not `applied`."""
    h1, h2 = fleet.node("h1"), fleet.node("h2")
    script = "serve_dsv4_prefill.sh"
    after = f"cp {h1.serve / script} {h2.serve / script}.new && mv {h2.serve / script}.new " \
            f"{h2.serve / script} || true"
    code, report = patchkit(fleet, "apply", "prefill-hicache-off", "--waves", "1,100%",
                            "--limit", "h1,h2", "--after-cmd", after)
    assert code == 0, report
    states = {h["host"]: (h["state"], h["detail"]) for h in report["hosts"]}
    assert states["h1"] == ("applied", ""), states
    assert states["h2"][0] == "unchanged", states
    assert "prefill-hicache-off: present-unrecorded" in states["h2"][1], states
    assert state_of(h2) == {}


def _playbooks_of(inventory: Path) -> list[int]:
    """The ansible-playbook processes still running on ``inventory``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(b"ansible-playbook" in a for a in argv) and str(inventory).encode() in argv:
                found.append(int(entry))
    return found


def _interrupted_rollout(fleet, args: list[str], hosts: list[str], release: Path,  # type: ignore[no-untyped-def]
                         signum: int, *, command: tuple[str, ...] = ("apply", "dsv4-bf16-sizing"),
                         inventory: Path | None = None) -> tuple[int, str, str]:
    """``patchkit COMMAND --inventory INV ARGS --json``, signalled once one of ``hosts``
    reached its health check, or its held python (:func:`_held_pythons`), which touches
    ``reached`` beside its tree and waits for ``release``; (exit code, stdout, stderr). SIGINT
    goes to the process group, as a terminal's Ctrl-C does; another signal to the controller
    alone (timeout(1), systemd)."""
    proc = subprocess.Popen([str(fleet.bin / "patchkit"), *command,
                             "--inventory", str(inventory or fleet.inventory), *args, "--json"],
                            env=fleet.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not any((fleet.node(h).workdir / "reached").exists() for h in hosts):
            assert proc.poll() is None and time.monotonic() < deadline, "no host ran the check"
            time.sleep(0.1)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=120)
    finally:
        release.touch()  # the health loops end, if they still run
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out, err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_rollout_stops_ansible_and_names_the_hosts_left_unconfirmed(
        fleet, tmp_path: Path, signum: int) -> None:
    """SIGTERM to the controller (timeout, systemd, a CI cancel) or Ctrl-C (SIGINT to its
    process group) while a host's --health-cmd runs: the host's change is complete but not
    confirmed. The run stops ansible-playbook (none is left running, its rescue never to
    come), exits 128 + the signal, and says, in --json too, which hosts stand changed and how
    to undo them; it used to print nothing on SIGTERM (ansible orphaned), and on SIGINT "failed
    before any host ran" (exit 16) with h1 changed."""
    release = tmp_path / "release"
    health = (f"touch {{{{ patchkit_target }}}}/../reached; "
              f"while [ ! -e {release} ]; do sleep 0.1; done")
    code, out, err = _interrupted_rollout(fleet, ["--limit", "h1", "--health-cmd", health],
                                          ["h1"], release, signum)
    assert code == 128 + signum, (code, out, err)
    assert _playbooks_of(fleet.inventory) == []
    data = json.loads(out)
    assert data["ok"] is False and data["error"]["type"] == "Terminated", data
    said = data["error"]["message"]
    assert signal.Signals(signum).name in said and "h1" in said and "not confirmed" in said
    assert "before any host ran" not in said + err
    assert data["error"]["details"]["changed"] == ["h1"]
    assert f"to undo: patchkit rollback dsv4-bf16-sizing --inventory {fleet.inventory} " \
        "--limit h1" in said, said
    assert state_of(fleet.node("h1")) == {"dsv4-bf16-index-k": 4, "dsv4-bf16-sizing": 4} or \
        "dsv4-bf16-sizing" in state_of(fleet.node("h1"))  # the change stands, as said
    code, _report = patchkit(fleet, "rollback", "dsv4-bf16-sizing", "dsv4-bf16-index-k",
                             "--limit", "h1")
    assert code == 0, _report


def test_an_interrupt_in_a_later_wave_names_the_hosts_earlier_waves_changed(
        fleet, tmp_path: Path) -> None:
    """SIGTERM while wave 2's health checks run: wave 1's canary is changed and confirmed,
    and the message said only that no host of this wave was changed (--json: changed []),
    leaving a fleet part changed unsaid (a new-user trial). It names the earlier waves'
    hosts, how to see them and how to take their change back."""
    release = tmp_path / "release"
    health = ('if [ "{{ inventory_hostname }}" != h1 ]; then touch {{ patchkit_target }}/../reached; '
              f"while [ ! -e {release} ]; do sleep 0.1; done; fi")
    code, out, err = _interrupted_rollout(fleet, ["--waves", "1,100%", "--health-cmd", health],
                                          ["h2", "h3"], release, signal.SIGTERM)
    assert code == 143, (out, err)
    data = json.loads(out)
    said = data["error"]["message"]
    assert data["error"]["details"]["earlier"] == ["h1"], data["error"]
    assert "Earlier waves changed h1" in said and f"patchkit status --inventory {fleet.inventory}" in said
    assert f"patchkit rollback dsv4-bf16-sizing --inventory {fleet.inventory} --limit h1" in said, said
    assert "dsv4-bf16-sizing" in state_of(fleet.node("h1"))


def test_an_interrupted_status_says_it_writes_nothing_not_the_rollouts_words(fleet) -> None:
    """SIGTERM to `status --inventory` while ansible-playbook runs: a run that only reads says
    so, as one target's does (docs/cli.md); it said the rollout's "no host was changed by it
    (an engine interrupted on a host puts back what it wrote)" (a new-user trial)."""
    proc = subprocess.Popen([str(fleet.bin / "patchkit"), "status", "--inventory",
                             str(fleet.inventory), "--json"], env=fleet.env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _playbooks_of(fleet.inventory):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, (out, err)
    error = json.loads(out)["error"]
    assert error["type"] == "Terminated", error
    assert "it writes nothing to the hosts, which are as they were" in error["message"], error
    assert "changed" not in error["message"] and "changed" not in error["details"], error
    assert _playbooks_of(fleet.inventory) == []


def _held_pythons(fleet, tmp_path: Path, held: list[str], release: Path) -> Path:  # type: ignore[no-untyped-def]
    """An inventory whose ``held`` hosts' patchkit_python, the first time it runs while the
    engine's transaction is in flight there (its journal written), touches ``reached`` beside
    the host's tree and waits for ``release``: the engine on the host is mid-change when the
    controller is signalled, and completes once ``release`` is there."""
    data = json.loads(fleet.inventory.read_text())
    for name in held:
        node = fleet.node(name)
        python = tmp_path / f"python-{name}"
        journal, reached = node.sglang / ".patchkit" / "journal.json", node.workdir / "reached"
        python.write_text(f"#!/bin/sh\nif [ -e {journal} ] && [ ! -e {reached} ]; then touch {reached}; "
                          f"while [ ! -e {release} ]; do sleep 0.05; done; fi\n"
                          f"exec {fleet.python} \"$@\"\n")
        python.chmod(0o755)
        data["all"]["hosts"][name]["patchkit_python"] = str(python)
    inventory = tmp_path / "held.yml"
    inventory.write_text(json.dumps(data))
    return inventory


def _settled(node, done) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The host's fixes once ``done(state)`` holds of them (its engine finished), within 60 s."""
    deadline = time.monotonic() + 60
    while not done(state_of(node)) or (node.sglang / ".patchkit" / "journal.json").exists():
        assert time.monotonic() < deadline, state_of(node)
        time.sleep(0.1)
    return state_of(node)


@pytest.mark.parametrize("op", ["apply", "undo"])
def test_an_interrupt_while_engines_run_names_their_hosts_unknown_not_unchanged(
        fleet, tmp_path: Path, op: str) -> None:
    """SIGTERM while wave 2's engines are mid-change on h2 and h3: ansible-playbook is stopped,
    but each engine ignores the dropped connection (docs/remote.md) and completes. The run
    said "no host was changed by it (an engine interrupted on a host puts back what it
    wrote)", details.changed [] and a rollback of h1 alone, while h2 and h3 were changed too
    (a new-user trial). Now they are `unknown`: named, with the status that shows them."""
    if op == "undo":  # each host's last change to undo: the apply
        code, report = patchkit(fleet, "apply", "dsv4-bf16-sizing")
        assert code == 0, report
    release = tmp_path / "release"
    inventory = _held_pythons(fleet, tmp_path, ["h2", "h3"], release)
    command = ("apply", "dsv4-bf16-sizing") if op == "apply" else ("undo",)
    code, out, err = _interrupted_rollout(fleet, ["--waves", "1,100%"], ["h2", "h3"], release,
                                          signal.SIGTERM, command=command, inventory=inventory)
    assert code == 143, (out, err)
    data = json.loads(out)
    said, details = data["error"]["message"], data["error"]["details"]
    assert details["unknown"] == ["h2", "h3"] and details["changed"] == [], details
    assert details["earlier"] == ["h1"], details
    assert f"may have completed: run patchkit status --inventory {inventory} --limit h2,h3" in said, said
    assert "no host was changed" not in said and "puts back what it wrote" not in said, said
    assert "not changed" not in said, said
    done = (lambda s: "dsv4-bf16-sizing" in s) if op == "apply" else (lambda s: s == {})
    for name in ("h2", "h3"):  # they were changed: what the report no longer denies
        _settled(fleet.node(name), done)


def test_an_interrupt_names_a_host_whose_engine_never_started_not_reached_not_unknown(
        fleet, tmp_path: Path) -> None:
    """Every host of the wave without a result was `unknown`, one whose engine task Ansible
    had not started yet included (more hosts than --forks): the run told the user to check a
    host it never touched. With --forks 1, h2's engine is held mid-change and h3 waits its
    turn when the stop comes: h2 is unknown, h3 not reached and as it was."""
    release = tmp_path / "release"
    inventory = _held_pythons(fleet, tmp_path, ["h2"], release)
    before = snapshot(fleet.node("h3"))
    code, out, err = _interrupted_rollout(
        fleet, ["--waves", "1,100%", "--forks", "1"], ["h2"], release, signal.SIGTERM,
        inventory=inventory)
    assert code == 143, (out, err)
    error = json.loads(out)["error"]
    details, said = error["details"], error["message"]
    assert details["unknown"] == ["h2"] and details["not_reached"] == ["h3"], details
    assert "h3 was not reached: the engine never started there, as it was" in said, said
    assert f"status --inventory {inventory} --limit h2" in said and "h2,h3" not in said, said
    _settled(fleet.node("h2"), lambda s: "dsv4-bf16-sizing" in s)  # h2 completes, as said
    assert snapshot(fleet.node("h3")) == before


def test_an_upgrade_from_v1_to_v2_across_the_fleet(fleet, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    for part in ("manifests", "patches"):
        subprocess.run(["cp", "-a", str(REPO / part), str(catalog / part)], check=True)
    for node in fleet.nodes:  # v1 on every host: applied on each host's own trees (a fleet
        # apply of it is what the first test checks), cheaper than one more rollout
        target = LocalTarget({"sglang": str(node.sglang), **node.roots}, fleet.python, node.name)
        done = api.apply(Catalog(catalog), target, ["prefill-hicache-off"])
        assert done.ok and [f.outcome for f in done.fixes] == ["applied"], node.name
        assert state_of(node) == {"prefill-hicache-off": 1}
    manifest = catalog / "manifests" / "prefill-hicache-off.toml"
    manifest.write_text(manifest.read_text().replace("version = 1\n", "version = 2\n", 1)
                        + '\n[[changelog]]\nversion = 2\ndate = "2026-12-01"\n'
                          'base_release = "0.5.21"\nsummary = "Same change, new version."\n')
    code, status = patchkit(fleet, "status", "--exit-code", catalog=catalog)
    assert code == 1  # every host runs v1 while the catalog has v2: outdated
    assert {row["prefill-hicache-off"]["state"] for row in status["matrix"].values()} == {"outdated"}

    # a health check failing after the upgrade puts v1 back: the undo was a rollback of v2,
    # which left the host with neither version
    v1_tree = snapshot(fleet.node("h1"))
    code, report = patchkit(fleet, "apply", "prefill-hicache-off", "--limit", "h1",
                            "--health-cmd", "exit 7", catalog=catalog)
    assert code == 16 and hosts(report)["h1"] == "rolled-back", report
    undone = next(h for h in report["hosts"] if h["host"] == "h1")["result"]
    assert [(f["outcome"], f["version"]) for f in undone["fixes"]] == [("undone", 1)], undone
    assert state_of(fleet.node("h1")) == {"prefill-hicache-off": 1}
    assert snapshot(fleet.node("h1")) == v1_tree

    code, report = patchkit(fleet, "apply", "prefill-hicache-off", "--waves", "50%", catalog=catalog)

    assert code == 0, report
    assert report["waves"] == [["h1", "h2"], ["h3"]]
    assert set(hosts(report).values()) == {"applied"}
    assert report["groups"] == [{"change": "prefill-hicache-off v1->v2", "hosts": ["h1", "h2", "h3"]}]
    for node in fleet.nodes:
        assert state_of(node) == {"prefill-hicache-off": 2}
    code, log = patchkit(fleet, "log", "prefill-hicache-off", catalog=catalog)
    assert log["fixes"] == [{"name": "prefill-hicache-off", "catalog_version": 2,
                             "hosts": {"v2": ["h1", "h2", "h3"]}}]


def test_a_record_the_hosts_release_no_longer_needs_is_forgotten_by_the_fleet_too(
        fleet, tmp_path: Path) -> None:
    """The hosts' release holds a fix upstream (its manifest marks it so) and each host still
    records it: `apply FIX` (and `sync`) on one target forgets the record, writing nothing, as
    status advises. On a fleet the preflight saw no change to make, the host was `unchanged`,
    and the record stayed for good: status never converged (a trial, on a lost revert fix
    after an upgrade). Forgetting the record is now the host's change, made in its wave."""
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    for part in ("manifests", "patches"):
        subprocess.run(["cp", "-a", str(REPO / part), str(catalog / part)], check=True)
    for node in fleet.nodes:
        target = LocalTarget({"sglang": str(node.sglang), **node.roots}, fleet.python, node.name)
        assert api.apply(Catalog(catalog), target, ["prefill-hicache-off"]).ok, node.name
    manifest = catalog / "manifests" / "prefill-hicache-off.toml"
    manifest.write_text(manifest.read_text().replace('root = "sglang"\n', 'root = "sglang"\n'
                                                      'applied = "0.5.23"\n', 1))
    trees = {node.name: snapshot(node) for node in fleet.nodes}
    code, status = patchkit(fleet, "status", catalog=catalog)
    assert {row["prefill-hicache-off"]["state"] for row in status["matrix"].values()} == {"not-needed"}

    code, report = patchkit(fleet, "apply", "prefill-hicache-off", "--after-cmd", "exit 9",
                            catalog=catalog)
    assert code == 0, report
    assert set(hosts(report).values()) == {"applied"}, report
    assert report["groups"] == [{"change": "prefill-hicache-off v1 record forgotten (not-needed)",
                                 "hosts": ["h1", "h2", "h3"]}], report
    for node in fleet.nodes:  # the records gone, no file written, no hook run (nothing changed)
        assert state_of(node) == {} and snapshot(node) == trees[node.name], node.name
    code, again = patchkit(fleet, "apply", "prefill-hicache-off", catalog=catalog)
    assert code == 0 and set(hosts(again).values()) == {"unchanged"}, again


def _doc_blocks(language: str) -> list[str]:
    text = (REPO / "docs" / "fleet.md").read_text()
    section = text.split("## Your own playbooks", 1)[1].split("\n## ", 1)[0]
    return [b.split("\n", 1)[1] for b in section.split("```")[1::2] if b.split("\n", 1)[0] == language]


def test_the_documented_playbook_applies_the_seed_fixes_as_written(fleet, tmp_path: Path) -> None:
    (commands,), (playbook,) = _doc_blocks(""), _doc_blocks("yaml")
    assert playbook.startswith("# site.yml")
    (tmp_path / "site.yml").write_text(playbook)
    (tmp_path / "inventory.yml").write_text(fleet.inventory.read_text())
    env = dict(fleet.env, PATH=f"{fleet.bin}{os.pathsep}{os.environ['PATH']}")

    run = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)

    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((tmp_path / "plan.json").read_text())["fixes"] == SEED
    for node in fleet.nodes:
        assert state_of(node) == {"dsv4-bf16-sizing": 4, "revert-hicache-index-k-sync": 5,
                                  "prefill-hicache-off": 1}
    assert run.stdout.count("'applied', 'applied', 'applied'") == len(fleet.nodes) or \
        run.stdout.count('"applied",') >= len(fleet.nodes), run.stdout


def test_a_fix_recorded_on_a_root_the_inventory_does_not_give_is_shown_and_stops_nothing(
        fleet) -> None:
    """Hosts recording the serve script's fix, surveyed with an inventory that gives only
    ``patchkit_target``: the matrix has a ``not-looked-at`` cell for it on each such host,
    saying why (it had no row at all, and the fleet looked converged while every write on
    those hosts failed: a fleet trial), and a sync of the sglang fixes goes on, leaving it out."""
    from tests.fixtures.fleet_hosts import write_inventory

    code, report = patchkit(fleet, "apply", "prefill-hicache-off", "--limit", "h1,h2")
    assert code == 0, report
    bare = write_inventory(fleet.inventory.parent / "sglang-only.yml", [n.host for n in fleet.nodes],
                           {n.name: {"patchkit_target": str(n.sglang)} for n in fleet.nodes},
                           python=fleet.python)
    code, status = patchkit(fleet, "status", "--exit-code", inventory=bare)
    assert code == 0, status
    for host in ("h1", "h2"):
        cell = status["matrix"][host]["prefill-hicache-off"]
        assert cell["state"] == "not-looked-at", cell
        assert "root serve not given" in cell["detail"] and "patchkit_roots" in cell["detail"]
    assert "prefill-hicache-off" not in status["matrix"]["h3"]
    plain = fleet.run("patchkit", "status", "--inventory", str(bare))
    assert "h1\tprefill-hicache-off\tnot-looked-at\t\tapplied here, not looked at" in plain.stdout, \
        plain.stdout
    code, synced = patchkit(fleet, "sync", "--dry-run", inventory=bare)
    assert code == 0, synced
    assert set(hosts(synced).values()) <= {"would-apply", "unchanged"}, synced


def test_a_status_no_host_answered_is_the_hosts_failure_not_an_empty_answer(fleet) -> None:
    """Every host unreachable, or every host's engine unable to start (no such interpreter):
    ``status`` and ``log --inventory`` have no host's answer to give, so they fail as one
    ``ssh://`` target's status does (exit 10, or 15: nothing ran), ``ok`` false; they exited 0
    with ``"ok": true`` (a fleet trial). A matrix with one host's answer is still the answer."""
    from tests.fixtures.fleet_hosts import write_inventory

    where = fleet.inventory.parent
    gone = write_inventory(where / "gone.yml", [fleet.servers.unreachable("h9")],
                           {"h9": {"patchkit_target": "/nowhere"}}, python=fleet.python)
    no_python = write_inventory(where / "no-python.yml", [n.host for n in fleet.nodes],
                                {n.name: {"patchkit_target": str(n.sglang)} for n in fleet.nodes},
                                python="/nonexistent/python3")
    for inventory, code, kind in ((gone, 10, "HostUnreachable"), (no_python, 15, "SessionFailed")):
        for op in ("status", "log"):
            got, data = patchkit(fleet, op, inventory=inventory)
            assert got == code and data["ok"] is False, (op, data)
            assert data["error"]["type"] == kind and "no host answered" in data["error"]["message"]
    with_one = fleet.write_inventory(where / "with-h9.yml", unreachable=["h9"])
    got, data = patchkit(fleet, "status", inventory=with_one)
    assert got == 0 and data["ok"] is True, data
