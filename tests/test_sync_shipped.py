"""``sync`` from a catalog of your own (``patchkit init``, the shipped fixes beside it) deploys
your fixes, and keeps a shipped fix current only where it was applied by name: before, a new
user's first ``sync`` applied the shipped DeepSeek-V4 fixes (memory-pool changes) to a tree
they had never chosen them for, and ``status`` gave no sign of it beforehand (a new-user
trial). A shipped fix one of yours depends on is brought as its dependency."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.user_catalog import pk

pytestmark = pytest.mark.network  # a real 0.5.23 checkout


def _outcomes(done) -> dict[str, tuple[str, str]]:
    assert done.returncode == 0, done.stdout + done.stderr
    return {f["name"]: (f["outcome"], f.get("detail") or "") for f in json.loads(done.stdout)["fixes"]}


def test_sync_from_your_catalog_keeps_shipped_fixes_it_was_not_given_out(
        catalog_tree: Path, tmp_path: Path) -> None:
    catalog = tmp_path / "mine"
    assert pk("init", str(catalog), "--no-git").returncode == 0
    cat, where = ["--catalog", str(catalog)], ["--target", str(catalog_tree)]

    dry = _outcomes(pk(*cat, "sync", *where, "--dry-run", "--json"))
    assert not any(o == "would-apply" for o, _d in dry.values()), dry
    outcome, detail = dry["dsv4-bf16-index-k"]
    assert outcome == "not-applied" and "shipped with patchkit" in detail, dry
    assert "patchkit apply dsv4-bf16-index-k" in detail
    # a shipped fix status calls not-needed here (a revert with nothing to revert) is said as
    # status says it, not as one sync leaves out (the two disagreed: a new-user trial)
    status = json.loads(pk(*cat, "status", *where, "--all", "--json").stdout)
    said = {f["name"]: f["state"] for f in status["status"]["fixes"]}
    assert said["revert-hicache-index-k-sync"] == "not-needed", said
    assert dry["revert-hicache-index-k-sync"][0] == "not-needed", dry

    assert pk(*cat, "apply", "dsv4-bf16-index-k", *where).returncode == 0  # chosen by name
    again = _outcomes(pk(*cat, "sync", *where, "--dry-run", "--json"))
    assert again["dsv4-bf16-index-k"][0] == "already-applied", again
    assert again["dsv4-bf16-sizing"][0] == "not-applied", again

    # a fix of your own (a copy of the shipped sizing fix) that depends on a shipped one
    shipped = Path(__file__).resolve().parent.parent
    text = (shipped / "manifests" / "dsv4-bf16-sizing.toml").read_text()
    (catalog / "manifests" / "my-sizing.toml").write_text(
        text.replace('name = "dsv4-bf16-sizing"', 'name = "my-sizing"'))
    shutil.copytree(shipped / "patches" / "dsv4-bf16-sizing", catalog / "patches" / "my-sizing")
    (catalog / "manifests" / "my-sizing.toml").write_text(
        (catalog / "manifests" / "my-sizing.toml").read_text().replace("restart = \"prefill\"\n", ""))
    assert pk(*cat, "rollback", "dsv4-bf16-index-k", *where).returncode == 0
    synced = _outcomes(pk(*cat, "sync", *where, "--json"))
    assert synced["my-sizing"][0] == "applied", synced
    assert synced["dsv4-bf16-index-k"][0] == "applied", synced  # its dependency: brought
    assert synced["dsv4-bf16-sizing"][0] == "not-applied", synced
