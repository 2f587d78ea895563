"""`patchkit undo` (docs/cli.md): the target put back exactly as it was before its last apply
or sync, by the undo point that apply kept (docs/state.md, "Undo"); what a failed
--health-cmd runs, and what an operator runs when a check of their own fails afterwards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.test_remote import SAMPLES, cli, make_tree

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
    assert code == 5 and "nothing to undo" in err, (code, err)
    assert json.loads(state.read_text())["fixes"] == fixes_v2


def test_undo_after_a_rollback_says_there_is_nothing_to_undo(tmp_path: Path) -> None:
    roots = make_tree(tmp_path / "tree")
    where = ["--target", roots["sglang"], "--root", f"serve={roots['serve']}"]
    base = ["--catalog", str(SAMPLES / "catalog")]
    assert cli([*base, "apply", "index-k-bytes", *where])[0] == 0
    assert cli([*base, "rollback", "index-k-bytes", *where])[0] == 0
    before = Path(roots["sglang"], POOL).read_bytes()
    code, out, err = cli([*base, "undo", *where])
    assert code == 5 and "nothing to undo" in err and "a rollback" in err, (code, err)
    assert Path(roots["sglang"], POOL).read_bytes() == before
