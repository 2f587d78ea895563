"""`patchkit undo` (docs/cli.md): the target put back exactly as it was before its last apply
or sync, by the undo point that apply kept (docs/state.md, "Undo"); what a failed
--health-cmd runs, and what an operator runs when a check of their own fails afterwards."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from patchkit import api
from patchkit.catalog import Catalog
from patchkit.errors import PreconditionFailed
from patchkit.targets import LocalTarget
from tests.test_remote import SAMPLES, cli, make_tree, snapshot

POOL = "python/sglang/srt/pool.py"


def test_undo_puts_the_old_version_back_after_an_upgrade_and_only_once(tmp_path: Path) -> None:
    roots = make_tree(tmp_path / "tree")
    catalog = tmp_path / "catalog"
    shutil.copytree(SAMPLES / "catalog", catalog)
    where = ["--target", roots["sglang"], "--root", f"serve={roots['serve']}"]
    base = ["--catalog", str(catalog)]
    assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0
    v2 = Path(roots["sglang"], POOL).read_bytes()
    state = Path(roots["sglang"], ".patchkit/state.json")
    fixes_v2 = json.loads(state.read_text())["fixes"]
    manifest = catalog / "manifests" / "index-k-bytes.toml"
    manifest.write_text(manifest.read_text().replace("version = 2\n", "version = 3\n", 1)
                        + '\n[[changelog]]\nversion = 3\ndate = "2026-12-01"\n'
                          'summary = "Same change, new version."\n')
    assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0  # the upgrade to v3
    upgraded = state.read_bytes()

    code, out, err = cli([*base, "undo", *where, "--dry-run"])
    assert code == 0, err
    assert "would-undo index-k-bytes v3 -> v2" in out and "would be put back" in out, out
    assert state.read_bytes() == upgraded  # a dry run writes nothing

    code, out, err = cli([*base, "undo", *where, "--json"])
    assert code == 0, err
    assert [(f["outcome"], f["from_version"], f["version"]) for f in json.loads(out)["fixes"]] == [
        ("undone", 3, 2)]
    assert Path(roots["sglang"], POOL).read_bytes() == v2
    assert json.loads(state.read_text())["fixes"] == fixes_v2  # the v2 record, as it was

    code, out, err = cli([*base, "undo", *where])  # the point is used up: no second undo
    assert code == 1 and "nothing to undo" in err, (code, err)
    assert json.loads(state.read_text())["fixes"] == fixes_v2


def test_undo_after_a_rollback_puts_the_fix_back_as_it_was(tmp_path: Path) -> None:
    roots = make_tree(tmp_path / "tree")
    where = ["--target", roots["sglang"], "--root", f"serve={roots['serve']}"]
    base = ["--catalog", str(SAMPLES / "catalog")]
    assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0
    state = Path(roots["sglang"], ".patchkit/state.json")
    applied, fixes = Path(roots["sglang"], POOL).read_bytes(), json.loads(state.read_text())["fixes"]
    assert cli([*base, "rollback", "index-k-bytes", *where])[0] == 0
    code, out, err = cli([*base, "undo", *where])
    assert code == 0, err
    assert "undone index-k-bytes v2\n" in out, out  # applied again: v2, from nothing
    assert Path(roots["sglang"], POOL).read_bytes() == applied
    assert json.loads(state.read_text())["fixes"] == fixes  # its record, applied_at and all
    assert cli([*base, "rollback", "index-k-bytes", *where])[0] == 0  # its backups came back
    code, out, err = cli([*base, "status", "--json", *where])
    assert {f["name"]: f["state"] for f in json.loads(out)["status"]["fixes"]}.get(
        "index-k-bytes", "not-applied") == "not-applied"


def test_an_undo_killed_half_way_is_put_back_and_status_says_the_change_stands(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    roots = make_tree(tmp_path / "tree")
    where = ["--target", roots["sglang"], "--root", f"serve={roots['serve']}"]
    base = ["--catalog", str(SAMPLES / "catalog")]
    assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0
    applied = Path(roots["sglang"], POOL).read_bytes()
    killed = subprocess.run([sys.executable, "-m", "patchkit", *base, "undo", *where],
                            env=dict(os.environ, PATCHKIT_FAULT="rename:1"), capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    code, out, err = cli([*base, "status", *where])
    assert code == 0, err
    said = " ".join((out + err).split())
    assert ("recovered an interrupted undo of index-k-bytes: rolled-back; the change it was "
            "undoing stands (patchkit undo runs it again)") in said, out + err
    assert Path(roots["sglang"], POOL).read_bytes() == applied
    assert cli([*base, "undo", *where])[0] == 0  # and it does
    assert Path(roots["sglang"], POOL).read_bytes() != applied


def test_undo_says_the_restart_its_fixes_need(tmp_path: Path) -> None:
    """The server runs the undone code until it restarts: undo said nothing of it."""
    from tests.test_after_health import _restart_catalog

    roots = make_tree(tmp_path / "tree")
    catalog = _restart_catalog(tmp_path, 'restart = "prefill"')
    config = tmp_path / "patchkit.toml"
    config.write_text('[restarts]\nprefill = "systemctl restart sglang-prefill"\n')
    where = ["--target", roots["sglang"], "--root", f"serve={roots['serve']}"]
    base = ["--catalog", str(catalog), "--config", str(config)]
    assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0
    code, out, err = cli([*base, "undo", *where])
    assert code == 0, err
    assert "restart needed prefill (patchkit.toml [restarts]; run it)" in out, out
    assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0
    code, out, err = cli([*base, "undo", *where, "--json"])
    assert json.loads(out)["restart"] == ["prefill"]


def test_an_undo_names_the_change_it_undoes_and_refuses_it_once_another_came_after(
        tmp_path: Path) -> None:
    """What a fleet's wave relies on (docs/fleet.md, "Undoing a rollout"): the undo's dry run
    names the transaction it would undo (`undoes`), and an undo given that name refuses,
    writing nothing, once another change was committed after it."""
    roots = make_tree(tmp_path / "tree")
    catalog, target = Catalog(SAMPLES / "catalog"), LocalTarget(roots, sys.executable, "tree")
    first = api.apply(catalog, target, ["index-k-bytes"])
    checked = api.undo(catalog, target, dry_run=True)
    assert first.txn and checked.raw["undoes"] == first.txn
    second = api.apply(catalog, target, ["pool-guard"])
    held = snapshot(roots, state=True)
    with pytest.raises(PreconditionFailed, match="not the last change there"):
        api.undo(catalog, target, checked.raw["undoes"])
    assert snapshot(roots, state=True) == held
    assert api.undo(catalog, target).raw["undoes"] == second.txn


def test_an_undo_lists_a_record_the_change_forgot_without_writing_its_files(tmp_path: Path) -> None:
    """One apply upgrades ``mine`` and forgets ``other``'s record (the release holds ``other``
    upstream now). The undo put ``other``'s record back as well, and its result named only
    ``mine`` (a trial). It names both, ``other`` as a record put back, no file of it written."""
    from tests.fixtures.user_catalog import pk
    from tests.test_release_holds import FIX, OTHER, release_tree, sglang_catalog

    catalog = sglang_catalog(tmp_path / "catalog", {"mine": (FIX, ""), "other": (OTHER, "")})
    tree = release_tree(tmp_path / "sglang", other=True)
    cat, where = ["--catalog", str(catalog)], ["--target", str(tree)]
    assert pk(*cat, "apply", "mine", "other", *where).returncode == 0
    (catalog / "patches" / "mine" / "0001-mine.patch").write_text(FIX.replace("d = 2", "d = 3"))
    mine = catalog / "manifests" / "mine.toml"
    mine.write_text(mine.read_text().replace("version = 1\n", "version = 2\n"))
    held = catalog / "manifests" / "other.toml"
    held.write_text(held.read_text().replace('root = "sglang"\n', 'root = "sglang"\napplied = "0.5.22"\n', 1))
    done = pk(*cat, "apply", "mine", "other", *where, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = {f["name"]: f for f in json.loads(done.stdout)["fixes"]}
    assert outcomes["mine"]["outcome"] == "upgraded" and outcomes["other"]["forgets"] == 1, outcomes

    undone = pk(*cat, "undo", *where, "--json")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    fixes = {f["name"]: f for f in json.loads(undone.stdout)["fixes"]}
    assert set(fixes) == {"mine", "other"}, fixes
    assert (fixes["mine"]["version"], fixes["mine"]["from_version"]) == (1, 2)
    assert fixes["other"]["detail"] == "its record put back as it was (v1), no file of it written"
    assert fixes["other"]["files"] == []
    state = json.loads((tree / ".patchkit" / "state.json").read_text())
    assert {f["name"]: f["version"] for f in state["fixes"]} == {"mine": 1, "other": 1}
