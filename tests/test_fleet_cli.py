"""Bad fleet input is refused before Ansible touches any host: a clear message naming what to
fix, a usage exit (docs/fleet.md). Runs the real ansible-inventory; no host is contacted."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.fleet import parse_waves, split_waves
from patchkit.errors import UsageError

BIN = Path(sys.executable).parent
SEED = ["dsv4-bf16-sizing", "revert-hicache-index-k-sync", "prefill-hicache-off"]

needs_ansible = pytest.mark.skipif(not (BIN / "ansible-inventory").exists(),
                                   reason="ansible-core not installed (the fleet extra)")


def pk(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "patchkit"), *args], capture_output=True, text=True, cwd=cwd)


def inventory(tmp_path: Path, hosts: dict) -> Path:
    path = tmp_path / "inventory.yml"
    path.write_text(json.dumps({"all": {"hosts": hosts}}))
    return path


def test_waves_split_like_ansible_serial() -> None:
    hosts = [f"h{i}" for i in range(1, 11)]
    assert split_waves(hosts, parse_waves("1,25%,100%")) == [["h1"], hosts[1:4], hosts[4:]]
    assert split_waves(hosts, parse_waves("3")) == [hosts[0:3], hosts[3:6], hosts[6:9], hosts[9:]]
    assert split_waves(hosts[:1], parse_waves("1,25%")) == [["h1"]]
    for bad in ("0", "x", "150%", "", "1,,", "1,,2", ",1"):  # an empty part is a count left out
        with pytest.raises(UsageError, match="--waves"):
            parse_waves(bad)


def test_fleet_options_need_an_inventory_and_exclude_a_target(tmp_path: Path) -> None:
    run = pk("apply", *SEED, "--waves", "1,100%", "--target", str(tmp_path))
    assert run.returncode == 2 and "--waves is for a fleet only: add --inventory" in run.stderr
    run = pk("apply", *SEED, "--inventory", str(tmp_path / "inv.yml"), "--target", str(tmp_path))
    assert run.returncode == 2 and "--inventory and --target/--root both name where to run" in run.stderr


@needs_ansible
@pytest.mark.parametrize("option,value,instead", [
    ("--python", "/opt/venv/bin/python", "patchkit_python"),
    ("--ssh-option", "ProxyJump=bastion", "ansible_ssh_common_args"),
    ("--ssh-program", "/usr/local/bin/myssh", "ansible_ssh_executable")])
def test_one_targets_options_are_refused_with_an_inventory(
        tmp_path: Path, option: str, value: str, instead: str) -> None:
    """--python, --ssh-option and --ssh-program name one target's interpreter and connection;
    with --inventory they are refused (exit 2, naming the inventory variable to set), as
    --target is. Before, they were silently ignored: every host's checks ran with the
    discovered interpreter while the user believed they ran in the venv given."""
    inv = inventory(tmp_path, {"h1": {"ansible_host": "127.0.0.1", "ansible_port": 1,
                                      "patchkit_target": "/srv/sglang",
                                      "patchkit_roots": {"serve": "/srv/serve"}}})
    for op in (["apply", "prefill-hicache-off", "--dry-run"], ["status"], ["verify"], ["log"]):
        run = pk(*op, "--inventory", str(inv), option, value)
        assert run.returncode == 2, (op, run.stdout, run.stderr)
        said = " ".join(run.stderr.split())
        assert f"{option} is for one target" in said and instead in said, said


@needs_ansible
def test_a_missing_inventory_is_named(tmp_path: Path) -> None:
    run = pk("apply", *SEED, "--inventory", str(tmp_path / "nowhere.yml"))
    assert run.returncode == 2, run.stderr
    assert "nowhere.yml" in run.stderr and "inventory" in run.stderr


@needs_ansible
def test_a_host_without_patchkit_target_is_named(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"prefill-1": {"ansible_host": "127.0.0.1", "ansible_port": 1}})
    run = pk("status", "--inventory", str(inv))
    assert run.returncode == 2, run.stderr
    assert "host prefill-1" in run.stderr and "patchkit_target" in run.stderr


@needs_ansible
@pytest.mark.parametrize("variables,named", [
    ({"patchkit_target": "hosts/h4"}, "patchkit_target is 'hosts/h4'"),
    ({"patchkit_target": "/srv/sglang", "patchkit_roots": {"serve": "serve"}},
     "patchkit_roots.serve is 'serve'")])
def test_a_relative_root_path_is_refused_on_the_controller_before_any_host(
        tmp_path: Path, variables: dict, named: str) -> None:
    """A relative path in the inventory means nothing on a host: refused up front, exit 2,
    naming the host and the variable, as a missing patchkit_target is (it was found on each
    host, exit 16 for an apply and failed cells with exit 0 for a status: a fleet trial)."""
    inv = inventory(tmp_path, {"h4": {"ansible_host": "127.0.0.1", "ansible_port": 1, **variables}})
    for op in (["status"], ["apply", "dsv4-bf16-index-k"]):
        run = pk(*op, "--inventory", str(inv))
        assert run.returncode == 2, run.stderr
        assert "host h4" in run.stderr and named in run.stderr and "not an absolute path" in run.stderr


@needs_ansible
def test_the_one_host_interpreter_form_in_an_inventory_says_what_a_fleet_takes(tmp_path: Path) -> None:
    """`patchkit_target: python:/opt/venv/bin/python` (the form ssh:// takes) was refused as
    "not an absolute path", which it looks like; a fleet names the site-packages directory and
    patchkit_python, and the refusal says so."""
    inv = inventory(tmp_path, {"h4": {"ansible_host": "127.0.0.1", "ansible_port": 1,
                                      "patchkit_target": "python:/opt/venv/bin/python"}})
    run = pk("status", "--inventory", str(inv))
    assert run.returncode == 2, run.stderr
    assert "an interpreter" in run.stderr and "site-packages" in run.stderr
    assert "patchkit_python" in run.stderr and "not an absolute path" not in run.stderr


@needs_ansible
def test_a_host_lacking_a_fixs_root_is_refused_before_any_host_is_contacted(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"prefill-1": {"ansible_host": "127.0.0.1", "ansible_port": 1,
                                             "patchkit_target": str(tmp_path / "sglang")}})
    run = pk("apply", *SEED, "--inventory", str(inv))
    assert run.returncode == 2, run.stderr
    assert "prefill-hicache-off" in run.stderr and "serve" in run.stderr and "prefill-1" in run.stderr


@needs_ansible
def test_a_limit_matching_no_host_is_refused(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"prefill-1": {"patchkit_target": "/srv/sglang"}})
    run = pk("status", "--inventory", str(inv), "--limit", "decode-*")
    assert run.returncode == 2, run.stderr
    assert "no hosts" in run.stderr and "decode-*" in run.stderr


def test_plan_writes_a_request_without_roots_and_the_collections_path() -> None:
    run = pk("plan", *SEED, "--json")
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert plan["fixes"] == SEED and plan["op"] == "apply"
    assert plan["request"]["roots"] == {}  # each host gives its own
    assert [f["name"] for f in plan["request"]["fixes"]] == SEED
    path = pk("plan", "--collections-path").stdout.strip()
    assert (Path(path) / "ansible_collections" / "patchkit" / "fleet" / "plugins" / "modules"
            / "engine.py").is_file()
    assert pk("plan", "no-such-fix", "--json").returncode == 2


@needs_ansible
def test_a_host_without_the_engines_python_is_refused_by_name_and_nothing_runs(tmp_path: Path) -> None:
    # Ansible's local connection: the action plugin starts the agent as for any host
    sglang, serve = tmp_path / "sglang", tmp_path / "serve"
    sglang.mkdir()
    serve.mkdir()
    missing = str(tmp_path / "no-such-python")
    inv = inventory(tmp_path, {"prefill-1": {"ansible_connection": "local",
                                             "ansible_python_interpreter": missing,
                                             "patchkit_target": str(sglang),
                                             "patchkit_roots": {"serve": str(serve)}}})
    run = pk("apply", *SEED, "--inventory", str(inv), "--json")
    assert run.returncode == 16, run.stderr
    host = json.loads(run.stdout)["hosts"][0]
    assert host["state"] == "refused"
    assert "no Python interpreter" in host["detail"] and missing in host["detail"]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["inventory.yml", "serve", "sglang"]


def test_plan_carries_no_git_and_commit_into_the_request() -> None:
    plain = json.loads(pk("plan", *SEED, "--json").stdout)["request"]
    assert plain["git"] is True and plain["commit"] is False
    request = json.loads(pk("plan", *SEED, "--no-git", "--json").stdout)["request"]
    assert request["git"] is False
    assert json.loads(pk("plan", *SEED, "--commit", "--json").stdout)["request"]["commit"] is True
    wrong = pk("plan", *SEED, "--op", "rollback", "--commit", "--json")
    assert wrong.returncode == 2 and "--commit" in wrong.stderr


@needs_ansible
@pytest.mark.parametrize("flag", ["--diff", "--verbose"])
def test_one_target_display_options_are_refused_with_an_inventory(tmp_path: Path, flag: str) -> None:
    inv = inventory(tmp_path, {"prefill-1": {"ansible_connection": "local",
                                             "patchkit_target": str(tmp_path),
                                             "patchkit_roots": {"serve": str(tmp_path)}}})
    run = pk("apply", *SEED, "--inventory", str(inv), flag)
    assert run.returncode == 2 and flag in run.stderr and "--inventory" in run.stderr


@needs_ansible
def test_no_git_reaches_every_host_of_a_rollout(catalog_tree: Path, tmp_path: Path) -> None:
    # Ansible's local connection, a real checkout: the host's engine runs no git
    before = subprocess.run(["git", "status", "--porcelain"], cwd=catalog_tree, capture_output=True,
                            text=True, check=True).stdout
    inv = inventory(tmp_path, {"prefill-1": {"ansible_connection": "local",
                                             "ansible_python_interpreter": sys.executable,
                                             "patchkit_target": str(catalog_tree)}})
    run = pk("apply", "dsv4-bf16-index-k", "--inventory", str(inv), "--no-git", "--json")
    assert run.returncode == 0, (run.stdout, run.stderr)
    host = json.loads(run.stdout)["hosts"][0]
    assert host["state"] == "applied"
    checks = [c for f in host["result"]["fixes"] for c in f["preconditions"] if c["kind"] == "git-clean"]
    assert checks and all(c["detail"].startswith("not checked: --no-git") for c in checks)
    after = subprocess.run(["git", "status", "--porcelain"], cwd=catalog_tree, capture_output=True,
                           text=True, check=True).stdout
    assert after != before  # the fix was written


@needs_ansible
def test_a_host_without_an_interpreter_variable_gets_the_one_ansible_discovers(
        catalog_tree: Path, tmp_path: Path) -> None:
    # No ansible_python_interpreter, and no python3 on the host's PATH (Ansible's local
    # connection inherits it): as for a module, Ansible's discovery finds the host's Python
    if not Path("/usr/bin/python3").exists():
        pytest.skip("interpreter discovery's fallback /usr/bin/python3 is not installed")
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("sh", "git"):
        (bare / tool).symlink_to(subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                                                text=True, check=True).stdout.strip())
    inv = inventory(tmp_path, {"prefill-1": {"ansible_connection": "local",
                                             "patchkit_target": str(catalog_tree)}})
    run = subprocess.run([str(BIN / "patchkit"), "status", "--inventory", str(inv), "--json"],
                         capture_output=True, text=True, env={**os.environ, "PATH": str(bare)})
    assert run.returncode == 0, (run.stdout, run.stderr)
    host = json.loads(run.stdout)["hosts"][0]
    assert host["state"] == "ok", host
    assert host["result"]["ok"] is True


@needs_ansible
def test_ansible_doc_reads_the_collections_documentation_as_docs_fleet_says() -> None:
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": pk("plan", "--collections-path").stdout.strip(),
           "ANSIBLE_NOCOLOR": "1"}
    for kind, name in (("module", "patchkit.fleet.engine"), ("callback", "patchkit.fleet.results")):
        run = subprocess.run([str(BIN / "ansible-doc"), "-t", kind, "--json", name], capture_output=True,
                             text=True, env=env)
        assert run.returncode == 0, run.stderr
        doc = json.loads(run.stdout)[name]["doc"]
        assert doc["description"]
    options = json.loads(subprocess.run([str(BIN / "ansible-doc"), "--json", "patchkit.fleet.engine"],
                                        capture_output=True, text=True, env=env).stdout)
    assert set(options["patchkit.fleet.engine"]["doc"]["options"]) == {"plan", "request", "target",
                                                                         "roots", "python", "txn"}


def test_the_piped_fleet_matrix_gives_a_version_only_where_a_host_runs_one() -> None:
    import io

    from patchkit.cli.fleet import render_matrix
    from patchkit.fleet.status import status_cells
    from patchkit.cli.render import PlainConsole
    from patchkit.fleet import HostReport, Survey

    fixes = [{"name": "a", "state": "applied", "version": 2},
             {"name": "b", "state": "not-applied", "version": 3},
             {"name": "c", "state": "present-unrecorded", "version": 1}]
    survey = Survey(op="status", hosts=(HostReport("h1", "ok", result={"status": {"fixes": fixes}}),
                                        HostReport("h2", "unreachable", "no route")))
    out = io.StringIO()
    render_matrix(PlainConsole(out), status_cells(survey))
    assert out.getvalue().splitlines() == [
        "h1\ta\tapplied\tv2", "h1\tb\tnot-applied\t", "h1\tc\tpresent-unrecorded\t",
        "h2\ta\tunreachable\t\tno route", "h2\tb\tunreachable\t\tno route",
        "h2\tc\tunreachable\t\tno route"]


def test_a_dead_fix_no_host_carries_is_no_column_of_the_matrix() -> None:
    """A dead or superseded fix is left out of the fleet matrix where every host that answered
    has it not-applied, as one target's status shows it no row; a host carrying it keeps its
    column (it is the one to roll back), and --all (``inactive=()``) shows every fix."""
    from patchkit.fleet import HostReport, Survey
    from patchkit.fleet.status import status_cells

    rows = {"h1": [{"name": "live", "state": "applied", "version": 2},
                   {"name": "dead", "state": "not-applied"},
                   {"name": "held", "state": "present-unrecorded"}],
            "h2": [{"name": "live", "state": "not-applied"},
                   {"name": "dead", "state": "not-applied"},
                   {"name": "held", "state": "not-applied"}]}
    survey = Survey(op="status", hosts=(
        *(HostReport(h, "ok", result={"status": {"fixes": f}}) for h, f in rows.items()),
        HostReport("h3", "unreachable", "no route")))
    cells = status_cells(survey, inactive={"dead", "held"})
    assert {host: sorted(row) for host, row in cells.items()} == {
        host: ["held", "live"] for host in ("h1", "h2", "h3")}
    assert cells["h2"]["live"]["state"] == "not-applied"  # an active fix's column stays whole
    assert sorted(status_cells(survey)["h3"]) == ["dead", "held", "live"]
    # no host answered: the columns are the fixes asked about, the active ones
    alone = Survey(op="status", hosts=(HostReport("h3", "unreachable", "no route"),))
    assert sorted(status_cells(alone, ["live", "dead"], inactive={"dead"})["h3"]) == ["live"]


def test_undo_takes_no_hooks_and_no_fix_and_its_plan_names_none(tmp_path: Path) -> None:
    """An undo has no undo: its hooks are refused with why, before any host (or inventory) is
    read, on a fleet and on one target; it names no fix (each host's last change is undone),
    on the command line, in `plan --op undo` and in the library."""
    from patchkit import fleet as fleets
    from patchkit.catalog import Catalog

    inv = str(tmp_path / "never-read.yml")
    for args, flag in ((["--inventory", inv, "--health-cmd", "true"], "--health-cmd"),
                       (["--after-cmd", "systemctl restart sglang"], "--after-cmd")):
        run = pk("undo", *args)
        assert run.returncode == 2, run.stderr
        assert f"undo takes no {flag}" in run.stderr and "an undo has no undo" in run.stderr
    run = pk("undo", "--waves", "1,100%")
    assert run.returncode == 2 and "--waves is for a fleet only" in run.stderr
    with pytest.raises(UsageError, match="undo takes no --after-cmd"):
        fleets.rollout(Catalog(Path(__file__).resolve().parents[1]), "undo", [], inventory=inv,
                       options=fleets.FleetOptions(after_cmd="true"))

    run = pk("plan", "--op", "undo", "--json")
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)
    assert (plan["op"], plan["fixes"], plan["request"]["op"]) == ("undo", [], "undo")
    assert plan["request"]["txn"] is None and plan["request"]["roots"] == {}  # the last change
    run = pk("plan", "--op", "undo", *SEED)
    assert run.returncode == 2 and "an undo names no fix" in run.stderr, run.stderr


def test_an_interrupted_undo_wave_says_its_hosts_stand_undone_not_unconfirmed() -> None:
    """An undo runs no hooks: a host its engine put back before the interrupt is complete, and
    there is no command to undo it with."""
    from patchkit.fleet.ansible import ENGINE_MODULE, TaskResult, _interrupted

    undone = {"op": "undo", "ok": True, "fixes": [{"name": "a", "outcome": "undone"}]}
    results = {"h1": [TaskResult("h1", "patchkit undo", ENGINE_MODULE, "ok", True, undone)]}
    err = _interrupted(15, results, "inv.yml", ["h1"], writes=True)
    assert err.details["changed"] == ["h1"] and err.details["unknown"] == []
    assert "put back as before their last change" in str(err) and "h1" in str(err)
    assert "not confirmed" not in str(err) and "to undo:" not in str(err)


def test_a_dry_runs_diff_names_an_installed_packages_file_as_it_lies() -> None:
    """The fleet dry run's diff header names each file as the host's engine does (an installed
    package's ``sglang:sglang/x.py``, its ``where``), as one target's output does; it named the
    patch's checkout path (a fleet trial)."""
    from patchkit.cli import render
    from patchkit.fleet.rollout import FleetReport, HostReport

    diff = "--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    fix = {"name": "f", "version": 1, "outcome": "would-apply",
           "files": [{"root": "sglang", "path": "python/sglang/x.py", "where": "sglang:sglang/x.py",
                      "diff": diff}]}
    report = FleetReport("apply", True, tuple(HostReport(h, "would-apply", result={"fixes": [fix]})
                                              for h in ("h1", "h2")), groups=(("f v1", ("h1", "h2")),))
    assert list(report.diffs()) == [("f", "sglang:sglang/x.py", diff.rstrip())]
    out = render.PlainConsole(io.StringIO())
    from patchkit.cli.fleet import render_rollout

    render_rollout(out, report)
    assert "--- h1, h2: f sglang:sglang/x.py\n" in out.file.getvalue()


def test_a_hosts_root_error_names_the_inventory_variable_it_came_from() -> None:
    """A host's engine refusing a root (no such directory there) names where the path came
    from, as the controller's own refusals do (a fleet trial: only the path was said)."""
    from patchkit.fleet.ansible import TaskResult
    from patchkit.fleet.rollout import host_error

    for root, var in (("sglang", "patchkit_target"), ("serve", "patchkit_roots.serve")):
        error = {"type": "TargetError", "message": f"root {root}: /srv/x does not exist or is not "
                 "a directory; check the target's root paths", "details": {"root": root}}
        task = TaskResult("h1", "patchkit status", "patchkit.fleet.engine", "failed",
                          patchkit={"ok": False, "error": error})
        assert host_error(task).endswith(f"(root {root} is the host's {var} in the inventory)")
    other = TaskResult("h1", "t", "patchkit.fleet.engine", "failed", msg="boom")
    assert host_error(other) == "boom" and host_error(None) == "no result"


def test_a_wave_host_whose_engine_refused_before_writing_is_refused_not_rolled_back() -> None:
    """The engine says whether its transaction had begun writing (``wrote``): a wave host
    refused before that (its tree made read-only after the preflight, a lock) is ``refused``,
    nothing written; one whose checks failed after writing is ``rolled-back`` (a fleet trial:
    both said rolled-back, "its change was undone")."""
    from types import SimpleNamespace

    from patchkit.fleet.ansible import TaskResult
    from patchkit.fleet.rollout import Rollout

    def waved(wrote: bool, kind: str) -> tuple[str, str]:
        result = {"ok": False, "wrote": wrote, "error": {"type": kind, "message": kind, "details": {}}}
        task = TaskResult("h2", "patchkit apply", "patchkit.fleet.engine", "failed", patchkit=result)
        report = Rollout._waved(SimpleNamespace(op="apply"), "h2", [task])  # type: ignore[arg-type]
        return report.state, report.detail

    assert waved(False, "PermissionDenied") == ("refused", "PermissionDenied")
    assert waved(True, "VerificationFailed") == ("rolled-back", "VerificationFailed")


def test_the_engine_says_whether_a_failed_run_wrote(tmp_path: Path) -> None:
    from tests.fixtures.user_catalog import app_patch, app_tree, tree_digest, user_catalog

    tree = app_tree(tmp_path / "tree")
    failing = '\n[[verification]]\nkind = "command"\nroot = "tree"\nargv = ["false"]\nname = "no"\n'
    catalog = user_catalog(tmp_path / "catalog", {"checked": (app_patch(), failing),
                                                  "clashes": (app_patch("value = 3").replace(
                                                      "-value = 1", "-value = 7"), "")})
    before = tree_digest(tree)
    for fix, wrote in (("clashes", False), ("checked", True)):
        run = subprocess.run([sys.executable, "-m", "patchkit", "--catalog", str(catalog), "apply",
                              fix, "--root", f"tree={tree}", "--json"], capture_output=True, text=True)
        data = json.loads(run.stdout)
        assert data["ok"] is False and data["wrote"] is wrote, (fix, data)
        assert tree_digest(tree) == before


def test_a_stopped_rollouts_error_names_the_host_whose_apply_was_undone() -> None:
    """``error.details.hosts`` of an apply stopped by a canary whose change was undone (its
    health check failed) names it; it named only refused, failed or unreachable hosts, so
    [] there."""
    from patchkit.fleet.rollout import FleetReport, HostReport

    report = FleetReport("apply", False, (HostReport("h1", "rolled-back", wave=1),
                                          HostReport("h2", "untouched")),
                         stopped="wave 1 failed on h1; no later wave started")
    assert report.error is not None and report.error.details["hosts"] == ["h1"]
    done = FleetReport("rollback", False, (HostReport("h1", "rolled-back", wave=1),
                                           HostReport("h2", "failed", wave=2)),
                       stopped="wave 2 failed on h2; no later wave started")
    assert done.error is not None and done.error.details["hosts"] == ["h2"]


def test_a_hosts_suggested_command_gets_the_options_that_reach_that_host(capsys) -> None:  # type: ignore[no-untyped-def]
    """A host's message suggesting a patchkit command (``patchkit rollback --force FIX``) means
    it on that host: a note names the inventory and the host (--limit), as one target's error
    names its --target; run as printed it acted on the checkout around the working directory
    (a fleet trial). A message naming --inventory already, or no command, gets none."""
    from patchkit.cli.common import State
    from patchkit.cli.fleet import _note_options
    from patchkit.fleet.rollout import HostReport

    state = State()
    state.catalog_dir = "/srv/catalog"
    hosts = (HostReport("h1", "ok"),
             HostReport("h4", "failed", "drifted: ... to put the fix back as written: patchkit "
                        "rollback --force dsv4-bf16-index-k, then patchkit apply dsv4-bf16-index-k"),
             HostReport("h5", "failed", "see patchkit status --inventory inv.yml"))
    _note_options(state, {"inventory": "inv.yml"}, hosts)
    assert capsys.readouterr().err == ("note: run the patchkit commands above with this run's "
                                       "options: --catalog /srv/catalog --inventory inv.yml --limit h4\n")
    _note_options(state, {"inventory": "inv.yml"}, hosts[:1] + hosts[2:])
    assert capsys.readouterr().err == ""
