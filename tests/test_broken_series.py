"""A fix whose patch cannot be read (a work-in-progress patch in a team catalog) is an error row
of ``status``, ``log --target`` and a bare ``verify``, as a fix whose manifest cannot be read
is: the other fixes go on, exit 0 (``status --exit-code`` 1). Before, it ended each of them
with exit 2 on every target, whether or not that target had the fix: a monitoring gate broken
by one unapplied patch (found by a new-user trial)."""

from __future__ import annotations

import json
from pathlib import Path

from patchkit.targets import LocalTarget
from tests.fixtures.user_catalog import app_patch, app_tree, pk, user_catalog
from tests.test_remote import Ssh, ssh  # noqa: F401  (ssh is a fixture)

# each fix's verification: its name in app.py, as its patch writes it
GREP_NAME = """
[[verification]]
kind = "grep"
root = "tree"
path = "app.py"
pattern = "{name}"
present = true
"""


def fixture(tmp_path: Path) -> tuple[list[str], list[str], Path]:
    tree = app_tree(tmp_path / "tree", git=True)
    catalog = user_catalog(tmp_path / "catalog", {
        "good": (app_patch("value = 2  # good"), GREP_NAME.format(name="good")),
        "wip": ("not a patch yet\n", GREP_NAME.format(name="wip"))})
    return ["--catalog", str(catalog)], ["--root", f"tree={tree}"], catalog


def test_an_unreadable_patch_is_an_error_row_and_status_verify_and_log_go_on(tmp_path: Path) -> None:
    cat, where, catalog = fixture(tmp_path)
    applied = pk(*cat, "apply", "good", *where)
    assert applied.returncode == 0, applied.stderr
    wip = str(catalog / "patches" / "wip" / "0001-wip.patch")

    status = pk(*cat, "status", *where)
    assert status.returncode == 0, status.stderr
    rows = {r.split("\t")[0]: r.split("\t") for r in status.stdout.splitlines()}
    assert rows["good"][1] == "applied"
    assert rows["wip"][1] == "error" and f"{wip}:1:" in rows["wip"][4], status.stdout
    assert f"1 fix(es) could not be read (their rows say why): {wip}:1" in status.stderr
    assert pk(*cat, "status", *where, "--exit-code").returncode == 1
    data = json.loads(pk(*cat, "status", *where, "--json").stdout)
    assert data["ok"] is True
    assert [(b["name"], b["error"]["file"], b["error"]["line"]) for b in data["broken"]] \
        == [("wip", wip, 1)]
    assert [s["name"] for s in data["status"]["fixes"]] == ["good"]

    verify = pk(*cat, "verify", *where)
    assert verify.returncode == 0, verify.stderr
    assert "good" in verify.stdout
    log = pk(*cat, "log", *where)
    assert log.returncode == 0, log.stderr


def test_a_recorded_fix_is_answered_from_its_record_whatever_its_patch_now_holds(tmp_path: Path) -> None:
    """Applied, then its patch broken in the catalog: status needs the record, not the patch,
    locally and as a remote target's request (read whole on the controller) alike."""
    from patchkit import api
    from patchkit.catalog import Catalog

    cat, where, catalog = fixture(tmp_path)
    assert pk(*cat, "apply", "good", *where).returncode == 0
    (catalog / "patches" / "good" / "0001-good.patch").write_text("torn\n")
    status = pk(*cat, "status", *where, "--exit-code")
    rows = {r.split("\t")[0]: r.split("\t") for r in status.stdout.splitlines()}
    assert rows["good"][1] == "applied", status.stdout

    target = LocalTarget({"tree": str(tmp_path / "tree")})
    for lazy in (True, False):  # in this process; and read whole, as for an ssh:// target
        found = api.status(Catalog(catalog), _Eager(target) if not lazy else target)
        by_name = {s.name: s.state for s in found.status}
        assert by_name["good"] == "applied"
        assert {b.name for b in found.broken} == {"wip"}


class _Eager:
    """A local target that asks for its request read whole, as a remote one does (``is_remote``)."""

    is_remote = True

    def __init__(self, target: LocalTarget) -> None:
        self._target = target

    def __getattr__(self, name: str):
        return getattr(self._target, name)


def test_a_bare_verify_checks_a_fix_whose_patch_is_gone_against_its_record(tmp_path: Path) -> None:
    """Its manifest cannot be read (a patch it names is missing): the other fixes are verified,
    that one from its record, as a fix whose manifest left the catalog (a second trial)."""
    cat, where, catalog = fixture(tmp_path)
    assert pk(*cat, "apply", "good", *where).returncode == 0
    (catalog / "patches" / "good" / "0001-good.patch").unlink()
    verify = pk(*cat, "verify", *where, "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    fixes = {f["name"]: f for f in json.loads(verify.stdout)["fixes"]}
    assert fixes["good"]["outcome"] == "verified"
    assert "cannot be read" in fixes["good"]["detail"]
    (tmp_path / "tree" / "app.py").write_text("edited\n")
    drifted = pk(*cat, "verify", *where)
    assert drifted.returncode == 1 and "good" in drifted.stderr + drifted.stdout


def test_a_fix_whose_manifest_broke_after_it_was_applied_rolls_back_from_its_record(
        tmp_path: Path) -> None:
    """Rolled back by name, as a fix whose manifest left the catalog is: from the backups the
    target keeps, saying why its manifest was not used. Before, a typo in the manifest blocked
    the rollback (exit 2), in an incident when one is needed (a new-user trial). A fix the
    target does not record still gets its manifest's error."""
    cat, where, catalog = fixture(tmp_path)
    tree = tmp_path / "tree"
    before = (tree / "app.py").read_bytes()
    assert pk(*cat, "apply", "good", *where).returncode == 0
    manifest = catalog / "manifests" / "good.toml"
    manifest.write_text(manifest.read_text().replace('title = "good"', 'title = "good'))

    done = pk(*cat, "rollback", "good", *where, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert [(f["name"], f["outcome"]) for f in data["fixes"]] == [("good", "rolled-back")]
    assert [b["name"] for b in data["broken"]] == ["good"]
    assert (tree / "app.py").read_bytes() == before
    assert pk(*cat, "apply", "wip", *where).returncode == 2  # still its own error
    assert pk(*cat, "apply", "good", *where).returncode == 2
    said = pk(*cat, "rollback", "good", *where)  # not applied any more: the manifest's error
    assert said.returncode == 2 and f"{manifest}:" in said.stderr, said.stderr


def test_rollback_says_when_it_used_the_record_for_a_broken_manifest(tmp_path: Path) -> None:
    cat, where, catalog = fixture(tmp_path)
    assert pk(*cat, "apply", "good", *where).returncode == 0
    manifest = catalog / "manifests" / "good.toml"
    manifest.write_text(manifest.read_text().replace("version = 1", 'version = "one"'))
    dry = pk(*cat, "rollback", "good", *where, "--dry-run")  # a dry run says it too
    assert dry.returncode == 0 and "would-roll-back good" in dry.stdout, dry.stdout + dry.stderr
    assert f"{manifest}:" in dry.stderr and "cannot be read" in dry.stderr, dry.stderr
    done = pk(*cat, "rollback", "good", *where)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert f"{manifest}:" in said and "cannot be read" in said and "from its record" in said, said


def test_a_patch_path_out_of_the_root_is_an_error_row_too(tmp_path: Path) -> None:
    """A patch naming ``../outside.py``, or a file the target links out of the root: apply
    refuses it (exit 2), and status, log and a bare verify ended on it as well, printing no
    row, on every target: a trial's team catalog with one such patch blinded every status.
    Now its row says why and the others are answered, as for a patch that cannot be read."""
    cat, where, catalog = fixture(tmp_path)
    (catalog / "patches" / "wip" / "0001-wip.patch").write_text(
        app_patch("value = 3").replace("a/app.py", "a/../outside.py").replace("b/app.py", "b/../outside.py"))
    assert pk(*cat, "apply", "good", *where).returncode == 0
    status = pk(*cat, "status", *where, "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    data = json.loads(status.stdout)
    assert [s["name"] for s in data["status"]["fixes"]] == ["good"], data["status"]
    assert [b["name"] for b in data["broken"]] == ["wip"]
    assert "the path contains '..'" in data["broken"][0]["error"]["message"], data["broken"]
    assert pk(*cat, "status", *where, "--exit-code").returncode == 1
    assert pk(*cat, "verify", *where).returncode == 0
    assert pk(*cat, "log", *where).returncode == 0
    assert pk(*cat, "apply", "wip", *where).returncode == 2  # never written

    (catalog / "patches" / "wip" / "0001-wip.patch").write_text(
        app_patch("value = 3").replace("app.py", "linked.py"))
    outside = tmp_path / "elsewhere.py"
    outside.write_text('print("app")\nvalue = 1\n')
    (tmp_path / "tree" / "linked.py").symlink_to(outside)
    status = pk(*cat, "status", *where)
    assert status.returncode == 0, status.stdout + status.stderr
    rows = {r.split("\t")[0]: r.split("\t") for r in status.stdout.splitlines()}
    assert rows["good"][1] == "applied" and rows["wip"][1] == "error", status.stdout
    assert "through a symlink" in rows["wip"][4], rows["wip"]


def test_over_ssh_a_patch_path_out_of_the_root_is_an_error_row_too(tmp_path: Path, ssh: Ssh) -> None:
    """The same on an ``ssh://`` target, where the engine on the host judges the paths: its row
    comes back, and the client makes it the fix's error row."""
    cat, _where, catalog = fixture(tmp_path)
    (catalog / "patches" / "wip" / "0001-wip.patch").write_text(
        app_patch("value = 3").replace("a/app.py", "a/../outside.py").replace("b/app.py", "b/../outside.py"))
    host_sglang = tmp_path / "sglang"  # the target's SGLang checkout, holding its state
    (host_sglang / "python" / "sglang").mkdir(parents=True)
    where = ["--target", ssh.url(str(host_sglang)), "--root", f"tree={tmp_path / 'tree'}",
             *ssh.cli_args()]
    assert pk(*cat, "apply", "good", *where).returncode == 0
    status = pk(*cat, "status", *where, "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    data = json.loads(status.stdout)
    assert "good" in [s["name"] for s in data["status"]["fixes"]], data["status"]
    assert [b["name"] for b in data["broken"]] == ["wip"], data["broken"]
